//! Injected environment for every augefs layer.
//!
//! Nothing below the tools layer reads the wall clock, draws randomness or decides
//! how IO is accounted on its own: it receives a [`Clock`], a [`Rng`] and counts its
//! IO in [`IoCounters`] by [`IoCause`]. Tests pass a [`ManualClock`] and a seeded
//! [`Rng`], so a run is a pure function of its seed.
//!
//! Invariants:
//! - `Clock::now_ns` never goes backwards for one clock.
//! - `Rng::from_seed(s)` yields the same sequence for the same `s` on every machine.
//! - Every counter is monotonic; snapshots subtract to deltas.
// Library code says why it cannot fail (`expect`) or returns an error; tests may unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod accounting;
pub mod clock;
pub mod memory;
pub mod mountinfo;
pub mod reqstats;
pub mod rng;
pub mod signal;
pub mod units;

pub use accounting::{CauseCounts, IoCause, IoCounters, IoSnapshot};
pub use clock::{Clock, ManualClock, SystemClock};
pub use rng::Rng;
pub use signal::Signal;
