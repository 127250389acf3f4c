//! The augefs crash-test harness (docs/TESTING.md §2a "Crash workloads"): workloads in a
//! small text format run on the recording device; every crash state (each persistence
//! point, in-flight subsets and torn writes) is recovered and checked against what
//! docs/SEMANTICS.md promises.
//!
//! - [`workload`]: the text format.
//! - [`run`]: running a workload (on an image with room for it) and recording the
//!   history: trees, outcomes, write-backs and promises.
//! - `apply`: one step on a mounted file system, and what a step promises.
//! - [`snapshot`]: the tree as the checker compares it.
//! - [`judge`]: the rules one recovered tree must keep.
//! - [`check`]: every crash state of a run, and each step's outcome.
//! - [`generate`], [`model`]: the generated sequences and the namespace model that
//!   gives each step its expected outcome.
// Library code says why it cannot fail (`expect`) or returns an error; tests may unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

mod apply;
pub mod check;
pub mod generate;
pub mod judge;
pub mod model;
pub mod run;
pub mod snapshot;
pub mod workload;

pub use apply::{pattern, Scope, WrittenBack};
pub use check::{check_workload, check_workload_with, Failure, Report};
pub use workload::Workload;
