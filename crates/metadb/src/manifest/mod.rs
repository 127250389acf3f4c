//! The manifest: the durable log of [`VersionEdit`]s that says which tables are live, how
//! far the WAL has been flushed and which ids and sequence numbers are used
//! (docs/FORMAT.md §5.4; the region is FORMAT.md §2's `manifest`).
//!
//! The region is split into two equal halves used in turn. A half starts with a header
//! block (its epoch, and the length and CRC of its snapshot), then a snapshot record (the
//! whole state, as an edit applied to the empty state), then edit records appended one
//! at a time. When the current half cannot hold the next record, the state after that
//! edit is written as the snapshot of the other half, with the epoch one higher.
//!
//! Invariants:
//! - `apply` returns `Ok` only after the edit's bytes were written and a device flush
//!   issued after their completion returned: an acknowledged edit survives any crash.
//! - Appends rewrite the tail sector with the same bytes for everything already logged,
//!   so a torn append never damages an earlier record.
//! - A half becomes current only when its header lands, and its header is written only
//!   after its snapshot is durable; the old half is never written before that. So at
//!   every moment the newest valid header names a durable snapshot: recovery reads the
//!   state after some prefix of the edits, never half an edit, and a newest header whose
//!   snapshot does not check out is corruption, not a crash.
//! - Records carry the half's epoch, their index in the half and the previous record's
//!   CRC: stale records of an earlier use of the half, or of an interrupted append at the
//!   same place, end the replay instead of joining it.
//! - After a failed device write or flush, every later `apply` fails with `ReadOnly`.

use crate::error::MetaDbError;
use device::{AlignedBuf, Device, IoCause, IoRequest};
use edit::encoded_edit_len;
use format::checksum::{crc32c, crc32c_skipping};
use format::constants::FORMAT_VERSION;
use format::Region;
use std::sync::{Arc, Mutex};

mod edit;
mod layout;
mod state;

pub use edit::{decode_edit, encode_edit, EditError, VersionEdit};
pub use layout::*;
pub use state::ManifestState;

// ---- Records and half headers ----

/// A record frame that checked out (CRC over frame and payload).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Frame {
    payload_len: usize,
    crc: u32,
    epoch: u64,
    index: u32,
    prev_crc: u32,
    kind: u8,
}

/// Appends a framed record to `out` and returns its CRC.
fn encode_record(
    out: &mut Vec<u8>,
    epoch: u64,
    index: u32,
    prev_crc: u32,
    kind: u8,
    payload: &[u8],
) -> u32 {
    let start = out.len();
    let mut frame = [0u8; FRAME_BYTES];
    R_PAYLOAD_LEN.put_u32(
        &mut frame,
        u32::try_from(payload.len()).expect("a record fits a half"),
    );
    R_EPOCH.put_u64(&mut frame, epoch);
    R_INDEX.put_u32(&mut frame, index);
    R_PREV_CRC.put_u32(&mut frame, prev_crc);
    R_KIND.put_u8(&mut frame, kind);
    out.extend_from_slice(&frame);
    out.extend_from_slice(payload);
    let crc = crc32c_skipping(&out[start..], R_CRC.offset);
    R_CRC.put_u32(&mut out[start..], crc);
    crc
}

/// The record at `at` of a half's bytes, if a whole one with a matching CRC is there.
fn parse_record(half: &[u8], at: usize) -> Option<(Frame, &[u8])> {
    let frame = half.get(at..at.checked_add(FRAME_BYTES)?)?;
    let payload_len = R_PAYLOAD_LEN.get_u32(frame) as usize;
    let record = half.get(at..at.checked_add(FRAME_BYTES)?.checked_add(payload_len)?)?;
    let crc = R_CRC.get_u32(frame);
    if crc32c_skipping(record, R_CRC.offset) != crc {
        return None;
    }
    let parsed = Frame {
        payload_len,
        crc,
        epoch: R_EPOCH.get_u64(frame),
        index: R_INDEX.get_u32(frame),
        prev_crc: R_PREV_CRC.get_u32(frame),
        kind: R_KIND.get_u8(frame),
    };
    Some((parsed, &record[FRAME_BYTES..]))
}

