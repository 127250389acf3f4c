//! The shared data table: file pages the instance read for clients of one identity,
//! which every attached process of that identity maps read-only, so that a warm read
//! needs no request even in a process that never read the file before (docs/DESIGN.md
//! §12.5; augefs.txt §IV: the file system's state in an address space its clients
//! share; kucofs.txt: clients read directly, the master orders updates).
//!
//! A process's own kept pages (`crate::filecache`) answer its reads of files it read
//! before; this table answers the first read of a file another process of the same
//! identity read (a `cat` after a `cp`, a build's compilers reading one header, a
//! database's new reader process). The instance fills it as it answers reads; clients
//! only read it.
//!
//! Layout (one sealed memfd per identity, [`DataTable::create`]): a header page (magic,
//! slot count, eviction hand), then a 64-byte [`Meta`] per slot, then a 4 KiB page per
//! slot. A page's key is (inode, page index); it lives in one of [`WAYS`] adjacent
//! slots of the set its key hashes to.
//!
//! Invariants:
//! - Clients cannot write the table (F_SEAL_FUTURE_WRITE before it is sent); only the
//!   instance fills it.
//! - A slot is written under its sequence number (odd while written, one writer at a
//!   time by compare-and-swap); a reader copies the page and checks that the sequence
//!   did not move, else the page is a miss.
//! - A slot holds the page as it was at its file's data count `count` (the change
//!   page's per-file count, `crate::table::ChangePage`, taken before the read with no
//!   change of the file in flight, and unchanged after it). It answers only while that
//!   count is still the file's and no change of the file is in flight: every write,
//!   truncate, fallocate and deletion of the file moves the count first (the vfs marks
//!   them, `vfs::changes`), so an answer is never older than the read's start. An
//!   inode number names one file for good (the vfs never hands a number out twice),
//!   so a deleted file's pages answer no other file.
//! - A slot's `end` is the file's size when the read that filled it met the end (else
//!   [`NO_END`]); a slot holds fewer than [`PAGE`] bytes only as the file's last page,
//!   and then knows the end.
//! - The table is per identity (user, group, groups), like the attribute table: it
//!   holds only bytes the identity's own opens were allowed to read. A process that
//!   changes identity stops using it and maps zeros over it ([`DataTable::revoke`]).

use crate::shm::{Mapping, PAGE as SHM_PAGE};
use crate::table::ChangePage;
use format::InodeNo;
use posix::{Errno, Result};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{fence, AtomicU64, Ordering};

const MAGIC: u64 = 0x6175_6765_6673_6431;
/// A slot's page: the vfs's block.
pub const PAGE: usize = 4096;
const WORDS: usize = PAGE / 8;
/// Slots a key may live in (adjacent, a power of two).
const WAYS: usize = 8;
/// A slot's `end` when its read did not meet the end of the file.
pub const NO_END: u64 = u64::MAX;
/// The most file bytes an identity's table holds by default, at most (`augefs mount
/// -o shared_pages=MIB` sets another; 0 keeps none): [`default_bytes`] takes less on a
/// machine with less than 16 GiB. A table is a sparse memfd: only the pages filled
/// take memory.
pub const DEFAULT_BYTES: usize = 512 << 20;
/// Identities whose data tables the instance keeps at once: with
/// [`default_bytes`], at most an eighth of the machine's memory in all.
pub const TABLES_MAX: usize = 4;

/// The default size of an identity's table: a thirty-second of the machine's memory,
/// at most [`DEFAULT_BYTES`], at least 16 MiB.
pub fn default_bytes() -> usize {
    // SAFETY: sysconf has no preconditions.
    let (pages, size) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    let memory = (pages.max(0) as usize).saturating_mul(size.max(0) as usize);
    (memory / 32).clamp(16 << 20, DEFAULT_BYTES)
}

#[repr(C, align(64))]
struct Header {
    magic: AtomicU64,
    slots: AtomicU64,
    /// Moves at every eviction of a current page: which way of a full set goes.
    hand: AtomicU64,
}

/// A slot's description of its page.
#[repr(C, align(64))]
struct Meta {
    seq: AtomicU64,
    ino: AtomicU64,
    index: AtomicU64,
    /// The file's data count the page is current at.
    count: AtomicU64,
    /// The file's size, if known ([`NO_END`] otherwise).
    end: AtomicU64,
    /// Bytes of the page that are the file's.
    len: AtomicU64,
}

