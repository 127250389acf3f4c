//! Clocks: the monotonic time source every layer receives instead of `Instant::now()`.
//!
//! - [`SystemClock`] reads `CLOCK_MONOTONIC` (through `std::time::Instant`) and the
//!   wall clock for timestamps that are stored on disk.
//! - [`ManualClock`] only moves when a test advances it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// A source of time. `now_ns` is monotonic; `wall_ns` is nanoseconds since the Unix epoch
/// (used for file timestamps and the superblock's creation time).
pub trait Clock: Send + Sync + std::fmt::Debug {
    fn now_ns(&self) -> u64;
    fn wall_ns(&self) -> u64;
}

/// The real clock.
#[derive(Debug)]
pub struct SystemClock {
    origin: Instant,
}

impl SystemClock {
    pub fn new() -> Self {
        Self {
            origin: Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    fn now_ns(&self) -> u64 {
        // u64 nanoseconds overflow after 584 years of uptime.
        self.origin.elapsed().as_nanos() as u64
    }

    fn wall_ns(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0)
    }
}

/// A clock that moves only when told to; both readings advance together.
#[derive(Debug, Default)]
pub struct ManualClock {
    now_ns: AtomicU64,
}

impl ManualClock {
    pub fn new(start_ns: u64) -> Self {
        Self {
            now_ns: AtomicU64::new(start_ns),
        }
    }

    pub fn advance_ns(&self, delta_ns: u64) {
        self.now_ns.fetch_add(delta_ns, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ns(&self) -> u64 {
        self.now_ns.load(Ordering::SeqCst)
    }

    fn wall_ns(&self) -> u64 {
        self.now_ns()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_clock_is_monotonic() {
        let clock = SystemClock::new();
        let a = clock.now_ns();
        let b = clock.now_ns();
        assert!(b >= a);
        assert!(clock.wall_ns() > 1_600_000_000 * 1_000_000_000);
    }

    #[test]
    fn manual_clock_moves_only_when_advanced() {
        let clock = ManualClock::new(5);
        assert_eq!(clock.now_ns(), 5);
        clock.advance_ns(10);
        assert_eq!(clock.now_ns(), 15);
        assert_eq!(clock.wall_ns(), 15);
    }
}
