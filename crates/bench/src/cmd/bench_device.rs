//! `augefs bench device [FILE] [--size] [--runs] [--seconds] [--queue-depth] [--backend]
//! [--json]`: the device layer beside fio, on the same file.
//!
//! Three figures, each measured `runs` times by our device layer and by fio, alternately
//! and with the first side alternating too (so drift in the device, e.g. an SSD's cache
//! filling up or a host writing back, hits both alike):
//! 4 KiB random read IOPS at the queue depth, 4 KiB random write + fdatasync IOPS one at
//! a time, and 1 MiB sequential write MB/s at the queue depth. The table shows each
//! side's median and spread, the ratio of the medians (augefs / fio), and the median of
//! the per-run ratios ("paired"), which is steadier on a shared, noisy device.
//!
//! Invariants:
//! - The file is created (preallocated) and then written in full once before any
//!   figure, so neither tool meets unwritten extents.
//! - Both tools use the span `[0, size)`, the same block size, depth and duration.

mod loops;

use crate::fio;
use crate::stats::{spread, Spread};
use device::{Device, IoCause, OpenOptions};
use loops::{BenchConfig, BenchLimit, BenchResult};
use platform::units::{human, parse_size};
use platform::{Clock, SystemClock};
use serde_json::json;
use std::path::PathBuf;

const RANDOM_BLOCK_BYTES: u32 = 4096;
const SEQUENTIAL_BLOCK_BYTES: u32 = 1 << 20;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Image file to benchmark on (created or resized, then written in full).
    #[arg(default_value = "./augefs-bench.img")]
    pub file: PathBuf,
    /// Size of the file, e.g. 1G; a multiple of 1 MiB.
    #[arg(long, value_parser = parse_size, default_value = "1GiB")]
    pub size: u64,
    /// Runs of each figure, per tool.
    #[arg(long, default_value_t = 3)]
    pub runs: u32,
    /// Seconds per run.
    #[arg(long, default_value_t = 5)]
    pub seconds: u64,
    /// Requests in flight for random reads and sequential writes.
    #[arg(long, default_value_t = 32)]
    pub queue_depth: u32,
    /// IO backend of our side.
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: device::BackendChoice,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// One of the compared figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Figure {
    RandRead,
    RandWriteSync,
    SeqWrite,
}

impl Figure {
    const ALL: [Figure; 3] = [Figure::RandRead, Figure::RandWriteSync, Figure::SeqWrite];

    fn name(self) -> &'static str {
        match self {
            Figure::RandRead => "randread_4k_iops",
            Figure::RandWriteSync => "randwrite_4k_fdatasync_iops",
            Figure::SeqWrite => "seqwrite_1m_mb_per_s",
        }
    }

    fn label(self, queue_depth: u32) -> String {
        match self {
            Figure::RandRead => format!("4 KiB random read, QD{queue_depth} (IOPS)"),
            Figure::RandWriteSync => "4 KiB random write+fdatasync, QD1 (IOPS)".to_string(),
            Figure::SeqWrite => format!("1 MiB sequential write, QD{queue_depth} (MB/s)"),
        }
    }

    fn block_bytes(self) -> u32 {
        match self {
            Figure::RandRead | Figure::RandWriteSync => RANDOM_BLOCK_BYTES,
            Figure::SeqWrite => SEQUENTIAL_BLOCK_BYTES,
        }
    }

    fn depth(self, queue_depth: u32) -> u32 {
        match self {
            Figure::RandWriteSync => 1,
            Figure::RandRead | Figure::SeqWrite => queue_depth,
        }
    }

    fn pattern(self) -> fio::Pattern {
        match self {
            Figure::RandRead => fio::Pattern::RandRead,
            Figure::RandWriteSync => fio::Pattern::RandWriteSync,
            Figure::SeqWrite => fio::Pattern::SeqWrite,
        }
    }

    /// The figure's value: IOPS, or MB/s (10^6 bytes) for sequential writes.
    fn value(self, ops_per_sec: f64, bytes_per_sec: f64) -> f64 {
        match self {
            Figure::RandRead | Figure::RandWriteSync => ops_per_sec,
            Figure::SeqWrite => bytes_per_sec / 1e6,
        }
    }

    fn run_ours(
        self,
        dev: &Device,
        clock: &dyn Clock,
        cfg: &BenchConfig,
    ) -> Result<BenchResult, String> {
        let result = match self {
            Figure::RandRead => loops::random_read_iops(dev, clock, cfg),
            Figure::RandWriteSync => loops::random_write_flush_iops(dev, clock, cfg),
            Figure::SeqWrite => loops::sequential_write_bandwidth(dev, clock, cfg),
        };
        result.map_err(|e| format!("{}: {e}", self.name()))
    }
}

