//! `augefs bench ...` and `augefs amplify ...`: the benchmarks live in their own program,
//! `augefs-bench` (crates/bench), so that the product binary carries no benchmark code
//! and no baseline engine. These commands run it, from the directory of this executable,
//! with the same words: `augefs bench fs --quick` is `augefs-bench fs --quick`, and
//! `augefs amplify --quick` is `augefs-bench amplify --quick`.
//!
//! - The program replaces this process (exec), so its exit status, signals and output
//!   are the benchmark's own, as they were when the benchmarks were part of `augefs`.
//! - A missing `augefs-bench` is an error that says how to build it; nothing else runs.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;

/// The benchmark program's file name, next to `augefs`.
pub const BENCH_EXE: &str = "augefs-bench";

/// Every word after the subcommand, passed on unparsed (`--help` included).
#[derive(clap::Args, Debug)]
#[command(disable_help_flag = true)]
pub struct Args {
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    pub args: Vec<OsString>,
}

/// The benchmark program next to this executable.
fn bench_exe() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find my executable: {e}"))?;
    let bench = exe.with_file_name(BENCH_EXE);
    if bench.exists() {
        return Ok(bench);
    }
    Err(format!(
        "the benchmarks are a separate program: {BENCH_EXE} not found next to {} (build it: \
         cargo build --release -p augefs-bench, with the same profile as augefs)",
        exe.display()
    ))
}

/// Runs `augefs-bench PREFIX ARGS...` in place of this process; returns only on error.
pub fn run(prefix: &[&str], args: Args) -> Result<(), String> {
    let bench = bench_exe()?;
    let err = Command::new(&bench).args(prefix).args(args.args).exec();
    Err(format!("cannot run {}: {err}", bench.display()))
}
