//! An open table (docs/FORMAT.md §5.3 Tables): footer, index and bloom filter verified
//! and kept in memory; data blocks read on demand through the shared [`BlockCache`].
//!
//! Invariants:
//! - Nothing read from the device is used before its checksum and structure are checked;
//!   a failure is `MetaDbError::Corruption` naming the table id and the structure, never
//!   wrong data.
//! - The footer must agree with the manifest's entry (id, length, entry count), and the
//!   index's last key with the manifest's largest key (catches a stale or misdirected
//!   table in a reused segment).
//! - A point lookup reads at most one data block: the bloom filter first, then the first
//!   block whose last key is at or after (key, snapshot).
//! - Device reads cover the block with whole logical blocks; table blocks need not be
//!   aligned.

use crate::error::MetaDbError;
use crate::iter::InternalIterator;
use crate::table::block::BlockIter;
use crate::table::bloom::{self, Bloom};
use crate::table::cache::BlockCache;
use crate::table::index::Index;
use crate::table::layout::{
    corrupt, unseal, Footer, FOOTER_BYTES, TABLE_ALIGN_BYTES, TABLE_BYTES_MAX,
};
use crate::table::{TableId, TableMeta};
use crate::types::{compare_internal, InternalKey, Seq, ValueKind};
use device::{AlignedBuf, Device, IoCause, IoRequest};
use std::cmp::Ordering;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// Which of a just-written table's data blocks [`Table::open_written`] puts in the block
/// cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheFill {
    None,
    /// Every block, evicting the least recently used (a flush's newest keys).
    Evicting,
    /// Those the cache has room for, evicting nothing (a compaction's).
    IfRoom,
}

/// Counters of one table's lookups and reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TableStats {
    /// Lookups the bloom filter answered "absent" (no block read).
    pub bloom_skips: u64,
    /// Lookups that passed the filter and found the key.
    pub bloom_hits: u64,
    /// Lookups that passed the filter but found no version of the key.
    pub bloom_false_positives: u64,
    /// Data blocks read from the device (cache misses).
    pub block_reads: u64,
}

#[derive(Debug, Default)]
struct Counters {
    bloom_skips: AtomicU64,
    bloom_hits: AtomicU64,
    bloom_false_positives: AtomicU64,
    block_reads: AtomicU64,
}

/// How an iterator reads blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadOptions {
    pub cause: IoCause,
    /// Keep blocks read from the device in the cache (lookups and user scans do;
    /// compaction does not, so a merge does not flush the working set).
    pub fill_cache: bool,
    /// Bytes a sequential reader fetches per device read (0: one block at a time). A
    /// compaction reads whole tables (at most one segment) in one IO instead of hundreds
    /// of 4 KiB reads.
    pub readahead_bytes: usize,
}

impl ReadOptions {
    pub const LOOKUP: ReadOptions = ReadOptions {
        cause: IoCause::Table,
        fill_cache: true,
        readahead_bytes: 0,
    };
    pub const COMPACTION: ReadOptions = ReadOptions {
        cause: IoCause::Compaction,
        fill_cache: false,
        readahead_bytes: TABLE_BYTES_MAX,
    };
}

/// An open, verified table.
pub struct Table {
    meta: TableMeta,
    device: Arc<Device>,
    /// Byte offset of the table's segment on the device.
    base_offset: u64,
    cache: Arc<BlockCache>,
    footer: Footer,
    index: Index,
    bloom: Bloom,
    counters: Counters,
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("id", &self.meta.id)
            .field("segment", &self.meta.segment)
            .field("len_bytes", &self.meta.len_bytes)
            .field("entries", &self.meta.entries)
            .field("blocks", &self.index.len())
            .finish()
    }
}

fn align_down(v: u64, to: u64) -> u64 {
    v / to * to
}

fn align_up(v: u64, to: u64) -> u64 {
    v.div_ceil(to) * to
}

