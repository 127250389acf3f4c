//! An attached process's own copy of the file data it read, so that a warm read needs
//! no request (docs/DESIGN.md §12.5; kucofs.txt: clients read directly, the master
//! orders updates).
//!
//! The instance answers a read with the file's data count (the change page's per-file
//! count, `crate::table::ChangePage`) taken before it read, if no change of the file was
//! in flight then. The pages read are kept with that count, and answer later reads for
//! as long as the count has not moved: every write, truncate and fallocate of the file,
//! by any process or the kernel's mount, moves it before its first effect (the vfs
//! marks them itself, `vfs::changes`).
//!
//! Invariants:
//! - A file's pages are all of one count, and are kept only while this process has the
//!   file open: an inode number can name another file once the file is deleted and
//!   closed by all, but not while it is open here.
//! - A read answered here returns the bytes the file held when its count was checked,
//!   during the call.
//! - At most [`FileCache::budget`] bytes of pages are kept; a read larger than
//!   [`READ_CACHED_MAX`] bypasses the cache (a streaming reader would only churn it).

use crate::forklock::ForkLock;
use crate::table::ChangePage;
use format::InodeNo;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The cache's page (the vfs's block).
pub const PAGE: usize = 4096;
/// Reads up to this size are served and filled here; larger ones go to the instance.
pub const READ_CACHED_MAX: usize = 64 * 1024;
/// Shards, each with its own lock (by inode number); the budget is for all.
const SHARDS: usize = 16;
/// Default budget (`AUGEFS_CLIENT_CACHE_MIB` sets another; 0 turns the cache off).
const BUDGET_DEFAULT: usize = 256 << 20;

type Page = Box<[u8; PAGE]>;

#[derive(Debug, Default)]
struct File {
    /// Handles this process holds on the file.
    opens: u32,
    /// The count the pages were read at (None: no pages yet).
    count: Option<u64>,
    /// The file's size, if a read met its end at `count`.
    eof: Option<u64>,
    pages: HashMap<u64, Page>,
}

#[derive(Debug, Default)]
struct Shard {
    files: HashMap<u64, File>,
}

impl Shard {
    /// Drops `ino`'s pages; `total` counts the pages of every shard.
    fn reset(&mut self, ino: u64, total: &AtomicUsize) {
        if let Some(f) = self.files.get_mut(&ino) {
            total.fetch_sub(f.pages.len(), Ordering::Relaxed);
            f.pages.clear();
            f.count = None;
            f.eof = None;
        }
    }

