//! Opening the PMR WAL: recovery (reads only) and start (augefs.txt §V-B "Log Recovery").
//!
//! Recovery reads the device backing region's chunks, then every valid slot's range of
//! the PMR (an active slot's range runs to the next slot of its half, or the half's end)
//! and hands complete entries to the collector.
//!
//! Start makes the recovered state the WAL's:
//! - a new incarnation header on the device (wal/chunk.rs);
//! - a slot without unreleased complete entries is cleared; an active one is closed at
//!   the end of the last non-zero line of its range, so everything its crashed writers
//!   may have left stays inside a closed range and is never reused unzeroed;
//! - kept ranges are persisted (what was visible may not have been durable);
//! - appends start in the half with the most room after its kept segments, whose free
//!   part is zeroed first, in a new segment whose slot is persisted before any entry.

use super::scan::{read_slots, scan_limit, scan_range, zero_range, PmrGeometry};
use super::tail::Tail;
use super::{CrashHook, Lane, LaneState, PmrWal, Segment, Segments};
use crate::error::MetaDbError;
use crate::wal::chunk::{self, ChunkStore, RegionScan};
use crate::wal::record::{entry_bytes, Slot, PAYLOAD_BYTES_MAX};
use crate::wal::recovery::Collector;
use crate::wal::{RecoveredRecord, WalRecovery};
use device::Device;
use format::Region;
use pmr::Pmr;
use std::collections::VecDeque;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

/// A slot found by recovery, and what to do with it at start.
#[derive(Debug, Clone, Copy)]
struct Adopted {
    slot: usize,
    half: usize,
    start: u64,
    /// Closed end, or for an active slot the end of what its writers left.
    end: u64,
    was_active: bool,
    /// Highest generation of its complete entries, if any is unreleased.
    live_generation_max: Option<u64>,
}

/// Recovery done, not yet writable: [`PmrWalRecovered::start`] picks the generation.
pub struct PmrWalRecovered {
    pmr: Arc<Pmr>,
    device: Arc<Device>,
    geometry: PmrGeometry,
    region_scan: RegionScan,
    adopted: Vec<Adopted>,
    lanes: usize,
    released_through: u64,
    generation_max: u64,
    hook: Option<CrashHook>,
}

impl std::fmt::Debug for PmrWalRecovered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PmrWalRecovered")
            .field("geometry", &self.geometry)
            .field("adopted", &self.adopted)
            .field("generation_max", &self.generation_max)
            .finish_non_exhaustive()
    }
}

impl PmrWal {
    /// Reads the PMR's slots and entries and the device backing region (reads only) and
    /// returns the records of generations `> released_through`. `released_through` must
    /// be at least every generation ever passed to `release_through`.
    pub fn recover(
        pmr: Arc<Pmr>,
        device: Arc<Device>,
        backing: Region,
        lanes: usize,
        released_through: u64,
    ) -> Result<(PmrWalRecovered, WalRecovery), MetaDbError> {
        assert!(
            (1..=usize::from(u16::MAX) + 1).contains(&lanes),
            "{lanes} lanes"
        );
        let geometry = PmrGeometry::compute(pmr.len());
        let largest = entry_bytes(PAYLOAD_BYTES_MAX) as u64;
        assert!(
            geometry.halves[0].1 - geometry.halves[0].0 >= largest,
            "a PMR half must hold the largest entry"
        );
        let mut collector = Collector::new(released_through);
        let region_scan = chunk::scan(&device, backing, released_through, &mut collector)?;
        let found = read_slots(&pmr, &geometry)?;
        let mut adopted = Vec::with_capacity(found.len());
        for (index, slot) in found.iter().enumerate() {
            let limit = scan_limit(&found, index, &geometry);
            let scan = scan_range(&pmr, slot.start, limit);
            let mut live_generation_max = None;
            for (id, payload) in scan.entries {
                if id.generation > released_through {
                    live_generation_max = live_generation_max.max(Some(id.generation));
                }
                collector.note_durable(id.generation, id.lane, id.durable);
                collector.add(RecoveredRecord {
                    generation: id.generation,
                    lane: id.lane,
                    lane_seq: id.lane_seq,
                    payload,
                })?;
            }
            adopted.push(Adopted {
                slot: slot.slot,
                half: slot.half,
                start: slot.start,
                end: slot.end.unwrap_or(scan.written_end),
                was_active: slot.end.is_none(),
                live_generation_max,
            });
        }
        let generation_max = collector.generation_max();
        let recovered = PmrWalRecovered {
            pmr,
            device,
            geometry,
            region_scan,
            adopted,
            lanes,
            released_through,
            generation_max,
            hook: None,
        };
        Ok((recovered, collector.finish()))
    }

