//! The data log against an in-memory model: random writes, overwrites, punches, fsyncs
//! and reads over many files, with GC, checkpoints and remounts forced often. After
//! every remount every file reads back as the model says, and segment accounting is
//! exact (live blocks = mapped blocks).

use device::memory::MemoryBackend;
use device::Device;
use engine::log::keys::FileBlock;
use engine::log::{Durability, Engine, EngineConfig, EngineEnv, FsyncPath};
use engine::mkfs::{format, MkfsOptions};
use engine::progress::NoProgress;
use engine::space::victim::Policy;
use format::constants::MIB;
use format::InodeNo;
use metadb::compaction::policy::CompactionConfig;
use metadb::{MetaDbConfig, WriteBatch};
use platform::{ManualClock, Rng};
use pmr::{Pmr, PmrOptions};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

const BLOCK: usize = 4096;

/// File -> block -> the byte every byte of the block holds.
type Model = BTreeMap<u64, BTreeMap<u64, u8>>;

pub fn small_config(path: FsyncPath) -> EngineConfig {
    EngineConfig {
        fsync_path: path,
        metadb: MetaDbConfig {
            lanes: 2,
            memtable_bytes: 64 << 10,
            background: false,
            // A table occupies a whole segment: keep the tree shallow on a small image.
            immutables_max: 2,
            level0_stop_tables: 4,
            compaction: CompactionConfig {
                level0_file_trigger: 2,
                level_base_bytes: 1 << 20,
                ..CompactionConfig::default()
            },
            ..MetaDbConfig::default()
        },
        ..EngineConfig::default()
    }
}

fn formatted(size: u64, domains: u32, pmr: Option<&Pmr>) -> Arc<Device> {
    formatted_on(
        Device::new(Box::new(MemoryBackend::new(size, 512))),
        domains,
        pmr,
    )
}

fn formatted_on(dev: Device, domains: u32, pmr: Option<&Pmr>) -> Arc<Device> {
    let opts = MkfsOptions {
        domain_count: Some(domains),
        fs_uuid: [7; 16],
        created_unix_ns: 1,
        force: false,
    };
    format(&dev, pmr, &opts, &NoProgress).unwrap();
    Arc::new(dev)
}

fn mount(dev: &Arc<Device>, pmr: &Option<Arc<Pmr>>, config: &EngineConfig) -> Engine {
    Engine::open(
        EngineEnv {
            device: dev.clone(),
            pmr: pmr.clone(),
            clock: Arc::new(ManualClock::new(1_000)),
        },
        config.clone(),
    )
    .unwrap()
}

fn check_all(engine: &Engine, model: &Model, files: u64, blocks: u64) {
    for ino in 1..=files {
        let mut buf = vec![0u8; blocks as usize * BLOCK];
        let mapped = engine.read(InodeNo(ino), FileBlock(0), &mut buf).unwrap();
        let want = model.get(&ino).cloned().unwrap_or_default();
        for b in 0..blocks {
            let got = &buf[b as usize * BLOCK..(b as usize + 1) * BLOCK];
            match want.get(&b) {
                Some(&v) => {
                    assert!(mapped[b as usize], "ino {ino} block {b} unmapped");
                    assert!(
                        got.iter().all(|&x| x == v),
                        "ino {ino} block {b} wrong data"
                    );
                }
                None => {
                    assert!(
                        !mapped[b as usize],
                        "ino {ino} block {b} mapped, model has a hole"
                    );
                    assert!(got.iter().all(|&x| x == 0));
                }
            }
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
    let dev = formatted(128 * MIB, domains, pmr.as_deref());
    run_model_on(seed, path, domains, dev, pmr);
}

fn run_model_on(seed: u64, path: FsyncPath, domains: u32, dev: Arc<Device>, pmr: Option<Arc<Pmr>>) {
    let with_pmr = pmr.is_some();
    let config = small_config(path);
    let mut engine = mount(&dev, &pmr, &config);
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
                let first = rng.below(blocks);
                let count = 1 + rng.below(12.min(blocks - first));
                let mut data = vec![0u8; count as usize * BLOCK];
                let f = model.entry(ino).or_default();
                for i in 0..count {
                    let v = 1 + rng.below(255) as u8;
                    data[i as usize * BLOCK..(i as usize + 1) * BLOCK].fill(v);
                    f.insert(first + i, v);
                }
                let durability = if rng.chance(1, 3) {
                    Durability::Fsync
                } else {
                    Durability::Buffered
                };
                engine
                    .write(InodeNo(ino), FileBlock(first), &data, &WriteBatch::new(), durability)
                    .unwrap_or_else(|e| {
                        panic!(
                            "seed {seed} step {step}: write: {e}; pool {:?}, domain segments {:?}, live {:?}, tables {:?}",
                            engine.pool().stats(),
                            engine.domain_segments(),
                            engine.valid_blocks(),
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
                        &WriteBatch::new(),
                        Durability::Buffered,
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
                    engine = mount(&dev, &pmr, &config);
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
    let engine = mount(&dev, &pmr, &config);
    check_all(&engine, &model, files, blocks);
    eprintln!(
        "seed {seed} {path:?} {domains} domains: {remounts} remounts, GC moved {gc_moved} blocks"
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
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = dir.path().join("model.img");
    std::fs::File::create(&path)
        .unwrap()
        .set_len(128 * MIB)
        .unwrap();
    let dev = device::open(&path, &device::OpenOptions::default()).unwrap();
    let dev = formatted_on(dev, 2, None);
    run_model_on(7, FsyncPath::Async, 2, dev, None);
}