/// Reads (or takes from the already-read last 4 KiB, `tail`, at table offset `tail_at`)
/// and verifies the index and bloom blocks `footer` names, for the table at `offset`.
fn read_index_and_bloom(
    device: &Device,
    offset: u64,
    footer: &Footer,
    tail: &[u8],
    tail_at: u64,
) -> Result<(Index, Bloom), MetaDbError> {
    let id = footer.table_id;
    let (start, end) = (footer.index.offset as u64, footer.bloom.end());
    assert!(
        start < end && end <= tail_at + tail.len() as u64,
        "footer decode checked"
    );
    let read;
    let region: &[u8] = if start >= tail_at {
        &tail[(start - tail_at) as usize..(end - tail_at) as usize]
    } else {
        let lbs = device.info().logical_block_bytes as u64;
        let (a, e) = (align_down(start, lbs), align_up(end, lbs));
        let buf = AlignedBuf::zeroed((e - a) as usize);
        read = device.read(offset + a, buf, IoCause::Table)?;
        &read[(start - a) as usize..(end - a) as usize]
    };
    let index = Index::decode(&region[..footer.index.len as usize], id, footer)?;
    let bloom_bytes = &region[(footer.bloom.offset as u64 - start) as usize..];
    let bloom = Bloom::decode(bloom_bytes, id, footer.bloom.offset)?;
    Ok((index, bloom))
}

/// A table at most this long is read whole when opened, and its data blocks go to the
/// block cache (RocksDB prefetches a table's last 512 KiB at open, which reads small
/// tables whole the same way): a mount then serves its first lookups in a small store
/// without one device read per block.
pub const SMALL_TABLE_BYTES: usize = 64 << 10;

impl Table {
    /// Opens the table `meta` describes, written at byte `offset` of `device` (its
    /// segment's start): reads and verifies the footer, index and bloom filter (one or two
    /// reads); a table of at most [`SMALL_TABLE_BYTES`] is read whole in one request.
    pub fn open(
        device: Arc<Device>,
        offset: u64,
        meta: TableMeta,
        cache: Arc<BlockCache>,
    ) -> Result<Table, MetaDbError> {
        let id = meta.id;
        let len = meta.len_bytes as u64;
        assert!(
            offset % TABLE_ALIGN_BYTES as u64 == 0,
            "table {} at unaligned offset {offset}",
            id.0
        );
        let align = TABLE_ALIGN_BYTES as u64;
        if len < align
            || len % align != 0
            || len > TABLE_BYTES_MAX as u64
            || offset + len > device.size_bytes()
        {
            let detail =
                format!("length {len} at device offset {offset} is impossible for a table");
            return Err(corrupt(id, "manifest entry", detail));
        }
        if len <= SMALL_TABLE_BYTES as u64 {
            // One read of the whole table, its data blocks cached: a lookup's later
            // read of one of them would cost a request of its own.
            // A block that fails its checksum is left out, to be read (and reported) by
            // the lookup that needs it, as for any table: one bad block does not make
            // the whole table, and the mount, fail.
            let whole = device.read(offset, AlignedBuf::zeroed(len as usize), IoCause::Table)?;
            let table = Table::open_from_tail(device, offset, meta, cache, &whole, 0)?;
            table.cache_blocks(&whole, false, true)?;
            return Ok(table);
        }
        // The last 4 KiB: the footer, and for small tables the index and bloom too.
        let tail_at = len - align;
        let tail = device.read(
            offset + tail_at,
            AlignedBuf::zeroed(TABLE_ALIGN_BYTES),
            IoCause::Table,
        )?;
        Table::open_from_tail(device, offset, meta, cache, &tail, tail_at)
    }

    /// Opens the table `meta` describes from `bytes`, the whole table as it was just
    /// written at `offset` (a flush keeps its buffers, a compaction those the block
    /// cache has room for): no device read. Its data blocks go to the block cache as
    /// `fill` says: a flush's as a lookup reading them would put them (the keys a flush
    /// writes are the ones written last, and an overwrite's lookup of the mapping it
    /// replaces would otherwise read them straight back), a compaction's only where
    /// the cache has room.
    pub fn open_written(
        device: Arc<Device>,
        offset: u64,
        meta: TableMeta,
        cache: Arc<BlockCache>,
        bytes: &[u8],
        fill: CacheFill,
    ) -> Result<Table, MetaDbError> {
        assert_eq!(
            bytes.len(),
            meta.len_bytes as usize,
            "table {}: the written buffer is the table",
            meta.id.0
        );
        let table = Table::open_from_tail(device, offset, meta, cache, bytes, 0)?;
        match fill {
            CacheFill::None => {}
            CacheFill::Evicting => table.cache_blocks(bytes, true, true)?,
            CacheFill::IfRoom => table.cache_blocks(bytes, true, false)?,
        }
        Ok(table)
    }

