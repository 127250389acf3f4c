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

use crate::batch::KEY_BYTES_MAX;
use crate::error::MetaDbError;
use crate::table::{TableId, TableMeta};
use crate::types::{InternalKey, Seq, ValueKind};
use crate::version::{Version, LEVEL_COUNT};
use device::{AlignedBuf, Device, IoCause, IoRequest};
use format::checksum::{crc32c, crc32c_skipping};
use format::constants::{FORMAT_VERSION, SEGMENT_SIZE_BYTES};
use format::layout::{Field, StructLayout};
use format::{Region, SegmentNo};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use thiserror::Error;

/// One atomic change to the database's durable state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VersionEdit {
    /// Tables added, with their level.
    pub added: Vec<(u32, TableMeta)>,
    /// Tables removed (by id), with the level they were in.
    pub removed: Vec<(u32, TableId)>,
    /// Every WAL generation up to and including this one is in tables.
    pub flushed_generation: Option<u64>,
    /// The highest sequence number any table holds.
    pub last_seq: Option<Seq>,
    /// The next table id to assign.
    pub next_table_id: Option<u64>,
    /// New compaction cursors: per level, the largest user key of the last table
    /// compacted out of it (`compaction::policy` resumes after it).
    pub compaction_cursors: Vec<(u32, Vec<u8>)>,
}

// ---- Byte layouts (docs/FORMAT.md §5.4) ----

pub const MAGIC: [u8; 8] = *b"AUGEMNF\0";
/// The half header occupies the first 64 bytes of the half's first 4 KiB block.
pub const HEADER_BLOCK_BYTES: u64 = 4096;
/// Smallest half: the header block and one block of records.
pub const HALF_BYTES_MIN: u64 = 2 * HEADER_BLOCK_BYTES;

pub const H_MAGIC: Field = Field::at("magic", 0, 8);
pub const H_FORMAT_VERSION: Field = Field::after(H_MAGIC, "format_version", 4);
pub const H_HALF: Field = Field::after(H_FORMAT_VERSION, "half", 4);
pub const H_EPOCH: Field = Field::after(H_HALF, "epoch", 8);
pub const H_HALF_BYTES: Field = Field::after(H_EPOCH, "half_bytes", 8);
pub const H_SNAPSHOT_LEN: Field = Field::after(H_HALF_BYTES, "snapshot_len", 4);
pub const H_SNAPSHOT_CRC: Field = Field::after(H_SNAPSHOT_LEN, "snapshot_crc", 4);
pub const H_RESERVED: Field = Field::after(H_SNAPSHOT_CRC, "reserved", 20);
pub const H_CHECKSUM: Field = Field::after(H_RESERVED, "header_crc", 4);
pub const HEADER_BYTES: usize = 64;
pub const HEADER_LAYOUT: StructLayout = StructLayout {
    name: "Manifest half header",
    size: HEADER_BYTES,
    fields: &[
        H_MAGIC,
        H_FORMAT_VERSION,
        H_HALF,
        H_EPOCH,
        H_HALF_BYTES,
        H_SNAPSHOT_LEN,
        H_SNAPSHOT_CRC,
        H_RESERVED,
        H_CHECKSUM,
    ],
};

pub const R_PAYLOAD_LEN: Field = Field::at("payload_len", 0, 4);
pub const R_CRC: Field = Field::after(R_PAYLOAD_LEN, "crc", 4);
pub const R_EPOCH: Field = Field::after(R_CRC, "epoch", 8);
pub const R_INDEX: Field = Field::after(R_EPOCH, "index", 4);
pub const R_PREV_CRC: Field = Field::after(R_INDEX, "prev_crc", 4);
pub const R_KIND: Field = Field::after(R_PREV_CRC, "kind", 1);
pub const R_RESERVED: Field = Field::after(R_KIND, "reserved", 7);
pub const FRAME_BYTES: usize = 32;
pub const FRAME_LAYOUT: StructLayout = StructLayout {
    name: "Manifest record frame",
    size: FRAME_BYTES,
    fields: &[
        R_PAYLOAD_LEN,
        R_CRC,
        R_EPOCH,
        R_INDEX,
        R_PREV_CRC,
        R_KIND,
        R_RESERVED,
    ],
};
pub const KIND_SNAPSHOT: u8 = 1;
pub const KIND_EDIT: u8 = 2;

