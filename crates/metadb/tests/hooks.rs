//! MetaDB's hooks for the engine (docs/DESIGN.md §6.8):
//! pinned WAL lanes, `persist_covering` (one device flush for the WAL and the caller's own
//! writes), the memtable-flush barrier `before_memtable_flush` and the replay filter
//! `filter_replay`.
//!
//! Ssd mode runs on the recording device, whose event log shows where the caller's writes
//! and the device flushes fell; PMR mode on a memory PMR beside a recording device. A
//! hook's "data write" goes to the last block of the segment area, which these small
//! databases never allocate.

use device::memory::MemoryBackend;
use device::recording::{
    CrashPolicy, CrashState, Event, FaultPlan, RecordingBackend, RecordingHandle,
};
use device::{
    AlignedBuf, Backend, BackendQueue, Device, DeviceError, DeviceInfo, IoCause, IoCompletion,
    IoRequest,
};
use format::constants::MIB;
use format::Geometry;
use metadb::{
    CallerWrites, Durability, MetaDb, MetaDbConfig, MetaDbEnv, MetaDbError, Receipt, ReplayRecord,
    SegmentPool, WriteBatch, WriteHooks,
};
use platform::Rng;
use pmr::{Pmr, PmrOptions};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

const IMAGE_BYTES: u64 = 64 * MIB;
const PMR_BYTES: u64 = 2 * MIB;
const BLOCK_BYTES: u64 = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Ssd,
    Pmr,
}

/// A recording device (and a memory PMR in PMR mode) holding one formatted image.
struct Setup {
    device: Arc<Device>,
    handle: RecordingHandle,
    pmr: Option<Arc<Pmr>>,
    geometry: Geometry,
}

impl Setup {
    fn new(mode: Mode) -> Setup {
        Setup::with_backend(mode, false)
    }

    /// With `lazy`, the recording device runs a write submitted without waiting only
    /// when its issuer waits ([`LazyWrites`]).
    fn with_backend(mode: Mode, lazy: bool) -> Setup {
        let (recording, handle) = RecordingBackend::new(vec![0; IMAGE_BYTES as usize], 512);
        let backend: Box<dyn Backend> = if lazy {
            Box::new(LazyWrites(recording))
        } else {
            Box::new(recording)
        };
        let pmr = (mode == Mode::Pmr).then(|| {
            let pmr = Arc::new(Pmr::memory(PMR_BYTES, PmrOptions::default()).unwrap());
            pmr::format_region(&pmr, [7; 16]).unwrap();
            pmr
        });
        Setup {
            device: Arc::new(Device::new(backend)),
            handle,
            pmr,
            geometry: Geometry::compute(IMAGE_BYTES, 1).unwrap(),
        }
    }

    fn env(&self, device: Arc<Device>, hooks: Option<Arc<dyn WriteHooks>>) -> MetaDbEnv {
        MetaDbEnv {
            device,
            pmr: self.pmr.clone(),
            geometry: self.geometry,
            table_store: Arc::new(SegmentPool::whole(self.geometry)),
            hooks,
        }
    }

    fn open(&self, config: MetaDbConfig, hooks: Option<Arc<dyn WriteHooks>>) -> MetaDb {
        MetaDb::open(self.env(self.device.clone(), hooks), config).expect("open")
    }

    /// Device offset of the block a hook writes as "its data".
    fn data_offset(&self) -> u64 {
        self.geometry.segments.start_byte() + self.geometry.segments.size_bytes() - BLOCK_BYTES
    }

    /// The caller's own device write: one block of `byte`.
    fn data_write(&self, byte: u8) {
        let buf = AlignedBuf::from_slice(&[byte; BLOCK_BYTES as usize]);
        self.device
            .write(self.data_offset(), buf, IoCause::UserData)
            .unwrap();
    }

    fn wal_io(&self, before: &platform::IoSnapshot) -> (u64, u64) {
        let io = self
            .device
            .counters()
            .snapshot()
            .since(before)
            .cause(IoCause::Wal);
        (io.write_ops, io.flush_ops)
    }
}

/// A device on which requests submitted without waiting (`submit(0)`) stay in flight
/// until their queue waits for a completion, as a real device may take its time: what an
/// issuer does before waiting overlaps its writes, and the recording shows they had not
/// completed by then.
#[derive(Debug)]
struct LazyWrites(RecordingBackend);

struct LazyQueue<'a> {
    inner: Box<dyn BackendQueue + 'a>,
    /// Submitted, not yet started.
    held: Vec<IoRequest>,
}

impl Backend for LazyWrites {
    fn info(&self) -> &DeviceInfo {
        self.0.info()
    }

    fn queue(&self) -> Result<Box<dyn BackendQueue + '_>, DeviceError> {
        Ok(Box::new(LazyQueue {
            inner: self.0.queue()?,
            held: Vec::new(),
        }))
    }
}

impl BackendQueue for LazyQueue<'_> {
    fn depth(&self) -> usize {
        self.inner.depth()
    }

    fn push(&mut self, request: IoRequest) -> Result<(), IoRequest> {
        if self.outstanding() >= self.depth() {
            return Err(request);
        }
        self.held.push(request);
        Ok(())
    }

    fn submit(&mut self, min_complete: usize) -> Result<(), DeviceError> {
        if min_complete == 0 {
            return Ok(());
        }
        for request in self.held.drain(..) {
            self.inner.push(request).expect("room: depth is shared");
        }
        self.inner.submit(min_complete)
    }

    fn pop(&mut self) -> Option<IoCompletion> {
        self.inner.pop()
    }

    fn outstanding(&self) -> usize {
        self.held.len() + self.inner.outstanding()
    }
}

