//! `augefs bench recovery` in small: a real crash of a child writing small files and
//! logs through the API, the mount timed, every file checked and fsck run; its usage
//! errors; no bench file is left behind.

mod common;

use common::augefs_bench;
use testsupport::process::{fails_with, ok, s, stdout};
use testsupport::scratch;

#[test]
fn bench_recovery_checks_a_real_crash_of_small_files_and_logs() {
    let root = scratch!();
    let dir = root.path().join("bench");
    let out = ok(augefs_bench(&[
        "recovery",
        "--dir",
        s(&dir),
        "--bytes",
        "64M",
        "--image-size",
        "512M",
        "--runs",
        "1",
        "--json",
    ]));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON on stdout");
    let run = &json["runs"][0];
    let acknowledged = run["acknowledged_bytes"].as_u64().expect("acknowledged");
    assert!(acknowledged >= 64 << 20, "{run}");
    // The bench checked every file it found (at least the acknowledged ones, byte by
    // byte) and found both kinds of writers' files.
    assert!(
        run["checked_bytes"].as_u64().expect("checked") >= acknowledged,
        "{run}"
    );
    assert!(
        run["checked_files"].as_u64().expect("files")
            >= run["acknowledged_files"].as_u64().expect("acked files"),
        "{run}"
    );
    assert!(
        run["acknowledged_files"].as_u64().expect("acked files") > 4,
        "{run}"
    );
    let mount_ns = run["mount_ns"].as_u64().expect("mount");
    let phases = [
        "superblock_ns",
        "replay_ns",
        "domains_ns",
        "finish_ns",
        "orphans_ns",
    ]
    .iter()
    .map(|p| run[*p].as_u64().expect("phase"))
    .sum::<u64>();
    assert!(phases > 0 && phases <= mount_ns, "{run}");
    assert!(
        run["replay_records"].as_u64().expect("records") > 0,
        "{run}"
    );
    assert_eq!(
        json["goals"][0]["met"],
        serde_json::Value::Null,
        "64 MiB is not the goal's 8 GiB"
    );
    assert!(!dir.exists(), "bench files left behind");
}

#[test]
fn bench_recovery_bad_flags_are_usage_errors() {
    let root = scratch!();
    let dir = root.path().join("bench");
    let d = s(&dir);
    for (args, message) in [
        (
            vec!["recovery", "--dir", d, "--bytes", "1M"],
            "--bytes must be at least 64 MiB",
        ),
        (
            vec!["recovery", "--dir", d, "--threads", "0"],
            "--threads must be in 1..=64",
        ),
        (
            vec![
                "recovery",
                "--dir",
                d,
                "--bytes",
                "1G",
                "--image-size",
                "1G",
            ],
            "is too small for --bytes",
        ),
    ] {
        fails_with(augefs_bench(&args), message);
    }
    assert!(!dir.exists(), "nothing made for a usage error");
}
