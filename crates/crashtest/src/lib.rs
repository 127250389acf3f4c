//! The augefs crash-test harness (issue 5 item 8; docs/TESTING.md "Crash workloads"):
//! workloads in a small text format run on the recording device; every crash state
//! (each persistence point, in-flight subsets and torn writes) is recovered and checked
//! against what docs/SEMANTICS.md promises.
//!
//! - [`workload`]: the text format.
//! - [`run`]: running a workload and recording the history and the promises.
//! - [`snapshot`]: the tree as the checker compares it.
//! - [`check`]: the checks of each crash state.
//! - [`generate`]: the generated one- and two-operation sequences.

pub mod check;
pub mod generate;
pub mod run;
pub mod snapshot;
pub mod workload;

pub use check::{check_workload, Report};
pub use workload::Workload;
