//! The WAL on the device's WAL region (ssd mode; docs/FORMAT.md §5 "WAL region").
//!
//! Each lane appends its records to its own chunk (wal/chunk.rs), kept in memory until
//! written: `append` copies the record into the lane's chunk buffer and does no IO.
//! `persist` writes only the dirty sectors of the lanes it names (from the last sector
//! written, which may be rewritten with more records in it: a sector write is atomic),
//! then waits for a device flush submitted after those writes completed.
//!
//! Sharing between concurrent synchronous writers:
//! - per lane, one write is in flight at a time and covers every record appended to the
//!   lane when it was built; a writer whose record is covered by a write in flight waits
//!   for it instead of writing (group commit on a shared lane);
//! - a writer waits for a device flush already submitted after its write completed, if
//!   there is one, and submits its own otherwise (wal/flush.rs).
//!
//! `persist_covering` issues its lanes' writes, runs its caller's `before_flush` while
//! they are in flight (the engine waits for its data writes there), then waits for them
//! and requests a flush, so one device flush covers the WAL and the caller's data (none
//! if the records were durable already and the caller has no unflushed writes).
//!
//! Invariants:
//! - `written_count` records of the lane's generation are in completed writes and
//!   `durable_count <= written_count` of them in completed writes covered by a flush.
//! - Writes of one lane never overlap in time, so a rewritten tail sector never lands
//!   older than it was.
//! - No lock is held across device IO on the append or persist path except a lane's own
//!   `writing` flag, which only that lane's persisters (and `rotate`) wait on.
//!   `persist_covering` keeps that flag set while its caller's `before_flush` runs, and
//!   never waits for another lane's write while it holds one.
//! - `rotate` seals appends, persists every lane, and only then lets appends go to the new
//!   generation: a hole never spans generations.

use super::chunk::{self, ChunkStore, RegionScan};
use super::record::{encode_record, record_bytes, ChunkKind, RecordId, CHUNK_DATA_OFFSET};
use super::recovery::Collector;
use super::{Wal, WalRecovery};
use crate::error::MetaDbError;
use crate::types::{CallerWrites, WalPos};
use device::{Device, IoRequest};
use format::Region;
use platform::Signal;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// A chunk of the lane whose bytes are not all written yet (or the lane's current chunk).
#[derive(Debug)]
struct OpenChunk {
    offset: u64,
    crc: u32,
    buf: Vec<u8>,
    /// Bytes of `buf` in use (header sector included).
    filled: usize,
    /// Bytes of `buf` in completed writes.
    written: usize,
}

#[derive(Debug)]
struct LaneState {
    generation: u64,
    /// Records appended to (generation, lane); the next one's lane_seq.
    next_seq: u64,
    written_count: u64,
    durable_count: u64,
    /// A write of this lane is in flight (the lane lock is not held during it).
    writing: bool,
    /// Chunks with unwritten bytes, oldest first; the last is the append target.
    chunks: VecDeque<OpenChunk>,
}

impl LaneState {
    fn new(generation: u64) -> LaneState {
        LaneState {
            generation,
            next_seq: 0,
            written_count: 0,
            durable_count: 0,
            writing: false,
            chunks: VecDeque::new(),
        }
    }

    /// Writes for every unwritten byte, and what they cover: (chunk offset, filled).
    fn dirty_writes(&self, store: &ChunkStore) -> (Vec<IoRequest>, Vec<(u64, usize)>) {
        let mut writes = Vec::new();
        let mut covered = Vec::new();
        for chunk in self.chunks.iter().filter(|c| c.written < c.filled) {
            writes.push(store.chunk_write(chunk.offset, &chunk.buf, chunk.written, chunk.filled));
            covered.push((chunk.offset, chunk.filled));
        }
        (writes, covered)
    }

    /// Notes completed writes; forgets chunks that are written and no longer appended to.
    fn mark_written(&mut self, covered: &[(u64, usize)], covers_count: u64) {
        for &(offset, filled) in covered {
            if let Some(chunk) = self.chunks.iter_mut().find(|c| c.offset == offset) {
                chunk.written = chunk.written.max(filled);
            }
        }
        while self.chunks.len() > 1 && self.chunks.front().is_some_and(|c| c.written == c.filled) {
            self.chunks.pop_front();
        }
        self.written_count = self.written_count.max(covers_count);
        assert!(self.durable_count <= self.written_count && self.written_count <= self.next_seq);
    }
}

