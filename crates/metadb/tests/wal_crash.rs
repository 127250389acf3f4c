//! Scenario and crash tests of the two WALs (ssd mode on the device's WAL region, PMR mode
//! with a device backing region): round trips, rotation and release, space reuse,
//! `WalFull`, concurrency, per-lane persistence, and crash states checked against a model
//! of what was appended and acknowledged.
//!
//! Crash checks, at every crash state: recovery succeeds; per (generation, lane) it returns
//! a prefix of what was appended, byte for byte; every record whose persist (or rotation)
//! returned Ok before the crash is there; released generations are absent. Some states
//! are then reopened for a "second life" (new incarnation, possibly reused generation
//! numbers) whose own crash states are checked the same way, with the first life's lost
//! records required to stay lost.
//!
//! A failure prints the seed and the crash state (`d12 +14 ~15[0]`) to replay it.

use device::memory::MemoryBackend;
use device::recording::{
    CrashPolicy, CrashState, Event, Recording, RecordingBackend, RecordingHandle, TornWrite,
    WriteId,
};
use device::{Device, IoCause};
use format::constants::MIB;
use format::{Geometry, Region};
use metadb::wal::pmr::{CrashHook, PmrWal};
use metadb::wal::ssd::SsdWal;
use metadb::wal::{Wal, WalRecovery};
use metadb::{MetaDbError, WalPos};
use platform::Rng;
use pmr::{Pmr, PmrOptions};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

// ---------------------------------------------------------------------------------------
// The model.

type Key = (u64, u16);

/// Records `0..count` of `key` were acknowledged durable once device writes `0..covers`
/// had landed (0: unconditionally, e.g. a PMR persist).
#[derive(Debug, Clone, Copy)]
struct Ack {
    key: Key,
    count: u64,
    covers: u64,
}

#[derive(Debug, Clone, Default)]
struct Model {
    appended: BTreeMap<Key, Vec<Vec<u8>>>,
    acks: Vec<Ack>,
    released: u64,
    /// Released when this life began.
    released_base: u64,
    /// (device writes recorded when `release_through` was called, generation released).
    releases: Vec<(u64, u64)>,
}

impl Model {
    fn append(&mut self, pos: WalPos, payload: Vec<u8>) {
        let lane = self.appended.entry((pos.generation, pos.lane)).or_default();
        assert_eq!(
            lane.len() as u64,
            pos.lane_seq,
            "lane_seq out of order at {pos:?}"
        );
        lane.push(payload);
    }

    fn ack(&mut self, pos: WalPos, covers: u64) {
        self.acks.push(Ack {
            key: (pos.generation, pos.lane),
            count: pos.lane_seq + 1,
            covers,
        });
    }

    /// Every record of generations in `range` is acknowledged.
    fn ack_generations(&mut self, range: std::ops::RangeInclusive<u64>, covers: u64) {
        let keys: Vec<(Key, u64)> = self
            .appended
            .iter()
            .filter(|(k, _)| range.contains(&k.0))
            .map(|(k, v)| (*k, v.len() as u64))
            .collect();
        for (key, count) in keys {
            self.acks.push(Ack { key, count, covers });
        }
    }

    /// The model of a second life: the first life's recovered records are all it has
    /// (anything else it appended is lost for good), and they are durable.
    fn from_recovery(recovery: &WalRecovery, released: u64) -> Model {
        let mut model = Model {
            released,
            released_base: released,
            ..Model::default()
        };
        for r in &recovery.records {
            let pos = WalPos {
                lane: r.lane,
                generation: r.generation,
                lane_seq: r.lane_seq,
            };
            model.append(pos, r.payload.clone());
            model.ack(pos, 0);
        }
        model
    }

    /// The released generation a crash state's reader passes: the last release issued
    /// before some write that landed (a reused unit's write lands only after the release
    /// it depends on was made durable by the caller).
    fn released_for(&self, landed_max: Option<u64>) -> u64 {
        let landed_max = landed_max.map_or(-1, |w| w as i128);
        let issued = self
            .releases
            .iter()
            .filter(|(w, _)| i128::from(*w) <= landed_max)
            .map(|r| r.1);
        issued.max().unwrap_or(0).max(self.released_base)
    }

    fn check(
        &self,
        recovery: &WalRecovery,
        released: u64,
        landed: impl Fn(u64) -> bool,
    ) -> Result<(), String> {
        let mut got: BTreeMap<Key, u64> = BTreeMap::new();
        for r in &recovery.records {
            let key = (r.generation, r.lane);
            if r.generation <= released {
                return Err(format!(
                    "record {key:?}/{} of a released generation (<= {released})",
                    r.lane_seq
                ));
            }
            if r.generation > recovery.generation_max {
                return Err(format!(
                    "record generation {} above generation_max {}",
                    r.generation, recovery.generation_max
                ));
            }
            let next = got.entry(key).or_default();
            if r.lane_seq != *next {
                return Err(format!(
                    "{key:?}: lane_seq {} where {} was expected (not a prefix)",
                    r.lane_seq, next
                ));
            }
            match self
                .appended
                .get(&key)
                .and_then(|v| v.get(r.lane_seq as usize))
            {
                None => return Err(format!("{key:?}/{} was never appended", r.lane_seq)),
                Some(p) if *p != r.payload => {
                    return Err(format!("{key:?}/{} has a corrupt payload", r.lane_seq))
                }
                Some(_) => {}
            }
            *next += 1;
        }
        for ack in &self.acks {
            if ack.key.0 > released && landed(ack.covers) {
                let have = got.get(&ack.key).copied().unwrap_or(0);
                if have < ack.count {
                    return Err(format!(
                        "{:?}: {} records acknowledged (after write {}), {have} recovered",
                        ack.key, ack.count, ack.covers
                    ));
                }
            }
        }
        Ok(())
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap()
}

// ---------------------------------------------------------------------------------------
// A random workload against any WAL.

struct Workload {
    lanes: u16,
    payload_bytes_max: usize,
    /// One append in this many carries a payload of several 64 KiB units.
    big_one_in: u64,
    buffered: Vec<WalPos>,
}

/// What the workload needs from its environment.
struct Env<'a> {
    model: &'a Mutex<Model>,
    /// Device writes that must land for what was just acknowledged to be present.
    covers: &'a dyn Fn() -> u64,
    /// Device writes recorded so far.
    write_count: &'a dyn Fn() -> u64,
}

