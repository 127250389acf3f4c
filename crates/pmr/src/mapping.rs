//! A memory mapping viewed as an array of 8-byte atomic words: the only way any code in
//! this crate touches PMR bytes (docs/DESIGN.md §5).
//!
//! Many threads read and write the region through `&self` at once: WAL writers fill
//! disjoint ranges, slot updates are 8-byte atomic stores, and in the crash model a
//! persist copies whole 64-byte lines that may share words with a neighbour's bytes.
//! Plain `memcpy` into or out of the mapping would make those overlaps data races
//! (undefined behaviour), and mixing plain and atomic accesses on one word is a race
//! too. So every access is an `AtomicU64` load or store of an aligned word:
//! - byte ranges are copied word by word (a relaxed atomic load or store of an aligned
//!   word is an ordinary `mov` on x86-64, so this costs nothing but vectorisation);
//! - a partial word at either end of a write is merged with a compare-exchange loop, so a
//!   neighbour writing the other bytes of that word concurrently is not lost;
//! - no access is ever of another size, so there are no mixed-size atomics.
//!
//! Invariants:
//! - `ptr` is page-aligned, `len` is a multiple of 8, and `ptr .. ptr + len` stays mapped
//!   read-write until `Drop`.
//! - No `&[u8]` or `&mut [u8]` to the mapping is ever created.
//! - Bytes in memory are the native-endian representation of each word; the API converts
//!   (`u64::to_ne_bytes`), so byte `i` of the region is byte `i` of the file.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

const WORD_BYTES: usize = 8;

/// An owned `mmap` region. Unmapped on drop.
pub(crate) struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
    page_bytes: usize,
}

// SAFETY: the mapping is plain memory owned by this value; all shared access goes
// through `AtomicU64` words (see the module comment), which are Send and Sync.
unsafe impl Send for Mapping {}
// SAFETY: as above: `&Mapping` only hands out atomic word accesses.
unsafe impl Sync for Mapping {}

/// How a file ended up mapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FileMapping {
    /// `MAP_SHARED_VALIDATE | MAP_SYNC` succeeded: a DAX mapping.
    Sync,
    /// Plain `MAP_SHARED` over the page cache.
    Shared,
}

fn page_bytes() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    assert!(
        page > 0 && (page as usize).is_power_of_two(),
        "sysconf(_SC_PAGESIZE) = {page}"
    );
    page as usize
}

impl Mapping {
    /// A zero-filled private anonymous region (pages are materialised on first touch).
    pub(crate) fn anonymous(len: usize) -> io::Result<Mapping> {
        let ptr = device::buf::map_anonymous(len)?;
        Self::from_mmap(ptr.as_ptr().cast(), len)
    }

