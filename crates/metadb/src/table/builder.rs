//! Writes one table (docs/FORMAT.md §5.3 Tables) into an aligned buffer, ready for a
//! single device write at its segment's offset.
//!
//! Memtable flush and compaction feed entries in internal-key order; [`TableBuilder::add`]
//! refuses an entry that would push the finished table past its size limit (one segment),
//! and the caller finishes this table and starts the next with that entry.
//!
//! Invariants:
//! - Entries are strictly increasing in internal-key order (asserted on every add).
//! - `estimated_len()` is exactly the length `finish` will produce, and never exceeds
//!   `table_bytes_max`; `add` checks the length the table would have *after* the entry,
//!   including the entry's index entry, bloom growth, padding and footer.
//! - Data blocks are cut before an entry that would take the block past the target, so a
//!   block exceeds the target only when it holds a single large entry.

use crate::table::block::BlockBuilder;
use crate::table::bloom::{self, BloomBuilder};
use crate::table::index::{self, IndexBuilder};
use crate::table::layout::{
    align_table_len, BlockHandle, Footer, BLOCK_BYTES_TARGET_DEFAULT, BLOOM_BITS_PER_KEY_DEFAULT,
    FOOTER_BYTES, INDEX_TRAILER_BYTES, RESTART_INTERVAL_DEFAULT, TABLE_ALIGN_BYTES,
    TABLE_BYTES_MAX, USER_KEY_BYTES_MAX, VALUE_BYTES_MAX,
};
use crate::table::{TableId, TableMeta};
use crate::types::{compare_internal, InternalKey, Seq, ValueKind};
use device::AlignedBuf;
use format::SegmentNo;
use std::cmp::Ordering;

/// How tables are built. The defaults are the format's; tests shrink them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableOptions {
    /// Data blocks are cut before they would exceed this.
    pub block_bytes_target: usize,
    /// Entries between restart points in a data block.
    pub restart_interval: usize,
    pub bloom_bits_per_key: u32,
    /// Largest table, a multiple of 4096 and at most one segment.
    pub table_bytes_max: usize,
}

impl Default for TableOptions {
    fn default() -> Self {
        TableOptions {
            block_bytes_target: BLOCK_BYTES_TARGET_DEFAULT,
            restart_interval: RESTART_INTERVAL_DEFAULT,
            bloom_bits_per_key: BLOOM_BITS_PER_KEY_DEFAULT,
            table_bytes_max: TABLE_BYTES_MAX,
        }
    }
}

/// What a finished table holds; with the segment it is written to, a [`TableMeta`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuiltTable {
    pub id: TableId,
    pub len_bytes: u32,
    pub entries: u64,
    pub smallest: InternalKey,
    pub largest: InternalKey,
    pub block_count: u32,
    /// Distinct user keys (the bloom filter's n).
    pub user_keys: u64,
}

impl BuiltTable {
    pub fn meta(&self, segment: SegmentNo) -> TableMeta {
        TableMeta {
            id: self.id,
            segment,
            len_bytes: self.len_bytes,
            entries: self.entries,
            smallest: self.smallest.clone(),
            largest: self.largest.clone(),
        }
    }
}

/// A table buffer's first size; it doubles as the table grows.
const BUF_START_BYTES: usize = 64 << 10;

/// Builds one table.
#[derive(Debug)]
pub struct TableBuilder {
    id: TableId,
    options: TableOptions,
    /// The table so far, written in place; zeroed, so padding needs no work. Grows
    /// (doubling) as blocks are added.
    buf: AlignedBuf,
    /// Bytes of finished data blocks at the start of `buf`.
    data_len: usize,
    block: BlockBuilder,
    index: IndexBuilder,
    bloom: BloomBuilder,
    entries: u64,
    smallest: Option<InternalKey>,
    last_key: Vec<u8>,
    last_seq: Seq,
    last_kind: ValueKind,
}

impl TableBuilder {
    pub fn new(id: TableId, options: TableOptions) -> TableBuilder {
        let o = options;
        assert!(o.table_bytes_max % TABLE_ALIGN_BYTES == 0 && o.table_bytes_max <= TABLE_BYTES_MAX);
        assert!(o.block_bytes_target >= 64 && o.block_bytes_target < o.table_bytes_max);
        TableBuilder {
            id,
            options,
            buf: AlignedBuf::zeroed(BUF_START_BYTES.min(o.table_bytes_max)),
            data_len: 0,
            block: BlockBuilder::new(o.restart_interval),
            index: IndexBuilder::new(),
            bloom: BloomBuilder::new(o.bloom_bits_per_key),
            entries: 0,
            smallest: None,
            last_key: Vec::new(),
            last_seq: 0,
            last_kind: ValueKind::Put,
        }
    }

    pub fn id(&self) -> TableId {
        self.id
    }

    pub fn entry_count(&self) -> u64 {
        self.entries
    }

    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// Total length of a table with these parts, padded and with its footer.
    fn table_len(&self, data_len: usize, index_entries_len: usize, user_keys: usize) -> usize {
        let bloom_len = bloom::block_len(user_keys, self.options.bloom_bits_per_key);
        align_table_len(
            data_len + index_entries_len + INDEX_TRAILER_BYTES + bloom_len + FOOTER_BYTES,
        )
    }

