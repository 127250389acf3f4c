//! `augefs amplify` in quick mode: the table and JSON have every workload and column,
//! augefs's create + fsync writes well under 16 KiB per operation, and (as root, with
//! mkfs.ext4) an ext4 column is measured on a loop device that is gone afterwards.

mod common;

use common::{images, BenchScratch as Scratch};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};
use testsupport::process::check;

const WORKLOADS: [&str; 7] = [
    "overwrite",
    "append",
    "read_cold",
    "read_warm",
    "create",
    "mkdir",
    "rename",
];

fn amplify(dir: &Path, extra: &[&str]) -> Output {
    let out = Command::new(common::BIN)
        .args(["amplify", "--quick", "--runs", "1", "--dir"])
        .arg(dir)
        .args(extra)
        .output()
        .expect("run augefs-bench");
    check("amplify", &out);
    out
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).expect("stdout is one JSON document")
}

/// The median figures of `workload` on `fs`.
fn median<'a>(doc: &'a Value, fs: &str, workload: &str) -> &'a Value {
    let results = doc["results"].as_array().expect("results");
    let cell = results
        .iter()
        .find(|r| r["fs"] == fs && r["workload"] == workload)
        .unwrap_or_else(|| panic!("no {fs} {workload} in {doc}"));
    assert_eq!(cell["runs"].as_array().map(Vec::len), Some(1), "one run");
    &cell["median"]
}

fn number(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} is not a number in {v}"))
}

#[test]
fn augefs_table_and_json_have_every_workload_and_creates_are_cheap() {
    let scratch = Scratch::new();
    let out = amplify(scratch.path(), &["--fs", "augefs", "--ops", "5"]);
    let table = String::from_utf8_lossy(&out.stdout);
    let header = table
        .lines()
        .find(|l| l.starts_with("workload"))
        .expect("a header row");
    assert!(header.contains("augefs"), "{table}");
    for label in ["4K overwrite+fsync", "4K read, cold", "create+fsync dir"] {
        assert!(table.contains(label), "{label} missing:\n{table}");
    }
    // The paper's figure for btrfs is not printed without a btrfs column.
    assert!(!table.contains("(648)"), "{table}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("[7/7] augefs rename"), "{stderr}");

    // Enough creates that the unmount's fixed cost (checkpoints) is spread thin.
    let doc = json(&amplify(
        scratch.path(),
        &["--fs", "augefs", "--ops", "200", "--json"],
    ));
    assert_eq!(doc["file_systems"][0]["name"], "augefs");
    assert_eq!(doc["file_systems"][0]["measured"], true);
    for w in WORKLOADS {
        median(&doc, "augefs", w);
    }
    let create = median(&doc, "augefs", "create");
    let (fsync_kb, total_kb) = (number(create, "write_fsync"), number(create, "write_total"));
    assert!(fsync_kb > 0.0 && fsync_kb < 4.0, "{create}");
    assert!(
        total_kb < 16.0,
        "create+fsync wrote {total_kb} KB per op: {create}"
    );
    let overwrite = median(&doc, "augefs", "overwrite");
    assert!(number(overwrite, "write_total") >= 1.0, "{overwrite}");
    assert!(number(median(&doc, "augefs", "read_cold"), "read") >= 1.0);
    assert!(images(scratch.path()).is_empty(), "image files removed");
}

#[test]
fn ext4_column_on_a_loop_device_as_root() {
    let scratch = Scratch::new();
    let doc = json(&amplify(scratch.path(), &["--fs", "ext4", "--json"]));
    let column = &doc["file_systems"][0];
    assert_eq!(column["name"], "ext4");
    if !common::measured_if(column, common::can_make("ext4")) {
        return;
    }
    for w in WORKLOADS {
        median(&doc, "ext4", w);
    }
    let create = median(&doc, "ext4", "create");
    assert!(number(create, "write_total") > 0.0, "{create}");
    assert!(number(create, "flushes_per_op") >= 1.0, "{create}");
    let cell = doc["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["fs"] == "ext4" && r["workload"] == "create")
        .unwrap();
    assert_eq!(cell["paper"]["write_total"], 52.0);
    scratch.assert_cleaned_up();
}
