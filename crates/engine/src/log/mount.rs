//! Mounting: the superblock and PMR checks, MetaDB's recovery through the engine's replay
//! filter, and each domain rebuilt from its records, domains in parallel (augefs.txt
//! §VI-A: "AUGEFS runs the recovery procedure in parallel for each domain").
//!
//! Invariants:
//! - The domains claim their segments in the pool before MetaDB's recovery flush can
//!   allocate any (`MetaDb::open_then`), so a table never lands on a domain's segment.
//! - A domain's data-write numbers resume above every number its surviving records name,
//!   and all surviving data is durable (below the watermark, checked by the replay
//!   filter, or flushed with a table), so the tracker starts with everything durable.

use super::checkpoint::CHECKPOINT_PAYLOAD_VERSION;
use super::domain::DomainState;
use super::hooks::EngineHooks;
use super::keys::{self, DomainRecord};
use super::tracker::SeqTracker;
use super::{Domain, Engine, EngineConfig, EngineCounters, EngineEnv, MountReport};
use crate::error::EngineError;
use crate::image::{add_features, check_pmr, read_checkpoints, read_superblock, OwnerCheckpoint};
use crate::space::pool::{MetaDbSpace, PoolConfig, SpacePool};
use crate::space::seginfo::SegInfo;
use crate::space::Owner;
use format::constants::SEGMENT_SIZE_BYTES;
use format::geometry::CheckpointOwner;
use format::{DomainId, Geometry, SegmentNo};
use metadb::{MetaDb, MetaDbConfig, MetaDbEnv};
use platform::Clock;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, OnceLock};

impl Engine {
    /// Mounts the image on `env.device`: recovers MetaDB (dropping WAL records whose
    /// data never reached the device), then rebuilds each domain from its records.
    pub fn open(env: EngineEnv, config: EngineConfig) -> Result<Engine, EngineError> {
        let clock = env.clock.clone();
        let started = clock.now_ns();
        let device = env.device.clone();
        // This build writes WAL records older code would take for an empty log: make such
        // code refuse the image first (a no-op on images made since).
        let sb = add_features(
            &device,
            &read_superblock(&device)?,
            format::superblock::FEATURE_LANE_DURABLE,
        )?;
        check_pmr(&sb, env.pmr.as_deref())?;
        let geometry = sb.geometry;
        let domain_count = geometry.domain_count;
        let mut metadb_config = fit_metadb(&config.metadb, &geometry);
        metadb_config.pinned_lanes = domain_count as usize;
        let pool = space_pool(&geometry, &device, &config, &metadb_config);
        let space = Arc::new(MetaDbSpace::new(pool.clone()));
        let slots = read_checkpoints(&device, &geometry)?;
        metadb_config.wal_durable = wal_durable(&slots)?;
        let hooks = Arc::new(EngineHooks::new(
            device.clone(),
            checkpoint_watermarks(&slots, domain_count)?,
        ));
        let mut domains = Vec::new();
        let mut report = MountReport::default();
        let mut failed: Option<EngineError> = None;
        let metadb_started = clock.now_ns();
        report.timings.superblock_ns = metadb_started.saturating_sub(started);
        // (when the rebuild started, when it ended)
        let mut rebuild = (metadb_started, metadb_started);
        let opened = MetaDb::open_then(
            MetaDbEnv {
                device: device.clone(),
                pmr: env.pmr.clone(),
                geometry,
                table_store: space.clone(),
                hooks: Some(hooks.clone()),
            },
            metadb_config,
            &mut |db| {
                rebuild.0 = clock.now_ns();
                let rebuilt = space
                    .claim_result()
                    .map_err(EngineError::from)
                    .and_then(|()| {
                        rebuild_domains(
                            db,
                            &geometry,
                            &slots,
                            &pool,
                            env.clock.clone(),
                            &mut report,
                        )
                    });
                rebuild.1 = clock.now_ns();
                match rebuilt {
                    Ok(d) => {
                        domains = d;
                        Ok(())
                    }
                    Err(e) => {
                        let detail = e.to_string();
                        failed = Some(e);
                        Err(metadb::MetaDbError::Corruption {
                            what: "engine state in MetaDB".into(),
                            detail,
                        })
                    }
                }
            },
        );
        let db = match (opened, failed) {
            (_, Some(e)) => return Err(e),
            (r, None) => r?,
        };
        space.claim_result()?;
        report.replay = hooks.replay.lock().expect("replay report").clone();
        report.timings.replay_ns = rebuild.0.saturating_sub(metadb_started);
        report.timings.domains_ns = rebuild.1.saturating_sub(rebuild.0);
        report.timings.finish_ns = clock.now_ns().saturating_sub(rebuild.1);
        hooks.set_trackers(domains.iter().map(|d| d.tracker.clone()).collect());
        let (global_seq, _) = slot_state(&slots, CheckpointOwner::Global)?;
        Ok(Engine {
            device,
            geometry,
            pool,
            db,
            domains,
            config,
            failure: OnceLock::new(),
            read_only: OnceLock::new(),
            on_failure: OnceLock::new(),
            global_checkpoint_seq: AtomicU64::new(global_seq),
            counters: EngineCounters::default(),
            mount: report,
            extents: sb.has_extents(),
            map_cache: Default::default(),
        })
    }
}

