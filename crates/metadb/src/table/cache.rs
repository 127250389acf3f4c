//! The block cache: verified data blocks shared by every open table (docs/DESIGN.md
//! §6.5; blocks as in docs/FORMAT.md §5.3 Tables).
//!
//! Keyed by (table id, block offset); values are `Arc<[u8]>` blocks already checked
//! against their checksum (checksum stripped), so a hit costs no verification. The cache
//! is split into 16 shards, each an LRU list under its own mutex: a lookup takes one
//! shard lock and no other shared lock, and threads reading different blocks rarely meet.
//!
//! Invariants:
//! - A shard's charged bytes never exceed its share of the capacity after an insert
//!   returns (a block larger than a whole shard is not cached).
//! - Table ids are never reused, so a cached block can never be served for another table;
//!   `invalidate_table` only returns memory early.

use crate::table::TableId;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

pub const CACHE_SHARDS: usize = 16;
/// Bookkeeping charged per cached block on top of its bytes (map entry, list links, Arc).
pub const ENTRY_OVERHEAD_BYTES: usize = 96;

const NIL: usize = usize::MAX;

type Key = (TableId, u32);

#[derive(Debug)]
struct Slot {
    key: Key,
    block: Option<Arc<[u8]>>,
    charge: usize,
    /// Towards the most recently used end.
    prev: usize,
    /// Towards the least recently used end.
    next: usize,
}

/// One shard: a map into a slab of slots linked in recency order.
#[derive(Debug)]
struct Shard {
    capacity_bytes: usize,
    used_bytes: usize,
    map: HashMap<Key, usize>,
    slots: Vec<Slot>,
    free: Vec<usize>,
    /// Most recently used.
    head: usize,
    /// Least recently used: evicted first.
    tail: usize,
    hits: u64,
    misses: u64,
}

impl Shard {
    fn new(capacity_bytes: usize) -> Shard {
        Shard {
            capacity_bytes,
            used_bytes: 0,
            map: HashMap::new(),
            slots: Vec::new(),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
            hits: 0,
            misses: 0,
        }
    }

    fn unlink(&mut self, i: usize) {
        let (prev, next) = (self.slots[i].prev, self.slots[i].next);
        match prev {
            NIL => self.head = next,
            p => self.slots[p].next = next,
        }
        match next {
            NIL => self.tail = prev,
            n => self.slots[n].prev = prev,
        }
    }

    fn push_front(&mut self, i: usize) {
        self.slots[i].prev = NIL;
        self.slots[i].next = self.head;
        match self.head {
            NIL => self.tail = i,
            h => self.slots[h].prev = i,
        }
        self.head = i;
    }

    fn get(&mut self, key: Key) -> Option<Arc<[u8]>> {
        let Some(&i) = self.map.get(&key) else {
            self.misses += 1;
            return None;
        };
        self.hits += 1;
        if self.head != i {
            self.unlink(i);
            self.push_front(i);
        }
        self.slots[i].block.clone()
    }

    fn remove_slot(&mut self, i: usize) {
        self.unlink(i);
        let slot = &mut self.slots[i];
        slot.block = None;
        self.used_bytes -= slot.charge;
        let key = slot.key;
        self.map.remove(&key);
        self.free.push(i);
    }

    /// Caches `block` under `key`, evicting least recently used blocks for room only if
    /// `evict` (else a block that does not fit is left out).
    fn insert(&mut self, key: Key, block: Arc<[u8]>, evict: bool) {
        let charge = block.len() + ENTRY_OVERHEAD_BYTES;
        if charge > self.capacity_bytes
            || (!evict && self.used_bytes + charge > self.capacity_bytes)
        {
            return;
        }
        if let Some(&i) = self.map.get(&key) {
            // Two readers missed on the same block; both read it. Keep the first.
            self.unlink(i);
            self.push_front(i);
            return;
        }
        while self.used_bytes + charge > self.capacity_bytes {
            assert_ne!(self.tail, NIL, "used bytes without entries");
            self.remove_slot(self.tail);
        }
        let slot = Slot {
            key,
            block: Some(block),
            charge,
            prev: NIL,
            next: NIL,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i] = slot;
                i
            }
            None => {
                self.slots.push(slot);
                self.slots.len() - 1
            }
        };
        self.map.insert(key, i);
        self.push_front(i);
        self.used_bytes += charge;
        assert!(self.used_bytes <= self.capacity_bytes);
    }

    fn invalidate_table(&mut self, table: TableId) {
        let doomed: Vec<usize> = self
            .map
            .iter()
            .filter(|(k, _)| k.0 == table)
            .map(|(_, &i)| i)
            .collect();
        for i in doomed {
            self.remove_slot(i);
        }
    }
}

