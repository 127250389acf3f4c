//! File data: reads and writes through the page cache ([`crate::pagecache`]), write-back,
//! truncate, fsync and sync, and the background flusher.
//!
//! A write copies into pages and marks them dirty; the file's new size and times live in
//! its in-memory inode until the pages are written back. Write-back sends each run of
//! consecutive dirty blocks to the engine in one batch with the inode's record (size,
//! times, exact block count), in ascending order, each batch's size covering only what
//! is written so far: after a crash a file is always some prefix of its write-backs.
//! Every other writer of a file's record (attribute changes, links, renames, xattrs,
//! truncate, fallocate) writes the dirty pages back first ([`Core::write_back`]), so the
//! log sees the same writes in the same order as a write-through file system would,
//! only fewer and larger. An fsync writes back, then persists as before.
//!
//! Concurrency (docs/DESIGN.md §4c): a writer holds its block range ([`crate::rangelock::RangeLock`]) while
//! it builds new blocks, then installs them and the new size under the inode's state
//! lock for a moment; a reader snapshots the size and the cached blocks under the same
//! lock for a moment and copies without any lock (blocks are immutable), so it never
//! waits for a writer's copying or device reads, and sees each write whole or not at
//! all. A write-back holds the inode's write-back lock across its device IO and the
//! state lock only to snapshot and to note its result, so writers and readers go on
//! meanwhile.
//!
//! Invariants:
//! - Dirty pages lie below the in-memory size; pages are dropped (not written back) only
//!   when the file is deleted or its blocks change under the cache (truncate,
//!   fallocate), and then after writing back.
//! - Bytes past the end of a file are zeros in any page whose block the file grows
//!   over (a truncate may have left old bytes in the block on the device).

use crate::error::VfsError;
use crate::fs::{Core, FileSystem, BLOCK, FILE_SIZE_MAX};
use crate::handle::{live, Handle, InodeState};
use crate::pagecache::{zero_block, Block, Pages, PAGE};
use crate::rangelock::BlockRange;
use crate::readahead::{Job, ReadAhead};
use crate::records::{self, Inode, Kind};
use engine::log::keys::FileBlock;
use engine::log::{Durability, Extra, WriteOptions};
use format::InodeNo;
use metadb::WriteBatch;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Blocks per engine write (keeps each batch well under MetaDB's record limit).
const WRITE_CHUNK_BLOCKS: u64 = 256;
/// Segments the room for dirty pages leaves for MetaDB's tables to grow into between
/// look-ups of the room (a flush or compaction writes a table before it frees the old
/// ones). Not a bound MetaDB keeps: writes let in against the room hold no reservation in
/// the segment pool (docs/DESIGN.md, the page cache).
const METADB_GROWTH: u32 = 2;
/// A sequential reader's first read-ahead window, in blocks.
const READAHEAD_START: u64 = 8;
/// The most blocks one background read-ahead job reads (512 KiB).
const READAHEAD_JOB_BLOCKS: u64 = 128;
/// Lock-free read passes before a reader holds the state lock across its device reads
/// (a pass is retried when a writer installed blocks it was fetching).
const READ_PASSES: u32 = 3;

/// Where a data write goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum At {
    Offset(u64),
    /// At the end of the file (O_APPEND), atomically.
    End,
}

impl At {
    /// Where the write goes in a file of `size` bytes.
    fn offset(self, size: u64) -> u64 {
        match self {
            At::Offset(o) => o,
            At::End => size,
        }
    }
}

