//! The log-structured data layout (augefs.txt §VI): file blocks appended to per-domain
//! logs, the block index in MetaDB, asynchronous fsync, GC, checkpoints and recovery.
//! docs/DESIGN.md "Engine: the data log" has the reasoning and the crash case tree.
//!
//! - [`Engine`] (this module): mount, write, read, punch, fsync, checkpoint, sync.
//! - [`domain`]: a domain's heads, reservations and segment information.
//! - [`keys`]: the engine's records in MetaDB (docs/FORMAT.md §6.2).
//! - [`tracker`]: a domain's data-write sequence and durable watermark.
//! - [`hooks`]: MetaDB's callbacks (memtable flush barrier, WAL replay filter).
//! - [`gc`]: the cleaner.
//!
//! Invariants:
//! - A file belongs to domain `ino mod domains`; all of its blocks live in segments of
//!   that domain, and every batch that changes its block index, or the domain's segment
//!   information, is written under the domain's lock to the domain's own WAL lane, so
//!   recovery sees a prefix of the domain's batches (consistent index and accounting).
//! - A batch names data that was *issued* before the batch was made; a batch whose data
//!   might not be durable carries a `write_seq` above the domain's durable watermark and
//!   is checked against the data's CRC at recovery.
//! - `Engine::write(.., Durability::Fsync)` returns only after the data and the batch
//!   (and every earlier batch of the domain, with its data) are durable.
//! - A freed segment is reused only after a domain checkpoint made every batch of the
//!   domain up to its freeing durable, together with their data.
//! - After a failed device write or flush the engine is read-only until remounted.

pub mod domain;
pub mod gc;
pub mod hooks;
pub mod keys;
pub mod tracker;

use crate::error::EngineError;
use crate::image::{check_pmr, read_checkpoints, read_superblock};
use crate::space::pool::{MetaDbSpace, PoolConfig, SpacePool};
use crate::space::seginfo::SegInfo;
use crate::space::Owner;
use device::{AlignedBuf, Device, IoCause, IoRequest};
use domain::{DomainState, HeadKind, Run};
use format::checkpoint::CheckpointSlot;
use format::constants::{
    BLOCKS_PER_SEGMENT, BLOCK_SIZE_BYTES, CHECKPOINT_SLOT_BYTES, SEGMENT_SIZE_BYTES,
};
use format::geometry::CheckpointOwner;
use format::{BlockAddr, DomainId, Geometry, InodeNo};
use hooks::{EngineHooks, ReplayReport};
use keys::{DomainRecord, FileBlock, Mapping, Reverse};
use metadb::{MetaDb, MetaDbConfig, MetaDbEnv, Receipt, WriteBatch};
use platform::Clock;
use pmr::Pmr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use tracker::SeqTracker;

const BLOCK: usize = BLOCK_SIZE_BYTES as usize;

/// How `fsync` orders data and index (augefs.txt §VI-B, Fig. 8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsyncPath {
    /// Data and the index record are written together and one device flush covers both;
    /// recovery checks records newer than the durable watermark against their data.
    Async,
    /// Data, wait, device flush, then the index record and its own flush (F2FS's order).
    Ordered,
}

/// When a write is durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Written to the device; durable after a later fsync, checkpoint or sync.
    Buffered,
    /// Durable when the call returns.
    Fsync,
}

#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub fsync_path: FsyncPath,
    pub metadb: MetaDbConfig,
    /// Segments kept back from ordinary writers for GC (default: the pool's).
    pub reserve_segments: Option<u32>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            fsync_path: FsyncPath::Async,
            metadb: MetaDbConfig::default(),
            reserve_segments: None,
        }
    }
}

/// Where the engine runs.
#[derive(Debug, Clone)]
pub struct EngineEnv {
    pub device: Arc<Device>,
    pub pmr: Option<Arc<Pmr>>,
    pub clock: Arc<dyn Clock>,
}

/// What mounting found and did.
#[derive(Debug, Clone, Default)]
pub struct MountReport {
    pub replay: ReplayReport,
    /// Segments owned by domains after recovery.
    pub domain_segments: u32,
    /// Live data blocks after recovery.
    pub valid_blocks: u64,
}

