//! The WAL on a PMR (augefs.txt §V-B "Fine-Grained Parallel WAL"; docs/FORMAT.md §5 and
//! §7).
//!
//! Appenders reserve entry space with a CAS on a DRAM tail ([`tail`]) and write their
//! 64-byte aligned entries (TxB, content, TxE) in parallel; `persist` persists only the
//! named lanes' unpersisted entries, line by line. The data area is split in two halves
//! used in turns; each WAL "file" segment (one generation within one visit of a half) has
//! an 8-byte slot. When the active half is full the tail moves to the other half; if that
//! half still holds unreleased entries they are first migrated to the device's WAL region
//! (as chunks, wal/chunk.rs), then its slots are cleared and it is zeroed.
//!
//! `persist_covering` persists the named lanes' entries, runs its caller's `before_flush`,
//! then waits for a device flush requested after it, through the backing store's flush
//! combiner (wal/flush.rs), so concurrent callers and migrations share flushes. The flush
//! is for the caller's own device writes: the entries are durable on the PMR already, so
//! a caller whose writes are all durable (an fsync of a directory) gets no flush.
//!
//! Invariants:
//! - A segment's slot is persisted (valid, active) before any entry is written in it, so
//!   every entry that may reach the medium lies in a range recovery scans.
//! - Space is zeroed (and persisted) before it is reused, and entries carry their
//!   generation and a CRC, so a stale or torn entry is never taken for a live one.
//! - A segment holds one generation; a generation may span segments (across halves).
//! - `rotate` seals the tail, waits out every append in progress, persists all pending
//!   entries, and only then opens the next generation: a hole never spans generations.
//! - A migrated half's entries are durable on the device (written and flushed) before its
//!   slots are cleared; pending entries of a migrated visit are then skipped by persist.
//! - Appenders never wait for the switch lock while holding their lane lock; the switch
//!   and rotation lock each lane in turn (no two at once) to wait out appends in progress.

mod migrate;
mod open;
pub(super) mod scan;
mod tail;

pub use self::open::PmrWalRecovered;

use self::scan::{zero_range, PmrGeometry};
use self::tail::Tail;
use super::chunk::ChunkStore;
use super::record::{encode_entry, entry_bytes, RecordId, Slot};
use super::Wal;
use crate::error::MetaDbError;
use crate::types::{CallerWrites, WalPos};
use pmr::{IoCause, Pmr};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// A test hook called at named points of the switch, rotation and start (while the WAL
/// holds its internal locks: it must not call the WAL). Crash tests take crash images
/// there.
pub type CrashHook = Arc<dyn Fn(&str) + Send + Sync>;

/// Serials remembered for appenders between reading the tail and their CAS; a serial's
/// entry is rewritten only when the tail is 3 serials past it, where every CAS on it fails.
const SERIALS_REMEMBERED: usize = 4;

/// An entry written but not yet persisted.
#[derive(Debug, Clone, Copy)]
struct Pending {
    generation: u64,
    lane_seq: u64,
    offset: u64,
    len: u64,
    /// Visit of the half the entry lies in (see `Segments::visit`).
    visit: u64,
}

#[derive(Debug)]
struct LaneState {
    generation: u64,
    next_seq: u64,
    /// In (generation, lane_seq) order.
    pending: VecDeque<Pending>,
    /// Entry encoding buffer, reused.
    scratch: Vec<u8>,
}

#[derive(Debug)]
#[repr(align(128))]
struct Lane {
    state: Mutex<LaneState>,
}

impl Lane {
    fn lock(&self) -> MutexGuard<'_, LaneState> {
        self.state
            .lock()
            .expect("WAL lane lock poisoned by a panic")
    }
}

/// One WAL "file": a slot and the range of one generation in one visit of a half.
#[derive(Debug, Clone, Copy)]
struct Segment {
    slot: usize,
    half: usize,
    start: u64,
    /// `None` while the tail is in it.
    end: Option<u64>,
    /// The highest generation of its entries: releasable once it is released.
    generation_max: u64,
}

