//! The database: the write path (parallel request processing), reads, snapshots,
//! memtable switch, and recovery (docs/DESIGN.md §6.1).
//!
//! Invariants:
//! - The published [`SuperVersion`] changes only under `install_lock`; readers load it
//!   with one atomic read and see memtables and tables that together hold every write.
//! - Memtables are flushed oldest first; the manifest's flushed generation only grows,
//!   and the WAL releases a generation only after the manifest edit naming its tables is
//!   durable.
//! - A table's segment is released only when the durable manifest no longer names it and
//!   no reader holds it (see [`TableHandle`]).
//! - After an IO failure on the write path the database is read-only until reopened.

mod iter;
mod jobs;
mod recover;

pub use iter::{DbIterator, KeyValue};
pub use recover::Salvaged;

use crate::batch::WriteBatch;
use crate::compaction::policy::CompactionConfig;
use crate::error::MetaDbError;
use crate::gate::SeqGate;
use crate::hooks::WriteHooks;
use crate::manifest::Manifest;
use crate::memtable::{Found, Memtable};
use crate::table::builder::TableOptions;
use crate::table::cache::BlockCache;
use crate::table::reader::Table;
use crate::table::TableId;
use crate::table_store::TableStore;
use crate::types::{CallerWrites, Durability, InternalKey, Receipt, Seq, ValueKind, WalPos};
use crate::version::Version;
use crate::wal::{Wal, WalExtent};
use arc_swap::ArcSwap;
use device::Device;
use format::{Geometry, SegmentNo};
use pmr::Pmr;
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;

/// Tuning. Defaults suit file-system metadata on a fast SSD.
#[derive(Debug, Clone)]
pub struct MetaDbConfig {
    /// WAL lanes (independent append streams); a thread always writes to the same lane.
    pub lanes: usize,
    /// WAL lanes beyond `lanes` that only `write_pinned` uses (WAL lane `lanes + i` for
    /// pinned lane `i`): a caller that gives each of its streams its own pinned lane has
    /// each stream's batches totally ordered in one lane, which recovers as a prefix.
    pub pinned_lanes: usize,
    /// A memtable is switched when it holds about this many bytes (capped so that four
    /// memtables' logs fit the WAL region).
    pub memtable_bytes: usize,
    /// Immutable memtables waiting for flush before writers stall.
    pub immutables_max: usize,
    /// Level-0 tables at which writers stall until compaction catches up (the bound on
    /// compaction debt: without it a fast writer outruns compaction without limit).
    pub level0_stop_tables: usize,
    pub block_cache_bytes: usize,
    pub table: TableOptions,
    pub compaction: CompactionConfig,
    /// Run flush and compaction on background threads (one each). Tests that want
    /// determinism set false and call `flush` / `compact`.
    pub background: bool,
    /// Batches being inserted at once (bounds the snapshot gate's slots).
    pub writer_slots: usize,
    /// WAL records the caller knows were durable (`MetaDb::wal_durable` at its last
    /// sync, kept in its checkpoint): recovery that finds fewer has met damage.
    pub wal_durable: Vec<WalExtent>,
    /// What recovery does with damage it can prove (docs/FORMAT.md §5.2, §5.4): refuse
    /// with [`MetaDbError::Damaged`] (false, the default), or, for fsck's repair, keep
    /// what precedes it as a crash would and report it in [`MetaDb::salvaged`].
    pub salvage_damage: bool,
}

impl MetaDbConfig {
    /// The smallest and largest block cache [`MetaDbConfig::block_cache_for_memory`]
    /// chooses.
    pub const BLOCK_CACHE_MIN: usize = 64 << 20;
    pub const BLOCK_CACHE_MAX: usize = 2 << 30;

    /// The block cache for a machine with `memory` bytes: a sixteenth of it, between
    /// [`MetaDbConfig::BLOCK_CACHE_MIN`] and [`MetaDbConfig::BLOCK_CACHE_MAX`]. Tables
    /// are read with O_DIRECT, so this is all the caching their blocks get (a store
    /// over the kernel's page cache gets the rest of memory); with the page cache's
    /// eighth, augefs's caches take at most about a fifth of memory. Blocks are cached
    /// as they are read: an idle store holds none.
    pub fn block_cache_for_memory(memory: u64) -> usize {
        let share = usize::try_from(memory / 16).unwrap_or(usize::MAX);
        share.clamp(Self::BLOCK_CACHE_MIN, Self::BLOCK_CACHE_MAX)
    }
}

