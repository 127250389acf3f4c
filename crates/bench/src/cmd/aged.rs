//! `augefs bench aged [--dir DIR] [--image-size 2GiB] [--fill 90] [--churn 1x]
//! [--targets augefs,ext4] [--workload ...] [--threads 1] [--seconds 1] [--runs 3]
//! [--json] [--json-file F] [--keep]`: the standard workloads of `bench fs` on a fresh
//! file system and on the same file system aged.
//!
//! Per target (augefs through its API, kernel file systems on a loop device over an
//! image file in the same directory): the workloads run on the fresh file system, each
//! run in a directory of its own that is removed after it; then the file system is
//! aged: filled to `--fill` percent of its size with files of mixed sizes (4 KiB to
//! 4 MiB), then files deleted at random and new ones written until `--churn` times the
//! image size was written, and synced; then the workloads run again. Goals (the
//! performance issue's): augefs aged >= 0.7x augefs fresh on every workload, and aged
//! augefs >= 1x the best kernel file system aged the same way on the fsync workloads.
//!
//! Invariants:
//! - Each target ages with the same seeded sequence of sizes and deletions.
//! - A workload's files are removed after its run, so every run meets the aged state,
//!   not the leftovers of the runs before it.
//! - Images carry the process id and are removed at the end unless `--keep`; loop
//!   devices and mounts are undone by guards.

use super::bench_fs::case::{parse_cases, Case, Kind, BLOCK_BYTES};
use super::bench_fs::filebench::Scale;
use super::bench_fs::ops::Within;
use super::bench_fs::workload::{self, Sizes, Spec};
use crate::goal::Goal;
use crate::image_target::{self as target, Skip, Target};
use crate::kernelfs::KERNEL_FS;
use crate::scratch::Scratch;
use crate::stats::spread;
use platform::units::{human, parse_size};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// Files aging writes between two looks at statfs (about 32 MiB: the estimate between
/// them leaves out metadata and the log's overheads).
const AGE_STATFS_EVERY: u64 = 32;

/// Sizes of the files aging writes: 4 KiB to 4 MiB, a power of 4 each.
const AGE_SIZES: [u64; 5] = [4 << 10, 16 << 10, 64 << 10, 1 << 20, 4 << 20];

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Directory for the image files, on the disk under test (created if missing).
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
    #[arg(long, value_parser = parse_size, default_value = "2GiB")]
    pub image_size: u64,
    /// Percent of the file system's size filled before the churn.
    #[arg(long, default_value_t = 90)]
    pub fill: u32,
    /// Bytes written by the churn, in image sizes.
    #[arg(long, default_value_t = 1.0)]
    pub churn: f64,
    /// augefs and kernel file systems (ext2, ext4, xfs, btrfs), in the order run.
    #[arg(long, value_delimiter = ',', default_value = "augefs,ext4")]
    pub targets: Vec<String>,
    /// Workloads, as `bench fs --workload` names them (no -cold variants).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "create,create+fsync,unlink,stat,append,overwrite,randread,varmail,fileserver"
    )]
    pub workload: Vec<String>,
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Length of one timed run.
    #[arg(long, default_value_t = 1.0)]
    pub seconds: f64,
    #[arg(long, default_value_t = 3)]
    pub runs: u32,
    #[arg(long)]
    pub json: bool,
    #[arg(long)]
    pub json_file: Option<PathBuf>,
    /// Keep the image files.
    #[arg(long)]
    pub keep: bool,
}

