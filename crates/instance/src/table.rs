//! The attribute table: what the instance shares with its attached clients so that a
//! stat needs no request (docs/DESIGN.md §12.5; kucofs.txt: clients read directly, the
//! master orders updates).
//!
//! Two kinds of shared memory, each a sealed memfd that clients map read-only:
//! - the change page ([`ChangePage`]): the vfs's change counters (`vfs::changes`),
//!   copied there as they move, one page for every client;
//! - a table per identity (user, group, groups) of stat results by (start directory,
//!   path, follow) or by inode number ([`Table`]), filled by the instance when it
//!   answers a stat for a client of that identity.
//!
//! Invariants:
//! - Clients cannot write either: the memfd is sealed against new writable mappings
//!   (F_SEAL_FUTURE_WRITE) before it is sent, so a stray store of a client faults.
//! - A slot is written under its sequence number (odd while written, one writer at a
//!   time by compare-and-swap); a reader copies it and retries nothing: a moved
//!   sequence is a miss.
//! - A slot is valid only while no change has started since the instance began to
//!   compute it: its fill count must equal the change page's `started`, and `finished`
//!   must equal `started` (none in flight). Any change anywhere therefore invalidates
//!   every slot; a miss costs one request, never a wrong answer.
//! - A slot of a file whose data count is not quiet (a write in flight, or a lease:
//!   crate::posts) answers nothing.
//! - A client sees only the table of its own identity: a stat answered for another
//!   user (whose permissions differ) is never in it.

use format::InodeNo;
use posix::{Errno, Result};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{fence, AtomicU64, Ordering};
use vfs::{Kind, Metadata};

const MAGIC: u64 = 0x6175_6765_6673_7431;
/// Slots of a table (a power of two): 16 MiB of address space, of which only the
/// slots ever filled take memory.
pub const SLOTS: usize = 64 * 1024;
/// Slots a key may live in (adjacent, a power of two): a set-associative table, so
/// that keys of one set do not evict each other. With four, 20,000 keys (a third of
/// the slots) overflowed about 1% of the sets, whose keys then missed on every stat
/// (BENCHMARKS.md §7.7); with eight, about 0.1%.
const WAYS: usize = 8;
/// Longest path a slot keeps (longer ones are always asked).
pub const PATH_BYTES_MAX: usize = 128;
const META_WORDS: usize = 12;
const PATH_WORDS: usize = PATH_BYTES_MAX / 8;

#[repr(C, align(64))]
struct Header {
    magic: AtomicU64,
    slots: AtomicU64,
    started: AtomicU64,
    finished: AtomicU64,
}

#[repr(C, align(64))]
struct Slot {
    seq: AtomicU64,
    /// The change count it was computed at.
    fill: AtomicU64,
    start: AtomicU64,
    /// Path length, and bit 63: follow a final symlink.
    len_follow: AtomicU64,
    meta: [AtomicU64; META_WORDS],
    path: [AtomicU64; PATH_WORDS],
}

use crate::shm::{Mapping, PAGE};
const TABLE_BYTES: usize = PAGE + SLOTS * std::mem::size_of::<Slot>();
const _: () = assert!(std::mem::size_of::<Header>() <= PAGE);
const _: () = assert!(SLOTS.is_power_of_two() && WAYS.is_power_of_two() && WAYS <= SLOTS);
const _: () = assert!(PATH_BYTES_MAX % 8 == 0);

/// Per-file data counts the change page keeps (a power of two): files share a count
/// when their inode numbers hash alike, which costs a spurious miss, never a stale
/// answer.
pub const DATA_COUNTS: usize = 64 * 1024;

/// One file's (or several files') data changes: started and finished, as the global
/// counters.
#[repr(C)]
struct DataCount {
    started: AtomicU64,
    finished: AtomicU64,
}

const CHANGE_BYTES: usize = PAGE + DATA_COUNTS * std::mem::size_of::<DataCount>();
const _: () = assert!(DATA_COUNTS.is_power_of_two());

fn header(map: &Mapping) -> &Header {
    // SAFETY: every mapping of this module starts with a page holding a Header (zeroed
    // memory is a valid one), aligned as mmap aligns.
    unsafe { &*map.at().cast::<Header>() }
}

/// The change page: the global change counters, then the per-file data counts.
#[derive(Debug)]
pub struct ChangePage {
    map: Mapping,
    fd: Option<OwnedFd>,
}

