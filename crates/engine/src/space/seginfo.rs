//! One domain's segment information (augefs.txt §VI-A: F2FS's SIT, kept per domain): for
//! every segment the domain owns, its kind (data or node log), which of its 512 blocks are
//! valid, how many, and when a block was last written (for cost-benefit GC). The byte
//! encoding for checkpoints is docs/FORMAT.md §6.1.
//!
//! Invariants:
//! - `valid_blocks` of a segment equals the population count of its bitmap.
//! - A block is marked valid only while invalid and invalidated only while valid (a double
//!   mark or double invalidate is a bug in the caller's block accounting, so it panics).
//! - A segment leaves the table only with no valid block.
//! - Times are *file-system time*: nanoseconds of mounted life, carried across mounts by
//!   the encoding's `elapsed_ns` (F2FS's `elapsed_time`), read from the injected clock. It
//!   never goes backwards, so ages stay meaningful after a remount.
//! - Decoding untrusted bytes never panics: every inconsistency is a typed corruption.

use super::victim::{Candidate, SegmentUse};
use super::SpaceError;
use format::checkpoint::PAYLOAD_BYTES_MAX;
use format::checksum::crc32c_skipping;
use format::constants::BLOCKS_PER_SEGMENT;
use format::layout::{Field, StructLayout};
use format::summary::SegmentKind;
use format::{DomainId, SegmentNo};
use platform::Clock;
use std::collections::BTreeMap;
use std::sync::Arc;

const BLOCKS: usize = BLOCKS_PER_SEGMENT as usize;
const BITMAP_WORDS: usize = BLOCKS / 64;

pub const MAGIC: [u8; 4] = *b"SEGI";

pub const H_MAGIC: Field = Field::at("magic", 0, 4);
pub const H_DOMAIN: Field = Field::after(H_MAGIC, "domain", 2);
pub const H_RESERVED: Field = Field::after(H_DOMAIN, "reserved", 2);
pub const H_ELAPSED: Field = Field::after(H_RESERVED, "elapsed_ns", 8);
pub const H_ENTRY_COUNT: Field = Field::after(H_ELAPSED, "entry_count", 4);
pub const H_CHECKSUM: Field = Field::after(H_ENTRY_COUNT, "checksum", 4);
pub const HEADER_BYTES: usize = 24;

pub const HEADER_LAYOUT: StructLayout = StructLayout {
    name: "Segment information header",
    size: HEADER_BYTES,
    fields: &[
        H_MAGIC,
        H_DOMAIN,
        H_RESERVED,
        H_ELAPSED,
        H_ENTRY_COUNT,
        H_CHECKSUM,
    ],
};

pub const E_SEGMENT: Field = Field::at("segment_no", 0, 4);
pub const E_KIND: Field = Field::after(E_SEGMENT, "kind", 1);
pub const E_PAD: Field = Field::after(E_KIND, "pad", 1);
pub const E_VALID_COUNT: Field = Field::after(E_PAD, "valid_count", 2);
pub const E_MODIFIED: Field = Field::after(E_VALID_COUNT, "modified_ns", 8);
pub const E_BITMAP: Field = Field::after(E_MODIFIED, "valid_bitmap", BLOCKS / 8);
pub const ENTRY_BYTES: usize = 80;

pub const ENTRY_LAYOUT: StructLayout = StructLayout {
    name: "Segment information entry",
    size: ENTRY_BYTES,
    fields: &[
        E_SEGMENT,
        E_KIND,
        E_PAD,
        E_VALID_COUNT,
        E_MODIFIED,
        E_BITMAP,
    ],
};

/// The most entries one checkpoint slot's payload holds: 202 segments (404 MiB).
pub const ENTRIES_PER_CHECKPOINT_SLOT_MAX: usize = (PAYLOAD_BYTES_MAX - HEADER_BYTES) / ENTRY_BYTES;

