//! A domain's data-write sequence: which data writes have been issued, which have
//! completed, and up to which one they are known durable (the watermark every batch of
//! the domain records; docs/DESIGN.md §9.4).
//!
//! Invariants:
//! - Sequence numbers are issued in increasing order starting after the recovered
//!   maximum; every issued number is completed exactly once (success or failure), so
//!   the completed prefix never stalls for good.
//! - `durable <= completed prefix <= issued`; `durable` only grows, and only by
//!   [`SeqTracker::durable_after_flush`] with a prefix read *before* a device flush was
//!   submitted and a flush that then completed.

use platform::Signal;
use std::collections::BTreeSet;
use std::sync::{Mutex, MutexGuard};

#[derive(Debug)]
struct State {
    /// The last issued number.
    issued: u64,
    /// Every number up to this one has completed.
    prefix: u64,
    /// Completed numbers above `prefix + 1` (out of order).
    ahead: BTreeSet<u64>,
    durable: u64,
}

#[derive(Debug)]
pub struct SeqTracker {
    state: Mutex<State>,
    progress: Signal,
}

impl SeqTracker {
    /// A tracker whose numbers up to `start` are history: complete and durable.
    pub fn new(start: u64) -> SeqTracker {
        SeqTracker {
            state: Mutex::new(State {
                issued: start,
                prefix: start,
                ahead: BTreeSet::new(),
                durable: start,
            }),
            progress: Signal::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("sequence tracker lock")
    }

    /// The next number (callers issue under their domain's lock, so numbers follow the
    /// order of the domain's batches).
    pub fn issue(&self) -> u64 {
        let mut s = self.lock();
        s.issued += 1;
        s.issued
    }

    pub fn issued(&self) -> u64 {
        self.lock().issued
    }

    /// The write numbered `seq` finished (its IO completed, or failed).
    pub fn complete(&self, seq: u64) {
        let mut s = self.lock();
        assert!(
            seq > s.prefix && seq <= s.issued,
            "completing {seq}: prefix {}, issued {}",
            s.prefix,
            s.issued
        );
        let fresh = s.ahead.insert(seq);
        assert!(fresh, "write {seq} completed twice");
        while s.ahead.first() == Some(&(s.prefix + 1)) {
            s.ahead.pop_first();
            s.prefix += 1;
        }
        drop(s);
        self.progress.notify_all();
    }

    /// Every write up to the returned number has completed.
    pub fn completed_prefix(&self) -> u64 {
        self.lock().prefix
    }

    /// Waits until every write numbered up to `seq` has completed; returns the prefix.
    pub fn wait_completed(&self, seq: u64) -> u64 {
        let mut s = self.lock();
        assert!(seq <= s.issued, "waiting for {seq}, issued {}", s.issued);
        while s.prefix < seq {
            s = self.progress.wait(s).expect("sequence tracker lock");
        }
        s.prefix
    }

    /// A device flush submitted after `prefix` was read from [`Self::completed_prefix`]
    /// (or returned by [`Self::wait_completed`]) has completed.
    pub fn durable_after_flush(&self, prefix: u64) {
        let mut s = self.lock();
        assert!(prefix <= s.prefix, "durable {prefix} beyond completed");
        s.durable = s.durable.max(prefix);
    }

    pub fn durable(&self) -> u64 {
        self.lock().durable
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn prefix_follows_out_of_order_completions() {
        let t = SeqTracker::new(10);
        let a = t.issue();
        let b = t.issue();
        let c = t.issue();
        assert_eq!((a, b, c), (11, 12, 13));
        t.complete(c);
        assert_eq!(t.completed_prefix(), 10);
        t.complete(a);
        assert_eq!(t.completed_prefix(), 11);
        t.complete(b);
        assert_eq!(t.completed_prefix(), 13);
        assert_eq!(t.durable(), 10);
        t.durable_after_flush(13);
        t.durable_after_flush(12);
        assert_eq!(t.durable(), 13, "durable never goes back");
    }

    #[test]
    fn waiters_wake_when_the_prefix_arrives() {
        let t = Arc::new(SeqTracker::new(0));
        let a = t.issue();
        let b = t.issue();
        let waiter = {
            let t = t.clone();
            std::thread::spawn(move || t.wait_completed(b))
        };
        t.complete(b);
        t.complete(a);
        assert_eq!(waiter.join().unwrap(), 2);
    }

    #[test]
    #[should_panic(expected = "completed twice")]
    fn double_completion_is_a_bug() {
        let t = SeqTracker::new(0);
        let _a = t.issue();
        let b = t.issue();
        t.complete(b);
        t.complete(b);
    }
}
