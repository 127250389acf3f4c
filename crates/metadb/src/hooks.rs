//! Hooks through which the layer above orders its own writes with MetaDB's (docs/DESIGN.md
//! §6.8).
//!
//! The engine stores file block mappings in MetaDB: a batch names data blocks the engine
//! wrote itself. Such a batch may become durable only with its data, so:
//! - before a memtable flush writes a table, [`WriteHooks::before_memtable_flush`] lets the
//!   engine wait until the data writes behind the memtable's batches have completed (the
//!   table's own device flush then covers them);
//! - at recovery, [`WriteHooks::filter_replay`] lets the engine drop batches whose data did
//!   not survive the crash.
//!   (`MetaDb::persist_covering` is the third piece: one device flush covers the WAL and
//!   the caller's data.)
//!
//! Invariants:
//! - `before_memtable_flush` runs once per flush of an immutable memtable, before its table
//!   is built, after every batch in it was inserted (the memtable is sealed and drained).
//!   An error fails the flush like a failed table write: the database turns read-only.
//! - `filter_replay` runs exactly once per open, on every recovered record; what it keeps
//!   of each WAL lane must be a prefix of that lane's records (checked by
//!   `check_replay_filter`; anything else is a bug of the hook and panics), so recovery
//!   still yields, per lane, a prefix of the lane's writes.
//! - Dropped records are not replayed, but their sequence numbers stay used: the recovered
//!   last sequence number covers them, so no number is ever handed out twice.

use crate::batch::WriteBatch;
use crate::error::MetaDbError;
use crate::types::Seq;

/// One batch recovered from the WAL, offered to [`WriteHooks::filter_replay`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayRecord {
    /// The WAL generation (memtable) the batch was logged in.
    pub generation: u64,
    /// The WAL lane it was logged in.
    pub lane: u16,
    /// Its number within (generation, lane).
    pub lane_seq: u64,
    /// `Some(i)` for pinned lane `i` (WAL lane `lanes + i` of this open's configuration,
    /// written by `MetaDb::write_pinned(i, ..)`); `None` for a thread lane.
    pub pinned: Option<usize>,
    /// Sequence number of the batch's first operation.
    pub first_seq: Seq,
    pub batch: WriteBatch,
}

/// Hooks MetaDB calls at points where the caller's own writes must be ordered with
/// MetaDB's. Called from MetaDB's threads (flushes run on a background thread) and from
/// `MetaDb::open`; an implementation must not call back into the same MetaDB.
pub trait WriteHooks: Send + Sync + std::fmt::Debug {
    /// Called before a memtable flush builds and writes the tables of an immutable
    /// memtable; every batch in it was inserted before the call. `lookup` reads the
    /// newest value of a key *in that memtable* (None: absent or deleted there), so the
    /// caller can find what its batches in it depend on. Returns once the caller's
    /// writes those batches depend on have completed. An error fails the flush
    /// and turns the database read-only. Runs under MetaDB's flush lock, on the flush
    /// thread or inline in the writer that flushes; writers stall behind it once
    /// `immutables_max` memtables wait, so it must not wait for MetaDB writes.
    fn before_memtable_flush(
        &self,
        lookup: &dyn Fn(&[u8]) -> Option<Vec<u8>>,
    ) -> Result<(), MetaDbError> {
        let _ = lookup;
        Ok(())
    }

    /// Called once at open with every record recovered from the WAL, in (generation, lane,
    /// lane_seq) order; returns one flag per record: replay it (true) or drop it. Per lane,
    /// the kept records must be a prefix of the lane's records in (generation, lane_seq)
    /// order (a dropped record followed by a kept one panics). An error fails the open.
    fn filter_replay(&self, records: &[ReplayRecord]) -> Result<Vec<bool>, MetaDbError> {
        Ok(vec![true; records.len()])
    }
}

/// The hooks of a MetaDB whose caller has none: nothing to wait for, everything replayed.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoHooks;

impl WriteHooks for NoHooks {}

/// Checks a `filter_replay` answer: one flag per record, and per lane the kept records
/// form a prefix. `records` are in (generation, lane, lane_seq) order. Panics otherwise:
/// a hook that keeps a record after dropping an earlier one of its lane would make
/// recovery keep a write whose predecessor in program order is lost.
pub(crate) fn check_replay_filter(records: &[ReplayRecord], keep: &[bool]) {
    assert_eq!(
        keep.len(),
        records.len(),
        "filter_replay returned {} flags for {} records",
        keep.len(),
        records.len()
    );
    debug_assert!(records
        .windows(2)
        .all(|w| (w[0].generation, w[0].lane) <= (w[1].generation, w[1].lane)));
    // Lanes with a dropped record so far; records of one lane come in (generation,
    // lane_seq) order because generations come in order and lanes within each.
    let mut dropped: Vec<Option<(u64, Seq)>> = Vec::new();
    for (record, &kept) in records.iter().zip(keep) {
        let lane = usize::from(record.lane);
        if dropped.len() <= lane {
            dropped.resize(lane + 1, None);
        }
        match (kept, dropped[lane]) {
            (false, None) => dropped[lane] = Some((record.generation, record.first_seq)),
            (true, Some((generation, first_seq))) => panic!(
                "filter_replay kept the record of lane {} generation {} (first seq {}) after \
                 dropping the record of generation {generation} (first seq {first_seq}): the \
                 kept records of a lane must be a prefix",
                record.lane, record.generation, record.first_seq
            ),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(generation: u64, lane: u16, first_seq: Seq) -> ReplayRecord {
        let mut batch = WriteBatch::new();
        batch.put(b"k".to_vec(), b"v".to_vec());
        ReplayRecord {
            generation,
            lane,
            lane_seq: first_seq,
            pinned: None,
            first_seq,
            batch,
        }
    }

    /// Lane 0: (g3, 1), (g3, 2), (g4, 5); lane 1: (g3, 3), (g4, 4).
    fn records() -> Vec<ReplayRecord> {
        vec![
            record(3, 0, 1),
            record(3, 0, 2),
            record(3, 1, 3),
            record(4, 0, 5),
            record(4, 1, 4),
        ]
    }

    #[test]
    fn prefixes_per_lane_pass() {
        let cases: [[bool; 5]; 5] = [
            [true; 5],
            [false; 5],
            [true, true, false, false, false],
            [true, false, true, false, true],
            [false, false, true, false, false],
        ];
        for keep in cases {
            check_replay_filter(&records(), &keep);
        }
        check_replay_filter(&[], &[]);
    }

    #[test]
    #[should_panic(expected = "must be a prefix")]
    fn a_kept_record_after_a_dropped_one_of_its_lane_panics() {
        check_replay_filter(&records(), &[true, false, true, true, true]);
    }

    #[test]
    #[should_panic(expected = "must be a prefix")]
    fn the_prefix_spans_generations() {
        check_replay_filter(&records(), &[true, true, false, false, true]);
    }

    #[test]
    #[should_panic(expected = "flags for")]
    fn one_flag_per_record() {
        check_replay_filter(&records(), &[true]);
    }

    #[test]
    fn no_hooks_keeps_everything() {
        let hooks = NoHooks;
        hooks.before_memtable_flush(&|_| None).unwrap();
        assert_eq!(hooks.filter_replay(&records()).unwrap(), vec![true; 5]);
    }
}
