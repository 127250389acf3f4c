//! Device flushes shared by concurrent synchronous writers, and the WAL's health.
//!
//! [`FlushCombiner`]: a flush covers the writes that completed before it was submitted
//! (device/src/lib.rs). A writer whose write has completed takes a [`FlushNeed`]: it needs
//! *some* flush submitted after that moment. If such a flush is in flight it waits for it
//! (sharing it); otherwise it submits its own at once, even while older flushes are in
//! flight, which cannot cover its write. Flushes run concurrently, one per waiting
//! thread at most, and the kernel's block layer merges flushes that overlap in time.
//!
//! Why not one flush at a time: on the development VM (virtio disk; fio, 4 KiB O_DIRECT
//! write + fdatasync, each job on its own) independent flushes scale, 9.0k/s with one job,
//! 12.9-13.9k with two and 17-19k with four, while a combiner that ran one flush at a
//! time, with writers lingering for each other so that one flush covered both, reached
//! 11.6k sync puts/s at two threads (docs/BENCHMARKS.md §3.1).
//!
//! Invariants:
//! - Tickets number flushes in submission order; `best_done >= t` means a flush with
//!   ticket `t` or later returned Ok, so every write that completed before flush `t` was
//!   submitted is durable.
//! - A caller's `need` is read after its write completed, so any flush with ticket
//!   `need` or later was submitted after that write completed and covers it.
//! - After any failed write or flush the WAL is broken ([`Health`]): every later call
//!   fails with `ReadOnly` and no retried flush is trusted (docs/DESIGN.md §3).

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

#[derive(Debug, Default)]
struct FlushState {
    /// Tickets handed out (the last flush submitted).
    started: u64,
    /// The highest ticket whose flush returned Ok.
    best_done: u64,
    /// Tickets of the flushes in flight.
    in_flight: Vec<u64>,
}

/// The first flush ticket that covers a write: any flush submitted after the write
/// completed ([`FlushCombiner::need`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct FlushNeed(u64);

#[derive(Debug)]
pub(super) struct FlushCombiner {
    state: Mutex<FlushState>,
    finished: Signal,
}

impl Default for FlushCombiner {
    fn default() -> Self {
        FlushCombiner {
            state: Mutex::default(),
            finished: Signal::new(),
        }
    }
}

