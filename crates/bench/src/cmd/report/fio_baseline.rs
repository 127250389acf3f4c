//! The fio baseline of `augefs bench report`: issue 7 compares augefs's 4 KiB append +
//! fsync with fio's 4 KiB write + fdatasync and its cold 4 KiB random reads with fio's
//! random reads, and issue 32 its cold 1 MiB sequential reads with fio's, on a file of
//! the same disk. Every job runs one request at a time (depth 1), as one bench fs thread
//! asks, with O_DIRECT on an image written in full first (`crate::fio` builds the jobs).
//!
//! Invariants:
//! - The jobs take turns, `--runs` times, so drift hits them alike.
//! - The image carries the process id and is removed at the end, also after an error.

use crate::fio::{self, Job, Pattern};
use crate::image;
use crate::scratch::Scratch;
use crate::stats::spread;
use device::BackendChoice;
use platform::units::parse_size;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Directory of the image (the disk under test).
    #[arg(long)]
    pub dir: PathBuf,
    /// Size of the image and span of the jobs.
    #[arg(long, value_parser = parse_size)]
    pub size: u64,
    /// Seconds per job.
    #[arg(long)]
    pub seconds: u64,
    #[arg(long)]
    pub runs: u32,
}

/// The jobs: (name in the JSON, pattern, request size).
pub const JOBS: [(&str, Pattern, u64); 3] = [
    ("write_fdatasync_4k", Pattern::RandWriteSync, 4096),
    ("randread_4k", Pattern::RandRead, 4096),
    ("read_1m", Pattern::SeqRead, 1 << 20),
];

/// One job at depth 1 over the whole image.
fn job<'a>(
    args: &Args,
    path: &'a Path,
    (pattern, block_bytes): (Pattern, u64),
    seed: u64,
) -> Job<'a> {
    Job {
        filename: path,
        pattern,
        block_bytes,
        iodepth: 1,
        span_bytes: args.size,
        seconds: args.seconds,
        seed,
    }
}

/// Runs the jobs; the JSON document of the step: per job every run's IOPS and their
/// median, minimum and maximum.
pub fn measure_json(args: &Args) -> Result<Value, String> {
    let version = fio::version().ok_or("fio is not installed")?;
    let scratch = Scratch::create(&args.dir)?;
    let path = scratch.named("report-fio", ".img");
    let measured = image::prepare(&path, args.size, BackendChoice::Auto).and_then(|()| {
        let mut iops: Vec<Vec<f64>> = vec![Vec::new(); JOBS.len()];
        for run in 0..args.runs {
            for (i, (name, pattern, bytes)) in JOBS.iter().enumerate() {
                let report = fio::run(&job(args, &path, (*pattern, *bytes), u64::from(run) + 1))
                    .map_err(|e| format!("fio {name}: {e}"))?;
                eprintln!(
                    "augefs bench report: fio {name} run {}/{}: {:.0} IOPS",
                    run + 1,
                    args.runs,
                    report.iops
                );
                iops[i].push(report.iops);
            }
        }
        Ok(iops)
    });
    scratch.remove(&[&path], &[]);
    let iops = measured?;
    let jobs: serde_json::Map<String, Value> = JOBS
        .iter()
        .zip(&iops)
        .map(|((name, pattern, bytes), runs)| {
            let s = spread(runs);
            let value = json!({
                "fio_args": fio::args(&job(args, &path, (*pattern, *bytes), 1)),
                "iops_runs": runs,
                "iops_median": s.map(|s| s.median),
                "iops_min": s.map(|s| s.min),
                "iops_max": s.map(|s| s.max),
            });
            (name.to_string(), value)
        })
        .collect();
    Ok(json!({
        "command": "fio baseline",
        "fio_version": version,
        "dir": args.dir,
        "dir_fs": scratch.dir_fs,
        "span_bytes": args.size,
        "seconds": args.seconds,
        "jobs": jobs,
    }))
}