impl Workload {
    fn payload(&self, rng: &mut Rng) -> Vec<u8> {
        let len = if rng.chance(1, self.big_one_in) {
            100 * 1024 + rng.below(100 * 1024) as usize
        } else {
            rng.below(self.payload_bytes_max as u64 + 1) as usize
        };
        let mut p = vec![0u8; len];
        rng.fill(&mut p);
        p
    }

    fn append(&mut self, wal: &dyn Wal, env: &Env<'_>, rng: &mut Rng, lane: u16, sync: bool) {
        let payload = self.payload(rng);
        let mut full_count = 0;
        let pos = loop {
            match wal.append(lane, &payload) {
                Ok(pos) => break pos,
                Err(MetaDbError::WalFull) => {
                    full_count += 1;
                    assert!(full_count <= 2, "WalFull right after releasing everything");
                    self.make_room(wal, env);
                }
                Err(e) => panic!("append: {e}"),
            }
        };
        lock(env.model).append(pos, payload);
        if sync {
            wal.persist(&[pos]).unwrap();
            lock(env.model).ack(pos, (env.covers)());
        } else {
            self.buffered.push(pos);
        }
    }

    fn rotate(&mut self, wal: &dyn Wal, env: &Env<'_>, rng: &mut Rng) {
        let old = wal.generation();
        wal.rotate(old + 1 + rng.below(2)).unwrap();
        lock(env.model).ack_generations(0..=old, (env.covers)());
    }

    fn release(&mut self, wal: &dyn Wal, env: &Env<'_>, generation: u64) {
        {
            let mut model = lock(env.model);
            if generation <= model.released {
                return;
            }
            // The caller makes its released_through durable first.
            model.released = generation;
            let writes = (env.write_count)();
            model.releases.push((writes, generation));
        }
        wal.release_through(generation).unwrap();
    }

    /// What a caller does on `WalFull`: switch memtables and release the old ones.
    fn make_room(&mut self, wal: &dyn Wal, env: &Env<'_>) {
        let old = wal.generation();
        wal.rotate(old + 1).unwrap();
        lock(env.model).ack_generations(0..=old, (env.covers)());
        self.release(wal, env, old);
    }

