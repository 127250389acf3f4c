//! Aligned IO buffers and a bounded pool of them.
//!
//! `O_DIRECT` needs buffers aligned to the device's memory alignment (at most 4096 on
//! the devices we support); every buffer here is 4096-byte aligned so it fits any device.
//!
//! Large buffers (at least [`RECYCLE_MIN_BYTES`]) are recycled: the allocator would map
//! and unmap each one afresh, and the page faults of touching new mappings cost more
//! than the IO they serve (a 1 MiB sequential read spent most of its CPU time there).
//! A dropped large buffer goes to a process-wide store of at most
//! [`RECYCLE_TOTAL_BYTES`], and [`AlignedBuf::scratch`] takes one of the same capacity.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::Mutex;

pub const BUF_ALIGN_BYTES: usize = 4096;

/// Buffers of at least this capacity are recycled when dropped.
pub const RECYCLE_MIN_BYTES: usize = 64 << 10;

/// The most bytes of dropped buffers kept for reuse, all capacities together.
pub const RECYCLE_TOTAL_BYTES: usize = 32 << 20;

/// Dropped large buffers by capacity, and their total capacity.
struct Recycled {
    free: HashMap<usize, Vec<AlignedBuf>>,
    bytes: usize,
}

static RECYCLED: Mutex<Option<Recycled>> = Mutex::new(None);

/// A fresh private anonymous mapping of `len` bytes, readable and writable (zero pages,
/// materialised on first touch). The caller unmaps it.
pub fn map_anonymous(len: usize) -> std::io::Result<NonNull<u8>> {
    // SAFETY: a fresh anonymous mapping aliases nothing; arguments are valid.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    Ok(NonNull::new(ptr.cast::<u8>()).expect("mmap never returns null on success"))
}

/// The capacity of a buffer of `len` bytes: whole 4 KiB units, at least one.
fn capacity_for(len: usize) -> usize {
    len.max(1).div_ceil(BUF_ALIGN_BYTES) * BUF_ALIGN_BYTES
}

/// Takes a kept buffer of capacity `capacity`, if any.
fn take_recycled(capacity: usize) -> Option<AlignedBuf> {
    if capacity < RECYCLE_MIN_BYTES {
        return None;
    }
    let mut guard = RECYCLED.lock().unwrap_or_else(|e| e.into_inner());
    let store = guard.as_mut()?;
    let buf = store.free.get_mut(&capacity)?.pop()?;
    store.bytes -= capacity;
    Some(buf)
}

/// Keeps `buf` for reuse if the store has room; gives it back otherwise.
fn keep_recycled(buf: AlignedBuf) -> Option<AlignedBuf> {
    let mut guard = RECYCLED.lock().unwrap_or_else(|e| e.into_inner());
    let store = guard.get_or_insert_with(|| Recycled {
        free: HashMap::new(),
        bytes: 0,
    });
    if store.bytes + buf.capacity > RECYCLE_TOTAL_BYTES {
        return Some(buf);
    }
    store.bytes += buf.capacity;
    store.free.entry(buf.capacity).or_default().push(buf);
    None
}

