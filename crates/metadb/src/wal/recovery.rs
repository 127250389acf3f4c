//! Turning the complete records a scan found into a [`WalRecovery`]: per (generation,
//! lane), the longest run of lane_seq 0, 1, 2, … (wal/mod.rs invariants).
//!
//! Invariants:
//! - Records of generations `<= released_through` are never returned.
//! - A record found twice (a PMR entry and its migrated copy on the device, when a crash
//!   fell between the migration's flush and the slot invalidation) is returned once; two
//!   different payloads for one (generation, lane, lane_seq) are corruption.
//! - `dropped_after_hole` counts the distinct complete records beyond each run.

use super::{LaneHole, RecoveredRecord, WalRecovery};
use crate::error::MetaDbError;
use std::collections::btree_map::Entry;
use std::collections::BTreeMap;

/// Collects found records; [`Collector::finish`] assembles the recovery.
#[derive(Debug, Default)]
pub(super) struct Collector {
    released_through: u64,
    generation_max: u64,
    lanes: BTreeMap<(u64, u16), BTreeMap<u64, Vec<u8>>>,
    /// Per (generation, lane): the highest `durable` an intact record carried.
    marks: BTreeMap<(u64, u16), u64>,
}

impl Collector {
    pub fn new(released_through: u64) -> Collector {
        Collector {
            released_through,
            ..Collector::default()
        }
    }

    /// Notes that `generation` exists in the log (even if released or empty).
    pub fn saw_generation(&mut self, generation: u64) {
        self.generation_max = self.generation_max.max(generation);
    }

