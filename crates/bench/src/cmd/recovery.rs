//! `augefs bench recovery [--dir DIR] [--bytes 8GiB] [--image-size S] [--threads 4]
//! [--runs N] [--backend B] [--json] [--json-file F] [--keep]`: recovery of the whole
//! file system after a crash at scale (augefs.txt §VI-A reports 393 ms after 24 GB).
//!
//! Each run formats the image, starts a child process that mounts it through the file
//! system's API and writes a mix of small fsync'd files and fsync'd appends to logs from
//! `--threads` threads (`recovery/workload.rs`), kills it with SIGKILL once `--bytes`
//! are acknowledged, then times `FileSystem::mount` in this process with its breakdown
//! (superblock, MetaDB's WAL replay, the domains' rebuild, MetaDB's recovery flush, the
//! file system's orphans), checks every file against what was written
//! (`recovery/check.rs`), unmounts and runs `augefs fsck -n` on the image. Goal: the
//! mount in at most 400 ms after 8 GiB.
//!
//! Invariants:
//! - A run whose check or fsck fails is an error, never a sample.
//! - One file system is open on the image at a time: the child's, then this process's
//!   (the device layer locks the image; a killed child's lock goes with its IO).
//! - The image carries the process id and is removed at the end (also after an error)
//!   unless `--keep`; the child is killed by a guard whatever happens.
//! - Progress goes to stderr; the table or JSON alone to stdout.

mod check;
mod child;
mod workload;

pub use child::{child, ChildArgs};

use crate::augefs;
use crate::child::CrashChild;
use crate::goal::Goal;
use crate::image::{self, DeviceFacts};
use crate::options::{check_image_size, Common};
use crate::scratch::Scratch;
use crate::siblings;
use crate::stats::spread;
use check::Checked;
use engine::log::MountReport;
use platform::units::{human, parse_size};
use platform::{Clock, IoCause, SystemClock};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};
use vfs::MountFacts;
use workload::FileId;

/// The benchmark's images carry a fixed uuid: they never outlive the run.
const FS_UUID: [u8; 16] = *b"augefs-bench-rcv";
/// The parent gives up on a child that prints nothing for this long.
const STALL_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a killed child's image may stay locked (its IO is torn down asynchronously).
const RELEASE_WAIT: Duration = Duration::from_secs(10);
/// The goal: a mount after 8 GiB of writes in at most this long.
const MOUNT_GOAL_MS: f64 = 400.0;
const GOAL_BYTES: u64 = 8 << 30;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Directory for the image file, on the disk under test (created if missing).
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
    /// Bytes acknowledged (fsync'd) before the child is killed.
    #[arg(long, value_parser = parse_size, default_value = "8GiB")]
    pub bytes: u64,
    /// Size of the image (default: 1.5 x --bytes + 2 GiB).
    #[arg(long, value_parser = parse_size)]
    pub image_size: Option<u64>,
    /// Writer threads of the child: even ones write small files, odd ones logs.
    #[arg(long, default_value_t = 4)]
    pub threads: u32,
    #[command(flatten)]
    pub common: Common,
}

impl Args {
    fn image_bytes(&self) -> u64 {
        self.image_size
            .unwrap_or(((self.bytes / 2 * 3 + (2 << 30)) >> 20) << 20)
    }
}

fn validate(args: &Args) -> Result<(), String> {
    if !(1..=64).contains(&args.threads) {
        return Err("--threads must be in 1..=64".into());
    }
    if args.bytes < (64 << 20) {
        return Err("--bytes must be at least 64 MiB".into());
    }
    if args.common.runs == 0 {
        return Err("--runs must be at least 1".into());
    }
    check_image_size(args.image_bytes())?;
    // The child may issue a quarter more than it is killed at, and MetaDB needs room.
    if args.image_bytes() < args.bytes / 4 * 5 + (256 << 20) {
        return Err(format!(
            "--image-size {} is too small for --bytes {}: give at least 1.25 x --bytes + 256 MiB",
            human(args.image_bytes()),
            human(args.bytes)
        ));
    }
    Ok(())
}

/// One run's figures.
#[derive(Debug)]
struct Sample {
    mount_ns: u64,
    engine: MountReport,
    facts: MountFacts,
    acknowledged_files: u64,
    acknowledged_bytes: u64,
    writing_ns: u64,
    mount_read_bytes: u64,
    mount_wal_read_bytes: u64,
    mount_written_bytes: u64,
    mount_flushes: u64,
    checked: Checked,
    fsck_ns: u64,
}