/// Counters since mount.
#[derive(Debug, Default)]
pub struct EngineCounters {
    pub blocks_written: AtomicU64,
    pub gc_blocks_moved: AtomicU64,
    pub gc_segments_cleaned: AtomicU64,
    pub checkpoints: AtomicU64,
    pub segments_discarded: AtomicU64,
    pub discards_failed: AtomicU64,
}

pub(crate) struct Domain {
    id: DomainId,
    tracker: Arc<SeqTracker>,
    state: Mutex<DomainState>,
    /// One cleaning pass of this domain at a time.
    gc_lock: Mutex<()>,
    /// Checkpoint slot sequence of this domain.
    checkpoint_seq: AtomicU64,
}

impl Domain {
    fn lock(&self) -> MutexGuard<'_, DomainState> {
        self.state.lock().expect("domain lock")
    }
}

/// A mounted engine.
pub struct Engine {
    device: Arc<Device>,
    geometry: Geometry,
    pool: Arc<SpacePool>,
    db: MetaDb,
    domains: Vec<Domain>,
    config: EngineConfig,
    failure: OnceLock<String>,
    global_checkpoint_seq: AtomicU64,
    counters: EngineCounters,
    mount: MountReport,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("domains", &self.domains.len())
            .field("failure", &self.failure.get())
            .finish()
    }
}

/// A checkpoint payload (FORMAT.md §6.3): the owner's watermark and file-system time.
const CHECKPOINT_PAYLOAD_VERSION: u32 = 1;