fn config(lanes: usize, pinned_lanes: usize) -> MetaDbConfig {
    MetaDbConfig {
        lanes,
        pinned_lanes,
        memtable_bytes: 24 << 10,
        background: false,
        ..MetaDbConfig::default()
    }
}

fn contents(db: &MetaDb) -> BTreeMap<Vec<u8>, Vec<u8>> {
    db.range(b"", None, None)
        .unwrap()
        .map(|r| r.unwrap())
        .collect()
}

fn put_batch(key: &[u8], value: &[u8]) -> WriteBatch {
    let mut batch = WriteBatch::new();
    batch.put(key.to_vec(), value.to_vec());
    batch
}

fn injected() -> MetaDbError {
    MetaDbError::Device(DeviceError::Injected {
        op: "hook write",
        nth: 1,
    })
}

/// The first flush at or after event `from` of `events`: what it covers.
fn flush_after(events: &[Event], from: usize) -> Option<u64> {
    events[from..].iter().find_map(|e| match e {
        Event::Flush { covers } => Some(*covers),
        _ => None,
    })
}

// ---------------------------------------------------------------------------------------
// Pinned lanes.

/// One write of the pinned-lane workload.
struct Op {
    /// 0: thread lane (main thread), 1 + i: pinned lane i (from a new thread each time).
    stream: u8,
    n: u32,
    sync: bool,
    /// Device writes completed when the write returned.
    writes_after: u64,
}

fn stream_key(stream: u8, n: u32) -> Vec<u8> {
    format!("s{stream}:{n:05}").into_bytes()
}

fn stream_value(stream: u8, n: u32) -> Vec<u8> {
    vec![stream ^ n as u8; 1 + (n as usize * 37 + usize::from(stream) * 11) % 300]
}

/// Writes on the main thread's lane and on two pinned lanes; pinned-lane writes come
/// from a new thread each time, so only the pinning keeps them in one lane.
fn pinned_workload(setup: &Setup, seed: u64) -> Vec<Op> {
    let db = setup.open(config(2, 2), None);
    let mut rng = Rng::from_seed(seed);
    let mut next = [0u32; 3];
    let mut ops = Vec::new();
    for _ in 0..150 {
        let stream = rng.below(3) as u8;
        let n = next[usize::from(stream)];
        next[usize::from(stream)] += 1;
        let sync = rng.chance(1, 4);
        let durability = if sync {
            Durability::Sync
        } else {
            Durability::Buffered
        };
        let batch = put_batch(&stream_key(stream, n), &stream_value(stream, n));
        let receipt: Receipt = match stream {
            0 => db.write(&batch, durability).unwrap(),
            pinned => std::thread::scope(|s| {
                s.spawn(|| db.write_pinned(usize::from(pinned - 1), &batch, durability))
                    .join()
                    .unwrap()
            })
            .unwrap(),
        };
        match stream {
            0 => assert!(receipt.pos.lane < 2, "{receipt:?}"),
            pinned => assert_eq!(receipt.pos.lane, 2 + u16::from(pinned - 1)),
        }
        if rng.chance(1, 40) {
            db.flush().unwrap();
        }
        ops.push(Op {
            stream,
            n,
            sync,
            writes_after: setup.handle.write_count(),
        });
    }
    db.close().unwrap();
    ops
}

#[test]
fn pinned_lanes_recover_as_prefixes_and_thread_lanes_are_unaffected() {
    let seed = 31;
    let setup = Setup::new(Mode::Ssd);
    let ops = pinned_workload(&setup, seed);
    let recording = setup.handle.snapshot();
    let states = recording.crash_states(&CrashPolicy {
        states_max: 150,
        ..CrashPolicy::with_seed(seed)
    });
    let mut partial = 0;
    for state in &states.states {
        let crashed = Arc::new(recording.device(state, 512));
        let db = MetaDb::open(setup.env(crashed, None), config(2, 2))
            .unwrap_or_else(|e| panic!("seed {seed} state {state}: recovery failed: {e}"));
        let got = contents(&db);
        for stream in 0..3u8 {
            let written: Vec<&Op> = ops.iter().filter(|op| op.stream == stream).collect();
            let present: Vec<u32> = written
                .iter()
                .filter(|op| got.contains_key(&stream_key(stream, op.n)))
                .map(|op| op.n)
                .collect();
            let kept = present.len() as u32;
            assert!(
                present.iter().copied().eq(0..kept),
                "seed {seed} state {state}: stream {stream} recovered {present:?}, not a prefix"
            );
            for n in 0..kept {
                assert_eq!(got[&stream_key(stream, n)], stream_value(stream, n));
            }
            let required = written
                .iter()
                .filter(|op| op.sync && op.writes_after <= state.durable_writes())
                .map(|op| op.n + 1)
                .max()
                .unwrap_or(0);
            assert!(
                kept >= required,
                "seed {seed} state {state}: stream {stream} lost an acknowledged sync write \
                 ({kept} kept, {required} required)"
            );
            partial += usize::from(kept > 0 && kept < written.len() as u32);
        }
    }
    assert!(partial > 0, "no crash state cut a stream short");
    eprintln!(
        "seed {seed}: {} crash states checked ({} skipped)",
        states.states.len(),
        states.skipped_count
    );
}

