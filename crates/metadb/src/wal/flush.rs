//! Device flushes shared by concurrent synchronous writers, and the WAL's health.
//!
//! [`FlushCombiner`]: a flush covers the writes that completed before it was submitted
//! (device/src/lib.rs). A writer whose write has completed needs *some* flush submitted
//! after that moment; if one is in flight that started earlier it waits for it and then
//! needs the next one, which it shares with everyone else waiting. One flush is in flight
//! at a time, so under load each flush serves every writer that completed during the
//! previous one (group commit).
//!
//! A writer announces itself ([`FlushCombiner::begin_write`]) before its device write. A
//! flush about to start while others are still writing waits for them, at most
//! [`LINGER`], so that one flush covers their writes too: with two threads alternating
//! write and flush, each flush would otherwise cover one write, and two threads would do
//! no better than one.
//!
//! Invariants:
//! - Tickets number flushes in submission order; `done >= t` means flush `t` and every
//!   earlier one returned Ok.
//! - A caller's `need` is read after its write completed, so flush `need` was submitted
//!   after that write completed and covers it.
//! - After any failed write or flush the WAL is broken ([`Health`]): every later call
//!   fails with `ReadOnly` and no retried flush is trusted (docs/DESIGN.md §7).

use crate::error::MetaDbError;
use device::{Device, IoCause};
use platform::Signal;
use std::sync::{Mutex, MutexGuard, OnceLock};

/// Whether the WAL may still be written; once broken, it stays broken until reopened.
#[derive(Debug, Default)]
pub(super) struct Health {
    broken: OnceLock<String>,
}

impl Health {
    pub fn check(&self) -> Result<(), MetaDbError> {
        match self.broken.get() {
            None => Ok(()),
            Some(reason) => Err(MetaDbError::ReadOnly(reason.clone())),
        }
    }

    /// Breaks the WAL because of `error`, and returns it for the caller to report.
    pub fn fail(&self, error: MetaDbError) -> MetaDbError {
        let _ = self.broken.set(format!("WAL: {error}"));
        error
    }
}

/// How long a flush about to start waits for writers still writing (a little more than
/// a small write takes on an SSD). Real time: a performance heuristic, not semantics.
const LINGER: std::time::Duration = std::time::Duration::from_micros(200);

#[derive(Debug, Default)]
struct FlushState {
    /// Tickets handed out (the last flush submitted).
    started: u64,
    /// The last ticket whose flush (and every earlier one) returned Ok.
    done: u64,
    in_flight: bool,
    /// Writers between `begin_write` and the end of their [`Writing`].
    writers: usize,
}

/// A synchronous writer's announcement that its device write is under way. [`done`]
/// when the write has completed and the writer goes on to flush; dropping it (nothing to
/// flush, or an error) withdraws it and wakes lingering flushes.
///
/// [`done`]: Writing::done
#[derive(Debug)]
pub(super) struct Writing<'a> {
    combiner: &'a FlushCombiner,
    counted: bool,
}

/// The first flush ticket that covers a write: any flush submitted after the write
/// completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct FlushNeed(u64);

impl Writing<'_> {
    /// The write has completed and the caller flushes next: withdraws the
    /// announcement and returns the first ticket that covers the write (read in the same
    /// critical section as the withdrawal). Lingering flushes are not woken: the caller,
    /// the last writer they wait for or not, starts the flush itself when it finds none
    /// in flight, which saves a thread wake-up on the path of every shared flush; the
    /// lingerers wake when that flush completes.
    pub fn done(mut self) -> FlushNeed {
        let mut state = self.combiner.lock();
        let need = FlushNeed(state.started + 1);
        self.withdraw(&mut state);
        need
    }

    fn withdraw(&mut self, state: &mut FlushState) {
        assert!(state.writers > 0, "writer count underflow");
        state.writers -= 1;
        self.counted = false;
    }
}

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        if self.counted {
            let combiner = self.combiner;
            let mut state = combiner.lock();
            self.withdraw(&mut state);
            drop(state);
            combiner.finished.notify_all();
        }
    }
}

#[derive(Debug)]
pub(super) struct FlushCombiner {
    state: Mutex<FlushState>,
    finished: Signal,
    /// [`LINGER`] (tests lengthen it to make sharing deterministic).
    linger: std::time::Duration,
}