fn validate(args: &Args) -> Result<Vec<Case>, String> {
    crate::options::check_image_size(args.image_size)?;
    if args.image_size < (512 << 20) {
        return Err("--image-size must be at least 512 MiB".into());
    }
    if !(10..=95).contains(&args.fill) {
        return Err("--fill must be a percentage in 10..=95".into());
    }
    if !(args.churn >= 0.0 && args.churn <= 100.0) {
        return Err("--churn must be in 0..=100 image sizes".into());
    }
    crate::options::check_threads(&[args.threads])?;
    crate::options::check_seconds(args.seconds)?;
    if args.runs == 0 {
        return Err("--runs must be at least 1".into());
    }
    if let Some(bad) = args
        .targets
        .iter()
        .find(|t| *t != "augefs" && !KERNEL_FS.contains(&t.as_str()))
    {
        return Err(format!("--targets: unknown target {bad:?}"));
    }
    let cases = parse_cases(&args.workload, false, &[BLOCK_BYTES])?;
    if let Some(cold) = cases.iter().find(|c| c.cold) {
        return Err(format!(
            "--workload {}: cold runs need the caches dropped, which aging cannot do",
            cold.name()
        ));
    }
    Ok(cases)
}

/// The sizes of every run: small, so that they fit the free tenth of an aged image.
fn sizes() -> Sizes {
    Sizes {
        files_per_thread: 1000,
        dir_entries: 100,
        file_bytes: 4 << 20,
        creates_max: 50_000,
        filebench: Scale::quick(),
    }
}

/// One target's figures: per workload, ops/s of each run fresh and aged.
#[derive(Debug, Default)]
struct Figures {
    target: String,
    fresh: Vec<Vec<f64>>,
    aged: Vec<Vec<f64>>,
    /// Files and bytes aging wrote, and how full it left the file system.
    aged_files: u64,
    aged_written: u64,
    aged_used_percent: f64,
    skipped: Option<String>,
}

pub fn run(args: Args) -> Result<(), String> {
    let cases = validate(&args)?;
    let scratch = Scratch::create(&args.dir)?.keeping(args.keep);
    let all = target::each_target(&scratch, "aged", &args.targets, args.keep, |name, image| {
        measure(&args, &cases, name, image)
    })?;
    let goals = goals(&cases, &all);
    let document = json!({
        "benchmark": "aged",
        "image_bytes": args.image_size,
        "fill_percent": args.fill,
        "churn_images": args.churn,
        "threads": args.threads,
        "seconds": args.seconds,
        "workloads": cases.iter().map(Case::name).collect::<Vec<String>>(),
        "targets": all.iter().map(figures_json).collect::<Vec<Value>>(),
        "goals": goals.iter().map(Goal::json).collect::<Vec<Value>>(),
    });
    let text = serde_json::to_string_pretty(&document).expect("JSON of plain values");
    crate::options::emit(args.json, args.json_file.as_deref(), &text, || {
        print_table(&args, &cases, &all);
        for goal in &goals {
            println!("goal: {}: {}", goal.text, goal.verdict());
        }
    })
}

fn measure(args: &Args, cases: &[Case], name: &str, image: &Path) -> Result<Figures, String> {
    let mut figures = Figures {
        target: name.to_string(),
        ..Figures::default()
    };
    // An inode per 4 KiB of ext2/ext4 is plenty: aging's files average hundreds of KiB.
    let target = match Target::make(name, image, args.image_size, args.image_size / 4096) {
        Ok(t) => t,
        Err(Skip(why)) if name == "augefs" => return Err(why),
        Err(Skip(why)) => {
            eprintln!("augefs: {name}: skipped: {why}");
            figures.skipped = Some(why);
            return Ok(figures);
        }
    };
    eprintln!("augefs: {name}: the workloads on the fresh file system");
    figures.fresh = workloads(args, cases, &target, "fresh")?;
    let (files, written) = age(args, &target)?;
    figures.aged_files = files;
    figures.aged_written = written;
    let (size, available) = target.space()?;
    figures.aged_used_percent = 100.0 * (size - available) as f64 / size as f64;
    eprintln!(
        "augefs: {name}: aged ({files} files, {} written, {:.1}% used); the workloads again",
        human(written),
        figures.aged_used_percent
    );
    figures.aged = workloads(args, cases, &target, "aged")?;
    target.finish()?;
    Ok(figures)
}

