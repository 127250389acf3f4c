//! A value behind a spin lock that fork handlers can hold across a fork: the child of
//! a multi-threaded process must never inherit a lock that a thread it does not have
//! holds (a std mutex could not be taken over that way).
//!
//! Invariants:
//! - The value is touched only while `locked` is held (acquire on taking it, release
//!   on giving it back).
//! - Holders keep it for a few instructions (a pop, a push, a page copy): waiters spin,
//!   yielding the CPU after a while.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, Ordering};

#[derive(Debug, Default)]
pub(crate) struct ForkLock<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the value is only reached under the lock (see the invariants).
unsafe impl<T: Send> Sync for ForkLock<T> {}

/// Gives the lock back when dropped (also on a panic inside [`ForkLock::with`]).
struct Unlock<'a, T>(&'a ForkLock<T>);

impl<T> Drop for Unlock<'_, T> {
    fn drop(&mut self) {
        self.0.unlock();
    }
}

impl<T> ForkLock<T> {
    pub fn lock(&self) {
        let mut turns = 0u32;
        while self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            turns += 1;
            if turns % 64 == 0 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }

    pub fn unlock(&self) {
        self.locked.store(false, Ordering::Release);
    }

    pub fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        self.lock();
        let _unlock = Unlock(self);
        // SAFETY: the lock is held until `_unlock` drops.
        f(unsafe { &mut *self.value.get() })
    }

    /// The value, for a caller that took the lock with [`ForkLock::lock`] (a fork
    /// handler) and gives it back with [`ForkLock::unlock`].
    ///
    /// # Safety
    /// The caller holds the lock, and the reference does not outlive it.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn held(&self) -> &mut T {
        // SAFETY: the caller holds the lock (this function's contract).
        unsafe { &mut *self.value.get() }
    }
}