pub const E_FLAGS: Field = Field::at("flags", 0, 4);
pub const E_REMOVED_COUNT: Field = Field::after(E_FLAGS, "removed_count", 4);
pub const E_ADDED_COUNT: Field = Field::after(E_REMOVED_COUNT, "added_count", 4);
pub const E_CURSOR_COUNT: Field = Field::after(E_ADDED_COUNT, "cursor_count", 4);
pub const E_FLUSHED_GENERATION: Field = Field::after(E_CURSOR_COUNT, "flushed_generation", 8);
pub const E_LAST_SEQ: Field = Field::after(E_FLUSHED_GENERATION, "last_seq", 8);
pub const E_NEXT_TABLE_ID: Field = Field::after(E_LAST_SEQ, "next_table_id", 8);
pub const EDIT_HEADER_BYTES: usize = 40;
pub const EDIT_HEADER_LAYOUT: StructLayout = StructLayout {
    name: "Manifest edit header",
    size: EDIT_HEADER_BYTES,
    fields: &[
        E_FLAGS,
        E_REMOVED_COUNT,
        E_ADDED_COUNT,
        E_CURSOR_COUNT,
        E_FLUSHED_GENERATION,
        E_LAST_SEQ,
        E_NEXT_TABLE_ID,
    ],
};
pub const FLAG_FLUSHED_GENERATION: u32 = 1;
pub const FLAG_LAST_SEQ: u32 = 2;
pub const FLAG_NEXT_TABLE_ID: u32 = 4;
const FLAGS_ALL: u32 = FLAG_FLUSHED_GENERATION | FLAG_LAST_SEQ | FLAG_NEXT_TABLE_ID;

pub const D_LEVEL: Field = Field::at("level", 0, 4);
pub const D_TABLE_ID: Field = Field::after(D_LEVEL, "table_id", 8);
pub const REMOVED_BYTES: usize = 12;
pub const REMOVED_LAYOUT: StructLayout = StructLayout {
    name: "Manifest removed table",
    size: REMOVED_BYTES,
    fields: &[D_LEVEL, D_TABLE_ID],
};

pub const T_TABLE_ID: Field = Field::at("table_id", 0, 8);
pub const T_ENTRIES: Field = Field::after(T_TABLE_ID, "entries", 8);
pub const T_SMALLEST_SEQ: Field = Field::after(T_ENTRIES, "smallest_seq", 8);
pub const T_LARGEST_SEQ: Field = Field::after(T_SMALLEST_SEQ, "largest_seq", 8);
pub const T_LEVEL: Field = Field::after(T_LARGEST_SEQ, "level", 4);
pub const T_SEGMENT: Field = Field::after(T_LEVEL, "segment", 4);
pub const T_LEN_BYTES: Field = Field::after(T_SEGMENT, "len_bytes", 4);
pub const T_SMALLEST_KEY_LEN: Field = Field::after(T_LEN_BYTES, "smallest_key_len", 2);
pub const T_LARGEST_KEY_LEN: Field = Field::after(T_SMALLEST_KEY_LEN, "largest_key_len", 2);
pub const T_SMALLEST_KIND: Field = Field::after(T_LARGEST_KEY_LEN, "smallest_kind", 1);
pub const T_LARGEST_KIND: Field = Field::after(T_SMALLEST_KIND, "largest_kind", 1);
pub const T_RESERVED: Field = Field::after(T_LARGEST_KIND, "reserved", 2);
pub const TABLE_BYTES: usize = 52;
pub const TABLE_LAYOUT: StructLayout = StructLayout {
    name: "Manifest added table",
    size: TABLE_BYTES,
    fields: &[
        T_TABLE_ID,
        T_ENTRIES,
        T_SMALLEST_SEQ,
        T_LARGEST_SEQ,
        T_LEVEL,
        T_SEGMENT,
        T_LEN_BYTES,
        T_SMALLEST_KEY_LEN,
        T_LARGEST_KEY_LEN,
        T_SMALLEST_KIND,
        T_LARGEST_KIND,
        T_RESERVED,
    ],
};

