//! GlusterFS and NFS-Ganesha over augefs (README "GlusterFS bricks and NFS export on
//! augefs"), in small, by running `scripts/cluster` on a generated tree of 120 files
//! (1,200 for attached bricks):
//! - `check`: a replica-3 volume whose bricks are three augefs mounts; one brick killed
//!   with SIGKILL while the tree is copied in, restarted and healed; every brick's copy
//!   compared with the tree; every brick image `augefs fsck` clean.
//! - `check` with `BRICKS=attached`: the three bricks in one augefs mount, glusterd and
//!   its processes attached to its instance.
//! - `nfs`: NFS-Ganesha (FSAL_VFS) exporting an augefs mount; the tree copied in and out
//!   with libnfs's nfs-cp and compared; NFSv3 handles taken before a remount of augefs
//!   under the running server read the same bytes after it; fsck clean.
//!
//! Needs root and /dev/fuse, glusterfs-server and glusterfs-client, nfs-ganesha,
//! nfs-ganesha-vfs, libnfs-utils, libnfs-dev and rpcbind (scripts/test installs them).
//! The script exits 77 only where glusterd or ganesha cannot run (not installed, its
//! port taken); the test then prints why and passes. Any other failure fails it.

mod common;

use common::BIN;
use std::fs;
use std::path::Path;
use std::process::Command;
use std::sync::Mutex;
use testsupport::bytes::bytes;
use testsupport::process::describe;

/// The exit status by which scripts/cluster says it cannot run here.
const SKIPPED: i32 = 77;

/// One scenario at a time: the NFS remount expects its FUSE mount to get its device
/// number back, which a mount made meanwhile by the other scenario would take.
static SERIAL: Mutex<()> = Mutex::new(());

/// `files` files of 0 to 96 KiB in four directories (one left empty), deterministic
/// bytes.
fn make_tree(dir: &Path, files: u64) {
    for d in 0..4 {
        fs::create_dir_all(dir.join(format!("d{d}/sub"))).expect("tree dir");
    }
    for i in 0..files {
        let len = (i * 7919 % 97) as usize * 1024 + (i as usize % 13);
        let path = dir.join(format!("d{}/f{i}", i % 3));
        fs::write(path, bytes(i, len)).expect("tree file");
    }
}

/// `scripts/cluster CMD WORK` on a fresh tree of `files` files, with `env` besides; the
/// script's output, or None when it says it cannot run here.
fn cluster(cmd: &str, files: u64, env: &[(&str, &str)]) -> Option<String> {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let scratch = testsupport::scratch!();
    let tree = scratch.path().join("tree");
    make_tree(&tree, files);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/cluster");
    let out = Command::new(script)
        .arg(cmd)
        .arg(scratch.path().join("work"))
        .env("AUGEFS", BIN)
        .env("TREE", &tree)
        .env("BRICK_SIZE", "512M")
        .envs(env.iter().copied())
        .output()
        .expect("run scripts/cluster");
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(SKIPPED) {
        println!("SKIPPED scripts/cluster {cmd}: {}", stderr.trim());
        return None;
    }
    assert!(
        out.status.success(),
        "scripts/cluster {cmd}: {}",
        describe(&out)
    );
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn brick_killed_during_a_copy_heals_identical_and_bricks_fsck_clean() {
    let Some(out) = cluster("check", 120, &[]) else {
        return;
    };
    assert!(out.contains("round 1: killed brick"), "{out}");
    assert!(out.contains("entries identical on all 3 bricks"), "{out}");
    assert_eq!(
        out.matches(": clean").count(),
        3,
        "fsck of each brick: {out}"
    );
}

/// The same with the three bricks in one mount and glusterd, its bricks and its heal
/// daemon attached to that mount's instance (`augefs run --mount`): a brick's health
/// check writes with aio_write, and its readdirs step back with seekdir; with either
/// failing, bricks shut down or the heal never ended. 1,200 files: the heal index of
/// the files the killed brick missed then takes more than one readdir reply.
#[test]
fn attached_bricks_heal_identical_and_fsck_clean() {
    let Some(out) = cluster("check", 1200, &[("BRICKS", "attached")]) else {
        return;
    };
    assert!(out.contains("round 1: killed brick"), "{out}");
    assert!(out.contains("entries identical on all 3 bricks"), "{out}");
    assert_eq!(
        out.matches(": clean").count(),
        1,
        "fsck of the image: {out}"
    );
}

#[test]
fn nfs_export_reads_back_and_keeps_handles_across_a_remount() {
    let Some(out) = cluster("nfs", 120, &[]) else {
        return;
    };
    assert!(
        out.contains("nfs: 120 files copied in with nfs-cp, read back identical"),
        "{out}"
    );
    assert!(
        out.contains("handles ok 20 by the handles taken before"),
        "{out}"
    );
    assert!(
        out.contains("reads back identical after the remount"),
        "{out}"
    );
}