impl Default for MetaDbConfig {
    fn default() -> Self {
        MetaDbConfig {
            lanes: 8,
            pinned_lanes: 0,
            memtable_bytes: 8 << 20,
            immutables_max: 4,
            level0_stop_tables: 32,
            block_cache_bytes: MetaDbConfig::block_cache_for_memory(
                platform::memory::physical_bytes(),
            ),
            table: TableOptions::default(),
            compaction: CompactionConfig::default(),
            background: true,
            writer_slots: 64,
            wal_durable: Vec::new(),
            salvage_damage: false,
        }
    }
}

/// Where MetaDB keeps its data.
#[derive(Debug, Clone)]
pub struct MetaDbEnv {
    pub device: Arc<Device>,
    /// With a PMR the WAL lives there (the device's WAL region backs a small PMR);
    /// without one it lives in the device's WAL region.
    pub pmr: Option<Arc<Pmr>>,
    /// The image's geometry: MetaDB uses its manifest and WAL regions.
    pub geometry: Geometry,
    pub table_store: Arc<dyn TableStore>,
    /// The caller's flush barrier and replay filter ([`WriteHooks`]); `None`: no hooks.
    pub hooks: Option<Arc<dyn WriteHooks>>,
}

/// A table in use. When the last holder lets go of a table that compaction made
/// obsolete (and whose removal is durable in the manifest), its segment is given back.
#[derive(Debug)]
pub(crate) struct TableHandle {
    pub table: Arc<Table>,
    pub segment: SegmentNo,
    obsolete: AtomicBool,
    store: Arc<dyn TableStore>,
    cache: Arc<BlockCache>,
}

impl Drop for TableHandle {
    fn drop(&mut self) {
        if self.obsolete.load(Ordering::SeqCst) {
            self.cache.invalidate_table(self.table.id());
            self.store.release(self.segment);
        }
    }
}

/// Everything a reader needs, published atomically.
#[derive(Debug)]
pub(crate) struct SuperVersion {
    pub active: Arc<Memtable>,
    /// Sealed memtables not yet flushed, newest first.
    pub immutables: Vec<Arc<Memtable>>,
    pub version: Arc<Version>,
    pub tables: Arc<HashMap<TableId, Arc<TableHandle>>>,
}

impl SuperVersion {
    fn memtables(&self) -> impl Iterator<Item = &Arc<Memtable>> {
        std::iter::once(&self.active).chain(self.immutables.iter())
    }

    fn table(&self, id: TableId) -> &Arc<TableHandle> {
        self.tables
            .get(&id)
            .expect("every table of the version is open")
    }
}

#[derive(Debug, Default)]
struct Work {
    /// A memtable was switched and the flush thread has not looked since.
    flush_pending: bool,
    /// A flush or compaction changed the version and the compaction thread has not
    /// looked since.
    compact_pending: bool,
    shutdown: bool,
}

/// The two background jobs; each has its own thread and lock, so a long compaction never
/// holds up a flush (writers stall on unflushed memtables) and a stream of flushes never
/// starves compaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Job {
    Flush,
    Compact,
}

#[derive(Debug)]
pub(crate) struct Inner {
    env: MetaDbEnv,
    config: MetaDbConfig,
    /// `env.hooks`, or [`crate::hooks::NoHooks`].
    hooks: Arc<dyn WriteHooks>,
    wal: Box<dyn Wal>,
    seq: SeqGate,
    current: ArcSwap<SuperVersion>,
    /// Serialises memtable switches.
    switch_lock: Mutex<()>,
    /// Serialises changes to `current`.
    install_lock: Mutex<()>,
    /// One flush at a time (flushes add level-0 tables in memtable order).
    flush_lock: Mutex<()>,
    /// One compaction at a time (the policy does not know which tables a running job
    /// holds). A flush and a compaction may run together: a flush only adds level-0
    /// tables newer than any a compaction picked, so their edits commute.
    compact_lock: Mutex<()>,
    manifest: Manifest,
    cache: Arc<BlockCache>,
    next_table_id: AtomicU64,
    last_flushed_seq: AtomicU64,
    /// Live snapshots: sequence number -> count.
    snapshots: Mutex<BTreeMap<Seq, usize>>,
    cursors: Mutex<BTreeMap<u32, Vec<u8>>>,
    failure: OnceLock<String>,
    /// Set by [`MetaDb::set_read_only`]: writes fail with `ReadOnly`, close persists
    /// nothing (the image was opened to be read).
    read_only: OnceLock<String>,
    work: Mutex<Work>,
    work_cv: Condvar,
    /// Signalled whenever a flush or compaction finishes (stalled writers wait on it).
    progress_cv: Condvar,
    /// Recovered WAL records dropped at open (`MetaDbStats::replay_dropped`).
    replay_dropped: u64,
    /// Of those, dropped for a lost requirement (`MetaDbStats::replay_unmet`).
    replay_unmet: u64,
    /// Damage recovery salvaged (`MetaDb::salvaged`).
    salvaged: Vec<Salvaged>,
    /// Per WAL lane, the furthest position of each other lane that a batch logged in it
    /// requires (`WriteBatch::require`): a persist of the lane persists these first.
    /// Noted before the batch's append, so every persist that covers the batch sees them.
    requirements: Box<[Mutex<Vec<WalPos>>]>,
    /// Set (before the lists) once any requirement was noted: until then a persist
    /// skips the lists (no allocation, no lock on the sync-write path).
    any_requirements: AtomicBool,
}

