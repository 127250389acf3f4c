//! `augefs amplify [--dir DIR] [--fs augefs,ext2,ext4,xfs,btrfs] [--ops N] [--quick]
//! [--runs N] [--backend B] [--json] [--json-file F] [--keep]`: the workloads of the IO
//! amplification study (io-amplification.txt §2.3) on augefs and on the kernel's file
//! systems, side by side with the paper's Tables 1 and 2 (docs/DESIGN.md §14.1).
//!
//! - augefs runs through the vfs Rust API on an image file in DIR, counted by the device
//!   layer's accounting, which names the cause of every byte (`amplify/augefs.rs`).
//! - ext2, ext4, xfs and btrfs are made on a loop device over an image file in DIR and
//!   counted by the loop device's block-layer counters (`amplify/kernel.rs`). Without
//!   root, or without a file system's mkfs, its column is skipped with a note.
//! - The workloads (`amplify/workload.rs`) run on a fresh file system each run.
//!
//! Invariants:
//! - Progress goes to stderr (a line per step); the table or JSON alone to stdout.
//! - The image files carry the process id and are removed at the end (also after an
//!   error) unless `--keep`; mounts and loop devices are undone by guards, also on a
//!   panic.
//! - No file-system logic here: the workloads drive public APIs only.

mod augefs;
mod kernel;
mod paper;
mod report;
mod workload;

use crate::image;
use crate::kernelfs::{self, KERNEL_FS};
use crate::loopdev::{have_program, LoopDevice};
use crate::options::Common;
use crate::scratch::Scratch;
use device::BackendChoice;
use kernel::Kernel;
use platform::units::{human, parse_size};
use report::{Cell, Column, Report};
use std::path::{Path, PathBuf};
use std::time::Duration;
use workload::{Sizes, Subject, Workload, BLOCK_BYTES};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Directory for the image files, on the disk under test (created if missing).
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
    /// File systems to measure, comma-separated: augefs, ext2, ext4, xfs, btrfs.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "augefs,ext2,ext4,xfs,btrfs"
    )]
    pub fs: Vec<String>,
    /// Counted operations per namespace workload (create, mkdir, rename) and per warm-read
    /// run (cold reads: a tenth of it); default 200, 20 with --quick.
    #[arg(long)]
    pub ops: Option<u64>,
    /// Bytes the overwrite and append workloads write per run, 4 KiB at a time, each
    /// write followed by fsync (a multiple of 4 KiB); default 10 MiB as in the paper
    /// (2,560 writes, about half a minute per run with the writes spaced 10 ms), 80 KiB
    /// with --quick.
    #[arg(long, value_parser = parse_size)]
    pub data_bytes: Option<u64>,
    /// Small files and few operations (for tests): numbers are indicative only.
    #[arg(long)]
    pub quick: bool,
    #[command(flatten)]
    pub common: Common,
}

/// The image sizes: room for the 100 MB file and its metadata; xfs wants 300 MB at
/// least.
const IMAGE_BYTES: u64 = 512 << 20;
const QUICK_IMAGE_BYTES: u64 = 128 << 20;

fn ops(args: &Args) -> u64 {
    args.ops.unwrap_or(if args.quick { 20 } else { 200 })
}

/// The paper's volume of overwrites and appends: 10 MB.
const DATA_BYTES: u64 = 10 << 20;
const QUICK_DATA_BYTES: u64 = 80 << 10;

fn data_writes(args: &Args) -> u64 {
    let bytes = (args.data_bytes).unwrap_or(if args.quick {
        QUICK_DATA_BYTES
    } else {
        DATA_BYTES
    });
    bytes / BLOCK_BYTES
}

fn sizes(args: &Args) -> Sizes {
    let ops = ops(args);
    let data_writes = data_writes(args);
    if args.quick {
        Sizes {
            ops,
            data_writes,
            cold_reads: (ops / 10).max(1),
            overwrite_file_bytes: 8 << 20,
            read_file_bytes: 1 << 20,
            write_spacing: Duration::from_millis(1),
        }
    } else {
        Sizes {
            ops,
            data_writes,
            cold_reads: (ops / 10).max(1),
            overwrite_file_bytes: 100 << 20,
            read_file_bytes: 10 << 20,
            write_spacing: Duration::from_millis(10),
        }
    }
}

