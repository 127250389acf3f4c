//! `augefs bench fs` in quick mode: the table, the JSON and the plots have every cell
//! asked for, with figures that were measured (api counts its device bytes, dir cannot);
//! bad flags are refused by name; as root, an ext4 cell on a loop device that is gone
//! afterwards; FUSE and the interposer when the machine has them; augefs with MetaDB's
//! WAL on an emulated PMR, labelled so, its PMR bytes counted apart.

mod common;

use common::{loop_devices_in, BenchScratch};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};
use testsupport::fuse::mounts_in;
use testsupport::process::{check, wait_until};

fn bench(dir: &Path, extra: &[&str]) -> Output {
    Command::new(common::BIN)
        .args(["fs", "--quick", "--runs", "1", "--seconds", "0.1", "--dir"])
        .arg(dir)
        .args(extra)
        .output()
        .expect("run augefs-bench")
}

fn json_file(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).expect("the JSON file");
    serde_json::from_str(&text).expect("one JSON document")
}

/// A quick run of one thread on `targets` and `workloads`; its JSON document.
fn bench_json(scratch: &BenchScratch, targets: &str, workloads: &str) -> Value {
    let json = scratch.path().join("out.json");
    let out = bench(
        scratch.path(),
        &[
            "--target",
            targets,
            "--workload",
            workloads,
            "--threads",
            "1",
            "--json-file",
            json.to_str().unwrap(),
        ],
    );
    check("bench fs", &out);
    json_file(&json)
}

fn cell<'a>(doc: &'a Value, target: &str, workload: &str, threads: u64) -> &'a Value {
    doc["results"]
        .as_array()
        .expect("results")
        .iter()
        .find(|r| r["target"] == target && r["workload"] == workload && r["threads"] == threads)
        .unwrap_or_else(|| panic!("no {target} {workload} x{threads} in {doc}"))
}

fn ops_per_sec(cell: &Value) -> f64 {
    assert_eq!(cell["errors"].as_array().map(Vec::len), Some(0), "{cell}");
    assert_eq!(cell["runs"].as_array().map(Vec::len), Some(1), "{cell}");
    cell["median"]["ops_per_sec"]
        .as_f64()
        .unwrap_or_else(|| panic!("no ops/s in {cell}"))
}

fn target(doc: &Value, name: &str) -> Value {
    doc["targets"]
        .as_array()
        .expect("targets")
        .iter()
        .find(|t| t["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no target {name} in {doc}"))
}

#[test]
fn api_and_dir_table_json_and_plots_have_every_cell() {
    let scratch = BenchScratch::new();
    let (json, plots) = (
        scratch.path().join("out.json"),
        scratch.path().join("plots"),
    );
    let workloads = [
        "create",
        "create-shared+fsync",
        "stat",
        "append/4K",
        "randread",
        "varmail",
    ];
    let out = bench(
        scratch.path(),
        &[
            "--target",
            "api,dir",
            "--threads",
            "1,2",
            "--workload",
            "create,create-shared+fsync,stat,append,randread,varmail",
            "--json-file",
            json.to_str().unwrap(),
            "--plot",
            plots.to_str().unwrap(),
        ],
    );
    check("bench fs", &out);
    let table = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("[24/24] run 1/1"), "{stderr}");
    assert!(
        table.contains("varmail: 100 files") && table.contains("scale 0.001"),
        "{table}"
    );
    for w in workloads {
        for t in ["1", "2"] {
            for target in ["api", "dir"] {
                let row = table.lines().find(|l| {
                    let f: Vec<&str> = l.split_whitespace().collect();
                    f.len() > 3 && f[0] == w && f[1] == t && f[2] == target
                });
                assert!(row.is_some(), "no row {w} {t} {target}:\n{table}");
            }
        }
    }
    let doc = json_file(&json);
    assert_eq!(doc["results"].as_array().unwrap().len(), 24);
    for w in workloads {
        for t in [1, 2] {
            assert!(ops_per_sec(cell(&doc, "api", w, t)) > 0.0);
            assert!(ops_per_sec(cell(&doc, "dir", w, t)) > 0.0);
        }
    }
    // api counts its device: an append + fsync writes its 4 KiB at least; dir counts
    // the whole device under it (the same at least), when it has one.
    let append = cell(&doc, "api", "append/4K", 1);
    let written = append["median"]["dev_write_bytes_per_op"].as_f64().unwrap();
    assert!(written >= 4096.0, "{append}");
    let dir_written = &cell(&doc, "dir", "append/4K", 1)["median"]["dev_write_bytes_per_op"];
    match dir_written.as_f64() {
        Some(w) => assert!(w >= 4096.0, "{dir_written}"),
        None => assert!(dir_written.is_null()),
    }
    // The default baseline is the kernel's file system under the directory.
    assert_eq!(append["baseline"], "dir");
    assert!(append["ratio"].as_f64().unwrap() > 0.0);
    let latency = &append["median"];
    assert!(latency["p50_ns"].as_f64().unwrap() <= latency["p99_ns"].as_f64().unwrap());
    for w in ["create", "varmail", "append_4K"] {
        let svg = std::fs::read_to_string(plots.join(format!("bench-fs-{w}.svg"))).unwrap();
        assert_eq!(
            svg.matches("<polyline").count(),
            2,
            "{w}: a line per target"
        );
    }
    scratch.assert_cleaned_up();
    let left: Vec<_> = std::fs::read_dir(scratch.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n.to_string_lossy().starts_with("bench-fs-"))
        .collect();
    assert!(left.is_empty(), "dir cells removed: {left:?}");
}

