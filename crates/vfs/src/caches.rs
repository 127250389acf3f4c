//! The inode table and the name (dentry) cache: hash-sharded, bounded, in front of
//! MetaDB's inode and directory-entry records (docs/DESIGN.md §10.6, "Inode and name
//! caches").
//!
//! [`InodeTable`] keeps each inode's [`Handle`] (its locks, cached attributes and cached
//! pages) alive after its last user lets go, so a stat, an open or a path walk through
//! an inode used before costs a shard lock and a hash probe, not a MetaDB read, and a
//! file's clean pages outlive its closes. [`NameCache`] maps (directory, name) to the
//! entry or to its absence.
//!
//! Invariants:
//! - One handle per inode: handles are created and dropped from the table under its
//!   shard's lock only, and a handle is evicted only when the table holds its last
//!   reference (no caller can be using it, and none can get it but through the table)
//!   and the page cache counts it clean (the handle holds its dirty pages until they
//!   are written back).
//! - A handle's record is loaded under its shard's lock, so no record written by an
//!   evicted handle can be older than what a new handle reads.
//! - The name cache never answers with an entry older than the last completed change of
//!   that name: every change removes the name after its MetaDB batch is applied and
//!   bumps the shard's generation; a lookup that missed fills the cache only if the
//!   generation did not move between its miss and its fill (a change it raced with may
//!   have made what it read from MetaDB stale).
//! - Both caches are bounded: beyond a shard's capacity, unused handles and arbitrary
//!   names are dropped (a quarter of the shard at a time). An inode shard whose handles
//!   are mostly in use or dirty is looked at again only once it has doubled, so it holds
//!   at most twice its capacity or twice the handles it cannot drop.

use crate::handle::Handle;
use crate::pagecache::Cache;
use crate::records::Dentry;
use format::InodeNo;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Arc, Mutex, MutexGuard};

/// Shards per cache (a power of two): threads on different inodes or names rarely meet.
const SHARDS: usize = 64;

/// Hashing by folded multiplies: each word is mixed into the state by a 64 x 64 -> 128
/// bit multiply whose halves are xored together, so every bit of the word reaches every
/// bit of the state. (A plain 64-bit multiply leaves each product bit depending only
/// on the bits below it: names differing in a chunk's last byte and in their length,
/// `o0-1018` and `o0-10188`, hashed alike one time in 256, and buckets picked by the
/// low bits saw a directory's names in a few of them.) Unseeded: names chosen to
/// collide cost their lookups a MetaDB read (a colliding name replaces the slot), never
/// a wrong answer (a hit compares the directory and the name).
#[derive(Default, Clone, Copy)]
struct MixHasher(u64);

impl Hasher for MixHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, v: u64) {
        let product = u128::from(self.0 ^ v) * u128::from(MIX_FACTOR);
        self.0 = (product as u64) ^ ((product >> 64) as u64);
    }
}

/// An odd constant with well-spread bits (2^64 / the golden ratio).
const MIX_FACTOR: u64 = 0x9E37_79B9_7F4A_7C15;

type MixMap<K, V> = HashMap<K, V, BuildHasherDefault<MixHasher>>;

fn mix(v: u64) -> u64 {
    let mut h = MixHasher::default();
    h.write_u64(v);
    h.finish()
}

/// The hash of name `name` of directory `dir` (the name cache's key, and the name
/// stripe of a create).
pub(crate) fn name_hash(dir: InodeNo, name: &[u8]) -> u64 {
    let mut h = MixHasher::default();
    h.write_u64(dir.0);
    for chunk in name.chunks(8) {
        let mut word = [0u8; 8];
        word[..chunk.len()].copy_from_slice(chunk);
        h.write_u64(u64::from_le_bytes(word));
    }
    h.write_u64(name.len() as u64);
    h.finish()
}

fn shard_of(hash: u64) -> usize {
    // The high bits: the low ones pick the bucket inside the shard's map.
    (hash >> 58) as usize & (SHARDS - 1)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().expect("cache shard lock poisoned by a panic")
}

/// One shard of the inode table.
type InodeShard = Mutex<InodeMap>;

struct InodeMap {
    handles: MixMap<InodeNo, Arc<Handle>>,
    /// The size at which the next insert looks for handles to evict: the capacity, or
    /// twice what the last look left if it found too few (handles in use or dirty), so
    /// that a shard of many such handles is scanned once per doubling, not at every
    /// insert (10 M creates with a gigabyte of dirty files: 6 k creates/s instead of
    /// 150 k when every insert scanned).
    evict_at: usize,
    /// Looks for handles to evict so far.
    #[cfg(test)]
    looks: usize,
}

