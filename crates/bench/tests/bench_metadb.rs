//! `augefs bench metadb` in quick mode: it runs every figure against MetaDB and fjall,
//! prints the table with its ratio column (or JSON), and leaves no bench files behind.

mod common;

use common::augefs_bench;
use std::path::{Path, PathBuf};
use std::process::Output;
use testsupport::process::ok;
use testsupport::scratch;

/// tmpfs for the emulated PMR when the machine has one, else the scratch directory.
fn pmr_dir(scratch: &Path) -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        scratch.to_path_buf()
    }
}

fn bench(dir: &Path, pmr_dir: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "metadb",
        "--dir",
        dir.to_str().expect("utf-8 path"),
        "--pmr-dir",
        pmr_dir.to_str().expect("utf-8 path"),
        "--image-size",
        "128M",
        "--pmr-size",
        "4M",
        "--keys",
        "20000",
        "--gets",
        "2000",
        "--ops",
        "50",
        "--seconds",
        "1",
        "--runs",
        "1",
        "--threads",
        "1,2",
    ];
    args.extend_from_slice(extra);
    ok(augefs_bench(&args))
}

/// Whether `cell` reads like "12.34x".
fn is_ratio(cell: &str) -> bool {
    cell.strip_suffix('x')
        .is_some_and(|n| n.parse::<f64>().is_ok_and(|r| r > 0.0))
}

#[test]
fn quick_run_prints_the_table_with_ratios_and_cleans_up() {
    let root = scratch!();
    let dir = root.path().join("bench");
    let out = bench(&dir, &pmr_dir(root.path()), &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    for header in [
        "figure",
        "threads",
        "mode",
        "median",
        "spread (min - max)",
        "vs fjall",
    ] {
        assert!(text.contains(header), "no {header:?} header:\n{text}");
    }
    let pmr = "pmr (emulated, 900 ns/line)";
    let all: &[&str] = &[pmr, "ssd", "fjall"];
    for (figure, modes) in [
        ("put, sync (ops/s)", all),
        ("put, buffered (ops/s)", all),
        ("load keys 0-2K (ops/s)", &["ssd", "fjall"][..]),
        ("get p99, 20K keys (us)", &["ssd", "fjall"][..]),
        ("recovery open (ms)", all),
    ] {
        for mode in modes {
            let found = text
                .lines()
                .any(|l| l.starts_with(figure) && l.contains(mode));
            assert!(found, "no {mode} row for {figure}:\n{text}");
        }
    }
    let sync_rows: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("put, sync") && !l.contains("fjall"))
        .collect();
    assert_eq!(
        sync_rows.len(),
        4,
        "pmr and ssd at 1 and 2 threads:\n{text}"
    );
    for row in sync_rows {
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert!(cells.iter().any(|c| is_ratio(c)), "no ratio in {row:?}");
    }
    assert!(
        text.contains("goal: sync put >= 5x fjall in pmr mode"),
        "{text}"
    );
    assert!(!dir.exists(), "bench files left behind");
}

#[test]
fn json_output_has_rows_with_ratios() {
    let root = scratch!();
    let dir = root.path().join("bench");
    let out = bench(
        &dir,
        &pmr_dir(root.path()),
        &["--figures", "recovery", "--json"],
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    let rows = json["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 3, "pmr, ssd and fjall recovery rows");
    assert!(rows
        .iter()
        .all(|r| r["figure"] == "recovery_ms" && r["median"].as_f64().is_some()));
    let pmr = rows.iter().find(|r| r["mode"] == "pmr").expect("pmr row");
    assert!(
        pmr["ratio_to_fjall"].as_f64().is_some_and(|r| r > 0.0),
        "{pmr}"
    );
    assert_eq!(json["config"]["pmr_emulated"], true);
    assert!(!dir.exists(), "bench files left behind");
}