/// One write of the requirements workload: pinned lane `lane`, its `n`th, maybe
/// requiring an earlier write of another lane (an index into the workload).
struct Required {
    lane: u8,
    n: u32,
    requires: Option<usize>,
    sync: bool,
    writes_after: u64,
}

/// Writes on three pinned lanes (from a new thread each time); a third of them require
/// the latest write of another lane, as a file's first write requires its create.
fn requirements_workload(setup: &Setup, seed: u64) -> Vec<Required> {
    let db = setup.open(config(1, 3), None);
    let mut rng = Rng::from_seed(seed);
    let mut next = [0u32; 3];
    let mut latest: [Option<(usize, Receipt)>; 3] = [None; 3];
    let mut ops = Vec::new();
    for i in 0..150 {
        let lane = rng.below(3) as u8;
        let n = next[usize::from(lane)];
        next[usize::from(lane)] += 1;
        let mut batch = put_batch(&stream_key(lane, n), &stream_value(lane, n));
        let other = usize::from((lane + 1 + rng.below(2) as u8) % 3);
        let requires = latest[other]
            .filter(|_| rng.chance(1, 3))
            .map(|(at, receipt)| {
                batch.require(receipt.pos);
                at
            });
        let sync = rng.chance(1, 5);
        let durability = if sync {
            Durability::Sync
        } else {
            Durability::Buffered
        };
        let receipt = std::thread::scope(|s| {
            s.spawn(|| db.write_pinned(usize::from(lane), &batch, durability))
                .join()
                .unwrap()
        })
        .unwrap();
        latest[usize::from(lane)] = Some((i, receipt));
        if rng.chance(1, 50) {
            db.flush().unwrap();
        }
        ops.push(Required {
            lane,
            n,
            requires,
            sync,
            writes_after: setup.handle.write_count(),
        });
    }
    db.close().unwrap();
    ops
}

#[test]
fn a_write_survives_a_crash_only_with_the_writes_it_requires() {
    let seed = 57;
    let setup = Setup::new(Mode::Ssd);
    let ops = requirements_workload(&setup, seed);
    let recording = setup.handle.snapshot();
    let states = recording.crash_states(&CrashPolicy {
        states_max: 200,
        ..CrashPolicy::with_seed(seed)
    });
    let mut unmet = 0;
    for state in &states.states {
        let crashed = Arc::new(recording.device(state, 512));
        let db = MetaDb::open(setup.env(crashed, None), config(1, 3))
            .unwrap_or_else(|e| panic!("seed {seed} state {state}: recovery failed: {e}"));
        unmet += db.stats().replay_unmet;
        let got = contents(&db);
        let present = |op: &Required| got.contains_key(&stream_key(op.lane, op.n));
        for lane in 0..3u8 {
            let written: Vec<&Required> = ops.iter().filter(|op| op.lane == lane).collect();
            let kept = written.iter().take_while(|op| present(op)).count();
            assert!(
                written[kept..].iter().all(|op| !present(op)),
                "seed {seed} state {state}: lane {lane} did not recover a prefix"
            );
        }
        for (i, op) in ops.iter().enumerate() {
            if let Some(r) = op.requires.filter(|_| present(op)) {
                assert!(
                    present(&ops[r]),
                    "seed {seed} state {state}: write {i} survived without write {r} it requires"
                );
            }
            assert!(
                !op.sync || op.writes_after > state.durable_writes() || present(op),
                "seed {seed} state {state}: acknowledged sync write {i} lost"
            );
        }
    }
    assert!(
        unmet > 0,
        "no crash state dropped a write for a lost requirement"
    );
    eprintln!(
        "seed {seed}: {} crash states checked, {unmet} records dropped for lost requirements",
        states.states.len()
    );
}

#[test]
#[should_panic(expected = "pinned lane 2 of 2")]
fn a_pinned_lane_beyond_the_configured_ones_is_a_bug() {
    let setup = Setup::new(Mode::Ssd);
    let db = setup.open(config(1, 2), None);
    let _ = db.write_pinned(2, &put_batch(b"k", b"v"), Durability::Buffered);
}

// ---------------------------------------------------------------------------------------
// persist_covering.

/// What a `persist_covering` hook saw.
#[derive(Debug, Default, Clone, Copy)]
struct HookPoint {
    calls: usize,
    /// Device events before the hook wrote its data, and after.
    events_before: usize,
    events_after: usize,
    /// Device writes recorded once the hook's data write completed.
    writes_after: u64,
    /// WAL (device) writes and flushes, and PMR persists, since the call began.
    wal_writes: u64,
    wal_flushes: u64,
    pmr_persists: u64,
}

