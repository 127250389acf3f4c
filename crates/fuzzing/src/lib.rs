//! Fuzzing of every augefs decoder of bytes read from a device or a PMR (STYLE.md: "a
//! fuzz target per decoder"; docs/TESTING.md §1b).
//!
//! - [`targets`]: one [`driver::Target`] per decoder: valid encodings to start from, a
//!   reseal that recomputes checksums after a mutation, and a check that runs the
//!   decoder as the code that reads the device runs it and asserts the round trip of
//!   whatever decodes. A panic on any input is a bug: bad bytes must come back as a
//!   typed corruption error.
//! - [`mutate`]: seeded, structure-blind mutations; [`driver`]: the loop, budgets
//!   (`FUZZ_CASES`, `FUZZ_SECONDS`, `FUZZ_SEED`) and reports.
//!
//! Invariants:
//! - Runs are deterministic for a seed and a case count, so a failure replays.
//! - Nothing here is shipped: no other crate depends on this one.

pub mod driver;
pub mod mutate;
pub mod targets;

/// Runs target `name` on one input (the cargo-fuzz targets' entry point). Panics if
/// there is no such target.
pub fn fuzz_one(name: &str, data: &[u8]) {
    let target = targets::by_name(name).unwrap_or_else(|| panic!("no fuzz target {name}"));
    let _ = (target.check)(data);
}