/// Segment bookkeeping; guarded by the switch lock.
#[derive(Debug)]
struct Segments {
    current: Segment,
    closed: Vec<Segment>,
    free_slots: Vec<usize>,
    /// Visits of halves are numbered 1, 2, … in order; `half_visit[h]` is the last of h.
    visit: u64,
    half_visit: [u64; 2],
}

/// Per remembered serial: the generation and visit of its segment.
#[derive(Debug, Default)]
struct SerialInfo {
    generation: AtomicU64,
    visit: AtomicU64,
}

/// How many entries of (generation, the lane of `state`) are persisted: those before the
/// lane's first pending one of the generation (pending entries of a migrated visit are
/// durable too, but counting them out only weakens the evidence).
fn lane_durable(state: &LaneState, generation: u64) -> u64 {
    if state.generation != generation {
        return 0;
    }
    state
        .pending
        .iter()
        .find(|p| p.generation == generation)
        .map_or(state.next_seq, |p| p.lane_seq)
}

/// The PMR-mode WAL. See the module documentation.
pub struct PmrWal {
    pmr: Arc<Pmr>,
    geometry: PmrGeometry,
    store: ChunkStore,
    lanes: Box<[Lane]>,
    tail: AtomicU64,
    serials: [SerialInfo; SERIALS_REMEMBERED],
    generation: AtomicU64,
    released_through: AtomicU64,
    /// Pending entries of visits up to this one are durable elsewhere (migrated) or
    /// released: persist skips them.
    settled_visit: AtomicU64,
    segments: Mutex<Segments>,
    hook: Mutex<Option<CrashHook>>,
}

impl std::fmt::Debug for PmrWal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PmrWal")
            .field("geometry", &self.geometry)
            .field("tail", &Tail::unpack(self.tail.load(Ordering::SeqCst)))
            .field("generation", &self.generation)
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

impl PmrWal {
    /// Installs (or removes) the crash-point hook.
    #[doc(hidden)]
    pub fn set_crash_hook(&self, hook: Option<CrashHook>) {
        *self.hook.lock().expect("WAL hook lock poisoned by a panic") = hook;
    }

    fn crash_point(&self, name: &str) {
        let hook = self
            .hook
            .lock()
            .expect("WAL hook lock poisoned by a panic")
            .clone();
        if let Some(hook) = hook {
            hook(name);
        }
    }