/// Calls `persist_covering(receipts)` with a hook that notes what had happened by then
/// and writes one data block (`byte`).
fn persist_with_data(
    setup: &Setup,
    db: &MetaDb,
    receipts: &[Receipt],
    byte: u8,
    result: Result<(), MetaDbError>,
) -> (Result<(), MetaDbError>, HookPoint) {
    let device_before = setup.device.counters().snapshot();
    let pmr_before = setup.pmr.as_ref().map(|p| p.counters().snapshot());
    let mut point = HookPoint::default();
    let mut result = Some(result);
    let outcome = db.persist_covering(receipts, &mut || {
        point.calls += 1;
        (point.wal_writes, point.wal_flushes) = setup.wal_io(&device_before);
        point.pmr_persists = match (&setup.pmr, &pmr_before) {
            (Some(pmr), Some(before)) => {
                pmr.counters()
                    .snapshot()
                    .since(before)
                    .cause(IoCause::Wal)
                    .flush_ops
            }
            _ => 0,
        };
        point.events_before = setup.handle.events().len();
        setup.data_write(byte);
        point.events_after = setup.handle.events().len();
        point.writes_after = setup.handle.write_count();
        result
            .take()
            .expect("the hook runs once")
            .map(|()| CallerWrites::Unflushed)
    });
    (outcome, point)
}

/// After `persist_covering` returned at `point`: a flush requested after the hook covers
/// the hook's data write (and everything written before it).
fn assert_flush_after_hook(setup: &Setup, point: &HookPoint) {
    let events = setup.handle.events();
    assert!(
        !events[point.events_before..point.events_after]
            .iter()
            .any(|e| matches!(e, Event::Flush { .. })),
        "the hook itself did not flush"
    );
    let covers = flush_after(&events, point.events_after).expect("a flush after the hook");
    assert!(
        covers >= point.writes_after,
        "the flush after the hook covers {covers} writes, the hook's data write is #{}",
        point.writes_after - 1
    );
}

#[test]
fn ssd_persist_covering_runs_the_hook_between_the_wal_write_and_the_flush() {
    let setup = Setup::new(Mode::Ssd);
    let db = setup.open(config(1, 1), None);
    let receipt = db
        .write_pinned(
            0,
            &put_batch(b"inode:1", b"blocks 7..9"),
            Durability::Buffered,
        )
        .unwrap();
    let (outcome, point) = persist_with_data(&setup, &db, &[receipt], 0xD1, Ok(()));
    outcome.unwrap();
    assert_eq!(point.calls, 1);
    assert_eq!(
        (point.wal_writes, point.wal_flushes),
        (1, 0),
        "the WAL write was issued before the hook and no WAL flush was requested yet"
    );
    assert_flush_after_hook(&setup, &point);
    // The state right after that flush holds the record and the data: one flush did both.
    let recording = setup.handle.snapshot();
    let covers = flush_after(recording.events(), point.events_after).unwrap();
    let image = recording.image(&CrashState::durable_prefix(covers));
    let offset = setup.data_offset() as usize;
    assert_eq!(image[offset..offset + BLOCK_BYTES as usize], [0xD1; 4096]);
    let crashed = Arc::new(Device::new(Box::new(MemoryBackend::from_image(image, 512))));
    let reopened = MetaDb::open(setup.env(crashed, None), config(1, 1)).unwrap();
    assert_eq!(
        reopened.get(b"inode:1").unwrap().as_deref(),
        Some(&b"blocks 7..9"[..])
    );
}

#[test]
fn ssd_persist_covering_runs_the_hook_while_the_wal_write_is_in_flight() {
    let setup = Setup::with_backend(Mode::Ssd, true);
    let db = setup.open(config(1, 1), None);
    let receipt = db
        .write_pinned(
            0,
            &put_batch(b"inode:3", b"blocks 1..2"),
            Durability::Buffered,
        )
        .unwrap();
    let writes_before = setup.handle.write_count();
    let mut at_hook = None;
    db.persist_covering(&[receipt], &mut || {
        let issued = setup
            .device
            .counters()
            .snapshot()
            .cause(IoCause::Wal)
            .write_ops;
        at_hook = Some((issued, setup.handle.write_count()));
        setup.data_write(0xD4);
        Ok(CallerWrites::Unflushed)
    })
    .unwrap();
    let (issued, completed) = at_hook.expect("the hook ran");
    assert!(issued >= 1);
    assert_eq!(
        completed, writes_before,
        "the WAL write was issued but had not run when the hook began"
    );
    // Then: the data write, the WAL write (when persist_covering waited), a flush of both.
    let events = setup.handle.events();
    assert!(
        matches!(events.last(), Some(Event::Flush { covers }) if *covers == writes_before + 2),
        "{events:?}"
    );
    db.close().unwrap();
}

#[test]
fn ssd_persist_covering_flushes_after_the_hook_even_with_nothing_to_write() {
    let setup = Setup::new(Mode::Ssd);
    let db = setup.open(config(1, 1), None);
    let receipt = db.put(b"k", b"v", Durability::Buffered).unwrap();
    db.persist(&[receipt]).unwrap();
    // Already durable: no WAL write, but the hook runs and a flush follows it.
    let (outcome, point) = persist_with_data(&setup, &db, &[receipt], 0xD2, Ok(()));
    outcome.unwrap();
    assert_eq!(
        (point.calls, point.wal_writes, point.wal_flushes),
        (1, 0, 0)
    );
    assert_flush_after_hook(&setup, &point);
    // No receipts at all: a pure barrier for the caller's writes.
    let (outcome, point) = persist_with_data(&setup, &db, &[], 0xD3, Ok(()));
    outcome.unwrap();
    assert_eq!((point.calls, point.wal_writes), (1, 0));
    assert_flush_after_hook(&setup, &point);
}