/// What a persister must do for some records of a lane ([`SsdWal::claim`]).
enum Claim {
    /// Nothing: durable already, or of an earlier generation (which `rotate` persisted).
    Durable,
    /// In completed writes, up to this count: a flush makes them durable.
    Written(u64),
    /// Another persister's write of the lane is in flight.
    Busy,
    /// The caller owns the lane's next write: it runs these writes, then ends it.
    Write(Vec<IoRequest>, LaneWrite),
}

/// A lane write owned by a persister, between [`SsdWal::claim`] and
/// [`SsdWal::end_write`].
#[derive(Debug)]
struct LaneWrite {
    lane: usize,
    generation: u64,
    /// (chunk offset, filled) the writes cover.
    covered: Vec<(u64, usize)>,
    /// The lane's records the writes cover: `0..covers_count`.
    covers_count: u64,
}

/// One lane, on its own cache lines so lanes do not false-share.
#[derive(Debug)]
#[repr(align(128))]
struct Lane {
    state: Mutex<LaneState>,
    /// Signalled when the lane's write in flight completes.
    written: Signal,
}

impl Lane {
    fn lock(&self) -> MutexGuard<'_, LaneState> {
        self.state
            .lock()
            .expect("WAL lane lock poisoned by a panic")
    }
}

/// Recovery done, not yet writable: [`SsdWalRecovered::start`] picks the generation.
#[derive(Debug)]
pub struct SsdWalRecovered {
    device: Arc<Device>,
    scan: RegionScan,
    lanes: usize,
    released_through: u64,
    generation_max: u64,
}

/// The ssd-mode WAL. See the module documentation.
#[derive(Debug)]
pub struct SsdWal {
    store: ChunkStore,
    lanes: Box<[Lane]>,
    generation: AtomicU64,
    /// Set by `rotate` while it persists the closing generation: appends wait.
    sealed: AtomicBool,
    /// Held by `rotate` for its whole run; sealed appends wait on it.
    rotating: Mutex<()>,
}

impl SsdWal {
    /// Scans `region` (reads only) and returns the records of generations
    /// `> released_through`. `released_through` must be at least every generation ever
    /// passed to `release_through` on this region.
    pub fn recover(
        device: Arc<Device>,
        region: Region,
        lanes: usize,
        released_through: u64,
    ) -> Result<(SsdWalRecovered, WalRecovery), MetaDbError> {
        assert!(
            (1..=usize::from(u16::MAX) + 1).contains(&lanes),
            "{lanes} lanes"
        );
        let mut collector = Collector::new(released_through);
        let scan = chunk::scan(&device, region, released_through, &mut collector)?;
        let generation_max = collector.generation_max();
        let recovered = SsdWalRecovered {
            device,
            scan,
            lanes,
            released_through,
            generation_max,
        };
        Ok((recovered, collector.finish()))
    }

    /// `recover` then `start(next_generation)`; `next_generation` must exceed the
    /// recovery's `generation_max` and `released_through`.
    pub fn open(
        device: Arc<Device>,
        region: Region,
        lanes: usize,
        released_through: u64,
        next_generation: u64,
    ) -> Result<(SsdWal, WalRecovery), MetaDbError> {
        let (recovered, recovery) = SsdWal::recover(device, region, lanes, released_through)?;
        Ok((recovered.start(next_generation)?, recovery))
    }

    fn check_position(&self, pos: &WalPos) {
        assert!(
            usize::from(pos.lane) < self.lanes.len(),
            "lane {} of {}",
            pos.lane,
            self.lanes.len()
        );
        let current = self.generation.load(Ordering::SeqCst);
        assert!(
            pos.generation <= current,
            "position {pos:?} beyond generation {current}"
        );
    }