/// Counters of a cache, summed over its shards.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
    pub blocks: usize,
    pub used_bytes: usize,
}

/// A sharded LRU cache of verified table blocks.
#[derive(Debug)]
pub struct BlockCache {
    capacity_bytes: usize,
    shards: Box<[Mutex<Shard>]>,
}

impl BlockCache {
    /// A cache holding up to `capacity_bytes` of blocks and bookkeeping (0 disables it).
    pub fn new(capacity_bytes: usize) -> BlockCache {
        let per_shard = capacity_bytes / CACHE_SHARDS;
        let shards = (0..CACHE_SHARDS)
            .map(|_| Mutex::new(Shard::new(per_shard)))
            .collect();
        BlockCache {
            capacity_bytes,
            shards,
        }
    }

    pub fn capacity_bytes(&self) -> usize {
        self.capacity_bytes
    }

    fn shard(&self, key: Key) -> &Mutex<Shard> {
        // Fibonacci hashing of the id mixed with the offset: blocks of one table spread out.
        let h = (key.0 .0 ^ (key.1 as u64).rotate_left(32)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        &self.shards[(h >> 60) as usize % CACHE_SHARDS]
    }

    /// The cached block at `offset` of `table`, marked most recently used.
    pub fn get(&self, table: TableId, offset: u32) -> Option<Arc<[u8]>> {
        self.shard((table, offset))
            .lock()
            .expect("cache shard lock")
            .get((table, offset))
    }

    /// Caches a verified block (checksum stripped). May evict least recently used blocks.
    pub fn insert(&self, table: TableId, offset: u32, block: Arc<[u8]>) {
        self.shard((table, offset))
            .lock()
            .expect("cache shard lock")
            .insert((table, offset), block, true);
    }

    /// Caches a verified block only where its shard has room for it: nothing is evicted
    /// (blocks nobody asked for yet, such as a compaction's output, never push out
    /// blocks that were read).
    pub fn insert_if_room(&self, table: TableId, offset: u32, block: Arc<[u8]>) {
        self.shard((table, offset))
            .lock()
            .expect("cache shard lock")
            .insert((table, offset), block, false);
    }

    /// The bytes no cached block is charged for (summed over the shards).
    pub fn room_bytes(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                let s = s.lock().expect("cache shard lock");
                s.capacity_bytes - s.used_bytes
            })
            .sum()
    }

    /// Drops every block of `table` (a deleted table's blocks are never asked for again).
    pub fn invalidate_table(&self, table: TableId) {
        for shard in self.shards.iter() {
            shard
                .lock()
                .expect("cache shard lock")
                .invalidate_table(table);
        }
    }

    pub fn stats(&self) -> CacheStats {
        let mut s = CacheStats::default();
        for shard in self.shards.iter() {
            let shard = shard.lock().expect("cache shard lock");
            s.hits += shard.hits;
            s.misses += shard.misses;
            s.blocks += shard.map.len();
            s.used_bytes += shard.used_bytes;
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(len: usize, fill: u8) -> Arc<[u8]> {
        Arc::from(vec![fill; len])
    }

    #[test]
    fn shard_evicts_least_recently_used_first() {
        let mut s = Shard::new(3 * (100 + ENTRY_OVERHEAD_BYTES));
        let t = TableId(1);
        s.insert((t, 0), block(100, 0), true);
        s.insert((t, 1), block(100, 1), true);
        s.insert((t, 2), block(100, 2), true);
        assert!(s.get((t, 0)).is_some(), "0 becomes most recent");
        s.insert((t, 3), block(100, 3), true);
        assert!(s.get((t, 1)).is_none(), "1 was least recent");
        assert_eq!(s.get((t, 0)).unwrap()[0], 0);
        assert_eq!(s.get((t, 2)).unwrap()[0], 2);
        assert_eq!(s.get((t, 3)).unwrap()[0], 3);
        assert_eq!(s.used_bytes, 3 * (100 + ENTRY_OVERHEAD_BYTES));
        assert_eq!((s.hits, s.misses), (4, 1));
        // One large block pushes out everything it needs room for, oldest first.
        s.insert((t, 4), block(250, 4), true);
        assert!(s.get((t, 0)).is_none() && s.get((t, 2)).is_none());
        assert!(s.get((t, 3)).is_some() && s.get((t, 4)).is_some());
        // A block bigger than the shard is not cached and evicts nothing.
        s.insert((t, 5), block(1000, 5), true);
        assert!(s.get((t, 5)).is_none() && s.get((t, 3)).is_some());
    }

    #[test]
    fn an_insert_if_room_evicts_nothing() {
        let cache = BlockCache::new(CACHE_SHARDS * 2 * (100 + ENTRY_OVERHEAD_BYTES));
        let room = cache.room_bytes();
        assert_eq!(room, cache.capacity_bytes());
        // Enough read blocks to fill every shard.
        for off in 0..200 {
            cache.insert(TableId(1), off, block(100, 1));
        }
        let read = cache.stats().blocks;
        assert!(read > 0 && cache.room_bytes() < 100 + ENTRY_OVERHEAD_BYTES);
        for off in 0..200 {
            cache.insert_if_room(TableId(2), off, block(100, 2));
        }
        assert_eq!(
            cache.stats().blocks,
            read,
            "a full cache took or lost blocks"
        );
        assert!((0..200).all(|off| cache.get(TableId(2), off).is_none()));
        // Where a shard has room, the block goes in.
        cache.invalidate_table(TableId(1));
        assert_eq!(cache.room_bytes(), room);
        cache.insert_if_room(TableId(2), 7, block(100, 2));
        assert_eq!(cache.get(TableId(2), 7).unwrap()[0], 2);
        assert_eq!(cache.room_bytes(), room - 100 - ENTRY_OVERHEAD_BYTES);
    }

    #[test]
    fn slots_are_reused_and_links_stay_consistent() {
        let mut s = Shard::new(4 * (10 + ENTRY_OVERHEAD_BYTES));
        let mut rng = platform::Rng::from_seed(11);
        for _ in 0..10_000 {
            let key = (TableId(rng.below(3)), rng.below(8) as u32);
            if rng.chance(1, 2) {
                s.insert(key, block(10, key.1 as u8), true);
            } else if let Some(b) = s.get(key) {
                assert_eq!(b[0], key.1 as u8);
            }
            if rng.chance(1, 100) {
                s.invalidate_table(TableId(rng.below(3)));
            }
            // Walk the list both ways: it holds exactly the mapped slots.
            let mut n = 0;
            let mut i = s.head;
            let mut prev = NIL;
            while i != NIL {
                assert_eq!(s.slots[i].prev, prev);
                assert_eq!(s.map.get(&s.slots[i].key), Some(&i));
                prev = i;
                i = s.slots[i].next;
                n += 1;
            }
            assert_eq!(s.tail, prev);
            assert_eq!(n, s.map.len());
            assert!(n <= 4);
            assert!(s.slots.len() <= 5);
        }
    }

    #[test]
    fn invalidate_drops_only_that_table() {
        let cache = BlockCache::new(1 << 20);
        for off in 0..50 {
            cache.insert(TableId(1), off, block(100, 1));
            cache.insert(TableId(2), off, block(100, 2));
        }
        assert_eq!(cache.stats().blocks, 100);
        cache.invalidate_table(TableId(1));
        assert!((0..50).all(|off| cache.get(TableId(1), off).is_none()));
        assert!((0..50).all(|off| cache.get(TableId(2), off).is_some()));
        let s = cache.stats();
        assert_eq!(
            (s.blocks, s.used_bytes),
            (50, 50 * (100 + ENTRY_OVERHEAD_BYTES))
        );
        assert_eq!((s.hits, s.misses), (50, 50));
    }

    #[test]
    fn capacity_zero_caches_nothing() {
        let cache = BlockCache::new(0);
        cache.insert(TableId(1), 0, block(1, 0));
        assert!(cache.get(TableId(1), 0).is_none());
    }

    #[test]
    fn concurrent_readers_and_writers_keep_the_bound() {
        let cache = Arc::new(BlockCache::new(
            CACHE_SHARDS * 20 * (64 + ENTRY_OVERHEAD_BYTES),
        ));
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let cache = Arc::clone(&cache);
                std::thread::spawn(move || {
                    for i in 0..5000u32 {
                        let off = (i * 7 + t as u32) % 500;
                        match cache.get(TableId(9), off) {
                            Some(b) => assert_eq!(b[0], off as u8),
                            None => cache.insert(TableId(9), off, block(64, off as u8)),
                        }
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert!(cache.stats().used_bytes <= cache.capacity_bytes());
    }
}