impl Engine {
    /// Mounts the image on `env.device`: recovers MetaDB (dropping WAL records whose
    /// data never reached the device), then rebuilds each domain from its records.
    pub fn open(env: EngineEnv, config: EngineConfig) -> Result<Engine, EngineError> {
        let device = env.device.clone();
        let choice = read_superblock(&device)?;
        let sb = choice.superblock;
        check_pmr(&sb, env.pmr.as_deref())?;
        let geometry = sb.geometry;
        let domain_count = geometry.domain_count;
        let mut metadb_config = fit_metadb(&config.metadb, &geometry);
        metadb_config.pinned_lanes = domain_count as usize;
        let mut pool_config = PoolConfig::for_geometry(&geometry, device.info().discard_supported);
        if let Some(r) = config.reserve_segments {
            pool_config.reserve_segments = r;
        }
        pool_config.metadb_headroom = metadb_headroom(&metadb_config);
        let pool = Arc::new(SpacePool::new(geometry, pool_config));
        let space = Arc::new(MetaDbSpace::new(pool.clone()));
        let hooks = Arc::new(EngineHooks::new(device.clone(), domain_count));
        let slots = read_checkpoints(&device, &geometry)?;
        let slot_state = |owner: CheckpointOwner| -> Result<(u64, DomainRecord), EngineError> {
            let found = slots
                .iter()
                .find(|o| o.owner == owner)
                .and_then(|o| o.current.clone());
            match found {
                Some(slot) if slot.payload_version == CHECKPOINT_PAYLOAD_VERSION => {
                    Ok((slot.sequence, DomainRecord::decode(&slot.payload)?))
                }
                Some(slot) => Ok((slot.sequence, DomainRecord::default())),
                None => Ok((0, DomainRecord::default())),
            }
        };
        let mut domains = Vec::with_capacity(domain_count as usize);
        let mut report = MountReport::default();
        let mut failed: Option<EngineError> = None;
        // The domains claim their segments before MetaDB's recovery flush allocates any.
        let mut rebuild = |db: &MetaDb| -> Result<(), EngineError> {
            space.claim_result()?;
            for d in 0..domain_count {
                let id = DomainId(d as u16);
                let (slot_seq, slot_record) = slot_state(CheckpointOwner::Domain(id))?;
                let record = match db.get(&keys::domain_key(id))? {
                    Some(v) => DomainRecord::decode(&v)?,
                    None => DomainRecord::default(),
                };
                let elapsed = record.elapsed_ns.max(slot_record.elapsed_ns);
                let mut entries = Vec::new();
                for item in db.prefix(&keys::seginfo_prefix(id), None)? {
                    let (_, value) = item?;
                    entries.push(value);
                }
                let seginfo = SegInfo::from_entries(
                    id,
                    geometry.segment_count,
                    elapsed,
                    entries.iter().map(Vec::as_slice),
                    env.clock.clone(),
                )?;
                let segments: Vec<_> = seginfo.iter().map(|(s, _)| s).collect();
                pool.claim(Owner::Domain(id), &segments)?;
                report.domain_segments += segments.len() as u32;
                report.valid_blocks += seginfo.valid_blocks_total();
                // Every surviving batch's data is durable: below the watermark, checked
                // by the replay filter, or flushed with a table.
                let start = record.issued_seq.max(slot_record.issued_seq);
                let mut state = DomainState::new(id, seginfo);
                // Segments emptied but still recorded (an interrupted free) are freed by
                // the next batch of the domain.
                state.touch_empty();
                domains.push(Domain {
                    id,
                    tracker: Arc::new(SeqTracker::new(start)),
                    state: Mutex::new(state),
                    gc_lock: Mutex::new(()),
                    checkpoint_seq: AtomicU64::new(slot_seq),
                });
            }
            Ok(())
        };
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
                rebuild(db).map_err(|e| {
                    let detail = e.to_string();
                    failed = Some(e);
                    metadb::MetaDbError::Corruption {
                        what: "engine state in MetaDB".into(),
                        detail,
                    }
                })
            },
        );
        let db = match (opened, failed) {
            (_, Some(e)) => return Err(e),
            (r, None) => r?,
        };
        space.claim_result()?;
        report.replay = hooks.replay.lock().expect("replay report").clone();
        hooks.set_trackers(domains.iter().map(|d| d.tracker.clone()).collect());
        let (global_seq, _) = slot_state(CheckpointOwner::Global)?;
        Ok(Engine {
            device,
            geometry,
            pool,
            db,
            domains,
            config,
            failure: OnceLock::new(),
            global_checkpoint_seq: AtomicU64::new(global_seq),
            counters: EngineCounters::default(),
            mount: report,
        })
    }

    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    pub fn metadb(&self) -> &MetaDb {
        &self.db
    }

    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }

    pub fn pool(&self) -> &SpacePool {
        &self.pool
    }

    pub fn mount_report(&self) -> &MountReport {
        &self.mount
    }

    pub fn counters(&self) -> &EngineCounters {
        &self.counters
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// The domain a file belongs to (augefs.txt §VI-A: `hash(ino) mod N`; inode numbers
    /// are handed out in sequence, so the number itself spreads files evenly).
    pub fn domain_of(&self, ino: InodeNo) -> DomainId {
        DomainId((ino.0 % self.domains.len() as u64) as u16)
    }

    fn domain(&self, ino: InodeNo) -> &Domain {
        &self.domains[self.domain_of(ino).0 as usize]
    }

    fn check_writable(&self) -> Result<(), EngineError> {
        match self.failure.get() {
            Some(why) => Err(EngineError::ReadOnly(why.clone())),
            None => Ok(()),
        }
    }

    /// Records the first failure: the engine is read-only from now on.
    fn fail(&self, e: &EngineError) {
        let _ = self.failure.set(e.to_string());
    }

    fn failing<T>(&self, r: Result<T, EngineError>) -> Result<T, EngineError> {
        r.inspect_err(|e| {
            if !matches!(e, EngineError::Space(_)) {
                self.fail(e)
            }
        })
    }

    /// Writes `data` (whole 4 KiB blocks) as blocks `first..` of `ino`, and applies
    /// `extra` (the caller's inode changes) in the same atomic batch.
    pub fn write(
        &self,
        ino: InodeNo,
        first: FileBlock,
        data: &[u8],
        extra: &WriteBatch,
        durability: Durability,
    ) -> Result<(), EngineError> {
        assert!(ino.0 != 0, "inode 0");
        assert!(
            !data.is_empty() && data.len() % BLOCK == 0,
            "write of {} bytes",
            data.len()
        );
        self.check_writable()?;
        let blocks = Blocks {
            ino,
            first,
            data,
            crcs: data
                .chunks(BLOCK)
                .enumerate()
                .map(|(i, b)| keys::block_crc(ino, FileBlock(first.0 + i as u64), b))
                .collect(),
            extra,
        };
        let domain = self.domain(ino);
        match self.config.fsync_path {
            FsyncPath::Async => self.write_async(domain, &blocks, durability),
            FsyncPath::Ordered => self.write_ordered(domain, &blocks, durability),
        }
    }

    /// Reserves `count` blocks in `domain`'s `kind` head, cleaning and checkpointing to
    /// make room when the pool runs short; ENOSPC only when that cannot help.
    fn reserve<'a>(
        &'a self,
        domain: &'a Domain,
        kind: HeadKind,
        count: u32,
    ) -> Result<(MutexGuard<'a, DomainState>, Vec<Run>), EngineError> {
        let mut passes = 0;
        loop {
            let mut state = domain.lock();
            match state.reserve(&self.pool, &self.geometry, kind, count) {
                Ok(runs) => return Ok((state, runs)),
                Err(e) => {
                    drop(state);
                    if passes >= 2 || kind == HeadKind::Gc {
                        return Err(e.into());
                    }
                    passes += 1;
                    self.make_room()?;
                }
            }
        }
    }

    /// Foreground cleaning until an ordinary allocation can succeed: checkpoint the
    /// domains with pending segments (they become free), else clean the segment with the
    /// fewest valid blocks. ENOSPC when nothing is left to clean.
    fn make_room(&self) -> Result<(), EngineError> {
        let config = self.pool.config();
        let kept = config.reserve_segments + config.metadb_headroom;
        for _ in 0..=self.geometry.segment_count {
            // Tables MetaDB freed since the last checkpoint wait for their discard.
            self.discard(self.pool.take_discards());
            let stats = self.pool.stats();
            if stats.free > kept {
                return Ok(());
            }
            let pending = self.pool.pending_domains();
            if !pending.is_empty() {
                for d in pending {
                    self.checkpoint(d)?;
                }
                continue;
            }
            if self
                .gc_pass(crate::space::victim::Policy::Greedy)?
                .is_none()
            {
                break;
            }
        }
        let stats = self.pool.stats();
        Err(crate::space::SpaceError::NoSpace {
            free: stats.free,
            reserve: kept,
            pending: stats.pending,
        }
        .into())
    }

    fn write_async(
        &self,
        domain: &Domain,
        blocks: &Blocks<'_>,
        durability: Durability,
    ) -> Result<(), EngineError> {
        let count = blocks.count();
        let mut queue = self.device.queue()?;
        let (mut state, runs) = self.reserve(domain, HeadKind::User, count)?;
        let seq = domain.tracker.issue();
        let submitted = submit_runs(&mut queue, &runs, blocks.data, IoCause::UserData);
        // From here the write's number must complete whatever happens.
        let made = submitted.and_then(|()| {
            let batch = self.index_batch(&mut state, domain, blocks, &runs, seq)?;
            self.put_batch(domain, &mut state, &batch)
        });
        drop(state);
        let reaped = reap(&mut queue);
        domain.tracker.complete(seq);
        self.failing(reaped)?;
        let receipt = self.failing(made)?;
        self.counters
            .blocks_written
            .fetch_add(u64::from(count), Ordering::Relaxed);
        if durability == Durability::Fsync {
            self.persist_domain(domain, receipt, seq)?;
        }
        Ok(())
    }

    fn write_ordered(
        &self,
        domain: &Domain,
        blocks: &Blocks<'_>,
        durability: Durability,
    ) -> Result<(), EngineError> {
        let count = blocks.count();
        let mut queue = self.device.queue()?;
        let (state, runs) = self.reserve(domain, HeadKind::User, count)?;
        let seq = domain.tracker.issue();
        drop(state);
        let submitted = submit_runs(&mut queue, &runs, blocks.data, IoCause::UserData);
        let reaped = submitted.and_then(|()| reap(&mut queue));
        domain.tracker.complete(seq);
        self.failing(reaped)?;
        if durability == Durability::Fsync {
            let prefix = domain.tracker.completed_prefix();
            self.failing(self.device.flush(IoCause::UserData).map_err(Into::into))?;
            domain.tracker.durable_after_flush(prefix);
        }
        let mut state = domain.lock();
        let made = self
            .index_batch(&mut state, domain, blocks, &runs, seq)
            .and_then(|batch| self.put_batch(domain, &mut state, &batch));
        drop(state);
        let receipt = self.failing(made)?;
        self.counters
            .blocks_written
            .fetch_add(u64::from(count), Ordering::Relaxed);
        if durability == Durability::Fsync {
            self.failing(self.db.persist(&[receipt]).map_err(Into::into))?;
        }
        Ok(())
    }

    /// Puts `batch` in `domain`'s own WAL lane, under the domain's lock, and keeps its
    /// receipt for later fsyncs and checkpoints of the domain.
    fn put_batch(
        &self,
        domain: &Domain,
        state: &mut DomainState,
        batch: &WriteBatch,
    ) -> Result<Receipt, EngineError> {
        let receipt =
            self.db
                .write_pinned(domain.id.0 as usize, batch, metadb::Durability::Buffered)?;
        state.last_receipt = Some(receipt);
        Ok(receipt)
    }

    /// The batch that points blocks `first..` of `ino` at `runs` (reserved, now written
    /// or in flight), invalidating what they replace. Under the domain's lock.
    fn index_batch(
        &self,
        state: &mut DomainState,
        domain: &Domain,
        blocks: &Blocks<'_>,
        runs: &[Run],
        seq: u64,
    ) -> Result<WriteBatch, EngineError> {
        let (ino, first) = (blocks.ino, blocks.first);
        let old = self.mappings(ino, first, u64::from(blocks.count()))?;
        let mut batch = WriteBatch::new();
        let addrs = runs
            .iter()
            .flat_map(|r| (0..u64::from(r.blocks)).map(move |i| BlockAddr(r.start.0 + i)));
        for (i, addr) in addrs.enumerate() {
            let block = FileBlock(first.0 + i as u64);
            if let Some(m) = old.get(&block) {
                state.invalidate(&self.geometry, m.addr);
            }
            state.mark_valid(&self.geometry, addr);
            let mapping = Mapping {
                addr,
                crc: blocks.crcs[i],
                write_seq: seq,
            };
            batch.put(
                keys::mapping_key(ino, block).to_vec(),
                mapping.encode().to_vec(),
            );
            let (segment, b) = domain::locate(&self.geometry, addr);
            batch.put(
                keys::reverse_key(segment, b as u16).to_vec(),
                Reverse { ino, block }.encode().to_vec(),
            );
        }
        state.unreserve(&self.geometry, runs);
        self.finish_batch(state, domain, &mut batch);
        append(&mut batch, blocks.extra);
        Ok(batch)
    }

    fn finish_batch(&self, state: &mut DomainState, domain: &Domain, batch: &mut WriteBatch) {
        let record = DomainRecord {
            durable_seq: domain.tracker.durable(),
            issued_seq: domain.tracker.issued(),
            elapsed_ns: state.seginfo.now_ns(),
        };
        state.finish_batch(&self.pool, batch, record);
    }

    /// Current mappings of blocks `first..first + count` of `ino`.
    fn mappings(
        &self,
        ino: InodeNo,
        first: FileBlock,
        count: u64,
    ) -> Result<std::collections::HashMap<FileBlock, Mapping>, EngineError> {
        let mut out = std::collections::HashMap::new();
        if count == 1 {
            if let Some(v) = self.db.get(&keys::mapping_key(ino, first))? {
                out.insert(first, Mapping::decode(&v)?);
            }
            return Ok(out);
        }
        let end = first.0.checked_add(count).expect("block range overflows");
        let start = keys::mapping_key(ino, first);
        let stop = keys::mapping_key(ino, FileBlock(end));
        for item in self.db.range(&start, Some(&stop), None)? {
            let (key, value) = item?;
            let (_, block) = keys::parse_mapping_key(&key)?;
            out.insert(block, Mapping::decode(&value)?);
        }
        Ok(out)
    }

    /// Makes `receipt` (a batch of `domain`) and every earlier batch of the domain
    /// durable together with all data they name (writes up to `seq`).
    fn persist_domain(
        &self,
        domain: &Domain,
        receipt: Receipt,
        seq: u64,
    ) -> Result<(), EngineError> {
        let mut prefix = 0;
        let tracker = &domain.tracker;
        let r = self.db.persist_covering(&[receipt], &mut || {
            prefix = tracker.wait_completed(seq);
            Ok(())
        });
        self.failing(r.map_err(Into::into))?;
        tracker.durable_after_flush(prefix);
        Ok(())
    }

    /// fsync of writes made with `Durability::Buffered`: makes every batch of `ino`'s
    /// domain durable with its data.
    pub fn fsync(&self, ino: InodeNo) -> Result<(), EngineError> {
        self.check_writable()?;
        let domain = self.domain(ino);
        let (receipt, seq) = {
            let state = domain.lock();
            (state.last_receipt, domain.tracker.issued())
        };
        match receipt {
            Some(r) => self.persist_domain(domain, r, seq),
            None => Ok(()),
        }
    }

    /// Reads blocks `first..first + count` of `ino` into `out` (count x 4 KiB); holes
    /// read as zeros. Returns, per block, whether it was mapped. Every block is checked
    /// against its CRC; a block GC moved meanwhile is looked up again.
    pub fn read(
        &self,
        ino: InodeNo,
        first: FileBlock,
        out: &mut [u8],
    ) -> Result<Vec<bool>, EngineError> {
        assert!(out.len() % BLOCK == 0 && !out.is_empty());
        let count = (out.len() / BLOCK) as u64;
        let mut mapped = vec![false; count as usize];
        let mut todo: Vec<u64> = (0..count).collect();
        for attempt in 0..4 {
            let maps = self.mappings(ino, first, count)?;
            let mut requests = Vec::new();
            let mut wanted = Vec::new();
            for &i in &todo {
                match maps.get(&FileBlock(first.0 + i)) {
                    None => {
                        out[i as usize * BLOCK..(i as usize + 1) * BLOCK].fill(0);
                        mapped[i as usize] = false;
                    }
                    Some(m) => {
                        requests.push(IoRequest::read(
                            m.addr.byte_offset(),
                            AlignedBuf::zeroed(BLOCK),
                            IoCause::UserData,
                        ));
                        wanted.push((i, *m));
                    }
                }
            }
            let done = self.device.run(requests)?;
            let mut retry = Vec::new();
            for ((i, m), c) in wanted.into_iter().zip(done) {
                c.result?;
                let buf = c.request.into_buf().expect("a read returns its buffer");
                if keys::block_crc(ino, FileBlock(first.0 + i), &buf) == m.crc {
                    out[i as usize * BLOCK..(i as usize + 1) * BLOCK].copy_from_slice(&buf);
                    mapped[i as usize] = true;
                } else if attempt < 3 {
                    retry.push((i, m));
                } else {
                    return Err(EngineError::DataChecksum {
                        ino,
                        block: first.0 + i,
                        addr: m.addr,
                    });
                }
            }
            // A mismatch is a block moved (and its segment reused) under us, or a write
            // whose batch is made while its data is still in flight; otherwise, with the
            // mapping unchanged, the data is corrupt.
            let now = self.mappings(ino, first, count)?;
            let tracker = &self.domain(ino).tracker;
            todo.clear();
            for (i, m) in retry {
                match now.get(&FileBlock(first.0 + i)) {
                    Some(n) if *n == m && m.write_seq > tracker.completed_prefix() => {
                        tracker.wait_completed(m.write_seq);
                        todo.push(i);
                    }
                    Some(n) if *n == m => {
                        return Err(EngineError::DataChecksum {
                            ino,
                            block: first.0 + i,
                            addr: m.addr,
                        })
                    }
                    _ => todo.push(i),
                }
            }
            if todo.is_empty() {
                break;
            }
        }
        Ok(mapped)
    }

    /// Unmaps blocks `from..` (`to` exclusive, or to the end of the file) of `ino` and
    /// applies `extra` in the same batch (truncate, hole punching, unlink).
    pub fn punch(
        &self,
        ino: InodeNo,
        from: FileBlock,
        to: Option<FileBlock>,
        extra: &WriteBatch,
        durability: Durability,
    ) -> Result<(), EngineError> {
        self.check_writable()?;
        let domain = self.domain(ino);
        let start = keys::mapping_key(ino, from);
        let stop = match to {
            Some(t) => keys::mapping_key(ino, t).to_vec(),
            None => {
                let mut p = keys::mapping_prefix(ino).to_vec();
                p.push(0xff);
                p
            }
        };
        let mut state = domain.lock();
        let mut batch = WriteBatch::new();
        let mut found = Vec::new();
        for item in self.db.range(&start, Some(&stop), None)? {
            let (key, value) = item?;
            found.push((key, Mapping::decode(&value)?));
        }
        for (key, m) in &found {
            state.invalidate(&self.geometry, m.addr);
            batch.delete(key.clone());
        }
        self.finish_batch(&mut state, domain, &mut batch);
        append(&mut batch, extra);
        let receipt = self.failing(self.put_batch(domain, &mut state, &batch))?;
        // Read under the lock: a number issued later may belong to a writer waiting
        // inside MetaDB, which the persist must not wait for.
        let seq = domain.tracker.issued();
        drop(state);
        if durability == Durability::Fsync {
            self.persist_domain(domain, receipt, seq)?;
        }
        Ok(())
    }

    /// A domain checkpoint: every batch of the domain so far, and every data write it
    /// names, becomes durable; segments the domain freed before it become free; the
    /// domain's checkpoint slot records the watermark.
    pub fn checkpoint(&self, d: DomainId) -> Result<(), EngineError> {
        self.check_writable()?;
        let domain = &self.domains[d.0 as usize];
        let cut = self.pool.checkpoint_cut(d);
        let (receipt, seq, elapsed) = {
            let state = domain.lock();
            (
                state.last_receipt,
                domain.tracker.issued(),
                state.seginfo.now_ns(),
            )
        };
        if let Some(receipt) = receipt {
            self.persist_domain(domain, receipt, seq)?;
        }
        let record = DomainRecord {
            durable_seq: domain.tracker.durable(),
            issued_seq: seq,
            elapsed_ns: elapsed,
        };
        let sequence = domain.checkpoint_seq.fetch_add(1, Ordering::SeqCst) + 1;
        self.write_slot(CheckpointOwner::Domain(d), sequence, &record)?;
        let discards = self.pool.checkpoint_committed(cut);
        self.discard(discards);
        self.counters.checkpoints.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Discards freed segments (the device may reclaim them; augefs.txt §VI-A leaves
    /// this to the FTL), then makes them allocatable. A failed discard loses nothing:
    /// the segment is free either way, so it is counted, not reported.
    fn discard(&self, batch: crate::space::pool::DiscardBatch) {
        if !batch.is_empty() {
            let requests = batch
                .segments()
                .iter()
                .map(|&s| {
                    IoRequest::discard(
                        self.pool.segment_offset_bytes(s),
                        SEGMENT_SIZE_BYTES,
                        IoCause::Gc,
                    )
                })
                .collect();
            let failed = match self.device.run(requests) {
                Ok(done) => done.iter().filter(|c| c.result.is_err()).count() as u64,
                Err(_) => batch.segments().len() as u64,
            };
            self.counters
                .discards_failed
                .fetch_add(failed, Ordering::Relaxed);
            self.counters
                .segments_discarded
                .fetch_add(batch.segments().len() as u64, Ordering::Relaxed);
        }
        self.pool.discard_done(batch);
    }

    fn checkpoint_all(&self) -> Result<(), EngineError> {
        for d in 0..self.domains.len() {
            self.checkpoint(DomainId(d as u16))?;
        }
        Ok(())
    }

    /// Writes `record` over the older slot of `owner` and flushes.
    fn write_slot(
        &self,
        owner: CheckpointOwner,
        sequence: u64,
        record: &DomainRecord,
    ) -> Result<(), EngineError> {
        let slot = CheckpointSlot {
            owner,
            payload_version: CHECKPOINT_PAYLOAD_VERSION,
            sequence,
            payload: record.encode().to_vec(),
        };
        // Sequence n goes to slot (n + 1) mod 2 (mkfs wrote sequence 1 to slot 0), so a new
        // checkpoint never overwrites the current one.
        let index = ((sequence + 1) % 2) as u32;
        let offset = self.geometry.checkpoint_slot_offset(owner, index);
        let mut buf = AlignedBuf::zeroed(CHECKPOINT_SLOT_BYTES as usize);
        buf.copy_from_slice(&slot.encode());
        let r = self
            .device
            .run(vec![
                IoRequest::write(offset, buf, IoCause::Checkpoint),
                IoRequest::flush(IoCause::Checkpoint),
            ])
            .and_then(|done| done.into_iter().try_for_each(|c| c.result));
        self.failing(r.map_err(Into::into))
    }

    /// sync(): a consistent whole-file-system checkpoint. Every domain checkpoints, then
    /// MetaDB's other lanes are made durable and the global slot is written.
    pub fn sync(&self) -> Result<(), EngineError> {
        self.checkpoint_all()?;
        self.failing(self.db.sync().map_err(Into::into))?;
        let sequence = self.global_checkpoint_seq.fetch_add(1, Ordering::SeqCst) + 1;
        let record = DomainRecord {
            durable_seq: 0,
            issued_seq: 0,
            elapsed_ns: self.domains[0].lock().seginfo.now_ns(),
        };
        self.write_slot(CheckpointOwner::Global, sequence, &record)
    }

    /// Syncs and closes MetaDB.
    pub fn close(self) -> Result<(), EngineError> {
        self.sync()?;
        self.db.close()?;
        Ok(())
    }

    /// Where the space is (statfs, ENOSPC reports, utilization tests).
    pub fn space_report(&self) -> SpaceReport {
        let stats = self.pool.stats();
        let domain_segments: u32 = self.domain_segments().iter().map(|&n| n as u32).sum();
        let table_segments = stats.in_use - domain_segments;
        let config = self.pool.config();
        let kept = config.reserve_segments + config.metadb_headroom;
        let heads = 2 * self.geometry.domain_count;
        let live_blocks = self.valid_blocks().iter().sum();
        let data_segments = self
            .geometry
            .segment_count
            .saturating_sub(kept + table_segments + heads);
        SpaceReport {
            segments: self.geometry.segment_count,
            free: stats.free,
            pending: stats.pending,
            gc_reserve: config.reserve_segments,
            metadb_headroom: config.metadb_headroom,
            table_segments,
            domain_segments,
            live_blocks,
            capacity_blocks: u64::from(data_segments) * BLOCKS_PER_SEGMENT,
        }
    }

    /// Live data blocks per domain (for tests and reports).
    pub fn valid_blocks(&self) -> Vec<u64> {
        self.domains
            .iter()
            .map(|d| d.lock().seginfo.valid_blocks_total())
            .collect()
    }

    /// Segments each domain owns.
    pub fn domain_segments(&self) -> Vec<usize> {
        self.domains
            .iter()
            .map(|d| d.lock().seginfo.segment_count())
            .collect()
    }
}

/// One write's blocks with their CRCs, as `Engine::write` prepared them.
struct Blocks<'a> {
    ino: InodeNo,
    first: FileBlock,
    data: &'a [u8],
    crcs: Vec<u32>,
    /// The caller's operations for the same batch.
    extra: &'a WriteBatch,
}