/// One run's value and latency, when the tool reported it: ours is push to pop per
/// operation, fio's is its completion latency (`clat`, submission to completion).
#[derive(Debug, Clone, Copy)]
struct Sample {
    value: f64,
    latency_p50_ns: Option<u64>,
    latency_p99_ns: Option<u64>,
}

#[derive(Debug, Default)]
struct FigureSamples {
    ours: Vec<Sample>,
    fio: Vec<Sample>,
}

impl FigureSamples {
    /// augefs median / fio median.
    fn ratio(&self) -> Option<f64> {
        match (summary(&self.ours), summary(&self.fio)) {
            (Some(a), Some(b)) if b.median > 0.0 => Some(a.median / b.median),
            _ => None,
        }
    }

    /// Median over runs of augefs / fio within the run: the two halves of a run are
    /// back to back, so this cancels drift that spans runs (a shared host's load).
    fn paired_ratio(&self) -> Option<f64> {
        let pairs: Vec<Sample> = (self.ours.iter().zip(&self.fio))
            .filter(|(_, f)| f.value > 0.0)
            .map(|(o, f)| Sample {
                value: o.value / f.value,
                latency_p50_ns: None,
                latency_p99_ns: None,
            })
            .collect();
        summary(&pairs).map(|s| s.median)
    }
}

pub fn run(args: Args) -> Result<(), String> {
    validate(&args)?;
    let fio_version = fio::version();
    if fio_version.is_none() {
        eprintln!(
            "augefs: fio is not installed, so there is no baseline: only our figures are shown. \
             Install it with `apt-get install fio` (Debian/Ubuntu) or `dnf install fio`."
        );
    }
    let clock = SystemClock::new();
    device::create_image(&args.file, args.size).map_err(|e| e.to_string())?;
    let opts = OpenOptions {
        backend: args.backend,
        queue_depth: args.queue_depth,
        ..OpenOptions::default()
    };
    let dev = device::open(&args.file, &opts).map_err(|e| e.to_string())?;
    eprintln!(
        "augefs: writing {} once ({} backend, {} B logical blocks)",
        args.file.display(),
        dev.info().backend.name(),
        dev.info().logical_block_bytes
    );
    fill(&dev, &clock, &args)?;
    let mut samples: Vec<FigureSamples> = Figure::ALL
        .iter()
        .map(|_| FigureSamples::default())
        .collect();
    for (figure, out) in Figure::ALL.iter().zip(samples.iter_mut()) {
        for run in 0..args.runs {
            eprintln!(
                "augefs: {} run {}/{}",
                figure.label(args.queue_depth),
                run + 1,
                args.runs
            );
            let seed = 1 + run as u64;
            // Who goes first alternates too, so neither side always runs right after
            // the fill or a write figure, while the device is still writing back.
            let fio_first = run % 2 == 1 && fio_version.is_some();
            if fio_first {
                out.fio.push(measure_fio(*figure, &args, seed)?);
            }
            out.ours
                .push(measure_ours(*figure, &dev, &clock, &args, seed)?);
            if fio_version.is_some() && !fio_first {
                out.fio.push(measure_fio(*figure, &args, seed)?);
            }
        }
    }
    if args.json {
        println!(
            "{}",
            report_json(&args, &dev, fio_version.as_deref(), &samples)
        );
    } else {
        print_table(&args, &dev, fio_version.as_deref(), &samples);
    }
    Ok(())
}