/// tmpfs for the emulated PMR when the machine has one, else the scratch directory.
fn pmr_dir(scratch: &BenchScratch) -> String {
    let shm = Path::new("/dev/shm");
    let dir = if shm.is_dir() { shm } else { scratch.path() };
    dir.to_str().expect("utf-8 path").to_string()
}

#[test]
fn api_pmr_runs_create_fsync_and_is_labelled_emulated() {
    let scratch = BenchScratch::new();
    let json = scratch.path().join("out.json");
    let pmr_dir = pmr_dir(&scratch);
    let out = bench(
        scratch.path(),
        &[
            "--target",
            "api-pmr",
            "--workload",
            "create+fsync",
            "--threads",
            "1",
            "--pmr-dir",
            &pmr_dir,
            "--pmr-latency-ns",
            "700",
            "--json-file",
            json.to_str().unwrap(),
        ],
    );
    check("bench fs", &out);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("api-pmr: augefs through the vfs API, MetaDB's WAL on the EMULATED PMR")
            && table.contains("+ 700 ns busy-wait per 64-byte line"),
        "header: {table}"
    );
    assert!(table.contains("pmrW/op"), "{table}");
    assert!(table.contains("(emulated, 700 ns/line)"), "footer: {table}");
    let doc = json_file(&json);
    let pmr = &target(&doc, "api-pmr")["pmr"];
    assert_eq!(pmr["emulated"], true, "{pmr}");
    assert_eq!(pmr["latency_ns_per_line"], 700, "{pmr}");
    let create = cell(&doc, "api-pmr", "create+fsync", 1);
    assert!(ops_per_sec(create) > 0.0);
    // The directory fsync persists MetaDB's WAL records to the PMR: at least a line.
    let persisted = create["median"]["pmr_write_bytes_per_op"].as_f64().unwrap();
    assert!(persisted >= 64.0, "{create}");
    assert!(create["median"]["dev_write_bytes_per_op"]
        .as_f64()
        .is_some());
    let left: Vec<_> = std::fs::read_dir(&pmr_dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("augefs-bench-fs-") && n.ends_with(".pmr"))
        .collect();
    assert!(left.is_empty(), "PMR files left: {left:?}");
    scratch.assert_cleaned_up();
}

#[test]
fn bad_flags_are_refused_by_name() {
    let scratch = BenchScratch::new();
    for (flags, says) in [
        (&["--target", "api,zfs"][..], "unknown target \"zfs\""),
        (
            &["--workload", "create,creat"][..],
            "unknown workload \"creat\"",
        ),
        (&["--threads", "1,0"][..], "--threads"),
        (&["--workload", "stat+fsync"][..], "+fsync applies to"),
        (&["--target", "api", "--baseline", "xfs"][..], "--baseline"),
    ] {
        let out = bench(scratch.path(), flags);
        assert!(!out.status.success(), "{flags:?} accepted");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(says), "{flags:?}: {stderr}");
    }
}

#[test]
fn ext4_on_a_loop_device_as_root() {
    let scratch = BenchScratch::new();
    let doc = bench_json(&scratch, "ext4", "create+fsync,randread-cold");
    let ext4 = target(&doc, "ext4");
    if !common::measured_if(&ext4, common::can_make("ext4")) {
        return;
    }
    let create = cell(&doc, "ext4", "create+fsync", 1);
    assert!(ops_per_sec(create) > 0.0);
    assert!(create["median"]["dev_write_bytes_per_op"].as_f64().unwrap() > 0.0);
    let cold = cell(&doc, "ext4", "randread-cold", 1);
    assert!(ops_per_sec(cold) > 0.0);
    let read = cold["median"]["dev_read_bytes_per_op"].as_f64().unwrap();
    assert!(read >= 4096.0, "a cold read reads the device: {cold}");
    scratch.assert_cleaned_up();
}

