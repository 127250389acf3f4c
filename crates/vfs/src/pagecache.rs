//! The page cache: file blocks in memory, written back later (docs/DESIGN.md §4c,
//! "Page cache").
//!
//! Each inode's cached blocks ([`Pages`]) hang off its handle; [`Cache`] holds what all
//! of them share: the byte budget, the dirty-page count, and the handles with dirty
//! pages (kept alive until written back). The file-data path that fills, dirties and
//! writes back pages is in [`crate::data`]; the background flusher in
//! [`crate::data::Flusher`].
//!
//! Invariants:
//! - A page is only changed, dirtied or cleaned by a holder of its inode's write lock
//!   and the inode's `Pages` mutex; readers holding the read lock may add clean pages,
//!   and eviction may drop clean pages (under the `Pages` mutex only).
//! - An inode's record is written only when it has no dirty pages (the data path writes
//!   them back, with the record, before any other writer of the record): the record on
//!   the device never claims a size or a block count its data does not back.
//! - `Cache::dirty` is the sum of every `Pages::dirty`; `Cache::pages` of every map's
//!   length (both kept by `Pages`, including on drop).

use crate::fs::Handle;
use format::InodeNo;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Bytes per page (the file-system block).
pub const PAGE: usize = 4096;

/// Page-cache settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheConfig {
    /// Memory for cached pages, clean and dirty; clean pages are evicted beyond it.
    pub max_bytes: u64,
    /// Dirty bytes beyond which a writer writes its own file back before returning
    /// (and the flusher is woken at half of it).
    pub dirty_bytes: u64,
    /// How often the background flusher looks for old dirty pages; `None`: no flusher
    /// (dirty pages are written back only by fsync, sync, the dirty limit and unmount).
    pub flush_interval: Option<Duration>,
    /// Dirty pages older than this are written back by the flusher.
    pub expire: Duration,
    /// The largest read-ahead, in bytes (a sequential reader's window doubles up to it).
    pub readahead_max: u64,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            max_bytes: 256 << 20,
            dirty_bytes: 64 << 20,
            flush_interval: Some(Duration::from_millis(500)),
            expire: Duration::from_secs(3),
            readahead_max: 1 << 20,
        }
    }
}

impl CacheConfig {
    /// Every write is written back before it returns (no flusher): the order in which
    /// writes reach the log is the order they were made (docs/SEMANTICS.md §2).
    pub fn write_through() -> CacheConfig {
        CacheConfig {
            dirty_bytes: 0,
            flush_interval: None,
            ..CacheConfig::default()
        }
    }
}

/// Counters of the page cache (for `augefs bench` and tests).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub pages: u64,
    pub dirty: u64,
    pub hits: u64,
    pub misses: u64,
    /// Blocks read ahead of a sequential reader.
    pub readahead: u64,
    /// Pages written back, and the write-backs (batches) that carried them.
    pub written_back: u64,
    pub writebacks: u64,
    pub evicted: u64,
}

/// What all inodes' pages share.
#[derive(Debug)]
pub(crate) struct Cache {
    pub config: CacheConfig,
    pages: AtomicU64,
    dirty: AtomicU64,
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub readahead: AtomicU64,
    pub written_back: AtomicU64,
    pub writebacks: AtomicU64,
    pub evicted: AtomicU64,
    /// Handles with dirty pages: kept alive until written back.
    pub dirty_inodes: Mutex<HashMap<InodeNo, Arc<Handle>>>,
    /// The flusher's wake-up: (stop, urgent).
    pub signal: Mutex<(bool, bool)>,
    pub wake: Condvar,
}

impl Cache {
    pub fn new(config: CacheConfig) -> Cache {
        assert!(config.dirty_bytes <= config.max_bytes && config.max_bytes >= PAGE as u64);
        Cache {
            config,
            pages: AtomicU64::new(0),
            dirty: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            readahead: AtomicU64::new(0),
            written_back: AtomicU64::new(0),
            writebacks: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
            dirty_inodes: Mutex::new(HashMap::new()),
            signal: Mutex::new((false, false)),
            wake: Condvar::new(),
        }
    }

    pub fn stats(&self) -> CacheStats {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        CacheStats {
            pages: get(&self.pages),
            dirty: get(&self.dirty),
            hits: get(&self.hits),
            misses: get(&self.misses),
            readahead: get(&self.readahead),
            written_back: get(&self.written_back),
            writebacks: get(&self.writebacks),
            evicted: get(&self.evicted),
        }
    }