    /// Puts every data block of `bytes` (the whole table) in the block cache, evicting
    /// for room if `evict`. A block that fails its checksum is an error when `strict`,
    /// else left out.
    fn cache_blocks(&self, bytes: &[u8], strict: bool, evict: bool) -> Result<(), MetaDbError> {
        for i in 0..self.index.len() {
            let handle = self.index.handle(i);
            let sealed = &bytes[handle.offset as usize..handle.end() as usize];
            match unseal(self.id(), handle.offset, sealed, &|| {
                format!("data block at offset {}", handle.offset)
            }) {
                Ok(body) if evict => self.cache.insert(self.id(), handle.offset, Arc::from(body)),
                Ok(body) => self
                    .cache
                    .insert_if_room(self.id(), handle.offset, Arc::from(body)),
                Err(e) if strict => return Err(e),
                Err(_) => {}
            }
        }
        Ok(())
    }

    /// The rest of [`Table::open`]: `tail` holds the table's bytes from `tail_at` to its
    /// end (the footer, and the index and bloom when they lie there).
    fn open_from_tail(
        device: Arc<Device>,
        offset: u64,
        meta: TableMeta,
        cache: Arc<BlockCache>,
        tail: &[u8],
        tail_at: u64,
    ) -> Result<Table, MetaDbError> {
        let id = meta.id;
        let footer = Footer::decode(&tail[tail.len() - FOOTER_BYTES..], id, meta.len_bytes)?;
        if footer.entry_count != meta.entries {
            let detail = format!(
                "entry count expected {} (manifest), got {}",
                meta.entries, footer.entry_count
            );
            return Err(corrupt(id, "footer", detail));
        }
        let (index, bloom) = read_index_and_bloom(&device, offset, &footer, tail, tail_at)?;
        let (k, s, t) = index.last_key(index.len() - 1);
        let largest = &meta.largest;
        if compare_internal(k, s, t, &largest.user_key, largest.seq, largest.kind)
            != Ordering::Equal
        {
            let detail =
                format!("last key ({k:?}, {s}) differs from the manifest's largest {largest:?}");
            return Err(corrupt(id, "index block", detail));
        }
        Ok(Table {
            meta,
            device,
            base_offset: offset,
            cache,
            footer,
            index,
            bloom,
            counters: Counters::default(),
        })
    }

    pub fn id(&self) -> TableId {
        self.meta.id
    }

    pub fn meta(&self) -> &TableMeta {
        &self.meta
    }

    pub fn block_count(&self) -> usize {
        self.index.len()
    }

    /// Bytes of memory the index and filter hold while the table is open.
    pub fn memory_bytes(&self) -> usize {
        self.index.memory_bytes() + self.bloom.bit_count() / 8
    }

    pub fn stats(&self) -> TableStats {
        TableStats {
            bloom_skips: self.counters.bloom_skips.load(Relaxed),
            bloom_hits: self.counters.bloom_hits.load(Relaxed),
            bloom_false_positives: self.counters.bloom_false_positives.load(Relaxed),
            block_reads: self.counters.block_reads.load(Relaxed),
        }
    }

    /// False only if the table holds no version of `user_key`.
    pub fn may_contain(&self, user_key: &[u8]) -> bool {
        self.bloom.may_contain(user_key)
    }

    /// The newest version of `user_key` with sequence number `<= snapshot`: (seq, kind,
    /// value). Tombstones are returned (kind `Delete`): they hide older tables' versions.
    pub fn get(
        &self,
        user_key: &[u8],
        snapshot: Seq,
    ) -> Result<Option<(Seq, ValueKind, Vec<u8>)>, MetaDbError> {
        self.get_hashed(user_key, bloom::key_hash(user_key), snapshot)
    }