pub fn run(args: Args) -> Result<(), String> {
    validate(&args)?;
    let scratch = Scratch::create(&args.dir)?.keeping(args.common.keep);
    let image = scratch.named("recovery", ".img");
    let mut device = DeviceFacts::default();
    let measured = measure(&args, &image, &mut device);
    if args.common.keep {
        eprintln!("augefs: kept {}", image.display());
        scratch.remove(&[], &[]);
    } else {
        scratch.remove(&[&image], &[]);
    }
    let samples = measured?;
    let goal = goal(&args, &samples);
    let document = json!({
        "benchmark": "recovery",
        "image": device.describe(args.image_bytes(), &scratch),
        "bytes": args.bytes,
        "threads": args.threads,
        "runs": samples.iter().map(sample_json).collect::<Vec<Value>>(),
        "goals": [goal.json()],
    });
    args.common.emit_value(&document, || {
        println!(
            "augefs bench recovery: {} acknowledged by {} threads (small fsync'd files and fsync'd log appends), SIGKILL, FileSystem::mount timed",
            human(args.bytes),
            args.threads
        );
        println!("image: {}", device.describe(args.image_bytes(), &scratch));
        print_table(&samples);
        println!("goal: {}: {}", goal.text, goal.verdict());
    })
}

fn measure(args: &Args, image: &Path, facts: &mut DeviceFacts) -> Result<Vec<Sample>, String> {
    image::prepare(image, args.image_bytes(), args.common.backend)?;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let mut samples = Vec::new();
    for run in 0..args.common.runs {
        let device = image::open_device(image, args.common.backend)?;
        facts.note(&device);
        augefs::format(&device, None, clock.as_ref(), FS_UUID)?;
        drop(device);
        let crash = crash(args, image, run)?;
        let sample = recover(args, image, &clock, crash)?;
        eprintln!(
            "augefs: recovery run {}/{}: {} in {} files acknowledged, killed, mount {:.1} ms, {} files ({}) checked, fsck clean",
            run + 1,
            args.common.runs,
            human(sample.acknowledged_bytes),
            sample.acknowledged_files,
            sample.mount_ns as f64 / 1e6,
            sample.checked.files,
            human(sample.checked.bytes),
        );
        samples.push(sample);
    }
    Ok(samples)
}

/// What the child acknowledged before it died.
#[derive(Debug, Default)]
struct Crash {
    acknowledged: BTreeMap<FileId, u64>,
    /// From "mounted" to the kill.
    writing_ns: u64,
}

impl Crash {
    fn note(&mut self, line: &str) -> Result<u64, String> {
        let (file, bytes) =
            FileId::parse_ack(line).ok_or_else(|| format!("the crash child printed {line:?}"))?;
        let known = self.acknowledged.entry(file).or_default();
        let added = bytes.saturating_sub(*known);
        *known = (*known).max(bytes);
        Ok(added)
    }
}

/// Runs the child on the formatted image until it has acknowledged `args.bytes`, then
/// kills it.
fn crash(args: &Args, image: &Path, run: u32) -> Result<Crash, String> {
    let per_thread = args.bytes / 4 * 5 / u64::from(args.threads);
    let mut command = Command::new(siblings::this_exe()?);
    command
        .arg("recovery-child")
        .arg("--image")
        .arg(image)
        .args(["--backend", args.common.backend.name()])
        .args(["--threads", &args.threads.to_string()])
        .args(["--limit-per-thread", &per_thread.to_string()]);
    let child = CrashChild::spawn(command, "crash child")?;
    let mut crash = Crash::default();
    let (mut done, mut next_progress) = (0u64, 1u64 << 30);
    crash.writing_ns = child.until_killed(STALL_TIMEOUT, |line| {
        done += crash.note(line)?;
        if done >= next_progress && done < args.bytes {
            eprintln!(
                "augefs: recovery run {}/{}: {} acknowledged",
                run + 1,
                args.common.runs,
                human(done)
            );
            next_progress += 1 << 30;
        }
        Ok(done >= args.bytes)
    })?;
    Ok(crash)
}

/// Mounts the crashed image (timed), checks it, unmounts and runs fsck.
fn recover(
    args: &Args,
    image: &Path,
    clock: &Arc<dyn Clock>,
    crash: Crash,
) -> Result<Sample, String> {
    let device = image::open_device_released(image, args.common.backend, RELEASE_WAIT)?;
    let before = device.counters().snapshot();
    let started = Instant::now();
    let fs = augefs::mount(&device, None, clock)?;
    let mount_ns = started.elapsed().as_nanos() as u64;
    let io = device.counters().snapshot().since(&before);
    let engine = fs.engine().mount_report().clone();
    let facts = fs.mount_facts();
    let checked = check::check(&fs, &crash.acknowledged);
    let unmounted = augefs::unmount(fs);
    drop(device);
    let checked = checked?;
    unmounted?;
    let fsck_started = Instant::now();
    fsck(image)?;
    Ok(Sample {
        mount_ns,
        engine,
        facts,
        acknowledged_files: crash.acknowledged.len() as u64,
        acknowledged_bytes: crash.acknowledged.values().sum(),
        writing_ns: crash.writing_ns,
        mount_read_bytes: io.total().read_bytes,
        mount_wal_read_bytes: io.cause(IoCause::Wal).read_bytes,
        mount_written_bytes: io.total().write_bytes,
        mount_flushes: io.total().flush_ops,
        checked,
        fsck_ns: fsck_started.elapsed().as_nanos() as u64,
    })
}

