//! `augefs bench files [--dir DIR] [--files 10M] [--window 1M] [--threads 2]
//! [--lookups 100K] [--data-every 10] [--targets augefs,ext4] [--image-size S] [--json]
//! [--json-file F] [--keep]`: a store of millions of files, on augefs (through its API)
//! and on kernel file systems (loop devices over image files in the same directory).
//!
//! Per target: `--threads` threads create `--files` files, 1,000 to a directory, every
//! `--data-every`th with 4 KiB of data (the rest empty: 10 M files of 4 KiB would need 40
//! GiB per target), timing each `--window` of files; a sync; an unmount and a mount with
//! cold caches (the kernel's dropped), timed; then `--lookups` stats of random files and
//! `--lookups` reads of random files with data (each checked), from the same threads.
//! Goals: augefs's create rate in the last window within 10% of the first, and its cold
//! stat and read rates >= 1x ext4's.
//!
//! Invariants:
//! - A read that returns other bytes than the file's is an error, not a sample.
//! - Random choices come from a seeded generator: every target gets the same files.
//! - Images carry the process id and are removed at the end unless `--keep`; loop
//!   devices and mounts are undone by guards (also on a signal).

use super::bench_fs::ops::Fs;
use crate::goal::Goal;
use crate::image_target::{self as target, Target};
use crate::kernelfs::KERNEL_FS;
use crate::options::parse_count;
use crate::scratch::Scratch;
use platform::units::{human, parse_size};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Files per directory.
pub const FILES_PER_DIR: u64 = 1000;
/// Bytes of a file with data.
pub const DATA_BYTES: usize = 4096;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Directory for the image files, on the disk under test (created if missing).
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
    /// Files to create (a multiple of 1000).
    #[arg(long, value_parser = parse_count, default_value = "10M")]
    pub files: u64,
    /// Files per timed window of the creates.
    #[arg(long, value_parser = parse_count, default_value = "1M")]
    pub window: u64,
    #[arg(long, default_value_t = 2)]
    pub threads: u32,
    /// Random stats, and random reads, after the cold mount.
    #[arg(long, value_parser = parse_count, default_value = "100K")]
    pub lookups: u64,
    /// One file in this many has 4 KiB of data.
    #[arg(long, default_value_t = 10)]
    pub data_every: u64,
    /// augefs and kernel file systems (ext2, ext4, xfs, btrfs), in the order run.
    #[arg(long, value_delimiter = ',', default_value = "augefs,ext4")]
    pub targets: Vec<String>,
    /// Size of each image (default: from --files and --data-every).
    #[arg(long, value_parser = parse_size)]
    pub image_size: Option<u64>,
    #[arg(long)]
    pub json: bool,
    #[arg(long)]
    pub json_file: Option<PathBuf>,
    /// Keep the image files.
    #[arg(long)]
    pub keep: bool,
}

impl Args {
    /// Data, about 1 KiB of metadata a file for the LSM tree's copies, and 4 GiB of room.
    pub fn image_bytes(&self) -> u64 {
        self.image_size.unwrap_or_else(|| {
            let data = self.files / self.data_every * DATA_BYTES as u64;
            ((data * 2 + self.files * 1024 + (4 << 30)) >> 20) << 20
        })
    }
}

fn validate(args: &Args) -> Result<(), String> {
    if args.files == 0 || args.files % FILES_PER_DIR != 0 {
        return Err("--files must be a positive multiple of 1000".into());
    }
    if args.window < FILES_PER_DIR || args.window > args.files {
        return Err("--window must be in 1000..=--files".into());
    }
    if !(1..=64).contains(&args.threads) {
        return Err("--threads must be in 1..=64".into());
    }
    if args.lookups == 0 || args.data_every == 0 || args.data_every > args.files {
        return Err(
            "--lookups and --data-every must be positive, --data-every at most --files".into(),
        );
    }
    if let Some(bad) = args
        .targets
        .iter()
        .find(|t| *t != "augefs" && !KERNEL_FS.contains(&t.as_str()))
    {
        return Err(format!(
            "--targets: unknown target {bad:?} (augefs, {})",
            KERNEL_FS.join(", ")
        ));
    }
    if args.targets.is_empty() {
        return Err("--targets must name at least one target".into());
    }
    crate::options::check_image_size(args.image_bytes())
}

/// What one target measured.
#[derive(Debug, Default)]
struct Figures {
    target: String,
    /// Files per second in each window of the creates.
    windows: Vec<f64>,
    create_ns: u64,
    sync_ns: u64,
    mount_ns: u64,
    stats_per_s: f64,
    reads_per_s: f64,
    /// Device read requests per cold stat, and per cold read.
    stat_device_reads: f64,
    read_device_reads: f64,
    used_bytes: u64,
    /// Why the target was skipped, if it was.
    skipped: Option<String>,
}

