//! File data: reads and writes through the page cache ([`crate::pagecache`]), write-back,
//! truncate, fsync and sync, and the background flusher.
//!
//! A write copies into pages and marks them dirty; the file's new size and times live in
//! its in-memory inode until the pages are written back. Write-back sends each run of
//! consecutive dirty blocks to the engine in one batch with the inode's record (size,
//! times, exact block count), in ascending order, each batch's size covering only what
//! is written so far: after a crash a file is always some prefix of its write-backs.
//! Every other writer of a file's record (attribute changes, links, renames, xattrs,
//! truncate, fallocate) writes the dirty pages back first (`Core::write_back`), so the
//! log sees the same writes in the same order as a write-through file system would,
//! only fewer and larger. An fsync writes back, then persists as before.
//!
//! Concurrency (docs/DESIGN.md §10.8): a writer holds its block range ([`crate::rangelock::RangeLock`]) while
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
//!
//! Modules: `write`, `read`, `truncate`, `writeback` (write-back, fsync, sync and the
//! room for dirty pages), `many` (the write-back of every dirty file, small files
//! grouped by domain), `flusher`, `blocks` (blocks to and from the engine) and `view`
//! (the cache's blocks lent to a reader without a copy).

mod blocks;
mod flusher;
mod many;
mod read;
mod truncate;
pub mod view;
mod write;
mod writeback;

pub(crate) use flusher::Flusher;
pub(crate) use write::At;

use crate::error::VfsError;
use crate::fs::FileSystem;
use crate::handle::Handle;
use format::InodeNo;

impl FileSystem {
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
        // Within the budget (every warm read), the pages' lock is not taken: the count
        // is read again under it.
        let cache = &self.core.cache;
        if cache.page_count() <= cache.max_pages() {
            return;
        }
        if !h.pages().keep_budget(near, 0) {
            self.core.cache.kick(false);
        }
    }
}