#[test]
fn fuse_and_interposer_where_available() {
    let scratch = BenchScratch::new();
    let doc = bench_json(&scratch, "fuse,interposer", "create,stat");
    // Both drive the `augefs` built beside this binary (a workspace build has it).
    let beside = |name: &str| Path::new(common::BIN).with_file_name(name).exists();
    let augefs = beside("augefs");
    for (name, available) in [
        ("fuse", augefs && Path::new("/dev/fuse").exists()),
        ("interposer", augefs && beside("libaugefs_preload.so")),
    ] {
        if !common::measured_if(&target(&doc, name), available) {
            continue;
        }
        for w in ["create", "stat"] {
            let c = cell(&doc, name, w, 1);
            assert!(ops_per_sec(c) > 0.0);
            assert!(c["median"]["cpu_ns_per_op"].as_f64().unwrap() > 0.0, "{c}");
            assert!(c["median"]["dev_write_bytes_per_op"].is_null(), "{c}");
        }
    }
    scratch.assert_cleaned_up();
}

#[test]
fn procs_runs_processes_on_every_target_with_a_directory() {
    let scratch = BenchScratch::new();
    let json = scratch.path().join("out.json");
    let out = bench(
        scratch.path(),
        &[
            "--procs",
            "--target",
            "dir,ext4,attached",
            "--workload",
            "create+fsync",
            "--threads",
            "2",
            "--json-file",
            json.to_str().unwrap(),
        ],
    );
    check("bench fs --procs", &out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("ran as N processes"), "{text}");
    let doc = json_file(&json);
    let c = cell(&doc, "dir", "create+fsync", 2);
    assert!(ops_per_sec(c) > 0.0);
    let beside = |name: &str| Path::new(common::BIN).with_file_name(name).exists();
    let available = [
        ("ext4", common::can_make("ext4")),
        (
            "attached",
            beside("augefs") && beside("libaugefs_preload.so") && Path::new("/dev/fuse").exists(),
        ),
    ];
    for (name, available) in available {
        if !common::measured_if(&target(&doc, name), available) {
            continue;
        }
        let c = cell(&doc, name, "create+fsync", 2);
        assert!(ops_per_sec(c) > 0.0, "{c}");
        assert!(c["median"]["cpu_ns_per_op"].as_f64().unwrap() > 0.0, "{c}");
        if name == "ext4" {
            // Counted over the timed run only, which made its files durable.
            assert!(
                c["median"]["dev_write_bytes_per_op"].as_f64().unwrap() > 0.0,
                "{c}"
            );
        }
    }
    scratch.assert_cleaned_up();
}

#[test]
fn a_signal_undoes_the_mount_the_loop_device_and_the_files() {
    if !common::can_make("ext4") {
        eprintln!("skipped: not root or no mkfs.ext4");
        return;
    }
    let scratch = BenchScratch::new();
    // The emulated PMR lives outside the scratch directory: it must go too.
    let pmr_dir = BenchScratch::new();
    let child = Command::new(common::BIN)
        .args(["fs", "--quick", "--runs", "1", "--seconds", "60"])
        .args([
            "--target",
            "ext4,api-pmr",
            "--workload",
            "fileserver",
            "--threads",
            "1",
        ])
        .arg("--dir")
        .arg(scratch.path())
        .arg("--pmr-dir")
        .arg(pmr_dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run augefs-bench");
    wait_until("the ext4 mount", || !mounts_in(scratch.path()).is_empty());
    // SAFETY: kill(2) of our own child, not yet reaped.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(128 + libc::SIGTERM), "{stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    assert!(mounts_in(scratch.path()).is_empty(), "unmounted");
    // A lazily unmounted file system lets its loop device go once released.
    wait_until("the loop device detached", || {
        loop_devices_in(scratch.path()).is_empty()
    });
    let left: Vec<_> = std::fs::read_dir(scratch.path())
        .expect("scratch")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert!(left.is_empty(), "bench files removed: {left:?}");
    let pmr_left: Vec<_> = std::fs::read_dir(pmr_dir.path())
        .expect("PMR directory")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert!(pmr_left.is_empty(), "PMR file removed: {pmr_left:?}");
}