pub fn run(args: Args) -> Result<(), String> {
    validate(&args)?;
    let scratch = Scratch::create(&args.dir)?.keeping(args.keep);
    let all = target::each_target(
        &scratch,
        "files",
        &args.targets,
        args.keep,
        |name, image| measure(&args, name, image),
    )?;
    let goals = goals(&all);
    let document = json!({
        "benchmark": "files",
        "files": args.files,
        "window": args.window,
        "threads": args.threads,
        "lookups": args.lookups,
        "data_every": args.data_every,
        "image_bytes": args.image_bytes(),
        "targets": all.iter().map(figures_json).collect::<Vec<Value>>(),
        "goals": goals.iter().map(Goal::json).collect::<Vec<Value>>(),
    });
    let text = serde_json::to_string_pretty(&document).expect("JSON of plain values");
    crate::options::emit(args.json, args.json_file.as_deref(), &text, || {
        print_table(&args, &all);
        for goal in &goals {
            println!("goal: {}: {}", goal.text, goal.verdict());
        }
    })
}

fn measure(args: &Args, name: &str, image: &std::path::Path) -> Result<Figures, String> {
    let mut figures = Figures {
        target: name.to_string(),
        ..Figures::default()
    };
    let mut target = match Target::make(name, image, args.image_bytes(), args.files) {
        Ok(t) => t,
        // augefs is what is measured: it never skips.
        Err(target::Skip(why)) if name == "augefs" => return Err(why),
        Err(target::Skip(why)) => {
            eprintln!("augefs: {name}: skipped: {why}");
            figures.skipped = Some(why);
            return Ok(figures);
        }
    };
    eprintln!("augefs: {name}: creating {} files", args.files);
    let started = Instant::now();
    figures.windows = create(args, name, target.fs()?)?;
    figures.create_ns = started.elapsed().as_nanos() as u64;
    let synced = Instant::now();
    target.sync()?;
    figures.sync_ns = synced.elapsed().as_nanos() as u64;
    figures.mount_ns = target.remount_cold()?;
    eprintln!("augefs: {name}: {} random stats and reads", args.lookups);
    let before = target.device_reads()?;
    figures.stats_per_s = lookups(args, target.fs()?, false)?;
    let between = target.device_reads()?;
    figures.reads_per_s = lookups(args, target.fs()?, true)?;
    let after = target.device_reads()?;
    figures.stat_device_reads = (between - before) as f64 / args.lookups as f64;
    figures.read_device_reads = (after - between) as f64 / args.lookups as f64;
    figures.used_bytes = target.used_bytes()?;
    target.finish()?;
    Ok(figures)
}

/// File `i`'s path (relative to the tree's root) and content.
pub fn path_of(i: u64) -> String {
    format!("d{}/f{i}", i / FILES_PER_DIR)
}

pub fn content_of(i: u64, buf: &mut [u8]) {
    buf.fill((i % 251) as u8);
    buf[..8].copy_from_slice(&i.to_le_bytes());
}