/// Every inode's handle while in use, and recently used ones after.
pub(crate) struct InodeTable {
    shards: Box<[InodeShard]>,
    per_shard: usize,
    /// Says which inodes have dirty pages (never evicted).
    cache: Arc<Cache>,
}

impl InodeTable {
    /// A table keeping about `capacity` unused handles, and every handle `cache` counts
    /// dirty.
    pub fn new(capacity: usize, cache: Arc<Cache>) -> InodeTable {
        let per_shard = capacity.div_ceil(SHARDS).max(4);
        InodeTable {
            shards: (0..SHARDS)
                .map(|_| {
                    Mutex::new(InodeMap {
                        handles: MixMap::default(),
                        evict_at: per_shard,
                        #[cfg(test)]
                        looks: 0,
                    })
                })
                .collect(),
            per_shard,
            cache,
        }
    }

    fn shard(&self, ino: InodeNo) -> &InodeShard {
        &self.shards[shard_of(mix(ino.0))]
    }

    /// The handle of `ino`, made by `load` (under the shard's lock) if not in the table.
    pub fn get_or_load<E>(
        &self,
        ino: InodeNo,
        load: impl FnOnce() -> Result<Handle, E>,
    ) -> Result<Arc<Handle>, E> {
        let mut shard = lock(self.shard(ino));
        if let Some(h) = shard.handles.get(&ino) {
            return Ok(h.clone());
        }
        let h = Arc::new(load()?);
        if shard.handles.len() >= shard.evict_at {
            let keep = self.per_shard - self.per_shard / 4;
            let mut len = shard.handles.len();
            let dirty = self.cache.dirty_set();
            shard.handles.retain(|ino, h| {
                let evict = len > keep && Arc::strong_count(h) == 1 && !dirty.contains(ino);
                len -= usize::from(evict);
                !evict
            });
            shard.evict_at = self.per_shard.max(2 * len);
            #[cfg(test)]
            {
                shard.looks += 1;
            }
        }
        shard.handles.insert(ino, h.clone());
        Ok(h)
    }

    /// The handle of `ino` if the table has one.
    pub fn get(&self, ino: InodeNo) -> Option<Arc<Handle>> {
        lock(self.shard(ino)).handles.get(&ino).cloned()
    }

    /// Every handle in the table (a snapshot).
    pub fn all(&self) -> Vec<Arc<Handle>> {
        self.shards
            .iter()
            .flat_map(|s| lock(s).handles.values().cloned().collect::<Vec<_>>())
            .collect()
    }
}

/// A name's cached answer: the entry, or `None` for "no such name".
struct Slot {
    dir: InodeNo,
    name: SlotName,
    entry: Option<Dentry>,
}

/// Names of up to this many bytes are kept in their slot.
const INLINE_NAME: usize = 30;

/// A cached name: most are short and kept in the slot itself, so a hit reads no other
/// cache line for its comparison (a stat of many files is bound by such misses).
enum SlotName {
    Inline { len: u8, bytes: [u8; INLINE_NAME] },
    Heap(Box<[u8]>),
}

impl SlotName {
    fn new(name: &[u8]) -> SlotName {
        if name.len() > INLINE_NAME {
            return SlotName::Heap(name.into());
        }
        let mut bytes = [0; INLINE_NAME];
        bytes[..name.len()].copy_from_slice(name);
        SlotName::Inline {
            len: name.len() as u8,
            bytes,
        }
    }

    fn is(&self, name: &[u8]) -> bool {
        match self {
            SlotName::Inline { len, bytes } => bytes[..usize::from(*len)] == *name,
            SlotName::Heap(heap) => **heap == *name,
        }
    }
}

#[derive(Default)]
struct NameShard {
    /// By hash of (directory, name); a colliding name replaces the slot.
    slots: MixMap<u64, Slot>,
    /// Bumped by every change of a name of this shard.
    generation: u64,
}

/// What [`NameCache::get`] found.
pub(crate) enum Cached {
    /// The name's entry (`None`: the name does not exist).
    Hit(Option<Dentry>),
    /// Not cached: look it up, then [`NameCache::fill`] with this ticket.
    Miss(NameTicket),
}

/// A miss's permission to fill the cache if nothing changed meanwhile.
pub(crate) struct NameTicket {
    hash: u64,
    generation: u64,
}