    fn step(&mut self, wal: &dyn Wal, env: &Env<'_>, rng: &mut Rng) {
        let lane = rng.below(u64::from(self.lanes)) as u16;
        match rng.below(100) {
            0..=29 => self.append(wal, env, rng, lane, true),
            30..=59 => self.append(wal, env, rng, lane, false),
            60..=71 if !self.buffered.is_empty() => {
                let i = rng.below(self.buffered.len() as u64) as usize;
                let mut positions = vec![self.buffered.swap_remove(i)];
                if !self.buffered.is_empty() && rng.chance(1, 3) {
                    let j = rng.below(self.buffered.len() as u64) as usize;
                    positions.push(self.buffered.swap_remove(j));
                }
                wal.persist(&positions).unwrap();
                let covers = (env.covers)();
                let mut model = lock(env.model);
                for pos in positions {
                    model.ack(pos, covers);
                }
            }
            72..=75 => {
                let current = wal.generation();
                wal.persist_all().unwrap();
                lock(env.model).ack_generations(current..=current, (env.covers)());
            }
            76..=84 => self.rotate(wal, env, rng),
            85..=91 => {
                let released = lock(env.model).released;
                let current = wal.generation();
                if current - 1 > released {
                    let generation = released + 1 + rng.below(current - 1 - released);
                    self.release(wal, env, generation);
                }
            }
            _ => self.append(wal, env, rng, lane, true),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Devices.

/// A 2 MiB WAL region at 1 MiB on a 4 MiB device: small enough to wrap often.
const SMALL_REGION: Region = Region {
    start_block: 256,
    block_count: 512,
};
const SMALL_DEVICE_BYTES: u64 = 4 * MIB;
/// An 8 MiB WAL region (the smallest a geometry makes) at 1 MiB on a 10 MiB device.
const MEDIUM_REGION: Region = Region {
    start_block: 256,
    block_count: 2048,
};
const MEDIUM_DEVICE_BYTES: u64 = 10 * MIB;

fn recording_device(image: Vec<u8>, logical_block_bytes: u32) -> (Arc<Device>, RecordingHandle) {
    let (backend, handle) = RecordingBackend::new(image, logical_block_bytes);
    (Arc::new(Device::new(Box::new(backend))), handle)
}

fn memory_device(image: Vec<u8>, logical_block_bytes: u32) -> Arc<Device> {
    Arc::new(Device::new(Box::new(MemoryBackend::from_image(
        image,
        logical_block_bytes,
    ))))
}

/// The writes every flush recorded so far made durable: the highest `covers`, as in
/// `Recording::epochs`. Not the last flush's: concurrent flushes are recorded out of
/// order, and one whose `submit` began early may be recorded after a later, wider one
/// that a writer's acknowledgement already relied on.
fn flushed_prefix(handle: &RecordingHandle) -> u64 {
    handle
        .events()
        .iter()
        .filter_map(|e| match e {
            Event::Flush { covers } => Some(*covers),
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

/// The highest write id that landed (whole or torn) in `state`.
fn landed_max(state: &CrashState) -> Option<u64> {
    let prefix = state.durable_writes().checked_sub(1);
    let beyond = state.landed_beyond_prefix().map(|w| w.0).max();
    let torn = state.torn().iter().map(|t| t.write().0).max();
    prefix.max(beyond).max(torn)
}

fn pmr_memory(bytes: u64) -> Arc<Pmr> {
    Arc::new(Pmr::memory(bytes, PmrOptions::default()).unwrap())
}

/// A device crash now: everything flushed, plus a random subset of the writes that
/// completed since the last flush (the recording and the state).
fn device_crash_state(handle: &RecordingHandle, rng: &mut Rng) -> (Recording, CrashState) {
    let recording = handle.snapshot();
    let epoch = *recording.epochs().last().unwrap();
    let whole: Vec<WriteId> = (epoch.durable_writes..epoch.end_writes)
        .filter(|_| rng.chance(1, 2))
        .map(WriteId)
        .collect();
    let state = CrashState::new(epoch.durable_writes, whole, Vec::new());
    (recording, state)
}

// ---------------------------------------------------------------------------------------
// Round trips, release, reuse, WalFull.

fn fill(wal: &dyn Wal, rng: &mut Rng, lanes: u16, count: usize, model: &mut Model) {
    for i in 0..count {
        let lane = (i % usize::from(lanes)) as u16;
        let mut payload = vec![0u8; rng.below(3000) as usize];
        rng.fill(&mut payload);
        let pos = wal.append(lane, &payload).unwrap();
        model.append(pos, payload);
    }
}

#[test]
fn ssd_fresh_region_recovers_nothing() {
    for logical_block in [512, 4096] {
        let device = memory_device(vec![0; SMALL_DEVICE_BYTES as usize], logical_block);
        let (_, recovery) = SsdWal::recover(device, SMALL_REGION, 4, 0).unwrap();
        assert_eq!(recovery, WalRecovery::default());
    }
}

#[test]
fn ssd_round_trip_rotation_and_release() {
    for logical_block in [512, 4096] {
        let device = memory_device(vec![0; SMALL_DEVICE_BYTES as usize], logical_block);
        let mut rng = Rng::from_seed(7);
        let mut model = Model::default();
        let (wal, recovery) = SsdWal::open(device.clone(), SMALL_REGION, 4, 0, 1).unwrap();
        assert!(recovery.records.is_empty());
        for generation in 1..=3u64 {
            fill(&wal, &mut rng, 4, 150, &mut model);
            // A big record takes a multi-unit chunk.
            let big = vec![generation as u8; 150 * 1024];
            let pos = wal.append(1, &big).unwrap();
            model.append(pos, big);
            wal.rotate(generation + 1).unwrap();
        }
        fill(&wal, &mut rng, 4, 50, &mut model);
        wal.persist_all().unwrap();
        model.ack_generations(0..=4, 0);
        drop(wal);
        let (recovered, recovery) = SsdWal::recover(device.clone(), SMALL_REGION, 4, 0).unwrap();
        model.check(&recovery, 0, |_| true).unwrap();
        assert_eq!(recovery.records.len(), 3 * 151 + 50);
        assert_eq!(recovery.generation_max, 4);
        assert_eq!(recovery.dropped_after_hole, 0);
        // Release generations 1 and 2 in a new life: they disappear from recovery.
        let wal = recovered.start(5).unwrap();
        wal.release_through(2).unwrap();
        drop(wal);
        let (_, recovery) = SsdWal::recover(device, SMALL_REGION, 4, 2).unwrap();
        model.check(&recovery, 2, |_| true).unwrap();
        assert!(recovery.records.iter().all(|r| r.generation >= 3));
        assert_eq!(
            recovery
                .records
                .iter()
                .filter(|r| r.generation == 3)
                .count(),
            151
        );
        assert_eq!(recovery.generation_max, 4);
    }
}

#[test]
fn ssd_space_is_reused_after_release() {
    let device = memory_device(vec![0; SMALL_DEVICE_BYTES as usize], 512);
    let (wal, _) = SsdWal::open(device.clone(), SMALL_REGION, 4, 0, 1).unwrap();
    let mut rng = Rng::from_seed(8);
    let payload = vec![0xAB; 4000];
    let mut appended_bytes = 0u64;
    for generation in 1..=60u64 {
        for i in 0..100 {
            wal.append(i % 4, &payload[..rng.below(4000) as usize])
                .unwrap();
            appended_bytes += 4000;
        }
        wal.rotate(generation + 1).unwrap();
        wal.release_through(generation).unwrap();
    }
    assert!(
        appended_bytes > 10 * SMALL_REGION.size_bytes(),
        "{appended_bytes} bytes through a 2 MiB region"
    );
    wal.persist_all().unwrap();
    drop(wal);
    let (_, recovery) = SsdWal::recover(device, SMALL_REGION, 4, 60).unwrap();
    assert!(recovery.records.is_empty());
    assert!(recovery.generation_max >= 60);
}

/// `persist_all` (MetaDB's `sync`) racing `rotate` (a memtable switch): found by the VFS
/// simulator as "generation N not begun" when `rotate` published the new generation before
/// its lanes were in it.
#[test]
fn ssd_persist_all_races_rotate() {
    let device = memory_device(vec![0; SMALL_DEVICE_BYTES as usize], 512);
    let (wal, _) = SsdWal::open(device, SMALL_REGION, 4, 0, 1).unwrap();
    let rotating = std::sync::atomic::AtomicBool::new(true);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                while rotating.load(Ordering::SeqCst) {
                    wal.persist_all().unwrap();
                }
            });
        }
        s.spawn(|| {
            // A few records per generation (unbounded appends would fill the region
            // faster than the rotations release it: WalFull).
            let (mut i, mut generation, mut in_generation) = (0u16, 0, 0);
            while rotating.load(Ordering::SeqCst) {
                if wal.generation() != generation {
                    (generation, in_generation) = (wal.generation(), 0);
                }
                if in_generation < 4 {
                    wal.append(i % 4, &[0x5A; 100]).unwrap();
                    (i, in_generation) = (i.wrapping_add(1), in_generation + 1);
                } else {
                    std::thread::yield_now();
                }
            }
        });
        for generation in 1..=2000u64 {
            wal.append((generation % 4) as u16, &[0xA5; 100]).unwrap();
            wal.rotate(generation + 1).unwrap();
            wal.release_through(generation).unwrap();
        }
        rotating.store(false, Ordering::SeqCst);
    });
}

#[test]
fn ssd_wal_full_when_nothing_is_released() {
    let device = memory_device(vec![0; SMALL_DEVICE_BYTES as usize], 512);
    let (wal, _) = SsdWal::open(device.clone(), SMALL_REGION, 4, 0, 1).unwrap();
    let payload = vec![1u8; 8000];
    let mut appended = 0;
    let error = loop {
        match wal.append((appended % 4) as u16, &payload) {
            Ok(_) => appended += 1,
            Err(e) => break e,
        }
        if appended % 100 == 0 {
            wal.rotate(wal.generation() + 1).unwrap();
        }
        assert!(appended < 1000, "a 2 MiB region never filled");
    };
    assert!(matches!(error, MetaDbError::WalFull), "{error}");
    // 31 units of 8 records, less the partly filled chunks left at rotations.
    assert!(appended > 150, "{appended} records");
    let full_lane = (appended % 4) as u16;
    assert!(matches!(
        wal.append(full_lane, &payload),
        Err(MetaDbError::WalFull)
    ));
    // Releasing makes room again; everything still unreleased recovers.
    let current = wal.generation();
    wal.rotate(current + 1).unwrap();
    wal.release_through(current - 1).unwrap();
    wal.append(0, &payload).unwrap();
    wal.persist_all().unwrap();
    drop(wal);
    let (_, recovery) = SsdWal::recover(device, SMALL_REGION, 4, current - 1).unwrap();
    assert!(recovery.records.iter().all(|r| r.generation >= current));
    assert_eq!(recovery.records.len(), appended % 100 + 1);
}

fn pmr_from(image: &[u8]) -> Arc<Pmr> {
    Arc::new(Pmr::memory_from_image(image, PmrOptions::default()).unwrap())
}

#[test]
fn pmr_round_trip_rotation_release_and_migration() {
    let pmr = pmr_memory(2 * MIB);
    let device = memory_device(vec![0; MEDIUM_DEVICE_BYTES as usize], 512);
    let mut rng = Rng::from_seed(9);
    let mut model = Model::default();
    let (wal, recovery) =
        PmrWal::open(pmr.clone(), device.clone(), MEDIUM_REGION, 4, 0, 1).unwrap();
    assert_eq!(recovery, WalRecovery::default());
    // About 3 MB of entries through 1 MB halves: halves are migrated to the device.
    for generation in 1..=4u64 {
        fill(&wal, &mut rng, 4, 500, &mut model);
        wal.rotate(generation + 1).unwrap();
    }
    fill(&wal, &mut rng, 4, 100, &mut model);
    wal.persist_all().unwrap();
    model.ack_generations(0..=5, 0);
    assert!(
        device.counters().snapshot().cause(IoCause::Wal).write_bytes > MIB,
        "nothing migrated"
    );
    drop(wal);
    // Only what was persisted survives this crash image.
    let pmr = pmr_from(&pmr.crash_image_all_lost());
    let (recovered, recovery) =
        PmrWal::recover(pmr.clone(), device.clone(), MEDIUM_REGION, 4, 0).unwrap();
    model.check(&recovery, 0, |_| true).unwrap();
    assert_eq!(recovery.records.len(), 4 * 500 + 100);
    assert_eq!(recovery.generation_max, 5);
    assert_eq!(recovery.dropped_after_hole, 0);
    let wal = recovered.start(6).unwrap();
    wal.release_through(3).unwrap();
    drop(wal);
    let pmr = pmr_from(&pmr.crash_image_all_lost());
    let (_, recovery) = PmrWal::recover(pmr, device, MEDIUM_REGION, 4, 3).unwrap();
    model.check(&recovery, 3, |_| true).unwrap();
    assert_eq!(
        recovery
            .records
            .iter()
            .filter(|r| r.generation == 4)
            .count(),
        500
    );
    assert_eq!(recovery.records.len(), 600);
    assert_eq!(recovery.generation_max, 5, "generation 6 has no entries");
}

#[test]
fn pmr_space_is_reused_after_release() {
    let pmr = pmr_memory(2 * MIB);
    let device = memory_device(vec![0; SMALL_DEVICE_BYTES as usize], 512);
    let (wal, _) = PmrWal::open(pmr.clone(), device.clone(), SMALL_REGION, 4, 0, 1).unwrap();
    let mut rng = Rng::from_seed(10);
    let payload = vec![0xCD; 4000];
    let mut appended_bytes = 0u64;
    for generation in 1..=60u64 {
        for i in 0..100 {
            let pos = wal
                .append(i % 4, &payload[..rng.below(4000) as usize])
                .unwrap();
            if i % 7 == 0 {
                wal.persist(&[pos]).unwrap();
            }
            appended_bytes += 4000;
        }
        wal.rotate(generation + 1).unwrap();
        wal.release_through(generation).unwrap();
    }
    assert!(appended_bytes > 5 * (pmr.len() + SMALL_REGION.size_bytes()));
    assert_eq!(
        wal.free_slots(),
        511,
        "only the current segment holds a slot"
    );
    drop(wal);
    let (_, recovery) = PmrWal::recover(pmr, device, SMALL_REGION, 4, 60).unwrap();
    assert!(recovery.records.is_empty());
}

#[test]
fn pmr_wal_full_when_nothing_is_released() {
    let pmr = pmr_memory(2 * MIB);
    let device = memory_device(vec![0; SMALL_DEVICE_BYTES as usize], 512);
    let (wal, _) = PmrWal::open(pmr.clone(), device.clone(), SMALL_REGION, 4, 0, 1).unwrap();
    let payload = vec![2u8; 8000];
    let mut appended = 0usize;
    let error = loop {
        match wal.append((appended % 4) as u16, &payload) {
            Ok(_) => appended += 1,
            Err(e) => break e,
        }
        if appended % 100 == 0 {
            wal.rotate(wal.generation() + 1).unwrap();
        }
        assert!(
            appended < 2000,
            "2 MiB of PMR and 2 MiB of backing never filled"
        );
    };
    assert!(matches!(error, MetaDbError::WalFull), "{error}");
    // Three halves of 128 entries: the third fills while the second would have to be
    // migrated, and the backing region, holding the first, has no room for it.
    assert!(appended >= 3 * 128, "{appended} entries");
    assert!(matches!(wal.append(0, &payload), Err(MetaDbError::WalFull)));
    // Small entries still fit in the rest of the current half, and everything recovers.
    let current = wal.generation();
    wal.persist_all().unwrap();
    drop(wal);
    let (recovered, recovery) =
        PmrWal::recover(pmr.clone(), device.clone(), SMALL_REGION, 4, 0).unwrap();
    assert_eq!(recovery.records.len(), appended);
    assert_eq!(recovery.dropped_after_hole, 0);
    // A new life, after releasing all but the current generation, has room again.
    let wal = recovered.start(current + 1).unwrap();
    wal.release_through(current - 1).unwrap();
    for _ in 0..300 {
        wal.append(1, &payload).unwrap();
    }
}

// ---------------------------------------------------------------------------------------
// Concurrency.

const THREADS: usize = 8;
const CONCURRENT_APPENDS: usize = 150;

/// A record acknowledged by a concurrent writer: its position, payload, and the device
/// writes that had to land for the acknowledgement to hold.
type Acked = (WalPos, Vec<u8>, u64);

/// 8 threads append and persist synchronously, each on its own lane and on two shared
/// lanes; thread 0 also rotates now and then (4 generations, nothing released: the WAL
/// region must hold 40 lane chunks). Returns every acknowledged record.
fn concurrent_sync_appends(
    wal: Arc<dyn Wal>,
    covers: Arc<dyn Fn() -> u64 + Send + Sync>,
) -> Vec<Acked> {
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (wal, covers) = (wal.clone(), covers.clone());
            std::thread::spawn(move || {
                let mut rng = Rng::from_seed(100 + t as u64);
                let mut acked = Vec::new();
                for i in 0..CONCURRENT_APPENDS {
                    let lane = if i % 3 == 0 {
                        (THREADS + t % 2) as u16
                    } else {
                        t as u16
                    };
                    let mut payload = vec![0u8; rng.below(2000) as usize];
                    rng.fill(&mut payload);
                    let pos = wal.append(lane, &payload).unwrap();
                    wal.persist(&[pos]).unwrap();
                    acked.push((pos, payload, covers()));
                    if t == 0 && i % 40 == 39 {
                        let generation = wal.generation();
                        wal.rotate(generation + 1).unwrap();
                    }
                }
                acked
            })
        })
        .collect();
    threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect()
}

