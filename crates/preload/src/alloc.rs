//! The library's own allocator, chosen once per process (the host program keeps its
//! malloc either way).
//!
//! A holder runs the whole file system in the program's process, where mimalloc made
//! creates about 14% faster than glibc's malloc (docs/BENCHMARKS.md §2.3). An attached
//! process (env AUGEFS_MOUNT) allocates little per call, but a build or a shell script
//! starts hundreds of them, and mimalloc's start (an arena reserved, its bitmaps
//! cleared, fresh pages for its first blocks) cost about half a millisecond of each;
//! they use the system's allocator, which the program has already started.
//!
//! Invariants:
//! - The choice is made at the first allocation and never changes: every block is
//!   freed or grown by the allocator that made it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU8, Ordering};

const UNDECIDED: u8 = 0;
const MIMALLOC: u8 = 1;
const SYSTEM: u8 = 2;

/// mimalloc for a holder, the system's allocator for an attached process.
pub struct Chosen {
    which: AtomicU8,
}

impl Chosen {
    pub const fn new() -> Chosen {
        Chosen {
            which: AtomicU8::new(UNDECIDED),
        }
    }

    #[inline]
    fn which(&self) -> u8 {
        match self.which.load(Ordering::Relaxed) {
            UNDECIDED => self.decide(),
            w => w,
        }
    }

    #[cold]
    fn decide(&self) -> u8 {
        // getenv allocates nothing (std::env would, from inside the allocator).
        // SAFETY: the name is a NUL-terminated string; the result is only tested.
        let attached = unsafe { !libc::getenv(c"AUGEFS_MOUNT".as_ptr()).is_null() };
        let w = if attached { SYSTEM } else { MIMALLOC };
        // The first decision wins (the environment could change between two threads'
        // first allocations).
        match self
            .which
            .compare_exchange(UNDECIDED, w, Ordering::Relaxed, Ordering::Relaxed)
        {
            Ok(_) => w,
            Err(first) => first,
        }
    }

    /// The allocator of this process.
    #[inline]
    fn chosen(&self) -> &'static dyn GlobalAlloc {
        static SYS: System = System;
        static MI: mimalloc::MiMalloc = mimalloc::MiMalloc;
        if self.which() == SYSTEM {
            &SYS
        } else {
            &MI
        }
    }
}

// SAFETY: every call goes to one allocator for the life of the process (`which` is
// set once), so each block is handled by the allocator that made it.
unsafe impl GlobalAlloc for Chosen {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        unsafe { self.chosen().alloc(layout) }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        unsafe { self.chosen().alloc_zeroed(layout) }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract; `ptr` came from the same allocator.
        unsafe { self.chosen().dealloc(ptr, layout) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract; `ptr` came from the same allocator.
        unsafe { self.chosen().realloc(ptr, layout, new_size) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_choice_stays() {
        let c = Chosen::new();
        let env = c.which();
        assert!(env == SYSTEM || env == MIMALLOC);
        // A first choice the environment would not make now (it changed since): a
        // later decision keeps it, whatever the environment says.
        let first = if env == SYSTEM { MIMALLOC } else { SYSTEM };
        c.which.store(first, Ordering::Relaxed);
        assert_eq!(c.decide(), first, "a later decision keeps the first");
        assert_eq!(c.which(), first);
        let layout = Layout::from_size_align(100, 8).expect("layout");
        // SAFETY: a block made and freed by the same allocator, of `layout`.
        unsafe {
            let p = c.alloc(layout);
            assert!(!p.is_null());
            let p = c.realloc(p, layout, 5000);
            assert!(!p.is_null());
            c.dealloc(p, Layout::from_size_align(5000, 8).expect("layout"));
        }
    }
}
