//! The threads that serve the instance's connections, kept for the next connection
//! when theirs ends (docs/DESIGN.md §12.5 "Processes").
//!
//! Every attached process opens at least two connections (its session's anchor and one
//! for calls), and a build or a git clone starts hundreds of short processes. A thread
//! spawned per connection cost the instance a clone, a stack mapped and unmapped (a TLB
//! shootdown of every CPU at each unmap) and a cold start per connection; a thread
//! that served one now waits for the next one instead.
//!
//! Invariants:
//! - A job runs on a thread that is idle (waiting here) or, if none is, on a new one:
//!   a job never waits for another job to end (a connection may last as long as its
//!   process).
//! - At most [`IDLE_MAX`] threads wait at once, each for at most [`IDLE_FOR`]; the
//!   others end, so the instance's threads fall back after a burst.
//! - [`Workers::stop`] returns once every job handed over has ended and every thread
//!   has been joined; jobs handed over after it are refused.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Threads kept waiting for a connection at most.
pub const IDLE_MAX: usize = 16;
/// How long a thread waits for a connection before it ends.
pub const IDLE_FOR: Duration = Duration::from_secs(30);

type Job = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    /// Threads waiting for a job.
    idle: usize,
    stopping: bool,
}

/// A pool of threads for jobs that may each last long.
pub struct Workers {
    name: String,
    queue: Mutex<Queue>,
    wake: Condvar,
    /// Every thread started and not yet joined (finished ones are joined as new ones
    /// start).
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for Workers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let q = self.queue.lock().expect("workers lock");
        f.debug_struct("Workers")
            .field("name", &self.name)
            .field("queued", &q.jobs.len())
            .field("idle", &q.idle)
            .finish()
    }
}

impl Workers {
    /// A pool whose threads are named `name`.
    pub fn new(name: &str) -> Arc<Workers> {
        Arc::new(Workers {
            name: name.to_string(),
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
            threads: Mutex::new(Vec::new()),
        })
    }

    /// Runs `job` on an idle thread, or on a new one if none is idle. Fails if the
    /// pool is stopping or no thread can be started.
    pub fn run(self: &Arc<Self>, job: impl FnOnce() + Send + 'static) -> std::io::Result<()> {
        // The threads' list first: a thread started here is in it before
        // [`Workers::stop`] takes it, or the job is refused.
        let mut threads = self.threads.lock().expect("workers threads lock");
        {
            let mut q = self.queue.lock().expect("workers lock");
            if q.stopping {
                return Err(std::io::ErrorKind::BrokenPipe.into());
            }
            if q.idle > q.jobs.len() {
                q.jobs.push_back(Box::new(job));
                self.wake.notify_one();
                return Ok(());
            }
        }
        let me = self.clone();
        // Join the threads that ended (idle too long, or too many idle).
        let mut i = 0;
        while i < threads.len() {
            if threads[i].is_finished() {
                let _ = threads.swap_remove(i).join();
            } else {
                i += 1;
            }
        }
        let t = std::thread::Builder::new()
            .name(self.name.clone())
            .spawn(move || {
                job();
                me.serve();
            })?;
        threads.push(t);
        Ok(())
    }

    /// A thread's life after its first job: the next jobs, while some come.
    fn serve(&self) {
        let mut q = self.queue.lock().expect("workers lock");
        loop {
            if let Some(job) = q.jobs.pop_front() {
                drop(q);
                job();
                q = self.queue.lock().expect("workers lock");
                continue;
            }
            if q.stopping || q.idle >= IDLE_MAX {
                return;
            }
            q.idle += 1;
            let (next, timeout) = self
                .wake
                .wait_timeout_while(q, IDLE_FOR, |q| q.jobs.is_empty() && !q.stopping)
                .expect("workers lock");
            q = next;
            q.idle -= 1;
            if timeout.timed_out() && q.jobs.is_empty() {
                return;
            }
        }
    }

    /// Threads alive now (diagnostics, tests).
    pub fn threads(&self) -> usize {
        let threads = self.threads.lock().expect("workers threads lock");
        threads.iter().filter(|t| !t.is_finished()).count()
    }

    /// Refuses new jobs, lets the running ones end (the caller ends them: here, by
    /// shutting their sockets) and joins every thread.
    pub fn stop(&self) {
        {
            let mut q = self.queue.lock().expect("workers lock");
            q.stopping = true;
            self.wake.notify_all();
        }
        let threads = std::mem::take(&mut *self.threads.lock().expect("workers threads lock"));
        for t in threads {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;

    #[test]
    fn an_ended_job_leaves_its_thread_for_the_next() {
        let w = Workers::new("test");
        let ran = Arc::new(AtomicUsize::new(0));
        for _ in 0..50 {
            let (tx, rx) = mpsc::channel();
            let r = ran.clone();
            w.run(move || {
                r.fetch_add(1, Ordering::SeqCst);
                tx.send(()).expect("send");
            })
            .expect("run");
            rx.recv().expect("job ran");
            // Let the thread reach its wait before the next job comes.
            for _ in 0..1000 {
                if w.queue.lock().expect("lock").idle == 1 {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        assert_eq!(ran.load(Ordering::SeqCst), 50);
        assert_eq!(w.threads(), 1, "one thread served every job in turn");
        w.stop();
        assert_eq!(w.threads(), 0);
    }

    #[test]
    fn a_long_job_never_holds_up_another() {
        let w = Workers::new("test");
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let (done_tx, done_rx) = mpsc::channel();
        w.run(move || {
            release_rx.recv().expect("released");
        })
        .expect("run");
        let d = done_tx.clone();
        w.run(move || d.send(1).expect("send")).expect("run");
        assert_eq!(
            done_rx.recv_timeout(Duration::from_secs(10)),
            Ok(1),
            "the second job ran while the first still waits"
        );
        release_tx.send(()).expect("release");
        w.stop();
        assert!(w.run(|| {}).is_err(), "a stopped pool refuses jobs");
    }

    #[test]
    fn idle_threads_are_bounded() {
        let w = Workers::new("test");
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let release_rx = Arc::new(Mutex::new(release_rx));
        let n = IDLE_MAX + 8;
        for _ in 0..n {
            let rx = release_rx.clone();
            w.run(move || {
                rx.lock().expect("lock").recv().expect("released");
            })
            .expect("run");
        }
        assert_eq!(w.threads(), n, "each waiting job has a thread of its own");
        for _ in 0..n {
            release_tx.send(()).expect("release");
        }
        for _ in 0..10_000 {
            if w.threads() <= IDLE_MAX {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(w.threads(), IDLE_MAX, "threads beyond the idle bound ended");
        w.stop();
    }
}
