//! The `augefs` command as a user meets it: every documented error gets a clear message
//! and a non-zero exit, and nothing is lost.

use format::checksum::crc32c;
use format::superblock::{F_CHECKSUM, F_FORMAT_VERSION};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn augefs(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_augefs"))
        .args(args)
        .output()
        .expect("augefs runs")
}

/// A scratch directory on the target's file system (which supports O_DIRECT; /tmp may not).
fn scratch() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("scratch dir")
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn mkfs(image: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["mkfs", s(image), "--size", "64M"];
    args.extend_from_slice(extra);
    augefs(&args)
}

fn ok(o: Output) -> Output {
    assert!(o.status.success(), "failed: {}\n{}", stdout(&o), stderr(&o));
    o
}

fn fails_with(o: Output, needle: &str) {
    assert_eq!(
        o.status.code(),
        Some(1),
        "exit code; stderr: {}",
        stderr(&o)
    );
    assert!(
        stderr(&o).contains(needle),
        "stderr lacks {needle:?}: {}",
        stderr(&o)
    );
}

#[test]
fn mkfs_then_inspect_text_and_json() {
    let dir = scratch();
    let image = dir.path().join("a.img");
    let out = ok(mkfs(&image, &["--domains", "4"]));
    assert!(stdout(&out).contains("4 domains"), "{}", stdout(&out));
    let text = stdout(&ok(augefs(&["inspect", s(&image)])));
    assert!(text.contains("format version    1"), "{text}");
    assert!(text.contains("mode              ssd"), "{text}");
    assert!(text.contains("current: slot 0"), "{text}");
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&ok(augefs(&["inspect", s(&image), "--json"]))))
            .expect("json");
    assert_eq!(json["geometry"]["domain_count"], 4);
    assert_eq!(json["checkpoints"].as_array().expect("array").len(), 5);
    assert_eq!(json["superblock"]["copies"][1], "valid");
    assert!(json["device"]["backend"].is_string());
}

#[test]
fn pread_backend_is_selectable() {
    let dir = scratch();
    let image = dir.path().join("a.img");
    ok(mkfs(&image, &["--backend", "pread"]));
    let text = stdout(&ok(augefs(&["inspect", s(&image), "--backend", "pread"])));
    assert!(text.contains("pread backend"), "{text}");
}

#[test]
fn image_too_small_leaves_no_file() {
    let dir = scratch();
    let image = dir.path().join("small.img");
    fails_with(
        augefs(&["mkfs", s(&image), "--size", "1M"]),
        "device too small",
    );
    assert!(!image.exists());
}

#[test]
fn pmr_too_small_and_pmr_checks() {
    let dir = scratch();
    let image = dir.path().join("a.img");
    let pmr = dir.path().join("a.pmr");
    fails_with(
        mkfs(&image, &["--pmr", s(&pmr), "--pmr-size", "1M"]),
        "PMR too small",
    );
    ok(mkfs(
        &image,
        &["--force", "--pmr", s(&pmr), "--pmr-size", "4M"],
    ));
    let text = stdout(&ok(augefs(&["inspect", s(&image), "--pmr", s(&pmr)])));
    assert!(text.contains("mode              pmr"), "{text}");
    assert!(text.contains("PMR persist       msync"), "{text}");
    let text = stdout(&ok(augefs(&["inspect", s(&image)])));
    assert!(text.contains("PMR not given"), "{text}");
    // A PMR formatted for another image.
    let other = dir.path().join("b.img");
    let other_pmr = dir.path().join("b.pmr");
    ok(mkfs(&other, &["--pmr", s(&other_pmr), "--pmr-size", "4M"]));
    fails_with(
        augefs(&["inspect", s(&image), "--pmr", s(&other_pmr)]),
        "belongs to another file system",
    );
}

#[test]
fn foreign_images_are_not_augefs() {
    let dir = scratch();
    let zeros = dir.path().join("zeros.img");
    std::fs::write(&zeros, vec![0u8; 1 << 20]).expect("write");
    fails_with(augefs(&["inspect", s(&zeros)]), "not an augefs image");
    let noise = dir.path().join("noise.img");
    let mut rng = platform::Rng::from_seed(5);
    let mut bytes = vec![0u8; 1 << 20];
    rng.fill(&mut bytes);
    std::fs::write(&noise, bytes).expect("write");
    fails_with(augefs(&["inspect", s(&noise)]), "not an augefs image");
    fails_with(
        augefs(&["inspect", s(&dir.path().join("missing.img"))]),
        "no such file",
    );
}

fn patch_superblocks(image: &Path, patch: impl Fn(&mut [u8])) {
    let mut bytes = std::fs::read(image).expect("read image");
    for copy in 0..2 {
        let block = &mut bytes[copy * 4096..(copy + 1) * 4096];
        patch(block);
    }
    std::fs::write(image, bytes).expect("write image");
}