/// Every appended record was acknowledged, so the model's appended records are exactly
/// the acknowledged ones, with no gap in any lane.
fn concurrent_model(acked: &[Acked]) -> Model {
    let mut model = Model::default();
    let mut sorted: Vec<_> = acked.to_vec();
    sorted.sort_by_key(|(p, _, _)| (p.generation, p.lane, p.lane_seq));
    for (pos, payload, covers) in sorted {
        model.append(pos, payload);
        model.ack(pos, covers);
    }
    model
}

#[test]
fn ssd_concurrent_sync_appends_are_all_durable() {
    let (device, handle) = recording_device(vec![0; MEDIUM_DEVICE_BYTES as usize], 512);
    let (wal, _) = SsdWal::open(device.clone(), MEDIUM_REGION, THREADS + 2, 0, 1).unwrap();
    let wal: Arc<dyn Wal> = Arc::new(wal);
    let before = device.counters().snapshot();
    let covers_handle = handle.clone();
    let acked = concurrent_sync_appends(
        wal.clone(),
        Arc::new(move || flushed_prefix(&covers_handle)),
    );
    let wal_io = device
        .counters()
        .snapshot()
        .since(&before)
        .cause(IoCause::Wal);
    drop(wal);
    let model = concurrent_model(&acked);
    // At the flush each acknowledgement relied on, and at the end: what was acknowledged
    // by then is there.
    let recording = handle.snapshot();
    let mut points: Vec<u64> = acked.iter().map(|a| a.2).collect();
    points.sort_unstable();
    points.dedup();
    let step = points.len().div_ceil(60).max(1);
    let mut checked = 0;
    for &covers in points.iter().step_by(step).chain(points.last()) {
        let image = recording.image(&CrashState::durable_prefix(covers));
        let (_, recovery) =
            SsdWal::recover(memory_device(image, 512), MEDIUM_REGION, THREADS + 2, 0).unwrap();
        model
            .check(&recovery, 0, |c| c <= covers)
            .unwrap_or_else(|e| panic!("durable prefix d{covers}: {e}"));
        checked += 1;
    }
    let image = recording.image(&CrashState::durable_prefix(*points.last().unwrap()));
    let (_, recovery) =
        SsdWal::recover(memory_device(image, 512), MEDIUM_REGION, THREADS + 2, 0).unwrap();
    assert_eq!(recovery.records.len(), acked.len());
    // A flush per sync append at most, and one per rotation (thread 0 rotates every 40).
    let rotations = (CONCURRENT_APPENDS / 40) as u64;
    assert!(wal_io.flush_ops <= acked.len() as u64 + rotations);
    println!(
        "{} sync appends: {} device flushes, {} writes; {checked} flush points checked",
        acked.len(),
        wal_io.flush_ops,
        wal_io.write_ops
    );
}