/// How a write-back reaches the inode's state.
enum StateAccess<'a> {
    /// The caller holds the inode for writing its record ([`Handle::write`]).
    Held(&'a mut InodeState),
    /// A write-back on its own: it holds the write-back lock and takes the state lock
    /// only to snapshot and to note its result.
    Own(&'a Handle),
}

impl Core {
    /// Writes whole blocks `first..` of `ino` with `inode` (its new attributes) in the
    /// same batch, its block count adjusted by the blocks the write newly maps.
    pub(crate) fn write_blocks(
        &self,
        ino: InodeNo,
        inode: &mut Inode,
        first: FileBlock,
        data: &[u8],
    ) -> Result<(), VfsError> {
        let count = (data.len() as u64) / BLOCK;
        self.write_ranges(ino, inode, &[(first, count)], data, None)
    }

    /// [`Core::write_blocks`] for several ranges (ascending) in one batch.
    /// `fsync`: the write is an fsync of these inodes' domains (`ino`'s included).
    fn write_ranges(
        &self,
        ino: InodeNo,
        inode: &mut Inode,
        ranges: &[(FileBlock, u64)],
        data: &[u8],
        fsync: Option<&[InodeNo]>,
    ) -> Result<(), VfsError> {
        self.record_in(ino, ino)?;
        let counted = Counted::new(ino, inode);
        let extra = Extra::Counted(&|delta| counted.batch(delta));
        let opts = match fsync {
            Some(also) => WriteOptions::fsync_also(extra, also),
            None => WriteOptions::new(extra, Durability::Buffered),
        };
        self.engine.write(ino, ranges, data, opts)?;
        *inode = counted.done();
        Ok(())
    }

    /// Unmaps blocks `from..to` (to the end without `to`) of `ino` with `inode` in the
    /// same batch, its block count adjusted.
    pub(crate) fn punch_blocks(
        &self,
        ino: InodeNo,
        inode: &mut Inode,
        from: FileBlock,
        to: Option<FileBlock>,
    ) -> Result<(), VfsError> {
        self.record_in(ino, ino)?;
        let counted = Counted::new(ino, inode);
        let extra = Extra::Counted(&|delta| counted.batch(delta));
        self.engine.punch(
            ino,
            from,
            to,
            WriteOptions::new(extra, Durability::Buffered),
        )?;
        *inode = counted.done();
        Ok(())
    }

    /// Writes back `h`'s dirty pages, for a caller that holds its record lock
    /// ([`Handle::write`]) as `st` (an operation about to write the record).
    pub(crate) fn write_back_held(&self, h: &Handle, st: &mut InodeState) -> Result<(), VfsError> {
        self.write_back_with(h, StateAccess::Held(st), None)
            .map(drop)
    }

    /// Writes back `h`'s dirty pages while its readers and writers go on.
    pub(crate) fn write_back(&self, h: &Handle) -> Result<(), VfsError> {
        let _writeback = h.writeback.lock().expect("write-back lock");
        self.write_back_with(h, StateAccess::Own(h), None).map(drop)
    }

    /// The dirty pages as they are now go to the engine: all in one batch with the
    /// inode's record when they number at most `WRITE_CHUNK_BLOCKS` (the file then has
    /// every write so far or none after a crash), else in batches of that many blocks in
    /// ascending order, each but the last recording a size no larger than what is
    /// written so far. Pages rewritten meanwhile stay dirty. A deleted inode's pages are
    /// dropped.
    ///
    /// With `fsync` (inodes whose domains an fsync makes durable, `h`'s among them) the
    /// last batch is written as that fsync (its data and WAL writes in flight together,
    /// one flush); returns whether it was (not when nothing was dirty).
    fn write_back_with(
        &self,
        h: &Handle,
        mut access: StateAccess<'_>,
        fsync: Option<&[InodeNo]>,
    ) -> Result<bool, VfsError> {
        // The snapshot: the inode and its dirty blocks, consistent (writers install both
        // under the state lock).
        let (inode, batches, mut durable) = {
            let read_guard;
            let st: &InodeState = match &access {
                StateAccess::Held(st) => st,
                StateAccess::Own(h) => {
                    read_guard = h.read();
                    &read_guard
                }
            };
            let mut pages = h.pages();
            if pages.dirty_count() == 0 {
                return Ok(false);
            }
            let Some(inode) = st.inode else {
                pages.clear();
                self.cache.note_clean(h.ino);
                return Ok(false);
            };
            let batches: Vec<Vec<(u64, Vec<Block>)>> =
                group_runs(pages.dirty_runs(WRITE_CHUNK_BLOCKS), WRITE_CHUNK_BLOCKS)
                    .into_iter()
                    .map(|runs| {
                        runs.into_iter()
                            .map(|(first, n)| (first, pages.blocks(first, n)))
                            .collect()
                    })
                    .collect();
            let durable = pages
                .durable_size
                .expect("dirty pages note the durable size");
            (inode, batches, durable)
        };
        let count = batches.len();
        let mut blocks = inode.blocks;
        for (i, runs) in batches.into_iter().enumerate() {
            let mut record = inode;
            record.blocks = blocks;
            let (last_first, last_blocks) = runs.last().expect("a batch has a run");
            if i + 1 < count {
                let written_end = (last_first + last_blocks.len() as u64) * BLOCK;
                record.size = durable.max(inode.size.min(written_end));
            }
            let mut data = Vec::new();
            for (_, run) in &runs {
                for block in run {
                    data.extend_from_slice(block);
                }
            }
            let ranges: Vec<(FileBlock, u64)> = runs
                .iter()
                .map(|(first, run)| (FileBlock(*first), run.len() as u64))
                .collect();
            let also = fsync.filter(|_| i + 1 == count);
            self.write_ranges(h.ino, &mut record, &ranges, &data, also)?;
            blocks = record.blocks;
            durable = record.size;
            // The result: the block count, and pages not rewritten meanwhile clean.
            let mut write_guard;
            let st: &mut InodeState = match &mut access {
                StateAccess::Held(st) => st,
                StateAccess::Own(h) => {
                    write_guard = h.state_write();
                    &mut write_guard
                }
            };
            if let Some(current) = st.inode.as_mut() {
                current.blocks = blocks;
            }
            // Counted as taken (an overwrite frees as much later) before the pages
            // count clean: the room errs low until the next look-up.
            let written: u64 = runs.iter().map(|(_, run)| run.len() as u64).sum();
            self.cache.take_room(written * BLOCK);
            let mut pages = h.pages();
            for (first, run) in &runs {
                for (j, block) in run.iter().enumerate() {
                    pages.written(first + j as u64, block);
                }
            }
            if pages.dirty_count() > 0 {
                pages.durable_size = Some(durable);
            } else {
                self.cache.note_clean(h.ino);
            }
            self.cache
                .written_back
                .fetch_add(written, Ordering::Relaxed);
            self.cache.writebacks.fetch_add(1, Ordering::Relaxed);
        }
        Ok(fsync.is_some())
    }

    /// Looks up the device's room for new data for the dirty limit (at mount, in every
    /// flusher round, and when a write finds itself beyond it): what statfs reports
    /// free (capacity beyond the live blocks), or the blocks of the free segments data
    /// may take now if that is more (a tiny image promises no capacity, its log heads
    /// and reserves taking it all, yet takes writes while it has free segments).
    /// Less [`METADB_GROWTH`] segments: MetaDB's tables come out of the same free
    /// segments, and a table written after a write was let in must not leave its
    /// write-back without room. A look-up a write-back overtook is not stored (it could
    /// give back room that write-back took) and is made again.
    pub(crate) fn refresh_room(&self) {
        loop {
            let epoch = self.cache.room_epoch();
            let space = self.engine.space_report();
            let promised = space.capacity_blocks.saturating_sub(space.live_blocks);
            let kept = space.gc_reserve + space.metadb_headroom;
            let free =
                u64::from(space.free.saturating_sub(kept)) * format::constants::BLOCKS_PER_SEGMENT;
            let room = promised
                .max(free)
                .saturating_sub(u64::from(METADB_GROWTH) * format::constants::BLOCKS_PER_SEGMENT);
            if self.cache.set_room(epoch, room * BLOCK) {
                return;
            }
        }
    }

    /// Writes back every file's dirty pages.
    pub(crate) fn write_back_all(&self) -> Result<(), VfsError> {
        for h in self.dirty_handles() {
            self.write_back(&h)?;
        }
        Ok(())
    }

    fn dirty_handles(&self) -> Vec<Arc<Handle>> {
        self.cache
            .dirty_inodes
            .lock()
            .expect("dirty inodes lock")
            .values()
            .cloned()
            .collect()
    }

    /// One round of the flusher: writes back files dirty for longer than the expiry
    /// (all dirty files when `urgent` or past half the dirty limit), then evicts clean
    /// pages beyond the cache's budget.
    fn flush_round(&self, urgent: bool) {
        self.refresh_room();
        let now = self.clock.now_ns();
        let expire = self.cache.config.expire.as_nanos() as u64;
        for h in self.dirty_handles() {
            let old = h
                .pages()
                .dirty_since
                .is_some_and(|t| now.saturating_sub(t) >= expire);
            if old || urgent || self.cache.over_background_limit() {
                // A failure makes the engine read-only; the pages stay dirty and the
                // next fsync, sync or unmount reports it.
                if self.write_back(&h).is_err() {
                    return;
                }
            }
        }
        self.trim(self.cache.max_pages() * 9 / 10);
    }

    /// Evicts clean pages of any file until at most `target` pages are cached.
    fn trim(&self, target: u64) {
        if self.cache.page_count() <= target {
            return;
        }
        for h in self.inodes.all() {
            let excess = self.cache.page_count().saturating_sub(target);
            if excess == 0 {
                break;
            }
            if let Ok(mut pages) = h.pages.try_lock() {
                let near = pages.ra_next;
                pages.evict_clean(excess, near);
            }
        }
    }

    /// Block `b` of `ino` for a partial write: its bytes (zeros past `size`, the file's
    /// size) and whether it is mapped.
    fn load_block(&self, ino: InodeNo, b: u64, size: u64) -> Result<(Vec<u8>, bool), VfsError> {
        let mut block = vec![0u8; PAGE];
        let mapped = self.engine.read(ino, FileBlock(b), &mut block)?[0];
        let lo = b * BLOCK;
        if size < lo + BLOCK {
            block[size.saturating_sub(lo) as usize..].fill(0);
        }
        Ok((block, mapped))
    }

    /// Blocks `first..first + count` of `ino` read from the device as pages, each with
    /// whether it is mapped (a hole is the shared zero block).
    pub(crate) fn read_pages(
        &self,
        ino: InodeNo,
        first: u64,
        count: u64,
    ) -> Result<Vec<(Block, bool)>, VfsError> {
        let mut blocks: Vec<Option<(Block, bool)>> = vec![None; count as usize];
        self.engine
            .read_blocks(ino, FileBlock(first), count, |i, block| {
                blocks[i as usize] = Some(match block {
                    Some(block) => (Block::from(block), true),
                    None => (zero_block(), false),
                });
            })?;
        Ok(blocks
            .into_iter()
            .map(|b| b.expect("every block delivered"))
            .collect())
    }

    /// Whether block `b` of `ino` is mapped on the device.
    fn is_mapped(&self, ino: InodeNo, b: u64) -> Result<bool, VfsError> {
        Ok(self.engine.next_mapped(ino, FileBlock(b))? == Some(FileBlock(b)))
    }

    /// Blocks `h`'s dirty pages will newly allocate when written back (for `st_blocks`).
    pub(crate) fn pending_blocks(&self, h: &Handle) -> Result<u64, VfsError> {
        let unknown = {
            let pages = h.pages();
            if pages.dirty_count() == 0 {
                return Ok(0);
            }
            pages.unknown_dirty()
        };
        // Looked up without the pages' lock (readers and writers go on); a write-back
        // meanwhile knows better.
        let mut found = Vec::with_capacity(unknown.len());
        for b in unknown {
            found.push((b, self.is_mapped(h.ino, b)?));
        }
        let mut pages = h.pages();
        for (b, mapped) in found {
            pages.learn_mapped(b, mapped);
        }
        Ok(pages.pending_blocks())
    }
}

impl FileSystem {
    /// Writes `data` at `offset` of file `ino` (growing it as needed); returns the bytes
    /// written.
    pub fn write_at(&self, ino: InodeNo, offset: u64, data: &[u8]) -> Result<usize, VfsError> {
        let h = self.handle(ino)?;
        Ok(self.write_data(&h, At::Offset(offset), data)?.1)
    }

    /// Writes `data` to file `h` at `at`; returns where it was written and how many
    /// bytes. The block range is locked while the new blocks are built; they are
    /// installed, with the new size and times, at once.
    pub(crate) fn write_data(
        &self,
        h: &Arc<Handle>,
        at: At,
        data: &[u8],
    ) -> Result<(u64, usize), VfsError> {
        let ino = h.ino;
        let file_size = || -> Result<(u64, bool), VfsError> {
            let st = h.read();
            let inode = live(&st, ino)?;
            if inode.kind != Kind::File {
                return Err(VfsError::IsDir(format!("inode {ino}")));
            }
            Ok((inode.size, inode.perm & crate::setid::SETID_BITS != 0))
        };
        let span = |offset: u64| -> Result<u64, VfsError> {
            offset
                .checked_add(data.len() as u64)
                .filter(|&e| e <= FILE_SIZE_MAX)
                .ok_or_else(|| VfsError::TooLarge(format!("write to {offset} + {}", data.len())))
        };
        let (mut size, setid) = file_size()?;
        if data.is_empty() {
            let offset = at.offset(size);
            return Ok((offset, 0));
        }
        // A read-only file system refuses writes now, not at write-back; so does a full
        // one: if the dirty pages and this write could exceed the device's room, all
        // dirty pages are written back first, and then this write must fit. (An
        // overwrite of mapped blocks needs no room in the end, but its write-back takes
        // new blocks before the old ones are freed.)
        self.core.engine.check_writable()?;
        if setid {
            self.drop_setid(h)?;
        }
        let pages_bytes = (data.len() as u64).div_ceil(BLOCK).saturating_add(1) * BLOCK;
        let claim = match self.core.cache.claim_room(pages_bytes) {
            Some(claim) => claim,
            None => {
                self.core.write_back_all()?;
                self.core.refresh_room();
                self.core
                    .cache
                    .claim_room(pages_bytes)
                    .ok_or_else(|| VfsError::no_space(0))?
            }
        };
        loop {
            // The range this write needs given the size seen last: its blocks, and for
            // a write past the end everything from the old last block on (which it
            // zeroes past the end; the size is then stable while the range is held).
            let offset = at.offset(size);
            let end = span(offset)?;
            let range = needed_range(offset, end, size);
            let guard = h.ranges.lock(range);
            size = file_size()?.0;
            let offset = at.offset(size);
            let end = span(offset)?;
            if !covers(&guard.range, &needed_range(offset, end, size)) {
                continue;
            }
            let blocks = self.build_blocks(h, offset, data, size)?;
            let last = (end - 1) / BLOCK;
            {
                let mut st = h.state_write();
                let mut inode = *live(&st, ino)?;
                let mut pages = h.pages();
                if pages.dirty_count() == 0 {
                    pages.durable_size = Some(inode.size);
                    pages.dirty_since = Some(self.core.clock.now_ns());
                }
                // Nothing is mapped past the last written record's size (a write-back
                // records a size covering what it maps; a truncate unmaps past it).
                let durable_blocks = pages
                    .durable_size
                    .expect("dirty pages note the durable size")
                    .div_ceil(BLOCK);
                pages.install_all(blocks.into_iter().map(|(b, block, mapped)| {
                    (b, block, mapped.or((b >= durable_blocks).then_some(false)))
                }));
                let now = self.now();
                inode.size = inode.size.max(end);
                inode.mtime_ns = now;
                inode.ctime_ns = now;
                st.inode = Some(inode);
                self.core.cache.note_dirty(h);
            }
            // The pages count dirty now.
            drop(claim);
            if self.core.cache.over_dirty_limit() {
                self.core.write_back(h)?;
            } else if self.core.cache.over_background_limit() {
                self.core.cache.kick(false);
            }
            drop(guard);
            self.keep_budget(h, last);
            return Ok((offset, data.len()));
        }
    }

    /// The new blocks of a write of `data` at `offset` into a file of `size` bytes
    /// (the caller holds the range the write needs): each block with its starting bytes
    /// (the cached page, the device's block for a partial write, or zeros) and the
    /// write's bytes, and whether it is mapped on the device if known.
    fn build_blocks(
        &self,
        h: &Handle,
        offset: u64,
        data: &[u8],
        size: u64,
    ) -> Result<Vec<(u64, Block, Option<bool>)>, VfsError> {
        let ino = h.ino;
        let end = offset + data.len() as u64;
        let first = offset / BLOCK;
        let last = (end - 1) / BLOCK;
        let cached = |b: u64| {
            h.pages()
                .get(b)
                .map(|p| (p.data.clone(), p.dirty, p.mapped))
        };
        let mut out = Vec::with_capacity((last - first + 2) as usize);
        // Growth past a partial last block the write does not reach: that block's bytes
        // past the end become zeros (a truncate may have left old bytes there).
        let tail = (size % BLOCK) as usize;
        let b = size / BLOCK;
        if offset > size && tail != 0 && b < first {
            let page = cached(b);
            // Only a block with data needs it (a hole reads as zeros and stays one).
            let has_data = match page {
                Some((_, true, _)) | Some((_, false, Some(true))) => true,
                Some((_, false, Some(false))) => false,
                _ => self.core.is_mapped(ino, b)?,
            };
            if has_data {
                let (mut block, mapped): (Block, Option<bool>) = match page {
                    Some((data, _, mapped)) => (Block::from(&data[..]), mapped),
                    None => {
                        let (block, mapped) = self.core.load_block(ino, b, size)?;
                        (Block::from(&block[..]), Some(mapped))
                    }
                };
                block.get_mut().expect("a new block")[tail..].fill(0);
                out.push((b, block, mapped));
            }
        }
        for b in first..=last {
            let (lo, hi) = (b * BLOCK, (b + 1) * BLOCK);
            if offset <= lo && end >= hi {
                // A whole block: the write's bytes alone.
                let whole = Block::from(&data[(lo - offset) as usize..(hi - offset) as usize]);
                out.push((b, whole, None));
                continue;
            }
            let (mut block, mapped): (Block, Option<bool>) = match cached(b) {
                Some((data, _, mapped)) => (Block::from(&data[..]), mapped),
                None if lo < size => {
                    let (block, mapped) = self.core.load_block(ino, b, size)?;
                    (Block::from(&block[..]), Some(mapped))
                }
                None => (Block::from(&[0u8; PAGE][..]), None),
            };
            let bytes = block.get_mut().expect("a new block");
            if lo < size && size < hi && end > size {
                // The block holding the end of the file, which this write grows.
                bytes[(size - lo) as usize..].fill(0);
            }
            let from = offset.max(lo);
            let to = end.min(hi);
            bytes[(from - lo) as usize..(to - lo) as usize]
                .copy_from_slice(&data[(from - offset) as usize..(to - offset) as usize]);
            out.push((b, block, mapped));
        }
        Ok(out)
    }

    /// The blocks of `ino` with dirty pages (not written back yet), ascending: with the
    /// blocks the engine maps, what `st_blocks` counts (for checks and tools).
    pub fn dirty_blocks(&self, ino: InodeNo) -> Result<Vec<u64>, VfsError> {
        let h = self.handle(ino)?;
        let pages = h.pages();
        Ok(pages
            .dirty_runs(u64::MAX)
            .into_iter()
            .flat_map(|(first, n)| first..first + n)
            .collect())
    }

    /// Evicts clean pages of `h` (those farthest from block `near`) beyond the cache's
    /// budget; if that is not enough, asks the flusher to trim other files.
    fn keep_budget(&self, h: &Handle, near: u64) {
        let cache = &self.core.cache;
        let excess = cache.page_count().saturating_sub(cache.max_pages());
        if excess > 0 && h.pages().evict_clean(excess, near) < excess {
            cache.kick(false);
        }
    }

    /// Reads up to `buf.len()` bytes at `offset` of file `ino`; returns the bytes read
    /// (0 at or past the end). Holes read as zeros. Misses read the missing blocks and,
    /// for a sequential reader, a read-ahead window that doubles up to the configured
    /// limit. A read never waits for a writer's copying or device reads; it returns the
    /// file as it was at one moment (each write whole or not at all).
    pub fn read_at(&self, ino: InodeNo, offset: u64, buf: &mut [u8]) -> Result<usize, VfsError> {
        let h = self.handle(ino)?;
        self.read_data(&h, offset, buf)
    }

    pub(crate) fn read_data(
        &self,
        h: &Arc<Handle>,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<usize, VfsError> {
        for pass in 1..=READ_PASSES {
            if let Some(n) = self.read_pass(h, offset, buf, pass == READ_PASSES)? {
                return Ok(n);
            }
        }
        unreachable!("the last read pass holds the state lock and always completes")
    }

    /// One attempt of [`FileSystem::read_data`]: `None` if a writer installed blocks the
    /// pass was reading from the device (unless `hold`: then the state lock is held
    /// throughout, which keeps writers from installing).
    fn read_pass(
        &self,
        h: &Arc<Handle>,
        offset: u64,
        buf: &mut [u8],
        hold: bool,
    ) -> Result<Option<usize>, VfsError> {
        let ino = h.ino;
        let st = h.read();
        let inode = live(&st, ino)?;
        if inode.kind == Kind::Dir {
            return Err(VfsError::IsDir(format!("inode {ino}")));
        }
        if offset >= inode.size || buf.is_empty() {
            return Ok(Some(0));
        }
        let size = inode.size;
        let end = size.min(offset + buf.len() as u64);
        let first = offset / BLOCK;
        let last = (end - 1) / BLOCK;
        let eof_block = (size - 1) / BLOCK;
        let cache = &self.core.cache;
        // The snapshot: the size and the cached blocks under the state lock (writers
        // install both under it).
        let mut pages = h.pages();
        let held = hold.then_some(st);
        let sequential = first == pages.ra_next;
        pages.ra_next = last + 1;
        if sequential {
            // Twice the read, at least, and doubling while the reader goes on.
            let max = (cache.config.readahead_max / BLOCK).max(1);
            pages.ra_window = (pages.ra_window * 2)
                .max(2 * (last - first + 1))
                .clamp(READAHEAD_START, max);
        } else {
            pages.ra_window = 0;
        }
        if let (true, Some(ra)) = (sequential, &self.readahead) {
            read_ahead(ra, h, &mut pages, (last, eof_block), cache.max_pages());
        }
        // Blocks another read is fetching are waited for, not read twice. Without the
        // state lock, the size may change meanwhile: then the pass starts again.
        let mut got = loop {
            let got = pages.cached(first, last - first + 1);
            let in_flight = got
                .iter()
                .enumerate()
                .any(|(i, g)| g.is_none() && pages.fetching(first + i as u64));
            if !in_flight {
                break got;
            }
            pages = h.fetched.wait(pages).expect("pages lock");
            if held.is_none() {
                return Ok(None);
            }
        };
        let hits = got.iter().filter(|g| g.is_some()).count() as u64;
        if let Some(miss) = got.iter().position(Option::is_none) {
            let miss = first + miss as u64;
            // Without background read-ahead the reader reads the window itself.
            let mut fetch_end = last;
            if self.readahead.is_none() && got.last().is_some_and(Option::is_none) {
                let ahead_end = eof_block.min(last + pages.ra_window);
                while fetch_end < ahead_end && pages.get(fetch_end + 1).is_none() {
                    fetch_end += 1;
                }
            }
            let fetch = pages.begin_fetch(miss, fetch_end);
            drop(pages);
            let fetched = self.fetch_runs(ino, &got, first, last, fetch_end);
            pages = h.pages();
            let current = pages.end_fetch(fetch);
            h.fetched.notify_all();
            let fetched = fetched?;
            if !current && held.is_none() {
                return Ok(None);
            }
            let mut missed = 0;
            for (b, block, mapped) in fetched {
                if b <= last {
                    got[(b - first) as usize] = Some(block.clone());
                    missed += 1;
                }
                if current {
                    pages.insert_clean(b, block, Some(mapped));
                }
            }
            cache.misses.fetch_add(missed, Ordering::Relaxed);
            cache
                .readahead
                .fetch_add(fetch_end - last, Ordering::Relaxed);
        }
        drop(pages);
        cache.hits.fetch_add(hits, Ordering::Relaxed);
        for (i, block) in got.iter().enumerate() {
            let block = block.as_ref().expect("every block read");
            let (lo, hi) = ((first + i as u64) * BLOCK, (first + i as u64 + 1) * BLOCK);
            let from = offset.max(lo);
            let to = end.min(hi);
            buf[(from - offset) as usize..(to - offset) as usize]
                .copy_from_slice(&block[(from - lo) as usize..(to - lo) as usize]);
        }
        drop(held);
        self.keep_budget(h, last);
        Ok(Some((end - offset) as usize))
    }

    /// Reads from the device the runs of blocks `first..=last` missing in `got`, the
    /// last run extended to `fetch_end` (read-ahead): each block with whether it is
    /// mapped. A failure in the read-ahead alone fails nothing (it is a guess).
    fn fetch_runs(
        &self,
        ino: InodeNo,
        got: &[Option<Block>],
        first: u64,
        last: u64,
        fetch_end: u64,
    ) -> Result<Vec<(u64, Block, bool)>, VfsError> {
        let mut out = Vec::new();
        let mut b = first;
        while b <= last {
            if got[(b - first) as usize].is_some() {
                b += 1;
                continue;
            }
            let mut run_end = b;
            while run_end < last && got[(run_end + 1 - first) as usize].is_none() {
                run_end += 1;
            }
            let to = if run_end == last { fetch_end } else { run_end };
            let blocks = match self.core.read_pages(ino, b, to - b + 1) {
                Ok(blocks) => blocks,
                // The read-ahead part may have failed: read the wanted blocks alone.
                Err(_) if to > run_end => self.core.read_pages(ino, b, run_end - b + 1)?,
                Err(e) => return Err(e),
            };
            for (i, (block, mapped)) in blocks.into_iter().enumerate() {
                out.push((b + i as u64, block, mapped));
            }
            b = run_end + 1;
        }
        Ok(out)
    }

    /// Sets file `ino`'s size: blocks past it are freed, the tail of the last block is
    /// zeroed, growth leaves a hole.
    pub fn truncate(&self, ino: InodeNo, size: u64) -> Result<(), VfsError> {
        let h = self.handle(ino)?;
        self.drop_setid(&h)?;
        let _range = h.ranges.lock(BlockRange::ALL);
        let mut st = h.write();
        self.truncate_locked(&h, &mut st, size)
    }

    /// [`FileSystem::truncate`] for a caller holding the whole block range and the
    /// inode's record lock.
    pub(crate) fn truncate_locked(
        &self,
        h: &Handle,
        st: &mut InodeState,
        size: u64,
    ) -> Result<(), VfsError> {
        let ino = h.ino;
        let mut inode = *live(st, ino)?;
        match inode.kind {
            Kind::File => {}
            Kind::Dir => return Err(VfsError::IsDir(format!("inode {ino}"))),
            // Linux's truncate(2) of anything else but a directory.
            _ => return Err(VfsError::Invalid(format!("truncate of a {:?}", inode.kind))),
        }
        if size > FILE_SIZE_MAX {
            return Err(VfsError::TooLarge(format!("size {size}")));
        }
        self.core.write_back_held(h, st)?;
        inode = *live(st, ino)?;
        let old = inode.size;
        // The blocks from the shorter end's block on change under the cache (a shrink
        // unmaps them, growth zeroes the old last block's tail); those before stay.
        if size != old {
            h.pages().drop_range(size.min(old) / BLOCK, u64::MAX);
        }
        let now = self.now();
        inode.size = size;
        inode.mtime_ns = now;
        inode.ctime_ns = now;
        if size < old {
            // One batch: the blocks past the new end and the size. Bytes of the last
            // block past the end stay on the device; writes and growth zero them before
            // they can be read (`write_locked`).
            self.core
                .punch_blocks(ino, &mut inode, FileBlock(size.div_ceil(BLOCK)), None)?;
        } else if old % BLOCK != 0 && size > old {
            // Growth: the old last block's bytes past the old end become zeros, in the
            // same batch as the size.
            let b = old / BLOCK;
            let (block, mapped) = self.core.load_block(ino, b, old)?;
            if mapped {
                self.core
                    .write_blocks(ino, &mut inode, FileBlock(b), &block)?;
            } else {
                self.put_inode(ino, &inode, WriteBatch::new())?;
            }
        } else {
            self.put_inode(ino, &inode, WriteBatch::new())?;
        }
        st.inode = Some(inode);
        Ok(())
    }

    /// Writes back `h`'s dirty pages before its record is written elsewhere (the caller
    /// holds its write lock as `st`).
    pub(crate) fn settle(&self, h: &Handle, st: &mut InodeState) -> Result<(), VfsError> {
        self.core.write_back_held(h, st)
    }

    /// Drops the pages of `ino`, whose deletion is done (dirty pages of a deleted inode
    /// are never written back; until the deletion succeeds they still serve reads).
    pub(crate) fn drop_pages(&self, ino: InodeNo) {
        if let Some(h) = self.core.inodes.get(ino) {
            let mut pages = h.pages();
            pages.clear();
            self.core.cache.note_clean(ino);
        }
    }

    /// fsync: makes `ino`'s data and attributes durable, and the names it was created or
    /// renamed under since its last fsync (`data_only`: fdatasync, the same here since
    /// the size rides with the data).
    pub fn fsync_ino(&self, ino: InodeNo, data_only: bool) -> Result<(), VfsError> {
        let _ = data_only;
        let h = self.handle(ino)?;
        // The file's lane and the lanes of the names it gained, in one device flush (a
        // crash before it returns keeps any combination of them, as without an fsync; a
        // new file's contents never survive without its create, which they require).
        // Names noted from here on are made after the fsync began: it need not cover them.
        let mut lanes = self.take_lanes(ino);
        lanes.push(ino);
        let synced = {
            let _writeback = h.writeback.lock().expect("write-back lock");
            self.core
                .write_back_with(&h, StateAccess::Own(&h), Some(&lanes))
        };
        let synced = match synced {
            Ok(true) => Ok(()),
            Ok(false) => self.core.engine.fsync_all(&lanes).map_err(Into::into),
            Err(e) => Err(e),
        };
        if synced.is_err() {
            // A later fsync (after ENOSPC, say) must still cover them.
            for &lane in &lanes[..lanes.len() - 1] {
                self.note_lane(ino, lane);
            }
        }
        synced
    }

    /// sync / syncfs: everything so far is durable (a whole-file-system checkpoint).
    /// Everything written before the call durable, like [`FileSystem::sync`], but as
    /// an fsync of every file would make it: one persist and one device flush, no
    /// checkpoint (an fsync of a FUSE mount's root directory, which programs such as
    /// sqlite also call after creating a file there).
    pub fn persist_all(&self) -> Result<(), VfsError> {
        self.core.write_back_all()?;
        self.forget_lanes();
        self.core.engine.persist_all()?;
        Ok(())
    }

    pub fn sync(&self) -> Result<(), VfsError> {
        self.core.write_back_all()?;
        // What was noted before the sync is covered by it.
        self.forget_lanes();
        self.core.engine.sync()?;
        Ok(())
    }
}

/// Asks the background read-ahead for the blocks up to two windows after block `last`
/// (within the file's `eof_block`) once less than one window is asked for already, in
/// jobs of at most [`READAHEAD_JOB_BLOCKS`] blocks not cached now (so that the workers
/// read several at once and the first blocks are cached before the last arrive).
fn read_ahead(
    ra: &Arc<ReadAhead>,
    h: &Arc<Handle>,
    pages: &mut Pages,
    (last, eof_block): (u64, u64),
    cache_pages: u64,
) {
    let next = last + 1;
    // Two windows ahead take at most a quarter of the cache (else they evict each other).
    let window = pages.ra_window.min(cache_pages / 8);
    if next > eof_block || window == 0 {
        return;
    }
    let mut start = pages.ra_async_end;
    if start < next || start > next + 2 * window {
        start = next;
    }
    if start - next >= window {
        return;
    }
    let end = (next + 2 * window).min(eof_block + 1);
    pages.ra_async_end = end;
    while start < end {
        // Only blocks missing now: a cached block could be written back and evicted
        // while the job reads, and the job would then cache what it read before that.
        // (A block missing now changes on the device only after an install, which makes
        // the job stale.)
        if pages.get(start).is_some() {
            start += 1;
            continue;
        }
        let mut count = 1;
        while count < READAHEAD_JOB_BLOCKS
            && start + count < end
            && pages.get(start + count).is_none()
        {
            count += 1;
        }
        let fetch = pages.begin_fetch(start, start + count - 1);
        let job = Job {
            h: h.clone(),
            first: start,
            count,
            fetch,
        };
        if let Err(job) = ra.submit(job) {
            pages.end_fetch(job.fetch);
            h.fetched.notify_all();
            return;
        }
        start += count;
    }
}

/// Groups runs (ascending, each at most `max` blocks) into batches of at most `max`
/// blocks, in order.
fn group_runs(runs: Vec<(u64, u64)>, max: u64) -> Vec<Vec<(u64, u64)>> {
    let mut batches: Vec<Vec<(u64, u64)>> = Vec::new();
    let mut size = 0;
    for run in runs {
        match batches.last_mut() {
            Some(batch) if size + run.1 <= max => batch.push(run),
            _ => {
                batches.push(vec![run]);
                size = 0;
            }
        }
        size += run.1;
    }
    batches
}

/// The background flusher: a thread that writes back old dirty pages and trims the
/// cache (woken early by writers past half the dirty limit).
pub(crate) struct Flusher {
    core: Arc<Core>,
    thread: Option<JoinHandle<()>>,
}

impl Flusher {
    pub fn start(core: Arc<Core>, every: Duration) -> Flusher {
        let c = core.clone();
        let thread = std::thread::Builder::new()
            .name("augefs-flush".into())
            .spawn(move || loop {
                let urgent = {
                    let mut s = c.cache.signal.lock().expect("flusher signal lock");
                    if !s.0 && !s.1 {
                        s = c
                            .cache
                            .wake
                            .wait_timeout(s, every)
                            .expect("flusher signal lock")
                            .0;
                    }
                    if s.0 {
                        return;
                    }
                    std::mem::take(&mut s.1)
                };
                c.flush_round(urgent);
            })
            .expect("spawn the flusher thread");
        Flusher {
            core,
            thread: Some(thread),
        }
    }

    /// Stops the thread (after its current round) and waits for it.
    pub fn stop(mut self) {
        self.core
            .cache
            .signal
            .lock()
            .expect("flusher signal lock")
            .0 = true;
        self.core.cache.wake.notify_all();
        if let Some(t) = self.thread.take() {
            // A panic in the flusher was already reported; unmount goes on.
            let _ = t.join();
        }
    }
}

impl std::fmt::Debug for Flusher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Flusher").finish_non_exhaustive()
    }
}