/// A caller whose own writes are durable already asks for no flush: none is made when
/// the records are durable too (persisted PMR lines; ssd WAL records flushed before),
/// and the flush for the WAL's own write still is in ssd mode.
#[test]
fn persist_covering_flushes_nothing_for_a_caller_with_durable_writes_and_durable_records() {
    for mode in [Mode::Ssd, Mode::Pmr] {
        let setup = Setup::new(mode);
        let db = setup.open(config(1, 1), None);
        let receipt = db
            .write_pinned(0, &put_batch(b"dir:1", b"entry"), Durability::Buffered)
            .unwrap();
        let flushes = |setup: &Setup| {
            setup
                .handle
                .events()
                .iter()
                .filter(|e| matches!(e, Event::Flush { .. }))
                .count()
        };
        let before = flushes(&setup);
        let mut calls = 0;
        db.persist_covering(&[receipt], &mut || {
            calls += 1;
            Ok(CallerWrites::Durable)
        })
        .unwrap();
        let first = flushes(&setup) - before;
        match mode {
            Mode::Pmr => assert_eq!(first, 0, "the PMR lines are the records' durability"),
            Mode::Ssd => assert_eq!(first, 1, "the WAL's own write needs its flush"),
        }
        // Durable records, durable caller: nothing at all, but the hook still runs.
        let before = flushes(&setup);
        db.persist_covering(&[receipt], &mut || {
            calls += 1;
            Ok(CallerWrites::Durable)
        })
        .unwrap();
        assert_eq!((calls, flushes(&setup) - before), (2, 0), "{mode:?}");
        // The record survives a crash (every unpersisted PMR line lost, the device as
        // flushed).
        let flushed = setup
            .handle
            .events()
            .iter()
            .filter_map(|e| match e {
                Event::Flush { covers } => Some(*covers),
                _ => None,
            })
            .max()
            .unwrap_or(0);
        let device = Arc::new(Device::new(Box::new(MemoryBackend::from_image(
            setup.handle.image(&CrashState::durable_prefix(flushed)),
            512,
        ))));
        let pmr = setup.pmr.as_ref().map(|p| {
            Arc::new(
                Pmr::memory_from_image(&p.crash_image_all_lost(), PmrOptions::default()).unwrap(),
            )
        });
        let env = MetaDbEnv {
            pmr,
            ..setup.env(device, None)
        };
        let reopened = MetaDb::open(env, config(1, 1)).unwrap();
        assert_eq!(
            reopened.get(b"dir:1").unwrap().as_deref(),
            Some(&b"entry"[..]),
            "{mode:?}"
        );
    }
}

#[test]
fn a_failing_persist_covering_hook_is_the_callers_error_and_nothing_is_flushed() {
    for mode in [Mode::Ssd, Mode::Pmr] {
        let setup = Setup::new(mode);
        let db = setup.open(config(1, 1), None);
        let receipt = db
            .write_pinned(0, &put_batch(b"k", b"v"), Durability::Buffered)
            .unwrap();
        let (outcome, point) = persist_with_data(&setup, &db, &[receipt], 0xE1, Err(injected()));
        assert!(
            matches!(
                outcome,
                Err(MetaDbError::Device(DeviceError::Injected { .. }))
            ),
            "{mode:?}: {outcome:?}"
        );
        assert_eq!(point.calls, 1);
        assert_eq!(
            flush_after(&setup.handle.events(), point.events_after),
            None,
            "{mode:?}: no flush after a failed hook"
        );
        // Still writable, and the record can still be made durable.
        let again = db.put(b"k2", b"v2", Durability::Sync).unwrap();
        let (outcome, point) = persist_with_data(&setup, &db, &[receipt, again], 0xE2, Ok(()));
        outcome.unwrap();
        assert_flush_after_hook(&setup, &point);
        db.close().unwrap();
    }
}

#[test]
fn a_wal_failure_in_persist_covering_turns_the_database_read_only() {
    let setup = Setup::new(Mode::Ssd);
    let db = setup.open(config(1, 1), None);
    let receipt = db.put(b"k", b"v", Durability::Buffered).unwrap();
    setup.handle.set_fault(FaultPlan::FailWrite { nth: 1 });
    // The hook fails too: the WAL's failure is the one reported, and it is the database's.
    let (outcome, _) = persist_with_data(&setup, &db, &[receipt], 0xE3, Err(MetaDbError::NoSpace));
    match outcome {
        Err(MetaDbError::Device(DeviceError::Injected { op, .. })) => assert_eq!(op, "write"),
        other => panic!("expected the injected WAL write failure, got {other:?}"),
    }
    assert!(matches!(
        db.put(b"k2", b"v2", Durability::Buffered),
        Err(MetaDbError::ReadOnly(_))
    ));
}