    /// Waits until no `rotate` is sealing appends, with the lane locked.
    fn lock_unsealed<'a>(&self, lane: &'a Lane) -> MutexGuard<'a, LaneState> {
        loop {
            let state = lane.lock();
            if !self.sealed.load(Ordering::SeqCst) {
                return state;
            }
            drop(state);
            drop(
                self.rotating
                    .lock()
                    .expect("WAL rotate lock poisoned by a panic"),
            );
        }
    }

    /// Decides, under the lane lock, what records `0..count` of (generation, lane) need.
    /// When it returns [`Claim::Write`] the caller owns the lane's write and must end it
    /// with [`SsdWal::end_write`].
    fn claim(&self, lane: usize, state: &mut LaneState, generation: u64, count: u64) -> Claim {
        if state.generation != generation {
            assert!(
                generation < state.generation,
                "generation {generation} not begun"
            );
            return Claim::Durable;
        }
        assert!(
            count <= state.next_seq,
            "persisting a record never appended"
        );
        if state.durable_count >= count {
            return Claim::Durable;
        }
        if state.written_count >= count {
            return Claim::Written(state.written_count);
        }
        if state.writing {
            return Claim::Busy;
        }
        let (writes, covered) = state.dirty_writes(&self.store);
        assert!(!writes.is_empty(), "unwritten records but no dirty bytes");
        state.writing = true;
        Claim::Write(
            writes,
            LaneWrite {
                lane,
                generation,
                covered,
                covers_count: state.next_seq,
            },
        )
    }

    /// Ends a lane write handed out by [`SsdWal::claim`]; `completed`: all its writes
    /// completed successfully.
    fn end_write(&self, write: &LaneWrite, completed: bool) {
        let lane = &self.lanes[write.lane];
        let mut state = lane.lock();
        assert!(state.writing, "ending a lane write that was not claimed");
        state.writing = false;
        lane.written.notify_all();
        if completed {
            state.mark_written(&write.covered, write.covers_count);
        }
    }

    /// Makes sure records `0..count` of (generation, lane) are in completed writes.
    /// Returns the written count to make durable with a flush, or `None` if nothing is
    /// left to do (already durable, or an earlier generation, which `rotate` persisted).
    fn ensure_written(
        &self,
        lane: usize,
        generation: u64,
        count: u64,
    ) -> Result<Option<u64>, MetaDbError> {
        let lane_ref = &self.lanes[lane];
        let mut state = lane_ref.lock();
        loop {
            match self.claim(lane, &mut state, generation, count) {
                Claim::Durable => return Ok(None),
                Claim::Written(written) => return Ok(Some(written)),
                Claim::Busy => {
                    state = lane_ref
                        .written
                        .wait(state)
                        .expect("WAL lane lock poisoned by a panic");
                }
                Claim::Write(writes, write) => {
                    drop(state);
                    let result = self.store.run(writes);
                    self.end_write(&write, result.is_ok());
                    result?;
                    state = lane_ref.lock();
                }
            }
        }
    }

    /// Per lane, the furthest of `positions` (earlier records of a lane are persisted
    /// with it).
    fn furthest_per_lane(&self, positions: &[WalPos]) -> Vec<WalPos> {
        let mut targets: Vec<WalPos> = Vec::with_capacity(positions.len());
        for pos in positions {
            self.check_position(pos);
            match targets.iter_mut().find(|t| t.lane == pos.lane) {
                Some(t) if (t.generation, t.lane_seq) < (pos.generation, pos.lane_seq) => *t = *pos,
                Some(_) => {}
                None => targets.push(*pos),
            }
        }
        targets
    }

    /// Flushes (at least flush ticket `need`, if given: the caller's writes completed
    /// before it was taken), then records that lanes' written counts are durable.
    fn flush_lanes(
        &self,
        written: &[(usize, u64, u64)],
        need: Option<super::flush::FlushNeed>,
    ) -> Result<(), MetaDbError> {
        if written.is_empty() {
            return Ok(());
        }
        match need {
            Some(need) => self.store.flush_covering(need)?,
            None => self.store.flush()?,
        }
        self.mark_durable(written);
        Ok(())
    }

    /// After a flush covering their writes: (lane, generation, count) records are durable.
    fn mark_durable(&self, written: &[(usize, u64, u64)]) {
        for &(lane, generation, count) in written {
            let mut state = self.lanes[lane].lock();
            if state.generation == generation {
                state.durable_count = state.durable_count.max(count);
            }
        }
    }

    /// Persists everything appended to every lane of `generation` so far.
    fn persist_generation(&self, generation: u64) -> Result<(), MetaDbError> {
        let mut written = Vec::new();
        for lane in 0..self.lanes.len() {
            let count = self.lanes[lane].lock().next_seq;
            if let Some(w) = self.ensure_written(lane, generation, count)? {
                written.push((lane, generation, w));
            }
        }
        self.flush_lanes(&written, None)
    }

    /// Units of the region not holding unreleased chunks (for tests and inspection).
    pub fn free_units(&self) -> usize {
        self.store.free_units()
    }
}

