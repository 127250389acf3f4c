//! Asynchronous read-ahead: worker threads read a sequential reader's next window from
//! the device while the reader copies what it already has, so the device and the CPU
//! work at once (docs/DESIGN.md §10.7).
//!
//! Invariants:
//! - A job's blocks are registered as a fetch of their inode's pages
//!   ([`crate::pagecache::Pages::begin_fetch`]) before the job is queued; the job ends
//!   that fetch whatever happens (done, failed, or dropped at shutdown) and caches its
//!   blocks only if the fetch is still current (no writer installed over it and no
//!   truncate or deletion cleared the pages meanwhile).
//! - Every end of a fetch notifies the handle's `fetched` condition: a reader that
//!   misses a block of a fetch in flight waits for it instead of reading it again.
//! - A failed read-ahead is dropped silently: it was a guess, and a reader that still
//!   misses those blocks reads them itself and sees the error.
//! - Workers are started on the first job, at most `workers_max`, and stopped (queued
//!   jobs ended unread) before the file system unmounts or drops.
//! - Who is a sequential reader is [`next_window`], a pure function of the reader's
//!   state and the read: only a read at the expected block opens or grows a window, and
//!   any read farther than one window from it closes the window.

use crate::handle::Handle;
use crate::shared::Core;
use platform::Signal;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// A file's read-ahead state as a read sees it (`Pages::ra_next`, `Pages::ra_window`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Window {
    /// The block after the furthest one a sequential reader has read.
    pub next: u64,
    /// Blocks read ahead of it; 0: no sequential reader.
    pub blocks: u64,
}

/// The read-ahead state after a read of blocks `first..=last` (`start`: the first
/// window, `max`: the largest, in blocks), and whether the reader is sequential (the
/// caller then reads ahead).
/// - A read at `next` is sequential: the window becomes at least twice the read and
///   doubles while the reader goes on, from `start` up to `max`.
/// - A read within one window of `next` while a window is open is the same reader's
///   request served out of order (FUSE hands a reader's consecutive READs to several
///   threads, and a later one may be noted first): `next` never moves back, and the
///   window grows only if the read moved `next` on, so the swap costs the reader
///   nothing.
/// - Anything else (a random read, a jump) closes the window: random readers never
///   read ahead.
pub(crate) fn next_window(
    w: Window,
    (first, last): (u64, u64),
    start: u64,
    max: u64,
) -> (Window, bool) {
    assert!(first <= last && start <= max);
    let grown = (w.blocks * 2).max(2 * (last - first + 1)).clamp(start, max);
    if first == w.next {
        let next = last + 1;
        return (
            Window {
                next,
                blocks: grown,
            },
            true,
        );
    }
    let near = w.blocks > 0 && first <= w.next + w.blocks && last + 1 + w.blocks >= w.next;
    if near {
        let on = last + 1 > w.next;
        let next = w.next.max(last + 1);
        let blocks = if on { grown } else { w.blocks };
        return (Window { next, blocks }, true);
    }
    (
        Window {
            next: last + 1,
            blocks: 0,
        },
        false,
    )
}

/// Blocks `first..first + count` of `h`'s file, registered as fetch `fetch`.
pub(crate) struct Job {
    pub h: Arc<Handle>,
    pub first: u64,
    pub count: u64,
    pub fetch: u64,
}

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    idle: usize,
    stop: bool,
}