/// MetaDB. Cheap to share by reference across threads.
#[derive(Debug)]
pub struct MetaDb {
    inner: Arc<Inner>,
    workers: Mutex<Vec<JoinHandle<()>>>,
}

/// A consistent read view. Reads through it see exactly the writes whose sequence
/// numbers are at or below `seq`.
#[derive(Debug)]
pub struct Snapshot {
    seq: Seq,
    inner: Arc<Inner>,
}

impl Snapshot {
    pub fn seq(&self) -> Seq {
        self.seq
    }
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        let mut snapshots = self.inner.snapshots.lock().expect("snapshots lock");
        let count = snapshots.get_mut(&self.seq).expect("snapshot registered");
        *count -= 1;
        if *count == 0 {
            snapshots.remove(&self.seq);
        }
    }
}

/// Counters for benchmarks and tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetaDbStats {
    pub last_seq: Seq,
    pub generation: u64,
    pub immutables: usize,
    pub tables_per_level: Vec<usize>,
    pub bytes_per_level: Vec<u64>,
    /// WAL records recovered at open and not replayed: those `WriteHooks::filter_replay`
    /// dropped and `replay_unmet`.
    pub replay_dropped: u64,
    /// WAL records recovered at open and dropped because a record they require
    /// (`WriteBatch::require`) was lost, with the rest of their lanes.
    pub replay_unmet: u64,
}

/// A small number fixed for the life of the calling thread. Writes of one thread always
/// use the same WAL lane, so recovery keeps each thread's writes in program order (a lane
/// recovers as a prefix). The paper keys lanes by CPU; keying by thread keeps that
/// order even when the scheduler moves a thread, and spreads threads the same way.
fn thread_index() -> usize {
    use std::cell::Cell;
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    thread_local! {
        static INDEX: Cell<Option<usize>> = const { Cell::new(None) };
    }
    INDEX.with(|i| match i.get() {
        Some(index) => index,
        None => {
            let index = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            i.set(Some(index));
            index
        }
    })
}

impl MetaDb {
    /// Opens (recovering) the MetaDB of `env`. A freshly formatted image yields an empty
    /// database.
    pub fn open(env: MetaDbEnv, config: MetaDbConfig) -> Result<MetaDb, MetaDbError> {
        MetaDb::open_then(env, config, &mut |_| Ok(()))
    }

    /// Opens like [`MetaDb::open`], and calls `recovered` with the recovered database
    /// *before* the recovery flush and before any background job runs: nothing has been
    /// allocated from the table store since the manifest's tables were claimed, so the
    /// caller can claim space it records in MetaDB itself (the engine's domain segments)
    /// first. `recovered` may read; it must not write.
    pub fn open_then(
        env: MetaDbEnv,
        mut config: MetaDbConfig,
        recovered: &mut dyn FnMut(&MetaDb) -> Result<(), MetaDbError>,
    ) -> Result<MetaDb, MetaDbError> {
        assert!(
            config.lanes >= 1 && config.lanes + config.pinned_lanes <= 256,
            "{} lanes and {} pinned lanes",
            config.lanes,
            config.pinned_lanes
        );
        // Four memtables' logs must fit the WAL region (records add framing).
        let wal_bytes = env.geometry.wal.size_bytes() as usize;
        config.memtable_bytes = config.memtable_bytes.min(wal_bytes / 6).max(64 << 10);
        let (inner, pending) = Inner::recover(env, config)?;
        let db = MetaDb {
            inner: Arc::new(inner),
            workers: Mutex::new(Vec::new()),
        };
        recovered(&db)?;
        db.inner.finish_recovery(pending)?;
        let inner = db.inner.clone();
        let mut workers = Vec::new();
        if inner.config.background {
            for (job, name) in [
                (Job::Flush, "metadb-flush"),
                (Job::Compact, "metadb-compact"),
            ] {
                let inner = inner.clone();
                workers.push(
                    std::thread::Builder::new()
                        .name(name.into())
                        .spawn(move || inner.background_loop(job))
                        .expect("spawn a MetaDB job thread"),
                );
            }
            // Recovery may have left compaction due.
            inner.request_work(Job::Compact);
        }
        *db.workers.lock().expect("workers lock") = workers;
        Ok(db)
    }

