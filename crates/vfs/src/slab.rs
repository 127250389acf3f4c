//! Page memory: cached blocks live in 2 MiB chunks mapped for the page cache (asking
//! for transparent huge pages), not in one heap allocation each.
//!
//! Filling the cache from the heap cost more than the device reads it served: every 4
//! KiB block was a fresh allocation whose first touch faulted a page in, and the
//! allocator grew and shrank its arenas with a system call every few blocks (a cold 1
//! MiB sequential read spent three quarters of its CPU time there). A chunk is mapped
//! once, faults in as one huge page where the kernel allows, and its slots are reused
//! as blocks are evicted.
//!
//! Invariants:
//! - A slot belongs to at most one [`Block`] allocation at a time; it returns to its
//!   chunk when the last clone of that block drops.
//! - Chunks stay mapped: when all of a chunk's slots are free its pages are given back
//!   lazily (MADV_FREE), so the memory returns to the system under pressure, while a
//!   cache that shrinks and grows again reuses them without faults. The mapped total
//!   is the high-water mark of cached blocks (bounded by the caches' `max_bytes`).

use crate::pagecache::PAGE;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

/// Bytes per chunk (a huge page on x86-64).
pub const CHUNK_BYTES: usize = 2 << 20;
const SLOTS: usize = CHUNK_BYTES / PAGE;

struct Chunk {
    base: NonNull<u8>,
    /// Free slot indexes.
    free: Vec<u16>,
}

// SAFETY: the chunk's memory is owned by the slab; slots are handed to one block each.
unsafe impl Send for Chunk {}

#[derive(Default)]
struct State {
    chunks: Vec<Chunk>,
    /// Chunks that may have free slots (an entry goes stale when its chunk fills;
    /// `take` drops those).
    with_free: Vec<usize>,
}

static STATE: Mutex<State> = Mutex::new(State {
    chunks: Vec::new(),
    with_free: Vec::new(),
});

fn state() -> std::sync::MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Maps a chunk aligned to its size (so that it can be one huge page).
fn map_chunk() -> NonNull<u8> {
    let len = 2 * CHUNK_BYTES;
    let raw: *mut libc::c_void = match device::buf::map_anonymous(len) {
        Ok(p) => p.as_ptr().cast(),
        Err(_) => std::alloc::handle_alloc_error(
            std::alloc::Layout::from_size_align(CHUNK_BYTES, CHUNK_BYTES).expect("layout"),
        ),
    };
    let start = raw as usize;
    let aligned = start.next_multiple_of(CHUNK_BYTES);
    // SAFETY: both trimmed ranges lie inside the mapping just made and hold nothing.
    unsafe {
        if aligned > start {
            libc::munmap(raw, aligned - start);
        }
        let tail = aligned + CHUNK_BYTES;
        if start + len > tail {
            libc::munmap(tail as *mut libc::c_void, start + len - tail);
        }
        // Advice only: without huge pages the chunk faults in 4 KiB at a time.
        libc::madvise(
            aligned as *mut libc::c_void,
            CHUNK_BYTES,
            libc::MADV_HUGEPAGE,
        );
    }
    NonNull::new(aligned as *mut u8).expect("a mapping is not at address 0")
}

/// One slot of a chunk, owned by a block.
struct Slot {
    ptr: NonNull<u8>,
    chunk: usize,
    index: u16,
}

// SAFETY: a slot's 4 KiB are owned by it alone (and only read once shared).
unsafe impl Send for Slot {}
// SAFETY: shared references only read.
unsafe impl Sync for Slot {}

