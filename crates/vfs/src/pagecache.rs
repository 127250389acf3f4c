//! The page cache: file blocks in memory, written back later (docs/DESIGN.md
//! §10.7).
//!
//! Each inode's cached blocks ([`Pages`]) hang off its handle; [`Cache`] holds what all
//! of them share: the byte budget, the dirty-page count, and the numbers of the inodes
//! with dirty pages (whose handles the inode table keeps until written back). The
//! cache knows inodes by number only: it depends on no other part of the vfs. The file-data path that fills, dirties and
//! writes back pages is in [`crate::data`]; the background flusher in
//! [`crate::data::Flusher`].
//!
//! A page's bytes never change once cached ([`Block`] is shared, immutable): a writer
//! builds new blocks and installs them, so readers copy from the blocks they looked up
//! without holding any lock, and a write-back sends the blocks it snapshotted while
//! writers go on (docs/DESIGN.md §10.8).
//!
//! Invariants:
//! - Pages are looked up, installed, cleaned and dropped under the inode's `Pages`
//!   mutex only, which is never held across device IO; blocks are installed only by a
//!   data writer holding the block range's lock and the inode's state lock.
//! - A fetch (a reader's device read of blocks it missed) is stale once any of its
//!   blocks was installed or the pages were cleared meanwhile; a stale fetch's blocks
//!   are not cached (the reader retries).
//! - An inode's record is written only when it has no dirty pages (the data path writes
//!   them back, with the record, before any other writer of the record): the record on
//!   the device never claims a size or a block count its data does not back.
//! - `Cache::dirty` is the sum of every `Pages::dirty`; `Cache::pages` of every map's
//!   length (both kept by `Pages`, including on drop).

use format::InodeNo;
use platform::Signal;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use crate::slab::PAGE;

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
    /// Threads that read ahead of sequential readers in the background (started when
    /// first needed); 0: a reader reads its read-ahead itself, with its own blocks.
    pub readahead_workers: usize,
}

impl Default for CacheConfig {
    /// Sized to this machine's memory ([`CacheConfig::for_memory`]).
    fn default() -> Self {
        CacheConfig::for_memory(platform::memory::physical_bytes())
    }
}

impl CacheConfig {
    /// The smallest and largest cache [`CacheConfig::for_memory`] chooses.
    pub const MAX_BYTES_MIN: u64 = 64 << 20;
    pub const MAX_BYTES_MAX: u64 = 4 << 30;

    /// Settings for a machine with `memory` bytes: the cache may take an eighth of it
    /// (between [`CacheConfig::MAX_BYTES_MIN`] and [`CacheConfig::MAX_BYTES_MAX`]) and
    /// half of the cache may be dirty, like the kernel's dirty ratio (20% of memory)
    /// scaled down to a cache that memory pressure cannot shrink. A smaller dirty limit
    /// writes back files that are deleted soon after (Filebench's fileserver wrote 30
    /// times the kernel file systems' bytes per operation with 64 MiB). Dirty pages are
    /// still written back after `expire` whatever the limit.
    pub fn for_memory(memory: u64) -> CacheConfig {
        let max_bytes = (memory / 8).clamp(Self::MAX_BYTES_MIN, Self::MAX_BYTES_MAX);
        CacheConfig {
            max_bytes,
            dirty_bytes: max_bytes / 2,
            flush_interval: Some(Duration::from_millis(500)),
            expire: Duration::from_secs(3),
            // A window of 8 MiB keeps 8-16 MiB asked ahead of a sequential reader: with
            // 512 KiB jobs, up to `readahead_workers` device reads in flight at once.
            readahead_max: 8 << 20,
            readahead_workers: 8,
        }
    }

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
    /// Bytes the device has room for beyond its live data, as last looked up (at mount,
    /// in flusher rounds, when a write finds itself beyond it) less what write-backs
    /// took since: the dirty limit never exceeds half of it, so that a write the device
    /// cannot hold fails when it is made, not at write-back.
    room: AtomicU64,
    /// Bytes writes claimed of the room for pages not yet counted dirty.
    claimed: AtomicU64,
    /// The write-backs that took room so far: a look-up of the room that began before
    /// one of them ended is stale and not stored (it would give back what it took).
    room_takes: Mutex<u64>,
    /// Inodes with dirty pages: their handles stay in the inode table until written
    /// back (`crate::caches::InodeTable` evicts none of them).
    dirty_inodes: Mutex<HashSet<InodeNo>>,
    /// The flusher's wake-up: (stop, urgent).
    pub signal: Mutex<(bool, bool)>,
    pub wake: Signal,
}