    /// [`Table::get`] with the key's [`bloom::key_hash`] computed once by the caller for
    /// all the tables it probes.
    pub fn get_hashed(
        &self,
        user_key: &[u8],
        hash: u64,
        snapshot: Seq,
    ) -> Result<Option<(Seq, ValueKind, Vec<u8>)>, MetaDbError> {
        debug_assert_eq!(hash, bloom::key_hash(user_key));
        if user_key < &self.meta.smallest.user_key[..] || user_key > &self.meta.largest.user_key[..]
        {
            return Ok(None);
        }
        if !self.bloom.may_contain_hash(hash) {
            self.counters.bloom_skips.fetch_add(1, Relaxed);
            return Ok(None);
        }
        let found = match self.index.find(user_key, snapshot, ValueKind::Put) {
            None => None,
            Some(i) => {
                let mut it = BlockIter::new(
                    self.read_block(i, ReadOptions::LOOKUP)?,
                    self.id(),
                    self.index.handle(i).offset,
                )?;
                it.seek(user_key, snapshot, ValueKind::Put)?;
                // The block's last key is at or after the target, so the cursor is valid
                // unless block and index disagree.
                if !it.valid() {
                    let what = format!("data block at offset {}", self.index.handle(i).offset);
                    return Err(corrupt(self.id(), &what, "ends below its index key"));
                }
                (it.user_key() == user_key).then(|| (it.seq(), it.kind(), it.value().to_vec()))
            }
        };
        let counter = if found.is_some() {
            &self.counters.bloom_hits
        } else {
            &self.counters.bloom_false_positives
        };
        counter.fetch_add(1, Relaxed);
        Ok(found)
    }

    /// Data block `i` (checksum verified and stripped), from the cache or the device.
    fn read_block(&self, i: usize, options: ReadOptions) -> Result<Arc<[u8]>, MetaDbError> {
        self.read_block_ahead(i, options, &mut None)
    }

    /// [`Table::read_block`] through a read-ahead `window`: a block the window covers is
    /// taken from it; otherwise, with `options.readahead_bytes > 0`, the window is refilled
    /// with one device read starting at the block.
    fn read_block_ahead(
        &self,
        i: usize,
        options: ReadOptions,
        window: &mut Option<Window>,
    ) -> Result<Arc<[u8]>, MetaDbError> {
        let handle = self.index.handle(i);
        if let Some(block) = self.cache.get(self.id(), handle.offset) {
            return Ok(block);
        }
        assert!(
            handle.end() <= self.footer.index.offset as u64,
            "index decode checked block bounds"
        );
        let lbs = self.device.info().logical_block_bytes as u64;
        let start = self.base_offset + handle.offset as u64;
        let end = start + handle.len as u64;
        let covered = window
            .as_ref()
            .is_some_and(|w| w.start <= start && end <= w.start + w.buf.len() as u64);
        if !covered {
            self.counters.block_reads.fetch_add(1, Relaxed);
            let data_end = self.base_offset + self.footer.index.offset as u64;
            let want_end = end.max((start + options.readahead_bytes as u64).min(data_end));
            let (a, e) = (align_down(start, lbs), align_up(want_end, lbs));
            let buf = self
                .device
                .read(a, AlignedBuf::zeroed((e - a) as usize), options.cause)?;
            *window = Some(Window { start: a, buf });
        }
        let w = window.as_ref().expect("window filled");
        let sealed = &w.buf[(start - w.start) as usize..(end - w.start) as usize];
        let body = unseal(self.id(), handle.offset, sealed, &|| {
            format!("data block at offset {}", handle.offset)
        })?;
        let block: Arc<[u8]> = Arc::from(body);
        if options.fill_cache {
            self.cache
                .insert(self.id(), handle.offset, Arc::clone(&block));
        }
        if options.readahead_bytes == 0 {
            *window = None;
        }
        Ok(block)
    }

    /// A cursor over every entry, for lookups and scans (fills the cache).
    pub fn iter(self: &Arc<Self>) -> TableIterator {
        self.iter_with(ReadOptions::LOOKUP)
    }

    pub fn iter_with(self: &Arc<Self>, options: ReadOptions) -> TableIterator {
        TableIterator {
            table: Arc::clone(self),
            options,
            block_index: 0,
            block: None,
            window: None,
        }
    }

    /// One read of every data block (sector-aligned), so that a compaction can fetch
    /// all of its inputs in one concurrent batch and merge from memory
    /// ([`Table::iter_preloaded`]).
    pub fn data_read(&self, cause: IoCause) -> IoRequest {
        let lbs = self.device.info().logical_block_bytes as u64;
        let start = align_down(self.base_offset, lbs);
        let end = align_up(self.base_offset + self.footer.index.offset as u64, lbs);
        IoRequest::read(start, AlignedBuf::zeroed((end - start) as usize), cause)
    }