type Words = [AtomicU64; WORDS];

const _: () = assert!(std::mem::size_of::<Header>() <= SHM_PAGE);
const _: () = assert!(std::mem::size_of::<Meta>() == 64);
const _: () = assert!(PAGE == SHM_PAGE && WAYS.is_power_of_two());

/// Bytes of a table of `slots` slots.
fn table_bytes(slots: usize) -> usize {
    SHM_PAGE + slots * (std::mem::size_of::<Meta>() + PAGE)
}

/// Slots of a table of at most `bytes` of pages: a power of two, at least one set.
pub fn slots_for(bytes: usize) -> usize {
    let want = (bytes / PAGE).max(WAYS);
    if want.is_power_of_two() {
        want
    } else {
        want.next_power_of_two() / 2
    }
}

/// One identity's shared file pages.
#[derive(Debug)]
pub struct DataTable {
    map: Mapping,
    slots: usize,
    fd: Option<OwnedFd>,
}

impl DataTable {
    /// The instance's table of `slots` slots (a power of two, [`slots_for`]).
    pub fn create(slots: usize) -> Result<DataTable> {
        assert!(slots.is_power_of_two() && slots >= WAYS, "{slots} slots");
        let (fd, map) = Mapping::create(c"augefs-pages", table_bytes(slots), true)?;
        let h = Self::header_of(&map);
        h.slots.store(slots as u64, Ordering::Release);
        h.magic.store(MAGIC, Ordering::Release);
        Ok(DataTable {
            map,
            slots,
            fd: Some(fd),
        })
    }

