//! What the `augefs` binary's tests share beside testsupport: the binary, its mkfs,
//! and `augefs run` with the C programs tests run under it.

#![allow(dead_code)] // each test binary uses its own part of this module

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use testsupport::fuse::Fixture;
use testsupport::process::check;

pub const BIN: &str = env!("CARGO_BIN_EXE_augefs");

/// `augefs args...`.
pub fn augefs<A: AsRef<OsStr>>(args: &[A]) -> Output {
    testsupport::process::run(BIN, args)
}

/// `augefs mkfs IMAGE --size SIZE extra...`.
pub fn mkfs(image: &Path, size: &str, extra: &[&str]) -> Output {
    let mut args = vec![image.as_os_str(), OsStr::new("--size"), OsStr::new(size)];
    args.extend(extra.iter().map(OsStr::new));
    Command::new(BIN)
        .arg("mkfs")
        .args(args)
        .output()
        .expect("run augefs mkfs")
}

/// A fresh image made by this binary and a mount point (testsupport's FUSE guard).
pub fn fixture() -> Fixture {
    Fixture::new(BIN)
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