/// An inode record made for a batch once the engine knows how many blocks the batch maps
/// or unmaps (`Extra::Counted`), and the inode as that batch wrote it.
struct Counted {
    ino: InodeNo,
    inode: std::cell::Cell<Inode>,
}

impl Counted {
    fn new(ino: InodeNo, inode: &Inode) -> Counted {
        Counted {
            ino,
            inode: std::cell::Cell::new(*inode),
        }
    }

    fn batch(&self, delta: i64) -> WriteBatch {
        let mut inode = self.inode.get();
        // Exact unless the record was corrupted (fsck's business): never below zero.
        inode.blocks = inode.blocks.saturating_add_signed(delta);
        self.inode.set(inode);
        let mut batch = WriteBatch::new();
        batch.put(
            records::inode_key(self.ino).to_vec(),
            inode.encode().to_vec(),
        );
        batch
    }

    fn done(self) -> Inode {
        self.inode.into_inner()
    }
}

/// The blocks a write of `offset..end` into a file of `size` bytes changes: its own,
/// and for a write past the end everything from the old last block on (the size then
/// changes only under this range).
fn needed_range(offset: u64, end: u64, size: u64) -> BlockRange {
    let first = offset / BLOCK;
    if end > size {
        BlockRange::from(first.min(size / BLOCK))
    } else {
        BlockRange {
            first,
            last: (end - 1) / BLOCK,
        }
    }
}

fn covers(held: &BlockRange, needed: &BlockRange) -> bool {
    held.first <= needed.first && needed.last <= held.last
}

#[cfg(test)]
mod tests {
    use super::group_runs;

    #[test]
    fn runs_are_grouped_in_order_up_to_the_limit() {
        let runs = vec![(0, 2), (5, 3), (9, 4), (20, 4), (30, 1)];
        assert_eq!(
            group_runs(runs, 5),
            vec![vec![(0, 2), (5, 3)], vec![(9, 4)], vec![(20, 4), (30, 1)]]
        );
        assert!(group_runs(Vec::new(), 5).is_empty());
    }
}