    /// `recover` then `start(next_generation)`.
    pub fn open(
        pmr: Arc<Pmr>,
        device: Arc<Device>,
        backing: Region,
        lanes: usize,
        released_through: u64,
        next_generation: u64,
    ) -> Result<(PmrWal, WalRecovery), MetaDbError> {
        let (recovered, recovery) = PmrWal::recover(pmr, device, backing, lanes, released_through)?;
        Ok((recovered.start(next_generation)?, recovery))
    }
}

impl PmrWalRecovered {
    /// The highest generation the log holds (the next one must be greater).
    pub fn generation_max(&self) -> u64 {
        self.generation_max
    }

    /// Installs the crash-point hook before `start` (it carries over to the WAL).
    #[doc(hidden)]
    pub fn set_crash_hook(&mut self, hook: Option<CrashHook>) {
        self.hook = hook;
    }

    /// Makes the recovered state the WAL's: writes a new incarnation header on the
    /// device, closes active slots at what their writers left (clearing slots without
    /// live entries), persists what is kept, zeroes the free part of a half and opens a
    /// segment there for `next_generation`.
    pub fn start(self, next_generation: u64) -> Result<PmrWal, MetaDbError> {
        assert!(
            next_generation > self.generation_max && next_generation > self.released_through,
            "generation {next_generation} not beyond the log's {} / released {}",
            self.generation_max,
            self.released_through
        );
        let store = ChunkStore::start(self.device, self.region_scan)?;
        let geometry = self.geometry;
        let lanes = (0..self.lanes)
            .map(|_| Lane {
                state: Mutex::new(LaneState {
                    generation: next_generation,
                    next_seq: 0,
                    pending: VecDeque::new(),
                    scratch: Vec::new(),
                }),
            })
            .collect();
        let placeholder = Segment {
            slot: 0,
            half: 0,
            start: geometry.halves[0].0,
            end: None,
            generation_max: 0,
        };
        let wal = PmrWal {
            pmr: self.pmr,
            geometry,
            store,
            lanes,
            tail: AtomicU64::new(0),
            serials: Default::default(),
            generation: AtomicU64::new(next_generation),
            released_through: AtomicU64::new(self.released_through),
            settled_visit: AtomicU64::new(0),
            segments: Mutex::new(Segments {
                current: placeholder,
                closed: Vec::new(),
                free_slots: Vec::new(),
                visit: 1,
                half_visit: [0, 0],
            }),
            hook: Mutex::new(self.hook),
        };
        wal.adopt(&self.adopted, next_generation)?;
        Ok(wal)
    }
}

impl PmrWal {
    /// The second half of `start`: see [`PmrWalRecovered::start`].
    fn adopt(&self, adopted: &[Adopted], generation: u64) -> Result<(), MetaDbError> {
        let mut segments = self.segments();
        let mut used = vec![false; self.geometry.slot_count];
        for a in adopted {
            let Some(generation_max) = a.live_generation_max else {
                self.put_slot(a.slot, 0)?;
                continue;
            };
            if a.was_active {
                self.put_slot(
                    a.slot,
                    Slot {
                        start: a.start,
                        end: Some(a.end),
                    }
                    .encode(),
                )?;
            }
            // What was visible may not have been durable (a process restart over an
            // emulated PMR): make it so before anything depends on it.
            self.persist_range(a.start, a.end - a.start)?;
            used[a.slot] = true;
            segments.closed.push(Segment {
                slot: a.slot,
                half: a.half,
                start: a.start,
                end: Some(a.end),
                generation_max,
            });
        }
        self.crash_point("start:adopted");
        // Start in the half with the most room after its kept segments.
        let free_start = |half: usize| {
            segments
                .closed
                .iter()
                .filter(|s| s.half == half)
                .filter_map(|s| s.end)
                .max()
                .unwrap_or(self.geometry.halves[half].0)
        };
        let room = |half: usize| self.geometry.halves[half].1 - free_start(half);
        let half = if room(1) > room(0) { 1 } else { 0 };
        let start = free_start(half);
        zero_range(&self.pmr, start, self.geometry.halves[half].1)
            .map_err(|e| self.store.health().fail(e))?;
        self.crash_point("start:zeroed");
        segments.free_slots = (0..self.geometry.slot_count)
            .rev()
            .filter(|&s| !used[s])
            .collect();
        if segments.free_slots.is_empty() {
            return Err(MetaDbError::WalFull);
        }
        self.open_segment(&mut segments, half, start, generation)?;
        self.crash_point("start:opened");
        segments.half_visit[half] = segments.visit;
        self.publish(
            Tail {
                serial: 0,
                half,
                sealed: false,
                offset: start,
            },
            generation,
            segments.visit,
        );
        Ok(())
    }
}
