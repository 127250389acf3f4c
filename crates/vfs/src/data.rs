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
//! Invariants:
//! - Dirty pages lie below the in-memory size; pages are dropped (not written back) only
//!   when the file is deleted or its blocks change under the cache (truncate,
//!   fallocate), and then after writing back.
//! - Bytes past the end of a file are zeros in any page whose block the file grows
//!   over (a truncate may have left old bytes in the block on the device).

use crate::error::VfsError;
use crate::fs::{live, Core, FileSystem, Handle, InodeState, BLOCK, FILE_SIZE_MAX};
use crate::pagecache::PAGE;
use crate::records::{self, Inode, Kind};
use engine::log::keys::FileBlock;
use engine::log::{Durability, Extra};
use format::InodeNo;
use metadb::WriteBatch;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Blocks per engine write (keeps each batch well under MetaDB's record limit).
const WRITE_CHUNK_BLOCKS: u64 = 256;
/// A sequential reader's first read-ahead window, in blocks.
const READAHEAD_START: u64 = 8;

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
        self.write_ranges(ino, inode, &[(first, count)], data)
    }

    /// [`Core::write_blocks`] for several ranges (ascending) in one batch.
    fn write_ranges(
        &self,
        ino: InodeNo,
        inode: &mut Inode,
        ranges: &[(FileBlock, u64)],
        data: &[u8],
    ) -> Result<(), VfsError> {
        self.record_in(ino, ino)?;
        let counted = Counted::new(ino, inode);
        self.engine.write_ranges(
            ino,
            ranges,
            data,
            Extra::Counted(&|delta| counted.batch(delta)),
            Durability::Buffered,
        )?;
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
        self.engine.punch_with(
            ino,
            from,
            to,
            Extra::Counted(&|delta| counted.batch(delta)),
            Durability::Buffered,
        )?;
        *inode = counted.done();
        Ok(())
    }

    /// Writes back `h`'s dirty pages (the caller holds its write lock as `st`): all of
    /// them in one batch with the inode's record when they number at most
    /// `WRITE_CHUNK_BLOCKS` (the file then has every write so far or none after a
    /// crash), else in batches of that many blocks in ascending order, each but the last
    /// recording a size no larger than what is written so far. A deleted inode's pages
    /// are dropped.
    pub(crate) fn write_back(&self, h: &Handle, st: &mut InodeState) -> Result<(), VfsError> {
        let mut pages = h.pages();
        if pages.dirty_count() == 0 {
            return Ok(());
        }
        let Some(mut inode) = st.inode else {
            pages.clear();
            self.cache.note_clean(h.ino);
            return Ok(());
        };
        let batches = group_runs(pages.dirty_runs(WRITE_CHUNK_BLOCKS), WRITE_CHUNK_BLOCKS);
        let count = batches.len();
        for (i, runs) in batches.into_iter().enumerate() {
            let durable = pages
                .durable_size
                .expect("dirty pages note the durable size");
            let mut record = inode;
            let (last_first, last_n) = *runs.last().expect("a batch has a run");
            if i + 1 < count {
                record.size = durable.max(inode.size.min((last_first + last_n) * BLOCK));
            }
            let mut data = Vec::new();
            for &(first, n) in &runs {
                data.extend_from_slice(&pages.copy_run(first, n));
            }
            let ranges: Vec<(FileBlock, u64)> = runs
                .iter()
                .map(|&(first, n)| (FileBlock(first), n))
                .collect();
            self.write_ranges(h.ino, &mut record, &ranges, &data)?;
            inode.blocks = record.blocks;
            st.inode = Some(inode);
            let mut written = 0;
            for &(first, n) in &runs {
                pages.cleaned(first, n);
                written += n;
            }
            if pages.dirty_count() > 0 {
                pages.durable_size = Some(record.size);
            }
            self.cache
                .written_back
                .fetch_add(written, Ordering::Relaxed);
            self.cache.writebacks.fetch_add(1, Ordering::Relaxed);
        }
        drop(pages);
        self.cache.note_clean(h.ino);
        Ok(())
    }

    /// Writes back every file's dirty pages.
    pub(crate) fn write_back_all(&self) -> Result<(), VfsError> {
        for h in self.dirty_handles() {
            let mut st = h.write();
            self.write_back(&h, &mut st)?;
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
        let now = self.clock.now_ns();
        let expire = self.cache.config.expire.as_nanos() as u64;
        for h in self.dirty_handles() {
            let old = h
                .pages()
                .dirty_since
                .is_some_and(|t| now.saturating_sub(t) >= expire);
            if old || urgent || self.cache.over_background_limit() {
                let mut st = h.write();
                // A failure makes the engine read-only; the pages stay dirty and the
                // next fsync, sync or unmount reports it.
                if self.write_back(&h, &mut st).is_err() {
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
        let handles: Vec<Arc<Handle>> = self
            .inodes
            .lock()
            .expect("inode table lock")
            .values()
            .filter_map(std::sync::Weak::upgrade)
            .collect();
        for h in handles {
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

    /// Whether block `b` of `ino` is mapped on the device.
    fn is_mapped(&self, ino: InodeNo, b: u64) -> Result<bool, VfsError> {
        Ok(self.engine.next_mapped(ino, FileBlock(b))? == Some(FileBlock(b)))
    }

    /// Blocks `h`'s dirty pages will newly allocate when written back (for `st_blocks`).
    pub(crate) fn pending_blocks(&self, h: &Handle) -> Result<u64, VfsError> {
        let mut pages = h.pages();
        if pages.dirty_count() == 0 {
            return Ok(0);
        }
        for b in pages.unknown_dirty() {
            let mapped = self.is_mapped(h.ino, b)?;
            pages.get_mut(b).expect("unknown page cached").mapped = Some(mapped);
        }
        Ok(pages.pending_blocks())
    }
}

impl FileSystem {
    /// Writes `data` at `offset` of file `ino` (growing it as needed); returns the bytes
    /// written.
    pub fn write_at(&self, ino: InodeNo, offset: u64, data: &[u8]) -> Result<usize, VfsError> {
        let h = self.handle(ino)?;
        let mut st = h.write();
        self.write_locked(&h, &mut st, offset, data)
    }

    /// `write_at` for a caller holding the inode's write lock (O_APPEND needs the size
    /// and the write under one lock).
    pub(crate) fn write_locked(
        &self,
        h: &Arc<Handle>,
        st: &mut InodeState,
        offset: u64,
        data: &[u8],
    ) -> Result<usize, VfsError> {
        let ino = h.ino;
        let mut inode = *live(st, ino)?;
        if inode.kind != Kind::File {
            return Err(VfsError::IsDir(format!("inode {ino}")));
        }
        let end = offset
            .checked_add(data.len() as u64)
            .filter(|&e| e <= FILE_SIZE_MAX)
            .ok_or_else(|| VfsError::TooLarge(format!("write to {offset} + {}", data.len())))?;
        if data.is_empty() {
            return Ok(0);
        }
        // A read-only file system refuses writes now, not at write-back.
        self.core.engine.check_writable()?;
        let first = offset / BLOCK;
        let last = (end - 1) / BLOCK;
        let size = inode.size;
        let mut pages = h.pages();
        if pages.dirty_count() == 0 {
            pages.durable_size = Some(size);
            pages.dirty_since = Some(self.core.clock.now_ns());
        }
        // Growth past a partial last block the write does not reach: that block's bytes
        // past the end become zeros (a truncate may have left old bytes there).
        let tail = (size % BLOCK) as usize;
        let b = size / BLOCK;
        if offset > size && tail != 0 && b < first {
            // Only a block with data needs it (a hole reads as zeros and stays one).
            let has_data = match pages.get(b).map(|p| (p.dirty, p.mapped)) {
                Some((true, _)) | Some((false, Some(true))) => true,
                Some((false, Some(false))) => false,
                _ => self.core.is_mapped(ino, b)?,
            };
            if has_data {
                if pages.get(b).is_none() {
                    let (block, mapped) = self.core.load_block(ino, b, size)?;
                    pages.insert_clean(b, &block, Some(mapped));
                }
                pages.mark_dirty(b).data[tail..].fill(0);
            }
        }
        for b in first..=last {
            let (lo, hi) = (b * BLOCK, (b + 1) * BLOCK);
            if pages.get(b).is_none() {
                if (offset > lo || end < hi) && lo < size {
                    let (block, mapped) = self.core.load_block(ino, b, size)?;
                    pages.insert_clean(b, &block, Some(mapped));
                } else {
                    pages.insert_clean(b, &[0u8; PAGE], None);
                }
            }
            let page = pages.mark_dirty(b);
            if lo < size && size < hi && end > size {
                // The block holding the end of the file, which this write grows.
                page.data[(size - lo) as usize..].fill(0);
            }
            let from = offset.max(lo);
            let to = end.min(hi);
            page.data[(from - lo) as usize..(to - lo) as usize]
                .copy_from_slice(&data[(from - offset) as usize..(to - offset) as usize]);
        }
        drop(pages);
        let now = self.now();
        inode.size = size.max(end);
        inode.mtime_ns = now;
        inode.ctime_ns = now;
        st.inode = Some(inode);
        self.core.cache.note_dirty(h);
        if self.core.cache.over_dirty_limit() {
            self.core.write_back(h, st)?;
        } else if self.core.cache.over_background_limit() {
            self.core.cache.kick(false);
        }
        self.keep_budget(h, last);
        Ok(data.len())
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
    /// (0 at or past the end). Holes read as zeros. Misses read the missing run and, for
    /// a sequential reader, a read-ahead window that doubles up to the configured limit.
    pub fn read_at(&self, ino: InodeNo, offset: u64, buf: &mut [u8]) -> Result<usize, VfsError> {
        let h = self.handle(ino)?;
        let st = h.read();
        let inode = live(&st, ino)?;
        if inode.kind == Kind::Dir {
            return Err(VfsError::IsDir(format!("inode {ino}")));
        }
        if offset >= inode.size || buf.is_empty() {
            return Ok(0);
        }
        let end = inode.size.min(offset + buf.len() as u64);
        let first = offset / BLOCK;
        let last = (end - 1) / BLOCK;
        let eof_block = (inode.size - 1) / BLOCK;
        let cache = &self.core.cache;
        let copy = |buf: &mut [u8], b: u64, block: &[u8]| {
            let (lo, hi) = (b * BLOCK, (b + 1) * BLOCK);
            let from = offset.max(lo);
            let to = end.min(hi);
            buf[(from - offset) as usize..(to - offset) as usize]
                .copy_from_slice(&block[(from - lo) as usize..(to - lo) as usize]);
        };
        let mut pages = h.pages();
        let sequential = first == pages.ra_next;
        let mut b = first;
        while b <= last {
            if let Some(page) = pages.get(b) {
                copy(buf, b, &page.data);
                cache.hits.fetch_add(1, Ordering::Relaxed);
                b += 1;
                continue;
            }
            // A miss: the run of uncached blocks from `b`, extended by the read-ahead.
            let mut run_end = b;
            while run_end < last && pages.get(run_end + 1).is_none() {
                run_end += 1;
            }
            if sequential {
                let max = (cache.config.readahead_max / BLOCK).max(1);
                pages.ra_window = (pages.ra_window * 2).clamp(READAHEAD_START, max);
            } else {
                pages.ra_window = 0;
            }
            let ahead_end = eof_block.min(last + pages.ra_window);
            let mut fetch_end = run_end;
            if run_end == last {
                while fetch_end < ahead_end && pages.get(fetch_end + 1).is_none() {
                    fetch_end += 1;
                }
            }
            drop(pages);
            let mut blocks = vec![0u8; ((fetch_end - b + 1) * BLOCK) as usize];
            let mapped = match self.core.engine.read(ino, FileBlock(b), &mut blocks) {
                Ok(mapped) => mapped,
                // The read-ahead is a guess: a bad block beyond the request fails only
                // a read that asks for it.
                Err(_) if fetch_end > run_end => {
                    fetch_end = run_end;
                    blocks.truncate(((run_end - b + 1) * BLOCK) as usize);
                    self.core.engine.read(ino, FileBlock(b), &mut blocks)?
                }
                Err(e) => return Err(e.into()),
            };
            pages = h.pages();
            for (i, block) in blocks.chunks(PAGE).enumerate() {
                let at = b + i as u64;
                pages.insert_clean(at, block, Some(mapped[i]));
                if at <= run_end {
                    copy(buf, at, block);
                }
            }
            cache.misses.fetch_add(run_end - b + 1, Ordering::Relaxed);
            cache
                .readahead
                .fetch_add(fetch_end - run_end, Ordering::Relaxed);
            b = run_end + 1;
        }
        pages.ra_next = last + 1;
        drop(pages);
        self.keep_budget(&h, last);
        Ok((end - offset) as usize)
    }

    /// Sets file `ino`'s size: blocks past it are freed, the tail of the last block is
    /// zeroed, growth leaves a hole.
    pub fn truncate(&self, ino: InodeNo, size: u64) -> Result<(), VfsError> {
        let h = self.handle(ino)?;
        let mut st = h.write();
        self.truncate_locked(&h, &mut st, size)
    }

    pub(crate) fn truncate_locked(
        &self,
        h: &Handle,
        st: &mut InodeState,
        size: u64,
    ) -> Result<(), VfsError> {
        let ino = h.ino;
        let mut inode = *live(st, ino)?;
        if inode.kind != Kind::File {
            return Err(VfsError::IsDir(format!("inode {ino}")));
        }
        if size > FILE_SIZE_MAX {
            return Err(VfsError::TooLarge(format!("size {size}")));
        }
        self.core.write_back(h, st)?;
        inode = *live(st, ino)?;
        // The blocks change under the cache.
        h.pages().clear();
        let now = self.now();
        let old = inode.size;
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
        self.core.write_back(h, st)
    }

    /// Drops the pages of `ino`, whose deletion is done (dirty pages of a deleted inode
    /// are never written back; until the deletion succeeds they still serve reads).
    pub(crate) fn drop_pages(&self, ino: InodeNo) {
        let h = self
            .core
            .inodes
            .lock()
            .expect("inode table lock")
            .get(&ino)
            .and_then(std::sync::Weak::upgrade);
        if let Some(h) = h {
            h.pages().clear();
            self.core.cache.note_clean(ino);
        }
    }

    /// fsync: makes `ino`'s data and attributes durable, and the names it was created or
    /// renamed under since its last fsync (`data_only`: fdatasync, the same here since
    /// the size rides with the data).
    pub fn fsync_ino(&self, ino: InodeNo, data_only: bool) -> Result<(), VfsError> {
        let _ = data_only;
        let h = self.handle(ino)?;
        if h.pages().dirty_count() > 0 {
            let mut st = h.write();
            self.core.write_back(&h, &mut st)?;
        }
        // The names first: a crash between the two then leaves the old contents under
        // the new name, never the new contents without a name.
        self.persist_lanes(self.take_lanes(ino))?;
        self.core.engine.fsync(ino)?;
        Ok(())
    }

    /// sync / syncfs: everything so far is durable (a whole-file-system checkpoint).
    pub fn sync(&self) -> Result<(), VfsError> {
        self.core.write_back_all()?;
        // What was noted before the sync is covered by it.
        self.forget_lanes();
        self.core.engine.sync()?;
        Ok(())
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
