//! `augefs bench fs [--target LIST] [--workload LIST] [--threads LIST] [--procs] [--seconds S]
//! [--runs N] [--io-size LIST] [--fsync] [--dir DIR] [--baseline T] [--scale F]
//! [--plot DIR] [--pmr-dir DIR] [--pmr-size N] [--pmr-latency-ns N] [--quick] [--json]
//! [--json-file F] [--keep]`: file-system workloads
//! (FxMark's metadata operations, durable appends and overwrites, reads, Filebench-like
//! personalities) on augefs through its API (also with MetaDB's WAL on an emulated
//! PMR), FUSE and the interposer, and on the kernel's file systems, side by side
//! (docs/DESIGN.md §14.2).
//!
//! - `bench_fs/case.rs`: the workloads and their names; `workload.rs`: setup, the
//!   per-thread operations and the timed run; `filebench.rs`: the personalities;
//!   `ops.rs`: the calls, over the API or std::fs; `target.rs` and `interposer.rs`:
//!   where a cell runs; `report.rs`: table, JSON and plots.
//!
//! Invariants:
//! - Runs are interleaved: run r of every cell before run r+1 of any, the targets of a
//!   cell taking turns in going first (`crate::turns`), so a noisy machine's drift hits
//!   them alike.
//! - A target that cannot run (no root, no mkfs, no interposer library) keeps its rows
//!   with a note; a failing run is recorded with its error and the others go on.
//! - Progress goes to stderr (a line per step); the table or JSON alone to stdout.
//! - The PMR of `api-pmr` is emulated and every output says so, with its latency.
//! - Image files carry the process id and are removed at the end (also after an error)
//!   unless `--keep`; mounts, daemons and loop devices are undone by guards.

pub(crate) mod case;
pub(crate) mod filebench;
mod interposer;
pub(crate) mod ops;
mod report;
pub(crate) mod target;
pub(crate) mod workload;

pub use interposer::{worker, WorkerArgs};
pub use report::plot_file_name;

use crate::image;
use crate::kernelfs::{self, KERNEL_FS};
use crate::loopdev::{have_program, LoopDevice};
use crate::options::{check_seconds, check_threads, Common};
use crate::pmr::{EmulatedPmr, PmrArgs};
use crate::scratch::Scratch;
use crate::turns::turn_order;
use case::{parse_cases, Case, Group};
use device::BackendChoice;
use filebench::Scale;
use platform::units::{human, parse_size};
use platform::SystemClock;
use pmr::Pmr;
use report::{Cell, PmrNote, Report, Sample, Target};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use target::InProcess;
use workload::{Sizes, Spec};