#[test]
fn wrong_format_version() {
    let dir = scratch();
    let image = dir.path().join("a.img");
    ok(mkfs(&image, &[]));
    patch_superblocks(&image, |b| {
        F_FORMAT_VERSION.put_u32(b, 9);
        let crc = crc32c(&b[..F_CHECKSUM.offset]);
        F_CHECKSUM.put_u32(b, crc);
    });
    fails_with(
        augefs(&["inspect", s(&image)]),
        "unsupported format version 9",
    );
}

#[test]
fn corrupted_superblocks() {
    let dir = scratch();
    let image = dir.path().join("a.img");
    ok(mkfs(&image, &[]));
    // One copy damaged: inspect works and names the bad copy.
    let mut bytes = std::fs::read(&image).expect("read");
    bytes[100] ^= 0xff;
    std::fs::write(&image, &bytes).expect("write");
    let text = stdout(&ok(augefs(&["inspect", s(&image)])));
    assert!(
        text.contains("copy 1 used") && text.contains("copy 0: corrupted"),
        "{text}"
    );
    // Both damaged: corruption, not "foreign".
    patch_superblocks(&image, |b| b[100] ^= 0x0f);
    fails_with(augefs(&["inspect", s(&image)]), "corrupted superblock");
    // mkfs sees a damaged augefs and wants --force.
    fails_with(mkfs(&image, &[]), "--force");
}

#[test]
fn existing_file_system_needs_force() {
    let dir = scratch();
    let image = dir.path().join("a.img");
    ok(mkfs(&image, &[]));
    let uuid = |img: &PathBuf| {
        let j: serde_json::Value =
            serde_json::from_str(&stdout(&ok(augefs(&["inspect", s(img), "--json"]))))
                .expect("json");
        j["superblock"]["fs_uuid"]
            .as_str()
            .expect("uuid")
            .to_string()
    };
    let before = uuid(&image);
    fails_with(mkfs(&image, &[]), "already holds an augefs file system");
    fails_with(augefs(&["mkfs", s(&image), "--size", "128M"]), "--force");
    assert_eq!(uuid(&image), before, "refused mkfs changed nothing");
    assert_eq!(std::fs::metadata(&image).expect("stat").len(), 64 << 20);
    ok(augefs(&["mkfs", s(&image), "--size", "128M", "--force"]));
    assert_ne!(uuid(&image), before);
    assert_eq!(std::fs::metadata(&image).expect("stat").len(), 128 << 20);
}

#[test]
fn image_in_use_is_refused() {
    let dir = scratch();
    let image = dir.path().join("a.img");
    ok(mkfs(&image, &[]));
    let held = device::open(&image, &device::OpenOptions::default()).expect("open");
    fails_with(augefs(&["inspect", s(&image)]), "in use");
    fails_with(mkfs(&image, &["--force"]), "in use");
    drop(held);
    ok(augefs(&["inspect", s(&image)]));
    // A shared (inspect) holder does not stop another inspect, but stops mkfs.
    let shared = device::open(
        &image,
        &device::OpenOptions {
            lock: device::LockMode::Shared,
            read_only: true,
            ..Default::default()
        },
    )
    .expect("open");
    ok(augefs(&["inspect", s(&image)]));
    fails_with(mkfs(&image, &["--force"]), "in use");
    drop(shared);
}

#[test]
fn bad_flags_are_usage_errors() {
    let o = augefs(&["mkfs", "x.img", "--sise", "1G"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--sise"), "{}", stderr(&o));
    let o = augefs(&["mkfs", "x.img", "--size", "lots"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("invalid size"), "{}", stderr(&o));
    let o = augefs(&["frobnicate"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(!Path::new("x.img").exists());
}

/// `augefs bench engine` with tiny settings in `dir` (no ext4: the test may not be root).
fn bench_engine(dir: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "bench",
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
    ok(augefs(&args))
}

#[test]
fn bench_engine_quick_run_prints_its_figures_and_cleans_up() {
    let root = scratch();
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
    let root = scratch();
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
    let root = scratch();
    let dir = root.path().join("bench");
    let o = augefs(&["bench", "engine", "--figures", "fsync,speed"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("speed"), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("recovery"),
        "lists the figures: {}",
        stderr(&o)
    );
    let o = augefs(&["bench", "engine", "--sekonds", "1"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--sekonds"), "{}", stderr(&o));
    let bench = ["bench", "engine", "--dir", s(&dir)];
    fails_with(
        augefs(&[&bench[..], &["--threads", "0"]].concat()),
        "--threads must list counts in 1..=256",
    );
    fails_with(
        augefs(&[&bench[..], &["--image-size", "256M", "--crash-size", "1G"]].concat()),
        "too small for --crash-size",
    );
    assert!(!dir.exists(), "a refused run creates nothing");
}
