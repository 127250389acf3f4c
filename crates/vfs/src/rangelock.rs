//! Block-range locks of one file: writers of disjoint block ranges proceed in parallel;
//! overlapping ones in arrival order (docs/DESIGN.md §10.8).
//!
//! Invariants:
//! - Two held ranges never overlap.
//! - A request waits only for overlapping requests that arrived before it (held or
//!   waiting), so a whole-file request (truncate) is not starved by a stream of small
//!   writers, and no request overtakes an earlier overlapping one.

use platform::Signal;
use std::sync::Mutex;

/// A range of blocks, both ends included; `u64::MAX` as the end: to the end of the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BlockRange {
    pub first: u64,
    pub last: u64,
}

impl BlockRange {
    pub const ALL: BlockRange = BlockRange {
        first: 0,
        last: u64::MAX,
    };

    /// Blocks `first..` to the end of the file.
    pub fn from(first: u64) -> BlockRange {
        BlockRange {
            first,
            last: u64::MAX,
        }
    }

    fn overlaps(&self, other: &BlockRange) -> bool {
        self.first <= other.last && other.first <= self.last
    }
}

#[derive(Debug)]
struct Request {
    ticket: u64,
    range: BlockRange,
}

#[derive(Debug, Default)]
struct Requests {
    next: u64,
    /// Held and waiting requests, in arrival order.
    queue: Vec<Request>,
}

/// The range locks of one file.
#[derive(Debug, Default)]
pub(crate) struct RangeLock {
    requests: Mutex<Requests>,
    changed: Signal,
}

/// A held range; released on drop.
#[derive(Debug)]
pub(crate) struct RangeGuard<'a> {
    lock: &'a RangeLock,
    ticket: u64,
    pub range: BlockRange,
}

impl RangeLock {
    /// Waits until `range` overlaps no earlier request, then holds it.
    pub fn lock(&self, range: BlockRange) -> RangeGuard<'_> {
        assert!(range.first <= range.last, "an empty block range");
        let mut r = self.requests.lock().expect("range lock");
        r.next += 1;
        let ticket = r.next;
        r.queue.push(Request { ticket, range });
        while r
            .queue
            .iter()
            .take_while(|q| q.ticket != ticket)
            .any(|q| q.range.overlaps(&range))
        {
            r = self.changed.wait(r).expect("range lock");
        }
        RangeGuard {
            lock: self,
            ticket,
            range,
        }
    }
}

impl Drop for RangeGuard<'_> {
    fn drop(&mut self) {
        let mut r = self.lock.requests.lock().expect("range lock");
        let i = r
            .queue
            .iter()
            .position(|q| q.ticket == self.ticket)
            .expect("a held range is queued");
        r.queue.remove(i);
        drop(r);
        self.lock.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    fn range(first: u64, last: u64) -> BlockRange {
        BlockRange { first, last }
    }

    #[test]
    fn disjoint_ranges_are_held_at_once() {
        let l = RangeLock::default();
        let a = l.lock(range(0, 3));
        let b = l.lock(range(4, 7));
        let c = l.lock(BlockRange::from(8));
        assert_eq!(
            (a.range.last, b.range.first, c.range.last),
            (3, 4, u64::MAX)
        );
    }

    /// Waits until `n` requests (held or waiting) are queued on `l`.
    fn until_queued(l: &RangeLock, n: usize) {
        while l.requests.lock().unwrap().queue.len() < n {
            std::thread::yield_now();
        }
    }

    #[test]
    fn overlapping_ranges_wait_in_arrival_order() {
        let l = Arc::new(RangeLock::default());
        let order = Arc::new(AtomicU64::new(0));
        let held = l.lock(range(0, 9));
        // A whole-file request, then a small one overlapping it: the small one must not
        // overtake it although it overlaps nothing held after `held` goes.
        let (l1, o1) = (l.clone(), order.clone());
        let whole = std::thread::spawn(move || {
            let _g = l1.lock(BlockRange::ALL);
            o1.fetch_add(1, Ordering::SeqCst)
        });
        until_queued(&l, 2);
        let (l2, o2) = (l.clone(), order.clone());
        let small = std::thread::spawn(move || {
            let _g = l2.lock(range(20, 20));
            o2.fetch_add(1, Ordering::SeqCst)
        });
        until_queued(&l, 3);
        assert_eq!(
            order.load(Ordering::SeqCst),
            0,
            "both wait for the held range"
        );
        drop(held);
        assert_eq!(whole.join().unwrap(), 0);
        assert_eq!(small.join().unwrap(), 1);
    }

    #[test]
    fn many_threads_never_hold_overlapping_ranges() {
        let l = Arc::new(RangeLock::default());
        let owners: Arc<Vec<AtomicU64>> = Arc::new((0..16).map(|_| AtomicU64::new(0)).collect());
        let threads: Vec<_> = (0..8u64)
            .map(|t| {
                let (l, owners) = (l.clone(), owners.clone());
                std::thread::spawn(move || {
                    for i in 0..500u64 {
                        let first = (t * 7 + i * 3) % 16;
                        let last = (first + i % 4).min(15);
                        let _g = l.lock(range(first, last));
                        for b in first..=last {
                            assert_eq!(owners[b as usize].swap(t + 1, Ordering::SeqCst), 0);
                        }
                        std::thread::yield_now();
                        for b in first..=last {
                            owners[b as usize].store(0, Ordering::SeqCst);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }
}
