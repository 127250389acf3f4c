//! Reading the PMR side of the WAL: the data area split into two halves, slot decoding
//! and validation, and scanning a slot's range for entries (augefs.txt §V-B "Log
//! Recovery"; docs/FORMAT.md §7).
//!
//! Invariants:
//! - The halves are disjoint and separated by one never-written guard line, so a slot
//!   whose start is a half's end (an empty segment opened at a full half) still names
//!   its half unambiguously.
//! - A scan steps 64 bytes at a time until it meets a TxB; a TxB whose entry is complete
//!   (TxE and CRC check out) yields the entry; either way the scan moves past the length
//!   the TxB announces (a TxB sits in one line, which lands whole, and space is zeroed
//!   before it is reused, so a TxB is never stale).

use super::super::record::{
    decode_entry, entry_txb, RecordId, Slot, ENTRY_ALIGN_BYTES, SLOT_OFFSET_LIMIT,
};
use crate::error::MetaDbError;
use format::constants::PMR_LINE_BYTES;
use format::pmr::PmrLayout;
use pmr::{IoCause, Pmr};

/// Bytes read from the PMR at once while scanning.
const SCAN_READ_BYTES: usize = 256 * 1024;

/// Where the WAL lives in a PMR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PmrGeometry {
    pub slot_area_offset: u64,
    pub slot_count: usize,
    /// `[start, end)` of each half of the data area (PMR byte offsets).
    pub halves: [(u64, u64); 2],
}

impl PmrGeometry {
    pub fn compute(pmr_len: u64) -> PmrGeometry {
        let layout = PmrLayout::compute(pmr_len).expect("a Pmr has a valid size");
        assert!(
            pmr_len < SLOT_OFFSET_LIMIT,
            "a PMR of {pmr_len} bytes does not fit 31-bit slot offsets"
        );
        let line = PMR_LINE_BYTES;
        let half = (layout.wal_area_bytes - line) / 2 / line * line;
        let h0 = (layout.wal_area_offset, layout.wal_area_offset + half);
        let h1 = (h0.1 + line, h0.1 + line + half);
        assert!(h1.1 <= layout.wal_area_offset + layout.wal_area_bytes);
        PmrGeometry {
            slot_area_offset: layout.slot_area_offset,
            slot_count: (layout.slot_area_bytes / 8) as usize,
            halves: [h0, h1],
        }
    }

    pub fn slot_offset(&self, slot: usize) -> u64 {
        assert!(slot < self.slot_count);
        self.slot_area_offset + slot as u64 * 8
    }

    /// The half whose range `[start, end]` holds `offset` (its end included).
    pub fn half_of(&self, offset: u64) -> Option<usize> {
        self.halves
            .iter()
            .position(|&(start, end)| (start..=end).contains(&offset))
    }
}

/// A valid slot read from the PMR, with the half it lies in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct FoundSlot {
    pub slot: usize,
    pub half: usize,
    pub start: u64,
    pub end: Option<u64>,
}

/// Reads every slot and checks each valid one names a range inside one half, and that
/// closed ranges of a half do not overlap the next slot's start. Sorted by (half, start).
pub(super) fn read_slots(pmr: &Pmr, geometry: &PmrGeometry) -> Result<Vec<FoundSlot>, MetaDbError> {
    let mut bytes = vec![0u8; geometry.slot_count * 8];
    pmr.read(geometry.slot_area_offset, &mut bytes, IoCause::Wal);
    let mut found = Vec::new();
    for (slot, word) in bytes.chunks_exact(8).enumerate() {
        let word = u64::from_le_bytes(word.try_into().expect("8 bytes"));
        let Some(decoded) = Slot::decode(word) else {
            continue;
        };
        let bad = |why: &str| {
            MetaDbError::corruption("PMR WAL slot", format!("slot {slot} ({word:#018x}): {why}"))
        };
        let half = geometry
            .half_of(decoded.start)
            .ok_or_else(|| bad("start outside the data area"))?;
        if decoded.start % ENTRY_ALIGN_BYTES as u64 != 0 {
            return Err(bad("start not 64-byte aligned"));
        }
        if let Some(end) = decoded.end {
            if end < decoded.start
                || end > geometry.halves[half].1
                || end % ENTRY_ALIGN_BYTES as u64 != 0
            {
                return Err(bad("end outside its half or before its start"));
            }
        }
        found.push(FoundSlot {
            slot,
            half,
            start: decoded.start,
            end: decoded.end,
        });
    }
    found.sort_by_key(|s| (s.half, s.start, s.end.is_none()));
    for pair in found.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if a.half == b.half && a.end.is_some_and(|end| end > b.start) {
            return Err(MetaDbError::corruption(
                "PMR WAL slots",
                format!(
                    "slot {} [{}, {:?}) overlaps slot {} starting at {}",
                    a.slot, a.start, a.end, b.slot, b.start
                ),
            ));
        }
    }
    Ok(found)
}

/// The range a found slot covers: a closed slot its recorded range; an active one up to
/// the next slot of its half, or the half's end.
pub(super) fn scan_limit(found: &[FoundSlot], index: usize, geometry: &PmrGeometry) -> u64 {
    let s = found[index];
    match s.end {
        Some(end) => end,
        None => found[index + 1..]
            .iter()
            .find(|n| n.half == s.half)
            .map_or(geometry.halves[s.half].1, |n| n.start),
    }
}

/// What a scan of one range found.
#[derive(Debug, Default)]
pub(crate) struct RangeScan {
    /// Complete entries in range order.
    pub entries: Vec<(RecordId, Vec<u8>)>,
    /// End of the last 64-byte line of the range that is not all zero (the range's
    /// start if none): everything a crashed writer may have left is before it.
    pub written_end: u64,
}