/// Whether the record whose frame would start at byte `at` of `bytes` (a prefix of a
/// half) does not lie within them: its frame, or the payload its frame declares, reaches
/// past their end.
fn is_cut(bytes: &[u8], at: usize) -> bool {
    match bytes.get(at..at.saturating_add(FRAME_BYTES)) {
        Some(frame) => {
            let payload_len = R_PAYLOAD_LEN.get_u32(frame) as usize;
            at + FRAME_BYTES + payload_len > bytes.len()
        }
        None => true,
    }
}

/// The first intact edit record of `epoch` with an index above `index` at or after byte
/// `from + 1` of a half's bytes (docs/FORMAT.md §5.4, "what proves damage"). Records are
/// packed byte to byte, so every offset is tried; the epoch, kind and index are compared
/// before the CRC is computed.
fn later_record(half: &[u8], from: usize, epoch: u64, index: u32) -> Option<(usize, Frame)> {
    // No record starts in the never-written zero tail of the half.
    let written = crate::wal::written_len(half);
    let last = written.checked_sub(FRAME_BYTES)?;
    (from + 1..=last).find_map(|at| {
        let frame = &half[at..at + FRAME_BYTES];
        if R_EPOCH.get_u64(frame) != epoch
            || R_KIND.get_u8(frame) != KIND_EDIT
            || R_INDEX.get_u32(frame) <= index
        {
            return None;
        }
        parse_record(half, at).map(|(f, _)| (at, f))
    })
}

/// A half header that checked out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct HalfHeader {
    half: u32,
    epoch: u64,
    snapshot_len: u32,
    snapshot_crc: u32,
}

fn encode_header(h: &HalfHeader, half_bytes: u64) -> [u8; HEADER_BYTES] {
    let mut b = [0u8; HEADER_BYTES];
    H_MAGIC.put_bytes(&mut b, &MAGIC);
    H_FORMAT_VERSION.put_u32(&mut b, FORMAT_VERSION);
    H_HALF.put_u32(&mut b, h.half);
    H_EPOCH.put_u64(&mut b, h.epoch);
    H_HALF_BYTES.put_u64(&mut b, half_bytes);
    H_SNAPSHOT_LEN.put_u32(&mut b, h.snapshot_len);
    H_SNAPSHOT_CRC.put_u32(&mut b, h.snapshot_crc);
    let crc = crc32c(&b[..H_CHECKSUM.offset]);
    H_CHECKSUM.put_u32(&mut b, crc);
    b
}

/// The header of half `half`: `None` if never written (all zero). Anything else that
/// does not check out is corruption: a header is one sector, written whole or not at all.
fn decode_header(
    b: &[u8],
    half: u32,
    half_bytes: u64,
    location: u64,
) -> Result<Option<HalfHeader>, MetaDbError> {
    let b = &b[..HEADER_BYTES];
    if b.iter().all(|&x| x == 0) {
        return Ok(None);
    }
    let what = format!("manifest half {half} header at byte {location}");
    let fail = |expected: String, got: String| {
        Err(MetaDbError::corruption(
            what.clone(),
            format!("expected {expected}, got {got}"),
        ))
    };
    if H_MAGIC.bytes(b) != MAGIC {
        return fail(
            format!("magic {MAGIC:?}"),
            format!("{:?}", H_MAGIC.bytes(b)),
        );
    }
    let crc = crc32c(&b[..H_CHECKSUM.offset]);
    if H_CHECKSUM.get_u32(b) != crc {
        return fail(
            format!("header_crc {crc:#010x}"),
            format!("{:#010x}", H_CHECKSUM.get_u32(b)),
        );
    }
    let fields = [
        (
            "format_version",
            u64::from(FORMAT_VERSION),
            u64::from(H_FORMAT_VERSION.get_u32(b)),
        ),
        ("half", u64::from(half), u64::from(H_HALF.get_u32(b))),
        ("half_bytes", half_bytes, H_HALF_BYTES.get_u64(b)),
    ];
    for (name, expected, got) in fields {
        if expected != got {
            return fail(format!("{name} {expected}"), got.to_string());
        }
    }
    let header = HalfHeader {
        half,
        epoch: H_EPOCH.get_u64(b),
        snapshot_len: H_SNAPSHOT_LEN.get_u32(b),
        snapshot_crc: H_SNAPSHOT_CRC.get_u32(b),
    };
    if header.epoch == 0 {
        return fail("epoch at least 1".into(), "0".into());
    }
    Ok(Some(header))
}

