//! The index block (docs/FORMAT.md §5.3 Tables, "Index block"): for each data block, in
//! order, its last internal key and where it lies. Kept decoded in memory while a table
//! is open; a lookup binary-searches it for the one block that can hold its key.
//!
//! An index entry is `key_len seq kind block_offset block_len user_key` (`key_len` and
//! `seq` varints, `kind` a byte, offset and length u32 LE); the block ends with
//! `entry_count` (u32) and the table-bound CRC-32C.
//!
//! Invariants (checked at decode):
//! - Entries are strictly increasing by last key; the data blocks they name are contiguous,
//!   start at table offset 0 and end where the index block starts.
//! - `entry_count` equals the footer's `block_count`.

use crate::error::MetaDbError;
use crate::table::layout::{
    corrupt, get_varint, get_varint32, put_varint, seal, unseal, varint_len, BlockHandle, Footer,
    BLOCK_TRAILER_BYTES, INDEX_TRAILER_BYTES, RESTART_BYTES,
};
use crate::table::TableId;
use crate::types::{compare_internal, Seq, ValueKind};
use std::cmp::Ordering;

/// Encoded bytes of one index entry.
pub fn entry_len(user_key_len: usize, seq: Seq) -> usize {
    varint_len(user_key_len as u64) + varint_len(seq) + 1 + 4 + 4 + user_key_len
}

/// Builds the index block.
#[derive(Debug, Default)]
pub struct IndexBuilder {
    buf: Vec<u8>,
    count: u32,
}

impl IndexBuilder {
    pub fn new() -> IndexBuilder {
        IndexBuilder::default()
    }

    /// Bytes of the entries so far (trailer excluded).
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn count(&self) -> u32 {
        self.count
    }

    pub fn add(&mut self, user_key: &[u8], seq: Seq, kind: ValueKind, handle: BlockHandle) {
        let before = self.buf.len();
        put_varint(&mut self.buf, user_key.len() as u64);
        put_varint(&mut self.buf, seq);
        self.buf.push(kind as u8);
        self.buf.extend_from_slice(&handle.offset.to_le_bytes());
        self.buf.extend_from_slice(&handle.len.to_le_bytes());
        self.buf.extend_from_slice(user_key);
        assert_eq!(self.buf.len() - before, entry_len(user_key.len(), seq));
        self.count += 1;
    }

    /// The sealed index block, to be written at `offset` of `table`.
    pub fn finish(&mut self, table: TableId, offset: u32) -> Vec<u8> {
        assert!(self.count > 0, "a table has at least one data block");
        let mut out = std::mem::take(&mut self.buf);
        out.extend_from_slice(&self.count.to_le_bytes());
        seal(table, offset, &mut out);
        out
    }
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    key_at: u32,
    key_len: u32,
    seq: Seq,
    kind: ValueKind,
    handle: BlockHandle,
}

/// A decoded, verified index. Keys live in one buffer.
#[derive(Debug)]
pub struct Index {
    keys: Vec<u8>,
    entries: Vec<Entry>,
}

impl Index {
    /// Verifies and decodes the sealed index block of the table `footer` describes.
    pub fn decode(sealed: &[u8], table: TableId, footer: &Footer) -> Result<Index, MetaDbError> {
        let body = unseal(table, footer.index.offset, sealed, &|| {
            "index block".to_string()
        })?;
        let bad = |detail: String| corrupt(table, "index block", detail);
        if body.len() < INDEX_TRAILER_BYTES - 4 {
            return Err(bad(format!("{} bytes is too short", sealed.len())));
        }
        let (d, count) = body.split_at(body.len() - 4);
        let count = u32::from_le_bytes(count.try_into().expect("4 bytes"));
        if count != footer.block_count {
            return Err(bad(format!(
                "entry count {count} but the footer says {} blocks",
                footer.block_count
            )));
        }
        let mut index = Index {
            keys: Vec::with_capacity(d.len()),
            entries: Vec::with_capacity(count as usize),
        };
        let mut pos = 0;
        let mut block_end = 0u64;
        // A block holds at least one entry (6 bytes), one restart and its trailer.
        let block_len_min = (6 + RESTART_BYTES + BLOCK_TRAILER_BYTES) as u32;
        for i in 0..count {
            let Some(e) = index.decode_entry(d, &mut pos) else {
                return Err(bad(format!("entry {i} at byte {pos} is malformed")));
            };
            if e.handle.offset as u64 != block_end || e.handle.len < block_len_min {
                return Err(bad(format!(
                    "entry {i} names block {:?}; blocks must be contiguous",
                    e.handle
                )));
            }
            block_end = e.handle.end();
            if let Some(prev) = index.entries.last() {
                let (pk, ps, pt) = index.key_parts(prev);
                let (k, s, t) = index.key_parts(&e);
                if compare_internal(pk, ps, pt, k, s, t) != Ordering::Less {
                    return Err(bad(format!("entry {i} is not above entry {}", i - 1)));
                }
            }
            index.entries.push(e);
        }
        if pos != d.len() || block_end != footer.index.offset as u64 {
            return Err(bad(format!(
                "entries end at {pos} of {} bytes; blocks end at {block_end}, index starts at {}",
                d.len(),
                footer.index.offset
            )));
        }
        Ok(index)
    }

