//! Opening the database: the manifest's tables, then WAL replay through the caller's
//! replay filter into one memtable, flushed once the caller has read what it needs (docs/DESIGN.md §6.7).
//!
//! Invariants:
//! - The WAL yields, per (generation, lane), a prefix of the records appended
//!   (wal/mod.rs); the replay filter keeps, per lane, a prefix of those
//!   ([`crate::hooks::check_replay_filter`]), so what is replayed from each lane is still
//!   a prefix of its writes.
//! - The recovered last sequence number is at least every recovered record's, dropped
//!   ones included, and the recovery flush records it in the manifest: no sequence number
//!   is ever handed out twice.
//! - When anything was recovered, the recovery flush makes the manifest's flushed
//!   generation cover every recovered generation before the WAL releases them, so a
//!   second crash neither replays a record twice nor offers a dropped one again.

use super::{Inner, MetaDbConfig, MetaDbEnv, SuperVersion, TableHandle, Work};
use crate::batch::WriteBatch;
use crate::error::MetaDbError;
use crate::gate::SeqGate;
use crate::hooks::{check_replay_filter, NoHooks, ReplayRecord, WriteHooks};
use crate::manifest::{Manifest, ManifestState};
use crate::memtable::Memtable;
use crate::table::cache::BlockCache;
use crate::table::reader::Table;
use crate::table::TableId;
use crate::types::{InternalKey, Seq};
use crate::wal::pmr::PmrWal;
use crate::wal::ssd::SsdWal;
use crate::wal::{Wal, WalRecovery};
use arc_swap::ArcSwap;
use format::SegmentNo;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

/// The WAL records to replay, after the caller's filter.
struct Replay {
    /// Kept records, in (generation, lane, lane_seq) order.
    kept: Vec<ReplayRecord>,
    /// Records not replayed: the filter's and `unmet`.
    dropped: u64,
    /// Records dropped because a record they require was lost.
    unmet: u64,
    /// The highest sequence number of any recovered record, kept or dropped (0: none).
    last_seq: Seq,
}

/// The generation after every one the WAL and the manifest name. Both numbers come
/// from the device: one at u64::MAX leaves no next generation, which is corruption.
fn next_generation(generation_max: u64, released: u64) -> Result<u64, MetaDbError> {
    generation_max.max(released).checked_add(1).ok_or_else(|| {
        MetaDbError::corruption(
            "WAL and manifest generations",
            format!("generation {} leaves no next one", u64::MAX),
        )
    })
}

/// Decodes every recovered record once, asks `hooks` which to keep and checks that the
/// answer keeps a prefix of each lane, then drops records whose requirements were lost.
fn filter_records(
    recovery: &WalRecovery,
    lanes: usize,
    released: u64,
    hooks: &dyn WriteHooks,
) -> Result<Replay, MetaDbError> {
    let mut records = Vec::with_capacity(recovery.records.len());
    let mut last_seq = 0;
    for record in &recovery.records {
        let (first_seq, batch) = WriteBatch::decode(&record.payload)?;
        if !batch.is_empty() {
            last_seq = last_seq.max(first_seq + batch.len() as u64 - 1);
        }
        let lane = usize::from(record.lane);
        records.push(ReplayRecord {
            generation: record.generation,
            lane: record.lane,
            lane_seq: record.lane_seq,
            pinned: lane.checked_sub(lanes),
            first_seq,
            batch,
        });
    }
    let mut keep = hooks.filter_replay(&records)?;
    check_replay_filter(&records, &keep);
    let unmet = drop_unmet_requirements(&records, &mut keep, released);
    let dropped = keep.iter().filter(|k| !**k).count() as u64;
    let kept = records
        .into_iter()
        .zip(keep)
        .filter_map(|(record, keep)| keep.then_some(record))
        .collect();
    Ok(Replay {
        kept,
        dropped,
        unmet,
        last_seq,
    })
}