    /// Maps `len` bytes of `file` shared: first with `MAP_SYNC` (granted only on DAX),
    /// then, if the kernel refuses, as an ordinary shared mapping.
    pub(crate) fn file(file: &File, len: usize) -> io::Result<(Mapping, FileMapping)> {
        let fd = file.as_raw_fd();
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        #[cfg(any(target_os = "linux", target_os = "android"))]
        {
            // SAFETY: a new shared mapping of a file we hold open; nothing in this
            // process has a reference into it yet.
            let ptr = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    prot,
                    libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC,
                    fd,
                    0,
                )
            };
            // EOPNOTSUPP (no DAX) or EINVAL (kernel older than 4.15) both mean "not DAX".
            if ptr != libc::MAP_FAILED {
                return Ok((Self::from_mmap(ptr, len)?, FileMapping::Sync));
            }
        }
        // SAFETY: as above.
        let ptr = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_SHARED, fd, 0) };
        Ok((Self::from_mmap(ptr, len)?, FileMapping::Shared))
    }

    fn from_mmap(ptr: *mut libc::c_void, len: usize) -> io::Result<Mapping> {
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(ptr.cast::<u8>()).expect("mmap never returns null on success");
        let page_bytes = page_bytes();
        assert_eq!(
            ptr.as_ptr() as usize % page_bytes,
            0,
            "mmap returns page-aligned memory"
        );
        assert!(len > 0 && len % WORD_BYTES == 0);
        Ok(Mapping {
            ptr,
            len,
            page_bytes,
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The address of byte `offset`, for flush instructions only (never dereferenced).
    pub(crate) fn addr(&self, offset: usize) -> *const u8 {
        assert!(offset <= self.len);
        self.ptr.as_ptr().wrapping_add(offset)
    }

    /// The word holding bytes `index * 8 .. index * 8 + 8`.
    pub(crate) fn word(&self, index: usize) -> &AtomicU64 {
        assert!(
            index < self.len / WORD_BYTES,
            "word {index} outside the region"
        );
        // SAFETY: the address is inside the live mapping (asserted) and 8-aligned (the
        // base is page-aligned). The mapping outlives `&self`. Every access to the
        // mapping is through an AtomicU64 of this same address and size (module
        // invariant), so there are no non-atomic or mixed-size races.
        unsafe { AtomicU64::from_ptr(self.ptr.as_ptr().add(index * WORD_BYTES).cast::<u64>()) }
    }

    /// Copies `buf.len()` bytes starting at `offset` into `buf` (relaxed word loads).
    pub(crate) fn read_bytes(&self, offset: usize, buf: &mut [u8]) {
        assert!(offset
            .checked_add(buf.len())
            .is_some_and(|end| end <= self.len));
        let mut pos = offset;
        let mut out = 0;
        while out < buf.len() {
            let within = pos % WORD_BYTES;
            let take = (WORD_BYTES - within).min(buf.len() - out);
            let word = self
                .word(pos / WORD_BYTES)
                .load(Ordering::Relaxed)
                .to_ne_bytes();
            buf[out..out + take].copy_from_slice(&word[within..within + take]);
            pos += take;
            out += take;
        }
    }

    /// Stores `data` at `offset`. Whole words are relaxed stores; a partial word at
    /// either end is merged by compare-exchange so concurrent writers of the word's other
    /// bytes are kept.
    pub(crate) fn write_bytes(&self, offset: usize, data: &[u8]) {
        assert!(offset
            .checked_add(data.len())
            .is_some_and(|end| end <= self.len));
        let mut pos = offset;
        let mut consumed = 0;
        while consumed < data.len() {
            let within = pos % WORD_BYTES;
            let take = (WORD_BYTES - within).min(data.len() - consumed);
            let word = self.word(pos / WORD_BYTES);
            let part = &data[consumed..consumed + take];
            if take == WORD_BYTES {
                let value = u64::from_ne_bytes(part.try_into().expect("a whole word"));
                word.store(value, Ordering::Relaxed);
            } else {
                Self::merge_into_word(word, within, part);
            }
            pos += take;
            consumed += take;
        }
    }

    /// Replaces bytes `within .. within + part.len()` of `word`.
    fn merge_into_word(word: &AtomicU64, within: usize, part: &[u8]) {
        assert!(within + part.len() <= WORD_BYTES && !part.is_empty());
        let mut current = word.load(Ordering::Relaxed);
        // Lock-free: a retry means another writer changed the word's *other* bytes (the
        // PMR contract gives each byte one writer at a time), so some thread progresses.
        loop {
            let mut bytes = current.to_ne_bytes();
            bytes[within..within + part.len()].copy_from_slice(part);
            let merged = u64::from_ne_bytes(bytes);
            match word.compare_exchange_weak(current, merged, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(seen) => current = seen,
            }
        }
    }

    /// `msync(MS_SYNC)` over the pages covering `offset .. offset + len`.
    pub(crate) fn msync(&self, offset: usize, len: usize) -> io::Result<()> {
        assert!(len > 0 && offset.checked_add(len).is_some_and(|end| end <= self.len));
        let start = offset - offset % self.page_bytes;
        let end = (offset + len)
            .next_multiple_of(self.page_bytes)
            .min(self.len);
        // SAFETY: `start` is page-aligned and `start .. end` lies inside this mapping;
        // msync reads the pages in the kernel and does not change their contents.
        let rc = unsafe {
            libc::msync(
                self.ptr.as_ptr().add(start).cast(),
                end - start,
                libc::MS_SYNC,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr .. ptr + len` is exactly what mmap returned; no reference into it
        // outlives `self` (words borrow `&self`).
        let rc = unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
        debug_assert_eq!(rc, 0, "munmap of our own mapping failed");
    }
}

impl std::fmt::Debug for Mapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mapping")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unaligned_writes_and_reads_round_trip() {
        let m = Mapping::anonymous(4096).unwrap();
        let data: Vec<u8> = (0..100u8).collect();
        for offset in [0usize, 1, 7, 8, 13, 63, 64, 3000] {
            for len in [1usize, 2, 7, 8, 9, 15, 16, 17, 100] {
                m.write_bytes(offset, &data[..len]);
                let mut back = vec![0u8; len + 2];
                m.read_bytes(offset.saturating_sub(1), &mut back[..len + 1]);
                let start = usize::from(offset > 0);
                assert_eq!(
                    &back[start..start + len],
                    &data[..len],
                    "offset {offset} len {len}"
                );
            }
        }
    }

    #[test]
    fn partial_word_writes_keep_neighbouring_bytes() {
        let m = Mapping::anonymous(4096).unwrap();
        m.write_bytes(0, &[0xAA; 16]);
        m.write_bytes(3, &[1, 2, 3]);
        let mut back = [0u8; 16];
        m.read_bytes(0, &mut back);
        assert_eq!(back[..8], [0xAA, 0xAA, 0xAA, 1, 2, 3, 0xAA, 0xAA]);
        assert_eq!(back[8..], [0xAA; 8]);
    }

    #[test]
    fn concurrent_writers_of_one_word_do_not_lose_bytes() {
        let m = Mapping::anonymous(4096).unwrap();
        std::thread::scope(|s| {
            for byte in 0..8usize {
                let m = &m;
                s.spawn(move || {
                    for round in 0..2000u32 {
                        m.write_bytes(byte, &[(round % 251) as u8 ^ byte as u8]);
                    }
                    m.write_bytes(byte, &[byte as u8 + 1]);
                });
            }
        });
        let mut back = [0u8; 8];
        m.read_bytes(0, &mut back);
        assert_eq!(back, [1, 2, 3, 4, 5, 6, 7, 8]);
    }
}