    /// The length `finish` would return now.
    pub fn estimated_len(&self) -> usize {
        if self.block.is_empty() {
            return self.table_len(self.data_len, self.index.len(), self.bloom.key_count());
        }
        let data = self.data_len + self.block.finished_len();
        let index = self.index.len() + index::entry_len(self.last_key.len(), self.last_seq);
        self.table_len(data, index, self.bloom.key_count())
    }

    /// Adds an entry, or returns false (changing nothing) if the table would then exceed
    /// `table_bytes_max`: finish this table and add the entry to the next one. An empty
    /// builder always accepts an entry within the key and value limits.
    #[must_use = "a refused entry must go to the next table"]
    pub fn add(&mut self, user_key: &[u8], seq: Seq, kind: ValueKind, value: &[u8]) -> bool {
        assert!(
            user_key.len() <= USER_KEY_BYTES_MAX,
            "user key of {} bytes beyond the limit",
            user_key.len()
        );
        assert!(
            value.len() <= VALUE_BYTES_MAX,
            "value of {} bytes beyond the limit",
            value.len()
        );
        let first = self.entries == 0;
        self.assert_after_last(user_key, seq, kind);
        let new_user_key = first || self.last_key != user_key;
        let (cut, len_after) = self.plan(user_key, seq, value.len(), new_user_key);
        if len_after > self.options.table_bytes_max {
            assert!(
                !first,
                "an entry within the limits always fits an empty table"
            );
            return false;
        }
        if cut {
            self.finish_block();
        }
        self.block.add(user_key, seq, kind, value);
        if new_user_key {
            self.bloom.add_key(user_key);
        }
        if first {
            self.smallest = Some(InternalKey::new(user_key, seq, kind));
        }
        self.last_key.clear();
        self.last_key.extend_from_slice(user_key);
        (self.last_seq, self.last_kind) = (seq, kind);
        self.entries += 1;
        debug_assert!(self.estimated_len() <= self.options.table_bytes_max);
        true
    }

    fn assert_after_last(&self, user_key: &[u8], seq: Seq, kind: ValueKind) {
        let (k, s, t) = (&self.last_key, self.last_seq, self.last_kind);
        assert!(
            self.entries == 0 || compare_internal(k, s, t, user_key, seq, kind) == Ordering::Less,
            "table {} entries out of order: ({user_key:?}, {seq}) after ({k:?}, {s})",
            self.id.0,
        );
    }

    /// Whether the entry would start a new data block, and the table's length after it
    /// (its block, its index entry, the bloom filter's growth, padding and footer).
    fn plan(
        &self,
        user_key: &[u8],
        seq: Seq,
        value_len: usize,
        new_user_key: bool,
    ) -> (bool, usize) {
        let user_keys = self.bloom.key_count() + usize::from(new_user_key);
        let in_block = self.block.len_with(user_key, seq, value_len);
        let cut = !self.block.is_empty() && in_block > self.options.block_bytes_target;
        let (data, index, block) = if cut {
            let closed = index::entry_len(self.last_key.len(), self.last_seq);
            let alone = BlockBuilder::single_entry_len(user_key.len(), seq, value_len);
            (
                self.data_len + self.block.finished_len(),
                self.index.len() + closed,
                alone,
            )
        } else {
            (self.data_len, self.index.len(), in_block)
        };
        let index = index + index::entry_len(user_key.len(), seq);
        (cut, self.table_len(data + block, index, user_keys))
    }

    /// [`TableBuilder::add`] for an [`InternalKey`].
    #[must_use = "a refused entry must go to the next table"]
    pub fn add_key(&mut self, key: &InternalKey, value: &[u8]) -> bool {
        self.add(&key.user_key, key.seq, key.kind, value)
    }

    /// Makes `buf` (holding `used` bytes) at least `needed` bytes long, doubling up to
    /// `max`: a table's buffer grows with it, so a small flush never zeroes (and faults
    /// in) a whole table-sized buffer. Bytes past `used` stay zero.
    fn grow(buf: &mut AlignedBuf, used: usize, needed: usize, max: usize) {
        if needed <= buf.len() {
            return;
        }
        let len = needed.max(buf.len() * 2).min(max);
        let mut bigger = AlignedBuf::zeroed(len);
        bigger[..used].copy_from_slice(&buf[..used]);
        *buf = bigger;
    }

    fn finish_block(&mut self) {
        assert!(!self.block.is_empty());
        let offset = u32::try_from(self.data_len).expect("table offsets fit u32");
        let bytes = self.block.finish(self.id, offset);
        let end = self.data_len + bytes.len();
        assert!(
            end <= self.options.table_bytes_max,
            "a block past the table limit; add() checks this"
        );
        Self::grow(
            &mut self.buf,
            self.data_len,
            end,
            self.options.table_bytes_max,
        );
        self.buf[self.data_len..end].copy_from_slice(bytes);
        let handle = BlockHandle {
            offset,
            len: u32::try_from(bytes.len()).expect("block length fits u32"),
        };
        self.index
            .add(&self.last_key, self.last_seq, self.last_kind, handle);
        self.data_len = end;
        self.block.reset();
    }