    /// A cursor whose blocks come from `data`, the buffer of a completed
    /// [`Table::data_read`] (blocks are still checksum-verified as they are used).
    pub fn iter_preloaded(
        self: &Arc<Self>,
        options: ReadOptions,
        data: AlignedBuf,
    ) -> TableIterator {
        let start = align_down(
            self.base_offset,
            self.device.info().logical_block_bytes as u64,
        );
        TableIterator {
            window: Some(Window { start, buf: data }),
            ..self.iter_with(options)
        }
    }
}

/// A cursor over a table's entries in internal-key order; loads blocks as it goes.
#[derive(Debug)]
pub struct TableIterator {
    table: Arc<Table>,
    options: ReadOptions,
    /// Block `block` is positioned in.
    block_index: usize,
    /// `None` before the first positioning, past the end, and after an error.
    block: Option<BlockIter>,
    /// Bytes read ahead of the current block (compaction reads whole tables at once).
    window: Option<Window>,
}

/// Device bytes read ahead: `buf` holds the device range starting at byte `start`.
#[derive(Debug)]
struct Window {
    start: u64,
    buf: AlignedBuf,
}

impl TableIterator {
    fn load(&mut self, i: usize) -> Result<(), MetaDbError> {
        let data = self
            .table
            .read_block_ahead(i, self.options, &mut self.window)?;
        let offset = self.table.index.handle(i).offset;
        match &mut self.block {
            Some(b) => b.reset(data, offset)?,
            None => self.block = Some(BlockIter::new(data, self.table.id(), offset)?),
        }
        self.block_index = i;
        Ok(())
    }

    /// Moves past exhausted blocks to the next entry, if any.
    fn skip_exhausted(&mut self) -> Result<(), MetaDbError> {
        while let Some(b) = &self.block {
            if b.valid() {
                return Ok(());
            }
            let next = self.block_index + 1;
            if next >= self.table.index.len() {
                self.block = None;
                return Ok(());
            }
            self.load(next)?;
            self.block.as_mut().expect("loaded").seek_to_first()?;
        }
        Ok(())
    }

    fn seek_inner(&mut self, target: &InternalKey) -> Result<(), MetaDbError> {
        let Some(i) = self
            .table
            .index
            .find(&target.user_key, target.seq, target.kind)
        else {
            self.block = None;
            return Ok(());
        };
        self.load(i)?;
        self.block
            .as_mut()
            .expect("loaded")
            .seek(&target.user_key, target.seq, target.kind)?;
        self.skip_exhausted()
    }

    fn seek_to_first_inner(&mut self) -> Result<(), MetaDbError> {
        self.load(0)?;
        self.block.as_mut().expect("loaded").seek_to_first()?;
        self.skip_exhausted()
    }

    fn next_inner(&mut self) -> Result<(), MetaDbError> {
        self.block
            .as_mut()
            .expect("next on an invalid table iterator")
            .advance()?;
        self.skip_exhausted()
    }

    /// Runs a positioning step; after an error the cursor is invalid.
    fn step(&mut self, f: fn(&mut Self) -> Result<(), MetaDbError>) -> Result<(), MetaDbError> {
        let r = f(self);
        if r.is_err() {
            self.block = None;
        }
        r
    }

    fn current(&self) -> &BlockIter {
        self.block
            .as_ref()
            .filter(|b| b.valid())
            .expect("table iterator is valid")
    }

    pub fn table(&self) -> &Arc<Table> {
        &self.table
    }
}

impl InternalIterator for TableIterator {
    fn seek(&mut self, target: &InternalKey) -> Result<(), MetaDbError> {
        let r = self.seek_inner(target);
        if r.is_err() {
            self.block = None;
        }
        r
    }

    fn seek_to_first(&mut self) -> Result<(), MetaDbError> {
        self.step(Self::seek_to_first_inner)
    }

    fn valid(&self) -> bool {
        self.block.as_ref().is_some_and(|b| b.valid())
    }

    fn user_key(&self) -> &[u8] {
        self.current().user_key()
    }

    fn seq(&self) -> Seq {
        self.current().seq()
    }

    fn kind(&self) -> ValueKind {
        self.current().kind()
    }

    fn value(&self) -> &[u8] {
        self.current().value()
    }

    fn next(&mut self) -> Result<(), MetaDbError> {
        self.step(Self::next_inner)
    }
}