impl SsdWalRecovered {
    /// The highest generation the log holds (the next one must be greater).
    pub fn generation_max(&self) -> u64 {
        self.generation_max
    }

    /// Writes a new incarnation header and flushes it; appends then go to
    /// `next_generation`, which must exceed `generation_max` and `released_through`.
    pub fn start(self, next_generation: u64) -> Result<SsdWal, MetaDbError> {
        assert!(
            next_generation > self.generation_max && next_generation > self.released_through,
            "generation {next_generation} not beyond the log's {} / released {}",
            self.generation_max,
            self.released_through
        );
        let store = ChunkStore::start(self.device, self.scan)?;
        let lanes = (0..self.lanes)
            .map(|_| Lane {
                state: Mutex::new(LaneState::new(next_generation)),
                written: Signal::new(),
            })
            .collect();
        Ok(SsdWal {
            store,
            lanes,
            generation: AtomicU64::new(next_generation),
            sealed: AtomicBool::new(false),
            rotating: Mutex::new(()),
        })
    }
}

impl Wal for SsdWal {
    fn lanes(&self) -> usize {
        self.lanes.len()
    }

    fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    fn append(&self, lane: u16, payload: &[u8]) -> Result<WalPos, MetaDbError> {
        super::check_append(self.lanes.len(), lane, payload);
        self.store.health().check()?;
        let mut state = self.lock_unsealed(&self.lanes[usize::from(lane)]);
        let generation = state.generation;
        debug_assert_eq!(generation, self.generation.load(Ordering::SeqCst));
        let len = record_bytes(payload.len());
        let fits = state
            .chunks
            .back()
            .is_some_and(|c| c.filled + len <= c.buf.len());
        if !fits {
            let units = ChunkStore::units_for(len);
            let new = self
                .store
                .new_chunk(generation, lane, ChunkKind::Lane, units)?;
            let filled = CHUNK_DATA_OFFSET;
            state.chunks.push_back(OpenChunk {
                offset: new.offset,
                crc: new.crc,
                buf: new.buf,
                filled,
                written: 0,
            });
        }
        let lane_seq = state.next_seq;
        // Records 0..durable_count were covered by a completed flush before this one is
        // appended: the evidence recovery needs to call a gap before it damage.
        let durable = state.durable_count;
        let chunk = state.chunks.back_mut().expect("a chunk to append to");
        let at = chunk.filled;
        encode_record(
            &mut chunk.buf[at..],
            RecordId {
                generation,
                lane,
                lane_seq,
                durable,
            },
            chunk.crc,
            payload,
        );
        chunk.filled += len;
        state.next_seq += 1;
        Ok(WalPos {
            lane,
            generation,
            lane_seq,
        })
    }

    fn persist(&self, positions: &[WalPos]) -> Result<(), MetaDbError> {
        self.store.health().check()?;
        let targets = self.furthest_per_lane(positions);
        let mut written = Vec::with_capacity(targets.len());
        for t in &targets {
            let lane = usize::from(t.lane);
            if let Some(w) = self.ensure_written(lane, t.generation, t.lane_seq + 1)? {
                written.push((lane, t.generation, w));
            }
        }
        if written.is_empty() {
            return Ok(());
        }
        let need = self.store.flush_need();
        self.flush_lanes(&written, Some(need))
    }

