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

use crate::handle::Handle;
use crate::shared::Core;
use platform::Signal;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

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
        if let (true, Ok(blocks)) = (current, read) {
            for (i, (block, mapped)) in blocks.into_iter().enumerate() {
                cached += u64::from(pages.insert_clean(job.first + i as u64, block, Some(mapped)));
            }
        }
        drop(pages);
        job.h.fetched.notify_all();
        let cache = &self.core.cache;
        cache.readahead.fetch_add(cached, Ordering::Relaxed);
        if cache.page_count() > cache.max_pages() {
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