    pub fn put(
        &self,
        key: &[u8],
        value: &[u8],
        durability: Durability,
    ) -> Result<Receipt, MetaDbError> {
        let mut batch = WriteBatch::new();
        batch.put(key.to_vec(), value.to_vec());
        self.write(&batch, durability)
    }

    pub fn delete(&self, key: &[u8], durability: Durability) -> Result<Receipt, MetaDbError> {
        let mut batch = WriteBatch::new();
        batch.delete(key.to_vec());
        self.write(&batch, durability)
    }

    /// Applies `batch` atomically, logging it in the calling thread's WAL lane.
    pub fn write(
        &self,
        batch: &WriteBatch,
        durability: Durability,
    ) -> Result<Receipt, MetaDbError> {
        let lane = thread_index() % self.inner.config.lanes;
        self.inner.write(lane, batch, durability)
    }

    /// Like [`MetaDb::write`], but logs `batch` in pinned lane `pinned` (WAL lane `lanes +
    /// pinned`) whatever the thread: batches written to one pinned lane are totally
    /// ordered in it, and recovery keeps a prefix of them.
    pub fn write_pinned(
        &self,
        pinned: usize,
        batch: &WriteBatch,
        durability: Durability,
    ) -> Result<Receipt, MetaDbError> {
        assert!(
            pinned < self.inner.config.pinned_lanes,
            "pinned lane {pinned} of {}",
            self.inner.config.pinned_lanes
        );
        self.inner
            .write(self.inner.config.lanes + pinned, batch, durability)
    }

    /// Makes the writes behind `receipts` durable (and the earlier writes of their WAL
    /// lanes), and nothing else.
    pub fn persist(&self, receipts: &[Receipt]) -> Result<(), MetaDbError> {
        self.inner.check_writable()?;
        let positions: Vec<_> = receipts.iter().map(|r| r.pos).collect();
        self.inner
            .persist(&positions)
            .inspect_err(|e| self.inner.fail(e))
    }

    /// [`MetaDb::persist`] with one device flush that also covers the caller's own
    /// device writes: `before_flush` is called exactly once, after this call's WAL writes
    /// were issued (so the caller's waiting overlaps them) and before the device flush that
    /// makes them durable is requested; on Ok, a device flush submitted after
    /// `before_flush` returned has completed, even if nothing needed writing, unless
    /// `before_flush` answered [`CallerWrites::Durable`] and the records were durable
    /// already (in PMR mode: once their lines are persisted), which needs no flush. The
    /// engine waits for its data writes in `before_flush` and tells whether a flush since
    /// covered them, so one flush covers data and WAL, and none is made for nothing.
    ///
    /// An error of `before_flush` is returned as it is and leaves the database writable
    /// (nothing is flushed). A WAL failure turns the database read-only and is the error
    /// returned. `before_flush` is not called if the call fails first: the database is
    /// read-only already, or the WAL fails before its writes are issued. While
    /// `before_flush` runs, other persisters of the same lanes and a memtable switch (and
    /// so every writer) may wait for it: it must not wait for anything that needs a
    /// MetaDB write or persist to progress.
    pub fn persist_covering(
        &self,
        receipts: &[Receipt],
        before_flush: &mut dyn FnMut() -> Result<CallerWrites, MetaDbError>,
    ) -> Result<(), MetaDbError> {
        self.inner.check_writable()?;
        let positions: Vec<_> = receipts.iter().map(|r| r.pos).collect();
        let positions = self.inner.with_requirements(&positions);
        let mut hook_failed = false;
        let mut hook = || before_flush().inspect_err(|_| hook_failed = true);
        let result = self.inner.wal.persist_covering(&positions, &mut hook);
        if let Err(e) = &result {
            // The hook's error is the caller's; the WAL's turns the database read-only.
            if !hook_failed || self.inner.wal.check_health().is_err() {
                self.inner.fail(e);
            }
        }
        result
    }

    /// The WAL generation writes go to now: every record of an earlier generation is
    /// durable (a memtable switch persists its generation whole).
    pub fn generation(&self) -> u64 {
        self.inner.wal.generation()
    }