/// The creates; files per second in each window.
fn create(args: &Args, name: &str, tree: &dyn Fs) -> Result<Vec<f64>, String> {
    let dirs = args.files / FILES_PER_DIR;
    let next_dir = AtomicU64::new(0);
    let done = AtomicU64::new(0);
    let started = Instant::now();
    // Elapsed time at the end of each window.
    let marks = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..args.threads)
            .map(|_| {
                scope.spawn(|| -> Result<(), String> {
                    let mut data = vec![0u8; DATA_BYTES];
                    loop {
                        let d = next_dir.fetch_add(1, Ordering::Relaxed);
                        if d >= dirs {
                            return Ok(());
                        }
                        tree.mkdir(&format!("d{d}"))?;
                        for i in d * FILES_PER_DIR..(d + 1) * FILES_PER_DIR {
                            let with_data = i % args.data_every == 0;
                            if with_data {
                                content_of(i, &mut data);
                            }
                            let file = tree.create(&path_of(i))?;
                            if with_data {
                                file.write_at(&data, 0)?;
                            }
                            let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                            if n % args.window == 0 {
                                let at = started.elapsed();
                                marks.lock().expect("marks lock").push((n, at));
                                eprintln!("augefs: {name}: {n} files in {:.1} s", at.as_secs_f64());
                            }
                        }
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("a create thread panicked"))
            .collect::<Result<Vec<()>, String>>()
    })?;
    let mut marks = marks.into_inner().expect("marks lock");
    marks.sort();
    let mut rates = Vec::new();
    let mut last = (0u64, Duration::ZERO);
    for (n, at) in marks {
        rates.push((n - last.0) as f64 / (at - last.1).as_secs_f64().max(1e-9));
        last = (n, at);
    }
    Ok(rates)
}

/// `--lookups` stats (or reads of files with data, checked) of random files; per second.
fn lookups(args: &Args, tree: &dyn Fs, read: bool) -> Result<f64, String> {
    let per_thread = args.lookups.div_ceil(u64::from(args.threads));
    let with_data = args.files.div_ceil(args.data_every);
    let started = Instant::now();
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..args.threads)
            .map(|t| {
                scope.spawn(move || -> Result<(), String> {
                    let mut rng =
                        platform::Rng::from_seed(u64::from(t) + if read { 1 << 32 } else { 0 });
                    let mut buf = vec![0u8; DATA_BYTES];
                    let mut want = vec![0u8; DATA_BYTES];
                    for _ in 0..per_thread {
                        let r = rng.next_u64();
                        if !read {
                            tree.stat(&path_of(r % args.files))?;
                            continue;
                        }
                        let i = (r % with_data) * args.data_every;
                        let got = tree.open(&path_of(i), false)?.read_at(&mut buf, 0)?;
                        content_of(i, &mut want);
                        if got != DATA_BYTES || buf != want {
                            return Err(format!(
                                "{}: read other bytes than were written",
                                path_of(i)
                            ));
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("a lookup thread panicked"))
            .collect::<Result<Vec<()>, String>>()
    })?;
    Ok((per_thread * u64::from(args.threads)) as f64 / started.elapsed().as_secs_f64())
}

fn goals(all: &[Figures]) -> Vec<Goal> {
    let find = |name: &str| all.iter().find(|f| f.target == name && f.skipped.is_none());
    let augefs = find("augefs");
    let ext4 = find("ext4");
    let steady = Goal {
        text: "augefs: create rate in the last window within 10% of the first".into(),
        met: augefs
            .filter(|a| a.windows.len() >= 2)
            .map(|a| a.windows[a.windows.len() - 1] >= 0.9 * a.windows[0]),
        evidence: augefs.filter(|a| a.windows.len() >= 2).map_or(
            "needs augefs and two windows".into(),
            |a| {
                format!(
                    "{:.0}/s in the first window, {:.0}/s in the last ({:.2}x)",
                    a.windows[0],
                    a.windows[a.windows.len() - 1],
                    a.windows[a.windows.len() - 1] / a.windows[0]
                )
            },
        ),
    };
    let ratio = |what: &str, f: fn(&Figures) -> f64| match (augefs, ext4) {
        (Some(a), Some(e)) => Goal {
            text: format!("augefs: cold random {what} >= 1x ext4"),
            met: Some(f(a) >= f(e)),
            evidence: format!("{:.0}/s against {:.0}/s ({:.2}x)", f(a), f(e), f(a) / f(e)),
        },
        _ => Goal {
            text: format!("augefs: cold random {what} >= 1x ext4"),
            met: None,
            evidence: "needs augefs and ext4".into(),
        },
    };
    vec![
        steady,
        ratio("stat", |f| f.stats_per_s),
        ratio("4 KiB file read", |f| f.reads_per_s),
    ]
}

fn print_table(args: &Args, all: &[Figures]) {
    println!(
        "augefs bench files: {} files ({} to a directory, one in {} with 4 KiB), {} threads, {} cold lookups, {} images",
        args.files,
        FILES_PER_DIR,
        args.data_every,
        args.threads,
        args.lookups,
        human(args.image_bytes())
    );
    println!(
        "{:<8} {:>10} {:>10} {:>10} {:>8} {:>9} {:>11} {:>11} {:>9}",
        "target",
        "create/s",
        "first win",
        "last win",
        "sync s",
        "mount ms",
        "cold stat/s",
        "cold read/s",
        "used"
    );
    println!("         (IOs: device read requests per cold stat and per cold read)");
    for f in all {
        if let Some(why) = &f.skipped {
            println!("{:<8} skipped: {why}", f.target);
            continue;
        }
        println!(
            "{:<8} {:>10.0} {:>10.0} {:>10.0} {:>8.2} {:>9.1} {:>11.0} {:>11.0} {:>9}",
            f.target,
            args.files as f64 / (f.create_ns as f64 / 1e9),
            f.windows.first().copied().unwrap_or(0.0),
            f.windows.last().copied().unwrap_or(0.0),
            f.sync_ns as f64 / 1e9,
            f.mount_ns as f64 / 1e6,
            f.stats_per_s,
            f.reads_per_s,
            human(f.used_bytes)
        );
        let windows: Vec<String> = f.windows.iter().map(|r| format!("{r:.0}")).collect();
        println!(
            "         creates/s by window of {}: {}",
            args.window,
            windows.join(" ")
        );
        println!(
            "         IOs: {:.2} per stat, {:.2} per read",
            f.stat_device_reads, f.read_device_reads
        );
    }
}

fn figures_json(f: &Figures) -> Value {
    json!({
        "target": f.target,
        "skipped": f.skipped,
        "create_windows_per_s": f.windows,
        "create_ns": f.create_ns,
        "sync_ns": f.sync_ns,
        "mount_ns": f.mount_ns,
        "cold_stats_per_s": f.stats_per_s,
        "cold_reads_per_s": f.reads_per_s,
        "cold_stat_device_reads": f.stat_device_reads,
        "cold_read_device_reads": f.read_device_reads,
        "used_bytes": f.used_bytes,
    })
}