/// The segment pool of `geometry`, keeping back what `config` and MetaDB need.
fn space_pool(
    geometry: &Geometry,
    device: &device::Device,
    config: &EngineConfig,
    metadb_config: &MetaDbConfig,
) -> Arc<SpacePool> {
    let mut pool_config = PoolConfig::for_geometry(geometry, device.info().discard_supported);
    if let Some(r) = config.reserve_segments {
        pool_config.reserve_segments = r;
    }
    pool_config.metadb_headroom = metadb_headroom(metadb_config);
    Arc::new(SpacePool::new(*geometry, pool_config))
}

/// Each domain's checkpointed durable watermark: data written up to it is durable (and
/// may since have been freed, its segment reused), so WAL replay never checks it
/// (`EngineHooks::new`).
pub fn checkpoint_watermarks(
    slots: &[OwnerCheckpoint],
    domain_count: u32,
) -> Result<Vec<u64>, EngineError> {
    (0..domain_count)
        .map(|d| {
            slot_state(slots, CheckpointOwner::Domain(DomainId(d as u16)))
                .map(|(_, r)| r.durable_seq)
        })
        .collect()
}

/// The WAL records the current global checkpoint names as durable (none before its
/// payload version 2): MetaDB's recovery refuses a log that lacks one.
pub fn wal_durable(slots: &[OwnerCheckpoint]) -> Result<Vec<metadb::wal::WalExtent>, EngineError> {
    let found = slots
        .iter()
        .find(|o| o.owner == CheckpointOwner::Global)
        .and_then(|o| o.current.as_ref());
    match found {
        Some(slot) if slot.payload_version == super::global::GLOBAL_PAYLOAD_VERSION => {
            Ok(super::global::decode(&slot.payload)?.1)
        }
        _ => Ok(Vec::new()),
    }
}

/// The sequence and payload of `owner`'s current checkpoint slot (zeros if none, or a
/// freshly formatted one).
fn slot_state(
    slots: &[OwnerCheckpoint],
    owner: CheckpointOwner,
) -> Result<(u64, DomainRecord), EngineError> {
    let found = slots
        .iter()
        .find(|o| o.owner == owner)
        .and_then(|o| o.current.clone());
    match found {
        Some(slot) if slot.payload_version == CHECKPOINT_PAYLOAD_VERSION => {
            Ok((slot.sequence, DomainRecord::decode(&slot.payload)?))
        }
        Some(slot) if slot.payload_version == super::global::GLOBAL_PAYLOAD_VERSION => {
            Ok((slot.sequence, super::global::decode(&slot.payload)?.0))
        }
        Some(slot) => Ok((slot.sequence, DomainRecord::default())),
        None => Ok((0, DomainRecord::default())),
    }
}