    fn segments(&self) -> MutexGuard<'_, Segments> {
        self.segments
            .lock()
            .expect("WAL switch lock poisoned by a panic")
    }

    fn health_check(&self) -> Result<(), MetaDbError> {
        self.store.health().check()
    }

    /// Breaks the WAL on a PMR persist failure.
    fn persist_range(&self, offset: u64, len: u64) -> Result<(), MetaDbError> {
        self.pmr
            .persist(offset, len, IoCause::Wal)
            .map_err(|e| self.store.health().fail(e.into()))
    }

    /// Stores a slot word and persists it (one line; atomic across a crash).
    fn put_slot(&self, slot: usize, word: u64) -> Result<(), MetaDbError> {
        let offset = self.geometry.slot_offset(slot);
        self.pmr.store_u64(offset, word);
        self.persist_range(offset, 8)
    }

    fn serial_info(&self, serial: u64) -> (u64, u64) {
        let info = &self.serials[serial as usize % SERIALS_REMEMBERED];
        (
            info.generation.load(Ordering::SeqCst),
            info.visit.load(Ordering::SeqCst),
        )
    }

    /// Makes `tail` current, for a segment of `generation` in `visit`.
    fn publish(&self, tail: Tail, generation: u64, visit: u64) {
        assert!(!tail.sealed);
        let info = &self.serials[tail.serial as usize % SERIALS_REMEMBERED];
        info.generation.store(generation, Ordering::SeqCst);
        info.visit.store(visit, Ordering::SeqCst);
        self.tail.store(tail.pack(), Ordering::SeqCst);
    }

    /// Stops reservations; returns the tail as sealed (its offset is the segment's end).
    fn seal(&self) -> Tail {
        loop {
            let word = self.tail.load(Ordering::SeqCst);
            let tail = Tail::unpack(word);
            assert!(
                !tail.sealed,
                "sealing a sealed tail without the switch lock"
            );
            let sealed = Tail {
                sealed: true,
                ..tail
            };
            if self
                .tail
                .compare_exchange(word, sealed.pack(), Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                return sealed;
            }
        }
    }

    fn unseal(&self, sealed: Tail) {
        self.tail.store(
            Tail {
                sealed: false,
                ..sealed
            }
            .pack(),
            Ordering::SeqCst,
        );
    }

    /// Waits until no switch or rotation holds the tail sealed.
    fn wait_unsealed(&self) {
        drop(self.segments());
    }

    /// Persists the lane's pending entries up to `limit` (all if `None`), coalescing
    /// adjacent ones into one persist.
    fn persist_pending(
        &self,
        state: &mut LaneState,
        limit: Option<(u64, u64)>,
    ) -> Result<(), MetaDbError> {
        let settled = self.settled_visit.load(Ordering::SeqCst);
        let released = self.released_through.load(Ordering::SeqCst);
        let mut run: Option<(u64, u64)> = None;
        while let Some(p) = state.pending.front().copied() {
            if limit.is_some_and(|l| (p.generation, p.lane_seq) > l) {
                break;
            }
            state.pending.pop_front();
            if p.visit <= settled || p.generation <= released {
                continue;
            }
            run = match run {
                Some((start, end)) if end == p.offset => Some((start, p.offset + p.len)),
                Some((start, end)) => {
                    self.persist_range(start, end - start)?;
                    Some((p.offset, p.offset + p.len))
                }
                None => Some((p.offset, p.offset + p.len)),
            };
        }
        match run {
            Some((start, end)) => self.persist_range(start, end - start),
            None => Ok(()),
        }
    }

    /// Locks and unlocks every lane: with the tail sealed, every append that reserved
    /// space has then written its entry. With `persist`, also persists every lane.
    fn lane_pass(&self, persist: bool) -> Result<(), MetaDbError> {
        for lane in self.lanes.iter() {
            let mut state = lane.lock();
            if persist {
                self.persist_pending(&mut state, None)?;
            }
        }
        Ok(())
    }

    /// Moves the tail to the other half (the tail's serial was `serial` when the caller
    /// found its entry does not fit).
    fn switch_half(&self, serial: u64) -> Result<(), MetaDbError> {
        let mut segments = self.segments();
        let tail = Tail::unpack(self.tail.load(Ordering::SeqCst));
        assert!(
            !tail.sealed,
            "the tail is sealed only under the switch lock"
        );
        if tail.serial != serial {
            return Ok(()); // another thread switched or rotated meanwhile
        }
        let sealed = self.seal();
        self.crash_point("switch:sealed");
        let result = self.switch_locked(&mut segments, sealed);
        if result.is_err() {
            self.unseal(sealed);
        }
        result
    }

    fn switch_locked(&self, segments: &mut Segments, sealed: Tail) -> Result<(), MetaDbError> {
        let target = 1 - sealed.half;
        let victims: Vec<Segment> = segments
            .closed
            .iter()
            .filter(|s| s.half == target)
            .copied()
            .collect();
        let current_empty = sealed.offset == segments.current.start;
        if segments.free_slots.len() + victims.len() + usize::from(current_empty) == 0 {
            return Err(MetaDbError::WalFull);
        }
        self.lane_pass(false)?;
        let released = self.released_through.load(Ordering::SeqCst);
        let live: Vec<Segment> = victims
            .iter()
            .filter(|s| s.generation_max > released)
            .copied()
            .collect();
        if !live.is_empty() {
            self.migrate(&live)?;
        }
        self.crash_point("switch:migrated");
        self.settled_visit
            .fetch_max(segments.half_visit[target], Ordering::SeqCst);
        for victim in &victims {
            self.put_slot(victim.slot, 0)?;
            segments.free_slots.push(victim.slot);
        }
        segments.closed.retain(|s| s.half != target);
        self.crash_point("switch:slots_cleared");
        let (start, end) = self.geometry.halves[target];
        zero_range(&self.pmr, start, end).map_err(|e| self.store.health().fail(e))?;
        self.crash_point("switch:zeroed");
        let generation = self.generation.load(Ordering::SeqCst);
        self.close_current(segments, sealed.offset)?;
        self.crash_point("switch:closed");
        self.open_segment(segments, target, start, generation)?;
        self.crash_point("switch:opened");
        segments.visit += 1;
        segments.half_visit[target] = segments.visit;
        let tail = Tail {
            serial: sealed.next_serial(),
            half: target,
            sealed: false,
            offset: start,
        };
        self.publish(tail, generation, segments.visit);
        Ok(())
    }

    /// Closes the current segment at `end` (clearing its slot if it is empty). The caller
    /// opens a new current segment right after.
    fn close_current(&self, segments: &mut Segments, end: u64) -> Result<(), MetaDbError> {
        let mut current = segments.current;
        assert!(current.end.is_none() && end >= current.start);
        if end == current.start {
            self.put_slot(current.slot, 0)?;
            segments.free_slots.push(current.slot);
            return Ok(());
        }
        current.end = Some(end);
        self.put_slot(
            current.slot,
            Slot {
                start: current.start,
                end: Some(end),
            }
            .encode(),
        )?;
        segments.closed.push(current);
        Ok(())
    }

    /// Opens the segment appends go to next: its slot is persisted before any entry.
    fn open_segment(
        &self,
        segments: &mut Segments,
        half: usize,
        start: u64,
        generation: u64,
    ) -> Result<(), MetaDbError> {
        let slot = segments
            .free_slots
            .pop()
            .expect("a free slot was checked for");
        self.put_slot(slot, Slot { start, end: None }.encode())?;
        segments.current = Segment {
            slot,
            half,
            start,
            end: None,
            generation_max: generation,
        };
        Ok(())
    }

    fn rotate_locked(
        &self,
        segments: &mut Segments,
        sealed: Tail,
        next: u64,
    ) -> Result<(), MetaDbError> {
        let current_empty = sealed.offset == segments.current.start;
        if segments.free_slots.is_empty() && !current_empty {
            return Err(MetaDbError::WalFull);
        }
        self.lane_pass(true)?;
        self.crash_point("rotate:persisted");
        self.close_current(segments, sealed.offset)?;
        self.crash_point("rotate:closed");
        self.open_segment(segments, sealed.half, sealed.offset, next)?;
        self.crash_point("rotate:opened");
        self.generation.store(next, Ordering::SeqCst);
        let tail = Tail {
            serial: sealed.next_serial(),
            sealed: false,
            ..sealed
        };
        self.publish(tail, next, segments.visit);
        Ok(())
    }

    /// Free slots (for tests and inspection).
    pub fn free_slots(&self) -> usize {
        self.segments().free_slots.len()
    }

    /// Units of the device backing region not holding unreleased chunks.
    pub fn free_backing_units(&self) -> usize {
        self.store.free_units()
    }
}

