//! `augefs bench aged` in small: workloads on a fresh augefs, aging to a fill level with
//! churn, the workloads again; its usage errors; no bench file is left behind.

mod common;

use common::augefs_bench;
use testsupport::process::{fails_with, ok, s, stdout};
use testsupport::scratch;

#[test]
fn bench_aged_runs_the_workloads_fresh_and_aged_on_augefs() {
    let root = scratch!();
    let dir = root.path().join("bench");
    let out = ok(augefs_bench(&[
        "aged",
        "--dir",
        s(&dir),
        "--image-size",
        "512M",
        "--fill",
        "60",
        "--churn",
        "0.25",
        "--targets",
        "augefs",
        "--workload",
        "create+fsync,append,randread",
        "--seconds",
        "0.2",
        "--runs",
        "1",
        "--json",
    ]));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON on stdout");
    let augefs = &json["targets"][0];
    assert_eq!(augefs["target"], "augefs", "{json}");
    for phase in ["fresh_ops_per_s", "aged_ops_per_s"] {
        let rows = augefs[phase].as_array().expect(phase);
        assert_eq!(rows.len(), 3, "{phase}: {json}");
        assert!(
            rows.iter().all(|r| r[0].as_f64().is_some_and(|v| v > 0.0)),
            "{phase}: {json}"
        );
    }
    // Filled to about 60% of the file system (statfs's figure moves with write-back,
    // checkpoints and the reaper, and files are up to 4 MiB), after a quarter image of
    // churn beyond that.
    let used = augefs["aged_used_percent"].as_f64().expect("used");
    assert!((45.0..80.0).contains(&used), "{json}");
    let written = augefs["aged_written_bytes"].as_u64().expect("written");
    assert!(written >= (512 << 20) / 4 + (512 << 20) / 4, "{json}");
    assert!(json["goals"][0]["met"].is_boolean(), "{json}");
    assert_eq!(
        json["goals"][1]["met"],
        serde_json::Value::Null,
        "no kernel file system: {json}"
    );
    assert!(!dir.exists(), "bench files left behind");
}

#[test]
fn bench_aged_bad_flags_are_usage_errors() {
    let root = scratch!();
    let dir = root.path().join("bench");
    let d = s(&dir);
    for (args, message) in [
        (
            vec!["aged", "--dir", d, "--fill", "99"],
            "--fill must be a percentage in 10..=95",
        ),
        (
            vec!["aged", "--dir", d, "--workload", "randread-cold"],
            "cold runs need the caches dropped",
        ),
        (
            vec!["aged", "--dir", d, "--targets", "zfs"],
            "unknown target \"zfs\"",
        ),
        (
            vec!["aged", "--dir", d, "--image-size", "256M"],
            "--image-size must be at least 512 MiB",
        ),
    ] {
        fails_with(augefs_bench(&args), message);
    }
    assert!(!dir.exists(), "nothing made for a usage error");
}