/// A write's claim on the device's room ([`Cache::claim_room`]).
#[must_use]
pub struct RoomClaim<'a> {
    cache: &'a Cache,
    bytes: u64,
}

impl std::fmt::Debug for RoomClaim<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RoomClaim({} bytes)", self.bytes)
    }
}

impl Drop for RoomClaim<'_> {
    fn drop(&mut self) {
        self.cache.claimed.fetch_sub(self.bytes, Ordering::AcqRel);
    }
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
            room: AtomicU64::new(u64::MAX),
            claimed: AtomicU64::new(0),
            room_takes: Mutex::new(0),
            dirty_inodes: Mutex::new(HashSet::new()),
            signal: Mutex::new((false, false)),
            wake: Signal::new(),
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
        self.dirty_bytes() > self.dirty_limit()
    }

    /// Whether the flusher should start writing back (half the dirty limit).
    pub fn over_background_limit(&self) -> bool {
        self.dirty_bytes() > self.dirty_limit() / 2
    }

    pub fn dirty_bytes(&self) -> u64 {
        self.dirty.load(Ordering::Relaxed) * PAGE as u64
    }

    /// The configured dirty limit, or half the device's room if that is less.
    pub fn dirty_limit(&self) -> u64 {
        self.config
            .dirty_bytes
            .min(self.room.load(Ordering::Relaxed) / 2)
    }

    /// The device's room for new data less what the dirty pages will take (as last
    /// looked up, erring low; no lock).
    pub fn room_left(&self) -> u64 {
        self.room
            .load(Ordering::Relaxed)
            .saturating_sub(self.dirty_bytes())
    }

    /// Where the room's accounting stands, for a look-up about to begin
    /// ([`Cache::set_room`]).
    pub fn room_epoch(&self) -> u64 {
        *self.room_takes.lock().expect("room lock")
    }

    /// Notes the device's room for new data (bytes beyond its live data) as looked up
    /// since `epoch`; false, and nothing changes, if a write-back took room meanwhile
    /// (the look-up may have missed it).
    pub fn set_room(&self, epoch: u64, bytes: u64) -> bool {
        let takes = self.room_takes.lock().expect("room lock");
        if *takes != epoch {
            return false;
        }
        self.room.store(bytes, Ordering::Relaxed);
        true
    }

    /// Notes that a write-back took `bytes` of the room (before its pages are counted
    /// clean, so the room never counts them twice the generous way).
    pub fn take_room(&self, bytes: u64) {
        let mut takes = self.room_takes.lock().expect("room lock");
        *takes += 1;
        let _ = self
            .room
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |r| {
                Some(r.saturating_sub(bytes))
            });
    }

    /// Claims `more` bytes of the room for a write's pages, if the dirty pages, other
    /// writes' claims and these fit; the claim ends when dropped (after the pages are
    /// counted dirty).
    pub fn claim_room(&self, more: u64) -> Option<RoomClaim<'_>> {
        self.claimed
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| {
                let total = self.dirty_bytes().saturating_add(c).saturating_add(more);
                (total <= self.room.load(Ordering::Acquire)).then_some(c + more)
            })
            .ok()
            .map(|_| RoomClaim {
                cache: self,
                bytes: more,
            })
    }

    /// Wakes the flusher now (`urgent`: write back regardless of age).
    pub fn kick(&self, urgent: bool) {
        let mut s = self.signal.lock().expect("flusher signal lock");
        s.1 |= urgent;
        self.wake.notify_one();
    }

    /// Records that `ino` has dirty pages (its handle is kept until written back).
    pub fn note_dirty(&self, ino: InodeNo) {
        self.dirty_inodes
            .lock()
            .expect("dirty inodes lock")
            .insert(ino);
    }

    pub fn note_clean(&self, ino: InodeNo) {
        self.dirty_inodes
            .lock()
            .expect("dirty inodes lock")
            .remove(&ino);
    }

    /// The inodes with dirty pages now.
    pub fn dirty_inodes(&self) -> Vec<InodeNo> {
        let dirty = self.dirty_inodes.lock().expect("dirty inodes lock");
        dirty.iter().copied().collect()
    }

    /// The set of inodes with dirty pages, locked (a leaf lock: nothing is taken while
    /// holding it).
    pub fn dirty_set(&self) -> std::sync::MutexGuard<'_, HashSet<InodeNo>> {
        self.dirty_inodes.lock().expect("dirty inodes lock")
    }

    /// Forgets every inode with dirty pages (an instance dropped without unmounting
    /// loses its dirty pages, as a crash would).
    pub fn forget_dirty(&self) {
        self.dirty_inodes.lock().expect("dirty inodes lock").clear();
    }
}