fn check(args: &Args) -> Result<(), String> {
    if args.common.runs == 0 || !(1..=100_000).contains(&ops(args)) {
        return Err("--runs must be at least 1 and --ops in 1..=100000".to_string());
    }
    let bad_data =
        |bytes: u64| bytes % BLOCK_BYTES != 0 || !(1..=100_000).contains(&(bytes / BLOCK_BYTES));
    if args.data_bytes.is_some_and(bad_data) {
        return Err(format!(
            "--data-bytes must be a multiple of 4 KiB, from 4 KiB to 100,000 writes ({})",
            human(100_000 * BLOCK_BYTES)
        ));
    }
    for fs in &args.fs {
        if fs != "augefs" && !KERNEL_FS.contains(&fs.as_str()) {
            return Err(format!(
                "--fs: unknown file system {fs:?} (augefs, ext2, ext4, xfs, btrfs)"
            ));
        }
    }
    Ok(())
}

pub fn run(args: Args) -> Result<(), String> {
    let report = execute(&args)?;
    args.common
        .emit_value(&report.json(), || report.print_table())
}

/// Measures, then removes the image files (unless `--keep`).
fn execute(args: &Args) -> Result<Report, String> {
    check(args)?;
    let scratch = Scratch::create(&args.dir)?.keeping(args.common.keep);
    let augefs_image = scratch.named("amplify-augefs", ".img");
    let kernel_image = scratch.named("amplify-kernel", ".img");
    let measured = measure(args, &scratch, &augefs_image, &kernel_image);
    if !args.common.keep {
        scratch.remove(&[&augefs_image, &kernel_image], &[]);
    }
    measured
}

/// Measures what `args` asks for and returns the JSON document `--json` prints (for
/// `bench report`).
pub fn measure_json(args: &Args) -> Result<serde_json::Value, String> {
    execute(args).map(|report| report.json())
}

/// Steps of the progress lines.
struct Progress {
    done: usize,
    total: usize,
}

impl Progress {
    fn step(&mut self, fs: &str, workload: Workload, run: u32, runs: u32) {
        self.done += 1;
        eprintln!(
            "augefs amplify: [{}/{}] {fs} {} run {}/{runs}",
            self.done,
            self.total,
            workload.name(),
            run + 1
        );
    }
}

fn measure(
    args: &Args,
    scratch: &Scratch,
    augefs_image: &Path,
    kernel_image: &Path,
) -> Result<Report, String> {
    let sizes = sizes(args);
    let runs = args.common.runs;
    let backend = args.common.backend;
    let mut report = Report::default();
    report.header.push(format!(
        "augefs amplify: {runs} run(s); {} of 4 KiB writes + fsync per data workload, {} ops per namespace workload and warm reads, {} cold reads; overwrite file {}, read file {}; images in {} ({})",
        human(sizes.data_writes * BLOCK_BYTES),
        sizes.ops,
        sizes.cold_reads,
        human(sizes.overwrite_file_bytes),
        human(sizes.read_file_bytes),
        scratch.dir.display(),
        scratch.dir_fs.as_deref().unwrap_or("?"),
    ));
    let mut progress = Progress {
        done: 0,
        total: args.fs.len() * Workload::ALL.len() * runs as usize,
    };
    let image_bytes = if args.quick && !args.fs.iter().any(|f| f == "xfs") {
        QUICK_IMAGE_BYTES
    } else {
        IMAGE_BYTES
    };
    let kernel_fs: Vec<&'static str> = KERNEL_FS
        .into_iter()
        .filter(|k| args.fs.iter().any(|f| f == k))
        .collect();
    if args.fs.iter().any(|f| f == "augefs") {
        image::prepare(augefs_image, image_bytes, backend)?;
        let mut subject = augefs::Augefs::open(augefs_image, backend)?;
        let info = subject.device().info();
        report.header.push(format!(
            "augefs: {} image, {} backend, vfs API",
            human(image_bytes),
            info.backend.name()
        ));
        report.columns.push(Column {
            fs: "augefs".to_string(),
            note: None,
        });
        let cells = workloads(&mut subject, "augefs", &sizes, runs, &mut progress)?;
        report.cells.extend(cells);
    }
    if !kernel_fs.is_empty() {
        kernels(
            &kernel_fs,
            scratch,
            kernel_image,
            image_bytes,
            backend,
            &sizes,
            runs,
            &mut progress,
            &mut report,
        );
    }
    Ok(report)
}

