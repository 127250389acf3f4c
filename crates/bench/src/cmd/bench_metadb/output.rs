//! What `augefs bench metadb` prints besides the table: the header that says what was
//! measured and how (the PMR is labelled emulated), the verdict on each of the issue's
//! goals (`crate::goal`), and the JSON document.

use super::figures::AGED_THREADS;
use super::report::{count, Figure, Report, System};
use super::{Args, Environment, Paths};
use crate::goal::Goal;
use platform::units::human;
use serde_json::{json, Value};

pub(super) fn goals(report: &Report) -> Vec<Goal> {
    let mut goals = Vec::new();
    for (system, factor) in [(System::Pmr, 5.0), (System::Ssd, 1.5)] {
        // Judged on the ratio of medians; the paired ratio is shown beside it.
        let ratios: Vec<(usize, f64, Option<f64>)> = report
            .rows
            .iter()
            .filter(|r| r.figure == Figure::PutSync && r.system == system && r.threads >= 2)
            .filter_map(|r| {
                let ratio = report.ratio(r)?;
                Some((r.threads, ratio, report.paired_ratio(r)))
            })
            .collect();
        let evidence = if ratios.is_empty() {
            "needs the put figure with 2 or more threads".to_string()
        } else {
            ratios
                .iter()
                .map(|(t, r, p)| match p {
                    Some(p) => format!("{t} threads {r:.2}x (paired {p:.2}x)"),
                    None => format!("{t} threads {r:.2}x"),
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        goals.push(Goal {
            text: format!(
                "sync put >= {factor}x fjall in {} mode at 2+ threads",
                system.name()
            ),
            met: (!ratios.is_empty()).then(|| ratios.iter().all(|&(_, r, _)| r >= factor)),
            evidence,
        });
    }
    for sync in [true, false] {
        let kind = if sync { "sync" } else { "buffered" };
        let kept = report
            .row(Figure::AgedKept { sync }, AGED_THREADS, System::Ssd)
            .and_then(|r| r.spread());
        goals.push(Goal {
            text: format!(
                "under 10% {kind} put throughput loss from a store of a tenth of --keys to --keys (ssd mode, {AGED_THREADS} threads)"
            ),
            met: kept.map(|s| s.median >= 0.9),
            evidence: match kept {
                Some(s) => format!(
                    "large / small {:.3} (runs {:.3} - {:.3}), loss {:.1}%",
                    s.median,
                    s.min,
                    s.max,
                    ((1.0 - s.median) * 100.0).max(0.0)
                ),
                None => "needs the get figure with ssd mode".to_string(),
            },
        });
    }
    goals
}

pub(super) fn print_header(args: &Args, paths: &Paths, env: &Environment) {
    let unknown = || "?".to_string();
    println!(
        "augefs bench metadb: {}; {} runs; put runs of {} s{}",
        env.device.describe(args.image_size, &paths.scratch),
        args.common.runs,
        args.seconds,
        args.ops
            .map_or(String::new(), |n| format!(" or {n} puts per thread")),
    );
    if let Some(notice) = &env.device.notice {
        println!("note: {notice}");
    }
    println!(
        "pmr mode: WAL on the {}",
        paths.pmr.describe(env.pmr_persist_mode)
    );
    let config = args.metadb_config();
    println!(
        "ssd mode: WAL in the image's {} WAL region; MetaDB defaults: {} lanes, {} memtables, {} block cache, background flush and compaction",
        env.wal_region_bytes.map_or_else(unknown, human),
        config.lanes,
        human(config.memtable_bytes as u64),
        human(config.block_cache_bytes as u64),
    );
    println!(
        "fjall 3 in {}: sync put = 1-item batch with PersistMode::SyncData (fdatasync per write), buffered = Keyspace::insert; {} cache; bytes/put from /proc/self/io",
        paths.fjall.display(),
        human(args.cache_bytes()),
    );
    println!(
        "keys m:<parent>:<name> (24 B), values 100 random B; load and gets: 1 thread, ssd mode, {} keys, {} gets per round",
        count(args.keys),
        count(args.gets),
    );
    println!("vs fjall = augefs median / fjall median; paired = median of per-run ratios (us and ms rows: lower is better); bytes/put include making buffered puts durable at the end of the run");
}

pub(super) fn report_json(args: &Args, paths: &Paths, env: &Environment, report: &Report) -> Value {
    let goals: Vec<Value> = goals(report).iter().map(Goal::json).collect();
    let value = json!({
        "config": {
            "dir": paths.scratch.dir,
            "dir_fs": paths.scratch.dir_fs,
            "image_bytes": args.image_size,
            "pmr_dir": args.pmr.dir,
            "pmr_dir_fs": paths.pmr.dir_fs,
            "pmr_bytes": args.pmr.bytes,
            "pmr_latency_ns_per_line": args.pmr.latency_ns_per_line,
            "pmr_emulated": env.pmr_persist_mode.is_none_or(|m| m.is_emulated()),
            "pmr": paths.pmr.json(env.pmr_persist_mode),
            "threads": args.threads,
            "seconds": args.seconds,
            "ops_per_thread": args.ops,
            "keys": args.keys,
            "gets": args.gets,
            "runs": args.common.runs,
            "fjall_sync": "write batch with PersistMode::SyncData",
            "fjall_buffered": "Keyspace::insert (default: write to the OS, no sync)",
            "cache_bytes": args.cache_bytes(),
        },
        "environment": {
            "backend": env.device.backend,
            "notice": env.device.notice,
            "logical_block_bytes": env.device.logical_block_bytes,
            "pmr_persist_mode": env.pmr_persist_mode.map(|m| m.name()),
            "wal_region_bytes": env.wal_region_bytes,
            "segment_count": env.segment_count,
        },
        "rows": report.rows_json(args.keys),
        "goals": goals,
    });
    value
}
