//! The manifest against a reference model: round trips across reopen, many half
//! switches, the snapshot bound, device failures, corruption, and recovery at every
//! enumerated crash state of the recording device (docs/FORMAT.md §5.4).
//!
//! The model folds edits on its own (a map of live tables and three counters), so the
//! manifest's fold is checked, not reused.

use device::memory::MemoryBackend;
use device::recording::{CrashPolicy, FaultPlan, RecordingBackend, RecordingHandle};
use device::Device;
use format::{Region, SegmentNo};
use metadb::manifest::{Manifest, ManifestState, VersionEdit};
use metadb::table::{TableId, TableMeta};
use metadb::types::{InternalKey, ValueKind};
use metadb::MetaDbError;
use platform::Rng;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

const SECTOR: u32 = 512;
const BLOCK: u64 = 4096;

/// The format's region: 4 MiB at block 256 of an 8 MiB image.
const FULL_REGION: Region = Region {
    start_block: 256,
    block_count: 1024,
};
const FULL_IMAGE_BYTES: usize = 8 << 20;
/// A small region (16 KiB halves) at block 16 of a 1 MiB image, to switch halves often.
const SMALL_REGION: Region = Region {
    start_block: 16,
    block_count: 8,
};
const SMALL_IMAGE_BYTES: usize = 1 << 20;

// ---- The model ----

#[derive(Debug, Clone, PartialEq, Eq)]
struct Model {
    tables: BTreeMap<TableId, (u32, TableMeta)>,
    flushed_generation: u64,
    last_seq: u64,
    next_table_id: u64,
    cursors: BTreeMap<u32, Vec<u8>>,
}

impl Model {
    fn new() -> Model {
        Model {
            tables: BTreeMap::new(),
            flushed_generation: 0,
            last_seq: 0,
            next_table_id: 1,
            cursors: BTreeMap::new(),
        }
    }

    fn apply(&mut self, edit: &VersionEdit) {
        for (level, id) in &edit.removed {
            let (l, _) = self
                .tables
                .remove(id)
                .expect("model: removed table is live");
            assert_eq!(l, *level);
        }
        for (level, t) in &edit.added {
            assert!(self.tables.insert(t.id, (*level, t.clone())).is_none());
            self.next_table_id = self.next_table_id.max(t.id.0 + 1);
        }
        self.flushed_generation = edit.flushed_generation.unwrap_or(self.flushed_generation);
        self.last_seq = edit.last_seq.unwrap_or(self.last_seq);
        self.next_table_id = self.next_table_id.max(edit.next_table_id.unwrap_or(0));
        for (level, key) in &edit.compaction_cursors {
            self.cursors.insert(*level, key.clone());
        }
    }

    /// What the manifest's state says, in model form.
    fn of(state: &ManifestState) -> Model {
        Model {
            tables: state
                .tables()
                .map(|(l, t)| (t.id, (l, t.clone())))
                .collect(),
            flushed_generation: state.flushed_generation(),
            last_seq: state.last_seq(),
            next_table_id: state.next_table_id(),
            cursors: state.compaction_cursors().clone(),
        }
    }
}

/// The model after each prefix of `edits`: `[0]` is empty, `[i]` after i edits.
fn prefixes(edits: &[VersionEdit]) -> Vec<Model> {
    let mut models = vec![Model::new()];
    for edit in edits {
        let mut next = models.last().expect("non-empty").clone();
        next.apply(edit);
        models.push(next);
    }
    models
}

// ---- Edit generator ----

/// Random flush-like, compaction-like and trivial-move edits that keep the version
/// invariants: every table's keys start with its own id, so no two tables overlap and
/// any level will do. A removed table's segment is reused by later edits.
struct EditGen {
    rng: Rng,
    next_id: u64,
    live: BTreeMap<TableId, (u32, TableMeta)>,
    free_segments: BTreeSet<u32>,
    next_segment: u32,
    generation: u64,
    seq: u64,
    key_suffix_max: u64,
    /// Beyond this many live tables, edits merge tables (remove more than they add).
    live_max: usize,
}

impl EditGen {
    fn new(seed: u64, key_suffix_max: u64, live_max: usize) -> EditGen {
        EditGen {
            rng: Rng::from_seed(seed),
            next_id: 1,
            live: BTreeMap::new(),
            free_segments: BTreeSet::new(),
            next_segment: 0,
            generation: 0,
            seq: 0,
            key_suffix_max,
            live_max,
        }
    }