// ---- The manifest log ----

/// Where the next record goes.
#[derive(Debug, Clone)]
struct LogTail {
    half: u32,
    epoch: u64,
    /// Byte offset in the half where the next record starts.
    end: u64,
    next_index: u32,
    prev_crc: u32,
    /// The bytes from `end` rounded down to a sector up to `end`: rewritten, unchanged,
    /// in front of the next record.
    tail: Vec<u8>,
}

#[derive(Debug)]
struct Inner {
    state: ManifestState,
    /// `None` until the first edit of a fresh region.
    log: Option<LogTail>,
    /// The newest epoch with a header on the device (0: none).
    epoch_max: u64,
    /// Set after a failed write or flush: what the device holds is unknown.
    failed: Option<String>,
}

/// Where the log stands, for tests and inspection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ManifestPosition {
    pub half: u32,
    pub epoch: u64,
    /// Bytes of the half in use (header block included).
    pub used_bytes: u64,
    /// Records in the half, snapshot included.
    pub records: u32,
}

/// The durable manifest. Edits are applied one at a time under a lock: they are rare
/// (one per memtable flush or compaction).
#[derive(Debug)]
pub struct Manifest {
    device: Arc<Device>,
    region: Region,
    half_bytes: u64,
    sector_bytes: u64,
    inner: Mutex<Inner>,
}

fn round_down(x: u64, to: u64) -> u64 {
    x / to * to
}

impl Manifest {
    /// Opens the manifest in `region` of `device` and recovers its state. A zeroed
    /// region yields the empty state. Region halves are `region.size_bytes() / 2` (2 MiB
    /// in the format; tests use smaller regions to switch halves often).
    pub fn open(
        device: Arc<Device>,
        region: Region,
    ) -> Result<(Manifest, ManifestState), MetaDbError> {
        let sector_bytes = u64::from(device.info().logical_block_bytes);
        assert!(
            HEADER_BLOCK_BYTES % sector_bytes == 0,
            "sector of {sector_bytes} bytes"
        );
        assert!(
            region.end_byte() <= device.size_bytes(),
            "manifest region beyond the device"
        );
        let half_bytes = region.size_bytes() / 2;
        assert!(
            half_bytes >= HALF_BYTES_MIN && half_bytes % HEADER_BLOCK_BYTES == 0,
            "manifest halves of {half_bytes} bytes"
        );
        assert!(
            half_bytes <= u64::from(u32::MAX),
            "record lengths are 32-bit"
        );
        let mut manifest = Manifest {
            device,
            region,
            half_bytes,
            sector_bytes,
            inner: Mutex::new(Inner {
                state: ManifestState::default(),
                log: None,
                epoch_max: 0,
                failed: None,
            }),
        };
        let mut headers = Vec::with_capacity(2);
        for half in 0..2 {
            let block = manifest.read(manifest.half_start(half), HEADER_BLOCK_BYTES)?;
            headers.push(decode_header(
                &block,
                half,
                half_bytes,
                manifest.half_start(half),
            )?);
        }
        let newest = match (headers[0], headers[1]) {
            (Some(a), Some(b)) if a.epoch == b.epoch => {
                let what = "manifest half headers";
                return Err(MetaDbError::corruption(
                    what,
                    format!("both halves claim epoch {}", a.epoch),
                ));
            }
            (Some(a), Some(b)) => Some(if a.epoch > b.epoch { a } else { b }),
            (a, b) => a.or(b),
        };
        for (half, header) in headers.iter().enumerate() {
            if header.is_none() {
                manifest.check_headless_half(half as u32)?;
            }
        }
        if let Some(header) = newest {
            let (state, log) = manifest.replay(&header)?;
            state.version()?;
            let inner = manifest.inner.get_mut().expect("manifest lock");
            inner.state = state;
            inner.log = Some(log);
            inner.epoch_max = header.epoch;
        }
        let state = manifest.state();
        Ok((manifest, state))
    }