impl Blocks<'_> {
    fn count(&self) -> u32 {
        self.crcs.len() as u32
    }
}

/// Where the space of the segment area is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpaceReport {
    pub segments: u32,
    pub free: u32,
    /// Freed, free after their domain's next checkpoint.
    pub pending: u32,
    pub gc_reserve: u32,
    pub metadb_headroom: u32,
    pub table_segments: u32,
    pub domain_segments: u32,
    pub live_blocks: u64,
    /// The live data the engine promises room for now: the segment area minus the GC
    /// reserve, MetaDB's headroom, its tables and two log heads per domain. Writes do
    /// not see ENOSPC while live data stays within it (GC makes the room).
    pub capacity_blocks: u64,
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

/// Appends the operations of `extra` to `batch`.
fn append(batch: &mut WriteBatch, extra: &WriteBatch) {
    for (kind, key, value) in extra.ops() {
        match kind {
            metadb::ValueKind::Put => batch.put(key.to_vec(), value.to_vec()),
            metadb::ValueKind::Delete => batch.delete(key.to_vec()),
        };
    }
}

/// Submits one write per run of `data` (without waiting).
fn submit_runs(
    queue: &mut device::Queue<'_>,
    runs: &[Run],
    data: &[u8],
    cause: IoCause,
) -> Result<(), EngineError> {
    let mut at = 0usize;
    for run in runs {
        let len = run.blocks as usize * BLOCK;
        let buf = AlignedBuf::from_slice(&data[at..at + len]);
        at += len;
        let mut request = IoRequest::write(run.start.byte_offset(), buf, cause);
        loop {
            match queue.push(request) {
                Ok(()) => break,
                Err(back) => {
                    request = back;
                    queue.submit(1)?;
                    while let Some(c) = queue.pop() {
                        c.result?;
                    }
                }
            }
        }
    }
    assert_eq!(at, data.len(), "runs cover the data");
    queue.submit(0)?;
    Ok(())
}

/// Waits for every request of `queue`; the first failure, after all have finished.
fn reap(queue: &mut device::Queue<'_>) -> Result<(), EngineError> {
    let mut first_error = None;
    while queue.outstanding() > 0 {
        queue.submit(1)?;
        while let Some(c) = queue.pop() {
            if let Err(e) = c.result {
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}