#[test]
fn pmr_persist_covering_persists_the_lines_then_runs_the_hook_then_flushes() {
    let setup = Setup::new(Mode::Pmr);
    let db = setup.open(config(1, 1), None);
    let receipt = db
        .write_pinned(
            0,
            &put_batch(b"inode:2", b"blocks 3..4"),
            Durability::Buffered,
        )
        .unwrap();
    let (outcome, point) = persist_with_data(&setup, &db, &[receipt], 0xF1, Ok(()));
    outcome.unwrap();
    assert_eq!(point.calls, 1);
    assert!(
        point.pmr_persists >= 1,
        "the entry was persisted before the hook"
    );
    assert_eq!(point.wal_flushes, 0, "no device flush before the hook");
    assert_flush_after_hook(&setup, &point);
    // The record is on the PMR: it survives losing every unpersisted line.
    let pmr = setup.pmr.as_ref().unwrap();
    let image = Pmr::memory_from_image(&pmr.crash_image_all_lost(), PmrOptions::default());
    let env = MetaDbEnv {
        pmr: Some(Arc::new(image.unwrap())),
        ..setup.env(
            Arc::new(Device::new(Box::new(MemoryBackend::from_image(
                setup.handle.current_image(),
                512,
            )))),
            None,
        )
    };
    let reopened = MetaDb::open(env, config(1, 1)).unwrap();
    assert_eq!(
        reopened.get(b"inode:2").unwrap().as_deref(),
        Some(&b"blocks 3..4"[..])
    );
    // Nothing to persist: the hook and a flush after it still happen.
    let (outcome, point) = persist_with_data(&setup, &db, &[receipt], 0xF2, Ok(()));
    outcome.unwrap();
    assert_eq!((point.calls, point.pmr_persists), (1, 0));
    assert_flush_after_hook(&setup, &point);
}

/// Four threads on two pinned lanes, each call also persisting the other lane's latest
/// record: calls meet lane writes of other calls in flight (held across their hooks), on
/// their own lane and on the other, and must neither wait for each other in a cycle nor
/// return before a flush requested after their own hook.
#[test]
fn concurrent_persist_covering_callers_each_get_a_flush_after_their_hook() {
    for mode in [Mode::Ssd, Mode::Pmr] {
        let setup = Setup::new(mode);
        let db = setup.open(config(2, 2), None);
        let latest: [Mutex<Option<Receipt>>; 2] = Default::default();
        // Per call: (device writes recorded after its hook, events when it returned).
        let seen = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for thread in 0..4usize {
                let (setup, db, seen, latest) = (&setup, &db, &seen, &latest);
                s.spawn(move || {
                    let pinned = thread % 2;
                    for i in 0..40u32 {
                        let key = format!("t{thread}:{i}").into_bytes();
                        let receipt = db
                            .write_pinned(pinned, &put_batch(&key, b"v"), Durability::Buffered)
                            .unwrap();
                        *latest[pinned].lock().unwrap() = Some(receipt);
                        let mut receipts = vec![receipt];
                        receipts.extend(*latest[1 - pinned].lock().unwrap());
                        let mut writes_after = 0;
                        db.persist_covering(&receipts, &mut || {
                            setup.data_write(thread as u8);
                            writes_after = setup.handle.write_count();
                            Ok(CallerWrites::Unflushed)
                        })
                        .unwrap();
                        let returned_at = setup.handle.events().len();
                        seen.lock().unwrap().push((writes_after, returned_at));
                    }
                });
            }
        });
        let events = setup.handle.events();
        let seen = seen.into_inner().unwrap();
        assert_eq!(seen.len(), 160);
        for (writes_after, returned_at) in seen {
            // A flush before the call returned covers the hook's data write.
            let covered = events[..returned_at]
                .iter()
                .any(|e| matches!(e, Event::Flush { covers } if *covers >= writes_after));
            assert!(
                covered,
                "{mode:?}: no flush covered data write #{}",
                writes_after - 1
            );
        }
        db.close().unwrap();
        let db = setup.open(config(2, 2), None);
        assert_eq!(contents(&db).len(), 160, "{mode:?}");
    }
}

// ---------------------------------------------------------------------------------------
// before_memtable_flush.

#[derive(Debug, Default)]
struct FlushBarrier {
    calls: AtomicUsize,
    fail: AtomicBool,
    /// Per call: the value `lookup` gave for the first key `fill` writes.
    first_key: std::sync::Mutex<Vec<Option<Vec<u8>>>>,
}

impl WriteHooks for FlushBarrier {
    fn before_memtable_flush(
        &self,
        lookup: &dyn Fn(&[u8]) -> Option<Vec<u8>>,
    ) -> Result<(), MetaDbError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.first_key
            .lock()
            .unwrap()
            .push(lookup(format!("m:{:06}", 0).as_bytes()));
        if self.fail.load(Ordering::SeqCst) {
            return Err(injected());
        }
        Ok(())
    }
}

fn fill(db: &MetaDb, from: u32, count: u32) {
    for i in from..from + count {
        db.put(
            format!("m:{i:06}").as_bytes(),
            &[i as u8; 700],
            Durability::Buffered,
        )
        .unwrap();
    }
}