    fn half_start(&self, half: u32) -> u64 {
        assert!(half < 2);
        self.region.start_byte() + u64::from(half) * self.half_bytes
    }

    fn read(&self, offset: u64, len: u64) -> Result<AlignedBuf, MetaDbError> {
        Ok(self
            .device
            .read(offset, AlignedBuf::scratch(len as usize), IoCause::Manifest)?)
    }

    /// A half whose header is all zero was never switched to, or its first snapshot's
    /// header never landed; edits are appended only after the header is durable, so an
    /// intact edit record after the snapshot proves the header damaged (FORMAT.md §5.4).
    ///
    /// Only the half's first 64 KiB are read (a half never switched to is zeros, and
    /// every mount checks it), the rest only if a record that may be there reaches past.
    fn check_headless_half(&self, half: u32) -> Result<(), MetaDbError> {
        const PEEK_BYTES: u64 = 64 << 10;
        let start = self.half_start(half);
        let mut bytes = self.read(start, PEEK_BYTES.min(self.half_bytes))?;
        let whole_if_cut = |bytes: &mut AlignedBuf, at: usize| {
            if is_cut(bytes, at) && bytes.len() < self.half_bytes as usize {
                *bytes = self.read(start, self.half_bytes)?;
            }
            Ok::<(), MetaDbError>(())
        };
        let snapshot_at = HEADER_BLOCK_BYTES as usize;
        whole_if_cut(&mut bytes, snapshot_at)?;
        let Some((snapshot, _)) = parse_record(&bytes, snapshot_at) else {
            return Ok(());
        };
        let at = snapshot_at + FRAME_BYTES + snapshot.payload_len;
        whole_if_cut(&mut bytes, at)?;
        match parse_record(&bytes, at) {
            Some((edit, _))
                if edit.kind == KIND_EDIT
                    && edit.epoch == snapshot.epoch
                    && edit.index == 1
                    && edit.prev_crc == snapshot.crc =>
            {
                Err(MetaDbError::damaged(
                    "MetaDB manifest half header",
                    format!("half {half} byte {start}"),
                    format!(
                        "the header of epoch {} (its snapshot and edit 1 follow it)",
                        snapshot.epoch
                    ),
                    "zeros",
                ))
            }
            _ => Ok(()),
        }
    }