pub(crate) use crate::slab::Block;

/// Dirty pages past which a file whose writer keeps its bytes elsewhere is written
/// back in the background (16 MiB; [`crate::FileSystem::write_behind`]).
pub(crate) const WRITE_BEHIND_BLOCKS: u64 = 4096;

/// A block of zeros (a hole), one shared allocation: blocks are immutable.
pub(crate) fn zero_block() -> Block {
    static ZERO: std::sync::OnceLock<Block> = std::sync::OnceLock::new();
    ZERO.get_or_init(|| Block::from(&[0u8; PAGE][..])).clone()
}

/// One cached block, as [`Pages::get`] shows it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Page<'a> {
    pub data: &'a Block,
    pub dirty: bool,
    /// Whether the block is mapped on the device (`None`: not known yet). A dirty page
    /// over an unmapped block counts in `st_blocks` before it is written back.
    pub mapped: Option<bool>,
}

/// Blocks per [`Group`].
const GROUP: u64 = 64;

/// The cached pages of `GROUP` consecutive blocks: bitmaps of their states and the
/// present ones' blocks in order (a sparse group holds only what it caches).
///
/// Bit `i` stands for block `group * GROUP + i`; `known` and `mapped` are meaningful
/// for present blocks only, `mapped` only where `known`.
#[derive(Debug, Default)]
struct Group {
    present: u64,
    dirty: u64,
    known: u64,
    mapped: u64,
    blocks: Vec<Block>,
}

impl Group {
    /// Where block bit `i` is (or goes) in `blocks`.
    fn slot(&self, i: u32) -> usize {
        (self.present & ((1u64 << i) - 1)).count_ones() as usize
    }

    fn get(&self, i: u32) -> Option<&Block> {
        (self.present >> i & 1 == 1).then(|| &self.blocks[self.slot(i)])
    }

    fn page(&self, i: u32) -> Option<Page<'_>> {
        self.get(i).map(|data| Page {
            data,
            dirty: self.dirty >> i & 1 == 1,
            mapped: (self.known >> i & 1 == 1).then_some(self.mapped >> i & 1 == 1),
        })
    }

    /// The page's contribution to the `unknown` and `unmapped` tallies (dirty pages of
    /// unknown mapping, dirty pages over unmapped blocks).
    fn tally(&self, i: u32) -> (u64, u64) {
        if self.dirty >> i & 1 == 0 {
            return (0, 0);
        }
        if self.known >> i & 1 == 0 {
            (1, 0)
        } else {
            (0, u64::from(self.mapped >> i & 1 == 0))
        }
    }

    fn set_mapped(&mut self, i: u32, mapped: Option<bool>) {
        let bit = 1u64 << i;
        match mapped {
            None => self.known &= !bit,
            Some(m) => {
                self.known |= bit;
                self.mapped = if m {
                    self.mapped | bit
                } else {
                    self.mapped & !bit
                };
            }
        }
    }

    /// Removes block bit `i`'s page if present; returns whether it was dirty.
    fn remove(&mut self, i: u32) -> Option<bool> {
        let bit = 1u64 << i;
        if self.present & bit == 0 {
            return None;
        }
        let at = self.slot(i);
        self.blocks.remove(at);
        let dirty = self.dirty & bit != 0;
        self.present &= !bit;
        self.dirty &= !bit;
        self.known &= !bit;
        self.mapped &= !bit;
        Some(dirty)
    }
}

/// The set bits of `bits`, lowest first.
fn bits_of(mut bits: u64) -> impl Iterator<Item = u32> {
    std::iter::from_fn(move || {
        (bits != 0).then(|| {
            let i = bits.trailing_zeros();
            bits &= bits - 1;
            i
        })
    })
}