    /// Finishes the table: the buffer to write (length a multiple of 4096) and what it
    /// holds. Panics on an empty builder: callers never write empty tables.
    pub fn finish(mut self) -> (AlignedBuf, BuiltTable) {
        assert!(
            self.entries > 0,
            "table {} finished with no entries",
            self.id.0
        );
        let expected_len = self.estimated_len();
        if !self.block.is_empty() {
            self.finish_block();
        }
        let block_count = self.index.count();
        let as_u32 = |v: usize| u32::try_from(v).expect("table offsets fit u32");
        let index_at = self.data_len;
        let index = self.index.finish(self.id, as_u32(index_at));
        let bloom_at = index_at + index.len();
        let bloom = self.bloom.finish(self.id, as_u32(bloom_at));
        let len = align_table_len(bloom_at + bloom.len() + FOOTER_BYTES);
        assert_eq!(len, expected_len, "estimated length is exact");
        assert!(len <= self.options.table_bytes_max);
        Self::grow(
            &mut self.buf,
            self.data_len,
            len,
            self.options.table_bytes_max,
        );
        self.buf[index_at..bloom_at].copy_from_slice(&index);
        self.buf[bloom_at..bloom_at + bloom.len()].copy_from_slice(&bloom);
        let footer = Footer {
            table_id: self.id,
            block_count,
            entry_count: self.entries,
            index: BlockHandle {
                offset: as_u32(index_at),
                len: as_u32(index.len()),
            },
            bloom: BlockHandle {
                offset: as_u32(bloom_at),
                len: as_u32(bloom.len()),
            },
            table_len: as_u32(len),
        };
        self.buf[len - FOOTER_BYTES..len].copy_from_slice(&footer.encode());
        self.buf.set_len(len);
        let built = BuiltTable {
            id: self.id,
            len_bytes: as_u32(len),
            entries: self.entries,
            smallest: self.smallest.take().expect("set by the first add"),
            largest: InternalKey::new(
                std::mem::take(&mut self.last_key),
                self.last_seq,
                self.last_kind,
            ),
            block_count,
            user_keys: self.bloom.key_count() as u64,
        };
        (self.buf, built)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimated_len_is_exact_at_every_step() {
        let mut b = TableBuilder::new(TableId(1), TableOptions::default());
        let mut last = 0;
        for i in 0..3000u32 {
            let key = format!("key{i:06}");
            assert!(b.add(key.as_bytes(), 5, ValueKind::Put, &[7u8; 40]));
            let est = b.estimated_len();
            assert!(est >= last && est % 4096 == 0);
            last = est;
        }
        let (buf, built) = b.finish();
        assert_eq!(buf.len(), last);
        assert_eq!(built.len_bytes as usize, last);
        assert_eq!((built.entries, built.user_keys), (3000, 3000));
        assert_eq!(
            built.smallest,
            InternalKey::new(b"key000000".to_vec(), 5, ValueKind::Put)
        );
        assert_eq!(
            built.largest,
            InternalKey::new(b"key002999".to_vec(), 5, ValueKind::Put)
        );
        assert!(built.block_count > 30, "about 60 entries per 4 KiB block");
    }

    #[test]
    fn refuses_at_the_limit_and_the_refusal_changes_nothing() {
        let options = TableOptions {
            table_bytes_max: 16384,
            ..TableOptions::default()
        };
        let mut b = TableBuilder::new(TableId(2), options);
        let mut n = 0u32;
        while b.add(
            format!("k{n:05}").as_bytes(),
            1,
            ValueKind::Put,
            &[1u8; 100],
        ) {
            n += 1;
        }
        let before = b.estimated_len();
        assert!(
            !b.add(
                format!("k{n:05}").as_bytes(),
                1,
                ValueKind::Put,
                &[1u8; 100]
            ),
            "still refused"
        );
        assert_eq!(b.estimated_len(), before);
        assert!(n > 100);
        let (buf, built) = b.finish();
        assert!(buf.len() <= 16384);
        assert_eq!(built.entries, n as u64);
    }

    #[test]
    #[should_panic(expected = "out of order")]
    fn out_of_order_entries_are_a_bug() {
        let mut b = TableBuilder::new(TableId(3), TableOptions::default());
        assert!(b.add(b"b", 5, ValueKind::Put, b""));
        let _ = b.add(b"b", 6, ValueKind::Put, b"");
    }

    #[test]
    fn the_largest_entry_fits_an_empty_table() {
        let mut b = TableBuilder::new(TableId(4), TableOptions::default());
        let key = vec![b'k'; USER_KEY_BYTES_MAX];
        assert!(b.add(&key, u64::MAX, ValueKind::Put, &vec![1u8; VALUE_BYTES_MAX]));
        assert!(!b.add(&key, 1, ValueKind::Put, &vec![1u8; VALUE_BYTES_MAX]));
        let (buf, _) = b.finish();
        assert!(buf.len() <= TABLE_BYTES_MAX);
    }
}