    pub fn add(&mut self, record: RecoveredRecord) -> Result<(), MetaDbError> {
        self.saw_generation(record.generation);
        if record.generation <= self.released_through {
            return Ok(());
        }
        let lane = self
            .lanes
            .entry((record.generation, record.lane))
            .or_default();
        match lane.entry(record.lane_seq) {
            Entry::Vacant(v) => {
                v.insert(record.payload);
            }
            Entry::Occupied(o) => {
                if *o.get() != record.payload {
                    return Err(MetaDbError::corruption(
                        "WAL record",
                        format!(
                            "generation {} lane {} lane_seq {} found twice with different payloads",
                            record.generation, record.lane, record.lane_seq
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Notes that an intact record of (generation, lane) says records `0..durable` of its
    /// lane were durable when it was appended.
    pub fn note_durable(&mut self, generation: u64, lane: u16, durable: u64) {
        if generation > self.released_through && durable > 0 {
            let mark = self.marks.entry((generation, lane)).or_default();
            *mark = (*mark).max(durable);
        }
    }

    pub fn generation_max(&self) -> u64 {
        self.generation_max
    }

    pub fn finish(self) -> WalRecovery {
        let mut recovery = WalRecovery {
            generation_max: self.generation_max,
            marks: self
                .marks
                .iter()
                .map(|(&(generation, lane), &count)| super::WalExtent {
                    generation,
                    lane,
                    count,
                })
                .collect(),
            ..WalRecovery::default()
        };
        for ((generation, lane), records) in self.lanes {
            let found = records.len() as u64;
            let mut run = 0u64;
            let mut beyond = Vec::new();
            for (lane_seq, payload) in records {
                if lane_seq != run || !beyond.is_empty() {
                    beyond.push((lane_seq, payload));
                    continue;
                }
                recovery.records.push(RecoveredRecord {
                    generation,
                    lane,
                    lane_seq,
                    payload,
                });
                run += 1;
            }
            recovery.dropped_after_hole += found - run;
            if !beyond.is_empty() {
                recovery.holes.push(LaneHole {
                    generation,
                    lane,
                    run,
                    beyond,
                });
            }
        }
        debug_assert!(recovery.records.windows(2).all(|w| (
            w[0].generation,
            w[0].lane,
            w[0].lane_seq
        ) < (
            w[1].generation,
            w[1].lane,
            w[1].lane_seq
        )));
        recovery
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(generation: u64, lane: u16, lane_seq: u64, payload: &[u8]) -> RecoveredRecord {
        RecoveredRecord {
            generation,
            lane,
            lane_seq,
            payload: payload.to_vec(),
        }
    }

    #[test]
    fn runs_holes_duplicates_and_released_generations() {
        let mut c = Collector::new(2);
        for r in [
            rec(3, 0, 1, b"b"),
            rec(3, 0, 0, b"a"),
            rec(3, 0, 3, b"d"), // after the hole at 2
            rec(3, 0, 4, b"e"),
            rec(3, 1, 1, b"x"), // lane 1 has no record 0
            rec(2, 0, 0, b"released"),
            rec(4, 0, 0, b"p"),
            rec(4, 0, 0, b"p"), // migrated copy
        ] {
            c.add(r).unwrap();
        }
        assert!(c.add(rec(4, 0, 0, b"q")).is_err());
        let got = c.finish();
        assert_eq!(got.generation_max, 4);
        assert_eq!(got.dropped_after_hole, 3);
        let ids: Vec<_> = got
            .records
            .iter()
            .map(|r| (r.generation, r.lane, r.lane_seq))
            .collect();
        assert_eq!(ids, [(3, 0, 0), (3, 0, 1), (4, 0, 0)]);
    }

    #[test]
    fn a_gap_is_damage_only_where_durability_is_proven() {
        use crate::wal::WalExtent;
        let recovery = |records: &[RecoveredRecord]| {
            let mut c = Collector::new(2);
            for r in records {
                c.add(r.clone()).unwrap();
            }
            c.finish()
        };
        // Generation 3, lane 0: records 0, 1, then a gap, then 3 and 4.
        let gap = [
            rec(3, 0, 0, b"a"),
            rec(3, 0, 1, b"b"),
            rec(3, 0, 3, b"d"),
            rec(3, 0, 4, b"e"),
        ];
        let r = recovery(&gap);
        assert_eq!(r.holes.len(), 1);
        assert_eq!(r.holes[0].run, 2);
        assert_eq!(r.holes[0].beyond.len(), 2);
        // Newest generation, nothing known durable: a torn tail.
        assert_eq!(r.damage(&[], 2), None);
        let durable = |count| WalExtent {
            generation: 3,
            lane: 0,
            count,
        };
        assert_eq!(r.damage(&[durable(2)], 2), None);
        let d = r.damage(&[durable(3)], 2).expect("record 2 was durable");
        assert!(d.location.contains("lane_seq 2"), "{d}");
        // Missing at the end of the lane, with nothing after it: damage all the same.
        let tail = recovery(&gap[..2]);
        assert!(tail.damage(&[durable(3)], 2).is_some());
        // Extents of released generations are ignored.
        assert_eq!(tail.damage(&[durable(3)], 3), None);
        // A later generation in the log proves the older one was made durable whole.
        let mut later = gap.to_vec();
        later.push(rec(4, 1, 0, b"p"));
        let d = recovery(&later).damage(&[], 2).expect("generation 4 began");
        assert!(d.location.contains("generation 3 lane 0 lane_seq 2"), "{d}");
    }

    #[test]
    fn a_later_record_that_says_a_missing_one_was_durable_proves_damage() {
        let mut c = Collector::new(2);
        for r in [rec(3, 0, 0, b"a"), rec(3, 0, 1, b"b"), rec(3, 0, 3, b"d")] {
            c.add(r).unwrap();
        }
        c.note_durable(3, 0, 1);
        let weak = {
            let mut w = Collector::new(2);
            for r in [rec(3, 0, 0, b"a"), rec(3, 0, 1, b"b"), rec(3, 0, 3, b"d")] {
                w.add(r).unwrap();
            }
            w.note_durable(3, 0, 2);
            w.finish()
        };
        assert_eq!(weak.damage(&[], 2), None, "records 0..2 are there");
        c.note_durable(3, 0, 3);
        c.note_durable(2, 0, 9); // released: ignored
        let r = c.finish();
        assert_eq!(r.marks.len(), 1);
        let d = r
            .damage(&[], 2)
            .expect("record 3 said record 2 was durable");
        assert!(d.location.contains("lane_seq 2"), "{d}");
    }
}