    fn key(&mut self, id: u64, mark: u8) -> Vec<u8> {
        let mut key = format!("k{id:010}").into_bytes();
        key.push(mark);
        let suffix = self.rng.below(self.key_suffix_max + 1) as usize;
        key.extend(std::iter::repeat_n(b'.', suffix));
        key
    }

    fn new_table(&mut self) -> TableMeta {
        let id = self.next_id;
        self.next_id += 1;
        let segment = self.free_segments.pop_first().unwrap_or_else(|| {
            self.next_segment += 1;
            self.next_segment - 1
        });
        TableMeta {
            id: TableId(id),
            segment: SegmentNo(segment),
            len_bytes: 4096 * (1 + self.rng.below(512) as u32),
            entries: self.rng.below(10_000),
            smallest: InternalKey::new(self.key(id, b'a'), self.rng.below(1 << 40), ValueKind::Put),
            largest: InternalKey::new(
                self.key(id, b'z'),
                self.rng.below(1 << 40),
                ValueKind::Delete,
            ),
        }
    }

    /// Removes up to `count` tables of `level`; returns their metas.
    fn remove(&mut self, edit: &mut VersionEdit, level: u32, count: usize) -> Vec<TableMeta> {
        let ids: Vec<TableId> = self
            .live
            .iter()
            .filter(|(_, (l, _))| *l == level)
            .map(|(id, _)| *id)
            .take(count)
            .collect();
        let mut removed = Vec::new();
        for id in ids {
            let (_, meta) = self.live.remove(&id).expect("live");
            edit.removed.push((level, id));
            removed.push(meta);
        }
        removed
    }

    fn add(&mut self, edit: &mut VersionEdit, level: u32) {
        let t = self.new_table();
        self.live.insert(t.id, (level, t.clone()));
        edit.added.push((level, t));
    }

    fn next(&mut self) -> VersionEdit {
        let mut edit = VersionEdit::default();
        let mut freed = Vec::new();
        if self.live.len() >= self.live_max {
            // Merge four tables of the fullest level into one below it (or beside them,
            // in the last level).
            let fullest = (0..7u32)
                .max_by_key(|&l| self.live.values().filter(|(tl, _)| *tl == l).count())
                .unwrap_or(0);
            freed.extend(self.remove(&mut edit, fullest, 4));
            self.add(&mut edit, (fullest + 1).min(6));
            edit.next_table_id = Some(self.next_id);
            self.free_segments.extend(freed.iter().map(|t| t.segment.0));
            return edit;
        }
        match self.rng.below(10) {
            0..=4 => {
                self.add(&mut edit, 0);
                self.generation += 1;
                self.seq += 1 + self.rng.below(1000);
                edit.flushed_generation = Some(self.generation);
                edit.last_seq = Some(self.seq);
                edit.next_table_id = Some(self.next_id);
            }
            5..=7 => {
                let level = self.rng.below(4) as u32;
                let count = 1 + self.rng.below(3) as usize;
                freed.extend(self.remove(&mut edit, level, count));
                let count = self.rng.below(3) as usize;
                freed.extend(self.remove(&mut edit, level + 1, count));
                for _ in 0..1 + self.rng.below(3) {
                    self.add(&mut edit, level + 1);
                }
                let cursor = self.key(self.next_id, b'z');
                edit.compaction_cursors.push((level, cursor));
                edit.next_table_id = Some(self.next_id);
            }
            8 => {
                let level = self.rng.below(5) as u32;
                for t in self.remove(&mut edit, level, 1) {
                    self.live.insert(t.id, (level + 1, t.clone()));
                    edit.added.push((level + 1, t));
                }
            }
            _ => {
                self.seq += 1;
                edit.last_seq = Some(self.seq);
            }
        }
        self.free_segments.extend(freed.iter().map(|t| t.segment.0));
        edit
    }
}

fn generate(seed: u64, count: usize, key_suffix_max: u64, live_max: usize) -> Vec<VersionEdit> {
    let mut gen = EditGen::new(seed, key_suffix_max, live_max);
    (0..count).map(|_| gen.next()).collect()
}

// ---- Devices ----

fn memory_device(bytes: usize) -> Arc<Device> {
    Arc::new(Device::new(Box::new(MemoryBackend::new(
        bytes as u64,
        SECTOR,
    ))))
}