    /// Reads the half `header` names: its snapshot (which must check out), then edits
    /// up to the first record that does not.
    fn replay(&self, header: &HalfHeader) -> Result<(ManifestState, LogTail), MetaDbError> {
        let start = self.half_start(header.half);
        let bytes = self.read(start, self.half_bytes)?;
        let snapshot_at = HEADER_BLOCK_BYTES as usize;
        let what = |at: usize| {
            format!(
                "manifest half {} record at byte {}",
                header.half,
                start + at as u64
            )
        };
        let snapshot = parse_record(&bytes, snapshot_at).filter(|(f, _)| {
            f.crc == header.snapshot_crc
                && f.payload_len == header.snapshot_len as usize
                && f.epoch == header.epoch
        });
        let Some((frame, payload)) = snapshot else {
            let detail = format!(
                "expected the snapshot of epoch {} ({} bytes, crc {:#010x}) named by the header",
                header.epoch, header.snapshot_len, header.snapshot_crc
            );
            return Err(MetaDbError::corruption(what(snapshot_at), detail));
        };
        if frame.kind != KIND_SNAPSHOT || frame.index != 0 || frame.prev_crc != 0 {
            return Err(MetaDbError::corruption(
                what(snapshot_at),
                format!("expected a snapshot frame, got {frame:?}"),
            ));
        }
        let mut state = ManifestState::default();
        let fold = |state: &mut ManifestState, payload: &[u8], at: usize| {
            let edit = decode_edit(payload).map_err(|e| MetaDbError::corruption(what(at), e))?;
            state
                .apply(&edit)
                .map_err(|e| MetaDbError::corruption(what(at), e.to_string()))
        };
        fold(&mut state, payload, snapshot_at)?;
        let (mut at, mut index, mut prev_crc) = (
            snapshot_at + FRAME_BYTES + frame.payload_len,
            1u32,
            frame.crc,
        );
        while let Some((frame, payload)) = parse_record(&bytes, at) {
            if frame.epoch != header.epoch || frame.index != index || frame.prev_crc != prev_crc {
                break;
            }
            if frame.kind != KIND_EDIT {
                return Err(MetaDbError::corruption(
                    what(at),
                    format!("expected an edit frame, got {frame:?}"),
                ));
            }
            fold(&mut state, payload, at)?;
            (at, index, prev_crc) = (at + FRAME_BYTES + frame.payload_len, index + 1, frame.crc);
        }
        if let Some((later_at, later)) = later_record(&bytes, at, header.epoch, index) {
            // Each record is flushed before the next is written, so a crash leaves at
            // most the last one torn: an intact later record proves this one damaged.
            return Err(MetaDbError::damaged(
                "MetaDB manifest record",
                format!("half {} byte {} (record index {index})", header.half, start + at as u64),
                format!(
                    "a record whose CRC, epoch, index and prev_crc check out (record {} of epoch {} follows at byte {})",
                    later.index,
                    header.epoch,
                    start + later_at as u64
                ),
                "bytes that do not".to_string(),
            ));
        }
        let end = at as u64;
        let tail = bytes[round_down(end, self.sector_bytes) as usize..at].to_vec();
        let log = LogTail {
            half: header.half,
            epoch: header.epoch,
            end,
            next_index: index,
            prev_crc,
            tail,
        };
        Ok((state, log))
    }

    /// Appends `edit` durably: on `Ok` it survives any crash. Panics if the edit does not
    /// apply to the current state (a bug). Fails with `NoSpace` if the state after the
    /// edit does not fit a half (nothing is written then), and with the device's error
    /// if a write or flush fails, after which every call fails with `ReadOnly`.
    pub fn apply(&self, edit: &VersionEdit) -> Result<(), MetaDbError> {
        self.apply_completed(&mut edit.clone(), |_| {})
    }

    /// [`Manifest::apply`] after `complete` has filled in what must be read under the
    /// manifest lock: counters that concurrent jobs advance (`next_table_id`), so that
    /// an edit appended later never carries an older value than one appended before it.
    pub fn apply_completed(
        &self,
        edit: &mut VersionEdit,
        complete: impl FnOnce(&mut VersionEdit),
    ) -> Result<(), MetaDbError> {
        let mut inner = self
            .inner
            .lock()
            .expect("manifest lock poisoned by a panic");
        complete(edit);
        let edit = &*edit;
        if let Some(reason) = &inner.failed {
            return Err(MetaDbError::ReadOnly(reason.clone()));
        }
        if let Err(e) = inner.state.check(edit) {
            panic!("version edit does not apply to the manifest state: {e}");
        }
        let mut payload = Vec::with_capacity(encoded_edit_len(edit));
        encode_edit(edit, &mut payload);
        let fits = inner
            .log
            .as_ref()
            .is_some_and(|log| log.end + (FRAME_BYTES + payload.len()) as u64 <= self.half_bytes);
        if fits {
            self.append(&mut inner, &payload)?;
            inner.state.apply(edit).expect("checked above");
        } else {
            let mut next = inner.state.clone();
            next.apply(edit).expect("checked above");
            self.switch(&mut inner, &next)?;
            inner.state = next;
        }
        Ok(())
    }

