//! `augefs`: the command-line front end. It parses arguments, calls the engine and
//! prints; no file-system logic lives here.

mod bench;
mod cmd;
mod fio;
mod size;
mod stats;
mod ui;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "augefs",
    version,
    about = "augefs: a scalable userspace log-structured file system for SSDs"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Format an image file or block device.
    Mkfs(cmd::mkfs::Args),
    /// Show an image's superblock, geometry, checkpoint state and IO backend.
    Inspect(cmd::inspect::Args),
    /// Check an image offline (and repair it with -p or -y); e2fsck's exit codes.
    Fsck(cmd::fsck::Args),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(BenchCommand),
}

#[derive(Subcommand, Debug)]
enum BenchCommand {
    /// Raw device-layer throughput beside fio on the same file.
    Device(cmd::bench_device::Args),
    /// MetaDB put, get and recovery figures beside fjall on the same disk.
    Metadb(cmd::bench_metadb::Args),
    /// The engine's data log: append+fsync on both fsync paths beside ext4, recovery
    /// after a real crash, and throughput across domain counts.
    Engine(cmd::bench_engine::Args),
    /// The process `bench engine` crashes for its recovery figure (not for direct use).
    #[command(hide = true)]
    EngineCrashChild(cmd::bench_engine::CrashChildArgs),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // fsck's usage errors exit 16, as e2fsck's do; other commands keep clap's 2.
        Err(e) if e.use_stderr() && std::env::args().nth(1).as_deref() == Some("fsck") => {
            let _ = e.print();
            return ExitCode::from(cmd::fsck::EXIT_USAGE);
        }
        Err(e) => e.exit(),
    };
    let result = match cli.command {
        Command::Fsck(args) => return cmd::fsck::run(args),
        Command::Mkfs(args) => cmd::mkfs::run(args),
        Command::Inspect(args) => cmd::inspect::run(args),
        Command::Bench(BenchCommand::Device(args)) => cmd::bench_device::run(args),
        Command::Bench(BenchCommand::Metadb(args)) => cmd::bench_metadb::run(args),
        Command::Bench(BenchCommand::Engine(args)) => cmd::bench_engine::run(args),
        Command::Bench(BenchCommand::EngineCrashChild(args)) => {
            cmd::bench_engine::crash_child(args)
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("augefs: error: {message}");
            ExitCode::FAILURE
        }
    }
}
