//! Data blocks (docs/FORMAT.md §5.3 Tables, "Data block"): about 4 KiB of entries in
//! internal-key order, keys prefix-compressed against the previous entry, with restart
//! points for binary search.
//!
//! A block is `entry* restart* restart_count crc`. An entry is
//! `shared unshared value_len seq kind key_delta value` (varints except `kind`, a byte);
//! its user key is the first `shared` bytes of the previous entry's key followed by
//! `key_delta`.
//!
//! Invariants:
//! - Entry i starts a restart point iff i is a multiple of the restart interval; a restart
//!   entry has `shared == 0`, so its key can be read without its predecessors, and the
//!   restart offsets are increasing. Restart 0 is offset 0.
//! - Entries are strictly increasing in internal-key order.
//! - Readers check every length against the block before using it: a block that passed
//!   its checksum but decodes badly is reported as corruption, never read out of bounds.

use crate::error::MetaDbError;
use crate::table::layout::{
    corrupt, get_varint, get_varint32, put_varint, seal, varint_len, BLOCK_TRAILER_BYTES,
    RESTART_BYTES,
};
use crate::table::TableId;
use crate::types::{compare_internal, Seq, ValueKind};
use std::cmp::Ordering;
use std::sync::Arc;

/// Builds one data block in memory.
#[derive(Debug)]
pub struct BlockBuilder {
    buf: Vec<u8>,
    restarts: Vec<u32>,
    restart_interval: usize,
    entry_count: usize,
    last_key: Vec<u8>,
}

