//! Randomized model tests of space management: the shared pool and a domain's segment
//! information run seeded random operations next to a simple reference model, and every
//! step is checked against it. A failing run names its seed; replay it by putting the seed
//! in the `SEEDS` range.

use engine::space::pool::{CheckpointCut, DiscardBatch, PoolConfig, SpacePool};
use engine::space::seginfo::SegInfo;
use engine::space::victim::{self, Policy, SegmentUse};
use engine::space::{Owner, SpaceError};
use format::summary::SegmentKind;
use format::{DomainId, Geometry, SegmentNo};
use platform::{ManualClock, Rng};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

const SEEDS: std::ops::Range<u64> = 1..41;
const STEPS: usize = 1500;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Model {
    Free,
    InUse(Owner),
    /// Released by the domain as its n-th release.
    Pending(DomainId, u64),
    /// Freed, not yet handed to the caller in a batch.
    Queued,
    /// Handed out in a discard batch.
    Discarding,
}

struct PoolRun {
    seed: u64,
    rng: Rng,
    pool: SpacePool,
    config: PoolConfig,
    domains: u16,
    state: Vec<Model>,
    releases: u64,
    /// Cuts taken and not yet committed, with the release count when each was taken.
    cuts: Vec<(CheckpointCut, u64)>,
    batches: Vec<DiscardBatch>,
}

impl PoolRun {
    fn new(seed: u64) -> PoolRun {
        let mut rng = Rng::from_seed(seed);
        let size = if rng.chance(1, 4) { 1 << 30 } else { 64 << 20 };
        let geometry = Geometry::compute(size, 1 + rng.below(4) as u32).unwrap();
        let config = PoolConfig {
            reserve_segments: rng.below(5) as u32,
            metadb_headroom: 0,
            discard: rng.chance(1, 2),
        };
        // Some runs start from recovery with segments already owned.
        let mut state = vec![Model::Free; geometry.segment_count as usize];
        let mut in_use = Vec::new();
        for (s, slot) in state.iter_mut().enumerate() {
            if rng.chance(1, 8) {
                let owner = random_owner(&mut rng, geometry.domain_count as u16);
                *slot = Model::InUse(owner);
                in_use.push((SegmentNo(s as u32), owner));
            }
        }
        let pool = SpacePool::recover(geometry, config, &in_use).expect("valid in-use list");
        PoolRun {
            seed,
            rng,
            pool,
            config,
            domains: geometry.domain_count as u16,
            state,
            releases: 0,
            cuts: Vec::new(),
            batches: Vec::new(),
        }
    }

    fn count(&self, f: impl Fn(&Model) -> bool) -> u32 {
        self.state.iter().filter(|s| f(s)).count() as u32
    }

    fn free(&self) -> u32 {
        self.count(|s| *s == Model::Free)
    }

    fn freed(&mut self, s: SegmentNo) {
        self.state[s.0 as usize] = if self.config.discard {
            Model::Queued
        } else {
            Model::Free
        };
    }

    fn queued_to_batch(&mut self, batch: &DiscardBatch, step: usize) {
        let expect: BTreeSet<SegmentNo> = (0..self.state.len())
            .filter(|&i| self.state[i] == Model::Queued)
            .map(|i| SegmentNo(i as u32))
            .collect();
        let got: BTreeSet<SegmentNo> = batch.segments().iter().copied().collect();
        assert_eq!(
            got.len(),
            batch.segments().len(),
            "seed {} step {step}: duplicate in batch",
            self.seed
        );
        assert_eq!(got, expect, "seed {} step {step}: discard batch", self.seed);
        for s in got {
            self.state[s.0 as usize] = Model::Discarding;
        }
    }

    fn allocated(
        &mut self,
        got: Result<SegmentNo, SpaceError>,
        owner: Owner,
        keep: u32,
        step: usize,
    ) {
        let seed = self.seed;
        if self.free() <= keep {
            // A short pool frees queued segments without their discard.
            for m in self.state.iter_mut() {
                if *m == Model::Queued {
                    *m = Model::Free;
                }
            }
        }
        let free = self.free();
        match got {
            Ok(s) => {
                assert!(
                    free > keep,
                    "seed {seed} step {step}: allocated with {free} free, keeping {keep}"
                );
                assert_eq!(
                    self.state[s.0 as usize],
                    Model::Free,
                    "seed {seed} step {step}: handed out {s}, which is not free"
                );
                self.state[s.0 as usize] = Model::InUse(owner);
            }
            Err(SpaceError::NoSpace {
                free: f, reserve, ..
            }) => {
                assert!(
                    free <= keep,
                    "seed {seed} step {step}: NoSpace with {free} free, keeping {keep}"
                );
                assert_eq!(
                    (f, reserve),
                    (free, keep),
                    "NoSpace names what the allocation keeps"
                );
            }
            Err(e) => panic!("seed {seed} step {step}: {e}"),
        }
    }