/// The mask of bits `lo..hi` (`hi` at most 64).
fn mask(lo: u64, hi: u64) -> u64 {
    debug_assert!(lo <= hi && hi <= GROUP);
    let upto = |n: u64| if n >= 64 { u64::MAX } else { (1u64 << n) - 1 };
    upto(hi) & !upto(lo)
}

/// An inode's cached blocks, in groups of [`GROUP`] consecutive blocks (a large write
/// or read touches one map entry per 64 blocks, not one per block). Laid out in
/// declaration order: the counts a stat reads come first, beside the lock
/// (`Handle::pages`).
#[derive(Debug)]
#[repr(C)]
pub(crate) struct Pages {
    /// Dirty pages.
    dirty: u64,
    /// Dirty pages whose mapping is not known yet, and dirty pages over unmapped
    /// blocks (kept as pages change: `st_blocks` needs them on every stat).
    unknown: u64,
    unmapped: u64,
    /// Cached pages.
    count: u64,
    groups: BTreeMap<u64, Group>,
    /// The groups with dirty pages (a write-back visits these, not every cached page).
    dirty_groups: BTreeSet<u64>,
    /// While pages are dirty: the size in the inode's last written record.
    pub durable_size: Option<u64>,
    /// While pages are dirty: when the first of them was dirtied (the clock's ns).
    pub dirty_since: Option<u64>,
    /// Read-ahead: the block after the last read, the current window in blocks, and
    /// the end (exclusive) of the blocks asked of the background read-ahead.
    pub ra_next: u64,
    pub ra_window: u64,
    pub ra_async_end: u64,
    /// Readers' device reads in flight: (id, first block, last block, stale).
    fetches: Vec<(u64, u64, u64, bool)>,
    next_fetch: u64,
    /// Bumped whenever pages are dropped (cleared, or a range of them): mappings
    /// learned from lookups begun before are not taken ([`Pages::drops`]).
    drops: u64,
    /// The file's writer keeps what it writes elsewhere too (the kernel's page cache of
    /// a FUSE mount) and wrote a stream: the flusher writes its dirty pages back early
    /// and lets its clean whole pages go ([`crate::FileSystem::write_behind`]).
    pub let_go_clean: bool,
    cache: Arc<Cache>,
}

impl Pages {
    /// Bytes from the start of a `Pages` to the end of the counts a stat reads.
    #[cfg(test)]
    pub(crate) const COUNTS_END: usize =
        std::mem::offset_of!(Pages, count) + std::mem::size_of::<u64>();
}

/// Block `b`'s group and bit.
fn split(b: u64) -> (u64, u32) {
    (b / GROUP, (b % GROUP) as u32)
}

impl Pages {
    pub fn new(cache: Arc<Cache>) -> Pages {
        Pages {
            groups: BTreeMap::new(),
            dirty_groups: BTreeSet::new(),
            count: 0,
            dirty: 0,
            durable_size: None,
            dirty_since: None,
            ra_next: 0,
            ra_window: 0,
            ra_async_end: 0,
            unknown: 0,
            unmapped: 0,
            fetches: Vec::new(),
            next_fetch: 0,
            drops: 0,
            let_go_clean: false,
            cache,
        }
    }