impl ChangePage {
    /// The instance's page.
    pub fn create() -> Result<ChangePage> {
        let (fd, map) = Mapping::create(c"augefs-changes", CHANGE_BYTES, true)?;
        header(&map).magic.store(MAGIC, Ordering::Release);
        Ok(ChangePage { map, fd: Some(fd) })
    }

    /// A client's view of the page the instance sent.
    pub fn attach(fd: OwnedFd) -> Result<ChangePage> {
        let map = Mapping::map(fd.as_raw_fd(), CHANGE_BYTES, false)?;
        if header(&map).magic.load(Ordering::Acquire) != MAGIC {
            return Err(Errno(libc::EPROTO));
        }
        Ok(ChangePage { map, fd: None })
    }

    pub fn fd(&self) -> Option<RawFd> {
        self.fd.as_ref().map(AsRawFd::as_raw_fd)
    }

    /// Where the mapping starts, and its length.
    pub fn region(&self) -> (usize, usize) {
        (self.map.at() as usize, self.map.len())
    }

    /// The instance: a change started (true) or finished (false).
    pub fn changed(&self, started: bool) {
        let h = header(&self.map);
        let c = if started { &h.started } else { &h.finished };
        c.fetch_add(1, Ordering::SeqCst);
    }

    /// The count of changes started, if none is in flight.
    pub fn quiet(&self) -> Option<u64> {
        let h = header(&self.map);
        let s = h.started.load(Ordering::SeqCst);
        (h.finished.load(Ordering::SeqCst) == s).then_some(s)
    }

    fn started(&self) -> u64 {
        header(&self.map).started.load(Ordering::SeqCst)
    }

    fn data_count(&self, ino: InodeNo) -> &DataCount {
        let i = (ino.0.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize & (DATA_COUNTS - 1);
        // SAFETY: count `i` lies inside the mapping (CHANGE_BYTES), after the header
        // page; zeroed memory is a valid DataCount of atomics.
        unsafe { &*self.map.at().add(PAGE).cast::<DataCount>().add(i) }
    }

    /// The instance: a change of `ino`'s data started (true) or finished (false).
    pub fn data_changed(&self, ino: InodeNo, started: bool) {
        let c = self.data_count(ino);
        let c = if started { &c.started } else { &c.finished };
        c.fetch_add(1, Ordering::SeqCst);
    }

    /// `ino`'s data count, if no change of its data is in flight: taken before a read,
    /// the bytes read are current while [`ChangePage::data_same`] holds for it.
    pub fn data_quiet(&self, ino: InodeNo) -> Option<u64> {
        let c = self.data_count(ino);
        let s = c.started.load(Ordering::SeqCst);
        (c.finished.load(Ordering::SeqCst) == s).then_some(s)
    }

    /// Whether `ino`'s data is as it was when its count was `count` (quiet then): no
    /// change of it has started since.
    pub fn data_same(&self, ino: InodeNo, count: u64) -> bool {
        let c = self.data_count(ino);
        c.started.load(Ordering::SeqCst) == count
    }
}

/// What a slot answers: a path from a start directory, or an inode by number.
#[derive(Debug, Clone, Copy)]
pub enum Key<'a> {
    Path {
        start: InodeNo,
        path: &'a [u8],
        follow: bool,
    },
    Inode(InodeNo),
}

impl Key<'_> {
    fn parts(&self) -> (u64, &[u8], u64) {
        match *self {
            Key::Path {
                start,
                path,
                follow,
            } => (start.0, path, path.len() as u64 | u64::from(follow) << 63),
            // An inode by number: an empty path and a length no path has.
            Key::Inode(ino) => (ino.0, &[], 1 << 62),
        }
    }

    fn slot(&self) -> usize {
        let (start, path, lf) = self.parts();
        let mut h = 0xcbf2_9ce4_8422_2325u64 ^ start.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ lf;
        for &b in path {
            h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
        // FNV's low bits hardly depend on the last bytes (names that differ at the
        // end); mix the high bits down before taking the slot.
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        (h as usize) & (SLOTS - 1) & !(WAYS - 1)
    }

    fn cacheable(&self) -> bool {
        self.parts().1.len() <= PATH_BYTES_MAX
    }
}

fn path_words(path: &[u8]) -> [u64; PATH_WORDS] {
    let mut w = [0u64; PATH_WORDS];
    for (i, chunk) in path.chunks(8).enumerate() {
        let mut b = [0u8; 8];
        b[..chunk.len()].copy_from_slice(chunk);
        w[i] = u64::from_le_bytes(b);
    }
    w
}

