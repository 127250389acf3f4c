//! Reads: a snapshot of the size and the cached blocks under the state lock, copies
//! without any lock, device reads of misses, and read-ahead for sequential readers
//! (docs/DESIGN.md §10.7 and §10.8).
//!
//! Invariants:
//! - A read returns the file as it was at one moment: each write whole or not at all.
//! - A fetch overtaken by an install or a clear is stale: its blocks are not cached
//!   and the pass starts again; the last pass holds the state lock, so a reader
//!   cannot starve.

use crate::data::view::ReadView;
use crate::error::VfsError;
use crate::fs::FileSystem;
use crate::handle::{live, Handle};
use crate::pagecache::{Block, Pages};
use crate::readahead::{next_window, Job, ReadAhead, Window};
use crate::records::Kind;
use crate::shared::BLOCK;
use format::InodeNo;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A sequential reader's first read-ahead window, in blocks.
const READAHEAD_START: u64 = 8;
/// The most blocks one background read-ahead job reads (512 KiB).
const READAHEAD_JOB_BLOCKS: u64 = 128;
/// Blocks behind a sequential read that [`FileSystem::let_go_behind`] keeps besides the
/// read's own (2 MiB: the kernel has two READs of a stream in flight at most with its
/// read-ahead at 2 MiB, and several request threads may serve them out of order).
const BEHIND_KEPT: u64 = 512;
/// How far behind that [`FileSystem::let_go_behind`] looks for pages to let go (each
/// READ moves the stream on by at most 1 MiB, so nothing is left behind).
const BEHIND_SCAN: u64 = 1024;
/// Lock-free read passes before a reader holds the state lock across its device reads
/// (a pass is retried when a writer installed blocks it was fetching).
const READ_PASSES: u32 = 3;

impl FileSystem {
    /// Reads up to `buf.len()` bytes at `offset` of file `ino`; returns the bytes read
    /// (0 at or past the end). Holes read as zeros. Misses read the missing blocks and,
    /// for a sequential reader, a read-ahead window that doubles up to the configured
    /// limit. A read never waits for a writer's copying or device reads; it returns the
    /// file as it was at one moment (each write whole or not at all).
    pub fn read_at(&self, ino: InodeNo, offset: u64, buf: &mut [u8]) -> Result<usize, VfsError> {
        let h = self.handle(ino)?;
        self.read_data(&h, offset, buf)
    }

    /// Up to `len` bytes at `offset` of file `ino` without a copy: a [`ReadView`] of the
    /// page cache's own blocks, read as [`FileSystem::read_at`] reads (misses from the
    /// device, read-ahead for sequential readers, one moment of the file). Its bytes
    /// never change and stay valid until it is dropped (see [`ReadView`]).
    pub fn read_view_at(
        &self,
        ino: InodeNo,
        offset: u64,
        len: usize,
    ) -> Result<ReadView, VfsError> {
        let h = self.handle(ino)?;
        self.read_view(&h, offset, len)
    }

    /// A reader that keeps what it reads elsewhere (the kernel's page cache of a FUSE
    /// mount) has read `len` bytes at `offset` of file `ino`: if it reads sequentially,
    /// the clean pages more than [`BEHIND_KEPT`] blocks behind the read are let go. A
    /// stream through the mount then reuses the cache's memory instead of growing it by
    /// its whole length: each page of new memory costs a fault and the zeroing of a page
    /// the device then overwrites, more than the device read itself on a virtual machine
    /// (docs/DESIGN.md §10.7). Pages a random reader reads stay.
    pub fn let_go_behind(&self, ino: InodeNo, offset: u64, len: usize) {
        let Ok(h) = self.handle(ino) else {
            return;
        };
        let mut pages = h.pages();
        if pages.ra_window == 0 {
            return;
        }
        let first = offset / BLOCK;
        let end = first.saturating_sub(BEHIND_KEPT + (len as u64).div_ceil(BLOCK));
        pages.evict_clean_range(end.saturating_sub(BEHIND_SCAN), end);
    }