/// `augefs fsck -n IMAGE` must find the image clean.
fn fsck(image: &Path) -> Result<(), String> {
    let out = Command::new(siblings::augefs()?)
        .args(["fsck", "-n"])
        .arg(image)
        .output()
        .map_err(|e| format!("running augefs fsck: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "augefs fsck -n {} after recovery: {}\n{}{}",
            image.display(),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

fn goal(args: &Args, samples: &[Sample]) -> Goal {
    let text = format!(
        "mount after a crash following {} of writes <= {MOUNT_GOAL_MS} ms",
        human(GOAL_BYTES)
    );
    let ms: Vec<f64> = samples.iter().map(|s| s.mount_ns as f64 / 1e6).collect();
    let Some(s) = spread(&ms) else {
        return Goal {
            text,
            met: None,
            evidence: "no run".into(),
        };
    };
    let evidence = format!(
        "median {:.1} ms over {} runs ({:.1}-{:.1}) after {}",
        s.median,
        ms.len(),
        s.min,
        s.max,
        human(args.bytes)
    );
    Goal {
        text,
        met: (args.bytes >= GOAL_BYTES).then_some(s.median <= MOUNT_GOAL_MS),
        evidence,
    }
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

fn print_table(samples: &[Sample]) {
    println!(
        "{:>3} {:>9} {:>8} {:>8} | {:>8} = {:>6} {:>7} {:>7} {:>7} {:>7} | {:>9} {:>8} {:>6} {:>9}",
        "run",
        "acked",
        "files",
        "MB/s",
        "mount ms",
        "super",
        "replay",
        "domains",
        "finish",
        "orphans",
        "WAL read",
        "records",
        "dropped",
        "unacked"
    );
    for (i, s) in samples.iter().enumerate() {
        let t = &s.engine.timings;
        println!(
            "{:>3} {:>9} {:>8} {:>8.0} | {:>8.1} = {:>6.1} {:>7.1} {:>7.1} {:>7.1} {:>7.1} | {:>9} {:>8} {:>6} {:>9}",
            i + 1,
            human(s.acknowledged_bytes),
            s.acknowledged_files,
            s.acknowledged_bytes as f64 / (s.writing_ns.max(1) as f64 / 1e9) / 1e6,
            ms(s.mount_ns),
            ms(t.superblock_ns),
            ms(t.replay_ns),
            ms(t.domains_ns),
            ms(t.finish_ns),
            ms(s.facts.orphans_ns),
            human(s.mount_wal_read_bytes),
            s.engine.replay.records,
            s.engine.replay.records_dropped,
            human(s.checked.unacknowledged_bytes),
        );
    }
    println!("(mount ms = the engine's phases + the file system's orphans + the rest; MB/s: acknowledged bytes over the child's writing time)");
}

fn sample_json(s: &Sample) -> Value {
    let t = &s.engine.timings;
    json!({
        "mount_ns": s.mount_ns,
        "superblock_ns": t.superblock_ns,
        "replay_ns": t.replay_ns,
        "domains_ns": t.domains_ns,
        "finish_ns": t.finish_ns,
        "orphans_ns": s.facts.orphans_ns,
        "orphans_freed": s.facts.orphans_freed,
        "replay_records": s.engine.replay.records,
        "replay_blocks_verified": s.engine.replay.blocks_verified,
        "replay_records_dropped": s.engine.replay.records_dropped,
        "domain_segments": s.engine.domain_segments,
        "valid_blocks": s.engine.valid_blocks,
        "acknowledged_files": s.acknowledged_files,
        "acknowledged_bytes": s.acknowledged_bytes,
        "writing_ns": s.writing_ns,
        "mount_read_bytes": s.mount_read_bytes,
        "mount_wal_read_bytes": s.mount_wal_read_bytes,
        "mount_written_bytes": s.mount_written_bytes,
        "mount_flushes": s.mount_flushes,
        "checked_files": s.checked.files,
        "checked_bytes": s.checked.bytes,
        "unacknowledged_files": s.checked.unacknowledged_files,
        "unacknowledged_bytes": s.checked.unacknowledged_bytes,
        "fsck_ns": s.fsck_ns,
    })
}
