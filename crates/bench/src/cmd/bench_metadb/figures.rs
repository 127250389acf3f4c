//! The figures of `augefs bench metadb`: each runs its workload against the selected
//! stores, fresh for every run, and adds one sample per run to the report (the
//! measurement plan is in the parent module's documentation).
//!
//! Invariants:
//! - A put or recovery measurement has exactly one store open.
//! - In every run the stores take turns in [`turn_order`], so each goes first in turn.
//! - fjall's recovery run copies the shape (keys in tables, records in the log) of the
//!   first MetaDB run, which precedes it.

use super::baseline::{process_write_bytes, Fjall};
use super::keys;
use super::report::{count, Figure, PutBytes, Report, Sample, System};
use super::subject::{Augefs, IoMark, Setup, WalMode};
use super::workload::{self, Getter, Store};
use super::{Args, Environment, ModeArg, Paths};
use crate::scratch::remove_dir;
use crate::threads::Limit;
use crate::turns;
use metadb::MetaDbConfig;
use serde_json::{json, Value};
use std::time::Instant;

/// The order the selected stores take in run `run`: pmr, ssd, fjall rotated by `run`,
/// so each goes first in turn; fjall is last in run 0.
fn turn_order(modes: &[ModeArg], run: u32) -> Vec<System> {
    let order: Vec<System> = [ModeArg::Pmr, ModeArg::Ssd, ModeArg::Fjall]
        .into_iter()
        .filter(|m| modes.contains(m))
        .map(ModeArg::system)
        .collect();
    turns::turn_order(&order, run)
}

fn wal_mode(system: System) -> WalMode {
    match system {
        System::Pmr => WalMode::Pmr,
        System::Ssd => WalMode::Ssd,
        System::Fjall => unreachable!("fjall has no MetaDB WAL"),
    }
}

pub(super) fn put_figures(
    args: &Args,
    setup: &Setup,
    paths: &Paths,
    report: &mut Report,
    env: &mut Environment,
) -> Result<(), String> {
    let limit = args.put_limit();
    for &threads in &args.threads {
        for sync in [true, false] {
            let figure = if sync {
                Figure::PutSync
            } else {
                Figure::PutBuffered
            };
            for run in 0..args.common.runs {
                for system in turn_order(&args.modes, run) {
                    let sample = match system {
                        System::Fjall => put_fjall(args, paths, threads, sync, limit)?,
                        _ => put_augefs(args, setup, wal_mode(system), threads, sync, limit, env)?,
                    };
                    eprintln!(
                        "augefs: {} x{threads}, run {}/{}, {}: {:.0} ops/s",
                        figure.label(args.keys),
                        run + 1,
                        args.common.runs,
                        system.name(),
                        sample.value
                    );
                    report.add(figure, threads, system, sample);
                }
            }
        }
    }
    Ok(())
}

fn put_augefs(
    args: &Args,
    setup: &Setup,
    mode: WalMode,
    threads: usize,
    sync: bool,
    limit: Limit,
    env: &mut Environment,
) -> Result<Sample, String> {
    let augefs = setup.create(mode, args.metadb_config())?;
    env.note(&augefs);
    let before = augefs.io();
    let run = workload::put_throughput(&augefs, threads, sync, limit, 0)?;
    // Not timed: buffered puts' WAL records count in bytes per put too.
    augefs.db.sync().map_err(|e| format!("MetaDB sync: {e}"))?;
    let written = augefs.io().written_since(&before);
    let stats = augefs.db.stats();
    augefs.close()?;
    let per_put = |bytes: u64| bytes as f64 / run.ops.max(1) as f64;
    Ok(Sample {
        value: run.ops_per_sec(),
        bytes: Some(PutBytes::Counted {
            total: per_put(written.total),
            wal: per_put(written.wal),
            tables: per_put(written.tables),
            flushes: per_put(written.flushes),
        }),
        detail: json!({
            "ops": run.ops,
            "elapsed_ns": run.elapsed_ns,
            "written_bytes": written.total,
            "wal_bytes": written.wal,
            "table_bytes": written.tables,
            "pmr_bytes": written.pmr,
            "flushes_and_persists": written.flushes,
            "immutables_at_end": stats.immutables,
            "tables_per_level": stats.tables_per_level,
        }),
    })
}