fn validate(args: &Args) -> Result<(), String> {
    if args.size < SEQUENTIAL_BLOCK_BYTES as u64 || args.size % SEQUENTIAL_BLOCK_BYTES as u64 != 0 {
        return Err(format!(
            "--size {} must be a positive multiple of 1 MiB",
            args.size
        ));
    }
    if args.runs == 0 || args.seconds == 0 {
        return Err("--runs and --seconds must be at least 1".to_string());
    }
    if args.queue_depth == 0 || args.queue_depth > device::uring::QUEUE_DEPTH_MAX {
        return Err(format!(
            "--queue-depth must be in 1..={}",
            device::uring::QUEUE_DEPTH_MAX
        ));
    }
    if args.file.exists() && !args.file.is_file() {
        return Err(format!(
            "{} exists and is not a regular file; the benchmark writes over it",
            args.file.display()
        ));
    }
    Ok(())
}

/// Writes the whole file once, sequentially, and syncs it.
fn fill(dev: &Device, clock: &dyn Clock, args: &Args) -> Result<(), String> {
    let blocks = args.size / SEQUENTIAL_BLOCK_BYTES as u64;
    let cfg = BenchConfig::new(
        SEQUENTIAL_BLOCK_BYTES,
        args.queue_depth,
        BenchLimit::Ops(blocks),
        0,
    );
    let written =
        loops::sequential_write_bandwidth(dev, clock, &cfg).map_err(|e| format!("filling: {e}"))?;
    assert_eq!(written.bytes, args.size, "the fill covers the file");
    dev.flush(IoCause::Tool)
        .map_err(|e| format!("filling: {e}"))?;
    eprintln!(
        "augefs: wrote {} at {:.0} MB/s",
        human(args.size),
        written.bytes_per_sec() / 1e6
    );
    Ok(())
}

fn measure_ours(
    figure: Figure,
    dev: &Device,
    clock: &dyn Clock,
    args: &Args,
    seed: u64,
) -> Result<Sample, String> {
    let limit = BenchLimit::DurationNs(args.seconds * 1_000_000_000);
    let cfg = BenchConfig::new(
        figure.block_bytes(),
        figure.depth(args.queue_depth),
        limit,
        seed,
    );
    let r = figure.run_ours(dev, clock, &cfg)?;
    Ok(Sample {
        value: figure.value(r.ops_per_sec(), r.bytes_per_sec()),
        latency_p50_ns: Some(r.latency_p50_ns),
        latency_p99_ns: Some(r.latency_p99_ns),
    })
}

fn measure_fio(figure: Figure, args: &Args, seed: u64) -> Result<Sample, String> {
    let job = fio::Job {
        filename: &args.file,
        pattern: figure.pattern(),
        block_bytes: figure.block_bytes() as u64,
        iodepth: figure.depth(args.queue_depth),
        span_bytes: args.size,
        seconds: args.seconds,
        seed,
    };
    let r = fio::run(&job).map_err(|e| format!("{}: {e}", figure.name()))?;
    Ok(Sample {
        value: figure.value(r.iops, r.bytes_per_sec),
        latency_p50_ns: r.clat_p50_ns,
        latency_p99_ns: r.clat_p99_ns,
    })
}

/// Median and spread of the samples' values; `None` for no samples.
fn summary(samples: &[Sample]) -> Option<Spread> {
    let values: Vec<f64> = samples.iter().map(|s| s.value).collect();
    spread(&values)
}