    /// Makes every write so far durable.
    pub fn sync(&self) -> Result<(), MetaDbError> {
        self.inner.check_writable()?;
        self.inner
            .wal
            .persist_all()
            .inspect_err(|e| self.inner.fail(e))
    }

    /// Per WAL lane of the current generation, the records durable now: a caller that
    /// keeps this after `sync` and hands it to a later open (`MetaDbConfig::wal_durable`)
    /// lets recovery tell damage from a torn tail.
    pub fn wal_durable(&self) -> Vec<WalExtent> {
        self.inner.wal.durable_extents()
    }

    /// Damage recovery met and salvaged (`MetaDbConfig::salvage_damage`), with the
    /// intact records it had to drop after it; empty after a clean recovery.
    pub fn salvaged(&self) -> &[Salvaged] {
        &self.inner.salvaged
    }

    /// The newest value of `key`.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, MetaDbError> {
        self.inner.get(key, Seq::MAX)
    }

    pub fn get_at(&self, key: &[u8], snapshot: &Snapshot) -> Result<Option<Vec<u8>>, MetaDbError> {
        self.inner.get(key, snapshot.seq)
    }

    pub fn snapshot(&self) -> Snapshot {
        let mut snapshots = self.inner.snapshots.lock().expect("snapshots lock");
        let seq = self.inner.seq.snapshot();
        *snapshots.entry(seq).or_insert(0) += 1;
        Snapshot {
            seq,
            inner: self.inner.clone(),
        }
    }

    /// Keys in `[start, end)` (no end: to the last key), in order, at `snapshot` (or a
    /// fresh snapshot).
    pub fn range(
        &self,
        start: &[u8],
        end: Option<&[u8]>,
        snapshot: Option<&Snapshot>,
    ) -> Result<DbIterator, MetaDbError> {
        let snapshot = match snapshot {
            Some(s) => Snapshot {
                seq: s.seq,
                inner: s.inner.clone(),
            }
            .reregister(),
            None => self.snapshot(),
        };
        DbIterator::new(
            self.inner.current.load_full(),
            start.to_vec(),
            end.map(<[u8]>::to_vec),
            snapshot,
        )
    }

    /// Keys starting with `prefix`, in order.
    pub fn prefix(
        &self,
        prefix: &[u8],
        snapshot: Option<&Snapshot>,
    ) -> Result<DbIterator, MetaDbError> {
        let end = prefix_successor(prefix);
        self.range(prefix, end.as_deref(), snapshot)
    }

    /// Switches the memtable and flushes every immutable memtable to tables.
    pub fn flush(&self) -> Result<(), MetaDbError> {
        self.inner.check_writable()?;
        let active = self.inner.current.load_full().active.clone();
        if !active.is_empty() {
            self.inner.switch_memtable(&active)?;
        }
        while self.inner.flush_oldest()? {}
        self.inner.compact_inline_if_behind()
    }

    /// Runs compactions until the policy picks none.
    pub fn compact(&self) -> Result<(), MetaDbError> {
        self.inner.check_writable()?;
        while self.inner.compact_once()? {}
        Ok(())
    }

    pub fn stats(&self) -> MetaDbStats {
        let sv = self.inner.current.load_full();
        let v = &sv.version;
        MetaDbStats {
            last_seq: self.inner.seq.last_issued(),
            generation: sv.active.generation(),
            immutables: sv.immutables.len(),
            tables_per_level: (0..v.level_count() as u32)
                .map(|l| v.level(l).len())
                .collect(),
            bytes_per_level: v.level_sizes_bytes(),
            replay_dropped: self.inner.replay_dropped,
            replay_unmet: self.inner.replay_unmet,
        }
    }

    /// Where the live tables are: each one's segment and length in bytes (from the
    /// segment's start), for tools that look at the device's blocks.
    pub fn table_extents(&self) -> Vec<(SegmentNo, u32)> {
        let sv = self.inner.current.load_full();
        sv.version
            .tables()
            .map(|(_, t)| (t.segment, t.len_bytes))
            .collect()
    }

    /// From now on every write fails with `ReadOnly` saying `why`, and `close` persists
    /// nothing (a read-only mount: recovery ran, nothing more is written).
    pub fn set_read_only(&self, why: &str) {
        let _ = self.inner.read_only.set(why.to_string());
    }

    /// `ReadOnly` once writes fail: a read-only open or an earlier write-path failure.
    pub fn check_writable(&self) -> Result<(), MetaDbError> {
        self.inner.check_writable()
    }

    /// Stops background work and makes every write durable.
    pub fn close(self) -> Result<(), MetaDbError> {
        self.stop_worker();
        if self.inner.read_only.get().is_some() {
            return Ok(());
        }
        if self.inner.failure.get().is_some() {
            return self.inner.check_writable();
        }
        self.inner.wal.persist_all()
    }

    fn stop_worker(&self) {
        {
            let mut work = self.inner.work.lock().expect("work lock");
            work.shutdown = true;
        }
        self.inner.work_cv.notify_all();
        let workers = std::mem::take(&mut *self.workers.lock().expect("workers lock"));
        for handle in workers {
            handle.join().expect("MetaDB job thread panicked");
        }
    }
}