    /// A client's view of the table the instance sent: its size is the memfd's.
    pub fn attach(fd: OwnedFd) -> Result<DataTable> {
        // SAFETY: stat is plain data, filled by the kernel.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a descriptor we own, and a stat to fill.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(crate::shm::os_err());
        }
        let bytes = st.st_size as usize;
        let per = std::mem::size_of::<Meta>() + PAGE;
        let slots = bytes.saturating_sub(SHM_PAGE) / per;
        if bytes < table_bytes(WAYS) || !slots.is_power_of_two() || table_bytes(slots) != bytes {
            return Err(Errno(libc::EPROTO));
        }
        let map = Mapping::map(fd.as_raw_fd(), bytes, false)?;
        let h = Self::header_of(&map);
        if h.magic.load(Ordering::Acquire) != MAGIC
            || h.slots.load(Ordering::Acquire) != slots as u64
        {
            return Err(Errno(libc::EPROTO));
        }
        Ok(DataTable {
            map,
            slots,
            fd: None,
        })
    }

    pub fn fd(&self) -> Option<RawFd> {
        self.fd.as_ref().map(AsRawFd::as_raw_fd)
    }

    /// Where the mapping starts, and its length.
    pub fn region(&self) -> (usize, usize) {
        (self.map.at() as usize, self.map.len())
    }

    /// Bytes of pages the table holds at most.
    pub fn capacity(&self) -> usize {
        self.slots * PAGE
    }

    /// A client that changed identity: zeros in place of the table (every lookup then
    /// misses), so that no code of this process reads the old identity's pages again.
    pub fn revoke(&self) {
        self.map.blank();
    }

    fn header_of(map: &Mapping) -> &Header {
        // SAFETY: the mapping starts with a page holding a Header (zeroed memory is a
        // valid one), aligned as mmap aligns.
        unsafe { &*map.at().cast::<Header>() }
    }

    fn meta(&self, i: usize) -> &Meta {
        assert!(i < self.slots);
        // SAFETY: meta `i` lies inside the mapping (table_bytes), after the header
        // page; zeroed memory is a valid Meta of atomics.
        unsafe { &*self.map.at().add(SHM_PAGE).cast::<Meta>().add(i) }
    }

    fn words(&self, i: usize) -> &Words {
        assert!(i < self.slots);
        let pages = SHM_PAGE + self.slots * std::mem::size_of::<Meta>();
        // SAFETY: page `i` lies inside the mapping (table_bytes), after the metas;
        // zeroed memory is valid atomics, aligned (pages starts at a multiple of 64).
        unsafe { &*self.map.at().add(pages).cast::<Words>().add(i) }
    }

    fn set(&self, ino: InodeNo, index: u64) -> usize {
        let mut h =
            ino.0.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ index.wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        (h as usize) & (self.slots - 1) & !(WAYS - 1)
    }

    /// The instance: keeps what a read of `ino` at `offset` returned (`data`, of
    /// `asked` bytes asked: fewer means the file ends there), read at the file's data
    /// count `count`. Whole pages only, and the file's last page when the read met it.
    /// The caller checks that the count is still the file's after the read.
    pub fn fill(
        &self,
        changes: &ChangePage,
        ino: InodeNo,
        count: u64,
        offset: u64,
        data: &[u8],
        asked: usize,
    ) {
        // From the first page that starts inside what was read.
        let skip = (offset.next_multiple_of(PAGE as u64) - offset) as usize;
        if skip >= data.len() {
            // No page starts there; a read that met the end at a page's end still
            // tells that page.
            let end = offset + data.len() as u64;
            if data.len() < asked && end % PAGE as u64 == 0 && end > 0 {
                self.mark_end(ino, end / PAGE as u64 - 1, count, end);
            }
            return;
        }
        let (from, len) = (offset + skip as u64, data.len() - skip);
        let pages = data[skip..].chunks(PAGE);
        self.fill_pages(changes, ino, count, from, len, asked - skip, pages);
    }

    /// [`DataTable::fill`] of a read at page-aligned `offset` that returned `len`
    /// bytes (of `asked`) as `pages`: consecutive slices of a page each, the last one
    /// shorter only at the file's end.
    #[allow(clippy::too_many_arguments)]
    pub fn fill_pages<'a>(
        &self,
        changes: &ChangePage,
        ino: InodeNo,
        count: u64,
        offset: u64,
        len: usize,
        asked: usize,
        pages: impl Iterator<Item = &'a [u8]>,
    ) {
        assert_eq!(offset % PAGE as u64, 0, "pages start at a page");
        let got_end = offset + len as u64;
        let met_end = len < asked;
        let end = if met_end { got_end } else { NO_END };
        // A read that met the end at a page's end: the page before it learns the end
        // (a reader that asks past the last byte, as most do, is answered).
        if met_end && got_end % PAGE as u64 == 0 && got_end > 0 {
            self.mark_end(ino, got_end / PAGE as u64 - 1, count, got_end);
        }
        let mut seen = 0;
        for (index, page) in (offset / PAGE as u64..).zip(pages) {
            assert!(
                page.len() <= PAGE && seen + page.len() <= len,
                "pages of the read"
            );
            seen += page.len();
            if page.len() < PAGE && !met_end {
                break;
            }
            if !page.is_empty() {
                self.put(changes, ino, index, count, end, page);
            }
        }
    }

    /// Notes the file's end `end` in the slot of page `index` of `ino`, if it holds
    /// that page at `count`.
    fn mark_end(&self, ino: InodeNo, index: u64, count: u64, end: u64) {
        let set = self.set(ino, index);
        for i in set..set + WAYS {
            let m = self.meta(i);
            let seq = m.seq.load(Ordering::Acquire);
            let holds = seq & 1 == 0
                && m.ino.load(Ordering::Relaxed) == ino.0
                && m.index.load(Ordering::Relaxed) == index
                && m.count.load(Ordering::Relaxed) == count;
            if !holds {
                continue;
            }
            if m.seq
                .compare_exchange(seq, seq + 1, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                // Still the same page: the sequence did not move since it was checked.
                m.end.store(end, Ordering::Relaxed);
                m.seq.store(seq + 2, Ordering::Release);
            }
            return;
        }
    }

    fn put(
        &self,
        changes: &ChangePage,
        ino: InodeNo,
        index: u64,
        count: u64,
        end: u64,
        page: &[u8],
    ) {
        let set = self.set(ino, index);
        let holds = |i: usize| {
            let m = self.meta(set + i);
            m.ino.load(Ordering::Relaxed) == ino.0 && m.index.load(Ordering::Relaxed) == index
        };
        // The key's own slot (left alone if it already holds this count's page), else
        // an empty or stale one, else the one the hand picks.
        if let Some(i) = (0..WAYS).find(|&i| holds(i)) {
            let m = self.meta(set + i);
            let seq = m.seq.load(Ordering::Acquire);
            if seq & 1 == 0
                && m.count.load(Ordering::Relaxed) == count
                && m.end.load(Ordering::Relaxed) == end
            {
                return;
            }
            return self.write(set + i, ino, index, count, end, page);
        }
        let free = (0..WAYS).find(|&i| {
            let m = self.meta(set + i);
            m.seq.load(Ordering::Relaxed) == 0
                || !changes.data_same(
                    InodeNo(m.ino.load(Ordering::Relaxed)),
                    m.count.load(Ordering::Relaxed),
                )
        });
        let way = free.unwrap_or_else(|| {
            Self::header_of(&self.map)
                .hand
                .fetch_add(1, Ordering::Relaxed) as usize
                % WAYS
        });
        self.write(set + way, ino, index, count, end, page);
    }

    fn write(&self, i: usize, ino: InodeNo, index: u64, count: u64, end: u64, page: &[u8]) {
        debug_assert!(
            page.len() == PAGE || end != NO_END,
            "a short page is the last one"
        );
        let m = self.meta(i);
        let seq = m.seq.load(Ordering::Acquire);
        if seq & 1 == 1
            || m.seq
                .compare_exchange(seq, seq + 1, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
        {
            return; // another thread writes it: this page is not kept
        }
        m.ino.store(ino.0, Ordering::Relaxed);
        m.index.store(index, Ordering::Relaxed);
        m.count.store(count, Ordering::Relaxed);
        m.end.store(end, Ordering::Relaxed);
        m.len.store(page.len() as u64, Ordering::Relaxed);
        let words = self.words(i);
        let whole = page.chunks_exact(8);
        let tail = whole.remainder();
        let mut n = 0;
        for (w, chunk) in words.iter().zip(whole) {
            let v = u64::from_ne_bytes(chunk.try_into().expect("8 bytes"));
            w.store(v, Ordering::Relaxed);
            n += 1;
        }
        if !tail.is_empty() {
            let mut b = [0u8; 8];
            b[..tail.len()].copy_from_slice(tail);
            words[n].store(u64::from_ne_bytes(b), Ordering::Relaxed);
        }
        m.seq.store(seq + 2, Ordering::Release);
    }

    /// A client: copies into `buf` the bytes of `ino` at `offset` that the table
    /// holds, current, from the start of the range on: how many (fewer than asked
    /// where the file ends or a page is missing), and whether that answers the read
    /// (all of it, or up to the file's end).
    pub fn read(
        &self,
        changes: &ChangePage,
        ino: InodeNo,
        offset: u64,
        buf: &mut [u8],
    ) -> (usize, bool) {
        let Some(now) = changes.data_quiet(ino) else {
            return (0, false);
        };
        let Some(mut end) = offset.checked_add(buf.len() as u64) else {
            return (0, false);
        };
        // At a page's start, the page before may know that the file ends there.
        if offset % PAGE as u64 == 0 && offset > 0 {
            let before = self.end_known(ino, offset / PAGE as u64 - 1, now);
            if before.is_some_and(|e| e <= offset) {
                return (0, true);
            }
        }
        let mut at = offset;
        while at < end {
            let index = at / PAGE as u64;
            let set = self.set(ino, index);
            let got = (0..WAYS)
                .find_map(|w| self.copy(set + w, ino, index, now, at, &mut end, offset, buf));
            match got {
                Some(n) => at += n as u64,
                None => return ((at - offset) as usize, false),
            }
        }
        ((end.max(offset) - offset) as usize, true)
    }

    /// The end of `ino`'s file, if the slot of its page `index` at count `now` knows it.
    fn end_known(&self, ino: InodeNo, index: u64, now: u64) -> Option<u64> {
        let set = self.set(ino, index);
        (set..set + WAYS).find_map(|i| {
            let m = self.meta(i);
            let seq = m.seq.load(Ordering::Acquire);
            let holds = seq & 1 == 0
                && seq != 0
                && m.ino.load(Ordering::Relaxed) == ino.0
                && m.index.load(Ordering::Relaxed) == index
                && m.count.load(Ordering::Relaxed) == now;
            let end = m.end.load(Ordering::Relaxed);
            fence(Ordering::Acquire);
            (holds && end != NO_END && m.seq.load(Ordering::Relaxed) == seq).then_some(end)
        })
    }

    /// Copies from slot `i`, if it holds page `index` of `ino` at count `now`, the
    /// bytes at `at` up to `end` (lowered to the file's end if the slot knows it) into
    /// `buf` (which starts at `offset`): how many.
    #[allow(clippy::too_many_arguments)]
    fn copy(
        &self,
        i: usize,
        ino: InodeNo,
        index: u64,
        now: u64,
        at: u64,
        end: &mut u64,
        offset: u64,
        buf: &mut [u8],
    ) -> Option<usize> {
        let m = self.meta(i);
        let seq = m.seq.load(Ordering::Acquire);
        if seq & 1 == 1 || seq == 0 {
            return None;
        }
        if m.ino.load(Ordering::Relaxed) != ino.0
            || m.index.load(Ordering::Relaxed) != index
            || m.count.load(Ordering::Relaxed) != now
        {
            return None;
        }
        let file_end = m.end.load(Ordering::Relaxed);
        let len = m.len.load(Ordering::Relaxed) as usize;
        let stop = (*end).min(file_end);
        let page_at = index * PAGE as u64;
        let from = (at - page_at) as usize;
        let n = (stop.saturating_sub(at) as usize).min(PAGE - from);
        if len > PAGE || from + n > len {
            return None; // a page cut short that does not know its end: ask
        }
        // Word by word: whole words with a copy of fixed length, the first and last
        // possibly in part.
        let dst = &mut buf[(at - offset) as usize..(at - offset) as usize + n];
        let words = self.words(i);
        let mut done = 0;
        while done < n {
            let byte = from + done;
            let w = words[byte / 8].load(Ordering::Relaxed).to_ne_bytes();
            let lo = byte % 8;
            if lo == 0 && n - done >= 8 {
                dst[done..done + 8].copy_from_slice(&w);
                done += 8;
            } else {
                let k = (8 - lo).min(n - done);
                dst[done..done + k].copy_from_slice(&w[lo..lo + k]);
                done += k;
            }
        }
        fence(Ordering::Acquire);
        if m.seq.load(Ordering::Relaxed) != seq {
            return None;
        }
        // At or past the file's end n is 0, and the caller's loop ends at `end`.
        *end = stop;
        Some(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize, seed: u8) -> Vec<u8> {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(31) ^ seed ^ (i / PAGE) as u8)
            .collect()
    }

    /// The client's view: the same memfd, mapped read-only.
    fn client_of(t: &DataTable) -> DataTable {
        // SAFETY: dup of the table's own descriptor.
        let fd = unsafe { libc::fcntl(t.fd().unwrap(), libc::F_DUPFD_CLOEXEC, 0) };
        assert!(fd >= 0);
        // SAFETY: a descriptor just returned to us.
        DataTable::attach(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) }).unwrap()
    }

    fn read(t: &DataTable, page: &ChangePage, ino: u64, at: u64, len: usize) -> (Vec<u8>, bool) {
        let mut buf = vec![0xee; len];
        let (n, answered) = t.read(page, InodeNo(ino), at, &mut buf);
        buf.truncate(n);
        (buf, answered)
    }

    #[test]
    fn pages_answer_another_client_until_the_file_changes() {
        let page = ChangePage::create().unwrap();
        let t = DataTable::create(slots_for(1 << 20)).unwrap();
        let c = client_of(&t);
        let ino = InodeNo(42);
        let count = page.data_quiet(ino).unwrap();
        // A read of 3.5 pages at 0 that met the file's end.
        let d = data(3 * PAGE + 2000, 1);
        t.fill(&page, ino, count, 0, &d, 8 * PAGE);
        assert_eq!(
            read(&c, &page, 42, 100, 5000),
            (d[100..5100].to_vec(), true)
        );
        // Up to the end, past it, at it: what is left, then nothing, all answered.
        assert_eq!(
            read(&c, &page, 42, 3 * PAGE as u64, 5000),
            (d[3 * PAGE..].to_vec(), true)
        );
        assert_eq!(
            read(&c, &page, 42, d.len() as u64 - 10, 100),
            (d[d.len() - 10..].to_vec(), true)
        );
        assert_eq!(read(&c, &page, 42, d.len() as u64, 100), (vec![], true));
        // Far past it no page says where the file ends: asked.
        assert_eq!(read(&c, &page, 42, 1 << 30, 100), (vec![], false));
        // Another file's number: nothing.
        assert_eq!(read(&c, &page, 43, 0, 100), (vec![], false));
        // A change of the file (started, not even finished) and the pages are stale.
        page.data_changed(ino, true);
        assert_eq!(read(&c, &page, 42, 0, 100), (vec![], false));
        page.data_changed(ino, false);
        assert_eq!(read(&c, &page, 42, 0, 100), (vec![], false));
        // Newer bytes of page 1 only: a read from page 0 is answered by none, one from
        // page 1 by its page, then stops at page 2 (stale) with what it has.
        let now = page.data_quiet(ino).unwrap();
        let d2 = data(2 * PAGE, 9);
        t.fill(&page, ino, now, PAGE as u64, &d2[..PAGE], PAGE);
        assert_eq!(read(&c, &page, 42, 0, 100), (vec![], false));
        assert_eq!(
            read(&c, &page, 42, PAGE as u64 + 10, PAGE),
            (d2[10..PAGE].to_vec(), false)
        );
        // Revoked: zeros, every read a miss.
        c.revoke();
        assert_eq!(read(&c, &page, 42, PAGE as u64, 100), (vec![], false));
        assert_eq!(
            read(&t, &page, 42, PAGE as u64, 100),
            (d2[..100].to_vec(), true)
        );
    }

    #[test]
    fn only_whole_pages_are_kept_unless_the_file_ends_there() {
        let page = ChangePage::create().unwrap();
        let t = DataTable::create(slots_for(1 << 20)).unwrap();
        let ino = InodeNo(7);
        let count = page.data_quiet(ino).unwrap();
        // A read at 1000 of 3 pages, not at the end: pages 1 and 2 whole, the rest not.
        let d = data(4 * PAGE, 3);
        t.fill(&page, ino, count, 1000, &d[1000..1000 + 3 * PAGE], 3 * PAGE);
        assert!(!read(&t, &page, 7, 0, 10).1, "page 0 was cut");
        assert_eq!(
            read(&t, &page, 7, PAGE as u64, 2 * PAGE),
            (d[PAGE..3 * PAGE].to_vec(), true)
        );
        assert!(!read(&t, &page, 7, 3 * PAGE as u64, 10).1, "page 3 was cut");
        // A file that ends at a page's end: its last page knows the end.
        let ino = InodeNo(8);
        let count = page.data_quiet(ino).unwrap();
        t.fill(&page, ino, count, 0, &d[..2 * PAGE], 3 * PAGE);
        assert_eq!(
            read(&t, &page, 8, PAGE as u64, 3 * PAGE),
            (d[PAGE..2 * PAGE].to_vec(), true)
        );
        assert_eq!(read(&t, &page, 8, 2 * PAGE as u64, 10), (vec![], true));
        // Whole pages read as asked, then a read at their end that finds nothing (as
        // the kernel's read-ahead and `read` loops do): the last page learns the end.
        let ino = InodeNo(9);
        let count = page.data_quiet(ino).unwrap();
        t.fill(&page, ino, count, 0, &d[..2 * PAGE], 2 * PAGE);
        assert!(
            !read(&t, &page, 9, PAGE as u64, 2 * PAGE).1,
            "the end is not known yet"
        );
        t.fill(&page, ino, count, 2 * PAGE as u64, &[], PAGE);
        assert_eq!(
            read(&t, &page, 9, PAGE as u64, 2 * PAGE),
            (d[PAGE..2 * PAGE].to_vec(), true)
        );
        assert_eq!(read(&t, &page, 9, 2 * PAGE as u64, 10), (vec![], true));
    }

    /// A table full of one file's pages keeps nearly all of a working set a quarter
    /// of its size, and a newer file's pages take stale slots first.
    #[test]
    fn a_quarter_full_table_keeps_nearly_everything() {
        let page = ChangePage::create().unwrap();
        let slots = slots_for(16 << 20);
        let t = DataTable::create(slots).unwrap();
        let ino = InodeNo(5);
        let count = page.data_quiet(ino).unwrap();
        let d = data(PAGE, 5);
        let pages = slots as u64 / 4;
        for i in 0..pages {
            t.fill(&page, ino, count, i * PAGE as u64, &d, PAGE);
        }
        let missed = (0..pages)
            .filter(|&i| !read(&t, &page, 5, i * PAGE as u64, PAGE).1)
            .count();
        assert!(
            missed <= (pages / 1000) as usize,
            "{missed} of {pages} pages missed"
        );
    }
}
