//! `augefs bench files` in small: creates by window, a cold remount, random stats and
//! checked reads on augefs; its usage errors; no bench file is left behind.

mod common;

use common::augefs_bench;
use testsupport::process::{fails_with, ok, s, stdout};
use testsupport::scratch;

#[test]
fn bench_files_creates_remounts_and_looks_up_on_augefs() {
    let root = scratch!();
    let dir = root.path().join("bench");
    let out = ok(augefs_bench(&[
        "files",
        "--dir",
        s(&dir),
        "--files",
        "20K",
        "--window",
        "5K",
        "--lookups",
        "2K",
        "--targets",
        "augefs",
        "--image-size",
        "512M",
        "--json",
    ]));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON on stdout");
    let augefs = &json["targets"][0];
    assert_eq!(augefs["target"], "augefs", "{json}");
    let windows = augefs["create_windows_per_s"].as_array().expect("windows");
    assert_eq!(windows.len(), 4, "20K files in windows of 5K: {json}");
    assert!(
        windows.iter().all(|w| w.as_f64().is_some_and(|r| r > 0.0)),
        "{json}"
    );
    for figure in [
        "mount_ns",
        "cold_stats_per_s",
        "cold_reads_per_s",
        "used_bytes",
    ] {
        assert!(
            augefs[figure].as_f64().is_some_and(|v| v > 0.0),
            "{figure}: {json}"
        );
    }
    // 2,000 files with 4 KiB of data at least.
    assert!(
        augefs["used_bytes"].as_u64().unwrap() >= 2_000 * 4096,
        "{json}"
    );
    let goals = json["goals"].as_array().expect("goals");
    assert!(
        goals[0]["met"].is_boolean(),
        "the window goal is judged: {json}"
    );
    assert_eq!(goals[1]["met"], serde_json::Value::Null, "no ext4: {json}");
    assert!(!dir.exists(), "bench files left behind");
}

#[test]
fn bench_files_bad_flags_are_usage_errors() {
    let root = scratch!();
    let dir = root.path().join("bench");
    let d = s(&dir);
    for (args, message) in [
        (
            vec!["files", "--dir", d, "--files", "1500"],
            "--files must be a positive multiple of 1000",
        ),
        (
            vec!["files", "--dir", d, "--files", "10K", "--window", "20K"],
            "--window must be in",
        ),
        (
            vec!["files", "--dir", d, "--targets", "augefs,zfs"],
            "unknown target \"zfs\"",
        ),
        (
            vec!["files", "--dir", d, "--lookups", "0"],
            "--lookups and --data-every must be positive",
        ),
    ] {
        fails_with(augefs_bench(&args), message);
    }
    assert!(!dir.exists(), "nothing made for a usage error");
}