pub const C_LEVEL: Field = Field::at("level", 0, 4);
pub const C_KEY_LEN: Field = Field::after(C_LEVEL, "key_len", 2);
pub const C_RESERVED: Field = Field::after(C_KEY_LEN, "reserved", 2);
pub const CURSOR_BYTES: usize = 8;
pub const CURSOR_LAYOUT: StructLayout = StructLayout {
    name: "Manifest compaction cursor",
    size: CURSOR_BYTES,
    fields: &[C_LEVEL, C_KEY_LEN, C_RESERVED],
};

const _: () = assert!(H_CHECKSUM.end() == HEADER_BYTES);
const _: () = assert!(R_RESERVED.end() == FRAME_BYTES);
const _: () = assert!(E_NEXT_TABLE_ID.end() == EDIT_HEADER_BYTES);
const _: () = assert!(D_TABLE_ID.end() == REMOVED_BYTES);
const _: () = assert!(T_RESERVED.end() == TABLE_BYTES);
const _: () = assert!(C_RESERVED.end() == CURSOR_BYTES);
const _: () = assert!(
    KEY_BYTES_MAX <= u16::MAX as usize,
    "key lengths are stored in 2 bytes"
);
const _: () = assert!(HEADER_BYTES as u64 <= HEADER_BLOCK_BYTES);

/// Every fixed-size structure of the manifest, as its table in docs/FORMAT.md §5.4.
pub fn layouts() -> Vec<StructLayout> {
    vec![
        HEADER_LAYOUT,
        FRAME_LAYOUT,
        EDIT_HEADER_LAYOUT,
        REMOVED_LAYOUT,
        TABLE_LAYOUT,
        CURSOR_LAYOUT,
    ]
}

// ---- The folded state ----

/// Why an edit cannot apply to a state. From `Manifest::apply` this is a bug (panic);
/// from recovery it is corruption.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum EditError {
    #[error("level {level} out of range (levels are 0 to {})", LEVEL_COUNT - 1)]
    LevelOutOfRange { level: u32 },
    #[error("table {id:?} is not live in level {level}")]
    MissingTable { level: u32, id: TableId },
    #[error("table {id:?} is already live")]
    DuplicateTable { id: TableId },
    #[error("segment {segment} of table {id:?} already holds a live table")]
    DuplicateSegment { segment: SegmentNo, id: TableId },
    #[error("table {id:?}: {reason}")]
    BadTable { id: TableId, reason: &'static str },
    #[error("{field} would go back from {from} to {to}")]
    Regressed {
        field: &'static str,
        from: u64,
        to: u64,
    },
    #[error("compaction cursor of {bytes} bytes (keys are at most {KEY_BYTES_MAX})")]
    CursorTooLong { bytes: usize },
}

/// What the manifest records: the result of folding every edit, in order, into the
/// empty state.
///
/// Invariants: every table id and every segment is live at most once; the three
/// counters never decrease; `next_table_id` is above every table id ever added.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestState {
    /// Per level (exactly `LEVEL_COUNT`), live tables by id.
    levels: Vec<BTreeMap<TableId, TableMeta>>,
    /// Index: which live table holds each segment.
    segments: BTreeMap<SegmentNo, TableId>,
    flushed_generation: u64,
    last_seq: Seq,
    next_table_id: u64,
    compaction_cursors: BTreeMap<u32, Vec<u8>>,
}

impl Default for ManifestState {
    fn default() -> Self {
        ManifestState {
            levels: vec![BTreeMap::new(); LEVEL_COUNT],
            segments: BTreeMap::new(),
            flushed_generation: 0,
            last_seq: 0,
            // Table id 0 is never assigned, so it can mean "none".
            next_table_id: 1,
            compaction_cursors: BTreeMap::new(),
        }
    }
}

