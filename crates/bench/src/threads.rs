//! Worker threads run for a fixed time: every benchmark's throughput figure is this
//! loop around a different operation.
//!
//! Invariants:
//! - Each thread prepares its worker (opens files, allocates buffers) before the start;
//!   all threads are then released at once.
//! - A run's time starts when the first thread starts and ends when the last one stops,
//!   by the threads' own clock readings (a descheduled coordinator cannot shorten it).
//! - Every run is bounded: by the duration and by `ops_per_thread`, if given.
//! - The first error of any thread is the run's result; the others still finish.
//! - Latency samples (`timed_sampled`) are bounded per thread and spread evenly over
//!   its operations: when the buffer fills, every other sample goes and the stride
//!   doubles, so memory stays fixed however fast the operation is.

use std::sync::Barrier;
use std::time::{Duration, Instant};

/// When a run stops: at the deadline or after `ops_per_thread` operations per thread,
/// whichever comes first.
#[derive(Debug, Clone, Copy)]
pub struct Limit {
    pub duration: Duration,
    pub ops_per_thread: Option<u64>,
}

/// Operations done by all threads and the time they took.
#[derive(Debug, Clone, Copy)]
pub struct Run {
    pub ops: u64,
    pub elapsed_ns: u64,
    /// Threads that stopped at `ops_per_thread` rather than at the deadline.
    pub capped_threads: usize,
}

impl Run {
    pub fn ops_per_sec(&self) -> f64 {
        self.ops as f64 * 1e9 / self.elapsed_ns.max(1) as f64
    }
}

/// One thread's operations and when it began and stopped.
struct ThreadOps {
    ops: u64,
    capped: bool,
    started: Instant,
    ended: Instant,
    latencies_ns: Vec<u64>,
}

/// Latency samples kept per thread (8 B each: 512 KiB per thread at most).
const LATENCY_SAMPLES_PER_THREAD_MAX: usize = 1 << 16;

/// Every `stride`-th operation's latency, thinned to stay within the bound.
struct Sampler {
    stride: u64,
    latencies_ns: Vec<u64>,
}

impl Sampler {
    fn new() -> Sampler {
        Sampler {
            stride: 1,
            latencies_ns: Vec::with_capacity(1024),
        }
    }

    fn wants(&self, op: u64) -> bool {
        op % self.stride == 0
    }

    fn record(&mut self, latency_ns: u64) {
        if self.latencies_ns.len() == LATENCY_SAMPLES_PER_THREAD_MAX {
            let mut i = 0;
            self.latencies_ns.retain(|_| {
                i += 1;
                i % 2 == 1
            });
            self.stride *= 2;
        }
        self.latencies_ns.push(latency_ns);
        assert!(self.latencies_ns.len() <= LATENCY_SAMPLES_PER_THREAD_MAX);
    }
}

/// Runs `threads` threads until `limit`. Thread `t` first calls `prepare(t)` for its
/// worker, then, once all are ready, calls the worker with 0, 1, 2, ... The deadline is
/// checked before every `check_every`-th operation (a clock read costs about 2% of a
/// buffered MetaDB put; an operation that waits for the device checks every time).
pub fn timed<W: FnMut(u64) -> Result<(), String>>(
    threads: usize,
    limit: Limit,
    check_every: u64,
    prepare: impl Fn(usize) -> Result<W, String> + Sync,
) -> Result<Run, String> {
    run_threads(threads, limit, check_every, prepare, false).map(|(run, _)| run)
}

/// [`timed`], also sampling operations' latencies (ns, unsorted, of all threads).
pub fn timed_sampled<W, P>(
    threads: usize,
    limit: Limit,
    check_every: u64,
    prepare: P,
) -> Result<(Run, Vec<u64>), String>
where
    P: Fn(usize) -> Result<W, String> + Sync,
    W: FnMut(u64) -> Result<(), String>,
{
    run_threads(threads, limit, check_every, prepare, true)
}