fn recording_device(image: Vec<u8>) -> (Arc<Device>, RecordingHandle) {
    let (backend, handle) = RecordingBackend::new(image, SECTOR);
    (Arc::new(Device::new(Box::new(backend))), handle)
}

fn device_of(image: Vec<u8>) -> Arc<Device> {
    Arc::new(Device::new(Box::new(MemoryBackend::from_image(
        image, SECTOR,
    ))))
}

fn open(device: &Arc<Device>, region: Region) -> (Manifest, ManifestState) {
    Manifest::open(Arc::clone(device), region).expect("manifest opens")
}

// ---- Tests ----

#[test]
fn a_zeroed_region_opens_empty_and_remembers_its_first_edit() {
    let device = memory_device(SMALL_IMAGE_BYTES);
    let (manifest, state) = open(&device, SMALL_REGION);
    assert_eq!(state, ManifestState::default());
    assert_eq!(state.next_table_id(), 1);
    assert_eq!(manifest.position(), None);
    let edits = generate(1, 1, 8, 50);
    manifest.apply(&edits[0]).unwrap();
    let position = manifest.position().expect("a half is in use");
    assert_eq!(
        (position.half, position.epoch, position.records),
        (0, 1, 1),
        "the first edit is a snapshot"
    );
    drop(manifest);
    let (_, state) = open(&device, SMALL_REGION);
    assert_eq!(Model::of(&state), prefixes(&edits)[1]);
}

#[test]
fn many_edits_round_trip_across_reopens() {
    let device = memory_device(FULL_IMAGE_BYTES);
    let edits = generate(2, 600, 24, 200);
    let models = prefixes(&edits);
    let (mut manifest, _) = open(&device, FULL_REGION);
    for (i, edit) in edits.iter().enumerate() {
        manifest.apply(edit).unwrap();
        assert_eq!(
            Model::of(&manifest.state()),
            models[i + 1],
            "in memory after edit {i}"
        );
        if i % 97 == 0 {
            drop(manifest);
            let (reopened, state) = open(&device, FULL_REGION);
            assert_eq!(Model::of(&state), models[i + 1], "reopened after edit {i}");
            manifest = reopened;
        }
    }
    let position = manifest.position().unwrap();
    assert_eq!(
        position.records as usize,
        edits.len(),
        "one snapshot then one record per edit"
    );
    drop(manifest);
    let (_, state) = open(&device, FULL_REGION);
    assert_eq!(Model::of(&state), models[edits.len()]);
    state
        .version()
        .expect("the recovered state is a valid version");
}

#[test]
fn switching_halves_many_times_keeps_the_folded_state() {
    // (region, image, edits, key suffix, live tables, fewest switches): the full region
    // with ~1.3 KiB tables (snapshots of up to ~400 KiB) and 400-byte edits.
    for (region, image, count, suffix, live_max, switches_min) in [
        (SMALL_REGION, SMALL_IMAGE_BYTES, 3000, 16, 40, 50),
        (FULL_REGION, FULL_IMAGE_BYTES, 12000, 600, 300, 2),
    ] {
        let device = memory_device(image);
        let edits = generate(3, count, suffix, live_max);
        let models = prefixes(&edits);
        let (manifest, _) = open(&device, region);
        let mut epochs = BTreeSet::new();
        for (i, edit) in edits.iter().enumerate() {
            manifest.apply(edit).unwrap();
            let p = manifest.position().unwrap();
            assert_eq!(p.half as u64, (p.epoch - 1) % 2, "halves alternate");
            epochs.insert(p.epoch);
            if i % 500 == 0 {
                let (_, state) = open(&device, region);
                assert_eq!(Model::of(&state), models[i + 1], "reopened after edit {i}");
            }
        }
        assert!(
            epochs.len() > switches_min,
            "only {} epochs in {region:?}",
            epochs.len()
        );
        assert_eq!(
            epochs.len() as u64,
            *epochs.last().unwrap(),
            "epochs count up by one"
        );
        drop(manifest);
        let (_, state) = open(&device, region);
        assert_eq!(Model::of(&state), models[edits.len()], "{region:?}");
    }
}