/// A first look in a few minutes: a namespace operation, a lookup, durable appends and
/// cached reads.
const DEFAULT_WORKLOADS: &str = "create,unlink,stat,append,randread";

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Tiny sizes and short runs (for tests): numbers are indicative only.
    #[arg(long)]
    pub quick: bool,
    #[command(flatten)]
    pub common: Common,
    /// Targets, comma-separated: api, api-view (api, reads by zero-copy views), api-pmr
    /// (MetaDB's WAL on an emulated PMR), dir (or
    /// dir:PATH), fuse, interposer, attached (processes attached to a mount's instance),
    /// ext2, ext4, xfs, btrfs. Default: api, and ext4 when
    /// run as root.
    #[arg(long, value_delimiter = ',')]
    pub target: Vec<String>,
    /// Workloads, comma-separated: create, mkdir, unlink, rmdir, rename, readdir, open,
    /// stat, append, overwrite, randread, seqread, fileserver, varmail, webserver,
    /// webproxy; variants -shared, -cold (reads), +fsync (metadata); groups metadata,
    /// data, filebench, all.
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_WORKLOADS)]
    pub workload: Vec<String>,
    /// Thread counts, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    pub threads: Vec<usize>,
    /// A thread count N runs as N processes of one thread each, in directories of their
    /// own (the attached, fuse, dir and kernel targets; api and interposer run threads).
    #[arg(long)]
    pub procs: bool,
    /// Seconds per timed run (default 2; 0.2 with --quick).
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Bytes per append and per sequential read, comma-separated (4K..1M and more).
    #[arg(long, value_delimiter = ',', value_parser = parse_size, default_value = "4K")]
    pub io_size: Vec<u64>,
    /// Follow each metadata operation that changes a directory by an fsync of it.
    #[arg(long)]
    pub fsync: bool,
    /// Directory for the image files, on the disk under test (created if missing);
    /// also the directory of the `dir` target.
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
    /// The target ratios are taken against (default: the fastest kernel file system
    /// measured in each cell, else the first target).
    #[arg(long)]
    pub baseline: Option<String>,
    /// Fraction of trio-arckfs.txt Table 4's file counts the personalities use
    /// (default 0.01; 0.001 with --quick).
    #[arg(long)]
    pub scale: Option<f64>,
    /// Files (or directories) per thread for unlink, rmdir, rename, open and stat
    /// (default 10000; 100 with --quick).
    #[arg(long)]
    pub files: Option<u64>,
    /// Entries of the directory readdir lists (default 1000; 50 with --quick).
    #[arg(long)]
    pub dir_entries: Option<u64>,
    /// Each thread's data file, or region of the shared one (default 64M; 1M with
    /// --quick).
    #[arg(long, value_parser = parse_size)]
    pub file_size: Option<u64>,
    /// Size of the augefs and kernel images (default: what the workloads need, twice,
    /// plus 256 MiB, at least 1 GiB; plus 64 MiB, at least 128 MiB with --quick;
    /// at least 512 MiB with xfs).
    #[arg(long, value_parser = parse_size)]
    pub image_size: Option<u64>,
    /// Write an SVG of throughput against threads per workload into this directory.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// The emulated PMR of the api-pmr target.
    #[command(flatten)]
    pub pmr: PmrArgs,
    /// `augefs mount -o` options of the fuse target (for example `read_ahead=0`).
    #[arg(long)]
    pub fuse_options: Option<String>,
}

