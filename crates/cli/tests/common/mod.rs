//! Shared by the FUSE mount tests: run the real `augefs` binary, mkfs an image, mount it as
//! a daemon, and a guard that unmounts and kills the daemon even when a test panics.

#![allow(dead_code)] // each test binary uses its own part of this module

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};
use tempfile::TempDir;

pub const BIN: &str = env!("CARGO_BIN_EXE_augefs");

pub fn check(what: &str, out: &Output) {
    assert!(
        out.status.success(),
        "{what} failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs a bash script (set -euo pipefail) with `vars` in its environment; its stdout.
pub fn sh(script: &str, vars: &[(&str, &Path)]) -> String {
    let mut cmd = Command::new("bash");
    cmd.arg("-c").arg(format!("set -euo pipefail\n{script}"));
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run bash");
    check(script, &out);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn augefs(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(BIN).args(args).output().expect("run augefs")
}

pub fn is_mounted(dir: &Path) -> bool {
    let mounts = fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let dir = dir.to_string_lossy();
    mounts
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(dir.as_ref()))
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

pub fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "timed out: {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A fresh image and a mount point; unmounts and kills its daemon when dropped.
pub struct Fixture {
    _tmp: TempDir,
    pub image: PathBuf,
    pub mnt: PathBuf,
    /// Scratch space on the host file system.
    pub host: PathBuf,
}

impl Fixture {
    pub fn new() -> Fixture {
        assert!(
            Path::new("/dev/fuse").exists(),
            "/dev/fuse is missing: these tests mount with FUSE"
        );
        let tmp = TempDir::new().expect("tempdir");
        let root = fs::canonicalize(tmp.path()).expect("canonical tempdir");
        let (image, mnt, host) = (root.join("img"), root.join("mnt"), root.join("host"));
        fs::create_dir(&mnt).expect("mount point");
        fs::create_dir(&host).expect("host dir");
        let out = augefs(&[
            "mkfs".as_ref(),
            image.as_os_str(),
            "--size".as_ref(),
            "512M".as_ref(),
        ]);
        check("mkfs", &out);
        Fixture {
            _tmp: tmp,
            image,
            mnt,
            host,
        }
    }

    pub fn mount(&self) {
        self.mount_with(BIN, &["mount"], &[]);
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
        let out = augefs(&["fsck".as_ref(), self.image.as_os_str(), "-n".as_ref()]);
        check("augefs fsck -n", &out);
    }

    /// `augefs fsck IMAGE -n --verify-data` exits 0: clean, and every mapped block
    /// matches its checksum.
    pub fn fsck_clean_verified(&self) {
        let out = augefs(&[
            "fsck".as_ref(),
            self.image.as_os_str(),
            "-n".as_ref(),
            "--verify-data".as_ref(),
        ]);
        check("augefs fsck -n --verify-data", &out);
    }

    pub fn vars(&self) -> Vec<(&'static str, &Path)> {
        vec![("MNT", &self.mnt), ("HOST", &self.host)]
    }
}

/// `augefs run` and the C programs tests run under it (tests/run_apps.rs,
/// tests/special.rs).
pub fn preload_built() {
    let lib = Path::new(BIN).with_file_name("libaugefs_preload.so");
    assert!(
        lib.exists(),
        "{} is missing: run `cargo build -p augefs-preload` first (scripts/test does)",
        lib.display()
    );
}

/// The interposer's log of this fixture.
pub fn log_of(fx: &Fixture) -> PathBuf {
    fx.host.join("interposer.log")
}

/// `augefs run --image IMG --log LOG -- args...`.
pub fn run(fx: &Fixture, args: &[&str]) -> Output {
    preload_built();
    Command::new(BIN)
        .arg("run")
        .arg("--image")
        .arg(&fx.image)
        .arg("--log")
        .arg(log_of(fx))
        .arg("--")
        .args(args)
        .output()
        .expect("run augefs run")
}

pub fn stdout(what: &str, out: &Output) -> String {
    check(what, out);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Compiles tests/`dir`/`name`.c into the fixture's host directory.
pub fn compile_c(fx: &Fixture, dir: &str, name: &str) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/{dir}/{name}.c"));
    let exe = fx.host.join(name);
    let cc = Command::new("cc")
        .arg("-O1")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("cc (install gcc: scripts/test does)");
    check(&format!("cc {name}.c"), &cc);
    exe
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

/// Deterministic bytes (xorshift64*).
pub fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8
        })
        .collect()
}