fn kind_code(k: Kind) -> u64 {
    k as u64
}

fn kind_of(c: u64) -> Option<Kind> {
    Kind::ALL.iter().copied().find(|&k| k as u64 == c)
}

fn meta_words(m: &Metadata) -> [u64; META_WORDS] {
    let pair = |a: u32, b: u32| u64::from(a) | u64::from(b) << 32;
    [
        m.ino,
        kind_code(m.kind),
        pair(m.mode, m.nlink),
        pair(m.uid, m.gid),
        m.size,
        m.blocks,
        m.atime_ns as u64,
        m.mtime_ns as u64,
        m.ctime_ns as u64,
        m.btime_ns as u64,
        u64::from(m.blksize),
        m.rdev,
    ]
}

fn metadata(w: &[u64; META_WORDS]) -> Option<Metadata> {
    let lo = |v: u64| v as u32;
    let hi = |v: u64| (v >> 32) as u32;
    Some(Metadata {
        ino: w[0],
        kind: kind_of(w[1])?,
        mode: lo(w[2]),
        nlink: hi(w[2]),
        uid: lo(w[3]),
        gid: hi(w[3]),
        size: w[4],
        blocks: w[5],
        atime_ns: w[6] as i64,
        mtime_ns: w[7] as i64,
        ctime_ns: w[8] as i64,
        btime_ns: w[9] as i64,
        blksize: w[10] as u32,
        rdev: w[11],
    })
}

/// One identity's table of stat results.
#[derive(Debug)]
pub struct Table {
    map: Mapping,
    fd: Option<OwnedFd>,
}

impl Table {
    pub fn create() -> Result<Table> {
        let (fd, map) = Mapping::create(c"augefs-attrs", TABLE_BYTES, true)?;
        header(&map).magic.store(MAGIC, Ordering::Release);
        header(&map).slots.store(SLOTS as u64, Ordering::Release);
        Ok(Table { map, fd: Some(fd) })
    }

    pub fn attach(fd: OwnedFd) -> Result<Table> {
        let map = Mapping::map(fd.as_raw_fd(), TABLE_BYTES, false)?;
        let h = header(&map);
        if h.magic.load(Ordering::Acquire) != MAGIC
            || h.slots.load(Ordering::Acquire) != SLOTS as u64
        {
            return Err(Errno(libc::EPROTO));
        }
        Ok(Table { map, fd: None })
    }

    pub fn fd(&self) -> Option<RawFd> {
        self.fd.as_ref().map(AsRawFd::as_raw_fd)
    }

    /// Where the mapping starts, and its length.
    pub fn region(&self) -> (usize, usize) {
        (self.map.at() as usize, self.map.len())
    }

    /// A client that changed identity: zeros in place of the table (every lookup then
    /// misses), so that no code of this process reads the old identity's answers again.
    pub fn revoke(&self) {
        self.map.blank();
    }

    fn slot(&self, i: usize) -> &Slot {
        assert!(i < SLOTS);
        // SAFETY: slot `i` lies inside the mapping (TABLE_BYTES), after the header page;
        // zeroed memory is a valid Slot of atomics.
        unsafe { &*self.map.at().add(PAGE).cast::<Slot>().add(i) }
    }

