//! `augefs-bench`: the benchmark lab of augefs, apart from the product. It measures the
//! device layer, MetaDB (beside fjall), the engine's data log, the file system through
//! its API, FUSE and the interposer (beside the kernel's file systems), IO amplification,
//! and writes the whole comparison as a report (docs/DESIGN.md §14). Users reach it
//! as `augefs bench ...` and `augefs amplify ...`, which run this binary from the
//! directory of `augefs`.
//!
//! - No product crate depends on this one: the shipped `augefs` carries no baseline
//!   engine and no benchmark code. This crate opens images through the product's front
//!   door (`vfs::image`, the engine and device APIs) and drives the product's binary
//!   (`augefs mount`, `augefs run`, found next to this one: `siblings`).
//! - Helpers shared by the subcommands live at the top of the crate: common options,
//!   scratch files named with the process id, images written in full once, augefs
//!   formatted and mounted through its API, the emulated PMR, loop devices with kernel
//!   file systems on them, either kind made fresh as a target of `files` and `aged`,
//!   worker threads run for a fixed time (with latency samples), CPU time of processes,
//!   the order compared systems take turns in, SVG line charts, short units for tables,
//!   medians and spreads, fio, and the verdicts on an issue's goals.
//! - Every mount, loop device, daemon and scratch file a run makes is undone by a guard,
//!   and by `interrupt` after SIGINT, SIGTERM or SIGHUP; SIGPIPE stays ignored (Rust's
//!   default), so a closed pipe ends a run through its guards too.

// Library code says why it cannot fail (`expect`) or returns an error; tests may unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

mod augefs;
mod child;
mod cmd;
mod cpu;
mod fio;
mod goal;
mod image;
mod image_target;
mod interrupt;
mod kernelfs;
mod loopdev;
mod options;
mod plot;
mod pmr;
mod scratch;
mod siblings;
mod stats;
mod threads;
mod turns;
mod units;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// mimalloc, as the `augefs` binary has: the api targets run the file system in this
/// process, and glibc's malloc spent about a fifth of a create in consolidating and
/// unlinking chunks, so a different allocator here would measure a different product.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(
    name = "augefs-bench",
    version,
    about = "augefs benchmarks (also run as `augefs bench ...` and `augefs amplify ...`)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Raw device-layer throughput beside fio on the same file.
    Device(cmd::bench_device::Args),
    /// MetaDB put, get and recovery figures beside fjall on the same disk.
    Metadb(cmd::bench_metadb::Args),
    /// The engine's data log: append+fsync on both fsync paths beside ext4, recovery
    /// after a real crash, and throughput across domain counts.
    Engine(cmd::bench_engine::Args),
    /// The process `engine` crashes for its recovery figure (not for direct use).
    #[command(hide = true)]
    EngineCrashChild(cmd::bench_engine::CrashChildArgs),
    /// File-system workloads (metadata, data, Filebench-like) on augefs through its API,
    /// FUSE and the interposer, beside a directory and ext2/ext4/xfs/btrfs.
    Fs(cmd::bench_fs::Args),
    /// One phase of one `fs` cell, run under the interposer (not for direct use).
    #[command(hide = true)]
    FsWorker(cmd::bench_fs::WorkerArgs),
    /// The whole comparison in one run (fs on every target, fio, amplify, metadb): a
    /// Markdown report with the machine, the goals, tables, JSON and plots under
    /// bench/results/<UTC date-time>/.
    Report(cmd::report::Args),
    /// IO amplification (io-amplification.txt's workloads) beside ext2/ext4/xfs/btrfs.
    Amplify(cmd::amplify::Args),
    /// The whole file system's recovery after a crash at scale: a child writes small
    /// fsync'd files and logs, is killed, and the mount is timed with its breakdown.
    Recovery(cmd::recovery::Args),
    /// The standard workloads on a fresh file system and on the same one aged (filled
    /// to 90%, then files deleted and rewritten), beside kernel file systems.
    Aged(cmd::aged::Args),
    /// Millions of files: creates by window, then a cold mount and random stats and
    /// reads, beside kernel file systems.
    Files(cmd::files::Args),
    /// Real programs (tar, git, rm -rf, make, sqlite3, db_bench, dd) on a FUSE mount,
    /// attached to its instance and on kernel file systems, in one run.
    Apps(cmd::apps::Args),
    /// The process `recovery` crashes (not for direct use).
    #[command(hide = true)]
    RecoveryChild(cmd::recovery::ChildArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Device(args) => cmd::bench_device::run(args),
        Command::Metadb(args) => cmd::bench_metadb::run(args),
        Command::Engine(args) => cmd::bench_engine::run(args),
        Command::EngineCrashChild(args) => cmd::bench_engine::crash_child(args),
        Command::Fs(args) => cmd::bench_fs::run(args),
        Command::FsWorker(args) => cmd::bench_fs::worker(args),
        Command::Report(args) => cmd::report::run(args),
        Command::Amplify(args) => cmd::amplify::run(args),
        Command::Recovery(args) => cmd::recovery::run(args),
        Command::Files(args) => cmd::files::run(args),
        Command::Aged(args) => cmd::aged::run(args),
        Command::Apps(args) => cmd::apps::run(args),
        Command::RecoveryChild(args) => cmd::recovery::child(args),
    };
    // A signal's undo runs on its own thread; let it finish and exit with 128 + signal.
    interrupt::wait_if_interrupted();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("augefs-bench: error: {message}");
            ExitCode::FAILURE
        }
    }
}