/// A heap buffer aligned to 4096 bytes. Its length never exceeds its capacity.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    capacity: usize,
    /// Memory the creator lent ([`AlignedBuf::lent`]): never freed or recycled here.
    lent: bool,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like Vec<u8> (a lent one has it
// exclusively until dropped, by `lent`'s contract).
unsafe impl Send for AlignedBuf {}
// SAFETY: shared references only allow reads of the owned bytes.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// A zero-filled buffer of `len` bytes (rounded up to a 4 KiB capacity).
    pub fn zeroed(len: usize) -> AlignedBuf {
        let capacity = capacity_for(len);
        if let Some(mut buf) = take_recycled(capacity) {
            buf.len = len;
            buf.fill(0);
            return buf;
        }
        AlignedBuf::allocate(len, capacity)
    }

    /// A buffer of `len` bytes whose contents are unspecified: a recycled buffer's old
    /// bytes, or zeros. For a buffer the caller overwrites whole (a device read, a copy);
    /// it must never reach anyone who could see the old bytes.
    pub fn scratch(len: usize) -> AlignedBuf {
        let capacity = capacity_for(len);
        if let Some(mut buf) = take_recycled(capacity) {
            buf.len = len;
            return buf;
        }
        AlignedBuf::allocate(len, capacity)
    }

    /// A new zero-filled allocation.
    fn allocate(len: usize, capacity: usize) -> AlignedBuf {
        let layout = Layout::from_size_align(capacity, BUF_ALIGN_BYTES).expect("valid layout");
        // SAFETY: layout has non-zero size.
        let raw = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        AlignedBuf {
            ptr,
            len,
            capacity,
            lent: false,
        }
    }

    /// A buffer over `len` bytes at `ptr` that its creator owns, so that a device read
    /// lands in its final place (the page cache's blocks) without a copy. Dropping it
    /// frees nothing.
    ///
    /// # Safety
    /// `ptr` is aligned to [`BUF_ALIGN_BYTES`], `len` a multiple of it, and the bytes
    /// are valid for reads and writes and used by nothing else until the buffer drops.
    pub unsafe fn lent(ptr: NonNull<u8>, len: usize) -> AlignedBuf {
        assert!(
            len > 0 && len % BUF_ALIGN_BYTES == 0,
            "a lent buffer of whole units"
        );
        assert_eq!(
            ptr.as_ptr() as usize % BUF_ALIGN_BYTES,
            0,
            "a lent buffer's alignment"
        );
        AlignedBuf {
            ptr,
            len,
            capacity: len,
            lent: true,
        }
    }

    /// A buffer holding a copy of `bytes`.
    pub fn from_slice(bytes: &[u8]) -> AlignedBuf {
        let mut buf = AlignedBuf::scratch(bytes.len());
        buf.copy_from_slice(bytes);
        buf
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Changes the length within the capacity; new bytes are zero.
    pub fn set_len(&mut self, len: usize) {
        let old = self.len;
        self.reuse_len(len);
        if len > old {
            self[old..].fill(0);
        }
    }

    /// Changes the length within the capacity, leaving the bytes there as they are (old
    /// contents or zeros: a capacity is always initialized). For a pooled buffer whose
    /// next user overwrites what it uses ([`BufPool::get`]).
    pub fn reuse_len(&mut self, len: usize) {
        assert!(
            len <= self.capacity,
            "length {len} beyond capacity {}",
            self.capacity
        );
        self.len = len;
    }

    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl AlignedBuf {
    /// Frees the allocation now (no recycling); the shell left owns nothing.
    fn free(&mut self) {
        if self.capacity == 0 {
            return;
        }
        let layout = Layout::from_size_align(self.capacity, BUF_ALIGN_BYTES).expect("valid layout");
        // SAFETY: allocated in `zeroed` with this layout, and freed only once (capacity
        // 0 marks a shell).
        unsafe { dealloc(self.ptr.as_ptr(), layout) };
        self.capacity = 0;
        self.len = 0;
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if self.lent {
            return;
        }
        if self.capacity >= RECYCLE_MIN_BYTES {
            // The allocation moves to a new owner, kept for reuse or freed here.
            let owned = AlignedBuf {
                ptr: self.ptr,
                len: 0,
                capacity: self.capacity,
                lent: false,
            };
            self.capacity = 0;
            if let Some(mut back) = keep_recycled(owned) {
                back.free();
            }
            return;
        }
        self.free();
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is valid for len initialised bytes (zeroed at allocation).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and we hold the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Clone for AlignedBuf {
    fn clone(&self) -> Self {
        AlignedBuf::from_slice(self)
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "AlignedBuf(len={}, capacity={})",
            self.len, self.capacity
        )
    }
}

/// A bounded pool of equal-sized buffers, filled at creation so the IO path does not
/// allocate. `get` falls back to allocating when the pool is empty, and `put` drops
/// buffers beyond the bound.
#[derive(Debug)]
pub struct BufPool {
    buf_bytes: usize,
    count_max: usize,
    free: Mutex<Vec<AlignedBuf>>,
}

impl BufPool {
    pub fn new(buf_bytes: usize, count: usize) -> BufPool {
        // Scratch: `get` promises no contents (a recycled buffer is not cleared again).
        let free = (0..count).map(|_| AlignedBuf::scratch(buf_bytes)).collect();
        BufPool {
            buf_bytes,
            count_max: count,
            free: Mutex::new(free),
        }
    }

    pub fn buf_bytes(&self) -> usize {
        self.buf_bytes
    }

    /// A buffer of `buf_bytes` length. Contents are whatever the last user left.
    pub fn get(&self) -> AlignedBuf {
        let recycled = self.free.lock().expect("pool lock").pop();
        recycled.unwrap_or_else(|| AlignedBuf::zeroed(self.buf_bytes))
    }

    pub fn put(&self, mut buf: AlignedBuf) {
        if buf.capacity() < self.buf_bytes {
            return;
        }
        // Not zeroed: `get` promises only the last user's bytes (a 512-byte WAL write
        // from a 64 KiB buffer would otherwise clear 64 KiB on every return).
        buf.reuse_len(self.buf_bytes);
        let mut free = self.free.lock().expect("pool lock");
        if free.len() < self.count_max {
            free.push(buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_zeroed() {
        let mut b = AlignedBuf::zeroed(8192);
        assert_eq!(b.as_ptr() as usize % BUF_ALIGN_BYTES, 0);
        assert!(b.iter().all(|&x| x == 0));
        b[100] = 7;
        let c = b.clone();
        assert_eq!(c[100], 7);
        assert_eq!(c.as_ptr() as usize % BUF_ALIGN_BYTES, 0);
        b[600] = 9;
        b.set_len(512);
        assert_eq!(b.len(), 512);
        b.set_len(4096);
        assert_eq!(b[600], 0, "growing clears the bytes it adds");
    }

    #[test]
    fn large_buffers_are_recycled_and_zeroed_stays_zero() {
        // A capacity no other test uses, so the process-wide store is ours.
        let len = RECYCLE_MIN_BYTES + 3 * BUF_ALIGN_BYTES;
        let mut a = AlignedBuf::scratch(len);
        a.fill(0xa5);
        let at = a.as_ptr() as usize;
        drop(a);
        let b = AlignedBuf::scratch(len - 10);
        assert_eq!(b.as_ptr() as usize, at, "the dropped buffer is reused");
        assert_eq!(b.len(), len - 10);
        drop(b);
        let c = AlignedBuf::zeroed(len);
        assert_eq!(c.as_ptr() as usize, at);
        assert!(c.iter().all(|&x| x == 0), "zeroed clears a recycled buffer");
        let small = AlignedBuf::zeroed(4096);
        let p = small.as_ptr() as usize;
        drop(small);
        assert!(
            take_recycled(4096).is_none(),
            "small buffers are not kept ({p:#x})"
        );
    }

    #[test]
    fn pool_recycles_up_to_bound() {
        let pool = BufPool::new(4096, 2);
        let a = pool.get();
        let b = pool.get();
        let c = pool.get();
        pool.put(a);
        pool.put(b);
        pool.put(c);
        assert_eq!(pool.free.lock().unwrap().len(), 2);
    }

    #[test]
    fn a_returned_buffer_is_not_cleared() {
        // Clearing the whole capacity on every return cost a small WAL write several
        // microseconds.
        let pool = BufPool::new(64 * 1024, 1);
        let mut a = pool.get();
        a.fill(0x5a);
        a.set_len(512);
        pool.put(a);
        let b = pool.get();
        assert_eq!(b.len(), 64 * 1024);
        assert!(b.iter().all(|&x| x == 0x5a), "old bytes kept, none cleared");
    }
}