const _: () = assert!(H_CHECKSUM.end() == HEADER_BYTES);
const _: () = assert!(E_BITMAP.end() == ENTRY_BYTES);
const _: () = assert!(BLOCKS % 64 == 0 && BLOCKS <= u16::MAX as usize);

/// The structures of this module whose tables appear in docs/FORMAT.md.
pub fn layouts() -> Vec<StructLayout> {
    vec![HEADER_LAYOUT, ENTRY_LAYOUT]
}

/// What the domain knows of one of its segments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentInfo {
    kind: SegmentKind,
    valid_blocks: u16,
    modified_ns: u64,
    bitmap: [u64; BITMAP_WORDS],
}

impl SegmentInfo {
    pub fn kind(&self) -> SegmentKind {
        self.kind
    }

    /// File-system time of the last block written.
    pub fn modified_ns(&self) -> u64 {
        self.modified_ns
    }

    pub fn valid_blocks(&self) -> u32 {
        u32::from(self.valid_blocks)
    }

    pub fn is_valid(&self, block: u32) -> bool {
        let b = block as usize;
        assert!(b < BLOCKS, "block {block} beyond a segment");
        self.bitmap[b / 64] & (1 << (b % 64)) != 0
    }

    /// The valid blocks, in order.
    pub fn valid(&self) -> impl Iterator<Item = u32> + '_ {
        (0..BLOCKS as u32).filter(|&b| self.is_valid(b))
    }
}

/// One domain's segment information table.
#[derive(Debug, Clone)]
pub struct SegInfo {
    domain: DomainId,
    clock: Arc<dyn Clock>,
    /// File-system time = `clock.now_ns() + base_ns` (mod 2^64).
    base_ns: u64,
    segments: BTreeMap<SegmentNo, SegmentInfo>,
}

impl SegInfo {
    /// An empty table (a freshly formatted domain); file-system time starts at 0.
    pub fn new(domain: DomainId, clock: Arc<dyn Clock>) -> SegInfo {
        let base_ns = 0u64.wrapping_sub(clock.now_ns());
        SegInfo {
            domain,
            clock,
            base_ns,
            segments: BTreeMap::new(),
        }
    }

    /// A table whose file-system time resumes at `elapsed_ns` (after a mount).
    fn resumed(
        domain: DomainId,
        clock: Arc<dyn Clock>,
        elapsed_ns: u64,
        segments: BTreeMap<SegmentNo, SegmentInfo>,
    ) -> SegInfo {
        let base_ns = elapsed_ns.wrapping_sub(clock.now_ns());
        SegInfo {
            domain,
            clock,
            base_ns,
            segments,
        }
    }

    pub fn domain(&self) -> DomainId {
        self.domain
    }

    /// File-system time now.
    pub fn now_ns(&self) -> u64 {
        self.clock.now_ns().wrapping_add(self.base_ns)
    }

    /// A segment the pool just gave the domain, for its `kind` log, with no valid block.
    pub fn add(&mut self, segment: SegmentNo, kind: SegmentKind) {
        assert!(
            matches!(kind, SegmentKind::Data | SegmentKind::Node),
            "a domain's segment holds data or nodes, not {kind:?}"
        );
        let info = SegmentInfo {
            kind,
            valid_blocks: 0,
            modified_ns: self.now_ns(),
            bitmap: [0; BITMAP_WORDS],
        };
        let old = self.segments.insert(segment, info);
        assert!(old.is_none(), "segment {segment} added twice");
    }

    /// Drops an emptied segment (before the domain releases it to the pool).
    pub fn remove(&mut self, segment: SegmentNo) -> SegmentInfo {
        let info = self
            .segments
            .remove(&segment)
            .unwrap_or_else(|| panic!("segment {segment} is not the domain's"));
        assert_eq!(
            info.valid_blocks, 0,
            "segment {segment} removed with valid blocks"
        );
        info
    }

    fn entry_mut(&mut self, segment: SegmentNo, block: u32) -> (&mut SegmentInfo, usize, u64) {
        let b = block as usize;
        assert!(b < BLOCKS, "block {block} beyond a segment");
        let info = self
            .segments
            .get_mut(&segment)
            .unwrap_or_else(|| panic!("segment {segment} is not the domain's"));
        (info, b / 64, 1 << (b % 64))
    }

