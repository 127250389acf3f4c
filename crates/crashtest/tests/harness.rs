//! The harness's own checks can fail (docs/TESTING.md §2a): a WAL without device flushes
//! and an fsync that returns before its flush are each reported as a lost promise (the
//! recording device's test-only flush mutations), a step with an unexpected outcome
//! fails its workload, every failure is reported, and every image has room for its
//! workload with any domain count.

use crashtest::{check_workload, check_workload_with, Report, Workload};
use device::recording::{CrashPolicy, FlushMutation};
use device::IoCause;

fn policy() -> CrashPolicy {
    CrashPolicy {
        states_max: usize::MAX,
        ..CrashPolicy::with_seed(5)
    }
}

fn check(text: &str, mutation: FlushMutation) -> Report {
    let w = Workload::parse("w", text).unwrap();
    check_workload_with(&w, &policy(), &|h| h.set_flush_mutation(mutation)).unwrap()
}

fn messages(report: &Report) -> Vec<String> {
    report.failures.iter().map(|f| f.to_string()).collect()
}

/// An fsync'd append, then one more (append-fsync.crash).
const APPEND: &str = "create /log\nbegin\nappend /log 5000\nfsync /log\nappend /log 3000\n";

#[test]
fn a_correct_run_keeps_every_promise() {
    for domains in [1, 3] {
        let text = format!("domains {domains}\n{APPEND}");
        let report = check(&text, FlushMutation::None);
        assert!(report.failures.is_empty(), "{:?}", messages(&report));
        assert!(report.states_checked > 10);
    }
}

#[test]
fn a_wal_without_device_flushes_is_a_lost_promise() {
    let report = check(APPEND, FlushMutation::Skip(IoCause::Wal));
    let lost: Vec<String> = messages(&report)
        .into_iter()
        .filter(|m| m.contains("lost the promise of line 4 (fsync /log)"))
        .collect();
    assert!(!lost.is_empty(), "{:?}", messages(&report));
}

#[test]
fn an_fsync_that_returns_before_its_flush_is_a_lost_promise() {
    let report = check(APPEND, FlushMutation::Late);
    assert!(
        messages(&report)
            .iter()
            .any(|m| m.contains("lost the promise of line 4 (fsync /log)")),
        "{:?}",
        messages(&report)
    );
}

/// Both directions of a directory's fsync: the file's data is not promised (the run
/// passes though some crash states keep an empty file), the entry is (an fsync that
/// returns early loses it).
#[test]
fn a_directory_fsync_promises_its_entries_not_its_files_data() {
    let text = "begin\ncreate /foo\nwrite /foo 0 32K\nfsync /\n";
    let report = check(text, FlushMutation::None);
    assert!(report.failures.is_empty(), "{:?}", messages(&report));
    let report = check(text, FlushMutation::Late);
    assert!(
        messages(&report)
            .iter()
            .any(|m| m.contains("lost the promise of line 4 (fsync /): entry 1/foo is absent")),
        "{:?}",
        messages(&report)
    );
}

#[test]
fn every_failure_is_reported() {
    let report = check(APPEND, FlushMutation::Late);
    let states: std::collections::BTreeSet<_> =
        report.failures.iter().map(|f| f.state.clone()).collect();
    assert!(
        states.len() > 1,
        "failures in several crash states: {:?}",
        messages(&report)
    );
    let grouped = report.grouped();
    assert_eq!(
        grouped.iter().map(|g| g.1.len()).sum::<usize>(),
        report.failures.len(),
        "every failure in a group"
    );
}

#[test]
fn a_step_fails_its_workload_unless_it_expects_the_error() {
    let run = |text: &str| {
        let w = Workload::parse("w", text).unwrap();
        messages(&check_workload(&w, &policy()).unwrap())
    };
    let failing = run("begin\nunlink /missing\nsync\n");
    assert_eq!(
        failing,
        ["line 2 (unlink /missing): ENOENT, expected success"]
    );
    assert!(run("begin\nunlink /missing expect ENOENT\nsync\n").is_empty());
    assert_eq!(
        run("begin\nunlink /missing expect EEXIST\nsync\n"),
        ["line 2 (unlink /missing): ENOENT, expected EEXIST"]
    );
    assert_eq!(
        run("begin\ncreate /a expect EEXIST\nsync\n"),
        ["line 2 (create /a): success, expected EEXIST"]
    );
}

/// 3 MiB of writes and allocations with every domain count: each image has room (64 MiB
/// has none left with 3 domains), so nothing fails with ENOSPC.
#[test]
fn every_image_has_room_for_its_workload() {
    let text = "begin\ncreate /a\nwrite /a 0 1M\nfalloc /a 1M 1M\nwrite /a 2M 1M\nfsync /a\n";
    let mut sizes = Vec::new();
    for domains in 1..=8 {
        let w = Workload::parse("w", text).unwrap().with_domains(domains);
        let report = check_workload(
            &w,
            &CrashPolicy {
                states_max: 16,
                ..policy()
            },
        )
        .unwrap();
        assert!(
            report.failures.is_empty(),
            "{domains}: {:?}",
            messages(&report)
        );
        sizes.push(report.image_bytes >> 20);
    }
    assert!(sizes.windows(2).all(|w| w[0] <= w[1]), "{sizes:?}");
    assert!(sizes[2] > 64, "3 domains need more than 64 MiB: {sizes:?}");
    let writes: String = (0..600)
        .map(|i| format!("write /a {} 1M\n", i << 20))
        .collect();
    let huge = Workload::parse("w", &format!("begin\ncreate /a\n{writes}")).unwrap();
    let e = check_workload(&huge, &policy()).unwrap_err();
    assert!(e.contains("no image has room"), "{e}");
}

/// A chmod of a file with dirty pages rides with their write-back: every crash state
/// keeps the file as it was (old mode and data, or new mode and data), with 1 and 3
/// domains (tests/crash/attrs-of-a-dirty-file.crash; crates/vfs/tests/attr_crash.rs
/// adds times).
#[test]
fn a_chmod_of_a_file_with_dirty_pages_keeps_it_in_a_state_it_had() {
    let text = include_str!("../../../tests/crash/attrs-of-a-dirty-file.crash");
    for domains in [1, 3] {
        let report = check(&format!("domains {domains}\n{text}"), FlushMutation::None);
        assert!(report.failures.is_empty(), "{:?}", messages(&report));
        assert!(report.states_checked > 50);
    }
}