    /// Drops pages of this shard until at most `max` are kept in all, other files'
    /// first.
    fn evict(&mut self, keep: u64, total: &AtomicUsize, max: usize) {
        let others: Vec<u64> = self.files.keys().copied().filter(|&i| i != keep).collect();
        for ino in others {
            if total.load(Ordering::Relaxed) <= max {
                return;
            }
            self.reset(ino, total);
        }
        if let Some(f) = self.files.get_mut(&keep) {
            while total.load(Ordering::Relaxed) > max {
                let Some(&b) = f.pages.keys().next() else {
                    break;
                };
                f.pages.remove(&b);
                f.eof = None;
                total.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
}

/// The process's copy of file data.
#[derive(Debug)]
pub struct FileCache {
    /// Under fork-safe locks: a forked child clears them ([`FileCache::before_fork`]).
    shards: Vec<ForkLock<Shard>>,
    /// Pages the cache may keep.
    max_pages: usize,
    /// Pages kept, in all shards.
    pages: AtomicUsize,
}

impl FileCache {
    /// A cache of at most `budget` bytes (0: none).
    pub fn new(budget: usize) -> FileCache {
        FileCache {
            shards: (0..SHARDS).map(|_| ForkLock::default()).collect(),
            max_pages: budget / PAGE,
            pages: AtomicUsize::new(0),
        }
    }

    /// The budget the environment asks for (`AUGEFS_CLIENT_CACHE_MIB`), else the default.
    pub fn budget_from_env() -> usize {
        std::env::var("AUGEFS_CLIENT_CACHE_MIB")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .map_or(BUDGET_DEFAULT, |mib| mib << 20)
    }

    /// Bytes the cache may hold.
    pub fn budget(&self) -> usize {
        self.max_pages * PAGE
    }

    pub fn enabled(&self) -> bool {
        self.max_pages > 0
    }

    fn shard(&self, ino: InodeNo) -> &ForkLock<Shard> {
        &self.shards[(ino.0.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) as usize % SHARDS]
    }

    /// This process opened a handle on `ino`.
    pub fn opened(&self, ino: InodeNo) {
        if self.enabled() {
            self.shard(ino)
                .with(|s| s.files.entry(ino.0).or_default().opens += 1);
        }
    }

    /// ... and closed one: the last close drops the file's pages.
    pub fn closed(&self, ino: InodeNo) {
        self.shard(ino).with(|s| {
            let Some(f) = s.files.get_mut(&ino.0) else {
                return;
            };
            f.opens = f.opens.saturating_sub(1);
            if f.opens == 0 {
                s.reset(ino.0, &self.pages);
                s.files.remove(&ino.0);
            }
        });
    }

    /// The fork prepare handler: holds every shard so the child copies none mid-change.
    pub fn before_fork(&self) {
        self.shards.iter().for_each(ForkLock::lock);
    }

    /// The fork parent handler.
    pub fn after_fork_parent(&self) {
        self.shards.iter().for_each(ForkLock::unlock);
    }

    /// The fork child handler: drops everything (the child's handles are not its
    /// parent's: the files kept may be closed and their numbers reused).
    pub fn forked(&self) {
        for s in &self.shards {
            // SAFETY: the prepare handler holds every shard; this is the only thread.
            *unsafe { s.held() } = Shard::default();
            s.unlock();
        }
        self.pages.store(0, Ordering::Relaxed);
    }

    /// Answers a read of `buf.len()` bytes at `offset` of `ino` from kept pages, if all
    /// are kept and current: the bytes read (0 past the end), or None.
    pub fn read(
        &self,
        page: &ChangePage,
        ino: InodeNo,
        offset: u64,
        buf: &mut [u8],
    ) -> Option<usize> {
        if buf.is_empty() || buf.len() > READ_CACHED_MAX {
            return None;
        }
        self.shard(ino).with(|s| {
            let f = s.files.get(&ino.0)?;
            if !page.data_same(ino, f.count?) {
                return None;
            }
            let want_end = offset.checked_add(buf.len() as u64)?;
            let end = f.eof.map_or(want_end, |eof| want_end.min(eof));
            if offset >= end {
                return f.eof.is_some().then_some(0);
            }
            let mut at = offset;
            while at < end {
                let p = f.pages.get(&(at / PAGE as u64))?;
                let from = (at % PAGE as u64) as usize;
                let n = (PAGE - from).min((end - at) as usize);
                let dst = (at - offset) as usize;
                buf[dst..dst + n].copy_from_slice(&p[from..from + n]);
                at += n as u64;
            }
            Some((end - offset) as usize)
        })
    }

    /// Keeps `data`, read at page-aligned `offset` of `ino` when the file's data count
    /// was `count`; `asked` bytes were asked for (fewer: the file ends there).
    pub fn fill(&self, ino: InodeNo, count: u64, offset: u64, data: &[u8], asked: usize) {
        assert_eq!(offset % PAGE as u64, 0, "fills are page-aligned");
        let (max, total) = (self.max_pages, &self.pages);
        self.shard(ino).with(|s| {
            let Some(f) = s.files.get_mut(&ino.0) else {
                return;
            };
            match f.count {
                Some(c) if c > count => return, // another thread kept newer bytes
                Some(c) if c < count => s.reset(ino.0, total),
                _ => {}
            }
            let f = s.files.get_mut(&ino.0).expect("looked up above");
            f.count = Some(count);
            let at_end = data.len() < asked;
            if at_end {
                f.eof = Some(offset + data.len() as u64);
            }
            let mut added = 0;
            for (i, chunk) in data.chunks(PAGE).enumerate() {
                // A partial page only at the end of the file (the rest reads as past it).
                if chunk.len() < PAGE && !at_end {
                    break;
                }
                let mut p: Page = Box::new([0; PAGE]);
                p[..chunk.len()].copy_from_slice(chunk);
                if f.pages.insert(offset / PAGE as u64 + i as u64, p).is_none() {
                    added += 1;
                }
            }
            if total.fetch_add(added, Ordering::Relaxed) + added > max {
                s.evict(ino.0, total, max);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize, seed: u8) -> Vec<u8> {
        (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
    }

    #[test]
    fn kept_pages_answer_until_the_file_changes() {
        let page = ChangePage::create().unwrap();
        let c = FileCache::new(1 << 20);
        let ino = InodeNo(42);
        c.opened(ino);
        let count = page.data_quiet(ino).unwrap();
        let d = data(3 * PAGE, 1);
        c.fill(ino, count, 0, &d, 4 * PAGE); // the file ends at 3 pages
        let mut buf = vec![0; 5000];
        assert_eq!(c.read(&page, ino, 100, &mut buf), Some(5000));
        assert_eq!(buf, d[100..5100]);
        // Past the end: what is left, then nothing.
        assert_eq!(c.read(&page, ino, 3 * PAGE as u64 - 10, &mut buf), Some(10));
        assert_eq!(c.read(&page, ino, 3 * PAGE as u64, &mut buf), Some(0));
        // A change of the file (started, not even finished) and the pages are stale.
        page.data_changed(ino, true);
        assert_eq!(c.read(&page, ino, 0, &mut buf), None);
        page.data_changed(ino, false);
        assert_eq!(c.read(&page, ino, 0, &mut buf), None);
        // Newer bytes replace them; older ones are refused.
        let now = page.data_quiet(ino).unwrap();
        let d2 = data(PAGE, 2);
        c.fill(ino, now, 0, &d2, PAGE);
        c.fill(ino, count, 0, &d, PAGE);
        assert_eq!(c.read(&page, ino, 0, &mut buf[..PAGE]), Some(PAGE));
        assert_eq!(buf[..PAGE], d2[..]);
        // Pages not kept are a miss.
        assert_eq!(c.read(&page, ino, PAGE as u64, &mut buf[..10]), None);
    }

    #[test]
    fn only_open_files_are_kept_and_the_budget_holds() {
        let page = ChangePage::create().unwrap();
        let c = FileCache::new(4 * PAGE);
        let ino = InodeNo(7);
        let count = page.data_quiet(ino).unwrap();
        c.fill(ino, count, 0, &data(PAGE, 0), PAGE);
        let mut buf = vec![0; PAGE];
        assert_eq!(c.read(&page, ino, 0, &mut buf), None, "not open: not kept");
        c.opened(ino);
        c.opened(ino);
        c.fill(ino, count, 0, &data(16 * PAGE, 0), 16 * PAGE);
        let mut kept = || {
            (0..16)
                .filter(|&b| c.read(&page, ino, b * PAGE as u64, &mut buf).is_some())
                .count()
        };
        assert_eq!(kept(), 4);
        c.closed(ino);
        assert_eq!(kept(), 4, "one handle is still open");
        c.closed(ino);
        assert_eq!(kept(), 0, "the last close drops the pages");
    }
}
