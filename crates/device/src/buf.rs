//! Aligned IO buffers and a bounded pool of them.
//!
//! `O_DIRECT` needs buffers aligned to the device's memory alignment (at most 4096 on
//! the devices we support); every buffer here is 4096-byte aligned so it fits any device.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::Mutex;

pub const BUF_ALIGN_BYTES: usize = 4096;

/// A heap buffer aligned to 4096 bytes. Its length never exceeds its capacity.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    capacity: usize,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared references only allow reads of the owned bytes.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// A zero-filled buffer of `len` bytes (rounded up to a 4 KiB capacity).
    pub fn zeroed(len: usize) -> AlignedBuf {
        let capacity = len.max(1).div_ceil(BUF_ALIGN_BYTES) * BUF_ALIGN_BYTES;
        let layout = Layout::from_size_align(capacity, BUF_ALIGN_BYTES).expect("valid layout");
        // SAFETY: layout has non-zero size.
        let raw = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        AlignedBuf { ptr, len, capacity }
    }

    /// A buffer holding a copy of `bytes`.
    pub fn from_slice(bytes: &[u8]) -> AlignedBuf {
        let mut buf = AlignedBuf::zeroed(bytes.len());
        buf.copy_from_slice(bytes);
        buf
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Changes the length within the capacity; new bytes are zero.
    pub fn set_len(&mut self, len: usize) {
        assert!(
            len <= self.capacity,
            "length {len} beyond capacity {}",
            self.capacity
        );
        if len > self.len {
            // SAFETY: the range is inside the allocation.
            unsafe { std::ptr::write_bytes(self.ptr.as_ptr().add(self.len), 0, len - self.len) };
        }
        self.len = len;
    }

    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        let layout = Layout::from_size_align(self.capacity, BUF_ALIGN_BYTES).expect("valid layout");
        // SAFETY: allocated in `zeroed` with this layout.
        unsafe { dealloc(self.ptr.as_ptr(), layout) };
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
        let free = (0..count).map(|_| AlignedBuf::zeroed(buf_bytes)).collect();
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
        buf.set_len(self.buf_bytes);
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
        b.set_len(512);
        assert_eq!(b.len(), 512);
        b.set_len(4096);
        assert_eq!(b[600], 0);
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
}
