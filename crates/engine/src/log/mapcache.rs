//! Resolved block mappings of whole extents, kept in memory for reads
//! (docs/DESIGN.md §9.2 "The read-side map cache").
//!
//! A cold read of one block otherwise costs two MetaDB lookups (the block's `x` record
//! and a range seek for the extent covering it), about a tenth of its CPU. The cache
//! holds *spans*: an extent as MetaDB has it plus every `x` record shadowing part of it,
//! so any block of the span is answered without MetaDB (its `x` record, else the
//! extent). Files mapped only by `x` records are not cached: their lookups are point gets
//! that the tables' bloom filters serve.
//!
//! Invariants:
//! - A span equals MetaDB's index over the span's blocks: every batch that puts or
//!   deletes an `x` or `e` record of a file drops all of that file's spans, after the
//!   batch is applied and before its writer returns ([`MapCache::invalidate`], called
//!   from `Engine::put_batch`, the one place domain batches are written).
//! - A span is inserted only if no invalidation of its shard happened between the
//!   moment before its records were read ([`MapCache::epoch`]) and the insert: a span
//!   read while a writer changed the file never outlives that writer's invalidation.
//! - Memory is bounded: at most [`SPANS_MAX`] spans; beyond, whole files are evicted.

use super::keys::{Extent, FileBlock, Mapping};
use format::InodeNo;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};

/// Shards (by inode number), so readers of different files rarely meet on a lock.
const SHARDS: usize = 16;

/// The most spans kept (each holds up to 256 CRCs, ~1 KiB): ~9 MiB, mapping up to
/// 8 GiB of file data in 1 MiB extents.
pub const SPANS_MAX: usize = 8192;

/// One extent and the `x` records inside its blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    pub extent: Extent,
    /// Mappings of blocks of the extent that have their own `x` record, ascending.
    pub shadows: Vec<(FileBlock, Mapping)>,
}

impl Span {
    fn mapping(&self, block: FileBlock) -> Mapping {
        match self.shadows.binary_search_by_key(&block, |(b, _)| *b) {
            Ok(k) => self.shadows[k].1,
            Err(_) => self.extent.mapping(block),
        }
    }
}

/// A moment of a shard, taken before reading MetaDB for a fill.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Epoch(u64);

#[derive(Debug, Default)]
struct Shard {
    /// Invalidations so far.
    epoch: u64,
    /// Per file, its spans by their extent's last block.
    files: HashMap<InodeNo, BTreeMap<FileBlock, Span>>,
    spans: usize,
}

#[derive(Debug)]
pub struct MapCache {
    shards: Vec<Mutex<Shard>>,
}

impl Default for MapCache {
    fn default() -> Self {
        MapCache {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
        }
    }
}

