//! Device flushes shared by concurrent synchronous writers, and the WAL's health.
//!
//! [`FlushCombiner`]: a flush covers the writes that completed before it was submitted
//! (device/src/lib.rs). A writer whose write has completed needs *some* flush submitted
//! after that moment; if one is in flight that started earlier it waits for it and then
//! needs the next one, which it shares with everyone else waiting. One flush is in flight
//! at a time, so under load each flush serves every writer that completed during the
//! previous one (group commit).
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
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};

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
    /// The last ticket whose flush (and every earlier one) returned Ok.
    done: u64,
    in_flight: bool,
}

#[derive(Debug, Default)]
pub(super) struct FlushCombiner {
    state: Mutex<FlushState>,
    finished: Condvar,
}

impl FlushCombiner {
    fn lock(&self) -> MutexGuard<'_, FlushState> {
        self.state.lock().expect("WAL flush lock poisoned by a panic")
    }

    /// Returns once a device flush submitted after this call began has succeeded: every
    /// write that completed before the call is durable.
    pub fn flush(&self, device: &Device, health: &Health) -> Result<(), MetaDbError> {
        let mut state = self.lock();
        let need = state.started + 1;
        loop {
            health.check()?;
            if state.done >= need {
                return Ok(());
            }
            if state.in_flight {
                state = self.finished.wait(state).expect("WAL flush lock poisoned by a panic");
                continue;
            }
            state.started += 1;
            let ticket = state.started;
            assert!(ticket >= need, "a flush started before the caller's write completed");
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
    use std::sync::Arc;

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
        let flushes = device.counters().snapshot().cause(IoCause::Wal).flush_ops;
        assert!((1..=400).contains(&flushes), "{flushes} flushes for 400 calls");
        health.check().unwrap();
    }
}