impl ManifestState {
    /// Every WAL generation up to and including this one is in tables (0: none yet).
    pub fn flushed_generation(&self) -> u64 {
        self.flushed_generation
    }

    pub fn last_seq(&self) -> Seq {
        self.last_seq
    }

    pub fn next_table_id(&self) -> u64 {
        self.next_table_id
    }

    pub fn compaction_cursors(&self) -> &BTreeMap<u32, Vec<u8>> {
        &self.compaction_cursors
    }

    /// Live tables with their level, by level then id.
    pub fn tables(&self) -> impl Iterator<Item = (u32, &TableMeta)> {
        self.levels
            .iter()
            .enumerate()
            .flat_map(|(l, tables)| tables.values().map(move |t| (l as u32, t)))
    }

    /// Live tables per level (level -> tables by id).
    pub fn tables_by_level(&self) -> Vec<Vec<TableMeta>> {
        self.levels
            .iter()
            .map(|tables| tables.values().cloned().collect())
            .collect()
    }

    pub fn table_count(&self) -> usize {
        self.segments.len()
    }

    /// Segments holding live tables, ascending.
    pub fn segments(&self) -> impl Iterator<Item = SegmentNo> + '_ {
        self.segments.keys().copied()
    }

    /// The live tables as a [`Version`]; a broken version invariant (say, overlapping
    /// tables in level 1) is corruption of the manifest.
    pub fn version(&self) -> Result<Version, MetaDbError> {
        Version::from_tables(self.tables().map(|(l, t)| (l, t.clone())))
            .map_err(|e| MetaDbError::corruption("manifest state", e.to_string()))
    }

    fn level_of(&self, id: TableId) -> Option<u32> {
        self.levels
            .iter()
            .position(|tables| tables.contains_key(&id))
            .map(|l| l as u32)
    }

    /// Whether `edit` applies: removed tables are live at the level given, added ones
    /// are not live (or removed by the same edit) and well formed, counters do not go
    /// back. Removals happen before additions, so an edit may move a table.
    pub fn check(&self, edit: &VersionEdit) -> Result<(), EditError> {
        let mut removed: BTreeMap<TableId, SegmentNo> = BTreeMap::new();
        for &(level, id) in &edit.removed {
            let tables = self
                .levels
                .get(level as usize)
                .ok_or(EditError::LevelOutOfRange { level })?;
            let table = tables
                .get(&id)
                .ok_or(EditError::MissingTable { level, id })?;
            if removed.insert(id, table.segment).is_some() {
                return Err(EditError::MissingTable { level, id });
            }
        }
        let mut added_ids = BTreeMap::new();
        let mut added_segments = BTreeMap::new();
        for (level, t) in &edit.added {
            if *level as usize >= LEVEL_COUNT {
                return Err(EditError::LevelOutOfRange { level: *level });
            }
            check_table(t)?;
            let live = self.level_of(t.id).is_some() && !removed.contains_key(&t.id);
            if live || added_ids.insert(t.id, ()).is_some() {
                return Err(EditError::DuplicateTable { id: t.id });
            }
            let segment_live = self
                .segments
                .get(&t.segment)
                .is_some_and(|holder| removed.get(holder) != Some(&t.segment));
            if segment_live || added_segments.insert(t.segment, ()).is_some() {
                return Err(EditError::DuplicateSegment {
                    segment: t.segment,
                    id: t.id,
                });
            }
        }
        let counters = [
            (
                "flushed_generation",
                self.flushed_generation,
                edit.flushed_generation,
            ),
            ("last_seq", self.last_seq, edit.last_seq),
            ("next_table_id", self.next_table_id, edit.next_table_id),
        ];
        for (field, from, to) in counters {
            if let Some(to) = to.filter(|&to| to < from) {
                return Err(EditError::Regressed { field, from, to });
            }
        }
        for (level, key) in &edit.compaction_cursors {
            if *level as usize >= LEVEL_COUNT {
                return Err(EditError::LevelOutOfRange { level: *level });
            }
            if key.len() > KEY_BYTES_MAX {
                return Err(EditError::CursorTooLong { bytes: key.len() });
            }
        }
        Ok(())
    }

    /// Folds `edit` in, or changes nothing and says why it does not apply.
    pub fn apply(&mut self, edit: &VersionEdit) -> Result<(), EditError> {
        self.check(edit)?;
        for &(level, id) in &edit.removed {
            let table = self.levels[level as usize]
                .remove(&id)
                .expect("checked: the table is live");
            self.segments.remove(&table.segment);
        }
        for (level, t) in &edit.added {
            self.segments.insert(t.segment, t.id);
            self.levels[*level as usize].insert(t.id, t.clone());
            self.next_table_id = self.next_table_id.max(t.id.0 + 1);
        }
        self.flushed_generation = edit.flushed_generation.unwrap_or(self.flushed_generation);
        self.last_seq = edit.last_seq.unwrap_or(self.last_seq);
        self.next_table_id = self.next_table_id.max(edit.next_table_id.unwrap_or(0));
        for (level, key) in &edit.compaction_cursors {
            self.compaction_cursors.insert(*level, key.clone());
        }
        debug_assert_eq!(
            self.segments.len(),
            self.levels.iter().map(BTreeMap::len).sum::<usize>()
        );
        Ok(())
    }

    /// The whole state as one edit: applied to the empty state it gives this state.
    pub fn to_snapshot_edit(&self) -> VersionEdit {
        VersionEdit {
            added: self.tables().map(|(l, t)| (l, t.clone())).collect(),
            removed: Vec::new(),
            flushed_generation: Some(self.flushed_generation),
            last_seq: Some(self.last_seq),
            next_table_id: Some(self.next_table_id),
            compaction_cursors: self
                .compaction_cursors
                .iter()
                .map(|(l, k)| (*l, k.clone()))
                .collect(),
        }
    }

    /// Bytes of this state's snapshot record (frame included).
    pub fn snapshot_record_bytes(&self) -> usize {
        FRAME_BYTES + encoded_edit_len(&self.to_snapshot_edit())
    }
}