    /// Writes and flushes `requests`; a failure leaves the manifest read-only.
    fn io(&self, inner: &mut Inner, requests: Vec<IoRequest>) -> Result<(), MetaDbError> {
        match self.device.run(requests) {
            Ok(_) => Ok(()),
            Err(e) => {
                inner.failed = Some(format!("a manifest write or flush failed: {e}"));
                Err(e.into())
            }
        }
    }

    fn write_request(&self, offset: u64, bytes: &[u8]) -> IoRequest {
        assert!(
            offset % self.sector_bytes == 0,
            "unaligned manifest write at {offset}"
        );
        let len = bytes.len().next_multiple_of(self.sector_bytes as usize);
        let mut buf = AlignedBuf::zeroed(len);
        buf[..bytes.len()].copy_from_slice(bytes);
        IoRequest::write(offset, buf, IoCause::Manifest)
    }

    /// Appends one edit record to the current half: tail sector and record in one write,
    /// then a flush.
    fn append(&self, inner: &mut Inner, payload: &[u8]) -> Result<(), MetaDbError> {
        let log = inner.log.as_ref().expect("appending to a current half");
        let start = log.end - log.tail.len() as u64;
        let mut bytes = Vec::with_capacity(log.tail.len() + FRAME_BYTES + payload.len());
        bytes.extend_from_slice(&log.tail);
        let crc = encode_record(
            &mut bytes,
            log.epoch,
            log.next_index,
            log.prev_crc,
            KIND_EDIT,
            payload,
        );
        let end = start + bytes.len() as u64;
        assert!(end <= self.half_bytes, "record beyond the half");
        let offset = self.half_start(log.half) + start;
        self.io(
            inner,
            vec![
                self.write_request(offset, &bytes),
                IoRequest::flush(IoCause::Manifest),
            ],
        )?;
        let log = inner.log.as_mut().expect("appending to a current half");
        log.tail = bytes[(round_down(end, self.sector_bytes) - start) as usize..].to_vec();
        (log.end, log.next_index, log.prev_crc) = (end, log.next_index + 1, crc);
        Ok(())
    }

    /// Starts the other half with a snapshot of `next` (the state after the edit being
    /// applied): snapshot, flush, header, flush. Until the header lands the current half
    /// stays the newest, so a crash recovers the state before the edit.
    fn switch(&self, inner: &mut Inner, next: &ManifestState) -> Result<(), MetaDbError> {
        let half = inner.log.as_ref().map_or(0, |log| 1 - log.half);
        let epoch = inner.epoch_max + 1;
        let snapshot = next.to_snapshot_edit();
        let mut payload = Vec::with_capacity(encoded_edit_len(&snapshot));
        encode_edit(&snapshot, &mut payload);
        let mut bytes = Vec::with_capacity(FRAME_BYTES + payload.len());
        let crc = encode_record(&mut bytes, epoch, 0, 0, KIND_SNAPSHOT, &payload);
        let end = HEADER_BLOCK_BYTES + bytes.len() as u64;
        if end > self.half_bytes {
            // The state outgrew a half: refuse the edit, keep the manifest as it is.
            return Err(MetaDbError::NoSpace);
        }
        let header = HalfHeader {
            half,
            epoch,
            snapshot_len: payload.len() as u32,
            snapshot_crc: crc,
        };
        let start = self.half_start(half);
        let requests = vec![
            self.write_request(start + HEADER_BLOCK_BYTES, &bytes),
            IoRequest::flush(IoCause::Manifest),
            self.write_request(start, &encode_header(&header, self.half_bytes)),
            IoRequest::flush(IoCause::Manifest),
        ];
        self.io(inner, requests)?;
        let tail_from = (round_down(end, self.sector_bytes) - HEADER_BLOCK_BYTES) as usize;
        inner.log = Some(LogTail {
            half,
            epoch,
            end,
            next_index: 1,
            prev_crc: crc,
            tail: bytes[tail_from..].to_vec(),
        });
        inner.epoch_max = epoch;
        Ok(())
    }

    /// A copy of the current state (every acknowledged edit folded in).
    pub fn state(&self) -> ManifestState {
        self.inner.lock().expect("manifest lock").state.clone()
    }

