//! `augefs`: the command-line front end. It parses arguments, calls the engine and
//! prints; no file-system logic lives here.
// Library code says why it cannot fail (`expect`) or returns an error; tests may unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

mod cmd;
mod ui;

use clap::{Parser, Subcommand};
use std::ffi::OsString;
use std::path::Path;
use std::process::ExitCode;

/// mimalloc for every allocation of the command (mount, FUSE daemon, interposer): the
/// metadata path allocates and frees small keys, values and records per operation, and
/// glibc's malloc spent about a fifth of a create in consolidating and unlinking chunks.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    /// Mount an image with FUSE (as a daemon unless -f; unmount with `umount DIR`).
    Mount(cmd::mount::Args),
    /// Run a program with the LD_PRELOAD interposer: paths under the prefix reach the
    /// image without the kernel (`augefs run --image I -- CMD...`).
    Run(cmd::run::Args),
    /// Run crash workloads: every crash state recovered and checked (docs/TESTING.md).
    Crashtest(cmd::crashtest::Args),
    /// Change an unmounted image's label or uuid (as tune2fs -L, xfs_admin -L).
    Tune(cmd::tune::Args),
    /// Grow an unmounted file system into a larger image or device (as resize2fs).
    Resize(cmd::resize::Args),
    /// Check an image offline (and repair it with -p or -y); e2fsck's exit codes.
    Fsck(cmd::fsck::Args),
    /// IO amplification (io-amplification.txt's workloads) beside ext2/ext4/xfs/btrfs
    /// (runs `augefs-bench amplify`).
    Amplify(cmd::bench::Args),
    /// Benchmarks: device, metadb, engine, fs, report (runs `augefs-bench`, built by
    /// `cargo build --release -p augefs-bench`; `augefs bench --help` lists them).
    Bench(cmd::bench::Args),
    /// Write the man pages into a directory (scripts/install does).
    #[command(hide = true)]
    Man(cmd::man::Args),
}

/// The arguments, with those of a `mount.fuse.augefs IMAGE DIR [-o OPTS]` invocation
/// (the helper mount(8) runs for `mount -t fuse.augefs`, a symlink to this binary)
/// turned into `augefs mount IMAGE DIR [-o OPTS]`. mount(8)'s -n (no mtab), -s
/// (sloppy) and -v (verbose) flags mean nothing here and are dropped.
fn arguments() -> Vec<OsString> {
    let args: Vec<OsString> = std::env::args_os().collect();
    let helper = args
        .first()
        .and_then(|a| Path::new(a).file_name())
        .is_some_and(|n| n.to_string_lossy().starts_with("mount."));
    if !helper {
        return args;
    }
    let mut out = vec![OsString::from("augefs"), OsString::from("mount")];
    out.extend(
        args.into_iter()
            .skip(1)
            .filter(|a| !["-n", "-s", "-v"].iter().any(|f| a == f)),
    );
    out
}

/// Gives SIGPIPE back its default action (Rust's runtime ignores it, so a write to a
/// closed pipe fails with EPIPE and `println!` panics): `augefs inspect IMAGE | head`
/// then ends quietly when `head` exits, as other command-line tools do. Commands that
/// own kernel state while they run keep ignoring it: `mount` (its daemon must outlive a
/// parent that went away, or the mount is left dead); `bench` and `amplify` hand over
/// to `augefs-bench`, which ignores it again (Rust's runtime does at every start).
fn restore_sigpipe(args: &[OsString]) {
    let keep_ignored = args.get(1).is_some_and(|a| a == "mount");
    if !keep_ignored {
        // SAFETY: called first thing in main, before any thread exists; SIG_DFL is a
        // valid disposition for SIGPIPE.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
}

fn main() -> ExitCode {
    let args = arguments();
    restore_sigpipe(&args);
    let fsck = args.get(1).is_some_and(|a| a == "fsck");
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        // fsck's usage errors exit 16, as e2fsck's do; other commands keep clap's 2.
        Err(e) if e.use_stderr() && fsck => {
            let _ = e.print();
            return ExitCode::from(cmd::fsck::EXIT_USAGE);
        }
        Err(e) => e.exit(),
    };
    let result = match cli.command {
        Command::Fsck(args) => return cmd::fsck::run(args),
        Command::Run(args) => return cmd::run::run(args),
        Command::Mkfs(args) => cmd::mkfs::run(args),
        Command::Inspect(args) => cmd::inspect::run(args),
        Command::Tune(args) => cmd::tune::run(args),
        Command::Resize(args) => cmd::resize::run(args),
        Command::Man(args) => cmd::man::run::<Cli>(args),
        Command::Mount(args) => cmd::mount::run(args),
        Command::Crashtest(args) => cmd::crashtest::run(args),
        Command::Amplify(args) => cmd::bench::run(&["amplify"], args),
        Command::Bench(args) => cmd::bench::run(&[], args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("augefs: error: {message}");
            ExitCode::FAILURE
        }
    }
}