    pub fn get(&self, b: u64) -> Option<Page<'_>> {
        let (g, i) = split(b);
        self.groups.get(&g)?.page(i)
    }

    /// Changes block `b`'s group with `change` (made empty if missing, and dropped if
    /// left empty), keeping the tallies: one map look-up.
    fn change<R>(&mut self, b: u64, change: impl FnOnce(&mut Group, u32) -> R) -> R {
        let (g, i) = split(b);
        let group = self.groups.entry(g).or_default();
        let (unknown, unmapped) = group.tally(i);
        let was_dirty = group.dirty;
        let out = change(group, i);
        let (unknown_after, unmapped_after) = group.tally(i);
        let now_dirty = group.dirty;
        let empty = group.present == 0;
        self.unknown = self.unknown - unknown + unknown_after;
        self.unmapped = self.unmapped - unmapped + unmapped_after;
        if was_dirty == 0 && now_dirty != 0 {
            self.dirty_groups.insert(g);
        } else if was_dirty != 0 && now_dirty == 0 {
            self.dirty_groups.remove(&g);
        }
        if empty {
            self.groups.remove(&g);
        }
        out
    }

    /// Notes whether block `b` is mapped on the device, unless its page knows already.
    /// How many times pages were dropped so far: a lookup of the device's mappings
    /// begun before the count moved may describe blocks the file no longer has (a
    /// truncate or punch unmaps blocks only after dropping their pages).
    pub fn drops(&self) -> u64 {
        self.drops
    }

    pub fn learn_mapped(&mut self, b: u64, mapped: bool) {
        self.change(b, |group, i| {
            let bit = 1u64 << i;
            if group.present & bit != 0 && group.known & bit == 0 {
                group.set_mapped(i, Some(mapped));
            }
        });
    }

    pub fn dirty_count(&self) -> u64 {
        self.dirty
    }

    /// Adds a clean page for block `b` unless one is cached (a cached page is newer);
    /// `mapped`: whether the block is mapped on the device, if known.
    /// Returns whether it was added.
    pub fn insert_clean(&mut self, b: u64, data: Block, mapped: Option<bool>) -> bool {
        assert_eq!(data.len(), PAGE);
        let (g, i) = split(b);
        let group = self.groups.entry(g).or_default();
        if group.present >> i & 1 == 1 {
            return false;
        }
        let at = group.slot(i);
        group.blocks.insert(at, data);
        group.present |= 1 << i;
        group.set_mapped(i, mapped);
        self.count += 1;
        self.cache.pages.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// One block's [`Pages::install_all`].
    #[cfg(test)]
    pub fn install(&mut self, b: u64, data: Block, mapped: Option<bool>) {
        self.install_all([(b, data, mapped)]);
    }

    /// Makes each `(b, data, mapped)` block `b`'s cached contents, dirty (a data
    /// writer's new blocks). `mapped`: whether the block is mapped on the device, if
    /// known (a replaced page's knowledge wins). Fetches of the blocks in flight become
    /// stale. The cache's shared counters are updated once (a 2 MiB write from each of
    /// two threads bounced their cache line 1,024 times).
    pub fn install_all(&mut self, blocks: impl IntoIterator<Item = (u64, Block, Option<bool>)>) {
        let (mut added, mut dirtied) = (0, 0);
        for (b, data, mapped) in blocks {
            let (a, d) = self.install_one(b, data, mapped);
            added += u64::from(a);
            dirtied += u64::from(d);
        }
        self.count += added;
        self.dirty += dirtied;
        if added > 0 {
            self.cache.pages.fetch_add(added, Ordering::Relaxed);
        }
        if dirtied > 0 {
            self.cache.dirty.fetch_add(dirtied, Ordering::Relaxed);
        }
    }

    /// Installs one block; whether its page was added, and whether it was dirtied (the
    /// caller counts them).
    fn install_one(&mut self, b: u64, data: Block, mapped: Option<bool>) -> (bool, bool) {
        assert_eq!(data.len(), PAGE);
        self.stale_fetches(b, b);
        self.change(b, |group, i| {
            let bit = 1u64 << i;
            let at = group.slot(i);
            let added = group.present & bit == 0;
            if added {
                group.blocks.insert(at, data);
                group.present |= bit;
                group.set_mapped(i, mapped);
            } else {
                // The old block drops here (a reader or write-back may still hold it).
                group.blocks[at] = data;
                // The page's knowledge is at least as new as the writer's (a write-back
                // may have mapped the block since the writer looked).
                if group.known & bit == 0 {
                    group.set_mapped(i, mapped);
                }
            }
            let dirtied = group.dirty & bit == 0;
            group.dirty |= bit;
            (added, dirtied)
        })
    }

    /// The dirty blocks in ascending order, as runs of consecutive blocks of at most
    /// `max` blocks.
    pub fn dirty_runs(&self, max: u64) -> Vec<(u64, u64)> {
        debug_assert_eq!(
            self.dirty,
            self.groups
                .values()
                .map(|g| u64::from(g.dirty.count_ones()))
                .sum::<u64>()
        );
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for &g in &self.dirty_groups {
            for i in bits_of(self.groups[&g].dirty) {
                let b = g * GROUP + u64::from(i);
                match runs.last_mut() {
                    Some((first, n)) if *first + *n == b && *n < max => *n += 1,
                    _ => runs.push((b, 1)),
                }
            }
        }
        runs
    }

    /// The cached blocks `first..first + n` in order, `None` where not cached.
    pub fn cached(&self, first: u64, n: u64) -> Vec<Option<Block>> {
        let mut out = Vec::with_capacity(n as usize);
        let end = first + n;
        let mut b = first;
        while b < end {
            let (g, i) = split(b);
            let upto = (end - g * GROUP).min(GROUP);
            match self.groups.get(&g) {
                Some(group) => {
                    out.extend((u64::from(i)..upto).map(|i| group.get(i as u32).cloned()))
                }
                None => out.resize(out.len() + (upto - u64::from(i)) as usize, None),
            }
            b = g * GROUP + upto;
        }
        out
    }

    /// The blocks `first..first + n` (all cached), in order.
    pub fn blocks(&self, first: u64, n: u64) -> Vec<Block> {
        self.cached(first, n)
            .into_iter()
            .map(|b| b.expect("a cached block"))
            .collect()
    }

    /// Block `b` was written back as `data`: it is mapped now, and clean unless a
    /// writer installed newer bytes meanwhile.
    pub fn written(&mut self, b: u64, data: &Block) {
        let cleaned = self.change(b, |group, i| {
            let bit = 1u64 << i;
            let Some(cached) = group.get(i) else {
                return false;
            };
            let cleaned = group.dirty & bit != 0 && Block::same(cached, data);
            group.set_mapped(i, Some(true));
            if cleaned {
                group.dirty &= !bit;
            }
            cleaned
        });
        if cleaned {
            self.dirty -= 1;
            self.cache.dirty.fetch_sub(1, Ordering::Relaxed);
        }
        if self.dirty == 0 {
            self.durable_size = None;
            self.dirty_since = None;
        }
    }

    /// Registers a reader's device read of blocks `first..=last`; returns its id for
    /// [`Pages::end_fetch`].
    pub fn begin_fetch(&mut self, first: u64, last: u64) -> u64 {
        self.next_fetch += 1;
        self.fetches.push((self.next_fetch, first, last, false));
        self.next_fetch
    }

    /// Ends fetch `id`: whether its blocks are still current (none was installed and
    /// the pages were not cleared since it began).
    pub fn end_fetch(&mut self, id: u64) -> bool {
        let i = self
            .fetches
            .iter()
            .position(|f| f.0 == id)
            .expect("a fetch ends once");
        !self.fetches.swap_remove(i).3
    }

    /// Whether a current (not stale) fetch in flight covers block `b`.
    pub fn fetching(&self, b: u64) -> bool {
        self.fetches.iter().any(|f| f.1 <= b && b <= f.2 && !f.3)
    }

    fn stale_fetches(&mut self, first: u64, last: u64) {
        for f in self.fetches.iter_mut() {
            if f.1 <= last && first <= f.2 {
                f.3 = true;
            }
        }
    }

    /// Dirty pages whose mapping is not known yet.
    pub fn unknown_dirty(&self) -> Vec<u64> {
        let mut out = Vec::with_capacity(self.unknown as usize);
        if self.unknown > 0 {
            for &g in &self.dirty_groups {
                let group = &self.groups[&g];
                out.extend(bits_of(group.dirty & !group.known).map(|i| g * GROUP + u64::from(i)));
            }
        }
        debug_assert_eq!(out.len() as u64, self.unknown);
        out
    }

    /// Dirty pages over unmapped blocks (each becomes an allocated block when written
    /// back). Call after resolving `unknown_dirty`.
    pub fn pending_blocks(&self) -> u64 {
        debug_assert_eq!(
            self.unmapped,
            self.groups
                .values()
                .map(|g| u64::from((g.dirty & g.known & !g.mapped).count_ones()))
                .sum::<u64>()
        );
        self.unmapped
    }

    /// Drops every page, dirty ones included (the file's data changed under the cache,
    /// or the file is gone).
    pub fn clear(&mut self) {
        self.drops += 1;
        self.groups.clear();
        self.dirty_groups.clear();
        self.unknown = 0;
        self.unmapped = 0;
        self.stale_fetches(0, u64::MAX);
        self.cache.pages.fetch_sub(self.count, Ordering::Relaxed);
        self.cache.dirty.fetch_sub(self.dirty, Ordering::Relaxed);
        self.count = 0;
        self.dirty = 0;
        self.durable_size = None;
        self.dirty_since = None;
        self.ra_next = 0;
        self.ra_window = 0;
    }

    /// Removes the pages of block bits `bits` of group `g` (present ones); returns how
    /// many pages and how many dirty ones went.
    fn remove_bits(&mut self, g: u64, bits: u64) -> (u64, u64) {
        let Some(group) = self.groups.get(&g) else {
            return (0, 0);
        };
        let present = group.present & bits;
        if present == group.present {
            // The whole group goes: no per-page upkeep.
            let group = self.groups.remove(&g).expect("looked up");
            self.dirty_groups.remove(&g);
            self.unknown -= u64::from((group.dirty & !group.known).count_ones());
            self.unmapped -= u64::from((group.dirty & group.known & !group.mapped).count_ones());
            return (
                u64::from(group.present.count_ones()),
                u64::from(group.dirty.count_ones()),
            );
        }
        let (mut pages, mut dirty) = (0, 0);
        for i in bits_of(present) {
            let was_dirty = self.change(g * GROUP + u64::from(i), |group, i| group.remove(i));
            pages += 1;
            dirty += u64::from(was_dirty == Some(true));
        }
        (pages, dirty)
    }

    /// Drops the pages of blocks `first..end`, dirty ones included (those blocks
    /// changed under the cache: a truncate, a punched hole); the others stay.
    pub fn drop_range(&mut self, first: u64, end: u64) {
        if first >= end {
            return;
        }
        self.drops += 1;
        let (lo, hi) = (first / GROUP, (end - 1) / GROUP);
        let touched: Vec<u64> = self.groups.range(lo..=hi).map(|(&g, _)| g).collect();
        let (mut pages, mut dirty) = (0, 0);
        for g in touched {
            let from = first.max(g * GROUP) - g * GROUP;
            let to = end.min((g + 1) * GROUP) - g * GROUP;
            let (p, d) = self.remove_bits(g, mask(from, to));
            pages += p;
            dirty += d;
        }
        self.count -= pages;
        self.dirty -= dirty;
        self.cache.pages.fetch_sub(pages, Ordering::Relaxed);
        self.cache.dirty.fetch_sub(dirty, Ordering::Relaxed);
        self.stale_fetches(first, end - 1);
        if self.dirty == 0 {
            self.durable_size = None;
            self.dirty_since = None;
        }
    }

    /// Drops clean pages of this file beyond the cache's budget with `adding` more
    /// pages, those farthest from block `near` first; false if they were not enough
    /// (other files must give pages back: the caller kicks the flusher).
    pub fn keep_budget(&mut self, near: u64, adding: u64) -> bool {
        let excess = (self.cache.page_count() + adding).saturating_sub(self.cache.max_pages());
        excess == 0 || self.evict_clean(excess, near) >= excess
    }

    /// Drops the clean pages of blocks `first..end` (dirty ones stay); returns how many
    /// were dropped.
    pub fn evict_clean_range(&mut self, first: u64, end: u64) -> u64 {
        if first >= end {
            return 0;
        }
        let (lo, hi) = (first / GROUP, (end - 1) / GROUP);
        let clean: Vec<(u64, u64)> = self
            .groups
            .range(lo..=hi)
            .map(|(&g, group)| {
                let from = first.max(g * GROUP) - g * GROUP;
                let to = end.min((g + 1) * GROUP) - g * GROUP;
                (g, group.present & !group.dirty & mask(from, to))
            })
            .filter(|&(_, bits)| bits != 0)
            .collect();
        let mut dropped = 0;
        for (g, bits) in clean {
            let (pages, dirty) = self.remove_bits(g, bits);
            debug_assert_eq!(dirty, 0, "only clean pages were asked for");
            dropped += pages;
        }
        self.count -= dropped;
        self.cache.pages.fetch_sub(dropped, Ordering::Relaxed);
        self.cache.evicted.fetch_add(dropped, Ordering::Relaxed);
        dropped
    }

    /// Drops up to `n` clean pages, those farthest from block `near` first; returns how
    /// many were dropped.
    pub fn evict_clean(&mut self, n: u64, near: u64) -> u64 {
        let mut clean: Vec<u64> = self
            .groups
            .iter()
            .flat_map(|(&g, group)| {
                bits_of(group.present & !group.dirty).map(move |i| g * GROUP + u64::from(i))
            })
            .collect();
        clean.sort_by_key(|&b| std::cmp::Reverse(b.abs_diff(near)));
        clean.truncate(n as usize);
        for &b in &clean {
            let (g, i) = split(b);
            self.remove_bits(g, 1 << i);
        }
        let dropped = clean.len() as u64;
        self.count -= dropped;
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
#[path = "pagecache_tests.rs"]
mod tests;