impl MapCache {
    fn shard(&self, ino: InodeNo) -> MutexGuard<'_, Shard> {
        self.shards[(ino.0 % SHARDS as u64) as usize]
            .lock()
            .expect("map cache lock")
    }

    /// The mappings of blocks `first..first + count` of `ino` if spans cover every one
    /// of them (all mapped then), else `None`.
    pub fn lookup(&self, ino: InodeNo, first: FileBlock, count: u64) -> Option<Vec<Mapping>> {
        let shard = self.shard(ino);
        let spans = shard.files.get(&ino)?;
        let mut out = Vec::with_capacity(count as usize);
        let mut block = first;
        while out.len() < count as usize {
            let (_, span) = spans.range(block..).next()?;
            if span.extent.first > block {
                return None;
            }
            let last = span.extent.last().0.min(first.0 + count - 1);
            for b in block.0..=last {
                out.push(span.mapping(FileBlock(b)));
            }
            block = FileBlock(last + 1);
        }
        Some(out)
    }

    /// The shard's moment, to be taken before the records of a fill are read.
    pub fn epoch(&self, ino: InodeNo) -> Epoch {
        Epoch(self.shard(ino).epoch)
    }

    /// Keeps `spans` of `ino` (read from MetaDB after `epoch` was taken) unless the file
    /// or a file of its shard was changed since.
    pub fn fill(&self, ino: InodeNo, epoch: Epoch, spans: Vec<Span>) {
        if spans.is_empty() {
            return;
        }
        let mut shard = self.shard(ino);
        if shard.epoch != epoch.0 {
            return;
        }
        let budget = SPANS_MAX / SHARDS;
        while shard.spans + spans.len() > budget {
            let Some(victim) = shard.files.keys().next().copied() else {
                break;
            };
            let gone = shard.files.remove(&victim).expect("listed");
            shard.spans -= gone.len();
        }
        let Shard {
            files, spans: n, ..
        } = &mut *shard;
        let file = files.entry(ino).or_default();
        for span in spans {
            debug_assert!(span.shadows.iter().all(|(b, _)| span.extent.contains(*b)));
            if file.insert(span.extent.last(), span).is_none() {
                *n += 1;
            }
        }
    }

    /// Drops every span of `ino`: its index changed. Called after the change is applied.
    pub fn invalidate(&self, ino: InodeNo) {
        let mut shard = self.shard(ino);
        shard.epoch += 1;
        if let Some(gone) = shard.files.remove(&ino) {
            shard.spans -= gone.len();
        }
    }

    /// Spans kept (for tests and reports).
    pub fn spans(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().expect("map cache lock").spans)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use format::BlockAddr;

    fn span(first: u64, count: u64, addr: u64, shadows: &[(u64, u64)]) -> Span {
        Span {
            extent: Extent {
                first: FileBlock(first),
                addr: BlockAddr(addr),
                write_seq: 1,
                crcs: (0..count as u32).collect(),
            },
            shadows: shadows
                .iter()
                .map(|&(b, a)| {
                    (
                        FileBlock(b),
                        Mapping {
                            addr: BlockAddr(a),
                            crc: 99,
                            write_seq: 2,
                        },
                    )
                })
                .collect(),
        }
    }

    #[test]
    fn lookups_resolve_shadows_and_miss_outside_spans() {
        let cache = MapCache::default();
        let ino = InodeNo(7);
        let e = cache.epoch(ino);
        cache.fill(
            ino,
            e,
            vec![span(0, 8, 100, &[(3, 500)]), span(8, 8, 300, &[])],
        );
        let got = cache.lookup(ino, FileBlock(2), 8).expect("covered");
        let addrs: Vec<u64> = got.iter().map(|m| m.addr.0).collect();
        assert_eq!(addrs, [102, 500, 104, 105, 106, 107, 300, 301]);
        assert_eq!(got[1].crc, 99);
        assert_eq!(got[0].crc, 2);
        assert!(
            cache.lookup(ino, FileBlock(15), 2).is_none(),
            "block 16 uncached"
        );
        assert!(cache.lookup(InodeNo(8), FileBlock(0), 1).is_none());
    }

    #[test]
    fn a_fill_read_across_an_invalidation_is_dropped() {
        let cache = MapCache::default();
        let ino = InodeNo(3);
        let before = cache.epoch(ino);
        // A writer changes a file of the same shard while the fill reads MetaDB.
        cache.invalidate(InodeNo(3 + SHARDS as u64));
        cache.fill(ino, before, vec![span(0, 8, 100, &[])]);
        assert!(cache.lookup(ino, FileBlock(0), 1).is_none());
        let now = cache.epoch(ino);
        cache.fill(ino, now, vec![span(0, 8, 100, &[])]);
        assert!(cache.lookup(ino, FileBlock(0), 1).is_some());
        cache.invalidate(ino);
        assert!(cache.lookup(ino, FileBlock(0), 1).is_none());
        assert_eq!(cache.spans(), 0);
    }

    #[test]
    fn spans_stay_within_the_budget() {
        let cache = MapCache::default();
        let per_shard = SPANS_MAX / SHARDS;
        // Files of one shard, each with one span, twice the shard's budget.
        for k in 0..2 * per_shard as u64 {
            let ino = InodeNo(k * SHARDS as u64);
            let e = cache.epoch(ino);
            cache.fill(ino, e, vec![span(0, 8, 100, &[])]);
            assert!(cache.spans() <= per_shard);
        }
        let last = InodeNo((2 * per_shard as u64 - 1) * SHARDS as u64);
        assert!(cache.lookup(last, FileBlock(0), 1).is_some());
    }
}
