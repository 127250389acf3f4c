//! The log-structured data layout (augefs.txt §VI): file blocks appended to per-domain
//! logs, the block index in MetaDB, asynchronous fsync, GC, checkpoints and recovery.
//! docs/DESIGN.md §9 has the reasoning and the crash case tree.
//!
//! - [`Engine`] (this module): the mounted engine, its configuration and reports;
//!   `mount` (open and recovery), `write` (write, fsync, punch, foreground cleaning;
//!   `write::many`: many files' blocks at once, and the ordered path),
//!   `read`, `checkpoint` (domain checkpoints, sync, discards).
//! - [`domain`]: a domain's heads, reservations and segment information.
//! - [`keys`]: the engine's records in MetaDB (docs/FORMAT.md §6.2).
//! - `mapcache`: whole extents' mappings kept in memory for reads.
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

mod checkpoint;
pub mod domain;
pub mod gc;
pub mod global;
pub mod hooks;
mod index;
pub mod keys;
mod mapcache;
mod mount;
pub use mount::{checkpoint_watermarks, wal_durable};
mod read;
pub mod tracker;
mod write;

use crate::error::EngineError;
use crate::space::pool::SpacePool;
use device::Device;
use domain::DomainState;
use format::constants::{BLOCKS_PER_SEGMENT, BLOCK_SIZE_BYTES};
use format::{DomainId, Geometry, InodeNo};
use hooks::ReplayReport;
use metadb::{MetaDb, MetaDbConfig};
use platform::Clock;
use pmr::Pmr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use tracker::SeqTracker;
pub use write::{Extra, FileWrite, Ranges, WriteOptions};

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
    /// Where the mount's time went (by the engine's clock).
    pub timings: MountTimings,
}

/// The phases of a mount, in nanoseconds of the engine's clock (augefs.txt §VI-A's
/// recovery breakdown).
#[derive(Debug, Clone, Copy, Default)]
pub struct MountTimings {
    /// Superblock, PMR check and checkpoint slots.
    pub superblock_ns: u64,
    /// MetaDB's manifest and WAL read and replayed into memtables (through the replay
    /// filter, which reads the data blocks of records above a domain's watermark).
    pub replay_ns: u64,
    /// Every domain rebuilt from its records (in parallel) and its segments claimed.
    pub domains_ns: u64,
    /// MetaDB's recovery flush and its job threads started.
    pub finish_ns: u64,
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
    /// This domain's newest checkpoint slot: its sequence and the watermarks it holds
    /// (held across a checkpoint's decision and slot write).
    slot: Mutex<SlotState>,
    /// Where the domain's newest batch is in its WAL lane (also `last_receipt`, but
    /// readable without the domain's lock: a leaf lock, taken by holders of another
    /// domain's lock).
    last_logged: Mutex<Option<domain::Required>>,
}

/// What a domain's newest checkpoint slot says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SlotState {
    sequence: u64,
    durable_seq: u64,
    issued_seq: u64,
}

impl Domain {
    fn lock(&self) -> MutexGuard<'_, DomainState> {
        self.state.lock().expect("domain lock")
    }

    /// The domain's lock if no one holds it.
    fn try_lock(&self) -> Option<MutexGuard<'_, DomainState>> {
        match self.state.try_lock() {
            Ok(guard) => Some(guard),
            Err(std::sync::TryLockError::WouldBlock) => None,
            Err(std::sync::TryLockError::Poisoned(_)) => panic!("domain lock poisoned"),
        }
    }
}

/// What a front end runs when a failure turns the engine read-only.
pub type FailureHook = Box<dyn Fn(&str) + Send + Sync>;

/// A mounted engine.
pub struct Engine {
    device: Arc<Device>,
    geometry: Geometry,
    pool: Arc<SpacePool>,
    db: MetaDb,
    domains: Vec<Domain>,
    config: EngineConfig,
    failure: OnceLock<String>,
    /// Set by [`Engine::set_read_only`] (a read-only mount): writes fail with EROFS and
    /// `close` persists nothing.
    read_only: OnceLock<String>,
    /// Told once, with the reason, when a failure turns the engine read-only.
    on_failure: OnceLock<FailureHook>,
    global_checkpoint_seq: AtomicU64,
    counters: EngineCounters,
    mount: MountReport,
    /// The image allows extents (superblock feature flag): long runs are mapped by them.
    extents: bool,
    /// Whole extents' mappings for reads (`mapcache`).
    map_cache: mapcache::MapCache,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("domains", &self.domains.len())
            .field("failure", &self.failure.get())
            .finish()
    }
}