fn common_prefix_len(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Encoded bytes of one entry.
pub fn entry_len(shared: usize, user_key_len: usize, seq: Seq, value_len: usize) -> usize {
    let unshared = user_key_len - shared;
    varint_len(shared as u64)
        + varint_len(unshared as u64)
        + varint_len(value_len as u64)
        + varint_len(seq)
        + 1
        + unshared
        + value_len
}

impl BlockBuilder {
    pub fn new(restart_interval: usize) -> BlockBuilder {
        assert!(restart_interval >= 1, "restart interval must be positive");
        BlockBuilder {
            buf: Vec::with_capacity(8192),
            restarts: Vec::with_capacity(64),
            restart_interval,
            entry_count: 0,
            last_key: Vec::new(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.entry_count == 0
    }

    pub fn entry_count(&self) -> usize {
        self.entry_count
    }

    fn starts_restart(&self) -> bool {
        self.entry_count % self.restart_interval == 0
    }

    fn shared_for(&self, user_key: &[u8]) -> usize {
        if self.starts_restart() {
            0
        } else {
            common_prefix_len(&self.last_key, user_key)
        }
    }

    /// Length of the finished block (trailer and checksum included) if this entry were
    /// added next.
    pub fn len_with(&self, user_key: &[u8], seq: Seq, value_len: usize) -> usize {
        let restarts = self.restarts.len() + usize::from(self.starts_restart());
        self.buf.len()
            + entry_len(self.shared_for(user_key), user_key.len(), seq, value_len)
            + restarts * RESTART_BYTES
            + BLOCK_TRAILER_BYTES
    }

    /// Length of a block holding only this entry.
    pub fn single_entry_len(user_key_len: usize, seq: Seq, value_len: usize) -> usize {
        entry_len(0, user_key_len, seq, value_len) + RESTART_BYTES + BLOCK_TRAILER_BYTES
    }

    /// Length of the block if finished now.
    pub fn finished_len(&self) -> usize {
        assert!(!self.is_empty(), "an empty block is never written");
        self.buf.len() + self.restarts.len() * RESTART_BYTES + BLOCK_TRAILER_BYTES
    }

    /// Appends an entry. The caller keeps entries in strictly increasing internal-key order.
    pub fn add(&mut self, user_key: &[u8], seq: Seq, kind: ValueKind, value: &[u8]) {
        let shared = self.shared_for(user_key);
        if self.starts_restart() {
            self.restarts
                .push(u32::try_from(self.buf.len()).expect("a block is smaller than 4 GiB"));
        }
        let before = self.buf.len();
        put_varint(&mut self.buf, shared as u64);
        put_varint(&mut self.buf, (user_key.len() - shared) as u64);
        put_varint(&mut self.buf, value.len() as u64);
        put_varint(&mut self.buf, seq);
        self.buf.push(kind as u8);
        self.buf.extend_from_slice(&user_key[shared..]);
        self.buf.extend_from_slice(value);
        debug_assert_eq!(
            self.buf.len() - before,
            entry_len(shared, user_key.len(), seq, value.len())
        );
        self.last_key.truncate(shared);
        self.last_key.extend_from_slice(&user_key[shared..]);
        debug_assert_eq!(self.last_key, user_key);
        self.entry_count += 1;
    }

    /// Appends the restart array, count and checksum (for a block at `offset` of `table`),
    /// and returns the finished block. Call
    /// [`BlockBuilder::reset`] before adding to the next block.
    pub fn finish(&mut self, table: TableId, offset: u32) -> &[u8] {
        let expected = self.finished_len();
        for r in &self.restarts {
            self.buf.extend_from_slice(&r.to_le_bytes());
        }
        let count = u32::try_from(self.restarts.len()).expect("restart count fits u32");
        self.buf.extend_from_slice(&count.to_le_bytes());
        seal(table, offset, &mut self.buf);
        assert_eq!(
            self.buf.len(),
            expected,
            "finished length matches the estimate"
        );
        &self.buf
    }

    pub fn reset(&mut self) {
        self.buf.clear();
        self.restarts.clear();
        self.entry_count = 0;
        self.last_key.clear();
    }
}

/// A cursor over one verified block (checksum already checked and stripped).
#[derive(Debug)]
pub struct BlockIter {
    data: Arc<[u8]>,
    table: TableId,
    block_offset: u32,
    /// Start of the restart array: entries occupy `0..restarts_at`.
    restarts_at: usize,
    restart_count: usize,
    /// Offset just past the current entry.
    next_at: usize,
    key: Vec<u8>,
    seq: Seq,
    kind: ValueKind,
    value_at: usize,
    value_len: usize,
    valid: bool,
}

/// One decoded entry header.
struct RawEntry {
    shared: usize,
    unshared: usize,
    value_len: usize,
    seq: Seq,
    kind: ValueKind,
    /// Offset of the key delta.
    key_at: usize,
}

impl BlockIter {
    /// A cursor over `data` (a block without its checksum), invalid until positioned.
    pub fn new(
        data: Arc<[u8]>,
        table: TableId,
        block_offset: u32,
    ) -> Result<BlockIter, MetaDbError> {
        let mut it = BlockIter {
            data: Arc::clone(&data),
            table,
            block_offset,
            restarts_at: 0,
            restart_count: 0,
            next_at: 0,
            key: Vec::with_capacity(64),
            seq: 0,
            kind: ValueKind::Put,
            value_at: 0,
            value_len: 0,
            valid: false,
        };
        it.reset(data, block_offset)?;
        Ok(it)
    }

    /// Moves the cursor to another block, keeping its key buffer.
    pub fn reset(&mut self, data: Arc<[u8]>, block_offset: u32) -> Result<(), MetaDbError> {
        self.block_offset = block_offset;
        self.valid = false;
        self.key.clear();
        let len = data.len();
        if len < RESTART_BYTES + RESTART_BYTES {
            return Err(self.corrupt(format!("{len} bytes is too short for a restart array")));
        }
        let count = u32::from_le_bytes(data[len - 4..].try_into().expect("4 bytes")) as usize;
        let array_bytes = count.checked_mul(RESTART_BYTES).filter(|&b| b + 4 <= len);
        let Some(array_bytes) = array_bytes.filter(|_| count >= 1) else {
            return Err(self.corrupt(format!(
                "restart count {count} does not fit a {len}-byte block"
            )));
        };
        self.restarts_at = len - 4 - array_bytes;
        self.restart_count = count;
        self.data = data;
        if self.restart_offset(0)? != 0 {
            return Err(self.corrupt("restart 0 is not at offset 0".to_string()));
        }
        Ok(())
    }

    fn corrupt(&self, detail: String) -> MetaDbError {
        corrupt(
            self.table,
            &format!("data block at offset {}", self.block_offset),
            detail,
        )
    }

    fn restart_offset(&self, i: usize) -> Result<usize, MetaDbError> {
        debug_assert!(i < self.restart_count);
        let at = self.restarts_at + i * RESTART_BYTES;
        let off = u32::from_le_bytes(self.data[at..at + 4].try_into().expect("4 bytes")) as usize;
        if off >= self.restarts_at && !(off == 0 && self.restarts_at == 0) {
            return Err(self.corrupt(format!(
                "restart {i} at {off} beyond the entries ({})",
                self.restarts_at
            )));
        }
        Ok(off)
    }

    /// Decodes the entry header at `pos`, checking that the entry lies inside the entries.
    #[inline]
    fn raw_entry(&self, pos: usize) -> Result<RawEntry, MetaDbError> {
        let d = &self.data[..self.restarts_at];
        let mut p = pos;
        let truncated = || self.corrupt(format!("entry header at {pos} runs past the entries"));
        let shared = get_varint32(d, &mut p).ok_or_else(truncated)? as usize;
        let unshared = get_varint32(d, &mut p).ok_or_else(truncated)? as usize;
        let value_len = get_varint32(d, &mut p).ok_or_else(truncated)? as usize;
        let seq = get_varint(d, &mut p).ok_or_else(truncated)?;
        let kind = *d.get(p).ok_or_else(truncated)?;
        p += 1;
        let Some(kind) = ValueKind::from_u8(kind) else {
            return Err(self.corrupt(format!("entry at {pos} has unknown kind {kind}")));
        };
        if p + unshared + value_len > self.restarts_at {
            return Err(self.corrupt(format!("entry at {pos} runs past the entries")));
        }
        Ok(RawEntry {
            shared,
            unshared,
            value_len,
            seq,
            kind,
            key_at: p,
        })
    }

    /// Makes the entry at `pos` current; the key buffer must hold the previous entry's key.
    fn decode_at(&mut self, pos: usize) -> Result<(), MetaDbError> {
        let e = self.raw_entry(pos)?;
        if e.shared > self.key.len() {
            self.valid = false;
            return Err(self.corrupt(format!(
                "entry at {pos} shares {} of {} key bytes",
                e.shared,
                self.key.len()
            )));
        }
        self.key.truncate(e.shared);
        self.key
            .extend_from_slice(&self.data[e.key_at..e.key_at + e.unshared]);
        self.seq = e.seq;
        self.kind = e.kind;
        self.value_at = e.key_at + e.unshared;
        self.value_len = e.value_len;
        self.next_at = self.value_at + e.value_len;
        self.valid = true;
        Ok(())
    }

    /// Key of restart point `i`, read in place.
    fn restart_key(&self, i: usize) -> Result<(&[u8], Seq, ValueKind), MetaDbError> {
        let pos = self.restart_offset(i)?;
        let e = self.raw_entry(pos)?;
        if e.shared != 0 {
            return Err(self.corrupt(format!(
                "restart entry at {pos} shares {} key bytes",
                e.shared
            )));
        }
        Ok((&self.data[e.key_at..e.key_at + e.unshared], e.seq, e.kind))
    }

    pub fn seek_to_first(&mut self) -> Result<(), MetaDbError> {
        self.key.clear();
        self.valid = false;
        if self.restarts_at == 0 {
            return Ok(());
        }
        self.decode_at(0)
    }

    /// Positions at the first entry `>= (user_key, seq, kind)`, or invalid if none.
    pub fn seek(&mut self, user_key: &[u8], seq: Seq, kind: ValueKind) -> Result<(), MetaDbError> {
        self.valid = false;
        if self.restarts_at == 0 {
            return Ok(());
        }
        // The last restart whose key is below the target: the answer is at or after it.
        let (mut lo, mut hi) = (0, self.restart_count - 1);
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            let (k, s, t) = self.restart_key(mid)?;
            if compare_internal(k, s, t, user_key, seq, kind) == Ordering::Less {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        self.key.clear();
        let start = self.restart_offset(lo)?;
        self.decode_at(start)?;
        // At most one restart interval of entries lies below the target.
        while self.valid
            && compare_internal(&self.key, self.seq, self.kind, user_key, seq, kind)
                == Ordering::Less
        {
            self.advance()?;
        }
        Ok(())
    }

    /// Moves to the next entry; invalid past the last.
    pub fn advance(&mut self) -> Result<(), MetaDbError> {
        assert!(self.valid, "advance on an invalid block cursor");
        if self.next_at >= self.restarts_at {
            debug_assert_eq!(self.next_at, self.restarts_at);
            self.valid = false;
            return Ok(());
        }
        self.decode_at(self.next_at)
    }

    pub fn valid(&self) -> bool {
        self.valid
    }

    pub fn user_key(&self) -> &[u8] {
        debug_assert!(self.valid);
        &self.key
    }

    pub fn seq(&self) -> Seq {
        debug_assert!(self.valid);
        self.seq
    }

    pub fn kind(&self) -> ValueKind {
        debug_assert!(self.valid);
        self.kind
    }

    pub fn value(&self) -> &[u8] {
        debug_assert!(self.valid);
        &self.data[self.value_at..self.value_at + self.value_len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::layout::unseal;

    type Entry = (Vec<u8>, Seq, ValueKind, Vec<u8>);

    fn entries() -> Vec<Entry> {
        let mut v = Vec::new();
        for i in 0..100u32 {
            let key = format!("key{:05}", i * 2).into_bytes();
            for seq in (1..=3u64).rev() {
                let kind = if seq == 2 {
                    ValueKind::Delete
                } else {
                    ValueKind::Put
                };
                let value = if kind == ValueKind::Delete {
                    Vec::new()
                } else {
                    vec![i as u8; (i % 7) as usize]
                };
                v.push((key.clone(), seq * 10 + i as u64, kind, value));
            }
        }
        v
    }

    fn build(entries: &[Entry], interval: usize) -> Arc<[u8]> {
        let mut b = BlockBuilder::new(interval);
        for (k, s, t, v) in entries {
            let predicted = b.len_with(k, *s, v.len());
            b.add(k, *s, *t, v);
            assert_eq!(b.finished_len(), predicted);
        }
        let sealed = b.finish(TableId(5), 0).to_vec();
        Arc::from(unseal(TableId(5), 0, &sealed, &|| "block".into()).unwrap())
    }

    #[test]
    fn iterates_every_entry_in_order() {
        for interval in [1, 3, 16] {
            let es = entries();
            let mut it = BlockIter::new(build(&es, interval), TableId(5), 0).unwrap();
            it.seek_to_first().unwrap();
            for (k, s, t, v) in &es {
                assert!(it.valid());
                assert_eq!(
                    (it.user_key(), it.seq(), it.kind(), it.value()),
                    (&k[..], *s, *t, &v[..])
                );
                it.advance().unwrap();
            }
            assert!(!it.valid());
        }
    }

    #[test]
    fn seeks_land_on_the_first_entry_at_or_after_the_target() {
        let es = entries();
        let mut it = BlockIter::new(build(&es, 16), TableId(5), 0).unwrap();
        for (i, (k, s, t, _)) in es.iter().enumerate() {
            it.seek(k, *s, *t).unwrap();
            assert_eq!((it.user_key(), it.seq()), (&k[..], *s), "exact seek {i}");
            // Just after this entry: the next one.
            it.seek(k, *s - 1, ValueKind::Put).unwrap();
            match es.get(i + 1) {
                Some((k2, s2, _, _)) => assert_eq!((it.user_key(), it.seq()), (&k2[..], *s2)),
                None => assert!(!it.valid()),
            }
        }
        // Between user keys (odd numbers are absent), and before everything.
        it.seek(b"key00003", u64::MAX, ValueKind::Put).unwrap();
        assert_eq!(it.user_key(), b"key00004");
        it.seek(b"", u64::MAX, ValueKind::Put).unwrap();
        assert_eq!(it.user_key(), b"key00000");
        it.seek(b"zzz", 0, ValueKind::Delete).unwrap();
        assert!(!it.valid());
    }

    #[test]
    fn bad_restart_arrays_are_corruption() {
        let es = entries();
        let good = build(&es, 16);
        let mut bad = good.to_vec();
        let n = bad.len();
        bad[n - 4..].copy_from_slice(&10_000u32.to_le_bytes());
        assert!(matches!(
            BlockIter::new(Arc::from(bad), TableId(5), 0),
            Err(MetaDbError::Corruption { .. })
        ));
        let mut bad = good.to_vec();
        bad[n - 8..n - 4].copy_from_slice(&u32::MAX.to_le_bytes());
        let it = BlockIter::new(Arc::from(bad), TableId(5), 0);
        let err = it
            .and_then(|mut it| it.seek(b"key00190", 1, ValueKind::Put))
            .unwrap_err();
        assert!(err.to_string().contains("table 5 data block"), "{err}");
    }

    #[test]
    fn garbage_entries_never_panic() {
        // A checksum collision is the only way garbage gets here; it must still be safe.
        let mut rng = platform::Rng::from_seed(7);
        let good = build(&entries(), 4);
        for _ in 0..2000 {
            let mut bad = good.to_vec();
            let at = rng.below(bad.len() as u64) as usize;
            bad[at] = rng.next_u64() as u8;
            let Ok(mut it) = BlockIter::new(Arc::from(bad), TableId(5), 0) else {
                continue;
            };
            let _ = it.seek(b"key00100", 5, ValueKind::Put);
            if it.seek_to_first().is_ok() {
                let mut steps = 0;
                while it.valid() && it.advance().is_ok() {
                    steps += 1;
                    assert!(steps <= 10_000);
                }
            }
        }
    }
}