    /// Block `block` of `segment` was written and now holds live data.
    pub fn mark_valid(&mut self, segment: SegmentNo, block: u32) {
        let now = self.now_ns();
        let (info, word, bit) = self.entry_mut(segment, block);
        assert!(
            info.bitmap[word] & bit == 0,
            "block {block} of segment {segment} marked valid twice"
        );
        info.bitmap[word] |= bit;
        info.valid_blocks += 1;
        info.modified_ns = now;
    }

    /// Block `block` of `segment` was overwritten elsewhere or freed.
    pub fn invalidate(&mut self, segment: SegmentNo, block: u32) {
        let (info, word, bit) = self.entry_mut(segment, block);
        assert!(
            info.bitmap[word] & bit != 0,
            "block {block} of segment {segment} invalidated but not valid"
        );
        info.bitmap[word] &= !bit;
        info.valid_blocks -= 1;
    }

    pub fn get(&self, segment: SegmentNo) -> Option<&SegmentInfo> {
        self.segments.get(&segment)
    }

    /// The domain's segments, by number.
    pub fn iter(&self) -> impl Iterator<Item = (SegmentNo, &SegmentInfo)> + '_ {
        self.segments.iter().map(|(s, i)| (*s, i))
    }

    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    pub fn valid_blocks_total(&self) -> u64 {
        self.segments
            .values()
            .map(|i| u64::from(i.valid_blocks))
            .sum()
    }

    /// The victim policy's view: every segment, `active` ones (log heads) marked so.
    pub fn candidates(&self, active: &[SegmentNo]) -> Vec<Candidate> {
        self.iter()
            .map(|(segment, info)| Candidate {
                segment,
                valid_blocks: info.valid_blocks(),
                modified_ns: info.modified_ns,
                state: if active.contains(&segment) {
                    SegmentUse::Active
                } else {
                    SegmentUse::Sealed
                },
            })
            .collect()
    }

    /// One segment's entry (FORMAT.md §6.1 entry layout), as the engine stores it in
    /// MetaDB (`s` keys, FORMAT.md §6.2).
    pub fn encode_entry(&self, segment: SegmentNo) -> [u8; ENTRY_BYTES] {
        let info = self
            .segments
            .get(&segment)
            .unwrap_or_else(|| panic!("segment {segment} is not the domain's"));
        let mut e = [0u8; ENTRY_BYTES];
        put_entry(&mut e, segment, info);
        e
    }

    /// A table rebuilt from entries stored one by one (FORMAT.md §6.2), file-system time
    /// resuming at `elapsed_ns`. Entries are validated like [`SegInfo::decode`]'s.
    pub fn from_entries<'a>(
        domain: DomainId,
        segment_count: u32,
        elapsed_ns: u64,
        entries: impl IntoIterator<Item = &'a [u8]>,
        clock: Arc<dyn Clock>,
    ) -> Result<SegInfo, SpaceError> {
        let location = format!("segment information of domain {domain}");
        let mut segments = BTreeMap::new();
        for (i, e) in entries.into_iter().enumerate() {
            if e.len() != ENTRY_BYTES {
                return Err(SpaceError::corruption(
                    format!("segment information entry {i} length"),
                    location,
                    ENTRY_BYTES,
                    e.len(),
                ));
            }
            let (segment, info) =
                decode_entry(e, elapsed_ns).map_err(|(what, expected, got)| {
                    SpaceError::corruption(
                        format!("segment information entry {i} {what}"),
                        location.clone(),
                        expected,
                        got,
                    )
                })?;
            if segment.0 >= segment_count || segments.insert(segment, info).is_some() {
                return Err(SpaceError::corruption(
                    format!("segment information entry {i} segment"),
                    location,
                    format!("a distinct segment below {segment_count}"),
                    segment,
                ));
            }
        }
        Ok(SegInfo::resumed(domain, clock, elapsed_ns, segments))
    }

    /// Bytes of [`SegInfo::encode`]'s output.
    pub fn encoded_len(&self) -> usize {
        HEADER_BYTES + self.segments.len() * ENTRY_BYTES
    }

    /// The table as bytes (docs/FORMAT.md §6.1), entries by segment number.
    pub fn encode(&self) -> Vec<u8> {
        let mut buf = vec![0u8; self.encoded_len()];
        H_MAGIC.put_bytes(&mut buf, &MAGIC);
        H_DOMAIN.put_u16(&mut buf, self.domain.0);
        H_ELAPSED.put_u64(&mut buf, self.now_ns());
        H_ENTRY_COUNT.put_u32(&mut buf, self.segments.len() as u32);
        for (i, (segment, info)) in self.segments.iter().enumerate() {
            let at = HEADER_BYTES + i * ENTRY_BYTES;
            put_entry(&mut buf[at..at + ENTRY_BYTES], *segment, info);
        }
        let crc = checksum(&buf);
        H_CHECKSUM.put_u32(&mut buf, crc);
        buf
    }

    /// Validates and decodes `domain`'s table from `buf`, for an area of `segment_count`
    /// segments; file-system time resumes at the encoded `elapsed_ns`.
    pub fn decode(
        buf: &[u8],
        domain: DomainId,
        segment_count: u32,
        clock: Arc<dyn Clock>,
    ) -> Result<SegInfo, SpaceError> {
        let location = format!("segment information of domain {domain}");
        let bad = |what: &str, expected: &dyn std::fmt::Display, got: &dyn std::fmt::Display| {
            SpaceError::corruption(
                format!("segment information {what}"),
                location.clone(),
                expected,
                got,
            )
        };
        if buf.len() < HEADER_BYTES {
            return Err(bad(
                "length",
                &format!("at least {HEADER_BYTES}"),
                &buf.len(),
            ));
        }
        if H_MAGIC.bytes(buf) != MAGIC {
            return Err(bad("magic", &"SEGI", &format!("{:?}", H_MAGIC.bytes(buf))));
        }
        let count = H_ENTRY_COUNT.get_u32(buf) as usize;
        let expected_len = HEADER_BYTES as u64 + count as u64 * ENTRY_BYTES as u64;
        if buf.len() as u64 != expected_len {
            return Err(bad("length", &expected_len, &buf.len()));
        }
        let crc = checksum(buf);
        if crc != H_CHECKSUM.get_u32(buf) {
            return Err(bad(
                "checksum",
                &format!("{crc:#010x}"),
                &format!("{:#010x}", H_CHECKSUM.get_u32(buf)),
            ));
        }
        if H_DOMAIN.get_u16(buf) != domain.0 {
            return Err(bad("domain", &domain, &H_DOMAIN.get_u16(buf)));
        }
        let elapsed_ns = H_ELAPSED.get_u64(buf);
        let mut segments = BTreeMap::new();
        let mut previous: Option<SegmentNo> = None;
        for i in 0..count {
            let at = HEADER_BYTES + i * ENTRY_BYTES;
            let (segment, info) = decode_entry(&buf[at..at + ENTRY_BYTES], elapsed_ns).map_err(
                |(what, expected, got)| bad(&format!("entry {i} {what}"), &expected, &got),
            )?;
            if segment.0 >= segment_count {
                return Err(bad(
                    &format!("entry {i} segment"),
                    &format!("below {segment_count}"),
                    &segment,
                ));
            }
            if previous.is_some_and(|p| p >= segment) {
                return Err(bad(
                    &format!("entry {i} order"),
                    &format!("above segment {}", previous.expect("checked")),
                    &segment,
                ));
            }
            previous = Some(segment);
            segments.insert(segment, info);
        }
        Ok(SegInfo::resumed(domain, clock, elapsed_ns, segments))
    }
}