#[test]
fn before_memtable_flush_runs_once_per_memtable_flush() {
    for background in [false, true] {
        let setup = Setup::new(Mode::Ssd);
        let barrier = Arc::new(FlushBarrier::default());
        let db = setup.open(
            MetaDbConfig {
                background,
                memtable_bytes: 64 << 10,
                ..config(2, 0)
            },
            Some(barrier.clone()),
        );
        assert_eq!(barrier.calls.load(Ordering::SeqCst), 0, "nothing recovered");
        fill(&db, 0, 10);
        db.flush().unwrap();
        assert_eq!(barrier.calls.load(Ordering::SeqCst), 1);
        assert_eq!(
            barrier.first_key.lock().unwrap()[0],
            Some(vec![0u8; 700]),
            "lookup reads the memtable being flushed"
        );
        db.flush().unwrap();
        assert_eq!(
            barrier.calls.load(Ordering::SeqCst),
            1,
            "no memtable, no call"
        );
        // Several memtables fill and switch (flushed in the background, or by `flush`).
        fill(&db, 10, 600);
        db.flush().unwrap();
        let stats = db.stats();
        assert!(stats.generation >= 6, "{stats:?}");
        // Generations 1 .. generation-1 were each flushed once.
        assert_eq!(
            barrier.calls.load(Ordering::SeqCst) as u64,
            stats.generation - 1,
            "background {background}"
        );
        assert!(
            barrier.first_key.lock().unwrap()[1..]
                .iter()
                .all(Option::is_none),
            "later memtables do not hold the first key"
        );
        assert_eq!(contents(&db).len(), 610);
        db.close().unwrap();
    }
}

#[test]
fn before_memtable_flush_runs_for_the_replayed_memtable_at_open() {
    let setup = Setup::new(Mode::Ssd);
    let db = setup.open(config(2, 0), None);
    fill(&db, 0, 5);
    db.close().unwrap();
    let barrier = Arc::new(FlushBarrier::default());
    let db = setup.open(config(2, 0), Some(barrier.clone()));
    assert_eq!(barrier.calls.load(Ordering::SeqCst), 1);
    assert_eq!(contents(&db).len(), 5);
}

#[test]
fn a_failing_before_memtable_flush_turns_the_database_read_only() {
    // Inline flush.
    let setup = Setup::new(Mode::Ssd);
    let barrier = Arc::new(FlushBarrier::default());
    let db = setup.open(config(2, 0), Some(barrier.clone()));
    fill(&db, 0, 5);
    barrier.fail.store(true, Ordering::SeqCst);
    let tables_before = db.stats().tables_per_level;
    assert!(matches!(
        db.flush(),
        Err(MetaDbError::Device(DeviceError::Injected { .. }))
    ));
    assert_eq!(
        db.stats().tables_per_level,
        tables_before,
        "no table written"
    );
    assert!(matches!(
        db.put(b"k", b"v", Durability::Buffered),
        Err(MetaDbError::ReadOnly(_))
    ));
    assert!(db.get(b"m:000003").unwrap().is_some(), "reads still work");

    // Background flush: writers see the failure once the flush thread met it.
    let setup = Setup::new(Mode::Ssd);
    let barrier = Arc::new(FlushBarrier::default());
    barrier.fail.store(true, Ordering::SeqCst);
    let db = setup.open(
        MetaDbConfig {
            background: true,
            memtable_bytes: 64 << 10,
            ..config(2, 0)
        },
        Some(barrier.clone()),
    );
    let mut failed = None;
    for i in 0..20_000u32 {
        match db.put(
            format!("m:{i:06}").as_bytes(),
            &[1; 700],
            Durability::Buffered,
        ) {
            Ok(_) => {}
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
        if barrier.calls.load(Ordering::SeqCst) > 0 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
    assert!(
        matches!(failed, Some(MetaDbError::ReadOnly(_))),
        "writes went on after the failed flush: {failed:?}"
    );
    assert!(barrier.calls.load(Ordering::SeqCst) >= 1);
}

// ---------------------------------------------------------------------------------------
// filter_replay.

type Decide = dyn Fn(&[ReplayRecord]) -> Vec<bool> + Send + Sync;

/// Keeps what `decide` says, and remembers what it was offered.
struct Filter {
    offered: Mutex<Vec<ReplayRecord>>,
    calls: AtomicUsize,
    decide: Box<Decide>,
}

impl std::fmt::Debug for Filter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Filter")
            .field("calls", &self.calls)
            .finish_non_exhaustive()
    }
}

impl Filter {
    fn new(decide: impl Fn(&[ReplayRecord]) -> Vec<bool> + Send + Sync + 'static) -> Arc<Filter> {
        Arc::new(Filter {
            offered: Mutex::new(Vec::new()),
            calls: AtomicUsize::new(0),
            decide: Box::new(decide),
        })
    }

    fn keep_all() -> Arc<Filter> {
        Filter::new(|records| vec![true; records.len()])
    }

    fn offered(&self) -> Vec<ReplayRecord> {
        self.offered.lock().unwrap().clone()
    }
}

impl WriteHooks for Filter {
    fn filter_replay(&self, records: &[ReplayRecord]) -> Result<Vec<bool>, MetaDbError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        *self.offered.lock().unwrap() = records.to_vec();
        Ok((self.decide)(records))
    }
}

fn pinned_key(pinned: usize, n: u32) -> Vec<u8> {
    format!("p{pinned}:{n:03}").into_bytes()
}