fn print_table(args: &Args, dev: &Device, fio_version: Option<&str>, samples: &[FigureSamples]) {
    let info = dev.info();
    println!(
        "augefs bench device: {} ({}), {} backend, {} runs x {} s per tool, baseline {}",
        args.file.display(),
        human(args.size),
        info.backend.name(),
        args.runs,
        args.seconds,
        fio_version.map_or("none (fio not installed)".to_string(), |v| format!(
            "{v} --ioengine=io_uring --direct=1"
        )),
    );
    if let Some(notice) = &info.notice {
        println!("note: {notice}");
    }
    println!(
        "{:<44} {:>12} {:>21} {:>12} {:>21} {:>6} {:>7}",
        "figure", "augefs", "spread", "fio", "spread", "ratio", "paired"
    );
    for (figure, s) in Figure::ALL.iter().zip(samples) {
        let cell = |x: Option<Spread>| match x {
            Some(s) => (
                format!("{:.0}", s.median),
                format!("{:.0} - {:.0}", s.min, s.max),
            ),
            None => ("-".to_string(), "-".to_string()),
        };
        let two = |x: Option<f64>| x.map_or("-".to_string(), |r| format!("{r:.2}"));
        let (ratio, paired) = (two(s.ratio()), two(s.paired_ratio()));
        let (om, os) = cell(summary(&s.ours));
        let (fm, fs) = cell(summary(&s.fio));
        println!(
            "{:<44} {om:>12} {os:>21} {fm:>12} {fs:>21} {ratio:>6} {paired:>7}",
            figure.label(args.queue_depth)
        );
    }
}

fn report_json(
    args: &Args,
    dev: &Device,
    fio_version: Option<&str>,
    samples: &[FigureSamples],
) -> String {
    let info = dev.info();
    let side = |runs: &[Sample]| {
        let runs_json: Vec<_> = runs
            .iter()
            .map(|s| json!({ "value": s.value, "latency_p50_ns": s.latency_p50_ns, "latency_p99_ns": s.latency_p99_ns }))
            .collect();
        match summary(runs) {
            Some(s) => {
                json!({ "median": s.median, "min": s.min, "max": s.max, "runs": runs_json })
            }
            None => serde_json::Value::Null,
        }
    };
    let figures: Vec<_> = Figure::ALL
        .iter()
        .zip(samples)
        .map(|(figure, s)| {
            json!({
                "name": figure.name(),
                "label": figure.label(args.queue_depth),
                "block_bytes": figure.block_bytes(),
                "queue_depth": figure.depth(args.queue_depth),
                "augefs": side(&s.ours),
                "fio": side(&s.fio),
                "ratio": s.ratio(),
                "paired_ratio": s.paired_ratio(),
            })
        })
        .collect();
    let report = json!({
        "file": args.file,
        "size_bytes": args.size,
        "backend": info.backend.name(),
        "notice": info.notice,
        "logical_block_bytes": info.logical_block_bytes,
        "runs": args.runs,
        "seconds": args.seconds,
        "fio_version": fio_version,
        "figures": figures,
    });
    serde_json::to_string_pretty(&report).expect("JSON values serialise")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(value: f64) -> Sample {
        Sample {
            value,
            latency_p50_ns: None,
            latency_p99_ns: None,
        }
    }

    #[test]
    fn summary_reads_the_values() {
        assert_eq!(summary(&[]), None);
        let s = summary(&[sample(3.0), sample(1.0), sample(2.0)]).expect("three samples");
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
    }

    #[test]
    fn ratios_of_medians_and_of_pairs() {
        let s = FigureSamples {
            ours: vec![sample(90.0), sample(45.0), sample(200.0)],
            fio: vec![sample(100.0), sample(50.0), sample(100.0)],
        };
        assert_eq!(s.ratio(), Some(0.9));
        assert_eq!(s.paired_ratio(), Some(0.9));
        assert_eq!(FigureSamples::default().ratio(), None);
    }

    #[test]
    fn figures_match_the_issue() {
        assert_eq!(Figure::RandRead.depth(32), 32);
        assert_eq!(Figure::RandWriteSync.depth(32), 1);
        assert_eq!(Figure::SeqWrite.block_bytes(), 1 << 20);
        assert_eq!(Figure::SeqWrite.value(0.0, 2e9), 2000.0);
        assert_eq!(Figure::RandRead.value(1000.0, 0.0), 1000.0);
    }
}