fn put_entry(e: &mut [u8], segment: SegmentNo, info: &SegmentInfo) {
    E_SEGMENT.put_u32(e, segment.0);
    E_KIND.put_u8(e, info.kind as u8);
    E_VALID_COUNT.put_u16(e, info.valid_blocks);
    E_MODIFIED.put_u64(e, info.modified_ns);
    for (w, word) in info.bitmap.iter().enumerate() {
        e[E_BITMAP.offset + w * 8..E_BITMAP.offset + w * 8 + 8]
            .copy_from_slice(&word.to_le_bytes());
    }
}

/// CRC-32C of header bytes 0-19 and every entry.
fn checksum(buf: &[u8]) -> u32 {
    crc32c_skipping(buf, H_CHECKSUM.offset)
}

/// One entry; on failure (what, expected, got).
fn decode_entry(
    e: &[u8],
    elapsed_ns: u64,
) -> Result<(SegmentNo, SegmentInfo), (String, String, String)> {
    let kind = match SegmentKind::from_u8(E_KIND.get_u8(e)) {
        Some(k @ (SegmentKind::Data | SegmentKind::Node)) => k,
        _ => {
            return Err((
                "kind".into(),
                "1 (data) or 2 (node)".into(),
                E_KIND.get_u8(e).to_string(),
            ))
        }
    };
    let mut bitmap = [0u64; BITMAP_WORDS];
    for (w, word) in bitmap.iter_mut().enumerate() {
        let at = E_BITMAP.offset + w * 8;
        *word = u64::from_le_bytes(e[at..at + 8].try_into().expect("8 bytes"));
    }
    let popcount: u32 = bitmap.iter().map(|w| w.count_ones()).sum();
    let valid_blocks = E_VALID_COUNT.get_u16(e);
    if u32::from(valid_blocks) != popcount {
        return Err((
            "valid count".into(),
            format!("{popcount} (bits set)"),
            valid_blocks.to_string(),
        ));
    }
    let modified_ns = E_MODIFIED.get_u64(e);
    if modified_ns > elapsed_ns {
        return Err((
            "modified time".into(),
            format!("at most elapsed {elapsed_ns}"),
            modified_ns.to_string(),
        ));
    }
    let info = SegmentInfo {
        kind,
        valid_blocks,
        modified_ns,
        bitmap,
    };
    Ok((SegmentNo(E_SEGMENT.get_u32(e)), info))
}

