//! The write-ahead log: every batch is logged before it reaches the memtable, so recovery
//! can rebuild memtables that were not yet flushed to tables (augefs.txt §V-B).
//!
//! Two implementations share this interface:
//! - [`pmr::PmrWal`]: on a PMR: a CAS-advanced tail, 64-byte aligned entries with TxB and
//!   TxE, an 8-byte slot per WAL "file" (generation); a small-PMR mode migrates a full
//!   half to the device's WAL region.
//! - [`ssd::SsdWal`]: on the device's WAL region: per-lane chunks, records packed at
//!   sector granularity, a synchronous write persists only its lane's dirty sectors, and
//!   concurrent synchronous writers share device writes and flushes.
//!
//! Terms: a *generation* is one memtable's log (the paper's WAL "file"); a *lane* is an
//! independent append stream (one per CPU by default), so threads log without sharing a
//! tail. Each record carries (generation, lane, lane_seq), lane_seq counting from 0 within
//! (generation, lane).
//!
//! Invariants every implementation keeps:
//! - `persist(p)` makes durable the record at `p` and every earlier record of the same
//!   (generation, lane), and no record of another lane needs to be written for it.
//! - Recovery returns, for each (generation, lane), exactly the longest run of complete
//!   records with lane_seq 0, 1, 2, … (a record after a hole is dropped, even if intact), for
//!   every generation greater than the `released_through` it is given. A torn or partly
//!   written record is never returned.
//! - `persist_covering(p, before_flush)` is `persist(p)` whose device flush also covers
//!   the caller's writes: `before_flush` runs once, after the WAL writes of the call were
//!   issued, and the call returns only after a device flush submitted after
//!   `before_flush` returned has completed.
//! - `rotate(next)` first makes every record of the current generation durable, so no
//!   hole can span generations.
//! - Space of generations `<= g` is reused only after `release_through(g)`.
//! - Every record carries `lane_durable`: records of its lane that were durable when it
//!   was appended, never more. With `durable_extents` kept by the caller at sync and the
//!   rotation rule, that is what lets [`WalRecovery::damage`] tell damage from a torn
//!   tail (docs/FORMAT.md §5.2, "what proves damage").

mod chunk;
mod flush;
#[cfg(feature = "fuzz")]
#[doc(hidden)]
pub mod fuzz;
pub mod pmr;
mod record;
mod recovery;
pub mod ssd;

pub(crate) use chunk::written_len;
pub use record::{layouts as format_layouts, PAYLOAD_BYTES_MAX};

use crate::error::MetaDbError;
use crate::types::{CallerWrites, WalPos};

/// A record found by recovery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveredRecord {
    pub generation: u64,
    pub lane: u16,
    pub lane_seq: u64,
    /// The payload given to `append` (an encoded `WriteBatch`).
    pub payload: Vec<u8>,
}

/// What recovery found, besides the records.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WalRecovery {
    /// Records of live generations, ordered by (generation, lane, lane_seq).
    pub records: Vec<RecoveredRecord>,
    /// The highest generation seen in the log (0 if none); the next generation must be
    /// greater.
    pub generation_max: u64,
    /// Complete records dropped because they followed a hole in their lane.
    pub dropped_after_hole: u64,
    /// Every (generation, lane) whose run stopped before intact records of the lane.
    pub holes: Vec<LaneHole>,
    /// Per (generation, lane): the most records of the lane an intact record said were
    /// durable when it was appended (its `lane_durable`, FORMAT.md §5.2).
    pub marks: Vec<WalExtent>,
}

/// Records 0..`count` of (generation, lane) that were durable when the caller noted them
/// (`Wal::durable_extents`, kept in the engine's global checkpoint): recovery that finds
/// fewer is looking at damage, not a torn tail (docs/FORMAT.md §5.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalExtent {
    pub generation: u64,
    pub lane: u16,
    pub count: u64,
}

/// A lane whose run of records stops at `run` although intact records of it lie beyond.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneHole {
    pub generation: u64,
    pub lane: u16,
    /// Records 0..run were returned; record `run` is missing or fails its checks.
    pub run: u64,
    /// The intact records beyond the hole (lane_seq, payload), dropped by recovery.
    pub beyond: Vec<(u64, Vec<u8>)>,
}

impl WalRecovery {
    /// Records returned for (generation, lane).
    fn run_len(&self, generation: u64, lane: u16) -> u64 {
        self.records
            .iter()
            .filter(|r| r.generation == generation && r.lane == lane)
            .count() as u64
    }

