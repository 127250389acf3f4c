//! The generated crash workloads (docs/TESTING.md §2a "Generated workloads"), at every
//! crash state: every one-operation sequence, and a fixed sample of the two- and
//! three-operation ones (a different sample for each domain count), with 1 and 3
//! domains.
//!
//! `CRASH_SAMPLE_2=K` and `CRASH_SAMPLE_3=K` run every K-th sequence (defaults 32 and
//! 1024); `CRASH_LONG=1` runs all of them (the long mode: `augefs crashtest` of a release
//! build is faster for that); `CRASH_FILTER=substring` narrows. A failure prints the
//! workload in the text format.

use crashtest::generate::{sequence_count, sequences_sampled};
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
        if !report.failures.is_empty() {
            let lines: Vec<String> = report
                .grouped()
                .iter()
                .map(|(m, s)| format!("{}: {m} (crash states: {})", w.name, s.join(", ")))
                .collect();
            failures.push(format!("{}\n--- workload ---\n{w}", lines.join("\n")));
        }
    }
    eprintln!(
        "{count} workloads, {states} crash states in {:.1} s, {} failing",
        started.elapsed().as_secs_f64(),
        failures.len()
    );
    assert!(count > 0, "the filter left nothing");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Every `CRASH_SAMPLE_<len>`-th sequence of `len` operations (`default` unless set;
/// all with `CRASH_LONG=1`), from the `phase`-th on.
fn sample(len: usize, domains: u32, default: usize, phase: usize) -> Vec<Workload> {
    let every = if std::env::var_os("CRASH_LONG").is_some() {
        1
    } else {
        std::env::var(format!("CRASH_SAMPLE_{len}"))
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|&n| n > 0)
            .unwrap_or(default)
    };
    assert!(every <= sequence_count(len));
    sequences_sampled(len, domains, every, phase)
}

#[test]
fn one_operation_sequences_one_domain() {
    run_all(sample(1, 1, 1, 0));
}

#[test]
fn one_operation_sequences_three_domains() {
    run_all(sample(1, 3, 1, 0));
}

#[test]
fn two_operation_sequences_one_domain() {
    run_all(sample(2, 1, 32, 0));
}

#[test]
fn two_operation_sequences_three_domains() {
    run_all(sample(2, 3, 32, 17));
}

#[test]
fn three_operation_sequences_one_domain() {
    run_all(sample(3, 1, 1024, 0));
}

#[test]
fn three_operation_sequences_three_domains() {
    run_all(sample(3, 3, 1024, 511));
}