/// Ten writes to each of two pinned lanes and five on the thread lane, spanning a
/// memtable switch, all made durable; returns the highest receipt sequence number.
fn filter_workload(setup: &Setup) -> u64 {
    let db = setup.open(config(1, 2), None);
    let mut seq_max = 0;
    for n in 0..10u32 {
        for pinned in 0..2 {
            let batch = put_batch(&pinned_key(pinned, n), &[n as u8; 100]);
            let receipt = db
                .write_pinned(pinned, &batch, Durability::Buffered)
                .unwrap();
            seq_max = seq_max.max(receipt.seq);
        }
        if n < 5 {
            let receipt = db
                .put(format!("t:{n}").as_bytes(), b"t", Durability::Buffered)
                .unwrap();
            seq_max = seq_max.max(receipt.seq);
        }
        if n == 6 {
            db.flush().unwrap(); // Records 0..=6 go to tables; 7..=9 stay in the WAL.
        }
    }
    db.sync().unwrap();
    drop(db); // A crash after the sync: nothing more is written.
    seq_max
}

#[test]
fn filter_replay_drops_a_lane_suffix_and_the_records_stay_gone() {
    for mode in [Mode::Ssd, Mode::Pmr] {
        let setup = Setup::new(mode);
        let seq_max = filter_workload(&setup);
        // Drop pinned lane 0's records from p0:008 on.
        let filter = Filter::new(|records| {
            records
                .iter()
                .map(|r| {
                    !(r.pinned == Some(0) && r.batch.ops().next().unwrap().1 >= &b"p0:008"[..])
                })
                .collect()
        });
        let db = setup.open(config(1, 2), Some(filter.clone()));
        assert_eq!(filter.calls.load(Ordering::SeqCst), 1);
        let offered = filter.offered();
        // Generation 2 holds records 7..=9 of each pinned lane, in lane order.
        let summary: Vec<(u16, Option<usize>, Vec<u8>)> = offered
            .iter()
            .map(|r| (r.lane, r.pinned, r.batch.ops().next().unwrap().1.to_vec()))
            .collect();
        let expected: Vec<(u16, Option<usize>, Vec<u8>)> = (0..2)
            .flat_map(|pinned| {
                (7..10).map(move |n| (1 + pinned as u16, Some(pinned), pinned_key(pinned, n)))
            })
            .collect();
        assert_eq!(summary, expected, "{mode:?}");
        assert!(offered
            .iter()
            .all(|r| r.generation == offered[0].generation));
        assert_eq!(db.stats().replay_dropped, 2, "{mode:?}");
        assert!(
            db.stats().last_seq >= seq_max,
            "{mode:?}: dropped records' numbers stay used"
        );
        let got = contents(&db);
        for n in 0..10 {
            assert_eq!(
                got.contains_key(&pinned_key(0, n)),
                n < 8,
                "{mode:?} p0:{n}"
            );
            assert!(got.contains_key(&pinned_key(1, n)), "{mode:?} p1:{n}");
        }
        assert_eq!(got.len(), 8 + 10 + 5);
        let fresh = db.put(b"after", b"x", Durability::Sync).unwrap();
        assert!(
            fresh.seq > seq_max,
            "{mode:?}: a sequence number was reused"
        );
        drop(db);
        // The next open offers only what was written since, and the dropped records stay
        // gone.
        let filter = Filter::keep_all();
        let db = setup.open(config(1, 2), Some(filter.clone()));
        let offered = filter.offered();
        assert_eq!(offered.len(), 1, "{mode:?}: {offered:?}");
        assert_eq!(offered[0].pinned, None);
        assert_eq!(offered[0].first_seq, fresh.seq);
        let got = contents(&db);
        assert!(!got.contains_key(&pinned_key(0, 8)) && !got.contains_key(&pinned_key(0, 9)));
        assert_eq!(got.len(), 8 + 10 + 5 + 1, "{mode:?}");
        assert_eq!(db.stats().replay_dropped, 0);
        db.close().unwrap();
    }
}

#[test]
fn dropping_every_record_still_moves_the_log_and_the_sequence_numbers_on() {
    for mode in [Mode::Ssd, Mode::Pmr] {
        let setup = Setup::new(mode);
        let db = setup.open(config(1, 1), None);
        let mut last = None;
        for n in 0..6u32 {
            let batch = put_batch(&pinned_key(0, n), b"v");
            last = Some(db.write_pinned(0, &batch, Durability::Sync).unwrap());
        }
        drop(db);
        let last = last.unwrap();
        let db = setup.open(config(1, 1), Some(Filter::new(|r| vec![false; r.len()])));
        assert_eq!(db.stats().replay_dropped, 6);
        assert!(contents(&db).is_empty());
        drop(db);
        // Nothing comes back, and the numbers of the dropped records stay used.
        let filter = Filter::keep_all();
        let db = setup.open(config(1, 1), Some(filter.clone()));
        assert!(filter.offered().is_empty(), "{mode:?}");
        assert!(contents(&db).is_empty());
        assert!(db.stats().last_seq >= last.seq, "{mode:?}");
        let fresh = db.put(b"k", b"v", Durability::Sync).unwrap();
        assert!(fresh.seq > last.seq);
    }
}

#[test]
#[should_panic(expected = "must be a prefix")]
fn a_replay_filter_that_keeps_a_record_after_a_dropped_one_panics() {
    let setup = Setup::new(Mode::Ssd);
    filter_workload(&setup);
    // Drops the first record of each lane and keeps the rest.
    let filter = Filter::new(|records| {
        let mut seen = Vec::new();
        records
            .iter()
            .map(|r| {
                let first = !seen.contains(&r.lane);
                seen.push(r.lane);
                !first
            })
            .collect()
    });
    let _ = MetaDb::open(setup.env(setup.device.clone(), Some(filter)), config(1, 2));
}
