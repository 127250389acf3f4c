//! `augefs bench report --quick`: one invocation writes a report directory with the
//! machine section, tables, the goals judged, every sub-run's JSON and the plots, and
//! leaves no image, loop device, mount or emulated PMR behind.

mod common;

use common::{loop_devices_in, BenchScratch};
use std::path::{Path, PathBuf};
use std::process::Command;
use testsupport::process::check;

/// The report directories under `out` (one per invocation).
fn reports(out: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(out)
        .map(|entries| entries.flatten().map(|e| e.path()).collect())
        .unwrap_or_default()
}

/// Emulated PMR files of the benchmarks in /dev/shm (names carry a pid).
fn pmr_files() -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("augefs-bench-") && n.ends_with(".pmr"))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn quick_report_has_machine_tables_and_goals_and_leaves_nothing_behind() {
    let scratch = BenchScratch::new();
    let dir = scratch.path().join("disk");
    let out_dir = scratch.path().join("results");
    let pmr_before = pmr_files();
    let out = Command::new(common::BIN)
        .args(["report", "--quick", "--dir"])
        .arg(&dir)
        .arg("--out")
        .arg(&out_dir)
        .output()
        .expect("run augefs-bench");
    check("bench report --quick", &out);
    let made = reports(&out_dir);
    assert_eq!(made.len(), 1, "one report directory: {made:?}");
    let report_dir = &made[0];
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.trim(),
        report_dir.join("report.md").to_str().unwrap()
    );
    let text = std::fs::read_to_string(report_dir.join("report.md")).expect("report.md");
    for section in [
        "## Machine",
        "- **CPU:**",
        "- **Memory:**",
        "- **Kernel:**",
        "- **Its file system:**",
        "- **PMR:** EMULATED PMR",
        "## Goals (issues 7, 30, 31, 32)",
        "## Real programs on the mount and attached (bench apps)",
        "| goal | verdict | evidence |",
        "## File-system workloads (bench fs)",
        "## IO amplification",
        "## MetaDB beside fjall",
    ] {
        assert!(text.contains(section), "no {section:?} in:\n{text}");
    }
    assert!(text.contains("--quick run"), "quick runs say so");
    // A throughput table with a measured api row and its ratio to ext4 (as root).
    let row = text
        .lines()
        .find(|l| l.starts_with("| create+fsync | 1 |"))
        .unwrap_or_else(|| panic!("no create+fsync row:\n{text}"));
    assert!(row.contains('±'), "median and spread: {row}");
    if common::can_make("ext4") {
        assert!(row.contains("x) |"), "ratio to the best kernel fs: {row}");
    }
    // Every goal has a verdict computed here.
    let goals: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("| goal |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .collect();
    assert_eq!(
        goals.len(),
        31,
        "the goals of issues 7, 30, 31 and 32:\n{text}"
    );
    for g in &goals {
        assert!(
            g.contains("| met |")
                || g.contains("| **NOT met** |")
                || g.contains("| not measured |"),
            "{g}"
        );
    }
    assert!(
        goals[0].contains("emulated, 900 ns/line"),
        "the PMR goal names the emulation: {}",
        goals[0]
    );
    for file in [
        "report.json",
        "bench-fs.json",
        "amplify.json",
        "bench-metadb.json",
        "apps.json",
        "bench-fs-procs.json",
    ] {
        let body = std::fs::read_to_string(report_dir.join(file)).expect(file);
        serde_json::from_str::<serde_json::Value>(&body).expect("JSON");
    }
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(report_dir.join("bench-fs.json")).unwrap())
            .unwrap();
    let api_pmr = doc["targets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "api-pmr")
        .expect("api-pmr target");
    assert_eq!(api_pmr["pmr"]["emulated"], true, "{api_pmr}");
    // The real programs ran on the FUSE mount and, as root, on ext4 beside it, and their
    // goals were judged from them.
    let apps: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(report_dir.join("apps.json")).unwrap())
            .unwrap();
    let untar = &apps["workloads"][0];
    assert_eq!(untar["workload"], "untar", "{apps}");
    assert!(
        untar["targets"]["fuse"]["median"].as_f64().unwrap() > 0.0,
        "{apps}"
    );
    if common::can_make("ext4") {
        assert!(untar["ratios"]["fuse"].as_f64().unwrap() > 0.0, "{apps}");
        let g = goals
            .iter()
            .find(|g| g.contains("FUSE: untar"))
            .expect("FUSE untar goal");
        assert!(!g.contains("| not measured |"), "judged: {g}");
    }
    let svg = std::fs::read_to_string(report_dir.join("plots/bench-fs-create_fsync.svg"))
        .expect("a plot per workload");
    assert!(svg.starts_with("<svg"));
    // Nothing left behind: images, loop devices, mounts, PMR files, the directory.
    assert!(!dir.exists(), "the scratch directory it made is removed");
    scratch.assert_cleaned_up();
    let loops = loop_devices_in(scratch.path());
    assert!(loops.is_empty(), "loop devices left: {loops:?}");
    let left: Vec<String> = pmr_files()
        .into_iter()
        .filter(|f| !pmr_before.contains(f))
        .collect();
    assert!(left.is_empty(), "PMR files left: {left:?}");
}
