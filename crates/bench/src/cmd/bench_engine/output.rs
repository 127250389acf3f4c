//! What `augefs bench engine` prints besides the table: the header that says what was
//! measured and how, the recovery runs, the verdict on the recovery goal and
//! the paper's figure to compare with, and the JSON document.

use super::crash::{CRASH_THREADS, CRASH_WRITE_BYTES};
use super::figures::DOMAIN_THREADS;
use super::report::{Figure, Key, Report, System};
use super::{Args, Environment, FigureSet, Paths};
use crate::goal::Goal;
use platform::units::human;
use serde_json::{json, Value};

/// The goal for the recovery figure, on this machine.
const RECOVERY_GOAL_MS: f64 = 400.0;
/// The crash size the goal is stated for.
const RECOVERY_GOAL_CRASH_BYTES: u64 = 1 << 30;

fn recovery_row_key(report: &Report) -> Option<Key> {
    report
        .rows
        .iter()
        .find(|r| r.key.figure == Figure::Recovery)
        .map(|r| r.key)
}

pub(super) fn goals(args: &Args, report: &Report) -> Vec<Goal> {
    let recovery = recovery_row_key(report)
        .and_then(|k| report.row(k))
        .and_then(|r| r.spread());
    let text = format!(
        "recovery after a crash during 1 GiB of appends <= {RECOVERY_GOAL_MS:.0} ms (the paper: 393 ms, F2FS 2.6 s)"
    );
    let goal = match recovery {
        None => Goal {
            text,
            met: None,
            evidence: "needs the recovery figure".to_string(),
        },
        Some(_) if args.crash_size != RECOVERY_GOAL_CRASH_BYTES => Goal {
            text,
            met: None,
            evidence: format!("this run crashed after {}", human(args.crash_size)),
        },
        Some(s) => Goal {
            text,
            met: Some(s.median <= RECOVERY_GOAL_MS),
            evidence: format!(
                "median {:.1} ms, runs {:.1} - {:.1} ms",
                s.median, s.min, s.max
            ),
        },
    };
    vec![goal]
}

/// The paper's fsync figure beside ours (not a goal: the paper's device and PMR differ).
pub(super) fn references(report: &Report) -> Vec<String> {
    let ratio = report
        .rows
        .iter()
        .find(|r| r.key.figure == Figure::AsyncOverOrdered && r.key.threads == 1)
        .and_then(|r| r.spread());
    let here = match ratio {
        Some(s) => format!(
            "{:+.0}% here (paired median {:.2}x, runs {:.2} - {:.2})",
            (s.median - 1.0) * 100.0,
            s.median,
            s.min,
            s.max
        ),
        None => "not measured here (needs the fsync figure with 1 thread)".to_string(),
    };
    vec![format!(
        "the paper (section VII): asynchronous fsync +40% over ordered at 1 thread; {here}"
    )]
}

pub(super) fn print_header(args: &Args, paths: &Paths, env: &Environment) {
    let unknown = || "?".to_string();
    println!(
        "augefs bench engine: {}, {} domains by default ({} segments); {} runs of each figure, {} s per throughput run; {} CPUs",
        env.device.describe(args.image_size, &paths.scratch),
        env.default_domains.map_or_else(unknown, |d| d.to_string()),
        env.segment_count.map_or_else(unknown, |s| s.to_string()),
        args.common.runs,
        args.seconds,
        env.cpus,
    );
    if let Some(notice) = &env.device.notice {
        println!("note: {notice}");
    }
    if args.figures.contains(&FigureSet::Fsync) {
        println!(
            "fsync: T threads each append 4 KiB blocks with fsync to a file of its own (inodes 1..=T, so domains 1..=T); the async path (data and WAL record in flight together, one flush) and the ordered path (data, flush, record, flush) take turns with ext4, the first rotating by run"
        );
        println!(
            "ext4: {}",
            env.ext4.clone().unwrap_or_else(|| "not set up".to_string())
        );
    }
    if args.figures.contains(&FigureSet::Recovery) {
        println!(
            "recovery: a child process appends {} with fsync from {CRASH_THREADS} threads (a file each) and is SIGKILLed once {} are acknowledged; then Engine::open is timed (wall clock) and every file's first and last acknowledged block is read back; a fresh image each run",
            human(CRASH_WRITE_BYTES),
            human(args.crash_size),
        );
    }
    if args.figures.contains(&FigureSet::Domains) {
        let skipped = if env.domains_skipped.is_empty() {
            String::new()
        } else {
            format!("; skipped (image too small): {:?}", env.domains_skipped)
        };
        println!(
            "domains: {DOMAIN_THREADS} threads as in fsync (async path) on images formatted with {:?} domains{skipped}",
            args.domains
        );
    }
    println!(
        "note: this machine has {} CPUs; above that many threads the figures show how waits on the device overlap, not parallel CPU work",
        env.cpus
    );
    println!("paired = median of run-by-run ratios; bytes/fsync = device writes per fsync by cause (data, MetaDB WAL, MetaDB tables and manifest, other: checkpoints, superblocks)");
}

pub(super) fn print_recoveries(report: &Report) {
    let Some(row) = recovery_row_key(report).and_then(|k| report.row(k)) else {
        return;
    };
    for (i, s) in row.samples.iter().enumerate() {
        let d = &s.detail;
        println!(
            "recovery run {}: Engine::open {:.1} ms after {} acknowledged ({:.0} MiB/s of appends); replayed {} records, verified {} blocks, dropped {}; {} live blocks, {} recovered past the acknowledged end; reads {}",
            i + 1,
            s.value,
            human(d["acknowledged_bytes"].as_u64().unwrap_or(0)),
            d["acknowledged_bytes"].as_f64().unwrap_or(0.0)
                / (d["appending_ns"].as_f64().unwrap_or(0.0) / 1e9).max(1e-9)
                / f64::from(1 << 20),
            d["replay_records"],
            d["replay_blocks_verified"],
            d["replay_records_dropped"],
            d["valid_blocks"],
            d["unacknowledged_blocks_recovered"],
            human(d["open_read_bytes"].as_u64().unwrap_or(0)),
        );
    }
}

pub(super) fn report_json(
    args: &Args,
    paths: &Paths,
    env: &Environment,
    report: &Report,
) -> String {
    let goals: Vec<Value> = goals(args, report).iter().map(Goal::json).collect();
    let value = json!({
        "config": {
            "dir": paths.scratch.dir,
            "dir_fs": paths.scratch.dir_fs,
            "image_bytes": args.image_size,
            "threads": args.threads,
            "seconds": args.seconds,
            "runs": args.common.runs,
            "domains": args.domains,
            "domain_threads": DOMAIN_THREADS,
            "crash_bytes": args.crash_size,
            "crash_threads": CRASH_THREADS,
            "crash_write_bytes": CRASH_WRITE_BYTES,
            "systems": [System::Async.name(), System::Ordered.name(), System::Ext4.name()],
        },
        "environment": {
            "backend": env.device.backend,
            "notice": env.device.notice,
            "logical_block_bytes": env.device.logical_block_bytes,
            "default_domains": env.default_domains,
            "segment_count": env.segment_count,
            "cpus": env.cpus,
            "ext4": env.ext4,
            "domains_skipped": env.domains_skipped,
        },
        "rows": report.rows_json(args.crash_size),
        "goals": goals,
        "references": references(report),
    });
    serde_json::to_string_pretty(&value).expect("JSON values serialise")
}