/// (directory, name) → directory entry or absence.
pub(crate) struct NameCache {
    shards: Box<[Mutex<NameShard>]>,
    per_shard: usize,
}

impl NameCache {
    /// A cache of about `capacity` names.
    pub fn new(capacity: usize) -> NameCache {
        NameCache {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            per_shard: capacity.div_ceil(SHARDS).max(4),
        }
    }

    /// A guard that forgets `name` of `dir` when dropped: an operation changing the name
    /// takes it after locking the directory, so it drops after every MetaDB batch of the
    /// operation and before the directory's lock (also on errors, where forgetting is
    /// merely wasted).
    pub fn forget_on_drop<'a>(&'a self, dir: InodeNo, name: &'a [u8]) -> Forget<'a> {
        Forget {
            cache: self,
            dir,
            name,
        }
    }

    pub fn get(&self, dir: InodeNo, name: &[u8]) -> Cached {
        let hash = name_hash(dir, name);
        let shard = lock(&self.shards[shard_of(hash)]);
        match shard.slots.get(&hash) {
            Some(s) if s.dir == dir && s.name.is(name) => Cached::Hit(s.entry),
            _ => Cached::Miss(NameTicket {
                hash,
                generation: shard.generation,
            }),
        }
    }

    /// Caches what a lookup that missed with `ticket` read from MetaDB, unless a name of
    /// the shard changed since the miss.
    pub fn fill(&self, ticket: NameTicket, dir: InodeNo, name: &[u8], entry: Option<Dentry>) {
        debug_assert_eq!(ticket.hash, name_hash(dir, name));
        let mut shard = lock(&self.shards[shard_of(ticket.hash)]);
        if shard.generation != ticket.generation {
            return;
        }
        if shard.slots.len() >= self.per_shard && !shard.slots.contains_key(&ticket.hash) {
            let keep = self.per_shard - self.per_shard / 4;
            let mut len = shard.slots.len();
            shard.slots.retain(|_, _| {
                let evict = len > keep;
                len -= usize::from(evict);
                !evict
            });
        }
        shard.slots.insert(
            ticket.hash,
            Slot {
                dir,
                name: SlotName::new(name),
                entry,
            },
        );
    }

    /// Forgets `name` of `dir`: its MetaDB record was just changed.
    pub fn changed(&self, dir: InodeNo, name: &[u8]) {
        let hash = name_hash(dir, name);
        let mut shard = lock(&self.shards[shard_of(hash)]);
        shard.generation += 1;
        if shard
            .slots
            .get(&hash)
            .is_some_and(|s| s.dir == dir && s.name.is(name))
        {
            shard.slots.remove(&hash);
        }
    }
}

