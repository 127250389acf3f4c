//! FUSE mounts made by the real binary: the mount table, the daemons serving a mount,
//! and [`Fixture`], a fresh image and mount point whose drop unmounts and kills the
//! daemon, also when a test panics.

use crate::process::{check, run, wait_until};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use tempfile::TempDir;

/// The mount points of this process's namespace (`/proc/self/mountinfo`).
pub fn mount_points() -> Vec<PathBuf> {
    platform::mountinfo::mounts()
        .into_iter()
        .map(|m| m.point)
        .collect()
}

/// The mountinfo line of the mount at `dir`.
pub fn mount_line(dir: &Path) -> Option<String> {
    let dir = dir.to_string_lossy();
    fs::read_to_string("/proc/self/mountinfo")
        .expect("mountinfo")
        .lines()
        .find(|l| l.split(' ').nth(4) == Some(dir.as_ref()))
        .map(str::to_string)
}

pub fn is_mounted(dir: &Path) -> bool {
    mount_line(dir).is_some()
}

/// The mount points at or under `dir`.
pub fn mounts_in(dir: &Path) -> Vec<PathBuf> {
    mount_points()
        .into_iter()
        .filter(|t| t.starts_with(dir))
        .collect()
}

/// Processes whose command line is a mount daemon serving `dir`.
pub fn daemons(dir: &Path) -> Vec<u32> {
    let dir = dir.to_string_lossy().into_owned();
    let mut pids = Vec::new();
    for e in fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmdline
            .split(|&b| b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if args.iter().any(|a| a == "--daemon-child") && args.contains(&dir) && alive(pid) {
            pids.push(pid);
        }
    }
    pids
}

/// Running (not gone, not a zombie: a zombie holds no locks).
pub fn alive(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => false,
    }
}

/// A fresh image, made by the `augefs` binary at `bin`, and a mount point; unmounts and
/// kills its daemon when dropped.
#[derive(Debug)]
pub struct Fixture {
    _tmp: TempDir,
    bin: String,
    pub image: PathBuf,
    pub mnt: PathBuf,
    /// Scratch space on the host file system.
    pub host: PathBuf,
}

impl Fixture {
    pub fn new(bin: &str) -> Fixture {
        assert!(
            Path::new("/dev/fuse").exists(),
            "/dev/fuse is missing: these tests mount with FUSE"
        );
        let tmp = TempDir::new().expect("tempdir");
        let root = fs::canonicalize(tmp.path()).expect("canonical tempdir");
        let (image, mnt, host) = (root.join("img"), root.join("mnt"), root.join("host"));
        fs::create_dir(&mnt).expect("mount point");
        fs::create_dir(&host).expect("host dir");
        let out = run(
            bin,
            &[
                "mkfs".as_ref(),
                image.as_os_str(),
                "--size".as_ref(),
                "512M".as_ref(),
            ],
        );
        check("mkfs", &out);
        Fixture {
            _tmp: tmp,
            bin: bin.to_string(),
            image,
            mnt,
            host,
        }
    }

    /// `augefs mount IMAGE DIR`.
    pub fn mount(&self) {
        self.mount_with(&self.bin, &["mount"], &[]);
    }

    /// Mounts by running `program` with `args`, the image, the mount point and `tail`.
    pub fn mount_with(&self, program: &str, args: &[&str], tail: &[&str]) {
        let out = Command::new(program)
            .args(args)
            .arg(&self.image)
            .arg(&self.mnt)
            .args(tail)
            .output()
            .expect("run augefs mount");
        check("augefs mount", &out);
        assert!(is_mounted(&self.mnt), "mounted once `augefs mount` exits");
        assert_eq!(daemons(&self.mnt).len(), 1, "one daemon serves the mount");
    }

    /// Unmounts with `cmd` (e.g. `umount DIR`) and waits for the daemon to finish.
    pub fn unmount_with(&self, cmd: &[&str]) {
        let pids = daemons(&self.mnt);
        let out = Command::new(cmd[0])
            .args(&cmd[1..])
            .arg(&self.mnt)
            .output()
            .expect("run unmount");
        check(cmd[0], &out);
        wait_until("the daemon exits", || pids.iter().all(|&p| !alive(p)));
        assert!(!is_mounted(&self.mnt));
    }

    /// `fusermount3 -u`, waiting for the daemon to exit.
    pub fn unmount(&self) {
        self.unmount_with(&["fusermount3", "-u"]);
    }

    /// `augefs fsck IMAGE -n` (the image unmounted) exits 0: clean.
    pub fn fsck_clean(&self) {
        let out = run(
            &self.bin,
            &["fsck".as_ref(), self.image.as_os_str(), "-n".as_ref()],
        );
        check("augefs fsck -n", &out);
    }

    /// `augefs fsck IMAGE -n --verify-data` exits 0: clean, and every mapped block
    /// matches its checksum.
    pub fn fsck_clean_verified(&self) {
        let image = self.image.as_os_str();
        let out = run(
            &self.bin,
            &[
                "fsck".as_ref(),
                image,
                "-n".as_ref(),
                "--verify-data".as_ref(),
            ],
        );
        check("augefs fsck -n --verify-data", &out);
    }

    /// The environment of [`crate::process::sh`] scripts: `MNT` and `HOST`.
    pub fn vars(&self) -> Vec<(&'static str, &Path)> {
        vec![("MNT", &self.mnt), ("HOST", &self.host)]
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if is_mounted(&self.mnt) {
            let _ = Command::new("fusermount3")
                .args(["-u", "-z"])
                .arg(&self.mnt)
                .output();
        }
        for pid in daemons(&self.mnt) {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).output();
        }
    }
}