#[test]
fn pmr_concurrent_sync_appends_are_all_durable() {
    let pmr = pmr_memory(2 * MIB);
    let (device, handle) = recording_device(vec![0; MEDIUM_DEVICE_BYTES as usize], 512);
    let (wal, _) = PmrWal::open(pmr.clone(), device, MEDIUM_REGION, THREADS + 2, 0, 1).unwrap();
    let wal: Arc<dyn Wal> = Arc::new(wal);
    let acked = concurrent_sync_appends(wal.clone(), Arc::new(|| 0));
    drop(wal);
    let recording = handle.snapshot();
    let image = recording.image(&CrashState::durable_prefix(flushed_prefix(&handle)));
    let (_, recovery) = PmrWal::recover(
        pmr_from(&pmr.crash_image_all_lost()),
        memory_device(image, 512),
        MEDIUM_REGION,
        THREADS + 2,
        0,
    )
    .unwrap();
    concurrent_model(&acked)
        .check(&recovery, 0, |_| true)
        .unwrap();
    assert_eq!(recovery.records.len(), acked.len());
}

/// A memory device whose writes and flushes take time, as on an SSD.
#[derive(Debug)]
struct SlowBackend {
    inner: MemoryBackend,
    write_delay: std::time::Duration,
    flush_delay: std::time::Duration,
}

struct SlowQueue<'a> {
    inner: Box<dyn device::BackendQueue + 'a>,
    backend: &'a SlowBackend,
    delay: std::time::Duration,
}

impl device::Backend for SlowBackend {
    fn info(&self) -> &device::DeviceInfo {
        device::Backend::info(&self.inner)
    }

    fn queue(&self) -> Result<Box<dyn device::BackendQueue + '_>, device::DeviceError> {
        let inner = device::Backend::queue(&self.inner)?;
        Ok(Box::new(SlowQueue {
            inner,
            backend: self,
            delay: std::time::Duration::ZERO,
        }))
    }
}

impl device::BackendQueue for SlowQueue<'_> {
    fn depth(&self) -> usize {
        self.inner.depth()
    }

    fn push(&mut self, request: device::IoRequest) -> Result<(), device::IoRequest> {
        let delay = match request.op {
            device::IoOp::Flush => self.backend.flush_delay,
            device::IoOp::Write { .. } => self.backend.write_delay,
            _ => std::time::Duration::ZERO,
        };
        self.delay = self.delay.max(delay);
        self.inner.push(request)
    }

    fn submit(&mut self, min_complete: usize) -> Result<(), device::DeviceError> {
        std::thread::sleep(std::mem::take(&mut self.delay));
        self.inner.submit(min_complete)
    }

    fn pop(&mut self) -> Option<device::IoCompletion> {
        self.inner.pop()
    }

    fn outstanding(&self) -> usize {
        self.inner.outstanding()
    }
}