    fn persist_covering(
        &self,
        positions: &[WalPos],
        before_flush: &mut dyn FnMut() -> Result<CallerWrites, MetaDbError>,
    ) -> Result<(), MetaDbError> {
        self.store.health().check()?;
        let targets = self.furthest_per_lane(positions);
        let mut issued = self.store.issuer()?;
        let mut written = Vec::with_capacity(targets.len());
        // Lanes whose write another persister has in flight: written after the hook, so
        // this call never waits for another while it holds lane writes of its own (two
        // calls holding one lane each and waiting for the other's would deadlock).
        let mut busy = Vec::new();
        let mut ours = Vec::with_capacity(targets.len());
        let mut issuing = Ok(());
        for t in &targets {
            let lane = usize::from(t.lane);
            let claim = self.claim(
                lane,
                &mut self.lanes[lane].lock(),
                t.generation,
                t.lane_seq + 1,
            );
            match claim {
                Claim::Durable => {}
                Claim::Written(w) => written.push((lane, t.generation, w)),
                Claim::Busy => busy.push(*t),
                Claim::Write(writes, write) => {
                    ours.push(write);
                    issuing = issued.issue(writes);
                    if issuing.is_err() {
                        break;
                    }
                }
            }
        }
        // The caller's work overlaps the WAL writes in flight.
        let hooked = match issuing {
            Ok(()) => before_flush(),
            Err(_) => Ok(CallerWrites::Unflushed),
        };
        let completed = issuing.and(issued.wait());
        for write in &ours {
            self.end_write(write, completed.is_ok());
        }
        completed?;
        written.extend(ours.iter().map(|w| (w.lane, w.generation, w.covers_count)));
        let caller = hooked?;
        for t in &busy {
            let lane = usize::from(t.lane);
            if let Some(w) = self.ensure_written(lane, t.generation, t.lane_seq + 1)? {
                written.push((lane, t.generation, w));
            }
        }
        if written.is_empty() && caller == CallerWrites::Durable {
            // The records were durable before this call, and so are the caller's writes.
            return Ok(());
        }
        // Read after the hook returned and every write completed: the flush that
        // covers `need` starts after both.
        let need = self.store.flush_need();
        self.store.flush_covering(need)?;
        self.mark_durable(&written);
        Ok(())
    }

    fn durable_extents(&self) -> Vec<super::WalExtent> {
        let generation = self.generation.load(Ordering::SeqCst);
        (0..self.lanes.len())
            .filter_map(|lane| {
                let state = self.lanes[lane].lock();
                (state.generation == generation && state.durable_count > 0).then(|| {
                    super::WalExtent {
                        generation,
                        lane: lane as u16,
                        count: state.durable_count,
                    }
                })
            })
            .collect()
    }

    fn check_health(&self) -> Result<(), MetaDbError> {
        self.store.health().check()
    }

    fn persist_all(&self) -> Result<(), MetaDbError> {
        self.store.health().check()?;
        self.persist_generation(self.generation.load(Ordering::SeqCst))
    }

    fn rotate(&self, next: u64) -> Result<(), MetaDbError> {
        self.store.health().check()?;
        let _rotating = self
            .rotating
            .lock()
            .expect("WAL rotate lock poisoned by a panic");
        let current = self.generation.load(Ordering::SeqCst);
        assert!(
            next > current,
            "rotating from generation {current} to {next}"
        );
        // Appends that locked their lane before this store finish first (persist locks
        // each lane); later ones see the seal and wait for `rotating`.
        self.sealed.store(true, Ordering::SeqCst);
        let result = self.persist_generation(current);
        if result.is_ok() {
            // Lanes first, then the generation: a `persist_all` that reads the new
            // generation must find every lane in it (one reading the old generation finds
            // lanes of either, and an earlier generation claims as durable).
            for lane in self.lanes.iter() {
                let mut state = lane.lock();
                assert!(!state.writing && state.chunks.iter().all(|c| c.written == c.filled));
                *state = LaneState::new(next);
            }
            self.generation.store(next, Ordering::SeqCst);
        }
        self.sealed.store(false, Ordering::SeqCst);
        result
    }

    fn release_through(&self, generation: u64) -> Result<(), MetaDbError> {
        let current = self.generation.load(Ordering::SeqCst);
        assert!(
            generation < current,
            "releasing generation {generation}, current is {current}"
        );
        self.store.release_through(generation);
        Ok(())
    }
}