/// Where a target runs.
#[derive(Debug, Clone, PartialEq)]
enum TargetKind {
    Api,
    /// The api target with reads made by `File::read_view` (no copy).
    ApiView,
    ApiPmr,
    Dir(PathBuf),
    Fuse,
    Interposer,
    Attached,
    Kernel(&'static str),
}

fn parse_target(text: &str, dir: &Path) -> Result<TargetKind, String> {
    Ok(match text {
        "api" => TargetKind::Api,
        "api-view" => TargetKind::ApiView,
        "api-pmr" => TargetKind::ApiPmr,
        "dir" => TargetKind::Dir(dir.to_path_buf()),
        "fuse" => TargetKind::Fuse,
        "interposer" => TargetKind::Interposer,
        "attached" => TargetKind::Attached,
        _ => match (
            text.strip_prefix("dir:"),
            KERNEL_FS.iter().find(|&&k| k == text),
        ) {
            (Some(path), _) if !path.is_empty() => TargetKind::Dir(PathBuf::from(path)),
            (_, Some(&k)) => TargetKind::Kernel(k),
            _ => {
                return Err(format!(
                "--target: unknown target {text:?} (api, api-view, api-pmr, dir, dir:PATH, fuse, \
                     interposer, ext2, ext4, xfs, btrfs)"
            ))
            }
        },
    })
}

/// The checked arguments.
#[derive(Debug)]
struct Plan {
    targets: Vec<(String, TargetKind)>,
    cases: Vec<Case>,
    threads: Vec<usize>,
    seconds: f64,
    runs: u32,
    sizes: Sizes,
    image_bytes: u64,
    procs: bool,
    fuse_options: Option<String>,
}

fn plan(args: &Args) -> Result<Plan, String> {
    let names = if args.target.is_empty() {
        let mut names = vec!["api".to_string()];
        if kernelfs::is_root() {
            names.push("ext4".to_string());
        }
        names
    } else {
        args.target.clone()
    };
    let mut targets = Vec::new();
    for name in names {
        let kind = parse_target(&name, &args.dir)?;
        if !targets.iter().any(|(n, _)| *n == name) {
            targets.push((name, kind));
        }
    }
    if targets.iter().any(|(_, k)| *k == TargetKind::ApiPmr) {
        args.pmr.check_size()?;
    }
    if let Some(b) = &args.baseline {
        if !targets.iter().any(|(n, _)| n == b) {
            return Err(format!("--baseline {b:?} is not one of the targets"));
        }
    }
    check_threads(&args.threads)?;
    let seconds = args.seconds.unwrap_or(if args.quick { 0.2 } else { 2.0 });
    check_seconds(seconds)?;
    if args.common.runs == 0 || args.common.runs > 100 {
        return Err("--runs must be in 1..=100".to_string());
    }
    let cases = parse_cases(&args.workload, args.fsync, &args.io_size)?;
    let mut sizes = sizes(args)?;
    let mut threads = args.threads.clone();
    threads.dedup();
    let image_bytes = image_bytes(args, &cases, &threads, &sizes, &targets);
    if image_bytes % (1 << 20) != 0 || image_bytes < 64 << 20 {
        return Err("--image-size must be a multiple of 1 MiB, at least 64 MiB".to_string());
    }
    // Half the image's inodes at one per block (ext2/ext4 as bench fs makes them).
    sizes.creates_max = image_bytes / kernelfs::EXT_INODE_BYTES / 2;
    Ok(Plan {
        targets,
        cases,
        threads,
        seconds,
        runs: args.common.runs,
        sizes,
        image_bytes,
        procs: args.procs,
        fuse_options: args.fuse_options.clone().filter(|o| !o.is_empty()),
    })
}

fn sizes(args: &Args) -> Result<Sizes, String> {
    let q = args.quick;
    let scale = if q {
        Scale::quick()
    } else {
        Scale {
            files: Scale::DEFAULT_FILES,
            size_divisor: 1,
        }
    };
    let sizes = Sizes {
        files_per_thread: args.files.unwrap_or(if q { 100 } else { 10_000 }),
        dir_entries: args.dir_entries.unwrap_or(if q { 50 } else { 1000 }),
        file_bytes: args.file_size.unwrap_or(if q { 1 << 20 } else { 64 << 20 }),
        creates_max: 0,
        filebench: Scale {
            files: args.scale.unwrap_or(scale.files),
            ..scale
        },
    };
    if !(1..=10_000_000).contains(&sizes.files_per_thread)
        || !(1..=10_000_000).contains(&sizes.dir_entries)
    {
        return Err("--files and --dir-entries must be in 1..=10000000".to_string());
    }
    let largest_io = args.io_size.iter().copied().max().unwrap_or(0);
    if sizes.file_bytes % case::BLOCK_BYTES != 0
        || sizes.file_bytes < largest_io.max(case::BLOCK_BYTES)
    {
        return Err(
            "--file-size must be a multiple of 4 KiB, at least the largest --io-size".to_string(),
        );
    }
    if !(sizes.filebench.files > 0.0 && sizes.filebench.files <= 10.0) {
        return Err("--scale must be in (0, 10]".to_string());
    }
    Ok(sizes)
}

/// The images' size: `--image-size`, or twice the largest data set of a cell plus
/// room for metadata and the file systems' own structures.
fn image_bytes(
    args: &Args,
    cases: &[Case],
    threads: &[usize],
    sizes: &Sizes,
    targets: &[(String, TargetKind)],
) -> u64 {
    if let Some(bytes) = args.image_size {
        return bytes;
    }
    let cell_bytes = |case: &Case, t: usize| match case.kind.group() {
        Group::Data => t as u64 * sizes.file_bytes,
        Group::Filebench => filebench::data_bytes(case.kind, t, &sizes.filebench),
        // An inode and a directory entry per file, a block each at most.
        Group::Metadata => t as u64 * sizes.files_per_thread.max(sizes.dir_entries) * 4096,
    };
    let largest = cases
        .iter()
        .flat_map(|c| threads.iter().map(move |&t| cell_bytes(c, t)))
        .max()
        .unwrap_or(0);
    let (room, mut floor): (u64, u64) = match args.quick {
        true => (64 << 20, 128 << 20),
        false => (256 << 20, 1 << 30),
    };
    if targets.iter().any(|t| t.0 == "xfs") {
        // xfs refuses file systems under 300 MB.
        floor = floor.max(512 << 20);
    }
    (2 * largest + room).div_ceil(1 << 20).max(floor >> 20) << 20
}

pub fn run(args: Args) -> Result<(), String> {
    let report = execute(&args)?;
    args.common
        .emit_value(&report.json(), || report.print_table())
}

/// Measures what `args` asks for (and writes its plots) and returns the JSON document
/// `--json` prints (for `bench report`).
pub fn measure_json(args: &Args) -> Result<serde_json::Value, String> {
    execute(args).map(|report| report.json())
}

/// Measures, removes the bench files (unless `--keep`), writes the plots.
fn execute(args: &Args) -> Result<Report, String> {
    let plan = plan(args)?;
    let scratch = Scratch::create(&args.dir)?.keeping(args.common.keep);
    let augefs_image = scratch.named("bench-fs-augefs", ".img");
    let kernel_image = scratch.named("bench-fs-kernel", ".img");
    let pmr = args
        .pmr
        .emulated("bench-fs", Arc::new(SystemClock::new()))
        .map_err(|e| format!("skipped: {e}"));
    let images = Images {
        augefs: &augefs_image,
        kernel: &kernel_image,
        pmr: &pmr,
        backend: args.common.backend,
    };
    let measured = measure(args, &plan, &scratch, &images);
    if !args.common.keep {
        let pmr_file = pmr.as_ref().map(|p| p.path());
        let files: Vec<&Path> = [&*augefs_image, &*kernel_image]
            .into_iter()
            .chain(pmr_file.ok())
            .collect();
        scratch.remove(&files, &[]);
    }
    let report = measured?;
    if let Some(dir) = &args.plot {
        for path in report.plots(dir)? {
            eprintln!("augefs bench fs: wrote {}", path.display());
        }
    }
    Ok(report)
}

struct Images<'a> {
    augefs: &'a Path,
    kernel: &'a Path,
    /// The api-pmr target's region (not created yet), or why there is none.
    pmr: &'a Result<EmulatedPmr, String>,
    backend: BackendChoice,
}