/// See [`NameCache::forget_on_drop`].
pub(crate) struct Forget<'a> {
    cache: &'a NameCache,
    dir: InodeNo,
    name: &'a [u8],
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.cache.changed(self.dir, self.name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pagecache::CacheConfig;
    use crate::records::Kind;

    #[test]
    fn handles_with_dirty_pages_stay_in_the_inode_table() {
        let cache = Arc::new(Cache::new(CacheConfig::default()));
        let table = InodeTable::new(SHARDS, cache.clone());
        let load = |ino: u64| {
            table
                .get_or_load(InodeNo(ino), || {
                    Ok::<_, ()>(Handle::new(InodeNo(ino), None, cache.clone()))
                })
                .unwrap()
        };
        // Dirty handles, several per shard, none of them in use.
        for ino in 1..=256 {
            load(ino);
            cache.note_dirty(InodeNo(ino));
        }
        // Enough other inodes to fill every shard many times over.
        for ino in 1000..5000 {
            load(ino);
        }
        for ino in 1..=256 {
            assert!(table.get(InodeNo(ino)).is_some(), "dirty {ino} was evicted");
        }
        // Unused clean handles went meanwhile: each shard keeps at most twice its
        // capacity (4) or twice its dirty handles.
        assert!(
            table.all().len() <= 2 * (4 * SHARDS + 256),
            "{}",
            table.all().len()
        );
    }

    /// Handles in use cannot be evicted; a shard full of them is looked at again only
    /// once it has doubled, not at every insert (which made 10 M creates quadratic).
    #[test]
    fn a_shard_of_handles_in_use_is_not_scanned_at_every_insert() {
        let cache = Arc::new(Cache::new(CacheConfig::default()));
        let table = InodeTable::new(4 * SHARDS, cache.clone());
        let held: Vec<Arc<Handle>> = (1..=20_000u64)
            .map(|ino| {
                table
                    .get_or_load(InodeNo(ino), || {
                        Ok::<_, ()>(Handle::new(InodeNo(ino), None, cache.clone()))
                    })
                    .unwrap()
            })
            .collect();
        assert_eq!(table.all().len(), held.len(), "nothing in use is evicted");
        let looks: usize = table.shards.iter().map(|s| lock(s).looks).sum();
        // About 20,000 / 64 = 312 per shard: from 4, doubling, 7 looks each.
        assert!(looks <= 10 * SHARDS, "{looks} looks for 20,000 inserts");
    }

    fn entry(ino: u64) -> Option<Dentry> {
        Some(Dentry {
            ino: InodeNo(ino),
            kind: Kind::File,
        })
    }

    #[test]
    fn names_alike_hash_apart() {
        let mut seen = std::collections::HashMap::new();
        for dir in 1..3 {
            for i in 0..100_000u64 {
                let name = format!("o0-{i}");
                let h = name_hash(InodeNo(dir), name.as_bytes());
                if let Some(other) = seen.insert(h, (dir, name.clone())) {
                    panic!("{dir}/{name} and {other:?} hash alike: {h:x}");
                }
            }
        }
    }

    #[test]
    fn a_directorys_names_spread_over_the_maps_buckets() {
        let buckets = 1u64 << 14;
        let homes: std::collections::HashSet<u64> = (0..10_000)
            .map(|i| {
                let key = name_hash(InodeNo(5), format!("o0-{i}").as_bytes());
                let mut h = MixHasher::default();
                h.write_u64(key);
                h.finish() & (buckets - 1)
            })
            .collect();
        // A random spread of 10,000 keys over 16,384 buckets meets about 7,500 of them.
        assert!(homes.len() > 7_000, "{} home buckets", homes.len());
    }

    #[test]
    fn a_fill_racing_a_change_is_dropped() {
        let c = NameCache::new(1024);
        let Cached::Miss(t) = c.get(InodeNo(1), b"a") else {
            panic!("empty cache hit")
        };
        c.changed(InodeNo(1), b"a");
        c.fill(t, InodeNo(1), b"a", None);
        assert!(matches!(c.get(InodeNo(1), b"a"), Cached::Miss(_)));
        let Cached::Miss(t) = c.get(InodeNo(1), b"a") else {
            panic!()
        };
        c.fill(t, InodeNo(1), b"a", entry(7));
        assert!(matches!(c.get(InodeNo(1), b"a"), Cached::Hit(e) if e == entry(7)));
        assert!(matches!(c.get(InodeNo(2), b"a"), Cached::Miss(_)));
        c.changed(InodeNo(1), b"a");
        assert!(matches!(c.get(InodeNo(1), b"a"), Cached::Miss(_)));
    }

    #[test]
    fn short_and_long_names_are_told_apart() {
        let c = NameCache::new(1024);
        let long = [b'n'; INLINE_NAME + 1];
        let names: [&[u8]; 5] = [b"a", b"a\0", b"b", &long[..INLINE_NAME], &long];
        for (i, name) in names.iter().enumerate() {
            let Cached::Miss(t) = c.get(InodeNo(1), name) else {
                panic!("{name:?} hit before its fill")
            };
            c.fill(t, InodeNo(1), name, entry(i as u64 + 10));
        }
        for (i, name) in names.iter().enumerate() {
            let want = entry(i as u64 + 10);
            assert!(matches!(c.get(InodeNo(1), name), Cached::Hit(e) if e == want));
            assert!(matches!(c.get(InodeNo(2), name), Cached::Miss(_)));
        }
        c.changed(InodeNo(1), &long);
        assert!(matches!(c.get(InodeNo(1), &long), Cached::Miss(_)));
        assert!(matches!(
            c.get(InodeNo(1), &long[..INLINE_NAME]),
            Cached::Hit(_)
        ));
    }

    #[test]
    fn names_stay_bounded() {
        let c = NameCache::new(256);
        for i in 0..10_000u64 {
            let name = i.to_le_bytes();
            if let Cached::Miss(t) = c.get(InodeNo(1), &name) {
                c.fill(t, InodeNo(1), &name, None);
            }
        }
        let total: usize = c.shards.iter().map(|s| lock(s).slots.len()).sum();
        assert!(total <= 256 + SHARDS * 4, "{total} names cached");
    }
}
