//! `augefs bench engine [--dir DIR] [--image-size 4G] [--threads 1,2,4] [--seconds S]
//! [--runs N] [--figures fsync,recovery,domains] [--domains 1,2,4,8,16] [--crash-size 1G]
//! [--no-baseline] [--backend B] [--json] [--json-file F] [--keep]`: the engine's data
//! log (docs/DESIGN.md §9) as the issue asks to measure it, with ext4 on the same disk
//! as the baseline of the same run.
//!
//! Figures, each measured `--runs` times:
//! - **fsync**: for each thread count T, T threads each append 4 KiB blocks with
//!   `Durability::Fsync` to a file of their own (inodes 1..=T, so distinct domains) for
//!   `--seconds`, with `FsyncPath::Async` and with `FsyncPath::Ordered`, and the same
//!   workload (`pwrite` + `fdatasync`) on ext4 on a loop device; the three take turns
//!   in every run. Ops/s, async over ordered and async over ext4 run by run, and the
//!   device bytes and flushes per fsync by cause.
//! - **recovery**: a child process appends 64 KiB with fsync from 4 threads and is
//!   killed with SIGKILL once `--crash-size` (1 GiB) is acknowledged; `Engine::open` is
//!   timed and every acknowledged write checked (`crash.rs`). Goal: at most 400 ms.
//! - **domains**: 4 threads as in fsync (async path) on images formatted with each of
//!   `--domains` (counts the image cannot hold are skipped and said so); ops/s and the
//!   ratio to one domain, run by run.
//!
//! Invariants:
//! - Every measurement starts from a freshly formatted image; the image file is written
//!   in full once first.
//! - One engine is open at a time: during the recovery figure the child's, then the
//!   parent's (the device layer locks the image).
//! - The bench files carry the process id and are removed at the end (also after an
//!   error) unless `--keep`; the ext4 baseline is undone by a guard, also on a panic.
//! - Progress goes to stderr; the table or JSON alone to stdout.
//! - No file-system logic here: the workloads drive `engine::log::Engine`'s public API.

mod crash;
mod ext4;
mod figures;
mod output;
mod report;
mod subject;
mod workload;

pub use crash::{child as crash_child, ChildArgs as CrashChildArgs};

use crate::image::DeviceFacts;
use crate::options::{check_image_size, check_seconds, check_threads, Common};
use crate::scratch::Scratch;
use format::constants::DOMAIN_COUNT_MAX;
use format::geometry::Geometry;
use platform::units::{human, parse_size};
use platform::SystemClock;
use report::Report;
use std::path::PathBuf;
use std::sync::Arc;
use subject::{Mounted, Setup};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Directory for the image files, on the disk under test (created if missing).
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
    /// Size of the augefs image, e.g. 4G (the recovery figure needs 1.5 x --crash-size).
    #[arg(long, value_parser = parse_size, default_value = "4GiB")]
    pub image_size: u64,
    /// Writer thread counts of the fsync figure.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    pub threads: Vec<usize>,
    /// Length of one throughput run.
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// Which figures to measure.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "fsync,recovery,domains"
    )]
    pub figures: Vec<FigureSet>,
    /// Domain counts of the domains figure.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16")]
    pub domains: Vec<u32>,
    /// Acknowledged appends after which the recovery figure's child is killed.
    #[arg(long, value_parser = parse_size, default_value = "1GiB")]
    pub crash_size: u64,
    /// Skip the ext4 baseline (it needs root, mkfs.ext4, losetup and mount).
    #[arg(long)]
    pub no_baseline: bool,
    #[command(flatten)]
    pub common: Common,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum FigureSet {
    Fsync,
    Recovery,
    Domains,
}