fn put_fjall(
    args: &Args,
    paths: &Paths,
    threads: usize,
    sync: bool,
    limit: Limit,
) -> Result<Sample, String> {
    let fjall = Fjall::create(&paths.fjall, args.cache_bytes())?;
    let before = process_write_bytes();
    let run = workload::put_throughput(&fjall, threads, sync, limit, 0)?;
    fjall.persist()?;
    let after = process_write_bytes();
    fjall.close();
    remove_dir(&paths.fjall)?;
    let written = before.zip(after).map(|(b, a)| a.saturating_sub(b));
    Ok(Sample {
        value: run.ops_per_sec(),
        bytes: written.map(|w| PutBytes::Process {
            write_bytes: w as f64 / run.ops.max(1) as f64,
        }),
        detail: json!({
            "ops": run.ops,
            "elapsed_ns": run.elapsed_ns,
            "process_write_bytes": written,
        }),
    })
}

/// Loads `args.keys` keys into `store`, reporting progress, and records the load rows.
fn load_rows(
    args: &Args,
    store: &dyn Store,
    system: System,
    report: &mut Report,
    io: &dyn Fn() -> IoMark,
    compact: impl FnOnce() -> Result<Value, String>,
) -> Result<(), String> {
    let name = system.name();
    let io_start = io();
    let load = workload::load(store, args.keys, |done, rate| {
        eprintln!(
            "augefs: {name}: loaded {} keys ({rate:.0} puts/s)",
            count(done)
        );
    })?;
    let io_loaded = io();
    let started = Instant::now();
    let compacted = compact()?;
    let compact_ns = started.elapsed().as_nanos() as u64;
    let io_compacted = io();
    eprintln!(
        "augefs: {name}: {} keys loaded at {:.0} puts/s, flushed and compacted in {:.1} s",
        count(args.keys),
        load.ops_per_sec(),
        compact_ns as f64 / 1e9
    );
    let detail = json!({
        "keys": load.keys,
        "elapsed_ns": load.elapsed_ns,
        "ops_per_sec": load.ops_per_sec(),
        "tenth_rates": load.part_rates,
        "flush_and_compact_ns": compact_ns,
        "after_compaction": compacted,
        "load_io": io_loaded.since(&io_start),
        "flush_and_compact_io": io_compacted.since(&io_loaded),
    });
    let first = load.first_part_rate();
    let last = load.last_part_rate();
    for (figure, value) in [
        (Figure::LoadFirst, first),
        (Figure::LoadLast, last),
        (Figure::LoadKept, last / first.max(f64::MIN_POSITIVE)),
        (
            Figure::LoadPaid,
            load.keys as f64 * 1e9 / (load.elapsed_ns + compact_ns) as f64,
        ),
    ] {
        report.add(figure, 1, system, Sample::of(value, detail.clone()));
    }
    Ok(())
}

fn get_rows(
    args: &Args,
    get: &Getter<'_>,
    system: System,
    round: u32,
    report: &mut Report,
    io: &dyn Fn() -> IoMark,
) -> Result<(), String> {
    let io_start = io();
    let run = workload::random_gets(get, args.keys, args.gets, 1 + u64::from(round))?;
    let io_used = io().since(&io_start);
    let us = |p| crate::stats::percentile(&run.latencies_ns, p).map_or(0.0, |ns| ns as f64 / 1e3);
    let (p50, p99) = (us(50.0), us(99.0));
    eprintln!(
        "augefs: get round {}/{}, {}: p50 {p50:.1} us, p99 {p99:.1} us, {:.0} gets/s",
        round + 1,
        args.common.runs,
        system.name(),
        run.ops_per_sec()
    );
    let detail = json!({ "gets": args.gets, "elapsed_ns": run.elapsed_ns, "io": io_used });
    for (figure, value) in [
        (Figure::GetP50, p50),
        (Figure::GetP99, p99),
        (Figure::Get, run.ops_per_sec()),
    ] {
        report.add(figure, 1, system, Sample::of(value, detail.clone()));
    }
    Ok(())
}