/// Drops every kept record with a requirement (`WriteBatch::require`) that is neither in
/// a released generation (in tables) nor kept, with the records after it in its lane,
/// until no such record is left (a drop can unmeet another lane's requirement). Each
/// lane keeps a prefix. A record some persist acknowledged is never dropped: that persist
/// made its requirements durable first, and a released generation's records are in
/// tables. Returns how many records it dropped.
fn drop_unmet_requirements(records: &[ReplayRecord], keep: &mut [bool], released: u64) -> u64 {
    if records.iter().all(|r| r.batch.requires().is_empty()) {
        return 0;
    }
    let index: HashMap<(u64, u16, u64), usize> = records
        .iter()
        .enumerate()
        .map(|(i, r)| ((r.generation, r.lane, r.lane_seq), i))
        .collect();
    // Each lane's records in order (records come sorted by generation, lane, lane_seq).
    let mut lanes: HashMap<u16, Vec<usize>> = HashMap::new();
    for (i, r) in records.iter().enumerate() {
        lanes.entry(r.lane).or_default().push(i);
    }
    let mut dropped = 0;
    loop {
        let unmet = records.iter().enumerate().find(|&(i, r)| {
            keep[i]
                && r.batch.requires().iter().any(|q| {
                    q.generation > released
                        && !index
                            .get(&(q.generation, q.lane, q.lane_seq))
                            .is_some_and(|&j| keep[j])
                })
        });
        let Some((i, r)) = unmet else {
            return dropped;
        };
        for &j in lanes[&r.lane].iter().filter(|&&j| j >= i) {
            if std::mem::replace(&mut keep[j], false) {
                dropped += 1;
            }
        }
    }
}

/// Refuses damage the WAL proves (`WalRecovery::damage`), or, when the caller salvages,
/// reports it with the intact records recovery drops after each gap.
fn check_damage(
    recovery: &WalRecovery,
    config: &MetaDbConfig,
    released: u64,
) -> Result<Vec<Salvaged>, MetaDbError> {
    let Some(damage) = recovery.damage(&config.wal_durable, released) else {
        return Ok(Vec::new());
    };
    if !config.salvage_damage {
        return Err(MetaDbError::Damaged(damage));
    }
    let dropped = recovery
        .holes
        .iter()
        .flat_map(|h| h.beyond.iter().map(|(_, payload)| payload.clone()))
        .collect();
    Ok(vec![Salvaged { damage, dropped }])
}

/// Damage recovery met and salvaged (`MetaDbConfig::salvage_damage`).
#[derive(Debug, Clone)]
pub struct Salvaged {
    pub damage: format::Corruption,
    /// Encoded batches (`WriteBatch::decode`) of the intact records dropped after gaps.
    pub dropped: Vec<Vec<u8>>,
}

/// One memtable holding `replay`'s records, sealed (it is flushed at once).
fn replay_memtable(generation: u64, replay: &Replay) -> Arc<Memtable> {
    let memtable = Arc::new(Memtable::new(generation));
    assert!(memtable.gate().enter());
    for record in &replay.kept {
        for (i, (kind, key, value)) in record.batch.ops().enumerate() {
            let seq = record.first_seq + i as u64;
            assert!(seq <= replay.last_seq, "replayed seq {seq} beyond the last");
            memtable.insert(InternalKey::new(key.to_vec(), seq, kind), value.to_vec());
        }
    }
    memtable.gate().exit();
    memtable.gate().seal();
    memtable
}

/// Every table the manifest lists, opened (footer and index read) behind `cache`.
fn open_tables(
    env: &MetaDbEnv,
    state: &ManifestState,
    cache: &Arc<BlockCache>,
) -> Result<HashMap<TableId, Arc<TableHandle>>, MetaDbError> {
    let mut tables = HashMap::new();
    for (_, meta) in state.tables() {
        let offset = env.table_store.offset(meta.segment);
        let table = Table::open(env.device.clone(), offset, meta.clone(), cache.clone())?;
        tables.insert(
            meta.id,
            Arc::new(TableHandle {
                table: Arc::new(table),
                segment: meta.segment,
                obsolete: AtomicBool::new(false),
                store: env.table_store.clone(),
                cache: cache.clone(),
            }),
        );
    }
    Ok(tables)
}