/// Scans `[start, end)` of the PMR for complete entries.
pub(super) fn scan_range(pmr: &Pmr, start: u64, end: u64) -> RangeScan {
    assert!(start <= end && start % ENTRY_ALIGN_BYTES as u64 == 0);
    let mut bytes = vec![0u8; (end - start) as usize];
    for (i, piece) in bytes.chunks_mut(SCAN_READ_BYTES).enumerate() {
        pmr.read(start + (i * SCAN_READ_BYTES) as u64, piece, IoCause::Wal);
    }
    scan_bytes(&bytes, start)
}

/// The scan of [`scan_range`] over `bytes`, read from PMR offset `start`: no IO, so the
/// decoder can be fed any bytes (the fuzz targets do).
pub(crate) fn scan_bytes(bytes: &[u8], start: u64) -> RangeScan {
    let line = ENTRY_ALIGN_BYTES;
    let mut scan = RangeScan {
        entries: Vec::new(),
        written_end: start,
    };
    if let Some(last) = bytes.chunks(line).rposition(|l| l.iter().any(|&b| b != 0)) {
        scan.written_end = start + ((last + 1) * line) as u64;
    }
    let mut at = 0usize;
    while at + line <= bytes.len() {
        match entry_txb(&bytes[at..]) {
            Some(total) if at + total <= bytes.len() => {
                if let Some((id, payload)) = decode_entry(&bytes[at..at + total]) {
                    scan.entries
                        .push((id, bytes[at + payload.start..at + payload.end].to_vec()));
                }
                at += total;
            }
            _ => at += line,
        }
    }
    scan
}

/// Writes zeros over every line of `[start, end)` that is not zero, and persists them:
/// the paper's "zero before reuse", paying only for lines that need it.
pub(super) fn zero_range(pmr: &Pmr, start: u64, end: u64) -> Result<(), MetaDbError> {
    let line = ENTRY_ALIGN_BYTES;
    let zeros = vec![0u8; SCAN_READ_BYTES];
    let mut piece = vec![0u8; SCAN_READ_BYTES];
    let mut at = start;
    while at < end {
        let len = ((end - at) as usize).min(SCAN_READ_BYTES);
        pmr.read(at, &mut piece[..len], IoCause::Wal);
        let mut run: Option<(usize, usize)> = None;
        for (i, l) in piece[..len].chunks(line).enumerate() {
            let dirty = l.iter().any(|&b| b != 0);
            run = match (run, dirty) {
                (Some((s, e)), true) if e == i * line => Some((s, e + l.len())),
                (Some(r), true) => {
                    zero(pmr, at, r, &zeros)?;
                    Some((i * line, i * line + l.len()))
                }
                (None, true) => Some((i * line, i * line + l.len())),
                (r, false) => r,
            };
        }
        if let Some(r) = run {
            zero(pmr, at, r, &zeros)?;
        }
        at += len as u64;
    }
    Ok(())
}

fn zero(pmr: &Pmr, base: u64, (s, e): (usize, usize), zeros: &[u8]) -> Result<(), MetaDbError> {
    pmr.write(base + s as u64, &zeros[..e - s]);
    pmr.persist(base + s as u64, (e - s) as u64, IoCause::Wal)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::super::record::encode_entry;
    use super::*;
    use format::constants::MIB;
    use pmr::PmrOptions;

    #[test]
    fn halves_are_disjoint_aligned_and_guarded() {
        let g = PmrGeometry::compute(2 * MIB);
        let [(a0, a1), (b0, b1)] = g.halves;
        assert_eq!(a0, 8192);
        assert_eq!(b0, a1 + 64);
        assert_eq!(a1 - a0, b1 - b0);
        assert!(a1 - a0 >= 512 * 1024 + 64, "a half holds the largest entry");
        assert_eq!(g.half_of(a1), Some(0));
        assert_eq!(g.half_of(b0), Some(1));
        assert_eq!(g.half_of(a1 + 32), None);
        assert_eq!(g.slot_count, 512);
    }

    #[test]
    fn scan_skips_torn_entries_and_finds_the_rest() {
        let pmr = Pmr::memory(2 * MIB, PmrOptions::default()).unwrap();
        let base = 8192u64;
        let mut at = base;
        let mut buf = Vec::new();
        for seq in 0..4u64 {
            let payload = vec![seq as u8 + 1; 100];
            encode_entry(
                &mut buf,
                RecordId {
                    generation: 1,
                    lane: 0,
                    lane_seq: seq,
                    durable: 0,
                },
                &payload,
            );
            pmr.write(at, &buf);
            if seq == 1 {
                // Tear entry 1: its last line (TxE) never landed.
                pmr.write(at + buf.len() as u64 - 64, &[0u8; 64]);
            }
            at += buf.len() as u64;
        }
        let scan = scan_range(&pmr, base, base + 64 * 1024);
        let seqs: Vec<u64> = scan.entries.iter().map(|(id, _)| id.lane_seq).collect();
        assert_eq!(seqs, [0, 2, 3]);
        assert_eq!(scan.written_end, at);
        pmr.persist_all(IoCause::Wal).unwrap();
        zero_range(&pmr, base, base + 64 * 1024).unwrap();
        let scan = scan_range(&pmr, base, base + 64 * 1024);
        assert!(scan.entries.is_empty());
        assert_eq!(scan.written_end, base);
        assert_eq!(pmr.dirty_lines_count(), 0, "zeroed lines are persisted");
        assert_eq!(
            pmr.crash_image_all_lost()[base as usize..at as usize],
            vec![0u8; (at - base) as usize]
        );
    }
}