/// One store of the get figure: how to get a key and how to read its IO counters.
struct GetSide<'a> {
    system: System,
    get: Box<Getter<'a>>,
    io: Box<dyn Fn() -> IoMark + 'a>,
}

/// MetaDB in ssd mode, loaded, flushed and compacted.
fn load_augefs(
    args: &Args,
    setup: &Setup,
    report: &mut Report,
    env: &mut Environment,
) -> Result<Augefs, String> {
    let augefs = setup.create(WalMode::Ssd, args.metadb_config())?;
    env.note(&augefs);
    let io = || IoMark::Counted(Box::new(augefs.io()));
    load_rows(args, &augefs, System::Ssd, report, &io, || {
        let db = &augefs.db;
        let loaded = db.stats();
        augefs.settle()?;
        let compacted = db.stats();
        Ok(json!({
            "tables_per_level": compacted.tables_per_level,
            "bytes_per_level": compacted.bytes_per_level,
            "at_end_of_load": {
                "immutables": loaded.immutables,
                "tables_per_level": loaded.tables_per_level,
                "bytes_per_level": loaded.bytes_per_level,
            },
        }))
    })?;
    Ok(augefs)
}

/// fjall, loaded, flushed and compacted.
fn load_fjall(args: &Args, paths: &Paths, report: &mut Report) -> Result<Fjall, String> {
    let fjall = Fjall::create(&paths.fjall, args.cache_bytes())?;
    let io = || IoMark::Process(process_write_bytes());
    load_rows(args, &fjall, System::Fjall, report, &io, || {
        fjall.settle()?;
        Ok(json!({ "disk_bytes": fjall.disk_bytes()? }))
    })?;
    Ok(fjall)
}

/// Writer threads of the aged-put figure.
pub(super) const AGED_THREADS: usize = 4;

/// One run of the aged-put figure on one loaded store (`large`: `args.keys` keys, else
/// a tenth): sync puts, then buffered puts, from [`AGED_THREADS`] threads on new keys
/// above the loaded ones, each after the store has settled, and it settles again at the
/// end (the stores share the disk). Returns (sync, buffered).
fn aged_run(
    args: &Args,
    side: &AgedSide<'_>,
    run: u64,
    report: &mut Report,
) -> Result<(f64, f64), String> {
    let limit = args.put_limit();
    let mut pair = [0.0; 2];
    for (i, sync) in [true, false].into_iter().enumerate() {
        // Above every loaded index, distinct per run and kind.
        let first_index = keys::AGED_FIRST_INDEX * (1 + 2 * run + i as u64);
        side.store.settle()?;
        let done = workload::put_throughput(side.store, AGED_THREADS, sync, limit, first_index)?;
        eprintln!(
            "augefs: {}: aged put ({} keys, {}), run {}: {:.0} puts/s",
            side.system.name(),
            count(if side.large {
                args.keys
            } else {
                args.keys / 10
            }),
            if sync { "sync" } else { "buffered" },
            run + 1,
            done.ops_per_sec()
        );
        pair[i] = done.ops_per_sec();
        let detail =
            json!({ "ops": done.ops, "elapsed_ns": done.elapsed_ns, "first_index": first_index });
        let sample = Sample::of(done.ops_per_sec(), detail);
        let figure = Figure::AgedPut {
            sync,
            large: side.large,
        };
        report.add(figure, AGED_THREADS, side.system, sample);
    }
    // Untimed: this store's compaction must not run into the next store's measurement.
    side.store.settle()?;
    Ok((pair[0], pair[1]))
}

/// A loaded, settled store of the aged-put figure.
struct AgedSide<'a> {
    system: System,
    large: bool,
    store: &'a dyn Store,
}