#[test]
fn a_state_outgrowing_a_half_is_refused_and_nothing_changes() {
    let device = memory_device(SMALL_IMAGE_BYTES);
    let (manifest, _) = open(&device, SMALL_REGION);
    // Tables with 1024-byte keys: about 2 KiB each in a snapshot, 12 KiB of room.
    let mut gen = EditGen::new(4, 1010, usize::MAX);
    let mut model = Model::new();
    let refused = loop {
        let mut edit = VersionEdit::default();
        gen.add(&mut edit, 0);
        match manifest.apply(&edit) {
            Ok(()) => model.apply(&edit),
            Err(e) => break (e, edit),
        }
        assert!(model.tables.len() < 100, "the half never filled");
    };
    assert!(matches!(refused.0, MetaDbError::NoSpace), "{}", refused.0);
    assert_eq!(
        Model::of(&manifest.state()),
        model,
        "a refused edit changes nothing"
    );
    assert!(manifest.state().snapshot_record_bytes() <= manifest.snapshot_bytes_max());
    // The manifest still works: drop tables to make room, then reopen.
    let removing: Vec<(u32, TableId)> = model.tables.keys().take(3).map(|id| (0, *id)).collect();
    let shrink = VersionEdit {
        removed: removing,
        ..VersionEdit::default()
    };
    manifest.apply(&shrink).unwrap();
    model.apply(&shrink);
    drop(manifest);
    let (_, state) = open(&device, SMALL_REGION);
    assert_eq!(Model::of(&state), model);
}

#[test]
#[should_panic(expected = "does not apply")]
fn an_edit_that_does_not_apply_is_a_bug() {
    let device = memory_device(SMALL_IMAGE_BYTES);
    let (manifest, _) = open(&device, SMALL_REGION);
    let _ = manifest.apply(&VersionEdit {
        removed: vec![(0, TableId(5))],
        ..VersionEdit::default()
    });
}

/// The number of edits the recovered state must hold at least: every edit all of whose
/// writes are in the state's durable prefix (in particular every acknowledged one).
fn required_edits(writes_after: &[u64], durable_writes: u64) -> usize {
    writes_after
        .iter()
        .take_while(|&&w| w <= durable_writes)
        .count()
}

/// Recovers `image`, checks it holds the model after some prefix of at least `required`
/// edits, then goes on: two new tables, then edits until the log has moved to the other
/// half and one more (a crash in a switch may have left a snapshot of the very epoch
/// the next switch uses). A reopen must see all of it. Returns the prefix length.
fn check_recovery(
    image: Vec<u8>,
    region: Region,
    models: &[Model],
    required: usize,
    label: &str,
) -> usize {
    let device = device_of(image);
    let (manifest, state) = Manifest::open(Arc::clone(&device), region)
        .unwrap_or_else(|e| panic!("{label}: open fails: {e}"));
    let got = Model::of(&state);
    let Some(k) = (required..models.len()).find(|&k| models[k] == got) else {
        let older = (0..required).find(|&k| models[k] == got);
        panic!("{label}: recovered state is no model prefix >= {required} (matches older prefix {older:?}): {got:?}");
    };
    let mut expected = got;
    let mut apply = |edit: VersionEdit| {
        manifest
            .apply(&edit)
            .unwrap_or_else(|e| panic!("{label}: apply after recovery fails: {e}"));
        expected.apply(&edit);
    };
    for j in 0..2u64 {
        let id = 1_000_000 + j;
        let table = TableMeta {
            id: TableId(id),
            segment: SegmentNo(1_000_000 + j as u32),
            len_bytes: 4096,
            entries: 1,
            smallest: InternalKey::new(format!("z{id}a").into_bytes(), 1, ValueKind::Put),
            largest: InternalKey::new(format!("z{id}z").into_bytes(), 1, ValueKind::Put),
        };
        apply(VersionEdit {
            added: vec![(0, table)],
            ..VersionEdit::default()
        });
    }
    // Cursor edits of ~700 bytes fill the half without growing the snapshot much.
    let epoch = manifest.position().expect("edits were applied").epoch;
    let mut applied_after_switch = 0;
    for i in 0..5000u32 {
        let key = format!("{i:0700}").into_bytes();
        apply(VersionEdit {
            compaction_cursors: vec![(6, key)],
            ..VersionEdit::default()
        });
        applied_after_switch += u32::from(manifest.position().expect("in use").epoch > epoch);
        if applied_after_switch == 2 {
            break;
        }
    }
    assert_eq!(
        applied_after_switch, 2,
        "{label}: the log never switched halves"
    );
    drop(manifest);
    let (_, state) = Manifest::open(device, region)
        .unwrap_or_else(|e| panic!("{label}: second open fails: {e}"));
    assert_eq!(Model::of(&state), expected, "{label}: edits after recovery");
    k
}