impl Default for FlushCombiner {
    fn default() -> Self {
        FlushCombiner {
            state: Mutex::default(),
            finished: Signal::new(),
            linger: LINGER,
        }
    }
}

impl FlushCombiner {
    fn lock(&self) -> MutexGuard<'_, FlushState> {
        self.state
            .lock()
            .expect("WAL flush lock poisoned by a panic")
    }

    /// Announces a write that a flush will follow (see the module documentation).
    pub fn begin_write(&self) -> Writing<'_> {
        self.lock().writers += 1;
        Writing {
            combiner: self,
            counted: true,
        }
    }

    /// Returns once a device flush submitted after this call began has succeeded: every
    /// write that completed before the call is durable.
    pub fn flush(&self, device: &Device, health: &Health) -> Result<(), MetaDbError> {
        let need = FlushNeed(self.lock().started + 1);
        self.flush_covering(need, device, health)
    }

    /// Returns once flush ticket `need` (or a later one) has succeeded.
    pub fn flush_covering(
        &self,
        need: FlushNeed,
        device: &Device,
        health: &Health,
    ) -> Result<(), MetaDbError> {
        let FlushNeed(need) = need;
        let mut state = self.lock();
        let mut linger_until: Option<std::time::Instant> = None;
        loop {
            health.check()?;
            if state.done >= need {
                return Ok(());
            }
            if state.in_flight {
                state = self
                    .finished
                    .wait(state)
                    .expect("WAL flush lock poisoned by a panic");
                continue;
            }
            if state.writers > 0 {
                let until =
                    *linger_until.get_or_insert_with(|| std::time::Instant::now() + self.linger);
                let left = until.saturating_duration_since(std::time::Instant::now());
                if !left.is_zero() {
                    state = self
                        .finished
                        .wait_timeout(state, left)
                        .expect("WAL flush lock poisoned by a panic")
                        .0;
                    continue;
                }
            }
            state.started += 1;
            let ticket = state.started;
            assert!(
                ticket >= need,
                "a flush started before the caller's write completed"
            );
            state.in_flight = true;
            drop(state);
            let result = device.flush(IoCause::Wal);
            state = self.lock();
            state.in_flight = false;
            match result {
                Ok(()) => {
                    assert_eq!(state.done + 1, ticket, "flushes complete in ticket order");
                    state.done = ticket;
                }
                Err(e) => {
                    let error = health.fail(e.into());
                    self.finished.notify_all();
                    return Err(error);
                }
            }
            self.finished.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use device::memory::MemoryBackend;
    use device::{Backend, BackendQueue, DeviceError, DeviceInfo, IoCompletion, IoOp, IoRequest};
    use std::sync::{Arc, Condvar};

    /// Holds flushes while closed.
    #[derive(Debug, Default)]
    struct Gate {
        closed: Mutex<bool>,
        opened: Condvar,
    }

    impl Gate {
        fn open(&self) {
            *self.closed.lock().unwrap() = false;
            self.opened.notify_all();
        }

        fn pass(&self) {
            let mut closed = self.closed.lock().unwrap();
            while *closed {
                closed = self.opened.wait(closed).unwrap();
            }
        }
    }

    /// A memory device whose flushes wait at a gate.
    #[derive(Debug)]
    struct GatedFlushes {
        inner: MemoryBackend,
        gate: Arc<Gate>,
    }

    struct GatedQueue<'a> {
        inner: Box<dyn BackendQueue + 'a>,
        backend: &'a GatedFlushes,
        flush_pushed: bool,
    }

    impl Backend for GatedFlushes {
        fn info(&self) -> &DeviceInfo {
            self.inner.info()
        }

        fn queue(&self) -> Result<Box<dyn BackendQueue + '_>, DeviceError> {
            Ok(Box::new(GatedQueue {
                inner: self.inner.queue()?,
                backend: self,
                flush_pushed: false,
            }))
        }
    }

    impl BackendQueue for GatedQueue<'_> {
        fn depth(&self) -> usize {
            self.inner.depth()
        }

        fn push(&mut self, request: IoRequest) -> Result<(), IoRequest> {
            self.flush_pushed |= matches!(request.op, IoOp::Flush);
            self.inner.push(request)
        }

        fn submit(&mut self, min_complete: usize) -> Result<(), DeviceError> {
            if std::mem::take(&mut self.flush_pushed) {
                self.backend.gate.pass();
            }
            self.inner.submit(min_complete)
        }

        fn pop(&mut self) -> Option<IoCompletion> {
            self.inner.pop()
        }

        fn outstanding(&self) -> usize {
            self.inner.outstanding()
        }
    }

    fn wal_flushes(device: &Device) -> u64 {
        device.counters().snapshot().cause(IoCause::Wal).flush_ops
    }

    #[test]
    fn a_flush_in_flight_before_the_call_does_not_count() {
        let gate = Arc::new(Gate {
            closed: Mutex::new(true),
            opened: Condvar::new(),
        });
        let backend = GatedFlushes {
            inner: MemoryBackend::new(1 << 20, 512),
            gate: gate.clone(),
        };
        let device = Arc::new(Device::new(Box::new(backend)));
        let combiner = Arc::new(FlushCombiner::default());
        let health = Arc::new(Health::default());
        let spawn = || {
            let (device, combiner, health) = (device.clone(), combiner.clone(), health.clone());
            std::thread::spawn(move || combiner.flush(&device, &health).unwrap())
        };
        // A's flush is submitted and held at the device.
        let a = spawn();
        while wal_flushes(&device) == 0 {
            std::thread::yield_now();
        }
        // B's write "completed" after A's flush was submitted: A's flush cannot cover it.
        let b = spawn();
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(wal_flushes(&device), 1, "B waits for the flush in flight");
        gate.open();
        a.join().unwrap();
        b.join().unwrap();
        assert_eq!(
            wal_flushes(&device),
            2,
            "B needed a flush submitted after its call"
        );
        // A third caller with nothing in flight issues its own.
        combiner.flush(&device, &health).unwrap();
        assert_eq!(wal_flushes(&device), 3);
    }

    #[test]
    fn a_flush_waits_for_writers_still_writing_and_covers_them() {
        let device = Arc::new(Device::new(Box::new(MemoryBackend::new(1 << 20, 512))));
        let combiner = Arc::new(FlushCombiner {
            linger: std::time::Duration::from_secs(60),
            ..FlushCombiner::default()
        });
        let health = Arc::new(Health::default());
        let b_writing = combiner.begin_write();
        let a = {
            let (device, combiner, health) = (device.clone(), combiner.clone(), health.clone());
            std::thread::spawn(move || {
                let need = combiner.begin_write().done();
                combiner.flush_covering(need, &device, &health).unwrap();
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(wal_flushes(&device), 0, "A lingers while B writes");
        // B's write completes: A's flush, woken by this, covers it.
        let need = b_writing.done();
        combiner.flush_covering(need, &device, &health).unwrap();
        a.join().unwrap();
        assert_eq!(wal_flushes(&device), 1, "one flush served both writers");
    }

    #[test]
    fn lingering_is_bounded() {
        let device = Arc::new(Device::new(Box::new(MemoryBackend::new(1 << 20, 512))));
        let combiner = FlushCombiner {
            linger: std::time::Duration::from_millis(20),
            ..FlushCombiner::default()
        };
        let health = Health::default();
        let _stuck = combiner.begin_write();
        let started = std::time::Instant::now();
        combiner.flush(&device, &health).unwrap();
        assert!(started.elapsed() >= std::time::Duration::from_millis(20));
        assert_eq!(wal_flushes(&device), 1);
    }

    #[test]
    fn concurrent_callers_share_flushes() {
        let device = Arc::new(Device::new(Box::new(MemoryBackend::new(1 << 20, 512))));
        let combiner = Arc::new(FlushCombiner::default());
        let health = Arc::new(Health::default());
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (device, combiner, health) = (device.clone(), combiner.clone(), health.clone());
                std::thread::spawn(move || {
                    for _ in 0..50 {
                        combiner.flush(&device, &health).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let flushes = wal_flushes(&device);
        assert!(
            (1..=400).contains(&flushes),
            "{flushes} flushes for 400 calls"
        );
        health.check().unwrap();
    }
}