impl Engine {
    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    pub fn metadb(&self) -> &MetaDb {
        &self.db
    }

    /// Extents whose mappings the read-side map cache holds (`mapcache`).
    pub fn cached_spans(&self) -> usize {
        self.map_cache.spans()
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

    /// EROFS once a device write or flush has failed (the engine is read-only until
    /// remounted).
    pub fn check_writable(&self) -> Result<(), EngineError> {
        if let Some(why) = self.read_only.get() {
            return Err(EngineError::ReadOnly(why.clone()));
        }
        match self.failure.get() {
            Some(why) => Err(EngineError::ReadOnly(why.clone())),
            None => Ok(()),
        }
    }

    /// Records the first failure: the engine is read-only from now on.
    fn fail(&self, e: &EngineError) {
        let why = format!("after an earlier failure ({e})");
        if self.failure.set(why.clone()).is_ok() {
            if let Some(tell) = self.on_failure.get() {
                tell(&why);
            }
        }
    }

    /// `tell` runs once, with the reason, when a device failure turns the engine
    /// read-only (a front end says so where users look). Only the first call counts.
    pub fn on_failure(&self, tell: FailureHook) {
        let _ = self.on_failure.set(tell);
    }

    fn failing<T>(&self, r: Result<T, EngineError>) -> Result<T, EngineError> {
        r.inspect_err(|e| {
            if !matches!(e, EngineError::Space(_)) {
                self.fail(e)
            }
        })
    }

    /// From now on every write fails with EROFS saying `why`, and `close` writes
    /// nothing: a read-only mount (recovery ran on a copy-on-write view, see
    /// `device::cow`; nothing more is written).
    pub fn set_read_only(&self, why: &str) {
        let _ = self.read_only.set(why.to_string());
        self.db.set_read_only(why);
    }

    /// Why writes fail, if they do: a read-only mount, or an earlier device failure of
    /// the engine or of MetaDB.
    pub fn read_only_reason(&self) -> Option<String> {
        if let Some(why) = self.read_only.get().or(self.failure.get()) {
            return Some(why.clone());
        }
        self.db.check_writable().err().map(|e| e.to_string())
    }

    /// Syncs and closes MetaDB.
    pub fn close(self) -> Result<(), EngineError> {
        if self.read_only.get().is_some() {
            self.db.close()?;
            return Ok(());
        }
        self.sync()?;
        self.db.close()?;
        Ok(())
    }

    /// Where the space is (statfs, ENOSPC reports, utilization tests).
    pub fn space_report(&self) -> SpaceReport {
        // The domains' counts and the pool's are read under different locks while
        // domains take and release segments: the figures can disagree by the segments
        // that moved in between. Domains first, so a segment taken meanwhile counts as a
        // table's (capacity errs low); one released meanwhile could still make the
        // difference negative, hence the saturation.
        let domain_segments: u32 = self.domain_segments().iter().map(|&n| n as u32).sum();
        let stats = self.pool.stats();
        let table_segments = stats.in_use.saturating_sub(domain_segments);
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

impl SpaceReport {
    /// The blocks of the whole segment area (statfs's size: fixed for an image).
    pub fn area_blocks(&self) -> u64 {
        u64::from(self.segments) * BLOCKS_PER_SEGMENT
    }

    /// The blocks new data may take now: the capacity beyond the live blocks, or the
    /// free segments beyond the reserves if that is more (a small image, whose log
    /// heads and reserves take all its capacity, still takes writes while it has free
    /// segments). Never more than the area, so size = used + free adds up.
    pub fn room_blocks(&self) -> u64 {
        let promised = self.capacity_blocks.saturating_sub(self.live_blocks);
        let kept = self.gc_reserve + self.metadb_headroom;
        let free = u64::from(self.free.saturating_sub(kept)) * BLOCKS_PER_SEGMENT;
        promised.max(free).min(self.area_blocks())
    }
}
