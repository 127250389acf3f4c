//! [`VersionEdit`]: one atomic change to the durable state, and its encoding.

use super::layout::FLAGS_ALL;
use super::layout::*;
use crate::batch::KEY_BYTES_MAX;
use crate::table::{TableId, TableMeta};
use crate::types::{InternalKey, Seq, ValueKind};
use crate::version::LEVEL_COUNT;
use format::layout::Field;
use format::SegmentNo;
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

// ---- Edit encoding ----

pub(super) fn encoded_edit_len(edit: &VersionEdit) -> usize {
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