/// The read-ahead workers of one mount.
pub(crate) struct ReadAhead {
    core: Arc<Core>,
    workers_max: usize,
    queue: Mutex<Queue>,
    wake: Signal,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl ReadAhead {
    pub fn new(core: Arc<Core>, workers_max: usize) -> Arc<ReadAhead> {
        assert!(workers_max > 0, "read-ahead needs a worker");
        Arc::new(ReadAhead {
            core,
            workers_max,
            queue: Mutex::new(Queue::default()),
            wake: Signal::new(),
            threads: Mutex::new(Vec::new()),
        })
    }

    /// Queues `job` (starting a worker if none is idle and there is room for one); after
    /// [`ReadAhead::stop`], gives it back (the caller, who may hold the pages' lock, ends
    /// its fetch).
    pub fn submit(self: &Arc<Self>, job: Job) -> Result<(), Job> {
        let mut q = self.queue.lock().expect("read-ahead queue lock");
        if q.stop {
            return Err(job);
        }
        q.jobs.push_back(job);
        if q.idle == 0 {
            let mut threads = self.threads.lock().expect("read-ahead threads lock");
            if threads.len() < self.workers_max {
                let me = self.clone();
                let spawned = std::thread::Builder::new()
                    .name("augefs-readahead".into())
                    .spawn(move || me.work());
                // Without a thread the job waits for a running worker, or for stop.
                if let Ok(t) = spawned {
                    threads.push(t);
                }
            }
        }
        drop(q);
        self.wake.notify_one();
        Ok(())
    }

    fn work(&self) {
        loop {
            let job = {
                let mut q = self.queue.lock().expect("read-ahead queue lock");
                loop {
                    if let Some(job) = q.jobs.pop_front() {
                        break job;
                    }
                    if q.stop {
                        return;
                    }
                    q.idle += 1;
                    q = self.wake.wait(q).expect("read-ahead queue lock");
                    q.idle -= 1;
                }
            };
            self.run(job);
        }
    }

    fn run(&self, job: Job) {
        let read = self.core.read_pages(job.h.ino, job.first, job.count);
        let mut pages = job.h.pages();
        let current = pages.end_fetch(job.fetch);
        let mut cached = 0;
        let mut within = true;
        if let (true, Ok(blocks)) = (current, read) {
            // Room for the pages read ahead comes first from this file's pages
            // farthest from its reader: the flusher's trim would leave the cache over
            // its budget until it ran.
            let near = pages.ra_next;
            within = pages.keep_budget(near, blocks.len() as u64);
            for (i, (block, mapped)) in blocks.into_iter().enumerate() {
                cached += u64::from(pages.insert_clean(job.first + i as u64, block, Some(mapped)));
            }
        }
        drop(pages);
        job.h.fetched.notify_all();
        let cache = &self.core.cache;
        cache.readahead.fetch_add(cached, Ordering::Relaxed);
        if !within {
            cache.kick(false);
        }
    }

    /// Stops the workers: queued jobs end unread, a job being read finishes first.
    pub fn stop(&self) {
        let jobs = {
            let mut q = self.queue.lock().expect("read-ahead queue lock");
            q.stop = true;
            std::mem::take(&mut q.jobs)
        };
        self.wake.notify_all();
        jobs.into_iter().for_each(end_unread);
        let threads = std::mem::take(&mut *self.threads.lock().expect("read-ahead threads lock"));
        for t in threads {
            // A panic in a worker was already reported; unmount goes on.
            let _ = t.join();
        }
    }
}

/// Ends `job`'s fetch without reading (its waiters then read for themselves).
fn end_unread(job: Job) {
    job.h.pages().end_fetch(job.fetch);
    job.h.fetched.notify_all();
}

impl std::fmt::Debug for ReadAhead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadAhead")
            .field("workers_max", &self.workers_max)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::{next_window, Window};

    fn w(next: u64, blocks: u64) -> Window {
        Window { next, blocks }
    }

    #[test]
    fn sequential_readers_read_ahead_and_others_do_not() {
        // (state, read, new state, sequential): start 8 blocks, max 256.
        let cases = [
            // The first read at block 0 opens a window of twice the read.
            (w(0, 0), (0, 31), w(32, 64), true),
            // Going on doubles it, up to the largest.
            (w(32, 64), (32, 63), w(64, 128), true),
            (w(64, 128), (64, 95), w(96, 256), true),
            (w(96, 256), (96, 127), w(128, 256), true),
            // A small read starts at the first window.
            (w(5, 0), (5, 5), w(6, 8), true),
            // Two requests swapped: the later one first grows the window...
            (w(32, 64), (64, 95), w(96, 128), true),
            (w(512, 256), (544, 575), w(576, 256), true),
            // ...and the earlier one then neither moves `next` back nor changes it.
            (w(96, 128), (32, 63), w(96, 128), true),
            (w(576, 256), (512, 543), w(576, 256), true),
            // A random read closes the window; so does a jump back or far ahead.
            (w(512, 256), (40_000, 40_000), w(40_001, 0), false),
            (w(512, 256), (0, 31), w(32, 0), false),
            (w(512, 256), (769, 800), w(801, 0), false),
            // With no window open, only the expected block opens one.
            (w(100, 0), (101, 101), w(102, 0), false),
            (w(100, 0), (99, 99), w(100, 0), false),
        ];
        for (state, read, want, sequential) in cases {
            assert_eq!(
                next_window(state, read, 8, 256),
                (want, sequential),
                "{state:?} {read:?}"
            );
        }
    }

    #[test]
    fn random_reads_never_open_a_window() {
        let mut state = w(0, 0);
        let mut x: u64 = 88_172_645_463_325_252;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let b = 1 + x % 65_536;
            let (next, sequential) = next_window(state, (b, b), 8, 256);
            // Only a read of exactly the next block is taken for a sequential one.
            assert_eq!(sequential, b == state.next, "{state:?} {b}");
            state = next;
        }
    }
}