    pub(crate) fn read_data(
        &self,
        h: &Arc<Handle>,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<usize, VfsError> {
        let Some(snap) = self.snapshot(h, offset, buf.len())? else {
            return Ok(0);
        };
        copy_out(&snap.blocks, snap.first, (offset, snap.end), buf);
        Ok((snap.end - offset) as usize)
    }

    /// Up to `len` bytes at `offset` of the file of `h` as a [`ReadView`] of the
    /// cache's own blocks (no copy): the file as it was at one moment, as
    /// [`FileSystem::read_at`] returns it. Empty at or past the end.
    pub(crate) fn read_view(
        &self,
        h: &Arc<Handle>,
        offset: u64,
        len: usize,
    ) -> Result<ReadView, VfsError> {
        Ok(match self.snapshot(h, offset, len)? {
            None => ReadView::empty(),
            Some(snap) => {
                let skip = (offset - snap.first * BLOCK) as usize;
                ReadView::of_blocks(snap.blocks, skip, (snap.end - offset) as usize)
            }
        })
    }

    /// The blocks holding bytes `offset..offset + len` of the file of `h` (within its
    /// size) as they were at one moment; `None` if there are none (at or past the end,
    /// or `len` 0).
    fn snapshot(
        &self,
        h: &Arc<Handle>,
        offset: u64,
        len: usize,
    ) -> Result<Option<Snapshot>, VfsError> {
        for pass in 1..=READ_PASSES {
            if let Some(snap) = self.read_pass(h, offset, len, pass)? {
                return Ok(snap);
            }
        }
        unreachable!("the last read pass holds the state lock and always completes")
    }

    /// Attempt `pass` of [`FileSystem::snapshot`]: `None` if a writer installed blocks
    /// the pass was reading from the device, or it waited for another's fetch (unless it
    /// is the last pass: that one holds the state lock throughout, which keeps writers
    /// from installing). Only the first pass counts for read-ahead: a retry is the same
    /// read, which must neither look like a jump back nor grow the window again.
    fn read_pass(
        &self,
        h: &Arc<Handle>,
        offset: u64,
        len: usize,
        pass: u32,
    ) -> Result<Option<Option<Snapshot>>, VfsError> {
        let hold = pass == READ_PASSES;
        let ino = h.ino;
        let st = h.read();
        let inode = live(&st, ino)?;
        if inode.kind == Kind::Dir {
            return Err(VfsError::IsDir(format!("inode {ino}")));
        }
        if offset >= inode.size || len == 0 {
            return Ok(Some(None));
        }
        let size = inode.size;
        let end = size.min(offset + len as u64);
        let first = offset / BLOCK;
        let last = (end - 1) / BLOCK;
        let eof_block = (size - 1) / BLOCK;
        let cache = &self.core.cache;
        // The snapshot: the size and the cached blocks under the state lock (writers
        // install both under it).
        let mut pages = h.pages();
        let held = hold.then_some(st);
        if pass == 1 {
            self.note_read(h, &mut pages, (first, last), eof_block);
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
        if got.iter().any(Option::is_none) {
            let (p, done) = self.fill_misses(h, pages, &mut got, (first, last), eof_block);
            pages = p;
            if !done? && held.is_none() {
                return Ok(None);
            }
        }
        drop(pages);
        drop(held);
        cache.hits.fetch_add(hits, Ordering::Relaxed);
        self.keep_budget(h, last);
        let blocks = got
            .into_iter()
            .map(|b| b.expect("every block read"))
            .collect();
        Ok(Some(Some(Snapshot { blocks, first, end })))
    }

    /// Reads the blocks missing in `got` (blocks `first..=last`) from the device with
    /// the `pages` lock released meanwhile (and, without background read-ahead, the
    /// window after them), caching them if no writer installed over them meanwhile.
    /// Returns the pages locked again and whether the fetch was current; a stale
    /// fetch's blocks still fill `got` (the last pass, holding the state lock, uses
    /// them).
    fn fill_misses<'a>(
        &self,
        h: &'a Arc<Handle>,
        mut pages: std::sync::MutexGuard<'a, Pages>,
        got: &mut [Option<Block>],
        (first, last): (u64, u64),
        eof_block: u64,
    ) -> (std::sync::MutexGuard<'a, Pages>, Result<bool, VfsError>) {
        let cache = &self.core.cache;
        let miss = first + got.iter().position(Option::is_none).expect("a miss") as u64;
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
        let fetched = self.fetch_runs(h.ino, got, first, last, fetch_end);
        let mut pages = h.pages();
        let current = pages.end_fetch(fetch);
        h.fetched.notify_all();
        let fetched = match fetched {
            Ok(f) => f,
            Err(e) => return (pages, Err(e)),
        };
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
        (pages, Ok(current))
    }

    /// Notes a read of blocks `first..=last` in `h`'s read-ahead state (`pages`) by
    /// [`next_window`]: a sequential reader's window doubles (at least twice the read)
    /// and the background read-ahead is asked for the blocks after it; a request of
    /// that reader noted out of order keeps the window; any other read closes it.
    fn note_read(
        &self,
        h: &Arc<Handle>,
        pages: &mut Pages,
        (first, last): (u64, u64),
        eof_block: u64,
    ) {
        let cache = &self.core.cache;
        let max = (cache.config.readahead_max / BLOCK).max(READAHEAD_START);
        let now = Window {
            next: pages.ra_next,
            blocks: pages.ra_window,
        };
        let (after, sequential) = next_window(now, (first, last), READAHEAD_START, max);
        pages.ra_next = after.next;
        pages.ra_window = after.blocks;
        if let (true, Some(ra)) = (sequential, &self.readahead) {
            read_ahead(ra, h, pages, (after.next - 1, eof_block), cache.max_pages());
        }
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

/// The blocks a read found: blocks `first..` of the file, holding its bytes up to
/// `end` (the read's end within the size).
struct Snapshot {
    blocks: Vec<Block>,
    first: u64,
    end: u64,
}

/// Copies bytes `offset..end` of the file into `buf` from `blocks`, the file's blocks
/// from `first` on.
fn copy_out(blocks: &[Block], first: u64, (offset, end): (u64, u64), buf: &mut [u8]) {
    debug_assert_eq!(blocks.len() as u64, (end - 1) / BLOCK - first + 1);
    for (i, block) in blocks.iter().enumerate() {
        let (lo, hi) = ((first + i as u64) * BLOCK, (first + i as u64 + 1) * BLOCK);
        let from = offset.max(lo);
        let to = end.min(hi);
        buf[(from - offset) as usize..(to - offset) as usize]
            .copy_from_slice(&block[(from - lo) as usize..(to - lo) as usize]);
    }
}