    fn step(&mut self, step: usize) {
        match self.rng.below(10) {
            0..=2 => {
                let owner = random_owner(&mut self.rng, self.domains);
                let got = self.pool.allocate(owner);
                self.allocated(got, owner, self.config.reserve_segments, step);
            }
            3 => {
                let d = DomainId(self.rng.below(u64::from(self.domains)) as u16);
                let got = self.pool.allocate_for_gc(d);
                self.allocated(got, Owner::Domain(d), 0, step);
            }
            4 | 5 => {
                let used: Vec<usize> = (0..self.state.len())
                    .filter(|&i| matches!(self.state[i], Model::InUse(_)))
                    .collect();
                if used.is_empty() {
                    return;
                }
                let i = used[self.rng.below(used.len() as u64) as usize];
                let Model::InUse(owner) = self.state[i] else {
                    unreachable!()
                };
                self.pool.release(SegmentNo(i as u32), owner);
                match owner {
                    Owner::Domain(d) => {
                        self.state[i] = Model::Pending(d, self.releases);
                        self.releases += 1;
                    }
                    Owner::MetaDb => self.freed(SegmentNo(i as u32)),
                }
            }
            6 => {
                let d = DomainId(self.rng.below(u64::from(self.domains)) as u16);
                let cut = self.pool.checkpoint_cut(d);
                self.cuts.push((cut, self.releases));
            }
            7 => {
                if self.cuts.is_empty() {
                    return;
                }
                let (cut, releases) = self
                    .cuts
                    .swap_remove(self.rng.below(self.cuts.len() as u64) as usize);
                for i in 0..self.state.len() {
                    if let Model::Pending(d, n) = self.state[i] {
                        if d == cut.domain() && n < releases {
                            self.freed(SegmentNo(i as u32));
                        }
                    }
                }
                let batch = self.pool.checkpoint_committed(cut);
                self.queued_to_batch(&batch, step);
                self.batches.push(batch);
            }
            8 => {
                let batch = self.pool.take_discards();
                self.queued_to_batch(&batch, step);
                self.batches.push(batch);
            }
            _ => {
                if self.batches.is_empty() {
                    return;
                }
                let batch = self
                    .batches
                    .swap_remove(self.rng.below(self.batches.len() as u64) as usize);
                for s in batch.segments() {
                    self.state[s.0 as usize] = Model::Free;
                }
                self.pool.discard_done(batch);
            }
        }
    }

    fn check(&self, step: usize) {
        let stats = self.pool.stats();
        let model = (
            self.free(),
            self.count(|s| matches!(s, Model::InUse(_))),
            self.count(|s| matches!(s, Model::Pending(..))),
            self.count(|s| matches!(s, Model::Queued | Model::Discarding)),
        );
        assert_eq!(
            (stats.free, stats.in_use, stats.pending, stats.discarding),
            model,
            "seed {} step {step}: counts",
            self.seed
        );
        let in_use: Vec<(SegmentNo, Owner)> = (0..self.state.len())
            .filter_map(|i| match self.state[i] {
                Model::InUse(o) => Some((SegmentNo(i as u32), o)),
                _ => None,
            })
            .collect();
        assert_eq!(
            self.pool.in_use(),
            in_use,
            "seed {} step {step}: owners",
            self.seed
        );
    }

    fn finish(mut self) {
        for batch in std::mem::take(&mut self.batches) {
            self.pool.discard_done(batch);
        }
    }
}

fn random_owner(rng: &mut Rng, domains: u16) -> Owner {
    if rng.chance(1, 4) {
        Owner::MetaDb
    } else {
        Owner::Domain(DomainId(rng.below(u64::from(domains)) as u16))
    }
}

#[test]
fn pool_matches_its_model() {
    for seed in SEEDS {
        let mut run = PoolRun::new(seed);
        run.check(0);
        for step in 1..=STEPS {
            run.step(step);
            run.check(step);
        }
        run.finish();
    }
}

/// The model of one segment: kind, valid blocks, last write time.
type SegModel = BTreeMap<SegmentNo, (SegmentKind, BTreeSet<u32>, u64)>;

fn assert_seginfo_matches(seed: u64, step: usize, t: &SegInfo, model: &SegModel) {
    assert_eq!(t.segment_count(), model.len(), "seed {seed} step {step}");
    for ((s, info), (ms, (kind, valid, modified))) in t.iter().zip(model) {
        assert_eq!(s, *ms, "seed {seed} step {step}");
        assert_eq!(info.kind(), *kind, "seed {seed} step {step} segment {s}");
        assert_eq!(
            info.valid_blocks() as usize,
            valid.len(),
            "seed {seed} step {step} segment {s}"
        );
        assert!(
            info.valid().eq(valid.iter().copied()),
            "seed {seed} step {step} segment {s}"
        );
        assert_eq!(
            info.modified_ns(),
            *modified,
            "seed {seed} step {step} segment {s}"
        );
    }
    let total: usize = model.values().map(|(_, v, _)| v.len()).sum();
    assert_eq!(
        t.valid_blocks_total(),
        total as u64,
        "seed {seed} step {step}"
    );
}