    fn decode_entry(&mut self, d: &[u8], pos: &mut usize) -> Option<Entry> {
        let key_len = get_varint32(d, pos)? as usize;
        let seq = get_varint(d, pos)?;
        let kind = ValueKind::from_u8(*d.get(*pos)?)?;
        let fixed = d.get(*pos + 1..*pos + 9)?;
        let offset = u32::from_le_bytes(fixed[..4].try_into().expect("4 bytes"));
        let len = u32::from_le_bytes(fixed[4..].try_into().expect("4 bytes"));
        *pos += 9;
        let key = d.get(*pos..*pos + key_len)?;
        *pos += key_len;
        let key_at = u32::try_from(self.keys.len()).ok()?;
        self.keys.extend_from_slice(key);
        Some(Entry {
            key_at,
            key_len: key_len as u32,
            seq,
            kind,
            handle: BlockHandle { offset, len },
        })
    }

    fn key_parts(&self, e: &Entry) -> (&[u8], Seq, ValueKind) {
        (
            &self.keys[e.key_at as usize..(e.key_at + e.key_len) as usize],
            e.seq,
            e.kind,
        )
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Last internal key of block `i`.
    pub fn last_key(&self, i: usize) -> (&[u8], Seq, ValueKind) {
        self.key_parts(&self.entries[i])
    }

    pub fn handle(&self, i: usize) -> BlockHandle {
        self.entries[i].handle
    }

    /// The first block whose last key is `>= (user_key, seq, kind)`: the only block that
    /// can hold the first entry at or after that key. `None` if every key is below it.
    pub fn find(&self, user_key: &[u8], seq: Seq, kind: ValueKind) -> Option<usize> {
        let i = self.entries.partition_point(|e| {
            let (k, s, t) = self.key_parts(e);
            compare_internal(k, s, t, user_key, seq, kind) == Ordering::Less
        });
        (i < self.entries.len()).then_some(i)
    }

    /// Bytes of memory the index holds.
    pub fn memory_bytes(&self) -> usize {
        self.keys.capacity() + self.entries.capacity() * std::mem::size_of::<Entry>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn built() -> (Vec<u8>, Footer) {
        let mut b = IndexBuilder::new();
        let mut offset = 0;
        for (i, key) in [&b"apple"[..], b"banana", b"banana", b"cherry"]
            .iter()
            .enumerate()
        {
            let seq = if i == 1 { 9 } else { 4 };
            b.add(key, seq, ValueKind::Put, BlockHandle { offset, len: 100 });
            offset += 100;
        }
        let sealed = b.finish(TableId(8), 400);
        let footer = Footer {
            table_id: TableId(8),
            block_count: 4,
            entry_count: 50,
            index: BlockHandle {
                offset: 400,
                len: sealed.len() as u32,
            },
            bloom: BlockHandle {
                offset: 400 + sealed.len() as u32,
                len: 16,
            },
            table_len: 4096,
        };
        (sealed, footer)
    }

    #[test]
    fn finds_the_first_block_at_or_after_a_key() {
        let (sealed, footer) = built();
        let index = Index::decode(&sealed, TableId(8), &footer).unwrap();
        assert_eq!(index.len(), 4);
        assert_eq!(index.find(b"a", 1, ValueKind::Put), Some(0));
        assert_eq!(index.find(b"apple", 4, ValueKind::Put), Some(0));
        assert_eq!(index.find(b"apple", 3, ValueKind::Put), Some(1));
        assert_eq!(index.find(b"banana", 100, ValueKind::Put), Some(1));
        assert_eq!(
            index.find(b"banana", 5, ValueKind::Put),
            Some(2),
            "below seq 9, at or above seq 4"
        );
        assert_eq!(index.find(b"cherry", 4, ValueKind::Delete), None);
        assert_eq!(
            index.handle(2),
            BlockHandle {
                offset: 200,
                len: 100
            }
        );
        assert_eq!(index.last_key(3).0, b"cherry");
    }

    #[test]
    fn rejects_mismatches_with_the_footer() {
        let (sealed, footer) = built();
        let wrong_count = Footer {
            block_count: 3,
            ..footer
        };
        assert!(Index::decode(&sealed, TableId(8), &wrong_count).is_err());
        let wrong_end = Footer {
            index: BlockHandle {
                offset: 500,
                ..footer.index
            },
            ..footer
        };
        assert!(Index::decode(&sealed, TableId(8), &wrong_end).is_err());
        for i in 0..sealed.len() {
            let mut bad = sealed.clone();
            bad[i] ^= 0x20;
            let err = Index::decode(&bad, TableId(8), &footer).unwrap_err();
            assert!(err.to_string().contains("table 8 index block"), "{err}");
        }
    }
}