#[cfg(test)]
mod tests {
    use super::*;
    use platform::ManualClock;

    fn table(clock: &Arc<ManualClock>) -> SegInfo {
        let mut t = SegInfo::new(DomainId(3), clock.clone());
        t.add(SegmentNo(9), SegmentKind::Data);
        t.add(SegmentNo(2), SegmentKind::Node);
        clock.advance_ns(100);
        for b in [0, 1, 63, 64, 511] {
            t.mark_valid(SegmentNo(9), b);
        }
        clock.advance_ns(50);
        t.mark_valid(SegmentNo(2), 7);
        t.invalidate(SegmentNo(9), 1);
        t
    }

    #[test]
    fn counts_bitmaps_and_times() {
        let clock = Arc::new(ManualClock::new(1_000));
        let t = table(&clock);
        let s9 = t.get(SegmentNo(9)).unwrap();
        assert_eq!(s9.valid_blocks(), 4);
        assert_eq!(s9.valid().collect::<Vec<_>>(), vec![0, 63, 64, 511]);
        assert_eq!(s9.modified_ns, 100, "file-system time starts at 0");
        assert_eq!(t.get(SegmentNo(2)).unwrap().modified_ns, 150);
        assert_eq!(t.valid_blocks_total(), 5);
        assert_eq!(
            t.iter().map(|(s, _)| s.0).collect::<Vec<_>>(),
            vec![2, 9],
            "by segment number"
        );
        let c = t.candidates(&[SegmentNo(2)]);
        assert_eq!(c[0].state, SegmentUse::Active);
        assert_eq!(
            (c[1].segment, c[1].valid_blocks, c[1].state),
            (SegmentNo(9), 4, SegmentUse::Sealed)
        );
    }