/// Every workload `--runs` times, each run in a directory of its own removed after it;
/// ops/s per workload and run.
fn workloads(
    args: &Args,
    cases: &[Case],
    target: &Target,
    phase: &str,
) -> Result<Vec<Vec<f64>>, String> {
    let fs = target.fs()?;
    let mut rates = vec![Vec::new(); cases.len()];
    for run in 0..args.runs {
        for (i, case) in cases.iter().enumerate() {
            let dir = format!("{phase}-{run}-{i}");
            let (size, available) = target.space()?;
            eprintln!(
                "augefs: {phase} run {}/{}: {} ({} of {} available)",
                run + 1,
                args.runs,
                case.name(),
                human(available),
                human(size)
            );
            fs.mkdir(&dir)?;
            let within = Within {
                fs,
                dir: dir.clone(),
            };
            let spec = Spec {
                case: case.clone(),
                threads: args.threads,
                seconds: args.seconds,
                sizes: sizes(),
            };
            workload::setup(&within, &spec)?;
            fs.sync()?;
            let measured = workload::measure(&within, &spec)?;
            rates[i].push(measured.ops as f64 / (measured.elapsed_ns.max(1) as f64 / 1e9));
            fs.remove_all(&dir)?;
            fs.sync()?;
        }
    }
    Ok(rates)
}

/// Fills the file system to `--fill` percent, then deletes and writes files until
/// `--churn` image sizes were written; the files aging left and the bytes it wrote.
fn age(args: &Args, target: &Target) -> Result<(u64, u64), String> {
    let fs = target.fs()?;
    fs.mkdir("age")?;
    let (size, _) = target.space()?;
    let keep_free = size / 100 * u64::from(100 - args.fill);
    let churn = (args.churn * args.image_size as f64) as u64;
    let mut rng = platform::Rng::from_seed(1);
    let mut files: Vec<(u64, u64)> = Vec::new();
    let (mut next, mut written, mut churned) = (0u64, 0u64, 0u64);
    let mut filled = false;
    let mut available = target.space()?.1;
    loop {
        let len = AGE_SIZES[rng.below(AGE_SIZES.len() as u64) as usize];
        // Filling until the first file that would pass the fill (by statfs, not the
        // estimate), churning from then on.
        if !filled && available <= keep_free + len {
            available = target.space()?.1;
        }
        let filling = !filled && available > keep_free + len;
        filled |= !filling;
        if !filling && churned >= churn {
            break;
        }
        // Past the fill, a file goes for each one written (more while space is short).
        while !filling && !files.is_empty() && available < keep_free + 2 * len {
            let at = rng.below(files.len() as u64) as usize;
            let (n, bytes) = files.swap_remove(at);
            fs.unlink(&age_path(n))?;
            available += bytes;
        }
        if next % 1000 == 0 {
            fs.mkdir(&format!("age/{}", next / 1000))?;
        }
        if next % AGE_STATFS_EVERY == 0 {
            // The file system's own figure, now and then: metadata and reserves count.
            available = target.space()?.1;
        }
        let file = fs.create(&age_path(next))?;
        workload::fill(file.as_ref(), 0, len).map_err(|e| {
            let (size, free) = target.space().unwrap_or_default();
            format!(
                "{e} (aging had written {} in {} files, {} live; statfs: {} of {} available)",
                human(written),
                next,
                files.len(),
                human(free),
                human(size)
            )
        })?;
        drop(file);
        files.push((next, len));
        next += 1;
        written += len;
        available = available.saturating_sub(len);
        if !filling {
            churned += len;
        }
    }
    fs.sync()?;
    Ok((files.len() as u64, written))
}

fn age_path(n: u64) -> String {
    format!("age/{}/{n}", n / 1000)
}

fn median(runs: &[f64]) -> f64 {
    spread(runs).map_or(0.0, |s| s.median)
}

