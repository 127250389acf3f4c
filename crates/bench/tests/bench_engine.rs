//! `augefs bench engine` with tiny settings: its figures, a real crash and its recovery,
//! and its usage errors; no bench file is left behind.

mod common;

use common::augefs_bench;
use std::path::Path;
use std::process::Output;
use testsupport::process::{fails_with, ok, s, stderr, stdout};
use testsupport::scratch;

/// `augefs-bench engine` with tiny settings in `dir` (no ext4: the test may not be root).
fn bench_engine(dir: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "engine",
        "--dir",
        s(dir),
        "--image-size",
        "256M",
        "--seconds",
        "0.2",
        "--runs",
        "1",
        "--no-baseline",
    ];
    args.extend_from_slice(extra);
    ok(augefs_bench(&args))
}

#[test]
fn bench_engine_quick_run_prints_its_figures_and_cleans_up() {
    let root = scratch!();
    let dir = root.path().join("bench");
    let out = bench_engine(
        &dir,
        &[
            "--figures",
            "fsync,domains",
            "--threads",
            "1,2",
            "--domains",
            "1,2",
        ],
    );
    let text = stdout(&out);
    for needle in [
        "augefs bench engine: 256.0 MiB image",
        "ext4: skipped (--no-baseline)",
        "bytes/fsync",
        "goal: recovery after a crash during 1 GiB of appends <= 400 ms",
        "not measured (needs the recovery figure)",
        "reference: the paper (section VII): asynchronous fsync +40% over ordered at 1 thread",
    ] {
        assert!(text.contains(needle), "no {needle:?}:\n{text}");
    }
    let rows = |label: &str| -> Vec<Vec<String>> {
        text.lines()
            .filter(|l| l.starts_with(label))
            .map(|l| {
                l[label.len()..]
                    .split_whitespace()
                    .map(str::to_string)
                    .collect()
            })
            .collect()
    };
    // threads, domains, path, median: every measured row has a positive median.
    let fsync = rows("4 KiB append+fsync (ops/s)");
    assert_eq!(
        fsync.len(),
        4,
        "async and ordered at 1 and 2 threads:\n{text}"
    );
    for row in &fsync {
        assert!(row[3].parse::<f64>().is_ok_and(|v| v > 0.0), "{row:?}");
    }
    assert!(
        fsync.iter().any(|r| r[0] == "2" && r[2] == "ordered"),
        "{text}"
    );
    let paired = rows("  async / ordered, paired");
    assert_eq!(paired.len(), 2, "{text}");
    assert!(paired.iter().all(|r| r[3].ends_with('x')), "{text}");
    assert!(
        rows("  async / ext4, paired").is_empty(),
        "no ext4 ratio without ext4"
    );
    let domains = rows("domains: append+fsync (ops/s)");
    assert_eq!(
        domains.iter().map(|r| r[1].as_str()).collect::<Vec<_>>(),
        ["1", "2"],
        "{text}"
    );
    assert_eq!(rows("  domains: vs 1 domain, paired").len(), 1, "{text}");
    assert!(!dir.exists(), "bench files left behind");
}

#[test]
fn bench_engine_recovery_checks_a_real_crash() {
    let root = scratch!();
    let dir = root.path().join("bench");
    let out = bench_engine(
        &dir,
        &["--figures", "recovery", "--crash-size", "8M", "--json"],
    );
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON on stdout");
    let rows = json["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 1, "{json}");
    assert_eq!(rows[0]["figure"], "recovery_ms");
    assert!(rows[0]["median"].as_f64().is_some_and(|ms| ms > 0.0));
    let run = &rows[0]["runs"][0]["detail"];
    let acknowledged = run["acknowledged_bytes"].as_u64().expect("acknowledged");
    assert!(acknowledged >= 8 << 20, "{run}");
    // Every acknowledged block is live after recovery (the bench checks their content).
    assert!(run["valid_blocks"].as_u64().expect("valid") >= acknowledged / 4096);
    assert_eq!(
        json["goals"][0]["met"],
        serde_json::Value::Null,
        "8M is not the goal's 1 GiB"
    );
    assert!(!dir.exists(), "bench files left behind");
}

#[test]
fn bench_engine_bad_flags_are_usage_errors() {
    let root = scratch!();
    let dir = root.path().join("bench");
    let o = augefs_bench(&["engine", "--figures", "fsync,speed"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("speed"), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("recovery"),
        "lists the figures: {}",
        stderr(&o)
    );
    let o = augefs_bench(&["engine", "--sekonds", "1"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--sekonds"), "{}", stderr(&o));
    let bench = ["engine", "--dir", s(&dir)];
    fails_with(
        augefs_bench(&[&bench[..], &["--threads", "0"]].concat()),
        "--threads must list counts in 1..=256",
    );
    fails_with(
        augefs_bench(&[&bench[..], &["--image-size", "256M", "--crash-size", "1G"]].concat()),
        "too small for --crash-size",
    );
    assert!(!dir.exists(), "a refused run creates nothing");
}