/// What one recorded run found.
struct CrashRun {
    /// How many crash states recovered each prefix length (of this run's edits).
    recovered: BTreeMap<usize, usize>,
    skipped_count: u64,
    /// The image after the whole run, and the manifest's epoch then.
    final_image: Vec<u8>,
    final_epoch: u64,
}

/// Applies `edits` on a recording device started from `image` (whose manifest holds
/// `base`) and checks recovery at the policy's crash states.
fn crash_test(
    image: Vec<u8>,
    region: Region,
    base: &Model,
    edits: &[VersionEdit],
    policy: &CrashPolicy,
) -> CrashRun {
    let (device, handle) = recording_device(image);
    let (manifest, state) = open(&device, region);
    assert_eq!(&Model::of(&state), base);
    let mut models = vec![base.clone()];
    let mut writes_after = Vec::with_capacity(edits.len());
    for edit in edits {
        manifest.apply(edit).unwrap();
        writes_after.push(handle.write_count());
        let mut next = models.last().unwrap().clone();
        next.apply(edit);
        models.push(next);
    }
    let final_epoch = manifest.position().expect("edits were applied").epoch;
    let recording = handle.snapshot();
    let states = recording.crash_states(policy);
    let mut recovered: BTreeMap<usize, usize> = BTreeMap::new();
    for state in &states.states {
        let required = required_edits(&writes_after, state.durable_writes());
        let label = format!("crash state `{state}` (policy seed {})", policy.seed);
        let k = check_recovery(recording.image(state), region, &models, required, &label);
        *recovered.entry(k).or_default() += 1;
    }
    CrashRun {
        recovered,
        skipped_count: states.skipped_count,
        final_image: recording.image_after_all(),
        final_epoch,
    }
}

#[test]
fn every_crash_state_recovers_a_whole_prefix_of_the_edits() {
    // Small halves hold a few dozen edits, and snapshots span two or three 4 KiB blocks,
    // so the run switches halves several times and snapshot writes tear. It is recorded
    // in windows of 30 edits, each starting from the image the last one left, so every
    // window's crash states are enumerated in full.
    let edits = generate(5, 300, 60, 40);
    let mut image = vec![0; SMALL_IMAGE_BYTES];
    let mut base = Model::new();
    let (mut states_count, mut epoch) = (0, 0);
    for (w, window) in edits.chunks(30).enumerate() {
        let policy = CrashPolicy {
            states_max: 600,
            ..CrashPolicy::with_seed(w as u64)
        };
        let run = crash_test(image, SMALL_REGION, &base, window, &policy);
        assert_eq!(run.skipped_count, 0, "window {w}: states skipped");
        assert_eq!(
            run.recovered.len(),
            window.len() + 1,
            "window {w}: every prefix is some crash state"
        );
        states_count += run.recovered.values().sum::<usize>();
        for edit in window {
            base.apply(edit);
        }
        (image, epoch) = (run.final_image, run.final_epoch);
    }
    eprintln!("{states_count} crash states; the run ended in epoch {epoch}");
    assert!(epoch >= 6, "only {epoch} epochs: too few half switches");
}

#[test]
fn crashes_around_a_large_snapshot_switch_recover_a_whole_prefix() {
    // Fill most of the first 2 MiB half without checking crashes, so the checked run
    // holds a switch whose snapshot spans dozens of 4 KiB blocks (torn versions included).
    let edits = generate(6, 2200, 900, 120);
    let (device, handle) = recording_device(vec![0; FULL_IMAGE_BYTES]);
    let (manifest, _) = open(&device, FULL_REGION);
    let mut base = Model::new();
    let mut split = None;
    for (i, edit) in edits.iter().enumerate() {
        manifest.apply(edit).unwrap();
        base.apply(edit);
        if manifest.position().unwrap().used_bytes + 24 * 1024 > 2 << 20 {
            split = Some(i + 1);
            break;
        }
    }
    let split = split.expect("the edits fill the first half");
    assert_eq!(manifest.position().unwrap().epoch, 1);
    drop(manifest);
    let rest = &edits[split..split + 30];
    let policy = CrashPolicy {
        states_max: 400,
        ..CrashPolicy::with_seed(6)
    };
    let run = crash_test(handle.current_image(), FULL_REGION, &base, rest, &policy);
    assert_eq!(run.final_epoch, 2, "the checked run switches halves once");
    assert_eq!(run.skipped_count, 0);
    assert_eq!(
        run.recovered.len(),
        rest.len() + 1,
        "every prefix is some crash state"
    );
}