/// Every workload `runs` times on `subject`.
fn workloads(
    subject: &mut dyn Subject,
    fs: &str,
    sizes: &Sizes,
    runs: u32,
    progress: &mut Progress,
) -> Result<Vec<Cell>, String> {
    let mut cells = Vec::new();
    for w in Workload::ALL {
        let mut samples = Vec::new();
        for run in 0..runs {
            progress.step(fs, w, run, runs);
            let sample =
                workload::run(w, subject, sizes).map_err(|e| format!("{fs} {}: {e}", w.name()))?;
            samples.push(sample);
        }
        cells.push(Cell {
            workload: w,
            fs: fs.to_string(),
            samples,
        });
    }
    Ok(cells)
}

/// The kernel file systems' columns, each on the same loop device in turn; a failure
/// leaves a note in its column and the others go on.
#[expect(
    clippy::too_many_arguments,
    reason = "one call site; the steps share them all"
)]
fn kernels(
    kernel_fs: &[&'static str],
    scratch: &Scratch,
    image_path: &Path,
    image_bytes: u64,
    backend: BackendChoice,
    sizes: &Sizes,
    runs: u32,
    progress: &mut Progress,
    report: &mut Report,
) {
    let mut note = kernelfs::obstacle();
    let mut device = None;
    if note.is_none() {
        let attached = image::prepare(image_path, image_bytes, backend)
            .and_then(|()| LoopDevice::attach(image_path));
        match attached {
            Ok(d) => {
                report.header.push(format!(
                    "kernel file systems: {} image on {} (direct IO: {}), mounted noatime, counted by /sys/block stat",
                    human(image_bytes),
                    d.path(),
                    d.direct_io.map_or("unknown", |b| if b { "on" } else { "off" }),
                ));
                device = Some(d);
            }
            Err(e) => note = Some(format!("skipped: {e}")),
        }
    }
    for &fs in kernel_fs {
        let mkfs = kernelfs::mkfs_program(fs);
        let mut column = Column {
            fs: fs.to_string(),
            note: note.clone(),
        };
        match &device {
            Some(_) if !have_program(&mkfs) => {
                column.note = Some(format!("skipped: {mkfs} not found"));
            }
            Some(device) => {
                let measured =
                    Kernel::new(fs, device, &scratch.named(&format!("amplify-{fs}"), ".mnt"))
                        .and_then(|mut subject| workloads(&mut subject, fs, sizes, runs, progress));
                match measured {
                    Ok(cells) => report.cells.extend(cells),
                    Err(e) => {
                        eprintln!("augefs amplify: {e}");
                        column.note = Some(format!("failed: {e}"));
                    }
                }
            }
            None => {}
        }
        report.columns.push(column);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::parse_args;

    #[test]
    fn unknown_file_systems_are_refused() {
        let parse = |argv: &[&str]| parse_args::<Args, _>(argv).unwrap();
        assert!(check(&parse(&[])).is_ok());
        let err = check(&parse(&["--fs", "augefs,zfs"])).unwrap_err();
        assert!(err.contains("zfs"), "{err}");
        assert!(check(&parse(&["--runs", "0"])).is_err());
    }

    #[test]
    fn data_workloads_write_the_papers_10_mb_unless_told() {
        let parse = |argv: &[&str]| parse_args::<Args, _>(argv).unwrap();
        assert_eq!(sizes(&parse(&[])).data_writes, 2560);
        assert_eq!(sizes(&parse(&["--quick"])).data_writes, 20);
        assert_eq!(sizes(&parse(&["--data-bytes", "1M"])).data_writes, 256);
        assert_eq!(sizes(&parse(&["--ops", "7"])).data_writes, 2560);
        for bad in ["5000", "0", "1G"] {
            let err = check(&parse(&["--data-bytes", bad])).unwrap_err();
            assert!(err.contains("--data-bytes"), "{bad}: {err}");
        }
    }
}
