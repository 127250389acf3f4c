//! The `augefs` command as a user meets it: every documented error gets a clear message
//! and a non-zero exit, and nothing is lost.

mod common;

use common::{augefs, mkfs};
use format::checksum::crc32c;
use format::superblock::{F_CHECKSUM, F_FORMAT_VERSION};
use std::path::{Path, PathBuf};
use std::process::Command;
use testsupport::process::{fails_with, ok, s, stderr, stdout};
use testsupport::scratch;

#[test]
fn mkfs_then_inspect_text_and_json() {
    let dir = scratch!();
    let image = dir.path().join("a.img");
    let out = ok(mkfs(&image, "64M", &["--domains", "4"]));
    assert!(stdout(&out).contains("4 domains"), "{}", stdout(&out));
    let text = stdout(&ok(augefs(&["inspect", s(&image)])));
    assert!(text.contains("format version    1"), "{text}");
    assert!(text.contains("mode              ssd"), "{text}");
    assert!(text.contains("current: slot 0"), "{text}");
    // Domains in order are summed up in one line; -v lists each.
    assert!(
        text.contains("domains    4 in order: a valid current slot each (sequence 1;"),
        "{text}"
    );
    assert!(!text.contains("domain 3 "), "{text}");
    let verbose = stdout(&ok(augefs(&["inspect", "-v", s(&image)])));
    assert!(verbose.contains("domain 3 "), "{verbose}");
    assert!(!verbose.contains("in order"), "{verbose}");
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
    let dir = scratch!();
    let image = dir.path().join("a.img");
    ok(mkfs(&image, "64M", &["--backend", "pread"]));
    let text = stdout(&ok(augefs(&["inspect", s(&image), "--backend", "pread"])));
    assert!(text.contains("pread backend"), "{text}");
}

#[test]
fn image_too_small_leaves_no_file() {
    let dir = scratch!();
    let image = dir.path().join("small.img");
    fails_with(
        augefs(&["mkfs", s(&image), "--size", "1M"]),
        "device too small",
    );
    assert!(!image.exists());
}

#[test]
fn pmr_too_small_and_pmr_checks() {
    let dir = scratch!();
    let image = dir.path().join("a.img");
    let pmr = dir.path().join("a.pmr");
    fails_with(
        mkfs(&image, "64M", &["--pmr", s(&pmr), "--pmr-size", "1M"]),
        "PMR too small",
    );
    ok(mkfs(
        &image,
        "64M",
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
    ok(mkfs(
        &other,
        "64M",
        &["--pmr", s(&other_pmr), "--pmr-size", "4M"],
    ));
    fails_with(
        augefs(&["inspect", s(&image), "--pmr", s(&other_pmr)]),
        "belongs to another file system",
    );
}

#[test]
fn foreign_images_are_not_augefs() {
    let dir = scratch!();
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
    let dir = scratch!();
    let image = dir.path().join("a.img");
    ok(mkfs(&image, "64M", &[]));
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
    let dir = scratch!();
    let image = dir.path().join("a.img");
    ok(mkfs(&image, "64M", &[]));
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
    fails_with(mkfs(&image, "64M", &[]), "--force");
}

#[test]
fn existing_file_system_needs_force() {
    let dir = scratch!();
    let image = dir.path().join("a.img");
    ok(mkfs(&image, "64M", &[]));
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
    fails_with(
        mkfs(&image, "64M", &[]),
        "already holds an augefs file system",
    );
    fails_with(augefs(&["mkfs", s(&image), "--size", "128M"]), "--force");
    assert_eq!(uuid(&image), before, "refused mkfs changed nothing");
    assert_eq!(std::fs::metadata(&image).expect("stat").len(), 64 << 20);
    ok(augefs(&["mkfs", s(&image), "--size", "128M", "--force"]));
    assert_ne!(uuid(&image), before);
    assert_eq!(std::fs::metadata(&image).expect("stat").len(), 128 << 20);
}

#[test]
fn image_in_use_is_refused() {
    let dir = scratch!();
    let image = dir.path().join("a.img");
    ok(mkfs(&image, "64M", &[]));
    let held = device::open(&image, &device::OpenOptions::default()).expect("open");
    fails_with(augefs(&["inspect", s(&image)]), "in use");
    fails_with(mkfs(&image, "64M", &["--force"]), "in use");
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
    fails_with(mkfs(&image, "64M", &["--force"]), "in use");
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

/// `augefs bench` and `augefs amplify` run `augefs-bench` from the directory of
/// `augefs`, with every word after the subcommand, and say how to build it when it is
/// not there.
#[test]
fn bench_and_amplify_run_the_bench_program_beside() {
    let root = scratch!();
    let alone = root.path().join("augefs");
    if std::fs::hard_link(env!("CARGO_BIN_EXE_augefs"), &alone).is_err() {
        std::fs::copy(env!("CARGO_BIN_EXE_augefs"), &alone).expect("copy augefs");
    }
    for args in [&["bench", "fs", "--quick"][..], &["amplify", "--help"]] {
        let o = Command::new(&alone)
            .args(args)
            .output()
            .expect("augefs runs");
        fails_with(o, "cargo build --release -p augefs-bench");
    }
    let help = stdout(&ok(augefs(&["--help"])));
    assert!(help.contains("bench") && help.contains("amplify"), "{help}");

    let bench = Path::new(env!("CARGO_BIN_EXE_augefs")).with_file_name("augefs-bench");
    if !bench.exists() {
        eprintln!(
            "skipped: no {} (cargo build -p augefs-bench)",
            bench.display()
        );
        return;
    }
    let o = augefs(&["bench", "engine", "--sekonds", "1"]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "clap's usage exit: {}",
        stderr(&o)
    );
    assert!(stderr(&o).contains("--sekonds"), "{}", stderr(&o));
    let o = ok(augefs(&["amplify", "--help"]));
    assert!(
        stdout(&o).contains("--ops"),
        "amplify's own help: {}",
        stdout(&o)
    );
    let o = ok(augefs(&["bench", "--help"]));
    assert!(stdout(&o).contains("augefs-bench"), "{}", stdout(&o));
}