/// How a target runs its cells.
enum Runner {
    InProcess(Box<dyn InProcess>),
    /// A target with a directory, its cells run by worker processes (`--procs`).
    Processes(Box<dyn InProcess>),
    Interposer(interposer::Interposer),
    Attached(interposer::Attached),
}

impl Runner {
    fn run_cell(&mut self, spec: &Spec) -> Result<Sample, String> {
        match self {
            Runner::Interposer(i) => Ok(Sample {
                run: i.run_cell(spec)?,
                dev_read_bytes: None,
                dev_write_bytes: None,
                pmr_write_bytes: None,
            }),
            Runner::Attached(a) => Ok(Sample {
                run: a.run_cell(spec)?,
                dev_read_bytes: None,
                dev_write_bytes: None,
                pmr_write_bytes: None,
            }),
            Runner::InProcess(t) => {
                t.fresh()?;
                let sample = in_process_cell(t.as_mut(), spec);
                let finished = t.finish();
                let sample = sample?;
                finished.map(|()| sample)
            }
            Runner::Processes(t) => {
                t.fresh()?;
                let sample = processes_cell(t.as_mut(), spec);
                let finished = t.finish();
                let sample = sample?;
                finished.map(|()| sample)
            }
        }
    }
}

/// Setup (made durable), the cold drop if asked, the timed run, and a sync after it
/// (counted: the device bytes include what the run left to write back).
fn in_process_cell(t: &mut dyn InProcess, spec: &Spec) -> Result<Sample, String> {
    workload::setup(t.fs(), spec)?;
    t.fs().sync()?;
    if spec.case.cold {
        t.drop_caches()?;
    }
    let dev_before = t.device_bytes()?;
    let helper_before = t.helper_cpu_ns();
    let mut run = workload::measure(t.fs(), spec)?;
    run.cpu_ns += t.helper_cpu_ns().saturating_sub(helper_before);
    t.fs().sync()?;
    let dev = dev_before.zip(t.device_bytes()?);
    let pmr = dev.and_then(|(before, after)| before.pmr_written.zip(after.pmr_written));
    Ok(Sample {
        run,
        dev_read_bytes: dev.map(|(before, after)| after.read - before.read),
        dev_write_bytes: dev.map(|(before, after)| after.written - before.written),
        pmr_write_bytes: pmr.map(|(before, after)| after - before),
    })
}

