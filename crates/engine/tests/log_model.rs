//! The data log against an in-memory model: random writes, overwrites, punches, fsyncs
//! and reads over many files, with GC, checkpoints and remounts forced often. After
//! every remount every file reads back as the model says, and segment accounting is
//! exact (live blocks = mapped blocks).

mod common;

use common::{mount, read_values, small_config, RandomWrite, BLOCK};
use device::Device;
use engine::log::keys::FileBlock;
use engine::log::{Durability, Engine, FsyncPath, WriteOptions};
use engine::space::victim::Policy;
use format::constants::MIB;
use format::InodeNo;
use metadb::WriteBatch;
use platform::Rng;
use pmr::{Pmr, PmrOptions};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use testsupport::image::{formatted, memory_device};

/// File -> block -> the byte every byte of the block holds.
type Model = BTreeMap<u64, BTreeMap<u64, u8>>;

fn check_all(engine: &Engine, model: &Model, files: u64, blocks: u64) {
    for ino in 1..=files {
        let want = model.get(&ino).cloned().unwrap_or_default();
        for (b, got) in read_values(engine, ino, blocks).into_iter().enumerate() {
            assert_eq!(got, want.get(&(b as u64)).copied(), "ino {ino} block {b}");
        }
    }
    let mapped: u64 = model.values().map(|f| f.len() as u64).sum();
    let live: u64 = engine.valid_blocks().iter().sum();
    assert_eq!(
        live, mapped,
        "segment accounting: live blocks equal mapped blocks"
    );
}

fn run_model(seed: u64, path: FsyncPath, domains: u32, with_pmr: bool) {
    let pmr = with_pmr.then(|| Arc::new(Pmr::memory(4 * MIB, PmrOptions::default()).unwrap()));
    let dev = formatted(memory_device(128 * MIB), domains, pmr.as_deref());
    run_model_on(seed, path, domains, dev, pmr);
}

fn run_model_on(seed: u64, path: FsyncPath, domains: u32, dev: Arc<Device>, pmr: Option<Arc<Pmr>>) {
    let with_pmr = pmr.is_some();
    let config = small_config(path, 64 << 10, false);
    let mut engine = mount(&dev, pmr.as_ref(), &config);
    let mut rng = Rng::from_seed(seed);
    let mut model = Model::new();
    let files = 12u64;
    let blocks = 96u64;
    let mut remounts = 0;
    let mut gc_moved = 0;
    for step in 0..1500 {
        let ino = 1 + rng.below(files);
        match rng.below(20) {
            0..=11 => {
                let w = RandomWrite::new(&mut rng, blocks, 12, 3);
                model.entry(ino).or_default().extend(w.blocks());
                w.apply(&engine, ino).unwrap_or_else(|e| {
                    panic!(
                        "seed {seed} step {step}: write: {e}; {:?}, tables {:?}",
                        engine.space_report(),
                        engine.metadb().stats().tables_per_level
                    )
                });
            }
            12 | 13 => {
                let from = rng.below(blocks);
                let to = if rng.chance(1, 2) {
                    None
                } else {
                    Some(from + 1 + rng.below(blocks - from))
                };
                engine
                    .punch(
                        InodeNo(ino),
                        FileBlock(from),
                        to.map(FileBlock),
                        WriteOptions::new(&WriteBatch::new(), Durability::Buffered),
                    )
                    .unwrap();
                if let Some(f) = model.get_mut(&ino) {
                    f.retain(|&b, _| b < from || to.is_some_and(|t| b >= t));
                }
            }
            14 | 15 => {
                let first = rng.below(blocks);
                let count = 1 + rng.below(8.min(blocks - first));
                let mut buf = vec![0u8; count as usize * BLOCK];
                engine
                    .read(InodeNo(ino), FileBlock(first), &mut buf)
                    .unwrap();
                let f = model.get(&ino);
                for i in 0..count {
                    let want = f.and_then(|f| f.get(&(first + i))).copied().unwrap_or(0);
                    assert!(
                        buf[i as usize * BLOCK..(i as usize + 1) * BLOCK]
                            .iter()
                            .all(|&x| x == want),
                        "seed {seed} step {step}: ino {ino} block {} reads wrong",
                        first + i
                    );
                }
            }
            16 => {
                let policy = if rng.chance(1, 2) {
                    Policy::Greedy
                } else {
                    Policy::CostBenefit
                };
                engine.gc_pass(policy).unwrap();
            }
            17 => {
                let d = rng.below(u64::from(domains)) as u16;
                engine.checkpoint(format::DomainId(d)).unwrap();
            }
            18 => engine.fsync(InodeNo(ino)).unwrap(),
            _ => {
                if rng.chance(1, 4) {
                    gc_moved += engine.counters().gc_blocks_moved.load(Ordering::Relaxed);
                    engine.close().unwrap();
                    engine = mount(&dev, pmr.as_ref(), &config);
                    remounts += 1;
                    check_all(&engine, &model, files, blocks);
                } else {
                    engine.metadb().flush().unwrap();
                }
            }
        }
    }
    check_all(&engine, &model, files, blocks);
    // Clean until nothing is worth cleaning: everything still reads back.
    for _ in 0..200 {
        if engine.gc_pass(Policy::Greedy).unwrap().is_none() {
            break;
        }
    }
    engine.sync().unwrap();
    check_all(&engine, &model, files, blocks);
    gc_moved += engine.counters().gc_blocks_moved.load(Ordering::Relaxed);
    engine.close().unwrap();
    let engine = mount(&dev, pmr.as_ref(), &config);
    check_all(&engine, &model, files, blocks);
    eprintln!(
        "seed {seed} {path:?} {domains} domains{}: {remounts} remounts, GC moved {gc_moved} blocks",
        if with_pmr { ", WAL on a PMR" } else { "" }
    );
    assert!(gc_moved > 0, "the workload makes GC move live blocks");
}

#[test]
fn async_path_matches_the_model() {
    for seed in [1, 2] {
        run_model(seed, FsyncPath::Async, 3, false);
    }
}

#[test]
fn ordered_path_matches_the_model() {
    run_model(3, FsyncPath::Ordered, 2, false);
}

#[test]
fn one_domain_matches_the_model() {
    run_model(4, FsyncPath::Async, 1, false);
}

#[test]
fn pmr_mode_matches_the_model() {
    run_model(5, FsyncPath::Async, 2, true);
    run_model(6, FsyncPath::Ordered, 1, true);
}

/// The same model on an image file through io_uring with O_DIRECT (the real backend).
#[test]
fn image_file_through_io_uring_matches_the_model() {
    let dir = testsupport::scratch!();
    let path = dir.path().join("model.img");
    std::fs::File::create(&path)
        .unwrap()
        .set_len(128 * MIB)
        .unwrap();
    let dev = device::open(&path, &device::OpenOptions::default()).unwrap();
    let dev = formatted(dev, 2, None);
    run_model_on(7, FsyncPath::Async, 2, dev, None);
}