    #[test]
    fn round_trip_resumes_file_system_time() {
        let clock = Arc::new(ManualClock::new(1_000));
        let t = table(&clock);
        let bytes = t.encode();
        assert_eq!(bytes.len(), t.encoded_len());
        // A new mount: the clock restarts near zero.
        let later = Arc::new(ManualClock::new(7));
        let back = SegInfo::decode(&bytes, DomainId(3), 24, later.clone()).unwrap();
        assert_eq!(back.segments, t.segments);
        assert_eq!(back.now_ns(), 150);
        later.advance_ns(10);
        assert_eq!(back.now_ns(), 160);
        assert_eq!(back.encode()[HEADER_BYTES..], bytes[HEADER_BYTES..]);
    }

    #[test]
    fn rejects_inconsistent_tables() {
        let clock = Arc::new(ManualClock::new(0));
        let t = table(&clock);
        let bytes = t.encode();
        let decode = |b: &[u8], domain: u16, count: u32| {
            SegInfo::decode(b, DomainId(domain), count, clock.clone())
        };
        assert!(decode(&bytes, 4, 24).is_err(), "another domain's table");
        assert!(decode(&bytes, 3, 9).is_err(), "segment beyond the area");
        assert!(decode(&bytes[..10], 3, 24).is_err(), "short");
        assert!(
            decode(&bytes[..bytes.len() - 1], 3, 24).is_err(),
            "truncated"
        );
        // Well-checksummed but inconsistent: reseal after editing.
        let reseal = |mut b: Vec<u8>| {
            let crc = checksum(&b);
            H_CHECKSUM.put_u32(&mut b, crc);
            b
        };
        let first_entry = HEADER_BYTES;
        let mut wrong_count = bytes.clone();
        E_VALID_COUNT.put_u16(&mut wrong_count[first_entry..], 2);
        let mut wrong_kind = bytes.clone();
        E_KIND.put_u8(&mut wrong_kind[first_entry..], SegmentKind::Table as u8);
        let mut future = bytes.clone();
        E_MODIFIED.put_u64(&mut future[first_entry..], u64::MAX);
        let mut unordered = bytes.clone();
        E_SEGMENT.put_u32(&mut unordered[first_entry..], 9);
        for (name, b) in [
            ("valid count", wrong_count),
            ("kind", wrong_kind),
            ("modified time", future),
            ("order", unordered),
        ] {
            match decode(&reseal(b), 3, 24) {
                Err(SpaceError::Corruption(c)) => assert!(c.what.contains(name), "{name}: {c}"),
                other => panic!("{name}: {other:?}"),
            }
        }
    }

    #[test]
    #[should_panic(expected = "invalidated but not valid")]
    fn invalidating_an_invalid_block_is_a_bug() {
        let clock = Arc::new(ManualClock::new(0));
        let mut t = table(&clock);
        t.invalidate(SegmentNo(9), 1);
    }

    #[test]
    #[should_panic(expected = "removed with valid blocks")]
    fn removing_a_live_segment_is_a_bug() {
        let clock = Arc::new(ManualClock::new(0));
        let mut t = table(&clock);
        t.remove(SegmentNo(2));
    }

    #[test]
    fn a_full_slot_of_entries_fits_a_checkpoint_payload() {
        let clock = Arc::new(ManualClock::new(0));
        let mut t = SegInfo::new(DomainId(0), clock);
        for s in 0..ENTRIES_PER_CHECKPOINT_SLOT_MAX as u32 {
            t.add(SegmentNo(s), SegmentKind::Data);
        }
        assert!(t.encoded_len() <= PAYLOAD_BYTES_MAX);
        assert!(t.encoded_len() + ENTRY_BYTES > PAYLOAD_BYTES_MAX);
        assert_eq!(ENTRIES_PER_CHECKPOINT_SLOT_MAX, 202);
    }
}
