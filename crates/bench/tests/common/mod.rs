//! What the benchmark tests share beside testsupport: the `augefs-bench` binary, and the
//! benchmarks' scratch directory, whose guard undoes loop devices and mounts.

#![allow(dead_code)] // each test binary uses its own part of this module

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use testsupport::fuse::mounts_in;

pub const BIN: &str = env!("CARGO_BIN_EXE_augefs-bench");

/// `augefs-bench args...`.
pub fn augefs_bench<A: AsRef<OsStr>>(args: &[A]) -> Output {
    testsupport::process::run(BIN, args)
}

/// Benchmarks' scratch: a directory on the target's file system (which supports O_DIRECT;
/// /tmp may not), whose loop devices and mounts are undone on drop, also after a failed
/// assert.
pub struct BenchScratch {
    dir: tempfile::TempDir,
}

impl BenchScratch {
    /// Asserts that the benchmark left no image file, no loop device on one, and no mount
    /// behind.
    pub fn assert_cleaned_up(&self) {
        for image in images(self.path()) {
            assert!(
                loop_devices(&image).is_empty(),
                "{} still attached",
                image.display()
            );
        }
        assert!(images(self.path()).is_empty(), "image files removed");
        let mounts = mounts_in(self.path());
        assert!(mounts.is_empty(), "mounts left: {mounts:?}");
    }

    pub fn new() -> BenchScratch {
        BenchScratch {
            dir: testsupport::scratch!(),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for BenchScratch {
    fn drop(&mut self) {
        let dir = self.path().to_path_buf();
        for target in mounts_in(&dir) {
            let _ = Command::new("umount").arg("-l").arg(&target).status();
        }
        for image in images(&dir) {
            for device in loop_devices(&image) {
                let _ = Command::new("losetup").args(["-d", &device]).status();
            }
        }
    }
}

pub fn images(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "img"))
                .collect()
        })
        .unwrap_or_default()
}

/// A compared system in a benchmark's JSON (with `measured` and `note`): asserts that it
/// was measured if `available`, else that its note says why it was skipped; returns
/// whether it was measured.
pub fn measured_if(entry: &serde_json::Value, available: bool) -> bool {
    assert_eq!(entry["measured"], available, "{entry}");
    if !available {
        let note = entry["note"].as_str().unwrap_or_default();
        assert!(note.starts_with("skipped"), "{entry}");
        eprintln!("{} {note}", entry["name"]);
    }
    available
}

/// Whether this process may make `fs_type` on a loop device: root, with its mkfs.
pub fn can_make(fs_type: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let mkfs = format!("mkfs.{fs_type}");
    root && ["/sbin", "/usr/sbin"]
        .iter()
        .any(|d| Path::new(d).join(&mkfs).exists())
}

/// Loop devices backed by `image` (`losetup -j`).
pub fn loop_devices(image: &Path) -> Vec<String> {
    let Ok(out) = Command::new("losetup").arg("-j").arg(image).output() else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split(':').next().map(str::to_string))
        .collect()
}

/// Loop devices whose backing file is in `dir` (`losetup -a`; a deleted image too).
pub fn loop_devices_in(dir: &Path) -> Vec<String> {
    let Ok(out) = Command::new("losetup").arg("-a").output() else {
        return Vec::new();
    };
    let dir = dir.to_string_lossy().into_owned();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(&dir))
        .map(str::to_string)
        .collect()
}