    /// The first damage the log proves (docs/FORMAT.md §5.2 "What proves damage"), if any:
    /// - a lane of a generation above `released_through` holds fewer records than a
    ///   `durable` extent says were durable, or than an intact record of the lane says
    ///   were durable when it was appended;
    /// - a lane's run stops before intact records of the same (generation, lane) while a
    ///   later generation exists: `rotate` made the whole generation durable before
    ///   anything of the next one was written, so no crash leaves a hole in it.
    pub fn damage(
        &self,
        durable: &[WalExtent],
        released_through: u64,
    ) -> Option<format::Corruption> {
        let sources = durable
            .iter()
            .map(|e| (e, "durable at the last sync"))
            .chain(self.marks.iter().map(|e| {
                (
                    e,
                    "durable when a later intact record of the lane was appended",
                )
            }));
        for (e, source) in sources.filter(|(e, _)| e.generation > released_through) {
            let run = self.run_len(e.generation, e.lane);
            if run < e.count {
                let beyond = self
                    .holes
                    .iter()
                    .find(|h| h.generation == e.generation && h.lane == e.lane)
                    .map_or(0, |h| h.beyond.len());
                return Some(format::Corruption::new(
                    "MetaDB WAL record",
                    format!(
                        "generation {} lane {} lane_seq {}",
                        e.generation, e.lane, run
                    ),
                    format!("records 0..{} of the lane, {source}", e.count),
                    format!(
                        "the lane's records end at {run} ({beyond} intact records after the gap)"
                    ),
                ));
            }
        }
        let h = self
            .holes
            .iter()
            .find(|h| h.generation < self.generation_max)?;
        Some(format::Corruption::new(
            "MetaDB WAL record",
            format!(
                "generation {} lane {} lane_seq {}",
                h.generation, h.lane, h.run
            ),
            format!(
                "an intact record (generation {} was made durable whole before generation {} began)",
                h.generation, self.generation_max
            ),
            format!(
                "a gap followed by {} intact records of the lane (lane_seq {}..)",
                h.beyond.len(),
                h.beyond.first().map_or(0, |b| b.0)
            ),
        ))
    }
}

pub trait Wal: Send + Sync + std::fmt::Debug {
    fn lanes(&self) -> usize;

    /// The generation appends go to.
    fn generation(&self) -> u64;

    /// Appends one record to `lane` of the current generation. Not durable until
    /// persisted. Fails with `WalFull` when no space is free (the caller flushes a memtable
    /// and releases its generation, then retries).
    fn append(&self, lane: u16, payload: &[u8]) -> Result<WalPos, MetaDbError>;

    /// Makes the records at `positions`, and the earlier records of their lanes, durable.
    /// Safe to call concurrently; concurrent callers may share device writes and flushes.
    fn persist(&self, positions: &[WalPos]) -> Result<(), MetaDbError>;

    /// `persist(positions)`, with a device flush that also covers writes the caller
    /// completes in `before_flush` (the engine's data writes: one flush for both):
    /// - `before_flush` is called once, after this call's WAL writes were issued (the
    ///   caller's waiting overlaps them) and before the device flush that makes them
    ///   durable is requested; on Ok, a device flush submitted after `before_flush`
    ///   returned has completed, unless `before_flush` answered
    ///   [`CallerWrites::Durable`] and the records were durable already (persisted PMR
    ///   lines, or WAL writes a completed flush covered): then no flush is requested.
    ///   With nothing to write (already written or durable, or no positions)
    ///   `before_flush` still runs.
    /// - If `before_flush` fails, the call waits for the writes it issued and returns
    ///   that error unchanged, without flushing; the WAL stays healthy. A WAL failure
    ///   takes precedence (and if it happens before the writes were issued,
    ///   `before_flush` is not called).
    /// - While `before_flush` runs, this call may hold its lanes' writes in flight:
    ///   other persisters of those lanes and `rotate` wait for it, so `before_flush`
    ///   must not wait for anything that needs this WAL.
    fn persist_covering(
        &self,
        positions: &[WalPos],
        before_flush: &mut dyn FnMut() -> Result<CallerWrites, MetaDbError>,
    ) -> Result<(), MetaDbError>;

    /// Per lane of the current generation with durable records: how many are durable
    /// now (records 0..count, each covered by a completed device flush or PMR persist).
    /// A later recovery that finds fewer proves damage ([`WalRecovery::damage`]).
    fn durable_extents(&self) -> Vec<WalExtent>;

    /// Ok while the WAL can be written; `ReadOnly` once a WAL write, flush or persist
    /// failed (it stays so until reopened).
    fn check_health(&self) -> Result<(), MetaDbError>;

    /// Makes every appended record durable.
    fn persist_all(&self) -> Result<(), MetaDbError>;

    /// Persists the current generation whole, closes it, and directs appends to `next`
    /// (greater than every generation so far).
    fn rotate(&self, next: u64) -> Result<(), MetaDbError>;

    /// Generations up to and including `generation` are in durable tables: their space
    /// may be reused.
    fn release_through(&self, generation: u64) -> Result<(), MetaDbError>;
}

/// The preconditions of `Wal::append`, shared by both implementations: a lane that exists
/// and a payload within one record (callers refuse larger batches first).
fn check_append(lanes: usize, lane: u16, payload: &[u8]) {
    assert!(usize::from(lane) < lanes, "lane {lane} of {lanes}");
    assert!(
        payload.len() <= PAYLOAD_BYTES_MAX,
        "payload of {} bytes",
        payload.len()
    );
}
