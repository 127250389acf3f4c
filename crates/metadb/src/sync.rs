//! Synchronisation primitives of the lock-free parts, swappable for shuttle's so that
//! `cargo test -p metadb --features shuttle` explores their interleavings.

#[cfg(feature = "shuttle")]
pub use shuttle::sync::atomic::{AtomicBool, AtomicU64, Ordering};
#[cfg(feature = "shuttle")]
pub use shuttle::sync::{Condvar, Mutex};
#[cfg(feature = "shuttle")]
pub use shuttle::thread::yield_now;

#[cfg(not(feature = "shuttle"))]
pub use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
#[cfg(not(feature = "shuttle"))]
pub use std::sync::{Condvar, Mutex};
#[cfg(not(feature = "shuttle"))]
pub use std::thread::yield_now;