    pub fn page_count(&self) -> u64 {
        self.pages.load(Ordering::Relaxed)
    }

    pub fn max_pages(&self) -> u64 {
        self.config.max_bytes / PAGE as u64
    }

    /// Whether dirty pages exceed the dirty limit (a writer then writes back its file).
    pub fn over_dirty_limit(&self) -> bool {
        self.dirty.load(Ordering::Relaxed) * PAGE as u64 > self.config.dirty_bytes
    }

    /// Whether the flusher should start writing back (half the dirty limit).
    pub fn over_background_limit(&self) -> bool {
        self.dirty.load(Ordering::Relaxed) * PAGE as u64 > self.config.dirty_bytes / 2
    }

    /// Wakes the flusher now (`urgent`: write back regardless of age).
    pub fn kick(&self, urgent: bool) {
        let mut s = self.signal.lock().expect("flusher signal lock");
        s.1 |= urgent;
        self.wake.notify_one();
    }

    /// Records that `h` has dirty pages (kept alive until written back).
    pub fn note_dirty(&self, h: &Arc<Handle>) {
        self.dirty_inodes
            .lock()
            .expect("dirty inodes lock")
            .entry(h.ino)
            .or_insert_with(|| h.clone());
    }

    pub fn note_clean(&self, ino: InodeNo) {
        self.dirty_inodes
            .lock()
            .expect("dirty inodes lock")
            .remove(&ino);
    }
}

/// One cached block.
#[derive(Debug)]
pub(crate) struct Page {
    pub data: Box<[u8]>,
    pub dirty: bool,
    /// Whether the block is mapped on the device (`None`: not known yet). A dirty page
    /// over an unmapped block counts in `st_blocks` before it is written back.
    pub mapped: Option<bool>,
}

/// An inode's cached blocks.
#[derive(Debug)]
pub(crate) struct Pages {
    map: BTreeMap<u64, Page>,
    dirty: u64,
    /// While pages are dirty: the size in the inode's last written record.
    pub durable_size: Option<u64>,
    /// While pages are dirty: when the first of them was dirtied (the clock's ns).
    pub dirty_since: Option<u64>,
    /// Read-ahead: the block after the last read, and the current window in blocks.
    pub ra_next: u64,
    pub ra_window: u64,
    cache: Arc<Cache>,
}

impl Pages {
    pub fn new(cache: Arc<Cache>) -> Pages {
        Pages {
            map: BTreeMap::new(),
            dirty: 0,
            durable_size: None,
            dirty_since: None,
            ra_next: 0,
            ra_window: 0,
            cache,
        }
    }

    pub fn get(&self, b: u64) -> Option<&Page> {
        self.map.get(&b)
    }

    pub fn get_mut(&mut self, b: u64) -> Option<&mut Page> {
        self.map.get_mut(&b)
    }

    pub fn dirty_count(&self) -> u64 {
        self.dirty
    }

