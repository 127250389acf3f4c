//! Running the built binaries and shell scripts, and what their output says.

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// Runs `program` with `args`; its output.
pub fn run<A: AsRef<OsStr>>(program: &str, args: &[A]) -> Output {
    Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {program}: {e}"))
}

/// A command's exit status, stdout and stderr, for a failure message.
pub fn describe(out: &Output) -> String {
    format!(
        "{}\nstdout: {}\nstderr: {}",
        out.status,
        stdout(out),
        stderr(out)
    )
}

/// Asserts that `what` succeeded, else shows its output.
pub fn check(what: &str, out: &Output) {
    assert!(out.status.success(), "{what} failed: {}", describe(out));
}

/// [`check`], then the stdout.
pub fn checked_stdout(what: &str, out: &Output) -> String {
    check(what, out);
    stdout(out)
}

/// A command's output, once it succeeded.
pub fn ok(out: Output) -> Output {
    check("the command", &out);
    out
}

/// Asserts that a command failed as a usage or operational error (exit 1) whose stderr
/// contains `needle`.
pub fn fails_with(out: Output, needle: &str) {
    assert_eq!(out.status.code(), Some(1), "exit code: {}", describe(&out));
    assert!(
        stderr(&out).contains(needle),
        "stderr lacks {needle:?}: {}",
        describe(&out)
    );
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A test path as an argument (test paths are UTF-8).
pub fn s(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// Runs a bash script (set -euo pipefail) with `vars` in its environment; its stdout.
pub fn sh(script: &str, vars: &[(&str, &Path)]) -> String {
    let mut cmd = Command::new("bash");
    cmd.arg("-c").arg(format!("set -euo pipefail\n{script}"));
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run bash");
    checked_stdout(script, &out)
}

/// Waits until `done`, for 30 s at the most.
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