/// [`in_process_cell`] with the setup and the timed run in worker processes of this
/// binary, one per thread of the cell, each in a directory of its own.
fn processes_cell(t: &mut dyn InProcess, spec: &Spec) -> Result<Sample, String> {
    let root = t
        .root()
        .ok_or("this target has no directory for processes")?
        .to_path_buf();
    let roots = interposer::process_roots(&root, spec, true)?;
    let exe = crate::siblings::this_exe()?;
    let dev_before = std::cell::Cell::new(None);
    let t = std::cell::RefCell::new(t);
    let hooks = interposer::Hooks {
        after_setup: &mut || {
            t.borrow().fs().sync()?;
            if spec.case.cold {
                t.borrow_mut().drop_caches()?;
            }
            dev_before.set(t.borrow().device_bytes()?);
            Ok(())
        },
        helper_cpu_ns: &|| t.borrow().helper_cpu_ns(),
    };
    let run = interposer::run_processes(None, &exe, interposer::Via::Kernel, &roots, spec, hooks)?;
    let t = t.into_inner();
    t.fs().sync()?;
    let dev = dev_before.get().zip(t.device_bytes()?);
    Ok(Sample {
        run,
        dev_read_bytes: dev.map(|(before, after)| after.read - before.read),
        dev_write_bytes: dev.map(|(before, after)| after.written - before.written),
        pmr_write_bytes: None,
    })
}

/// A target: its runner, or why it has none.
struct Slot {
    name: String,
    runner: Result<Runner, String>,
    pmr: Option<PmrNote>,
}

