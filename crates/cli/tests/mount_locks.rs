//! Locks through FUSE (docs/SEMANTICS.md §4): on an `augefs mount`, processes contend
//! for flock, fcntl record and OFD locks as on ext4 (`mount_locks/locks.py`: conflicts,
//! F_GETLK's holder pid, release at close, at a holder's SIGKILL, and a killed F_SETLKW
//! waiter goes away); under one `augefs run` the owner process (the vfs's lock tables
//! directly) and its children (through the bridge) contend the same way
//! (`mount_locks/owner_locks.py`). And the headline: two sqlite3 writers of one database,
//! many small transactions each for 10 s (`LOCK_SQLITE_SECS=60` for the long run), on a
//! mount and under `augefs run`, end with `PRAGMA integrity_check` ok and every row.
//!
//! Needs root, /dev/fuse and python3 with its sqlite3 module; `augefs run` needs
//! `libaugefs_preload.so` next to the binary (scripts/test builds it).

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use testsupport::fuse::Fixture;
use testsupport::process::{check, sh};

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/mount_locks")
        .join(name)
}

/// Seconds each sqlite writer inserts for.
fn sqlite_secs() -> String {
    std::env::var("LOCK_SQLITE_SECS").unwrap_or_else(|_| "10".to_string())
}

#[test]
fn processes_contend_for_locks_on_a_mount() {
    let fx = fixture();
    fx.mount();
    let out = sh(
        &format!("python3 {} \"$MNT\" main", script("locks.py").display()),
        &fx.vars(),
    );
    assert!(out.ends_with("all ok\n"), "{out}");
    fx.unmount();
}

#[test]
fn two_sqlite_writers_on_a_mount() {
    let fx = fixture();
    fx.mount();
    let out = sh(
        &format!(
            "python3 {} \"$MNT/db\" {}",
            script("sqlite_writers.py").display(),
            sqlite_secs()
        ),
        &fx.vars(),
    );
    eprintln!("mount: {out}");
    assert!(out.starts_with("rows ") && out.contains(" ok"), "{out}");
    fx.unmount();
    fx.fsck_clean();
}

/// `augefs run --image IMG -- sh -c SCRIPT`'s standard output (it must succeed).
fn run_sh(fx: &Fixture, script: &str) -> String {
    let lib = Path::new(BIN).with_file_name("libaugefs_preload.so");
    assert!(
        lib.exists(),
        "{}: build augefs-preload first",
        lib.display()
    );
    let out = Command::new(BIN)
        .arg("run")
        .arg("--image")
        .arg(&fx.image)
        .arg("--log")
        .arg(fx.host.join("interposer.log"))
        .args(["--", "sh", "-c", script])
        .output()
        .expect("run augefs run");
    check(script, &out);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_owner_and_its_children_contend_for_locks_under_augefs_run() {
    let fx = fixture();
    let out = run_sh(
        &fx,
        &format!(
            "python3 {} /augefs {}",
            script("owner_locks.py").display(),
            script("locks.py").display()
        ),
    );
    assert!(out.ends_with("all ok\n"), "{out}");
    fx.fsck_clean();
}

#[test]
fn two_sqlite_writers_under_augefs_run() {
    let fx = fixture();
    let out = run_sh(
        &fx,
        &format!(
            "python3 {} /augefs/db {}",
            script("sqlite_writers.py").display(),
            sqlite_secs()
        ),
    );
    eprintln!("augefs run: {out}");
    assert!(out.starts_with("rows ") && out.contains(" ok"), "{out}");
    fx.fsck_clean();
}