impl Drop for MetaDb {
    fn drop(&mut self) {
        // Durability is `close`'s job; dropping only stops the background thread.
        self.stop_worker();
    }
}

impl Snapshot {
    fn reregister(self) -> Snapshot {
        *self
            .inner
            .snapshots
            .lock()
            .expect("snapshots lock")
            .entry(self.seq)
            .or_insert(0) += 1;
        self
    }
}

/// The smallest key greater than every key starting with `prefix` (None: no such key).
fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

impl Inner {
    fn check_writable(&self) -> Result<(), MetaDbError> {
        if let Some(why) = self.read_only.get() {
            return Err(MetaDbError::ReadOnly(why.clone()));
        }
        match self.failure.get() {
            Some(why) => Err(MetaDbError::ReadOnly(why.clone())),
            None => Ok(()),
        }
    }

    /// Records the first write-path failure: the database is read-only from now on.
    fn fail(&self, e: &MetaDbError) {
        let _ = self.failure.set(format!("after an earlier failure ({e})"));
    }

    /// Logs `batch` in WAL lane `lane` and inserts it into the active memtable.
    fn write(
        &self,
        lane: usize,
        batch: &WriteBatch,
        durability: Durability,
    ) -> Result<Receipt, MetaDbError> {
        assert!(!batch.is_empty(), "empty batch");
        assert!(
            lane < self.config.lanes + self.config.pinned_lanes,
            "lane {lane}"
        );
        if batch.encoded_len() > crate::wal::PAYLOAD_BYTES_MAX {
            return Err(MetaDbError::BatchTooLarge {
                bytes: batch.encoded_len(),
                max: crate::wal::PAYLOAD_BYTES_MAX,
            });
        }
        self.check_writable()?;
        let thread = thread_index();
        let lane = u16::try_from(lane).expect("at most 256 lanes");
        let mut payload = Vec::with_capacity(batch.encoded_len());
        loop {
            let sv = self.current.load_full();
            let mem = sv.active.clone();
            drop(sv);
            if !mem.gate().enter() {
                // Sealed: a switch is under way, and holds `switch_lock` from the seal
                // until the next memtable is installed. Wait for it rather than spin:
                // on few CPUs a spin takes the CPU the switch (which rotates the WAL,
                // a device flush) needs. A switch that failed left the database failed.
                drop(self.switch_lock.lock().expect("switch lock"));
                self.check_writable()?;
                continue;
            }
            if mem.approximate_bytes() >= self.config.memtable_bytes {
                mem.gate().exit();
                self.stall_while_behind(&mem)?;
                self.switch_memtable(&mem)?;
                continue;
            }
            // Requirements on this lane or on a generation made durable whole by a
            // rotation are met already.
            let generation = mem.generation();
            let needed = |r: &WalPos| {
                assert!(
                    r.generation <= generation,
                    "requirement {r:?} not yet written"
                );
                r.lane != lane && r.generation == generation
            };
            self.note_requirements(lane, batch.requires().iter().filter(|r| needed(r)));
            let ticket = self.seq.begin(batch.len() as u64, thread);
            payload.clear();
            batch.encode_into(ticket.first_seq, needed, &mut payload);
            let logged = self.wal.append(lane, &payload).and_then(|pos| {
                if durability == Durability::Sync {
                    self.persist(&[pos])?;
                }
                Ok(pos)
            });
            let pos = match logged {
                Ok(pos) => pos,
                Err(e) => {
                    // Nothing was inserted: give the sequence numbers back as a gap.
                    self.seq.finish(ticket);
                    mem.gate().exit();
                    if matches!(e, MetaDbError::WalFull) {
                        self.switch_memtable(&mem)?;
                        self.wait_for_flush()?;
                        continue;
                    }
                    self.fail(&e);
                    return Err(e);
                }
            };
            assert_eq!(
                pos.generation,
                mem.generation(),
                "WAL and memtable generations agree"
            );
            for (i, (kind, key, value)) in batch.ops().enumerate() {
                mem.insert(
                    InternalKey::new(key.to_vec(), ticket.first_seq + i as u64, kind),
                    value.to_vec(),
                );
            }
            let receipt = Receipt {
                seq: ticket.first_seq,
                pos,
            };
            self.seq.finish(ticket);
            mem.gate().exit();
            return Ok(receipt);
        }
    }