/// With writes and flushes that take time, concurrent synchronous writers (some on shared
/// lanes) all recover, and none takes more than a write and a flush (a writer rides on a
/// lane write in flight that covers its record, and on a flush submitted after its write
/// completed; flushes that overlap in time are the kernel's to merge).
#[test]
fn ssd_concurrent_sync_writers_take_at_most_a_write_and_a_flush_each() {
    let backend = SlowBackend {
        inner: MemoryBackend::new(MEDIUM_DEVICE_BYTES, 512),
        write_delay: std::time::Duration::from_micros(300),
        flush_delay: std::time::Duration::from_millis(2),
    };
    let device = Arc::new(Device::new(Box::new(backend)));
    let (wal, _) = SsdWal::open(device.clone(), MEDIUM_REGION, THREADS + 2, 0, 1).unwrap();
    let wal: Arc<dyn Wal> = Arc::new(wal);
    let before = device.counters().snapshot();
    let acked = concurrent_sync_appends(wal.clone(), Arc::new(|| 0));
    let io = device
        .counters()
        .snapshot()
        .since(&before)
        .cause(IoCause::Wal);
    println!(
        "{} sync appends: {} device flushes, {} writes",
        acked.len(),
        io.flush_ops,
        io.write_ops
    );
    // Thread 0 rotates every 40 appends; a rotation persists every lane (a flush and a
    // write per lane at most).
    let rotations = (CONCURRENT_APPENDS / 40) as u64;
    let appends = acked.len() as u64;
    assert!(
        io.flush_ops <= appends + rotations,
        "{} flushes for {appends} sync appends and {rotations} rotations",
        io.flush_ops,
    );
    assert!(
        io.write_ops <= appends + rotations * (THREADS as u64 + 2),
        "{} writes for {appends} sync appends and {rotations} rotations",
        io.write_ops,
    );
    drop(wal);
    let (_, recovery) = SsdWal::recover(device, MEDIUM_REGION, THREADS + 2, 0).unwrap();
    concurrent_model(&acked)
        .check(&recovery, 0, |_| true)
        .unwrap();
}

// ---------------------------------------------------------------------------------------
// Per-lane persistence.

#[test]
fn ssd_persist_writes_only_the_named_lane() {
    let (device, handle) = recording_device(vec![0; SMALL_DEVICE_BYTES as usize], 512);
    let (wal, _) = SsdWal::open(device.clone(), SMALL_REGION, 2, 0, 1).unwrap();
    let a = wal.append(0, &[0xAA; 100]).unwrap();
    let b = wal.append(1, &[0xBB; 100]).unwrap();
    let before = device.counters().snapshot();
    wal.persist(&[a]).unwrap();
    let io = device
        .counters()
        .snapshot()
        .since(&before)
        .cause(IoCause::Wal);
    // Lane A's header sector and its one partly filled sector; one flush; nothing of B.
    assert_eq!((io.write_ops, io.write_bytes, io.flush_ops), (1, 1024, 1));
    let a2 = wal.append(0, &[0xA2; 100]).unwrap();
    let before = device.counters().snapshot();
    wal.persist(&[a2, a]).unwrap();
    let io = device
        .counters()
        .snapshot()
        .since(&before)
        .cause(IoCause::Wal);
    // Only the tail sector is rewritten.
    assert_eq!((io.write_ops, io.write_bytes, io.flush_ops), (1, 512, 1));
    // Persisting again costs nothing.
    let before = device.counters().snapshot();
    wal.persist(&[a2]).unwrap();
    assert_eq!(
        device
            .counters()
            .snapshot()
            .since(&before)
            .cause(IoCause::Wal)
            .write_ops,
        0
    );
    let image = handle
        .snapshot()
        .image(&CrashState::durable_prefix(flushed_prefix(&handle)));
    let (_, recovery) = SsdWal::recover(memory_device(image, 512), SMALL_REGION, 2, 0).unwrap();
    let ids: Vec<_> = recovery
        .records
        .iter()
        .map(|r| (r.lane, r.lane_seq))
        .collect();
    assert_eq!(ids, [(0, 0), (0, 1)], "lane B's record was not persisted");
    let _ = b;
}

#[test]
fn pmr_persist_writes_only_the_named_lane() {
    let pmr = pmr_memory(2 * MIB);
    let device = memory_device(vec![0; SMALL_DEVICE_BYTES as usize], 512);
    let (wal, _) = PmrWal::open(pmr.clone(), device.clone(), SMALL_REGION, 2, 0, 1).unwrap();
    let a = wal.append(0, &[0xAA; 100]).unwrap();
    let _b = wal.append(1, &[0xBB; 100]).unwrap();
    let a2 = wal.append(0, &[0xA2; 100]).unwrap();
    let before = pmr.counters().snapshot();
    let device_before = device.counters().snapshot();
    wal.persist(&[a]).unwrap();
    let io = pmr.counters().snapshot().since(&before).cause(IoCause::Wal);
    assert_eq!(
        (io.write_bytes, io.flush_ops),
        (192, 1),
        "one 192-byte entry, one persist"
    );
    assert_eq!(
        device
            .counters()
            .snapshot()
            .since(&device_before)
            .total()
            .write_ops,
        0
    );
    let image = pmr.crash_image_all_lost();
    let (_, recovery) =
        PmrWal::recover(pmr_from(&image), device.clone(), SMALL_REGION, 2, 0).unwrap();
    let ids: Vec<_> = recovery
        .records
        .iter()
        .map(|r| (r.lane, r.lane_seq))
        .collect();
    assert_eq!(ids, [(0, 0)]);
    let _ = a2;
}

/// A generation number reused after a crash that lost every trace of it: the records the
/// first life left behind its lost chunk header are never taken as the second life's,
/// even where they line up exactly with the second life's records in the same unit.
#[test]
fn ssd_stale_records_of_a_lost_incarnation_stay_lost() {
    let (device, handle) = recording_device(vec![0; SMALL_DEVICE_BYTES as usize], 512);
    let (wal, _) = SsdWal::open(device, SMALL_REGION, 1, 0, 1).unwrap();
    // 512-byte records: 7 fill the first 4 KiB block after the header sector.
    let record = |life: u8, seq: u64| vec![life ^ seq as u8; 480];
    let mut last = None;
    for seq in 0..20 {
        last = Some(wal.append(0, &record(1, seq)).unwrap());
    }
    wal.persist(&[last.unwrap()]).unwrap();
    drop(wal);
    // W0 is the region header; W1 the chunk: its first block (header, records 0-6) is
    // lost, blocks 1 and 2 (records 7-19) land.
    let recording = handle.snapshot();
    assert_eq!(recording.writes().len(), 2);
    let state = CrashState::new(1, [], [TornWrite::new(WriteId(1), [1, 2])]);
    let image = recording.image(&state);
    let (recovered, recovery) =
        SsdWal::recover(memory_device(image.clone(), 512), SMALL_REGION, 1, 0).unwrap();
    assert!(recovery.records.is_empty());
    assert_eq!(
        recovered.generation_max(),
        0,
        "nothing of generation 1 survived"
    );
    // Second life: generation 1 again, the same unit, 7 records ending where the first
    // life's record 7 starts.
    let device = memory_device(image, 512);
    let (wal, _) = SsdWal::open(device.clone(), SMALL_REGION, 1, 0, 1).unwrap();
    for seq in 0..7 {
        let pos = wal.append(0, &record(2, seq)).unwrap();
        assert_eq!(pos.generation, 1);
    }
    wal.persist_all().unwrap();
    drop(wal);
    let (_, recovery) = SsdWal::recover(device, SMALL_REGION, 1, 0).unwrap();
    assert_eq!(
        recovery.records.len(),
        7,
        "the first life's records 7.. came back"
    );
    for (seq, r) in recovery.records.iter().enumerate() {
        assert!(
            r.payload == record(2, seq as u64),
            "record {seq} is not the second life's"
        );
    }
}