    /// Adds a clean page for block `b` unless one is cached (a cached page is newer);
    /// `mapped`: whether the block is mapped on the device, if known.
    pub fn insert_clean(&mut self, b: u64, data: &[u8], mapped: Option<bool>) {
        assert_eq!(data.len(), PAGE);
        if let std::collections::btree_map::Entry::Vacant(v) = self.map.entry(b) {
            v.insert(Page {
                data: data.into(),
                dirty: false,
                mapped,
            });
            self.cache.pages.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The cached page of block `b`, marked dirty.
    pub fn mark_dirty(&mut self, b: u64) -> &mut Page {
        let page = self.map.get_mut(&b).expect("a dirtied page is cached");
        if !page.dirty {
            page.dirty = true;
            self.dirty += 1;
            self.cache.dirty.fetch_add(1, Ordering::Relaxed);
        }
        page
    }

    /// The dirty blocks in ascending order, as runs of consecutive blocks of at most
    /// `max` blocks.
    pub fn dirty_runs(&self, max: u64) -> Vec<(u64, u64)> {
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for (&b, _) in self.map.iter().filter(|(_, p)| p.dirty) {
            match runs.last_mut() {
                Some((first, n)) if *first + *n == b && *n < max => *n += 1,
                _ => runs.push((b, 1)),
            }
        }
        runs
    }

    /// Blocks `first..first + n` (all cached) copied out, in order.
    pub fn copy_run(&self, first: u64, n: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(n as usize * PAGE);
        for b in first..first + n {
            out.extend_from_slice(&self.map[&b].data);
        }
        out
    }

    /// Blocks `first..first + n` were written back: clean and mapped.
    pub fn cleaned(&mut self, first: u64, n: u64) {
        for b in first..first + n {
            let page = self.map.get_mut(&b).expect("written-back page cached");
            if page.dirty {
                page.dirty = false;
                self.dirty -= 1;
                self.cache.dirty.fetch_sub(1, Ordering::Relaxed);
            }
            page.mapped = Some(true);
        }
        if self.dirty == 0 {
            self.durable_size = None;
            self.dirty_since = None;
        }
    }

    /// Dirty pages whose mapping is not known yet.
    pub fn unknown_dirty(&self) -> Vec<u64> {
        self.map
            .iter()
            .filter(|(_, p)| p.dirty && p.mapped.is_none())
            .map(|(&b, _)| b)
            .collect()
    }

    /// Dirty pages over unmapped blocks (each becomes an allocated block when written
    /// back). Call after resolving `unknown_dirty`.
    pub fn pending_blocks(&self) -> u64 {
        self.map
            .values()
            .filter(|p| p.dirty && p.mapped == Some(false))
            .count() as u64
    }

    /// Drops every page, dirty ones included (the file's data changed under the cache,
    /// or the file is gone).
    pub fn clear(&mut self) {
        let n = self.map.len() as u64;
        self.map.clear();
        self.cache.pages.fetch_sub(n, Ordering::Relaxed);
        self.cache.dirty.fetch_sub(self.dirty, Ordering::Relaxed);
        self.dirty = 0;
        self.durable_size = None;
        self.dirty_since = None;
        self.ra_next = 0;
        self.ra_window = 0;
    }

    /// Drops up to `n` clean pages, those farthest from block `near` first; returns how
    /// many were dropped.
    pub fn evict_clean(&mut self, n: u64, near: u64) -> u64 {
        let mut clean: Vec<u64> = self
            .map
            .iter()
            .filter(|(_, p)| !p.dirty)
            .map(|(&b, _)| b)
            .collect();
        clean.sort_by_key(|&b| std::cmp::Reverse(b.abs_diff(near)));
        clean.truncate(n as usize);
        for b in &clean {
            self.map.remove(b);
        }
        let dropped = clean.len() as u64;
        self.cache.pages.fetch_sub(dropped, Ordering::Relaxed);
        self.cache.evicted.fetch_add(dropped, Ordering::Relaxed);
        dropped
    }
}

impl Drop for Pages {
    fn drop(&mut self) {
        // A handle with dirty pages is kept alive by the cache until written back, so
        // only an instance dropped without unmounting (a crash) loses dirty pages here.
        self.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pages() -> Pages {
        Pages::new(Arc::new(Cache::new(CacheConfig::default())))
    }

    #[test]
    fn dirty_runs_split_at_gaps_and_the_limit() {
        let mut p = pages();
        for b in [3, 4, 5, 9, 10, 11, 12] {
            p.insert_clean(b, &[b as u8; PAGE], None);
            p.mark_dirty(b);
        }
        p.insert_clean(6, &[0; PAGE], Some(true));
        assert_eq!(p.dirty_runs(3), vec![(3, 3), (9, 3), (12, 1)]);
        assert_eq!(p.copy_run(9, 2)[PAGE], 10);
        p.cleaned(3, 3);
        assert_eq!(p.dirty_count(), 4);
        assert_eq!(p.cache.stats().dirty, 4);
        assert_eq!(p.cache.stats().pages, 8);
    }

    #[test]
    fn counters_follow_clear_evict_and_drop() {
        let cache = Arc::new(Cache::new(CacheConfig::default()));
        let mut p = Pages::new(cache.clone());
        for b in 0..10 {
            p.insert_clean(b, &[0; PAGE], Some(false));
        }
        p.insert_clean(20, &[0; PAGE], Some(false));
        p.mark_dirty(20);
        assert_eq!(p.pending_blocks(), 1);
        assert_eq!(p.evict_clean(4, 0), 4);
        // The farthest from block 0 went first.
        assert!(p.get(9).is_none() && p.get(0).is_some());
        assert_eq!(cache.stats().pages, 7);
        drop(p);
        assert_eq!((cache.stats().pages, cache.stats().dirty), (0, 0));
    }
}