fn validate(args: &Args) -> Result<(), String> {
    check_image_size(args.image_size)?;
    let domains = Geometry::default_domain_count(args.image_size).map_err(|e| e.to_string())?;
    let geometry = Geometry::compute(args.image_size, domains).map_err(|e| e.to_string())?;
    check_threads(&args.threads)?;
    check_seconds(args.seconds)?;
    if args.common.runs == 0 {
        return Err("--runs must be at least 1".to_string());
    }
    if args.figures.is_empty() {
        return Err("--figures must name at least one of fsync, recovery, domains".to_string());
    }
    if args.domains.is_empty() || args.domains.iter().any(|&d| d == 0 || d > DOMAIN_COUNT_MAX) {
        return Err(format!(
            "--domains must list counts in 1..={DOMAIN_COUNT_MAX}"
        ));
    }
    let write = crash::CRASH_WRITE_BYTES;
    if args.crash_size < write || args.crash_size % write != 0 {
        return Err(format!(
            "--crash-size must be a positive multiple of {}",
            human(write)
        ));
    }
    // The child may issue a quarter more than it is killed at, and tables need room.
    let needed = args.crash_size / 2 * 3;
    if args.figures.contains(&FigureSet::Recovery) && needed > geometry.segment_bytes() {
        return Err(format!(
            "--image-size {} is too small for --crash-size {}: the recovery figure needs about {} of segments",
            human(args.image_size),
            human(args.crash_size),
            human(needed)
        ));
    }
    Ok(())
}

/// The files of one invocation.
#[derive(Debug)]
struct Paths {
    scratch: Scratch,
    image: PathBuf,
}

/// Facts about the machine and the images, noted as they are met.
#[derive(Debug, Default)]
struct Environment {
    device: DeviceFacts,
    default_domains: Option<u32>,
    segment_count: Option<u32>,
    cpus: usize,
    /// How the ext4 baseline was set up, or why it was skipped.
    ext4: Option<String>,
    domains_skipped: Vec<u32>,
}

impl Environment {
    fn note(&mut self, mounted: &Mounted) {
        self.device.note(&mounted.device);
    }
}

pub fn run(args: Args) -> Result<(), String> {
    validate(&args)?;
    let scratch = Scratch::create(&args.dir)?.keeping(args.common.keep);
    let paths = Paths {
        image: scratch.named("engine", ".img"),
        scratch,
    };
    let measured = measure(&args, &paths);
    if args.common.keep {
        eprintln!("augefs: kept {}", paths.image.display());
        paths.scratch.remove(&[], &[]);
    } else {
        paths.scratch.remove(&[&paths.image], &[]);
    }
    let (report, env) = measured?;
    let json = output::report_json(&args, &paths, &env, &report);
    args.common.emit(&json, || {
        output::print_header(&args, &paths, &env);
        report.print_table(args.crash_size);
        output::print_recoveries(&report);
        for goal in output::goals(&args, &report) {
            println!("goal: {}: {}", goal.text, goal.verdict());
        }
        for reference in output::references(&report) {
            println!("reference: {reference}");
        }
    })
}

fn measure(args: &Args, paths: &Paths) -> Result<(Report, Environment), String> {
    let setup = Setup {
        image: paths.image.clone(),
        image_bytes: args.image_size,
        backend: args.common.backend,
        clock: Arc::new(SystemClock::new()),
    };
    let mut env = Environment {
        cpus: std::thread::available_parallelism().map_or(1, usize::from),
        default_domains: Some(setup.default_domains()?),
        segment_count: Geometry::compute(args.image_size, setup.default_domains()?)
            .ok()
            .map(|g| g.segment_count),
        ..Environment::default()
    };
    setup.prepare_image()?;
    let mut report = Report::default();
    if args.figures.contains(&FigureSet::Fsync) {
        figures::fsync_figure(args, &setup, &paths.scratch, &mut report, &mut env)?;
    }
    if args.figures.contains(&FigureSet::Recovery) {
        crash::recovery_figure(args, &setup, &mut report, &mut env)?;
    }
    if args.figures.contains(&FigureSet::Domains) {
        figures::domains_figure(args, &setup, &mut report, &mut env)?;
    }
    Ok((report, env))
}