#[test]
fn a_failed_write_or_flush_turns_the_manifest_read_only() {
    let edits = generate(7, 120, 24, 30);
    let models = prefixes(&edits);
    for plan in [
        FaultPlan::FailWrite { nth: 1 },
        FaultPlan::FailFlush { nth: 1 },
        FaultPlan::FailWrite { nth: 45 },
        FaultPlan::FailFlush { nth: 46 },
        FaultPlan::FailFlush { nth: 47 },
        FaultPlan::FailWrite { nth: 90 },
    ] {
        let (device, handle) = recording_device(vec![0; SMALL_IMAGE_BYTES]);
        let (manifest, _) = open(&device, SMALL_REGION);
        handle.set_fault(plan);
        let mut acknowledged = 0;
        let mut failed = false;
        for edit in &edits {
            match manifest.apply(edit) {
                Ok(()) => {
                    assert!(!failed, "{plan:?}: an edit succeeded after a failure");
                    acknowledged += 1;
                }
                Err(MetaDbError::ReadOnly(_)) => {
                    assert!(failed, "{plan:?}: read-only before any failure")
                }
                Err(e) => {
                    assert!(!failed, "{plan:?}: a second device error: {e}");
                    failed = true;
                }
            }
        }
        assert!(failed, "{plan:?} never triggered");
        assert_eq!(
            Model::of(&manifest.state()),
            models[acknowledged],
            "{plan:?}: memory holds what was acknowledged"
        );
        drop(manifest);
        handle.set_fault(FaultPlan::None);
        let k = check_recovery(
            handle.current_image(),
            SMALL_REGION,
            &models,
            acknowledged,
            &format!("{plan:?}"),
        );
        assert!(
            k <= acknowledged + 1,
            "{plan:?}: recovered {k} edits, {acknowledged} acknowledged"
        );
    }
}

/// Flips one byte of `image` at `offset` and returns the image.
fn flipped(mut image: Vec<u8>, offset: u64) -> Vec<u8> {
    image[offset as usize] ^= 0x20;
    image
}

#[test]
fn damage_to_the_current_half_is_corruption_or_a_shorter_log() {
    let edits = generate(8, 100, 8, 30);
    let models = prefixes(&edits);
    let (device, handle) = recording_device(vec![0; SMALL_IMAGE_BYTES]);
    let (manifest, _) = open(&device, SMALL_REGION);
    for edit in &edits {
        manifest.apply(edit).unwrap();
    }
    let position = manifest.position().unwrap();
    assert!(position.epoch >= 2 && position.records >= 3, "{position:?}");
    drop(manifest);
    let image = handle.current_image();
    let half_start =
        SMALL_REGION.start_byte() + u64::from(position.half) * (SMALL_REGION.size_bytes() / 2);
    let is_corruption = |image: Vec<u8>| {
        matches!(
            Manifest::open(device_of(image), SMALL_REGION),
            Err(MetaDbError::Corruption { .. })
        )
    };
    assert!(
        is_corruption(flipped(image.clone(), half_start + 20)),
        "damaged header"
    );
    assert!(
        is_corruption(flipped(image.clone(), half_start + BLOCK + 40)),
        "damaged snapshot"
    );
    // Damage to the last record's bytes ends the log before it.
    let (_, state) = Manifest::open(
        device_of(flipped(image.clone(), half_start + position.used_bytes - 1)),
        SMALL_REGION,
    )
    .unwrap();
    assert_eq!(Model::of(&state), models[edits.len() - 1]);
    // Damage to the dead half changes nothing.
    let other_start =
        SMALL_REGION.start_byte() + u64::from(1 - position.half) * (SMALL_REGION.size_bytes() / 2);
    let (_, state) = Manifest::open(
        device_of(flipped(image, other_start + BLOCK + 40)),
        SMALL_REGION,
    )
    .unwrap();
    assert_eq!(Model::of(&state), models[edits.len()]);
}