    /// The instance: `meta` answers `key`, computed when the change count was `fill`
    /// (with none in flight). Skipped if another writer holds the slot.
    pub fn fill(&self, key: Key<'_>, fill: u64, meta: &Metadata) {
        if !key.cacheable() {
            return;
        }
        let (start, path, lf) = key.parts();
        let words = path_words(path);
        let set = key.slot();
        // The key's own slot, else an empty or stale one, else the one the count picks.
        let holds = |i: usize| {
            let s = self.slot(set + i);
            s.start.load(Ordering::Relaxed) == start
                && s.len_follow.load(Ordering::Relaxed) == lf
                && s.path
                    .iter()
                    .zip(words)
                    .all(|(a, b)| a.load(Ordering::Relaxed) == b)
        };
        let way = (0..WAYS)
            .find(|&i| holds(i))
            .or_else(|| {
                (0..WAYS).find(|&i| {
                    let s = self.slot(set + i);
                    s.seq.load(Ordering::Relaxed) == 0 || s.fill.load(Ordering::Relaxed) != fill
                })
            })
            .unwrap_or(fill as usize % WAYS);
        let s = self.slot(set + way);
        let seq = s.seq.load(Ordering::Acquire);
        if seq & 1 == 1
            || s.seq
                .compare_exchange(seq, seq + 1, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        s.fill.store(fill, Ordering::Relaxed);
        s.start.store(start, Ordering::Relaxed);
        s.len_follow.store(lf, Ordering::Relaxed);
        for (slot, v) in s.meta.iter().zip(meta_words(meta)) {
            slot.store(v, Ordering::Relaxed);
        }
        for (slot, v) in s.path.iter().zip(words) {
            slot.store(v, Ordering::Relaxed);
        }
        s.seq.store(seq + 2, Ordering::Release);
    }

    /// A client: the attributes `key` names if a slot answers it and nothing changed
    /// since (see the module's invariants).
    pub fn get(&self, changes: &ChangePage, key: Key<'_>) -> Option<Metadata> {
        if !key.cacheable() {
            return None;
        }
        let now = changes.quiet()?;
        let set = key.slot();
        (0..WAYS).find_map(|i| self.get_in(changes, set + i, now, key))
    }

    fn get_in(&self, changes: &ChangePage, i: usize, now: u64, key: Key<'_>) -> Option<Metadata> {
        let (start, path, lf) = key.parts();
        let s = self.slot(i);
        let seq = s.seq.load(Ordering::Acquire);
        if seq & 1 == 1 || seq == 0 {
            return None;
        }
        let same = s.fill.load(Ordering::Relaxed) == now
            && s.start.load(Ordering::Relaxed) == start
            && s.len_follow.load(Ordering::Relaxed) == lf
            && s.path
                .iter()
                .zip(path_words(path))
                .all(|(a, b)| a.load(Ordering::Relaxed) == b);
        let mut words = [0u64; META_WORDS];
        for (w, slot) in words.iter_mut().zip(&s.meta) {
            *w = slot.load(Ordering::Relaxed);
        }
        fence(Ordering::Acquire);
        if !same || s.seq.load(Ordering::Relaxed) != seq || changes.started() != now {
            return None;
        }
        let m = metadata(&words)?;
        // A file whose data is changing, or leased to a client whose posts may not
        // have run (crate::posts), is asked about.
        changes.data_quiet(InodeNo(m.ino))?;
        Some(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(ino: u64) -> Metadata {
        Metadata {
            ino,
            kind: Kind::File,
            mode: libc::S_IFREG | 0o644,
            nlink: 1,
            uid: 0,
            gid: 0,
            size: ino,
            blocks: 0,
            atime_ns: 0,
            mtime_ns: 0,
            ctime_ns: 0,
            btime_ns: 0,
            blksize: 4096,
            rdev: 0,
        }
    }

    fn key(name: &str) -> Key<'_> {
        Key::Path {
            start: InodeNo(1),
            path: name.as_bytes(),
            follow: true,
        }
    }

    /// Fills a slot for each name at the change page's count, then asks for each: the
    /// keys that missed.
    fn fill_and_ask(table: &Table, changes: &ChangePage, names: &[String]) -> usize {
        let now = changes.quiet().unwrap();
        for (i, name) in names.iter().enumerate() {
            table.fill(key(name), now, &file(i as u64 + 2));
        }
        let mut missed = 0;
        for (i, name) in names.iter().enumerate() {
            match table.get(changes, key(name)) {
                Some(m) => assert_eq!(m.ino, i as u64 + 2, "{name}: another key's answer"),
                None => missed += 1,
            }
        }
        missed
    }

    /// A stat loop over 20,000 files (a third of the slots, two benchmark threads' files)
    /// finds nearly all of them after one fill each, at the first change count (where
    /// empty slots look current) and at a later one: with four ways a set, about 1% of
    /// the keys fell out of overfull sets and missed on every pass, and at count 0 every
    /// key of a set went to one way.
    #[test]
    fn a_third_of_the_slots_filled_nearly_all_answer() {
        let changes = ChangePage::create().unwrap();
        let table = Table::create().unwrap();
        let names: Vec<String> = (0..20_000).map(|i| format!("d{}/f{i}", i % 2)).collect();
        let missed = fill_and_ask(&table, &changes, &names);
        assert!(missed <= 40, "count 0: {missed} of 20000 kept keys missed");
        // Any change ends every answer; the next fills take the stale slots.
        changes.changed(true);
        changes.changed(false);
        assert!(table.get(&changes, key(&names[0])).is_none());
        let missed = fill_and_ask(&table, &changes, &names);
        assert!(missed <= 40, "count 1: {missed} of 20000 kept keys missed");
    }
}