    /// Notes, before a batch's append to `lane`, the positions it requires.
    fn note_requirements<'a>(&self, lane: u16, required: impl Iterator<Item = &'a WalPos>) {
        let mut noted = None;
        for r in required {
            let noted = noted.get_or_insert_with(|| {
                self.any_requirements.store(true, Ordering::SeqCst);
                self.requirements[usize::from(lane)]
                    .lock()
                    .expect("requirements lock")
            });
            match noted.iter_mut().find(|n| n.lane == r.lane) {
                Some(n) => *n = (*n).max(*r),
                None => noted.push(*r),
            }
        }
    }

    /// `positions` and, transitively, the positions the lanes they name require (of the
    /// current generation: earlier ones are durable).
    fn with_requirements<'a>(&self, positions: &'a [WalPos]) -> Cow<'a, [WalPos]> {
        if !self.any_requirements.load(Ordering::SeqCst) {
            return Cow::Borrowed(positions);
        }
        let mut positions = positions.to_vec();
        let current = self.wal.generation();
        let mut visited = vec![false; self.requirements.len()];
        let mut i = 0;
        while i < positions.len() {
            let lane = usize::from(positions[i].lane);
            if !std::mem::replace(&mut visited[lane], true) {
                let required = self.requirements[lane].lock().expect("requirements lock");
                positions.extend(required.iter().filter(|r| r.generation >= current));
            }
            i += 1;
        }
        Cow::Owned(positions)
    }

    /// Makes `positions` durable, with what they require.
    fn persist(&self, positions: &[WalPos]) -> Result<(), MetaDbError> {
        self.wal.persist(&self.with_requirements(positions))
    }

    /// Seals `full` (if it is still the active memtable), waits for its writers, rotates
    /// the WAL and publishes a new memtable.
    fn switch_memtable(&self, full: &Arc<Memtable>) -> Result<(), MetaDbError> {
        let _switch = self.switch_lock.lock().expect("switch lock");
        if !Arc::ptr_eq(&self.current.load().active, full) {
            return Ok(());
        }
        let next_generation = full.generation() + 1;
        full.gate().seal();
        full.gate().drain();
        self.wal
            .rotate(next_generation)
            .inspect_err(|e| self.fail(e))?;
        {
            let _install = self.install_lock.lock().expect("install lock");
            let sv = self.current.load_full();
            let mut immutables = Vec::with_capacity(sv.immutables.len() + 1);
            immutables.push(full.clone());
            immutables.extend(sv.immutables.iter().cloned());
            self.current.store(Arc::new(SuperVersion {
                active: Arc::new(Memtable::new(next_generation)),
                immutables,
                version: sv.version.clone(),
                tables: sv.tables.clone(),
            }));
        }
        self.request_work(Job::Flush);
        Ok(())
    }

    fn request_work(&self, job: Job) {
        {
            let mut work = self.work.lock().expect("work lock");
            match job {
                Job::Flush => work.flush_pending = true,
                Job::Compact => work.compact_pending = true,
            }
        }
        self.work_cv.notify_all();
    }

    /// Before switching the full memtable `full`: with background jobs, wait while
    /// `immutables_max` memtables already wait for flush or level 0 holds
    /// `level0_stop_tables` tables (without background jobs, flush and compaction run
    /// when the caller asks, so there is nothing to wait for).
    fn stall_while_behind(&self, full: &Arc<Memtable>) -> Result<(), MetaDbError> {
        if !self.config.background {
            // No job threads: the writer that would stall does the work itself.
            if self.current.load().immutables.len() >= self.config.immutables_max {
                while self.flush_oldest()? {}
            }
            return self.compact_inline_if_behind();
        }
        self.wait_for_jobs(|sv| {
            !Arc::ptr_eq(&sv.active, full)
                || (sv.immutables.len() < self.config.immutables_max
                    && sv.version.level(0).len() < self.config.level0_stop_tables)
        })
    }

    /// Without job threads: compacts while level 0 holds `level0_stop_tables` tables (the
    /// stall bound), so explicit flushes and reopens cannot grow level 0 without limit.
    fn compact_inline_if_behind(&self) -> Result<(), MetaDbError> {
        if self.config.background {
            return Ok(());
        }
        while self.current.load().version.level(0).len() >= self.config.level0_stop_tables {
            if !self.compact_once()? {
                break;
            }
        }
        Ok(())
    }

    /// Makes room after WalFull: flush inline, or wait for the background thread.
    fn wait_for_flush(&self) -> Result<(), MetaDbError> {
        if !self.config.background {
            while self.flush_oldest()? {}
            return Ok(());
        }
        self.wait_for_jobs(|sv| sv.immutables.is_empty())
    }

    /// Waits until the published state satisfies `done` (the job thread signals after
    /// every flush), shutdown begins, or the database fails.
    fn wait_for_jobs(&self, done: impl Fn(&SuperVersion) -> bool) -> Result<(), MetaDbError> {
        let mut work = self.work.lock().expect("work lock");
        while !done(&self.current.load()) && !work.shutdown {
            self.check_writable()?;
            work = self
                .progress_cv
                .wait_timeout(work, std::time::Duration::from_millis(50))
                .expect("work lock")
                .0;
        }
        Ok(())
    }

    /// The loop of `job`'s thread: wait for a request, then run the job until it has
    /// nothing left to do, waking stalled writers after each step.
    fn background_loop(&self, job: Job) {
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.job_loop(job)));
        if let Err(payload) = run {
            // A bug: make writers stalled on this job fail instead of waiting forever,
            // then let the panic reach `close` (which joins the thread).
            let _ = self.failure.set(format!("MetaDB {job:?} job panicked"));
            self.progress_cv.notify_all();
            std::panic::resume_unwind(payload);
        }
    }

    fn job_loop(&self, job: Job) {
        loop {
            {
                let mut work = self.work.lock().expect("work lock");
                loop {
                    if work.shutdown {
                        return;
                    }
                    let pending = match job {
                        Job::Flush => &mut work.flush_pending,
                        Job::Compact => &mut work.compact_pending,
                    };
                    if *pending {
                        *pending = false;
                        break;
                    }
                    work = self.work_cv.wait(work).expect("work lock");
                }
            }
            let result = (|| -> Result<(), MetaDbError> {
                loop {
                    let progressed = match job {
                        Job::Flush => self.flush_oldest()?,
                        Job::Compact => self.compact_once()?,
                    };
                    if !progressed {
                        return Ok(());
                    }
                    if job == Job::Flush {
                        self.request_work(Job::Compact);
                    }
                    self.progress_cv.notify_all();
                    if self.work.lock().expect("work lock").shutdown {
                        return Ok(());
                    }
                }
            })();
            if let Err(e) = result {
                self.fail(&e);
            }
            self.progress_cv.notify_all();
        }
    }

    fn get(&self, key: &[u8], snapshot: Seq) -> Result<Option<Vec<u8>>, MetaDbError> {
        let sv = self.current.load_full();
        // Memtables: the highest sequence number among them wins (inserts of racing
        // unlocked writers may straddle a switch).
        let mut best: Option<Found> = None;
        for mem in sv.memtables() {
            if let Some(found) = mem.get(key, snapshot) {
                if best.as_ref().is_none_or(|b| found.seq > b.seq) {
                    best = Some(found);
                }
            }
        }
        if let Some(found) = best {
            return Ok((found.kind == ValueKind::Put).then_some(found.value));
        }
        let hash = crate::table::bloom::key_hash(key);
        let v = &sv.version;
        for meta in v.level(0) {
            if let Some((_, kind, value)) =
                sv.table(meta.id).table.get_hashed(key, hash, snapshot)?
            {
                return Ok((kind == ValueKind::Put).then_some(value));
            }
        }
        for level in 1..v.level_count() as u32 {
            let tables = v.level(level);
            let i = tables.partition_point(|t| t.largest.user_key.as_slice() < key);
            if let Some(meta) = tables.get(i) {
                if let Some((_, kind, value)) =
                    sv.table(meta.id).table.get_hashed(key, hash, snapshot)?
                {
                    return Ok((kind == ValueKind::Put).then_some(value));
                }
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::prefix_successor;

    #[test]
    fn prefix_successors() {
        assert_eq!(prefix_successor(b"m:1:"), Some(b"m:1;".to_vec()));
        assert_eq!(prefix_successor(&[1, 0xff]), Some(vec![2]));
        assert_eq!(prefix_successor(&[0xff, 0xff]), None);
        assert_eq!(prefix_successor(b""), None);
    }
}
