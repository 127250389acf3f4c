//! [`Signal`]: a condition variable that makes no system call when nobody waits.
//!
//! The standard library's futex condition variable enters the kernel on every
//! `notify_all`, waiters or not; an fsync notified four such variables nobody was
//! waiting on (the write's sequence, its range, the WAL lane, the flush combiner).
//!
//! Invariant (the caller's): whatever a waiter waits for changes only under the mutex
//! it waits with. A waiter counts itself while it holds that mutex, before the wait
//! releases it; a notifier that changed the state under the mutex (and released it, or
//! still holds it) therefore sees the count.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, LockResult, MutexGuard, WaitTimeoutResult};
use std::time::Duration;

#[derive(Debug, Default)]
pub struct Signal {
    cv: Condvar,
    waiters: AtomicUsize,
}

impl Signal {
    pub const fn new() -> Signal {
        Signal {
            cv: Condvar::new(),
            waiters: AtomicUsize::new(0),
        }
    }

    /// As [`Condvar::wait`].
    pub fn wait<'a, T>(&self, guard: MutexGuard<'a, T>) -> LockResult<MutexGuard<'a, T>> {
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let result = self.cv.wait(guard);
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        result
    }

    /// As [`Condvar::wait_timeout`].
    #[allow(clippy::type_complexity)]
    pub fn wait_timeout<'a, T>(
        &self,
        guard: MutexGuard<'a, T>,
        timeout: Duration,
    ) -> LockResult<(MutexGuard<'a, T>, WaitTimeoutResult)> {
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let result = self.cv.wait_timeout(guard, timeout);
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        result
    }

    /// Wakes every waiter, if any.
    pub fn notify_all(&self) {
        if self.waiters.load(Ordering::SeqCst) > 0 {
            self.cv.notify_all();
        }
    }

    /// Wakes one waiter, if any.
    pub fn notify_one(&self) {
        if self.waiters.load(Ordering::SeqCst) > 0 {
            self.cv.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn no_wake_up_is_lost_between_threads() {
        let shared = Arc::new((Mutex::new(0u64), Signal::new()));
        let rounds = 20_000;
        let other = {
            let shared = shared.clone();
            std::thread::spawn(move || {
                for i in 1..=rounds {
                    let (m, s) = &*shared;
                    let mut v = m.lock().unwrap();
                    while *v < 2 * i - 1 {
                        v = s.wait(v).unwrap();
                    }
                    *v += 1;
                    drop(v);
                    s.notify_all();
                }
            })
        };
        let (m, s) = &*shared;
        for i in 1..=rounds {
            let mut v = m.lock().unwrap();
            while *v < 2 * (i - 1) {
                v = s.wait(v).unwrap();
            }
            *v += 1;
            drop(v);
            s.notify_all();
        }
        other.join().unwrap();
        assert_eq!(*m.lock().unwrap(), 2 * rounds);
    }

    #[test]
    fn a_timed_wait_times_out_and_uncounts_itself() {
        let m = Mutex::new(());
        let s = Signal::new();
        let (_g, r) = s
            .wait_timeout(m.lock().unwrap(), Duration::from_millis(5))
            .unwrap();
        assert!(r.timed_out());
        assert_eq!(s.waiters.load(Ordering::SeqCst), 0);
    }
}