fn check_table(t: &TableMeta) -> Result<(), EditError> {
    let bad = |reason| Err(EditError::BadTable { id: t.id, reason });
    if t.id.0 == 0 {
        return bad("table id 0 is never assigned");
    }
    if t.len_bytes == 0 || u64::from(t.len_bytes) > SEGMENT_SIZE_BYTES {
        return bad("length outside one segment");
    }
    if t.smallest.user_key.len() > KEY_BYTES_MAX || t.largest.user_key.len() > KEY_BYTES_MAX {
        return bad("key longer than KEY_BYTES_MAX");
    }
    if t.smallest > t.largest {
        return bad("smallest key above largest");
    }
    Ok(())
}

// ---- Edit encoding ----

fn encoded_edit_len(edit: &VersionEdit) -> usize {
    let tables: usize = edit
        .added
        .iter()
        .map(|(_, t)| TABLE_BYTES + t.smallest.user_key.len() + t.largest.user_key.len())
        .sum();
    let cursors: usize = edit
        .compaction_cursors
        .iter()
        .map(|(_, k)| CURSOR_BYTES + k.len())
        .sum();
    EDIT_HEADER_BYTES + edit.removed.len() * REMOVED_BYTES + tables + cursors
}

fn count_u32(n: usize) -> u32 {
    u32::try_from(n).expect("fewer than 2^32 entries in an edit")
}

fn key_len_u16(key: &[u8]) -> u16 {
    assert!(
        key.len() <= KEY_BYTES_MAX,
        "key of {} bytes in a version edit",
        key.len()
    );
    key.len() as u16
}