/// Every domain rebuilt from its MetaDB records, in parallel; then their segments
/// claimed in the pool (a segment two owners name is corruption).
fn rebuild_domains(
    db: &MetaDb,
    geometry: &Geometry,
    slots: &[OwnerCheckpoint],
    pool: &SpacePool,
    clock: Arc<dyn Clock>,
    report: &mut MountReport,
) -> Result<Vec<Domain>, EngineError> {
    let count = geometry.domain_count as usize;
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(count);
    let rebuilt: Vec<Result<(Domain, Vec<SegmentNo>), EngineError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                let clock = clock.clone();
                s.spawn(move || {
                    (w..count)
                        .step_by(workers)
                        .map(|d| {
                            rebuild_domain(db, geometry, slots, DomainId(d as u16), clock.clone())
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut by_worker: Vec<_> = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .expect("domain recovery thread panicked")
                    .into_iter()
            })
            .collect();
        // Back in domain order: domain d was worker d % workers's (d / workers)-th.
        (0..count)
            .map(|d| by_worker[d % workers].next().expect("every domain rebuilt"))
            .collect()
    });
    let mut domains = Vec::with_capacity(count);
    for r in rebuilt {
        let (domain, segments) = r?;
        pool.claim(Owner::Domain(domain.id), &segments)?;
        report.domain_segments += segments.len() as u32;
        report.valid_blocks += domain.lock().seginfo.valid_blocks_total();
        domains.push(domain);
    }
    Ok(domains)
}

/// One domain from its `s` entries, its `d` record and its checkpoint slot.
fn rebuild_domain(
    db: &MetaDb,
    geometry: &Geometry,
    slots: &[OwnerCheckpoint],
    id: DomainId,
    clock: Arc<dyn Clock>,
) -> Result<(Domain, Vec<SegmentNo>), EngineError> {
    let (slot_seq, slot_record) = slot_state(slots, CheckpointOwner::Domain(id))?;
    let record = match db.get(&keys::domain_key(id))? {
        Some(v) => DomainRecord::decode(&v)?,
        None => DomainRecord::default(),
    };
    let mut entries = Vec::new();
    for item in db.prefix(&keys::seginfo_prefix(id), None)? {
        entries.push(item?.1);
    }
    let seginfo = SegInfo::from_entries(
        id,
        geometry.segment_count,
        record.elapsed_ns.max(slot_record.elapsed_ns),
        entries.iter().map(Vec::as_slice),
        clock,
    )?;
    let segments: Vec<_> = seginfo.iter().map(|(s, _)| s).collect();
    let mut state = DomainState::new(id, seginfo);
    // Segments emptied but still recorded (an interrupted free) are freed by the next
    // batch of the domain.
    state.touch_empty();
    let domain = Domain {
        id,
        tracker: Arc::new(SeqTracker::new(
            record.issued_seq.max(slot_record.issued_seq),
        )),
        state: Mutex::new(state),
        gc_lock: Mutex::new(()),
        slot: Mutex::new(super::SlotState {
            sequence: slot_seq,
            durable_seq: slot_record.durable_seq,
            issued_seq: slot_record.issued_seq,
        }),
        last_logged: Mutex::new(None),
    };
    Ok((domain, segments))
}

/// MetaDB's configuration scaled to the device: on a small image a table (one segment
/// each) is a large share of the space, so level 0, memtables and compaction jobs are
/// bounded to a sixteenth of the segment area together.
fn fit_metadb(config: &MetaDbConfig, geometry: &Geometry) -> MetaDbConfig {
    let mut c = config.clone();
    let budget = u64::from((geometry.segment_count / 16).max(6));
    let segment = SEGMENT_SIZE_BYTES;
    c.level0_stop_tables = c.level0_stop_tables.min((budget / 3) as usize).max(2);
    c.compaction.level0_file_trigger = c
        .compaction
        .level0_file_trigger
        .min(c.level0_stop_tables / 2)
        .max(1);
    c.compaction.job_input_bytes_max = c
        .compaction
        .job_input_bytes_max
        .min((budget / 3).max(1) * segment);
    c.memtable_bytes = c
        .memtable_bytes
        .min(((budget / 3).max(1) * segment / (c.immutables_max as u64 + 1)) as usize);
    c
}

/// Segments MetaDB may need beyond what it holds: level 0 up to its stall point, the
/// tables of every memtable waiting for flush, and one compaction's output.
fn metadb_headroom(c: &MetaDbConfig) -> u32 {
    let segment = SEGMENT_SIZE_BYTES as usize;
    let per_memtable = c
        .memtable_bytes
        .div_ceil(c.table.table_bytes_max.min(segment))
        + 1;
    let flushes = (c.immutables_max + 1) * per_memtable;
    let job = (c.compaction.job_input_bytes_max as usize).div_ceil(segment) + 1;
    (c.level0_stop_tables + flushes + job) as u32
}