impl Slot {
    fn take() -> Slot {
        let mut st = state();
        while let Some(&c) = st.with_free.last() {
            let chunk = &mut st.chunks[c];
            if let Some(index) = chunk.free.pop() {
                // SAFETY: the index is a slot of this chunk.
                let ptr = unsafe { chunk.base.add(usize::from(index) * PAGE) };
                return Slot {
                    ptr,
                    chunk: c,
                    index,
                };
            }
            st.with_free.pop();
        }
        let base = map_chunk();
        st.chunks.push(Chunk {
            base,
            free: (1..SLOTS as u16).rev().collect(),
        });
        let c = st.chunks.len() - 1;
        st.with_free.push(c);
        Slot {
            ptr: base,
            chunk: c,
            index: 0,
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut st = state();
        let st = &mut *st;
        let chunk = &mut st.chunks[self.chunk];
        chunk.free.push(self.index);
        if chunk.free.len() == 1 {
            st.with_free.push(self.chunk);
        }
        if chunk.free.len() == SLOTS {
            // Handed back lazily: the kernel takes the pages only under memory pressure,
            // and until then a new block reuses them without a fault or a zeroing (a
            // remount's cold cache then costs what the kernel's own cache does).
            // SAFETY: every slot is free: nothing refers to the chunk's bytes.
            unsafe { libc::madvise(chunk.base.as_ptr().cast(), CHUNK_BYTES, libc::MADV_FREE) };
        }
    }
}

/// A block's bytes as cached: 4 KiB, immutable once shared (clones share them); the
/// cache, readers copying from it and write-backs sending it hold it alike.
#[derive(Clone)]
pub(crate) struct Block(Arc<Slot>);

impl Block {
    /// A block of `bytes` (4 KiB).
    pub fn copy_of(bytes: &[u8]) -> Block {
        assert_eq!(bytes.len(), PAGE, "a block is one page");
        let slot = Slot::take();
        // SAFETY: the slot's 4 KiB are ours alone and do not overlap `bytes`.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), slot.ptr.as_ptr(), PAGE) };
        Block(Arc::new(slot))
    }

    /// Whether `a` and `b` are clones of one block (not merely equal bytes).
    pub fn same(a: &Block, b: &Block) -> bool {
        Arc::ptr_eq(&a.0, &b.0)
    }

    /// The bytes for changing, while this is the block's only holder.
    pub fn get_mut(&mut self) -> Option<&mut [u8]> {
        let slot = Arc::get_mut(&mut self.0)?;
        // SAFETY: the only holder of the slot; its 4 KiB are initialised (copy_of).
        Some(unsafe { std::slice::from_raw_parts_mut(slot.ptr.as_ptr(), PAGE) })
    }
}

impl From<&[u8]> for Block {
    fn from(bytes: &[u8]) -> Block {
        Block::copy_of(bytes)
    }
}

impl std::ops::Deref for Block {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: the slot's 4 KiB are initialised and not changed while shared.
        unsafe { std::slice::from_raw_parts(self.0.ptr.as_ptr(), PAGE) }
    }
}

impl std::fmt::Debug for Block {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Block(chunk {}, slot {})", self.0.chunk, self.0.index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_hold_their_bytes_and_slots_are_reused() {
        let a = Block::from(&[7u8; PAGE][..]);
        let mut b = Block::from(&[9u8; PAGE][..]);
        assert!(a.iter().all(|&x| x == 7) && b.iter().all(|&x| x == 9));
        b.get_mut().expect("only holder")[0] = 1;
        let c = b.clone();
        assert!(b.get_mut().is_none(), "shared blocks do not change");
        assert_eq!(c[0], 1);
        drop(a);
        // Another thread's block may take the freed slot first; only check it is sane.
        let d = Block::from(&[3u8; PAGE][..]);
        assert!(d.iter().all(|&x| x == 3));
        // More blocks than one chunk holds, then all dropped.
        let many: Vec<Block> = (0..SLOTS + 10)
            .map(|i| Block::from(&[i as u8; PAGE][..]))
            .collect();
        for (i, m) in many.iter().enumerate() {
            assert_eq!(m[PAGE - 1], i as u8);
        }
        drop(many);
        assert!(c.iter().skip(1).all(|&x| x == 9));
    }
}