#[test]
fn seginfo_matches_its_model_and_survives_encoding() {
    const SEGMENTS: u32 = 40;
    for seed in SEEDS {
        let mut rng = Rng::from_seed(seed);
        let mut clock = Arc::new(ManualClock::new(rng.below(1 << 40)));
        let domain = DomainId(rng.below(16) as u16);
        let mut t = SegInfo::new(domain, clock.clone());
        let mut model = SegModel::new();
        for step in 1..=STEPS {
            clock.advance_ns(rng.below(1000));
            let owned: Vec<SegmentNo> = model.keys().copied().collect();
            let pick = |rng: &mut Rng| owned[rng.below(owned.len() as u64) as usize];
            match rng.below(8) {
                0 => {
                    let s = SegmentNo(rng.below(u64::from(SEGMENTS)) as u32);
                    if let std::collections::btree_map::Entry::Vacant(slot) = model.entry(s) {
                        let kind = if rng.chance(1, 2) {
                            SegmentKind::Data
                        } else {
                            SegmentKind::Node
                        };
                        t.add(s, kind);
                        slot.insert((kind, BTreeSet::new(), t.now_ns()));
                    }
                }
                1..=3 if !owned.is_empty() => {
                    let s = pick(&mut rng);
                    let b = rng.below(512) as u32;
                    let now = t.now_ns();
                    let (_, valid, modified) = model.get_mut(&s).unwrap();
                    if valid.insert(b) {
                        t.mark_valid(s, b);
                        *modified = now;
                    }
                }
                4 | 5 if !owned.is_empty() => {
                    let s = pick(&mut rng);
                    let valid = &mut model.get_mut(&s).unwrap().1;
                    if let Some(&b) = valid.iter().nth(rng.below(valid.len() as u64 + 1) as usize) {
                        valid.remove(&b);
                        t.invalidate(s, b);
                    }
                }
                6 if !owned.is_empty() => {
                    let s = pick(&mut rng);
                    if model[&s].1.is_empty() {
                        model.remove(&s);
                        t.remove(s);
                    }
                }
                7 => {
                    // A remount: a new clock; file-system time resumes where the encoding
                    // left it, and the model's times stay valid.
                    let bytes = t.encode();
                    let now = t.now_ns();
                    clock = Arc::new(ManualClock::new(rng.below(1 << 40)));
                    t = SegInfo::decode(&bytes, domain, SEGMENTS, clock.clone())
                        .unwrap_or_else(|e| panic!("seed {seed} step {step}: {e}"));
                    assert_eq!(t.now_ns(), now, "seed {seed} step {step}: time resumes");
                }
                _ => {}
            }
            assert_seginfo_matches(seed, step, &t, &model);
            // Greedy GC picks a sealed segment with the fewest valid blocks.
            let candidates = t.candidates(&[]);
            if let Some(v) = victim::pick(&candidates, Policy::Greedy, t.now_ns()) {
                let fewest = candidates
                    .iter()
                    .filter(|c| c.state == SegmentUse::Sealed && c.valid_blocks < 512)
                    .map(|c| c.valid_blocks)
                    .min();
                assert_eq!(Some(v.valid_blocks), fewest, "seed {seed} step {step}");
            }
        }
    }
}

#[test]
fn any_flipped_byte_of_an_encoding_is_corruption() {
    for seed in SEEDS {
        let mut rng = Rng::from_seed(seed);
        let clock = Arc::new(ManualClock::new(0));
        let mut t = SegInfo::new(DomainId(1), clock.clone());
        for s in 0..1 + rng.below(20) as u32 {
            t.add(
                SegmentNo(s * 3),
                if s % 2 == 0 {
                    SegmentKind::Data
                } else {
                    SegmentKind::Node
                },
            );
            clock.advance_ns(rng.below(1 << 30));
            for _ in 0..rng.below(600) {
                let b = rng.below(512) as u32;
                if !t.get(SegmentNo(s * 3)).unwrap().is_valid(b) {
                    t.mark_valid(SegmentNo(s * 3), b);
                }
            }
        }
        let bytes = t.encode();
        for _ in 0..200 {
            let mut bad = bytes.clone();
            let at = rng.below(bad.len() as u64) as usize;
            bad[at] ^= 1 << rng.below(8);
            match SegInfo::decode(&bad, DomainId(1), 64, clock.clone()) {
                Err(SpaceError::Corruption(_)) => {}
                other => panic!("seed {seed}: flip at byte {at} gave {other:?}"),
            }
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(SegInfo::decode(&longer, DomainId(1), 64, clock.clone()).is_err());
        assert!(SegInfo::decode(
            &bytes[..rng.below(bytes.len() as u64) as usize],
            DomainId(1),
            64,
            clock.clone()
        )
        .is_err());
    }
}