impl FlushCombiner {
    fn lock(&self) -> MutexGuard<'_, FlushState> {
        self.state
            .lock()
            .expect("WAL flush lock poisoned by a panic")
    }

    /// The flushes that cover every write completed before this call.
    pub fn need(&self) -> FlushNeed {
        FlushNeed(self.lock().started + 1)
    }

    /// Returns once a device flush submitted after this call began has succeeded: every
    /// write that completed before the call is durable.
    pub fn flush(&self, device: &Device, health: &Health) -> Result<(), MetaDbError> {
        let need = self.need();
        self.flush_covering(need, device, health)
    }

    /// Returns once a flush with ticket `need` or later has succeeded.
    pub fn flush_covering(
        &self,
        need: FlushNeed,
        device: &Device,
        health: &Health,
    ) -> Result<(), MetaDbError> {
        let FlushNeed(need) = need;
        let mut state = self.lock();
        loop {
            health.check()?;
            if state.best_done >= need {
                return Ok(());
            }
            if state.in_flight.iter().any(|&t| t >= need) {
                state = self
                    .finished
                    .wait(state)
                    .expect("WAL flush lock poisoned by a panic");
                continue;
            }
            state.started += 1;
            let ticket = state.started;
            assert!(
                ticket >= need,
                "a flush started before the caller's write completed"
            );
            state.in_flight.push(ticket);
            drop(state);
            let result = device.flush(IoCause::Wal);
            state = self.lock();
            state.in_flight.retain(|&t| t != ticket);
            let outcome = match result {
                Ok(()) => {
                    state.best_done = state.best_done.max(ticket);
                    Ok(())
                }
                Err(e) => Err(health.fail(e.into())),
            };
            drop(state);
            self.finished.notify_all();
            return outcome;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use device::memory::MemoryBackend;
    use device::recording::{FaultPlan, RecordingBackend};
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

    /// A device whose flushes wait at a gate.
    #[derive(Debug)]
    struct GatedFlushes {
        inner: Box<dyn Backend>,
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

    fn gated() -> (Arc<Gate>, Arc<Device>) {
        gated_over(Box::new(MemoryBackend::new(1 << 20, 512)))
    }

    fn gated_over(inner: Box<dyn Backend>) -> (Arc<Gate>, Arc<Device>) {
        let gate = Arc::new(Gate {
            closed: Mutex::new(true),
            opened: Condvar::new(),
        });
        let backend = GatedFlushes {
            inner,
            gate: gate.clone(),
        };
        (gate, Arc::new(Device::new(Box::new(backend))))
    }

    fn wait_for_flushes(device: &Device, count: u64) {
        while wal_flushes(device) < count {
            std::thread::yield_now();
        }
    }

    #[test]
    fn a_flush_in_flight_before_the_call_does_not_count_and_a_new_one_starts_at_once() {
        let (gate, device) = gated();
        let combiner = Arc::new(FlushCombiner::default());
        let health = Arc::new(Health::default());
        let spawn = || {
            let (device, combiner, health) = (device.clone(), combiner.clone(), health.clone());
            std::thread::spawn(move || combiner.flush(&device, &health).unwrap())
        };
        // A's flush is submitted and held at the device.
        let a = spawn();
        wait_for_flushes(&device, 1);
        // B's write "completed" after A's flush was submitted: A's flush cannot cover
        // it, and B does not wait for it to submit its own.
        let b = spawn();
        wait_for_flushes(&device, 2);
        gate.open();
        a.join().unwrap();
        b.join().unwrap();
        assert_eq!(wal_flushes(&device), 2);
        // A third caller with nothing in flight issues its own.
        combiner.flush(&device, &health).unwrap();
        assert_eq!(wal_flushes(&device), 3);
    }

    #[test]
    fn a_writer_shares_a_flush_submitted_after_its_write_completed() {
        let (gate, device) = gated();
        let combiner = Arc::new(FlushCombiner::default());
        let health = Arc::new(Health::default());
        // B's write has completed.
        let need = combiner.need();
        // A's flush is submitted after that, and held at the device.
        let a = {
            let (device, combiner, health) = (device.clone(), combiner.clone(), health.clone());
            std::thread::spawn(move || combiner.flush(&device, &health).unwrap())
        };
        wait_for_flushes(&device, 1);
        let b = {
            let (device, combiner, health) = (device.clone(), combiner.clone(), health.clone());
            std::thread::spawn(move || combiner.flush_covering(need, &device, &health).unwrap())
        };
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(wal_flushes(&device), 1, "B waits for A's flush");
        assert!(!b.is_finished(), "B returns only when A's flush has");
        gate.open();
        a.join().unwrap();
        b.join().unwrap();
        assert_eq!(wal_flushes(&device), 1, "one flush served both");
    }

    #[test]
    fn a_failed_flush_fails_the_writers_sharing_it_and_every_later_call() {
        let (recording, handle) = RecordingBackend::new(vec![0; 1 << 20], 512);
        handle.set_fault(FaultPlan::FailFlush { nth: 1 });
        let (gate, device) = gated_over(Box::new(recording));
        let combiner = Arc::new(FlushCombiner::default());
        let health = Arc::new(Health::default());
        // B's write has completed; A's flush, submitted after it, will fail.
        let need = combiner.need();
        let a = {
            let (device, combiner, health) = (device.clone(), combiner.clone(), health.clone());
            std::thread::spawn(move || combiner.flush(&device, &health))
        };
        wait_for_flushes(&device, 1);
        let b = {
            let (device, combiner, health) = (device.clone(), combiner.clone(), health.clone());
            std::thread::spawn(move || combiner.flush_covering(need, &device, &health))
        };
        std::thread::sleep(std::time::Duration::from_millis(50));
        gate.open();
        match a.join().unwrap() {
            Err(MetaDbError::Device(DeviceError::Injected { op, .. })) => assert_eq!(op, "flush"),
            other => panic!("A: expected the injected flush failure, got {other:?}"),
        }
        assert!(
            matches!(b.join().unwrap(), Err(MetaDbError::ReadOnly(_))),
            "B shared the failed flush"
        );
        assert!(matches!(
            combiner.flush(&device, &health),
            Err(MetaDbError::ReadOnly(_))
        ));
        assert_eq!(wal_flushes(&device), 1, "no flush is tried after a failure");
    }

    #[test]
    fn concurrent_callers_all_succeed_with_at_most_a_flush_each() {
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