fn is_fsync(case: &Case) -> bool {
    case.fsync || matches!(case.kind, Kind::Append | Kind::Overwrite | Kind::Varmail)
}

fn goals(cases: &[Case], all: &[Figures]) -> Vec<Goal> {
    let measured: Vec<&Figures> = all.iter().filter(|f| f.skipped.is_none()).collect();
    let augefs = measured.iter().find(|f| f.target == "augefs");
    let kernels: Vec<&&Figures> = measured.iter().filter(|f| f.target != "augefs").collect();
    let mut goals = Vec::new();
    if let Some(a) = augefs {
        let worst = cases
            .iter()
            .enumerate()
            .map(|(i, c)| (c.name(), median(&a.aged[i]) / median(&a.fresh[i])))
            .min_by(|x, y| x.1.total_cmp(&y.1));
        goals.push(Goal {
            text: "augefs aged >= 0.7x augefs fresh on every workload".into(),
            met: worst.as_ref().map(|w| w.1 >= 0.7),
            evidence: worst.map_or("no workload".into(), |(n, r)| {
                format!("lowest {r:.2}x ({n})")
            }),
        });
    }
    let fsync: Vec<(usize, &Case)> = cases
        .iter()
        .enumerate()
        .filter(|(_, c)| is_fsync(c))
        .collect();
    let text = "augefs aged >= 1x the best kernel file system aged, on the fsync workloads";
    goals.push(match augefs {
        Some(a) if !kernels.is_empty() && !fsync.is_empty() => {
            let ratios: Vec<(String, f64)> = fsync
                .iter()
                .map(|&(i, c)| {
                    let best = kernels
                        .iter()
                        .map(|k| median(&k.aged[i]))
                        .fold(0.0, f64::max);
                    (c.name(), median(&a.aged[i]) / best)
                })
                .collect();
            let worst = ratios
                .iter()
                .min_by(|x, y| x.1.total_cmp(&y.1))
                .expect("fsync workloads");
            Goal {
                text: text.into(),
                met: Some(worst.1 >= 1.0),
                evidence: format!("lowest {:.2}x ({})", worst.1, worst.0),
            }
        }
        _ => Goal {
            text: text.into(),
            met: None,
            evidence: "needs augefs, a kernel file system and an fsync workload".into(),
        },
    });
    goals
}

fn print_table(args: &Args, cases: &[Case], all: &[Figures]) {
    println!(
        "augefs bench aged: {} images filled to {}% then {}x churned, {} thread(s), {} s runs, median of {}",
        human(args.image_size),
        args.fill,
        args.churn,
        args.threads,
        args.seconds,
        args.runs
    );
    for f in all {
        if let Some(why) = &f.skipped {
            println!("{}: skipped: {why}", f.target);
            continue;
        }
        println!(
            "{}: aged by {} files, {} written, {:.1}% used",
            f.target,
            f.aged_files,
            human(f.aged_written),
            f.aged_used_percent
        );
    }
    print!("{:<22}", "workload (ops/s)");
    for f in all.iter().filter(|f| f.skipped.is_none()) {
        print!(
            " {:>12} {:>12} {:>6}",
            format!("{} fresh", f.target),
            format!("{} aged", f.target),
            "ratio"
        );
    }
    println!();
    for (i, case) in cases.iter().enumerate() {
        print!("{:<22}", case.name());
        for f in all.iter().filter(|f| f.skipped.is_none()) {
            let (fresh, aged) = (median(&f.fresh[i]), median(&f.aged[i]));
            print!(" {fresh:>12.0} {aged:>12.0} {:>5.2}x", aged / fresh);
        }
        println!();
    }
}

fn figures_json(f: &Figures) -> Value {
    json!({
        "target": f.target,
        "skipped": f.skipped,
        "fresh_ops_per_s": f.fresh,
        "aged_ops_per_s": f.aged,
        "aged_files": f.aged_files,
        "aged_written_bytes": f.aged_written,
        "aged_used_percent": f.aged_used_percent,
    })
}
