//! `augefs bench apps` in small: real programs on a FUSE mount of augefs, each figure
//! measured and its daemon's CPU counted; its usage errors; nothing left behind.

mod common;

use common::augefs_bench;
use testsupport::process::{fails_with, ok, s, stdout};
use testsupport::scratch;

#[test]
fn bench_apps_runs_real_programs_on_a_fuse_mount() {
    if !std::path::Path::new("/dev/fuse").exists() {
        eprintln!("skipped: no /dev/fuse");
        return;
    }
    let root = scratch!();
    let dir = root.path().join("bench");
    let out = ok(augefs_bench(&[
        "apps",
        "--dir",
        s(&dir),
        "--quick",
        "--runs",
        "1",
        "--targets",
        "fuse",
        "--workloads",
        "untar,stat,rmrf,sqlite,seqread",
        "--image-size",
        "1GiB",
        "--json",
    ]));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON on stdout");
    let rows = json["workloads"].as_array().expect("workloads");
    let names: Vec<&str> = rows.iter().filter_map(|r| r["workload"].as_str()).collect();
    assert_eq!(
        names,
        ["untar", "stat", "rmrf", "sqlite", "seqread"],
        "{json}"
    );
    for row in rows {
        let fuse = &row["targets"]["fuse"];
        assert!(fuse["median"].as_f64().is_some_and(|v| v > 0.0), "{row}");
        assert_eq!(fuse["values"].as_array().map(Vec::len), Some(1), "{row}");
        assert!(fuse["daemon_cpu_s"].as_f64().is_some(), "{row}");
        assert_eq!(
            row["baseline"],
            serde_json::Value::Null,
            "no kernel target: {row}"
        );
    }
    // The daemon served every workload: it used CPU doing it. (Counted in the kernel's
    // clock ticks of 10 ms, which the quick untar's few dozen files may stay under: the
    // sum of the workloads is what must show.)
    let daemon: f64 = rows
        .iter()
        .map(|r| r["targets"]["fuse"]["daemon_cpu_s"].as_f64().unwrap())
        .sum();
    assert!(daemon > 0.0, "{json}");
    assert!(!dir.exists(), "bench apps left files behind");
}

#[test]
fn bench_apps_bad_flags_are_usage_errors() {
    let root = scratch!();
    let dir = root.path().join("bench");
    let d = s(&dir);
    for (args, message) in [
        (
            vec!["apps", "--dir", d, "--targets", "ext4,zfs"],
            "unknown target \"zfs\"",
        ),
        (
            vec!["apps", "--dir", d, "--workloads", "untar,tar"],
            "unknown workload \"tar\"",
        ),
        (
            vec!["apps", "--dir", d, "--options", "ext4=ro"],
            "is no fuse* or attached* target",
        ),
    ] {
        fails_with(augefs_bench(&args), message);
    }
    assert!(!dir.exists(), "a refused run makes nothing");
}