fn run_threads<W, P>(
    threads: usize,
    limit: Limit,
    check_every: u64,
    prepare: P,
    sample: bool,
) -> Result<(Run, Vec<u64>), String>
where
    P: Fn(usize) -> Result<W, String> + Sync,
    W: FnMut(u64) -> Result<(), String>,
{
    assert!(threads >= 1, "at least one thread");
    assert!(check_every >= 1, "the deadline is checked");
    let barrier = Barrier::new(threads + 1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|thread| {
                let barrier = &barrier;
                let prepare = &prepare;
                scope.spawn(move || {
                    let worker = prepare(thread);
                    barrier.wait();
                    worker_loop(worker?, limit, check_every, sample.then(Sampler::new))
                })
            })
            .collect();
        barrier.wait();
        let mut run = Run {
            ops: 0,
            elapsed_ns: 0,
            capped_threads: 0,
        };
        let mut span: Option<(Instant, Instant)> = None;
        let mut first_error = None;
        let mut latencies_ns = Vec::new();
        for handle in handles {
            match handle.join().expect("a worker thread panicked") {
                Ok(done) => {
                    latencies_ns.extend(done.latencies_ns);
                    run.ops += done.ops;
                    run.capped_threads += usize::from(done.capped);
                    span = Some(match span {
                        None => (done.started, done.ended),
                        Some((s, e)) => (s.min(done.started), e.max(done.ended)),
                    });
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match (first_error, span) {
            (Some(e), _) => Err(e),
            (None, Some((started, ended))) => {
                run.elapsed_ns = ended.duration_since(started).as_nanos() as u64;
                Ok((run, latencies_ns))
            }
            (None, None) => unreachable!("at least one thread ran"),
        }
    })
}

fn worker_loop<W>(
    mut worker: W,
    limit: Limit,
    check_every: u64,
    mut sampler: Option<Sampler>,
) -> Result<ThreadOps, String>
where
    W: FnMut(u64) -> Result<(), String>,
{
    let started = Instant::now();
    let deadline = started + limit.duration;
    let cap = limit.ops_per_thread.unwrap_or(u64::MAX);
    let mut done = 0;
    while done < cap {
        if done % check_every == 0 && Instant::now() >= deadline {
            break;
        }
        match sampler.as_mut().filter(|s| s.wants(done)) {
            Some(sampler) => {
                let op_started = Instant::now();
                worker(done)?;
                sampler.record(op_started.elapsed().as_nanos() as u64);
            }
            None => worker(done)?,
        }
        done += 1;
    }
    Ok(ThreadOps {
        ops: done,
        capped: done == cap,
        started,
        ended: Instant::now(),
        latencies_ns: sampler.map(|s| s.latencies_ns).unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[test]
    fn threads_stop_at_the_cap_and_count_every_operation() {
        let calls = AtomicU64::new(0);
        let limit = Limit {
            duration: Duration::from_secs(60),
            ops_per_thread: Some(500),
        };
        let run = timed(4, limit, 16, |_| {
            Ok(|_: u64| {
                calls.fetch_add(1, Ordering::Relaxed);
                Ok(())
            })
        })
        .unwrap();
        assert_eq!(run.ops, 2000);
        assert_eq!(run.capped_threads, 4);
        assert_eq!(calls.load(Ordering::Relaxed), 2000);
        assert!(run.ops_per_sec() > 0.0);
    }

    #[test]
    fn threads_stop_at_the_deadline() {
        let limit = Limit {
            duration: Duration::from_millis(20),
            ops_per_thread: None,
        };
        let run = timed(2, limit, 1, |_| {
            Ok(|_: u64| {
                std::thread::sleep(Duration::from_millis(1));
                Ok(())
            })
        })
        .unwrap();
        assert!(run.ops > 0 && run.capped_threads == 0);
        assert!(run.elapsed_ns >= 20_000_000);
    }

    #[test]
    fn latency_samples_stay_bounded_and_spread() {
        let limit = Limit {
            duration: Duration::from_secs(60),
            ops_per_thread: Some(3 * LATENCY_SAMPLES_PER_THREAD_MAX as u64),
        };
        let (run, latencies) = timed_sampled(2, limit, 64, |_| Ok(|_: u64| Ok(()))).unwrap();
        assert_eq!(run.ops, 6 * LATENCY_SAMPLES_PER_THREAD_MAX as u64);
        // 3x the bound: thinned twice, to stride 4, so 3/4 of the bound per thread.
        assert_eq!(latencies.len(), 2 * 3 * LATENCY_SAMPLES_PER_THREAD_MAX / 4);
        let few = Limit {
            duration: Duration::from_secs(60),
            ops_per_thread: Some(10),
        };
        let (_, latencies) = timed_sampled(3, few, 1, |_| {
            Ok(|_: u64| {
                std::thread::sleep(Duration::from_micros(50));
                Ok(())
            })
        })
        .unwrap();
        assert_eq!(latencies.len(), 30, "every operation sampled");
        assert!(latencies.iter().all(|&l| l >= 50_000));
    }

    #[test]
    fn the_first_error_is_the_result() {
        let limit = Limit {
            duration: Duration::from_secs(60),
            ops_per_thread: Some(10),
        };
        let failing = timed(2, limit, 1, |t| {
            Ok(move |i: u64| {
                if t == 1 && i == 3 {
                    Err("broken".to_string())
                } else {
                    Ok(())
                }
            })
        });
        assert_eq!(failing.unwrap_err(), "broken");
        let unprepared = timed(2, limit, 1, |t| {
            if t == 0 {
                Err("no file".to_string())
            } else {
                Ok(|_: u64| Ok(()))
            }
        });
        assert_eq!(unprepared.unwrap_err(), "no file");
    }
}