/// Appends the encoding of `edit` (docs/FORMAT.md §5.4 "edit payload") to `out`.
pub fn encode_edit(edit: &VersionEdit, out: &mut Vec<u8>) {
    let start = out.len();
    let mut head = [0u8; EDIT_HEADER_BYTES];
    let mut flags = 0;
    for (flag, field, value) in [
        (
            FLAG_FLUSHED_GENERATION,
            E_FLUSHED_GENERATION,
            edit.flushed_generation,
        ),
        (FLAG_LAST_SEQ, E_LAST_SEQ, edit.last_seq),
        (FLAG_NEXT_TABLE_ID, E_NEXT_TABLE_ID, edit.next_table_id),
    ] {
        if let Some(v) = value {
            flags |= flag;
            field.put_u64(&mut head, v);
        }
    }
    E_FLAGS.put_u32(&mut head, flags);
    E_REMOVED_COUNT.put_u32(&mut head, count_u32(edit.removed.len()));
    E_ADDED_COUNT.put_u32(&mut head, count_u32(edit.added.len()));
    E_CURSOR_COUNT.put_u32(&mut head, count_u32(edit.compaction_cursors.len()));
    out.extend_from_slice(&head);
    for &(level, id) in &edit.removed {
        let mut e = [0u8; REMOVED_BYTES];
        D_LEVEL.put_u32(&mut e, level);
        D_TABLE_ID.put_u64(&mut e, id.0);
        out.extend_from_slice(&e);
    }
    for (level, t) in &edit.added {
        let mut e = [0u8; TABLE_BYTES];
        T_TABLE_ID.put_u64(&mut e, t.id.0);
        T_ENTRIES.put_u64(&mut e, t.entries);
        T_SMALLEST_SEQ.put_u64(&mut e, t.smallest.seq);
        T_LARGEST_SEQ.put_u64(&mut e, t.largest.seq);
        T_LEVEL.put_u32(&mut e, *level);
        T_SEGMENT.put_u32(&mut e, t.segment.0);
        T_LEN_BYTES.put_u32(&mut e, t.len_bytes);
        T_SMALLEST_KEY_LEN.put_u16(&mut e, key_len_u16(&t.smallest.user_key));
        T_LARGEST_KEY_LEN.put_u16(&mut e, key_len_u16(&t.largest.user_key));
        T_SMALLEST_KIND.put_u8(&mut e, t.smallest.kind as u8);
        T_LARGEST_KIND.put_u8(&mut e, t.largest.kind as u8);
        out.extend_from_slice(&e);
        out.extend_from_slice(&t.smallest.user_key);
        out.extend_from_slice(&t.largest.user_key);
    }
    for (level, key) in &edit.compaction_cursors {
        let mut e = [0u8; CURSOR_BYTES];
        C_LEVEL.put_u32(&mut e, *level);
        C_KEY_LEN.put_u16(&mut e, key_len_u16(key));
        out.extend_from_slice(&e);
        out.extend_from_slice(key);
    }
    debug_assert_eq!(out.len() - start, encoded_edit_len(edit));
}

/// Reads a byte string front to back; running out is an error (the detail of a
/// corruption report).
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        if self.bytes.len() - self.at < n {
            return Err(format!(
                "{what} at byte {} runs past the payload end {}",
                self.at,
                self.bytes.len()
            ));
        }
        self.at += n;
        Ok(&self.bytes[self.at - n..self.at])
    }

    fn key(&mut self, len: u16, what: &str) -> Result<Vec<u8>, String> {
        if len as usize > KEY_BYTES_MAX {
            return Err(format!("{what} of {len} bytes (at most {KEY_BYTES_MAX})"));
        }
        Ok(self.take(len as usize, what)?.to_vec())
    }

    /// Room for `count` entries of at least `size` bytes: bounds allocations by the
    /// payload, not by a count read from it.
    fn capacity(&self, count: u32, size: usize) -> usize {
        (count as usize).min((self.bytes.len() - self.at) / size)
    }
}

fn value_kind(byte: u8) -> Result<ValueKind, String> {
    ValueKind::from_u8(byte).ok_or_else(|| format!("value kind {byte}"))
}