/// Makes the images and the runners of every target; a failure becomes its note.
fn slots(plan: &Plan, scratch: &Scratch, images: &Images, header: &mut Vec<String>) -> Vec<Slot> {
    let wants = |f: fn(&TargetKind) -> bool| plan.targets.iter().any(|(_, k)| f(k));
    let mut augefs_image = Err("not needed".to_string());
    if wants(|k| {
        matches!(
            k,
            TargetKind::Api
                | TargetKind::ApiView
                | TargetKind::ApiPmr
                | TargetKind::Fuse
                | TargetKind::Interposer
                | TargetKind::Attached
        )
    }) {
        augefs_image = image::prepare(images.augefs, plan.image_bytes, images.backend)
            .map(|()| images.augefs)
            .map_err(|e| format!("skipped: {e}"));
        header.push(format!(
            "augefs (api, api-view, api-pmr, fuse, interposer, attached): {} image {}, formatted \
             afresh for every cell",
            human(plan.image_bytes),
            images.augefs.display()
        ));
    }
    if let Some(o) = &plan.fuse_options {
        header.push(format!("fuse: mounted with -o {o}"));
    }
    if plan.procs {
        header.push(
            "--procs: each thread count N ran as N processes of one thread, each in a \
             directory of its own (attached, fuse, dir and kernel targets; api, api-pmr \
             and interposer ran threads)"
                .to_string(),
        );
    }
    if wants(|k| matches!(k, TargetKind::Interposer | TargetKind::Attached)) {
        if let Some(line) = interposer_build_line() {
            header.push(line);
        }
    }
    let pmr = match wants(|k| *k == TargetKind::ApiPmr) {
        true => pmr_region(images.pmr, header),
        false => Err("not needed".to_string()),
    };
    let loop_device = match wants(|k| matches!(k, TargetKind::Kernel(_))) {
        true => kernel_device(plan, images, header),
        false => Err("not needed".to_string()),
    };
    plan.targets
        .iter()
        .map(|(name, kind)| {
            let image = augefs_image.clone();
            let runner = match kind {
                TargetKind::Api | TargetKind::ApiView => image.map(|i| {
                    let view = *kind == TargetKind::ApiView;
                    let api = target::Api::new(i, images.backend, None).reading_views(view);
                    Runner::InProcess(Box::new(api))
                }),
                TargetKind::ApiPmr => image.and_then(|i| {
                    let (_, region) = pmr.as_ref().map_err(Clone::clone)?;
                    let api = target::Api::new(i, images.backend, Some(region.clone()));
                    Ok(Runner::InProcess(Box::new(api)))
                }),
                TargetKind::Fuse => image.and_then(|i| {
                    target::Fuse::new(i, images.backend, &scratch.named("bench-fs-fuse", ".mnt"))
                        .map(|f| f.with_options(plan.fuse_options.clone()))
                        .map(|f| Runner::InProcess(Box::new(f)))
                        .map_err(|e| format!("skipped: {e}"))
                }),
                TargetKind::Interposer => image.and_then(|i| {
                    interposer::Interposer::new(i, images.backend)
                        .map(Runner::Interposer)
                        .map_err(|e| format!("skipped: {e}"))
                }),
                TargetKind::Attached => image.and_then(|i| {
                    let mnt = scratch.named("bench-fs-attached", ".mnt");
                    interposer::Attached::new(i, images.backend, &mnt, plan.procs)
                        .map(Runner::Attached)
                        .map_err(|e| format!("skipped: {e}"))
                }),
                TargetKind::Dir(path) => target::Dir::new(path)
                    .map(|d| Runner::InProcess(Box::new(d)))
                    .map_err(|e| format!("skipped: {e}")),
                TargetKind::Kernel(fs) => kernel_runner(fs, &loop_device, scratch),
            };
            let runner = runner.map(|r| as_processes(r, kind, plan.procs));
            Slot {
                name: name.clone(),
                runner,
                pmr: match (kind, &pmr) {
                    (TargetKind::ApiPmr, Ok((note, _))) => Some(note.clone()),
                    _ => None,
                },
            }
        })
        .collect()
}

/// With --procs, the runner of a target with a directory runs its cells as processes.
fn as_processes(r: Runner, kind: &TargetKind, procs: bool) -> Runner {
    let has_dir = matches!(
        kind,
        TargetKind::Fuse | TargetKind::Dir(_) | TargetKind::Kernel(_)
    );
    match r {
        Runner::InProcess(t) if procs && has_dir => Runner::Processes(t),
        r => r,
    }
}

/// The loop device of the kernel targets over their image; says what it is in the
/// header.
fn kernel_device(
    plan: &Plan,
    images: &Images,
    header: &mut Vec<String>,
) -> Result<Rc<LoopDevice>, String> {
    if let Some(note) = kernelfs::obstacle() {
        return Err(note);
    }
    let device = image::prepare(images.kernel, plan.image_bytes, images.backend)
        .and_then(|()| LoopDevice::attach(images.kernel))
        .map_err(|e| format!("skipped: {e}"))?;
    header.push(format!(
        "kernel file systems: {} image on {} (direct IO: {}), made afresh for every \
         cell, mounted {}, counted by /sys/block stat",
        human(plan.image_bytes),
        device.path(),
        device
            .direct_io
            .map_or("unknown", |b| if b { "on" } else { "off" }),
        kernelfs::MOUNT_OPTIONS,
    ));
    Ok(Rc::new(device))
}