#[test]
fn damage_before_an_intact_record_is_refused_and_only_the_last_record_reads_as_torn() {
    let edits = generate(9, 40, 8, 30);
    let models = prefixes(&edits);
    let device = memory_device(FULL_IMAGE_BYTES);
    let (manifest, _) = open(&device, FULL_REGION);
    for edit in &edits {
        manifest.apply(edit).unwrap();
    }
    let position = manifest.position().unwrap();
    drop(manifest);
    let image = device
        .read(
            0,
            device::AlignedBuf::zeroed(FULL_IMAGE_BYTES),
            platform::IoCause::Tool,
        )
        .unwrap()
        .to_vec();
    let half_start =
        FULL_REGION.start_byte() + u64::from(position.half) * (FULL_REGION.size_bytes() / 2);
    let (mut damaged, mut torn) = (0, 0);
    for at in (BLOCK..position.used_bytes).step_by(37) {
        match Manifest::open(
            device_of(flipped(image.clone(), half_start + at)),
            FULL_REGION,
        ) {
            Err(MetaDbError::Damaged(c)) => {
                assert!(c.what.contains("manifest record"), "{c}");
                damaged += 1;
            }
            // The snapshot named by the header.
            Err(MetaDbError::Corruption { .. }) => {}
            Ok((_, state)) => {
                assert_eq!(
                    Model::of(&state),
                    models[edits.len() - 1],
                    "byte {at}: damage before the last record was taken for a torn tail"
                );
                torn += 1;
            }
            Err(e) => panic!("byte {at}: {e}"),
        }
    }
    assert!(damaged > 10 && torn > 0, "{damaged} damaged, {torn} torn");
}

#[test]
fn a_zeroed_header_over_appended_edits_is_refused() {
    zeroed_header_refused(generate(10, 5, 8, 30));
}

/// Records longer than the part of a headless half that is read first (64 KiB): an edit
/// adding 60 tables with keys of up to 1,000 bytes.
#[test]
fn a_zeroed_header_over_long_records_is_refused() {
    let mut gen = EditGen::new(10, 1000, 1000);
    let mut long = VersionEdit::default();
    for _ in 0..60 {
        gen.add(&mut long, 0);
    }
    long.next_table_id = Some(gen.next_id);
    let mut edits = vec![long];
    edits.extend((0..4).map(|_| gen.next()));
    zeroed_header_refused(edits);
}