impl Wal for PmrWal {
    fn lanes(&self) -> usize {
        self.lanes.len()
    }

    fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    fn append(&self, lane: u16, payload: &[u8]) -> Result<WalPos, MetaDbError> {
        super::check_append(self.lanes.len(), lane, payload);
        let len = entry_bytes(payload.len()) as u64;
        let lane_ref = &self.lanes[usize::from(lane)];
        loop {
            self.health_check()?;
            let mut state = lane_ref.lock();
            let (tail, generation, visit) = loop {
                let word = self.tail.load(Ordering::SeqCst);
                let tail = Tail::unpack(word);
                if tail.sealed || tail.offset + len > self.geometry.halves[tail.half].1 {
                    break (tail, 0, 0);
                }
                let (generation, visit) = self.serial_info(tail.serial);
                let reserved = Tail {
                    offset: tail.offset + len,
                    ..tail
                }
                .pack();
                if self
                    .tail
                    .compare_exchange(word, reserved, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok()
                {
                    break (tail, generation, visit);
                }
            };
            if generation == 0 {
                drop(state);
                if tail.sealed {
                    self.wait_unsealed();
                } else {
                    self.switch_half(tail.serial)?;
                }
                continue;
            }
            assert!(generation >= state.generation, "lane generation went back");
            if generation > state.generation {
                state.generation = generation;
                state.next_seq = 0;
            }
            let lane_seq = state.next_seq;
            let durable = lane_durable(&state, generation);
            state.next_seq += 1;
            let mut scratch = std::mem::take(&mut state.scratch);
            encode_entry(
                &mut scratch,
                RecordId {
                    generation,
                    lane,
                    lane_seq,
                    durable,
                },
                payload,
            );
            debug_assert_eq!(scratch.len() as u64, len);
            // TxB and content, then TxE (augefs.txt §V-B).
            let body = scratch.len() - 8;
            self.pmr.write(tail.offset, &scratch[..body]);
            self.pmr.write(tail.offset + body as u64, &scratch[body..]);
            state.scratch = scratch;
            state.pending.push_back(Pending {
                generation,
                lane_seq,
                offset: tail.offset,
                len,
                visit,
            });
            return Ok(WalPos {
                lane,
                generation,
                lane_seq,
            });
        }
    }

    fn persist(&self, positions: &[WalPos]) -> Result<(), MetaDbError> {
        self.health_check()?;
        let current = self.generation.load(Ordering::SeqCst);
        for pos in positions {
            assert!(
                usize::from(pos.lane) < self.lanes.len(),
                "lane {} of {}",
                pos.lane,
                self.lanes.len()
            );
            assert!(
                pos.generation <= current,
                "position {pos:?} beyond generation {current}"
            );
            let mut state = self.lanes[usize::from(pos.lane)].lock();
            self.persist_pending(&mut state, Some((pos.generation, pos.lane_seq)))?;
        }
        Ok(())
    }

    fn persist_covering(
        &self,
        positions: &[WalPos],
        before_flush: &mut dyn FnMut() -> Result<CallerWrites, MetaDbError>,
    ) -> Result<(), MetaDbError> {
        // The records are durable once their lines are persisted; the device flush is
        // for the caller's writes, and goes through the backing store's combiner so
        // concurrent callers (and migrations) share flushes.
        self.persist(positions)?;
        match before_flush()? {
            CallerWrites::Unflushed => {
                let need = self.store.flush_need();
                self.store.flush_covering(need)
            }
            CallerWrites::Durable => Ok(()),
        }
    }

    fn durable_extents(&self) -> Vec<super::WalExtent> {
        let generation = self.generation.load(Ordering::SeqCst);
        (0..self.lanes.len())
            .filter_map(|lane| {
                let state = self.lanes[lane].lock();
                if state.generation != generation {
                    return None;
                }
                let count = lane_durable(&state, generation);
                (count > 0).then_some(super::WalExtent {
                    generation,
                    lane: lane as u16,
                    count,
                })
            })
            .collect()
    }

    fn check_health(&self) -> Result<(), MetaDbError> {
        self.health_check()
    }

    fn persist_all(&self) -> Result<(), MetaDbError> {
        self.health_check()?;
        for lane in self.lanes.iter() {
            self.persist_pending(&mut lane.lock(), None)?;
        }
        Ok(())
    }

    fn rotate(&self, next: u64) -> Result<(), MetaDbError> {
        self.health_check()?;
        let mut segments = self.segments();
        let current = self.generation.load(Ordering::SeqCst);
        assert!(
            next > current,
            "rotating from generation {current} to {next}"
        );
        let sealed = self.seal();
        self.crash_point("rotate:sealed");
        let result = self.rotate_locked(&mut segments, sealed, next);
        if result.is_err() {
            self.unseal(sealed);
        }
        result
    }

    fn release_through(&self, generation: u64) -> Result<(), MetaDbError> {
        self.health_check()?;
        let current = self.generation.load(Ordering::SeqCst);
        assert!(
            generation < current,
            "releasing generation {generation}, current is {current}"
        );
        let mut segments = self.segments();
        self.released_through
            .fetch_max(generation, Ordering::SeqCst);
        let (released, kept): (Vec<Segment>, Vec<Segment>) = segments
            .closed
            .iter()
            .partition(|s| s.generation_max <= generation);
        segments.closed = kept;
        for segment in released {
            self.put_slot(segment.slot, 0)?;
            segments.free_slots.push(segment.slot);
        }
        self.store.release_through(generation);
        self.crash_point("release:done");
        Ok(())
    }
}