impl Inner {
    pub(super) fn recover(
        env: MetaDbEnv,
        config: MetaDbConfig,
    ) -> Result<(Inner, PendingRelease), MetaDbError> {
        let hooks: Arc<dyn WriteHooks> = env.hooks.clone().unwrap_or_else(|| Arc::new(NoHooks));
        let (manifest, state) = Manifest::open(env.device.clone(), env.geometry.manifest)?;
        let version = state.version()?;
        let segments: Vec<SegmentNo> = state.segments().collect();
        env.table_store.claim(&segments);
        let cache = Arc::new(BlockCache::new(config.block_cache_bytes));
        let tables = open_tables(&env, &state, &cache)?;
        let released = state.flushed_generation();
        let wal_lanes = config.lanes + config.pinned_lanes;
        // Recovery reads only until the damage check has passed: a refused image is left
        // as it was.
        let (wal, recovery, salvaged): (Box<dyn Wal>, _, _) = match &env.pmr {
            Some(pmr) => {
                let (recovered, recovery) = PmrWal::recover(
                    pmr.clone(),
                    env.device.clone(),
                    env.geometry.wal,
                    wal_lanes,
                    released,
                )?;
                let salvaged = check_damage(&recovery, &config, released)?;
                let next = next_generation(recovery.generation_max, released)?;
                (Box::new(recovered.start(next)?), recovery, salvaged)
            }
            None => {
                let (recovered, recovery) =
                    SsdWal::recover(env.device.clone(), env.geometry.wal, wal_lanes, released)?;
                let salvaged = check_damage(&recovery, &config, released)?;
                let next = next_generation(recovery.generation_max, released)?;
                (Box::new(recovered.start(next)?), recovery, salvaged)
            }
        };
        let generation = wal.generation();
        let replay = filter_records(&recovery, config.lanes, released, hooks.as_ref())?;
        let last_seq = state.last_seq().max(replay.last_seq);
        // Every recovered record, kept or not, goes through one memtable flushed below:
        // its manifest edit covers the recovered generations and `last_seq`. With
        // nothing recovered there is nothing to flush.
        let memtable = replay_memtable(recovery.generation_max.max(released), &replay);
        let immutables = if recovery.records.is_empty() {
            Vec::new()
        } else {
            vec![memtable]
        };
        let inner = Inner {
            seq: SeqGate::new(last_seq, config.writer_slots),
            current: ArcSwap::from_pointee(SuperVersion {
                active: Arc::new(Memtable::new(generation)),
                immutables,
                version: Arc::new(version),
                tables: Arc::new(tables),
            }),
            switch_lock: Mutex::new(()),
            install_lock: Mutex::new(()),
            flush_lock: Mutex::new(()),
            compact_lock: Mutex::new(()),
            next_table_id: AtomicU64::new(state.next_table_id()),
            // The recovery flush's edit takes the highest of this and its memtable's
            // numbers: dropped records' numbers stay used.
            last_flushed_seq: AtomicU64::new(last_seq),
            snapshots: Mutex::new(BTreeMap::new()),
            cursors: Mutex::new(state.compaction_cursors().clone()),
            failure: OnceLock::new(),
            read_only: OnceLock::new(),
            work: Mutex::new(Work::default()),
            work_cv: Condvar::new(),
            progress_cv: Condvar::new(),
            replay_dropped: replay.dropped,
            replay_unmet: replay.unmet,
            salvaged,
            requirements: (0..wal_lanes).map(|_| Mutex::new(Vec::new())).collect(),
            any_requirements: AtomicBool::new(false),
            manifest,
            cache,
            hooks,
            wal,
            env,
            config,
        };
        let pending = PendingRelease {
            released,
            generation_max: recovery.generation_max,
        };
        Ok((inner, pending))
    }

    /// Recovered records go to tables now, so the WAL space they hold is freed and a
    /// second crash replays nothing twice.
    pub(super) fn finish_recovery(&self, pending: PendingRelease) -> Result<(), MetaDbError> {
        while self.flush_oldest()? {}
        if pending.released < pending.generation_max {
            self.wal.release_through(pending.generation_max)?;
        }
        self.compact_inline_if_behind()
    }
}

/// What the recovery flush releases of the WAL once it has run.
#[derive(Debug, Clone, Copy)]
pub(super) struct PendingRelease {
    released: u64,
    generation_max: u64,
}