fn zeroed_header_refused(edits: Vec<VersionEdit>) {
    let device = memory_device(FULL_IMAGE_BYTES);
    let (manifest, _) = open(&device, FULL_REGION);
    for edit in &edits {
        manifest.apply(edit).unwrap();
    }
    let position = manifest.position().unwrap();
    assert!(position.records >= 2, "{position:?}");
    drop(manifest);
    let mut image = device
        .read(
            0,
            device::AlignedBuf::zeroed(FULL_IMAGE_BYTES),
            platform::IoCause::Tool,
        )
        .unwrap()
        .to_vec();
    let half_start =
        FULL_REGION.start_byte() + u64::from(position.half) * (FULL_REGION.size_bytes() / 2);
    image[half_start as usize..half_start as usize + 512].fill(0);
    match Manifest::open(device_of(image), FULL_REGION) {
        Err(MetaDbError::Damaged(c)) => assert!(c.what.contains("half header"), "{c}"),
        other => panic!(
            "a zeroed header over edits opened as {:?}",
            other.map(|(_, s)| Model::of(&s))
        ),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The worked example of docs/FORMAT.md §5.4, byte for byte: a fresh region, one flush
/// edit (a snapshot in half 0, epoch 1), then a trivial move (an edit record).
#[test]
fn golden_bytes_of_a_first_snapshot_and_an_edit() {
    let (device, handle) = recording_device(vec![0; SMALL_IMAGE_BYTES]);
    let (manifest, _) = open(&device, SMALL_REGION);
    let table = TableMeta {
        id: TableId(1),
        segment: SegmentNo(7),
        len_bytes: 8192,
        entries: 3,
        smallest: InternalKey::new(b"a".to_vec(), 5, ValueKind::Put),
        largest: InternalKey::new(b"b".to_vec(), 4, ValueKind::Delete),
    };
    let flush = VersionEdit {
        added: vec![(0, table.clone())],
        flushed_generation: Some(1),
        last_seq: Some(5),
        next_table_id: Some(2),
        ..VersionEdit::default()
    };
    let trivial_move = VersionEdit {
        removed: vec![(0, TableId(1))],
        added: vec![(1, table)],
        compaction_cursors: vec![(0, b"b".to_vec())],
        ..VersionEdit::default()
    };
    manifest.apply(&flush).unwrap();
    manifest.apply(&trivial_move).unwrap();
    let image = handle.current_image();
    let half = SMALL_REGION.start_byte() as usize;
    let header = hex(&image[half..half + 64]);
    let records = &image[half + 4096..half + 4096 + 512];
    let header_fields = [
        ("magic", "415547454d4e4600"),
        ("format_version", "01000000"),
        ("half", "00000000"),
        ("epoch", "0100000000000000"),
        ("half_bytes", "0040000000000000"),
        ("snapshot_len", "5e000000"),
        ("snapshot_crc", "a72eb1c1"),
        ("reserved", "0000000000000000000000000000000000000000"),
        ("header_crc", "8f44271f"),
    ];
    let record_fields = [
        ("snapshot payload_len", "5e000000"),
        ("snapshot crc", "a72eb1c1"),
        ("snapshot epoch", "0100000000000000"),
        ("snapshot index", "00000000"),
        ("snapshot prev_crc", "00000000"),
        ("snapshot kind", "01"),
        ("snapshot reserved", "00000000000000"),
        ("snapshot flags", "07000000"),
        ("snapshot removed_count", "00000000"),
        ("snapshot added_count", "01000000"),
        ("snapshot cursor_count", "00000000"),
        ("snapshot flushed_generation", "0100000000000000"),
        ("snapshot last_seq", "0500000000000000"),
        ("snapshot next_table_id", "0200000000000000"),
        ("snapshot table table_id", "0100000000000000"),
        ("snapshot table entries", "0300000000000000"),
        ("snapshot table smallest_seq", "0500000000000000"),
        ("snapshot table largest_seq", "0400000000000000"),
        ("snapshot table level", "00000000"),
        ("snapshot table segment", "07000000"),
        ("snapshot table len_bytes", "00200000"),
        ("snapshot table smallest_key_len", "0100"),
        ("snapshot table largest_key_len", "0100"),
        ("snapshot table smallest_kind", "01"),
        ("snapshot table largest_kind", "00"),
        ("snapshot table reserved", "0000"),
        ("snapshot table smallest_key", "61"),
        ("snapshot table largest_key", "62"),
        ("edit payload_len", "73000000"),
        ("edit crc", "d6f0b485"),
        ("edit epoch", "0100000000000000"),
        ("edit index", "01000000"),
        ("edit prev_crc", "a72eb1c1"),
        ("edit kind", "02"),
        ("edit reserved", "00000000000000"),
        ("edit flags", "00000000"),
        ("edit removed_count", "01000000"),
        ("edit added_count", "01000000"),
        ("edit cursor_count", "01000000"),
        ("edit flushed_generation", "0000000000000000"),
        ("edit last_seq", "0000000000000000"),
        ("edit next_table_id", "0000000000000000"),
        ("edit removed level", "00000000"),
        ("edit removed table_id", "0100000000000000"),
        ("edit table table_id", "0100000000000000"),
        ("edit table entries", "0300000000000000"),
        ("edit table smallest_seq", "0500000000000000"),
        ("edit table largest_seq", "0400000000000000"),
        ("edit table level", "01000000"),
        ("edit table segment", "07000000"),
        ("edit table len_bytes", "00200000"),
        ("edit table smallest_key_len", "0100"),
        ("edit table largest_key_len", "0100"),
        ("edit table smallest_kind", "01"),
        ("edit table largest_kind", "00"),
        ("edit table reserved", "0000"),
        ("edit table smallest_key", "61"),
        ("edit table largest_key", "62"),
        ("edit cursor level", "00000000"),
        ("edit cursor key_len", "0100"),
        ("edit cursor reserved", "0000"),
        ("edit cursor key", "62"),
    ];
    let golden = |fields: &[(&str, &str)]| fields.iter().map(|(_, v)| *v).collect::<String>();
    assert_eq!(header, golden(&header_fields), "{header_fields:#?}");
    assert_eq!(
        hex(&records[..126 + 147]),
        golden(&record_fields),
        "{record_fields:#?}"
    );
    assert!(
        records[126 + 147..].iter().all(|&b| b == 0),
        "zeros after the last record"
    );
}