/// Decodes an edit payload; the error is what was wrong, for a corruption report.
pub fn decode_edit(bytes: &[u8]) -> Result<VersionEdit, String> {
    let mut r = Reader { bytes, at: 0 };
    let head = r.take(EDIT_HEADER_BYTES, "edit header")?;
    let flags = E_FLAGS.get_u32(head);
    if flags & !FLAGS_ALL != 0 {
        return Err(format!("unknown edit flags {flags:#x}"));
    }
    let present = |flag: u32, field: Field| (flags & flag != 0).then(|| field.get_u64(head));
    let mut edit = VersionEdit {
        flushed_generation: present(FLAG_FLUSHED_GENERATION, E_FLUSHED_GENERATION),
        last_seq: present(FLAG_LAST_SEQ, E_LAST_SEQ),
        next_table_id: present(FLAG_NEXT_TABLE_ID, E_NEXT_TABLE_ID),
        ..VersionEdit::default()
    };
    if edit.last_seq.is_some_and(|s| s > crate::gate::SEQ_MAX) {
        return Err(format!(
            "last sequence number {} past the last one MetaDB hands out",
            edit.last_seq.unwrap_or_default()
        ));
    }
    let removed_count = E_REMOVED_COUNT.get_u32(head);
    edit.removed
        .reserve(r.capacity(removed_count, REMOVED_BYTES));
    for _ in 0..removed_count {
        let e = r.take(REMOVED_BYTES, "removed table")?;
        edit.removed
            .push((D_LEVEL.get_u32(e), TableId(D_TABLE_ID.get_u64(e))));
    }
    let added_count = E_ADDED_COUNT.get_u32(head);
    edit.added.reserve(r.capacity(added_count, TABLE_BYTES));
    for _ in 0..added_count {
        let e = r.take(TABLE_BYTES, "added table")?;
        let smallest_key = r.key(T_SMALLEST_KEY_LEN.get_u16(e), "smallest key")?;
        let largest_key = r.key(T_LARGEST_KEY_LEN.get_u16(e), "largest key")?;
        let table = TableMeta {
            id: TableId(T_TABLE_ID.get_u64(e)),
            segment: SegmentNo(T_SEGMENT.get_u32(e)),
            len_bytes: T_LEN_BYTES.get_u32(e),
            entries: T_ENTRIES.get_u64(e),
            smallest: InternalKey::new(
                smallest_key,
                T_SMALLEST_SEQ.get_u64(e),
                value_kind(T_SMALLEST_KIND.get_u8(e))?,
            ),
            largest: InternalKey::new(
                largest_key,
                T_LARGEST_SEQ.get_u64(e),
                value_kind(T_LARGEST_KIND.get_u8(e))?,
            ),
        };
        edit.added.push((T_LEVEL.get_u32(e), table));
    }
    let cursor_count = E_CURSOR_COUNT.get_u32(head);
    edit.compaction_cursors
        .reserve(r.capacity(cursor_count, CURSOR_BYTES));
    for _ in 0..cursor_count {
        let e = r.take(CURSOR_BYTES, "compaction cursor")?;
        let key = r.key(C_KEY_LEN.get_u16(e), "cursor key")?;
        edit.compaction_cursors.push((C_LEVEL.get_u32(e), key));
    }
    if r.at != bytes.len() {
        return Err(format!(
            "{} bytes after the edit's last entry",
            bytes.len() - r.at
        ));
    }
    Ok(edit)
}

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
            .read(offset, AlignedBuf::zeroed(len as usize), IoCause::Manifest)?)
    }

    /// A half whose header is all zero was never switched to, or its first snapshot's
    /// header never landed; edits are appended only after the header is durable, so an
    /// intact edit record after the snapshot proves the header damaged (FORMAT.md §5.4).
    fn check_headless_half(&self, half: u32) -> Result<(), MetaDbError> {
        let start = self.half_start(half);
        let bytes = self.read(start, self.half_bytes)?;
        let snapshot_at = HEADER_BLOCK_BYTES as usize;
        let Some((snapshot, _)) = parse_record(&bytes, snapshot_at) else {
            return Ok(());
        };
        let at = snapshot_at + FRAME_BYTES + snapshot.payload_len;
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