    /// Where the log stands; `None` before the first edit of a fresh region.
    pub fn position(&self) -> Option<ManifestPosition> {
        let inner = self.inner.lock().expect("manifest lock");
        inner.log.as_ref().map(|log| ManifestPosition {
            half: log.half,
            epoch: log.epoch,
            used_bytes: log.end,
            records: log.next_index,
        })
    }

    /// The largest snapshot record (frame included) a half holds: a state whose
    /// `snapshot_record_bytes` exceeds it cannot be logged.
    pub fn snapshot_bytes_max(&self) -> usize {
        (self.half_bytes - HEADER_BLOCK_BYTES) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::KEY_BYTES_MAX;
    use crate::table::{TableId, TableMeta};
    use crate::types::{InternalKey, ValueKind};
    use format::SegmentNo;

    fn table(id: u64, smallest: &[u8], largest: &[u8]) -> TableMeta {
        TableMeta {
            id: TableId(id),
            segment: SegmentNo(id as u32 + 100),
            len_bytes: 8192,
            entries: 3 * id,
            smallest: InternalKey::new(smallest, 7 + id, ValueKind::Put),
            largest: InternalKey::new(largest, 2, ValueKind::Delete),
        }
    }

    #[test]
    fn layouts_are_contiguous() {
        for layout in layouts() {
            layout.check_contiguous().unwrap();
        }
    }

    #[test]
    fn edits_round_trip_through_their_encoding() {
        let edits = [
            VersionEdit::default(),
            VersionEdit {
                added: vec![
                    (0, table(3, b"", b"z")),
                    (4, table(9, b"abc", &[0xff; KEY_BYTES_MAX])),
                ],
                removed: vec![(1, TableId(2)), (6, TableId(u64::MAX))],
                flushed_generation: Some(7),
                last_seq: None,
                next_table_id: Some(10),
                compaction_cursors: vec![(2, b"m".to_vec()), (3, Vec::new())],
            },
        ];
        for edit in edits {
            let mut bytes = vec![0xee];
            encode_edit(&edit, &mut bytes);
            assert_eq!(bytes.len() - 1, encoded_edit_len(&edit));
            assert_eq!(decode_edit(&bytes[1..]), Ok(edit.clone()));
            // Every truncation and every extension is rejected, never misread.
            for cut in 1..bytes.len() - 1 {
                assert!(
                    decode_edit(&bytes[1..bytes.len() - cut]).is_err(),
                    "cut {cut}"
                );
            }
            bytes.push(0);
            assert!(decode_edit(&bytes[1..]).is_err());
        }
    }

    #[test]
    fn decoding_rejects_unknown_flags_and_kinds() {
        let mut bytes = Vec::new();
        encode_edit(
            &VersionEdit {
                added: vec![(0, table(1, b"a", b"b"))],
                ..VersionEdit::default()
            },
            &mut bytes,
        );
        let mut flags = bytes.clone();
        E_FLAGS.put_u32(&mut flags, 8);
        assert!(decode_edit(&flags).unwrap_err().contains("flags"));
        let mut kind = bytes;
        kind[EDIT_HEADER_BYTES + T_LARGEST_KIND.offset] = 9;
        assert!(decode_edit(&kind).unwrap_err().contains("kind"));
    }

    #[test]
    fn records_check_crc_and_bounds() {
        let mut half = vec![0u8; 10];
        let crc = encode_record(&mut half, 5, 3, 0xabcd, KIND_EDIT, b"payload");
        let (frame, payload) = parse_record(&half, 10).expect("valid record");
        assert_eq!(
            frame,
            Frame {
                payload_len: 7,
                crc,
                epoch: 5,
                index: 3,
                prev_crc: 0xabcd,
                kind: KIND_EDIT
            }
        );
        assert_eq!(payload, b"payload");
        assert!(
            parse_record(&half[..half.len() - 1], 10).is_none(),
            "truncated"
        );
        for byte in 10..half.len() {
            let mut bad = half.clone();
            bad[byte] ^= 1;
            assert!(parse_record(&bad, 10).is_none(), "flip at {byte}");
        }
        assert!(
            parse_record(&[0u8; 64], 0).is_none(),
            "zeros are not a record"
        );
    }

    #[test]
    fn headers_round_trip_and_reject_damage() {
        let h = HalfHeader {
            half: 1,
            epoch: 9,
            snapshot_len: 100,
            snapshot_crc: 0x1234,
        };
        let b = encode_header(&h, 1 << 21);
        assert_eq!(decode_header(&b, 1, 1 << 21, 0).unwrap(), Some(h));
        assert_eq!(decode_header(&[0u8; 64], 0, 1 << 21, 0).unwrap(), None);
        assert!(
            decode_header(&b, 0, 1 << 21, 0).is_err(),
            "misdirected to the other half"
        );
        assert!(decode_header(&b, 1, 1 << 20, 0).is_err(), "other half size");
        let mut torn = b;
        torn[20] ^= 0x40;
        assert!(matches!(
            decode_header(&torn, 1, 1 << 21, 0),
            Err(MetaDbError::Corruption { .. })
        ));
    }

    #[test]
    fn state_folds_and_rejects_invalid_edits() {
        let mut s = ManifestState::default();
        let e1 = VersionEdit {
            added: vec![(0, table(1, b"a", b"c")), (0, table(2, b"b", b"d"))],
            last_seq: Some(10),
            ..VersionEdit::default()
        };
        s.apply(&e1).unwrap();
        assert_eq!(s.next_table_id(), 3, "bumped past every added id");
        let moved = VersionEdit {
            removed: vec![(0, TableId(2))],
            added: vec![(1, table(2, b"b", b"d"))],
            ..VersionEdit::default()
        };
        s.apply(&moved).unwrap();
        assert_eq!(
            s.tables().map(|(l, t)| (l, t.id.0)).collect::<Vec<_>>(),
            [(0, 1), (1, 2)]
        );
        let before = s.clone();
        let bad = [
            (
                VersionEdit {
                    removed: vec![(0, TableId(2))],
                    ..VersionEdit::default()
                },
                "not live",
            ),
            (
                VersionEdit {
                    added: vec![(3, table(1, b"x", b"y"))],
                    ..VersionEdit::default()
                },
                "already live",
            ),
            (
                VersionEdit {
                    added: vec![(
                        3,
                        TableMeta {
                            segment: SegmentNo(101),
                            ..table(5, b"x", b"y")
                        },
                    )],
                    ..VersionEdit::default()
                },
                "segment",
            ),
            (
                VersionEdit {
                    last_seq: Some(9),
                    ..VersionEdit::default()
                },
                "go back",
            ),
            (
                VersionEdit {
                    added: vec![(7, table(6, b"x", b"y"))],
                    ..VersionEdit::default()
                },
                "out of range",
            ),
            (
                VersionEdit {
                    added: vec![(2, table(6, b"y", b"x"))],
                    ..VersionEdit::default()
                },
                "smallest key above",
            ),
            (
                VersionEdit {
                    removed: vec![(0, TableId(1)), (0, TableId(1))],
                    ..VersionEdit::default()
                },
                "not live",
            ),
        ];
        for (edit, message) in bad {
            let err = s.apply(&edit).unwrap_err();
            assert!(err.to_string().contains(message), "{err} lacks {message}");
            assert_eq!(s, before, "a rejected edit changes nothing");
        }
        // A removed table's segment may be reused in the same edit.
        let reuse = VersionEdit {
            removed: vec![(1, TableId(2))],
            added: vec![(
                1,
                TableMeta {
                    segment: SegmentNo(102),
                    ..table(7, b"b", b"d")
                },
            )],
            ..VersionEdit::default()
        };
        s.apply(&reuse).unwrap();
        let mut again = ManifestState::default();
        again.apply(&s.to_snapshot_edit()).unwrap();
        assert_eq!(again, s, "a snapshot rebuilds the state");
    }
}
