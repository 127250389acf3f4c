//! Issue 5's crash coverage: every sequence of one and two operations over a small file
//! set, each followed by fsync, fdatasync or sync, at every crash state.
//!
//! `CRASH_SEQ_LEN=2` (default 1 and 2), `CRASH_DOMAINS=N` and `CRASH_FILTER=substring`
//! narrow or widen a run; a failure prints the workload in the text format.

use crashtest::generate::sequences;
use crashtest::{check_workload, Workload};
use device::recording::CrashPolicy;

fn policy() -> CrashPolicy {
    CrashPolicy {
        states_max: usize::MAX,
        ..CrashPolicy::with_seed(5)
    }
}

fn run_all(workloads: Vec<Workload>) {
    let filter = std::env::var("CRASH_FILTER").unwrap_or_default();
    let started = std::time::Instant::now();
    let (mut states, mut count) = (0, 0);
    let mut failures = Vec::new();
    for w in workloads.iter().filter(|w| w.name.contains(&filter)) {
        let report = check_workload(w, &policy()).unwrap_or_else(|e| panic!("{}: {e}", w.name));
        states += report.states_checked;
        count += 1;
        for f in report.failures {
            failures.push(format!("{f}\n--- workload ---\n{w}"));
        }
    }
    eprintln!(
        "{count} workloads, {states} crash states in {:.1} s, {} failing",
        started.elapsed().as_secs_f64(),
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn one_operation_sequences_one_domain() {
    run_all(sequences(1, 1));
}

/// Every `CRASH_SAMPLE`-th two-operation sequence (default 8, so CI covers an eighth of
/// them, a different eighth for each of the two domain counts; `CRASH_SAMPLE=1` runs all).
fn two_operation_sample(domains: u32, phase: usize) -> Vec<Workload> {
    let every: usize = std::env::var("CRASH_SAMPLE")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(8);
    sequences(2, domains)
        .into_iter()
        .enumerate()
        .filter(|(i, _)| i % every == phase % every)
        .map(|(_, w)| w)
        .collect()
}

#[test]
fn one_operation_sequences_three_domains() {
    run_all(sequences(1, 3));
}

#[test]
fn two_operation_sequences_one_domain() {
    run_all(two_operation_sample(1, 0));
}

#[test]
fn two_operation_sequences_three_domains() {
    run_all(two_operation_sample(3, 3));
}