/// Creates the api-pmr target's region; says what it is in the header.
fn pmr_region(
    pmr: &Result<EmulatedPmr, String>,
    header: &mut Vec<String>,
) -> Result<(PmrNote, Arc<Pmr>), String> {
    let pmr = pmr.clone()?;
    let region = pmr.create().map_err(|e| format!("skipped: {e}"))?;
    let mode = Some(region.persist_mode());
    header.push(format!(
        "api-pmr: augefs through the vfs API, MetaDB's WAL on the {}",
        pmr.describe(mode)
    ));
    let note = PmrNote {
        label: pmr.label(),
        json: pmr.json(mode),
    };
    Ok((note, region))
}

fn kernel_runner(
    fs: &'static str,
    device: &Result<Rc<LoopDevice>, String>,
    scratch: &Scratch,
) -> Result<Runner, String> {
    let device = device.clone()?;
    let mkfs = kernelfs::mkfs_program(fs);
    if !have_program(&mkfs) {
        return Err(format!("skipped: {mkfs} not found"));
    }
    let dir = scratch.named(&format!("bench-fs-{fs}"), ".mnt");
    target::Kernel::new(fs, device, &dir)
        .map(|k| Runner::InProcess(Box::new(k)))
        .map_err(|e| format!("skipped: {e}"))
}

fn header(args: &Args, plan: &Plan, scratch: &Scratch) -> Vec<String> {
    let s = &plan.sizes;
    let threads: Vec<String> = plan.threads.iter().map(usize::to_string).collect();
    let mut header = vec![format!(
        "augefs bench fs: {} run(s) of {} s per cell, threads {}; {} files per thread, \
         creates capped at {} per run, {} directory entries, {} data per thread; {} CPU(s); \
         images in {} ({}){}",
        plan.runs,
        plan.seconds,
        threads.join(","),
        s.files_per_thread,
        s.creates_max,
        s.dir_entries,
        human(s.file_bytes),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        scratch.dir.display(),
        scratch.dir_fs.as_deref().unwrap_or("?"),
        if args.quick {
            "; --quick: indicative only"
        } else {
            ""
        },
    )];
    for case in plan
        .cases
        .iter()
        .filter(|c| c.kind.group() == Group::Filebench)
    {
        header.push(format!(
            "  {} (scale {}, file and IO sizes / {})",
            filebench::describe(case.kind, plan.threads[0], &s.filebench),
            s.filebench.files,
            s.filebench.size_divisor
        ));
    }
    header
}