/// A half is reused only after its entries are migrated (and flushed) and it is zeroed:
/// a lost entry at the start of the reused half must not expose the old first entry's
/// TxB, whose longer length would make recovery skip the next, persisted entry.
#[test]
fn pmr_reused_half_is_migrated_and_zeroed_first() {
    let pmr = pmr_memory(2 * MIB);
    let (device, handle) = recording_device(vec![0; MEDIUM_DEVICE_BYTES as usize], 512);
    let (wal, _) = PmrWal::open(pmr.clone(), device, MEDIUM_REGION, 2, 0, 1).unwrap();
    let big = |seq: u64| vec![seq as u8; 100 * 1024];
    // Ten 100 KiB entries fill each half (1012 KiB) of a 2 MiB PMR.
    for seq in 0..20 {
        let pos = wal.append(0, &big(seq)).unwrap();
        if seq == 9 {
            // The first half's entries are durable on the PMR.
            wal.persist(&[pos]).unwrap();
        }
    }
    assert_eq!(
        handle.write_count(),
        1,
        "nothing migrated yet (W0: region header)"
    );
    // Does not fit the rest of the second half: the first half is migrated, zeroed and
    // this entry lands at its start. Never persisted (lane 1).
    wal.append(1, &vec![0xEE; 50 * 1024]).unwrap();
    assert!(handle.write_count() > 1, "the first half was migrated");
    let sync = wal.append(0, &[0x55; 1000]).unwrap();
    wal.persist(&[sync]).unwrap();
    drop(wal);
    let image = handle
        .snapshot()
        .image(&CrashState::durable_prefix(flushed_prefix(&handle)));
    let (_, recovery) = PmrWal::recover(
        pmr_from(&pmr.crash_image_all_lost()),
        memory_device(image, 512),
        MEDIUM_REGION,
        2,
        0,
    )
    .unwrap();
    let lane0: Vec<u64> = recovery
        .records
        .iter()
        .filter(|r| r.lane == 0)
        .map(|r| r.lane_seq)
        .collect();
    assert_eq!(lane0, (0..21).collect::<Vec<_>>());
    assert!(
        recovery.records.iter().all(|r| r.lane == 0),
        "lane 1's entry was never persisted"
    );
    assert_eq!(recovery.records[20].payload, vec![0x55; 1000]);
}

// ---------------------------------------------------------------------------------------
// Crash states: ssd mode on the recording device.

#[derive(Debug, Clone, Copy)]
struct SsdCase {
    seed: u64,
    region: Region,
    device_bytes: u64,
    logical_block: u32,
    lanes: u16,
    ops: usize,
    states_max: usize,
    /// Every this many crash states, run and check a second life (0: never).
    second_life_every: usize,
}

fn run_workload(
    wal: &dyn Wal,
    model: &Mutex<Model>,
    handle: Option<&RecordingHandle>,
    seed: u64,
    lanes: u16,
    ops: usize,
) {
    let covers = || handle.map_or(0, flushed_prefix);
    let write_count = || handle.map_or(0, RecordingHandle::write_count);
    let env = Env {
        model,
        covers: &covers,
        write_count: &write_count,
    };
    let mut workload = Workload {
        lanes,
        payload_bytes_max: 1500,
        big_one_in: 40,
        buffered: Vec::new(),
    };
    let mut rng = Rng::from_seed(seed);
    for _ in 0..ops {
        workload.step(wal, &env, &mut rng);
    }
}

fn ssd_crash_case(case: SsdCase) {
    let (device, handle) =
        recording_device(vec![0; case.device_bytes as usize], case.logical_block);
    let (wal, _) = SsdWal::open(device, case.region, usize::from(case.lanes), 0, 1).unwrap();
    let model = Mutex::new(Model::default());
    run_workload(&wal, &model, Some(&handle), case.seed, case.lanes, case.ops);
    drop(wal);
    let model = model.into_inner().unwrap();
    let checked = check_ssd_states(&handle.snapshot(), &model, case, "first life");
    println!("{case:?}: {checked} crash states checked");
}

/// Checks the crash states of `recording` against `model`; returns how many.
fn check_ssd_states(recording: &Recording, model: &Model, case: SsdCase, life: &str) -> usize {
    let policy = CrashPolicy {
        states_max: case.states_max,
        ..CrashPolicy::with_seed(case.seed)
    };
    let states = recording.crash_states(&policy);
    assert!(!states.states.is_empty());
    for (i, state) in states.states.iter().enumerate() {
        let fail = |what: String| -> ! {
            panic!("seed {} {life}: crash state {state}: {what}", case.seed);
        };
        let released = model.released_for(landed_max(state));
        let device = Arc::new(recording.device(state, case.logical_block));
        let lanes = usize::from(case.lanes);
        let (recovered, recovery) = SsdWal::recover(device, case.region, lanes, released)
            .unwrap_or_else(|e| fail(format!("recovery failed: {e}")));
        model
            .check(&recovery, released, |covers| {
                state.durable_writes() >= covers
            })
            .unwrap_or_else(|e| fail(e));
        if case.second_life_every > 0 && i % case.second_life_every == 0 {
            let next = recovered.generation_max().max(released) + 1;
            let image = recording.image(state);
            ssd_second_life(image, &recovery, released, next, case, &state.to_string());
        }
    }
    states.states.len()
}