/// `args.common.runs` rounds of the aged-put figure; in each, every side takes a run, the
/// first side rotating, so the small and the large store of a system are measured close
/// together in time (the disk's pace drifts over minutes). Then the large-over-small
/// rows, run by run.
fn aged_rounds(args: &Args, sides: &[AgedSide<'_>], report: &mut Report) -> Result<(), String> {
    let mut results: Vec<Vec<(f64, f64)>> = vec![Vec::new(); sides.len()];
    for run in 0..u64::from(args.common.runs) {
        for k in 0..sides.len() {
            let i = (k + run as usize) % sides.len();
            results[i].push(aged_run(args, &sides[i], run, report)?);
        }
    }
    for (i, small) in sides.iter().enumerate().filter(|(_, s)| !s.large) {
        let Some(j) = sides
            .iter()
            .position(|s| s.large && s.system == small.system)
        else {
            continue;
        };
        for (s, l) in results[i].iter().zip(&results[j]) {
            for (sync, small_ops, large_ops) in [(true, s.0, l.0), (false, s.1, l.1)] {
                let detail = json!({ "small": small_ops, "large": large_ops });
                let sample = Sample::of(large_ops / small_ops.max(f64::MIN_POSITIVE), detail);
                report.add(
                    Figure::AgedKept { sync },
                    AGED_THREADS,
                    small.system,
                    sample,
                );
            }
        }
    }
    Ok(())
}

/// The small store's image: a quarter of the large one's (validation checked that the
/// large image holds `--keys` keys twice over, so a quarter holds a tenth of them), at
/// least 512 MiB, whole MiB.
fn small_image_bytes(image_bytes: u64) -> u64 {
    const MIB: u64 = 1 << 20;
    (image_bytes / 4).max(512 * MIB) / MIB * MIB
}

/// The aged-put figure's small store of MetaDB (on its own image) or fjall: a tenth of
/// the keys, loaded and settled.
fn load_small_augefs(args: &Args, setup: &Setup) -> Result<Augefs, String> {
    let augefs = setup.create(WalMode::Ssd, args.metadb_config())?;
    workload::load(&augefs, args.keys / 10, |_, _| {})?;
    augefs.settle()?;
    Ok(augefs)
}

fn load_small_fjall(args: &Args, paths: &Paths) -> Result<Fjall, String> {
    let fjall = Fjall::create(&paths.small_fjall, args.cache_bytes())?;
    workload::load(&fjall, args.keys / 10, |_, _| {})?;
    fjall.settle()?;
    Ok(fjall)
}

/// One warm-up round per side (not reported: caches filled, code paged in), then
/// `args.common.runs` rounds, the side that goes first alternating.
fn get_rounds(args: &Args, sides: &[GetSide<'_>], report: &mut Report) -> Result<(), String> {
    for side in sides {
        workload::random_gets(&*side.get, args.keys, args.gets, 0)?;
    }
    for round in 0..args.common.runs {
        for i in 0..sides.len() {
            let side = &sides[(i + round as usize) % sides.len()];
            get_rows(args, &*side.get, side.system, round, report, &*side.io)?;
        }
    }
    Ok(())
}

pub(super) fn get_figures(
    args: &Args,
    setup: &Setup,
    paths: &Paths,
    report: &mut Report,
    env: &mut Environment,
) -> Result<(), String> {
    // The aged-put figure's small stores, kept open (idle, settled) beside the large.
    let small_setup = Setup {
        image: paths.small_image.clone(),
        image_bytes: small_image_bytes(args.image_size),
        ..setup.clone()
    };
    let mut small_augefs = None;
    if args.modes.contains(&ModeArg::Ssd) {
        small_setup.prepare_image()?;
        small_augefs = Some(load_small_augefs(args, &small_setup)?);
    }
    let mut small_fjall = None;
    if args.modes.contains(&ModeArg::Fjall) {
        small_fjall = Some(load_small_fjall(args, paths)?);
    }
    let mut augefs = None;
    if args.modes.contains(&ModeArg::Ssd) {
        augefs = Some(load_augefs(args, setup, report, env)?);
    }
    let mut fjall = None;
    if args.modes.contains(&ModeArg::Fjall) {
        fjall = Some(load_fjall(args, paths, report)?);
    }
    let mut sides: Vec<GetSide<'_>> = Vec::new();
    if let Some(a) = &augefs {
        sides.push(GetSide {
            system: System::Ssd,
            get: Box::new(move |key: &[u8]| a.db.get(key).map_err(|e| format!("MetaDB get: {e}"))),
            io: Box::new(move || IoMark::Counted(Box::new(a.io()))),
        });
    }
    if let Some(f) = &fjall {
        sides.push(GetSide {
            system: System::Fjall,
            get: Box::new(move |key: &[u8]| f.get(key)),
            io: Box::new(move || IoMark::Process(process_write_bytes())),
        });
    }
    get_rounds(args, &sides, report)?;
    drop(sides);
    // The aged-put figure: after the gets, which its new keys would not disturb anyway
    // (gets draw from the loaded indexes only).
    let mut aged: Vec<AgedSide<'_>> = Vec::new();
    for (system, small, large) in [
        (
            System::Ssd,
            small_augefs.as_ref().map(|s| s as &dyn Store),
            augefs.as_ref().map(|s| s as &dyn Store),
        ),
        (
            System::Fjall,
            small_fjall.as_ref().map(|s| s as &dyn Store),
            fjall.as_ref().map(|s| s as &dyn Store),
        ),
    ] {
        if let (Some(small), Some(large)) = (small, large) {
            aged.push(AgedSide {
                system,
                large: false,
                store: small,
            });
            aged.push(AgedSide {
                system,
                large: true,
                store: large,
            });
        }
    }
    aged_rounds(args, &aged, report)?;
    drop(aged);
    if let Some(small) = small_fjall {
        small.close();
        remove_dir(&paths.small_fjall)?;
    }
    if let Some(small) = small_augefs {
        small.close()?;
        std::fs::remove_file(&paths.small_image)
            .map_err(|e| format!("{}: {e}", paths.small_image.display()))?;
    }
    if let Some(fjall) = fjall {
        fjall.close();
        remove_dir(&paths.fjall)?;
    }
    match augefs {
        Some(augefs) => augefs.close(),
        None => Ok(()),
    }
}

/// Keys written per recovery run: one memtable's worth in tables, `unflushed` in the
/// WAL only.
#[derive(Debug, Clone, Copy)]
struct RecoveryShape {
    flushed: u64,
    unflushed: u64,
}

fn put_range(store: &dyn Store, range: std::ops::Range<u64>) -> Result<(), String> {
    let mut key = Vec::with_capacity(32);
    let mut value = [0u8; keys::VALUE_BYTES];
    for index in range {
        keys::key_into(index, &mut key);
        keys::value_into(index, &mut value);
        store.put(&key, &value, false)?;
    }
    Ok(())
}

fn recover_augefs(
    setup: &Setup,
    mode: WalMode,
    env: &mut Environment,
) -> Result<(Sample, RecoveryShape), String> {
    let config = MetaDbConfig {
        background: false,
        ..MetaDbConfig::default()
    };
    let augefs = setup.create(mode, config.clone())?;
    env.note(&augefs);
    // Fill the first memtable until it switches; that many keys make one memtable.
    let first_generation = augefs.db.stats().generation;
    let mut flushed = 0;
    while augefs.db.stats().generation == first_generation {
        put_range(&augefs, flushed..flushed + 1)?;
        flushed += 1;
    }
    augefs
        .db
        .flush()
        .map_err(|e| format!("MetaDB flush: {e}"))?;
    let unflushed = flushed * 9 / 10;
    put_range(&augefs, flushed..flushed + unflushed)?;
    augefs.db.sync().map_err(|e| format!("MetaDB sync: {e}"))?;
    let stats_before = augefs.db.stats();
    augefs.crash();
    let (augefs, open_ns, before_open) = setup.reopen(mode, config)?;
    let open_io =
        IoMark::Counted(Box::new(augefs.io())).since(&IoMark::Counted(Box::new(before_open)));
    let last = flushed + unflushed - 1;
    check_recovered(
        &|k| augefs.db.get(k).map_err(|e| e.to_string()),
        &[0, flushed, last],
    )?;
    let stats_after = augefs.db.stats();
    augefs.close()?;
    let shape = RecoveryShape { flushed, unflushed };
    let detail = json!({
        "keys_in_tables": flushed,
        "records_in_wal": unflushed,
        "open_ns": open_ns,
        "open_io": open_io,
        "tables_per_level_before": stats_before.tables_per_level,
        "tables_per_level_after": stats_after.tables_per_level,
    });
    let sample = Sample::of(open_ns as f64 / 1e6, detail);
    Ok((sample, shape))
}

fn recover_fjall(args: &Args, paths: &Paths, shape: RecoveryShape) -> Result<Sample, String> {
    let fjall = Fjall::create(&paths.fjall, args.cache_bytes())?;
    put_range(&fjall, 0..shape.flushed)?;
    fjall.flush()?;
    let end = shape.flushed + shape.unflushed;
    put_range(&fjall, shape.flushed..end)?;
    fjall.persist()?;
    fjall.close();
    let (fjall, open_ns) = Fjall::reopen(&paths.fjall, args.cache_bytes())?;
    check_recovered(&|k| fjall.get(k), &[0, shape.flushed, end - 1])?;
    fjall.close();
    remove_dir(&paths.fjall)?;
    let detail = json!({
        "keys_in_tables": shape.flushed,
        "records_in_journal": shape.unflushed,
        "open_ns": open_ns,
    });
    Ok(Sample::of(open_ns as f64 / 1e6, detail))
}

/// Every key of `indexes` must hold its value after recovery.
fn check_recovered(get: &Getter<'_>, indexes: &[u64]) -> Result<(), String> {
    let mut key = Vec::new();
    let mut value = [0u8; keys::VALUE_BYTES];
    for &index in indexes {
        keys::key_into(index, &mut key);
        keys::value_into(index, &mut value);
        if get(&key)?.as_deref() != Some(&value[..]) {
            return Err(format!(
                "key {} lost or wrong after recovery",
                String::from_utf8_lossy(&key)
            ));
        }
    }
    Ok(())
}

pub(super) fn recovery_figures(
    args: &Args,
    setup: &Setup,
    paths: &Paths,
    report: &mut Report,
    env: &mut Environment,
) -> Result<(), String> {
    let mut shape = None;
    for run in 0..args.common.runs {
        // fjall needs the shape of an augefs run: it goes last in the first run.
        for system in turn_order(&args.modes, run) {
            let sample = match (system, shape) {
                (System::Fjall, Some(shape)) => recover_fjall(args, paths, shape)?,
                (System::Fjall, None) => unreachable!("fjall is last in the first run"),
                _ => {
                    let (sample, measured) = recover_augefs(setup, wal_mode(system), env)?;
                    shape.get_or_insert(measured);
                    sample
                }
            };
            eprintln!(
                "augefs: recovery run {}/{}, {}: {:.1} ms",
                run + 1,
                args.common.runs,
                system.name(),
                sample.value
            );
            report.add(Figure::Recovery, 1, system, sample);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_store_goes_first_in_turn() {
        let all = [ModeArg::Pmr, ModeArg::Ssd, ModeArg::Fjall];
        assert_eq!(
            turn_order(&all, 0),
            [System::Pmr, System::Ssd, System::Fjall]
        );
        assert_eq!(turn_order(&all, 1)[0], System::Ssd);
        assert_eq!(turn_order(&all, 2)[0], System::Fjall);
        let some = [ModeArg::Fjall, ModeArg::Ssd];
        assert_eq!(turn_order(&some, 0), [System::Ssd, System::Fjall]);
        assert_eq!(turn_order(&some, 1), [System::Fjall, System::Ssd]);
    }
}