fn measure(args: &Args, plan: &Plan, scratch: &Scratch, images: &Images) -> Result<Report, String> {
    let mut report = Report {
        header: header(args, plan, scratch),
        baseline: args.baseline.clone(),
        ..Report::default()
    };
    let mut slots = slots(plan, scratch, images, &mut report.header);
    for slot in &slots {
        report.targets.push(Target {
            name: slot.name.clone(),
            note: slot.runner.as_ref().err().cloned(),
            pmr: slot.pmr.clone(),
        });
    }
    for case in &plan.cases {
        for &threads in &plan.threads {
            for slot in &slots {
                report.cells.push(Cell {
                    case: case.clone(),
                    threads,
                    target: slot.name.clone(),
                    samples: Vec::new(),
                    errors: Vec::new(),
                });
            }
        }
    }
    let runnable: Vec<usize> = (0..slots.len())
        .filter(|&i| slots[i].runner.is_ok())
        .collect();
    let total = plan.runs as usize * plan.cases.len() * plan.threads.len() * runnable.len();
    let mut done = 0;
    for run in 0..plan.runs {
        for case in &plan.cases {
            for &threads in &plan.threads {
                for i in turn_order(&runnable, run) {
                    done += 1;
                    let slot = &mut slots[i];
                    let spec = Spec {
                        case: case.clone(),
                        threads,
                        seconds: plan.seconds,
                        sizes: plan.sizes.clone(),
                    };
                    let runner = slot.runner.as_mut().expect("runnable");
                    let result = runner.run_cell(&spec);
                    let outcome = match &result {
                        Ok(s) => format!("{:.0} ops/s", s.ops_per_sec()),
                        Err(e) => format!("failed: {e}"),
                    };
                    eprintln!(
                        "augefs bench fs: [{done}/{total}] run {}/{} {} {} threads={threads}: {outcome}",
                        run + 1,
                        plan.runs,
                        slot.name,
                        case.name(),
                    );
                    let cell = report
                        .cells
                        .iter_mut()
                        .find(|c| c.case == *case && c.threads == threads && c.target == slot.name)
                        .expect("every cell was made");
                    match result {
                        Ok(sample) => cell.samples.push(sample),
                        Err(e) => cell.errors.push(format!("run {}: {e}", run + 1)),
                    }
                }
            }
        }
    }
    Ok(report)
}

/// Which interposer library the interposer target loads and when it and this binary were
/// last built: the library is found beside the binary, and a build of the benchmarks alone
/// (`cargo build -p augefs-bench`) leaves an older library there, whose figures would then
/// be reported as this build's.
fn interposer_build_line() -> Option<String> {
    let lib = crate::siblings::preload_lib().ok()?;
    let modified = |p: &Path| -> Option<String> {
        let t = std::fs::metadata(p).ok()?.modified().ok()?;
        let ns = t.duration_since(std::time::UNIX_EPOCH).ok()?.as_nanos();
        Some(crate::units::utc(u64::try_from(ns).ok()?))
    };
    let exe = std::env::current_exe().ok()?;
    Some(format!(
        "interposer: {} (built {}; this binary built {})",
        lib.display(),
        modified(&lib)?,
        modified(&exe)?
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::parse_args;

    fn parse(argv: &[&str]) -> Args {
        parse_args(argv).unwrap()
    }

    #[test]
    fn bad_arguments_are_refused_by_name() {
        let err = |argv: &[&str]| plan(&parse(argv)).unwrap_err();
        assert!(err(&["--target", "api,zfs"]).contains("zfs"));
        assert!(err(&["--workload", "creat"]).contains("creat"));
        assert!(err(&["--threads", "0"]).contains("--threads"));
        assert!(err(&["--seconds", "0"]).contains("--seconds"));
        assert!(err(&["--target", "api", "--baseline", "ext4"]).contains("--baseline"));
        assert!(err(&["--target", "api-pmr", "--pmr-size", "4K"]).contains("--pmr-size"));
        assert!(err(&["--file-size", "4K", "--io-size", "1M"]).contains("--file-size"));
        let ok = plan(&parse(&["--target", "api,dir:/tmp,xfs,api-pmr", "--quick"])).unwrap();
        assert_eq!(ok.targets[1].1, TargetKind::Dir(PathBuf::from("/tmp")));
        assert_eq!(ok.targets[3].1, TargetKind::ApiPmr);
        assert_eq!(ok.image_bytes, 512 << 20, "xfs's floor");
        let full = plan(&parse(&[
            "--target",
            "api",
            "--workload",
            "varmail,randread",
        ]))
        .unwrap();
        // 4 threads x 64 MiB of random-read data, twice, plus 256 MiB: under the 1 GiB floor.
        assert_eq!(full.image_bytes, 1 << 30);
        let web = plan(&parse(&["--target", "api", "--workload", "webserver"])).unwrap();
        assert_eq!(web.image_bytes, (2 * 800 + 256) << 20);
    }
}