/// Opens the crash image in a new life (new incarnation; the next generation may reuse a
/// number the first life used but lost every trace of), runs a short workload and checks
/// the new life's crash states, the first life's recovered records included.
fn ssd_second_life(
    image: Vec<u8>,
    first: &WalRecovery,
    released: u64,
    next: u64,
    case: SsdCase,
    first_state: &str,
) {
    let (device, handle) = recording_device(image, case.logical_block);
    let (wal, again) =
        SsdWal::open(device, case.region, usize::from(case.lanes), released, next).unwrap();
    assert_eq!(&again, first, "recovery is not repeatable");
    let model = Mutex::new(Model::from_recovery(first, released));
    run_workload(
        &wal,
        &model,
        Some(&handle),
        case.seed ^ next,
        case.lanes,
        30,
    );
    drop(wal);
    let model = model.into_inner().unwrap();
    let case = SsdCase {
        states_max: 12,
        second_life_every: 0,
        seed: case.seed ^ next,
        ..case
    };
    check_ssd_states(
        &handle.snapshot(),
        &model,
        case,
        &format!("second life after {first_state}"),
    );
}

#[test]
fn ssd_crash_states_small_region() {
    for seed in 1..=3 {
        ssd_crash_case(SsdCase {
            seed,
            region: SMALL_REGION,
            device_bytes: SMALL_DEVICE_BYTES,
            logical_block: 512,
            lanes: 4,
            ops: 250,
            states_max: 250,
            second_life_every: 25,
        });
    }
}

#[test]
fn ssd_crash_states_logical_block_4096() {
    ssd_crash_case(SsdCase {
        seed: 11,
        region: SMALL_REGION,
        device_bytes: SMALL_DEVICE_BYTES,
        logical_block: 4096,
        lanes: 3,
        ops: 250,
        states_max: 250,
        second_life_every: 25,
    });
}

#[test]
fn ssd_crash_states_64mib_geometry() {
    let geometry = Geometry::compute(64 * MIB, 1).unwrap();
    ssd_crash_case(SsdCase {
        seed: 21,
        region: geometry.wal,
        device_bytes: geometry.device_size_bytes,
        logical_block: 512,
        lanes: 8,
        ops: 300,
        states_max: 120,
        second_life_every: 0,
    });
}

// ---------------------------------------------------------------------------------------
// Crash states: PMR mode (PMR crash model, recording device for the backing region).

const PMR_LANES: u16 = 4;

/// Takes crash images (at crash-point hooks and between operations) and checks them.
struct PmrChecker {
    pmr: Arc<Pmr>,
    handle: RecordingHandle,
    model: Arc<Mutex<Model>>,
    rng: Mutex<Rng>,
    seed: u64,
    checks: AtomicUsize,
    second_life_every: usize,
    life: String,
}

impl PmrChecker {
    fn check(&self, point: &str) {
        let model = lock(&self.model);
        let mut rng = lock(&self.rng);
        let n = self.checks.fetch_add(1, Ordering::SeqCst);
        let pmr_image = self.pmr.crash_image(&mut rng);
        let (recording, crash) = device_crash_state(&self.handle, &mut rng);
        let device_state = crash.to_string();
        let fail = |what: String| -> ! {
            panic!(
                "seed {} {}: check {n} at {point}, device state {device_state}: {what}",
                self.seed, self.life
            );
        };
        let released = model.released;
        let (recovered, recovery) = PmrWal::recover(
            pmr_from(&pmr_image),
            Arc::new(recording.device(&crash, 512)),
            SMALL_REGION,
            usize::from(PMR_LANES),
            released,
        )
        .unwrap_or_else(|e| fail(format!("recovery failed: {e}")));
        model
            .check(&recovery, released, |_| true)
            .unwrap_or_else(|e| fail(e));
        if self.second_life_every > 0 && n % self.second_life_every == 0 {
            let next = recovered.generation_max().max(released) + 1;
            let seed = self.seed ^ (n as u64) << 20;
            pmr_life(
                pmr_image,
                recording.image(&crash),
                Model::from_recovery(&recovery, released),
                Some(&recovery),
                next,
                seed,
                40,
                0,
            );
        }
    }
}

/// Runs `ops` random operations on a PMR WAL over these images, checking crash images at
/// every crash point and between operations. Returns the number of checks.
#[expect(
    clippy::too_many_arguments,
    reason = "a test driver; each argument is one knob of a life"
)]
fn pmr_life(
    pmr_image: Vec<u8>,
    device_image: Vec<u8>,
    model: Model,
    first: Option<&WalRecovery>,
    next: u64,
    seed: u64,
    ops: usize,
    second_life_every: usize,
) -> usize {
    let pmr = pmr_from(&pmr_image);
    let (device, handle) = recording_device(device_image, 512);
    let released = model.released;
    let model = Arc::new(Mutex::new(model));
    let checker = Arc::new(PmrChecker {
        pmr: pmr.clone(),
        handle: handle.clone(),
        model: model.clone(),
        rng: Mutex::new(Rng::from_seed(seed ^ 0xC0FF_EE00)),
        seed,
        checks: AtomicUsize::new(0),
        second_life_every,
        life: if first.is_some() {
            "second life".into()
        } else {
            "first life".into()
        },
    });
    let (mut recovered, again) =
        PmrWal::recover(pmr, device, SMALL_REGION, usize::from(PMR_LANES), released).unwrap();
    if let Some(first) = first {
        assert_eq!(&again, first, "recovery is not repeatable");
    }
    let hook_checker = checker.clone();
    let hook: CrashHook = Arc::new(move |point| hook_checker.check(point));
    recovered.set_crash_hook(Some(hook));
    let wal = recovered.start(next).unwrap();
    let covers = || 0;
    let write_count = || handle.write_count();
    let env = Env {
        model: &model,
        covers: &covers,
        write_count: &write_count,
    };
    // Heavy enough to fill a 1 MiB half every ~60 appends: halves are switched and
    // migrated often.
    let mut workload = Workload {
        lanes: PMR_LANES,
        payload_bytes_max: 20_000,
        big_one_in: 15,
        buffered: Vec::new(),
    };
    let mut rng = Rng::from_seed(seed);
    for _ in 0..ops {
        workload.step(&wal, &env, &mut rng);
        checker.check("between operations");
    }
    wal.set_crash_hook(None);
    checker.checks.load(Ordering::SeqCst)
}

#[test]
fn pmr_crash_model_random_workloads() {
    for seed in 1..=3u64 {
        let pmr_image = vec![0u8; 2 * MIB as usize];
        let device_image = vec![0u8; SMALL_DEVICE_BYTES as usize];
        let checks = pmr_life(
            pmr_image,
            device_image,
            Model::default(),
            None,
            1,
            seed,
            300,
            40,
        );
        println!("seed {seed}: {checks} PMR crash images checked");
        assert!(checks > 300);
    }
}
