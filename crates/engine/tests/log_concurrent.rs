//! The data log under concurrency: writer threads (each with its own files, some sharing
//! domains), a cleaner thread running GC passes and checkpoints, a reader of everyone's
//! files, and MetaDB's background flush and compaction, all at once. Afterwards (and
//! after a remount) every file equals its writer's model and accounting is exact. Also
//! exercises the deadlock-prone paths: writers stalled in MetaDB while its flush waits
//! for their domain's data, fsyncs waiting for earlier writers' data, GC checkpoints.

mod common;

use common::{punch_from, read_values, small_config, try_mount, write_block, RandomWrite, BLOCK};
use device::Device;
use engine::log::keys::FileBlock;
use engine::log::{Durability, Engine, EngineConfig, FsyncPath, WriteOptions};
use engine::space::victim::Policy;
use format::constants::MIB;
use format::InodeNo;
use metadb::WriteBatch;
use platform::{Rng, SystemClock};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use testsupport::image::memory_image;

const BLOCKS: u64 = 64;

fn config(path: FsyncPath) -> EngineConfig {
    small_config(path, 64 << 10, true)
}

/// Real time: the background cleaner and cost-benefit ages use it.
fn mount(dev: &Arc<Device>, config: &EngineConfig) -> Engine {
    try_mount(dev, None, config, Arc::new(SystemClock::new())).unwrap()
}

/// (ino -> block -> value) of one writer.
type Model = BTreeMap<u64, BTreeMap<u64, u8>>;

fn check(engine: &Engine, model: &Model) {
    for (&ino, blocks) in model {
        for (b, got) in read_values(engine, ino, BLOCKS).into_iter().enumerate() {
            assert_eq!(got, blocks.get(&(b as u64)).copied(), "ino {ino} block {b}");
        }
    }
}

fn run(path: FsyncPath, writers: u64, domains: u32) {
    let dev = memory_image(256 * MIB, domains);
    let config = config(path);
    let engine = Arc::new(mount(&dev, &config));
    let stop = Arc::new(AtomicBool::new(false));
    let cleaner = {
        let engine = engine.clone();
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut passes = 0u64;
            let mut d = 0u16;
            while !stop.load(Ordering::SeqCst) {
                engine.gc_pass(Policy::CostBenefit).unwrap();
                engine.checkpoint(format::DomainId(d)).unwrap();
                d = (d + 1) % domains as u16;
                passes += 1;
            }
            passes
        })
    };
    let reader = {
        let engine = engine.clone();
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut rng = Rng::from_seed(99);
            let mut buf = vec![0u8; 8 * BLOCK];
            while !stop.load(Ordering::SeqCst) {
                let ino = 1 + rng.below(writers * 3);
                // Others' files change under us: only a clean read (no checksum error)
                // is required, and every block holds one write's bytes.
                engine
                    .read(InodeNo(ino), FileBlock(rng.below(BLOCKS - 8)), &mut buf)
                    .unwrap();
                for block in buf.chunks(BLOCK) {
                    assert!(block.iter().all(|&x| x == block[0]), "a torn block");
                }
            }
        })
    };
    let handles: Vec<_> = (0..writers)
        .map(|t| {
            let engine = engine.clone();
            std::thread::spawn(move || {
                let mut rng = Rng::from_seed(1000 + t);
                let mut model = Model::new();
                for _ in 0..400 {
                    // Three files per writer: inode t + 1 + k * writers.
                    let ino = t + 1 + rng.below(3) * writers;
                    if rng.chance(1, 10) {
                        let from = rng.below(BLOCKS);
                        punch_from(&engine, ino, from);
                        model.entry(ino).or_default().retain(|&b, _| b < from);
                        continue;
                    }
                    let w = RandomWrite::new(&mut rng, BLOCKS, 8, 2);
                    model.entry(ino).or_default().extend(w.blocks());
                    w.apply(&engine, ino).unwrap();
                }
                model
            })
        })
        .collect();
    let models: Vec<Model> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    stop.store(true, Ordering::SeqCst);
    let passes = cleaner.join().unwrap();
    reader.join().unwrap();
    let mut mapped = 0;
    for m in &models {
        check(&engine, m);
        mapped += m.values().map(|f| f.len() as u64).sum::<u64>();
    }
    assert_eq!(
        engine.valid_blocks().iter().sum::<u64>(),
        mapped,
        "accounting"
    );
    let moved = engine.counters().gc_blocks_moved.load(Ordering::Relaxed);
    Arc::into_inner(engine)
        .expect("threads joined")
        .close()
        .unwrap();
    let engine = mount(&dev, &config);
    for m in &models {
        check(&engine, m);
    }
    assert_eq!(
        engine.valid_blocks().iter().sum::<u64>(),
        mapped,
        "accounting after remount"
    );
    eprintln!("{path:?}, {writers} writers, {domains} domains: {passes} cleaner passes, {moved} blocks moved");
}

#[test]
fn async_writers_cleaner_and_reader_at_once() {
    run(FsyncPath::Async, 4, 2);
}

#[test]
fn ordered_writers_cleaner_and_reader_at_once() {
    run(FsyncPath::Ordered, 3, 3);
}

#[test]
fn many_writers_in_one_domain() {
    run(FsyncPath::Async, 6, 1);
}

/// The background cleaner at work: files fill most of a small image, then writer
/// threads overwrite random blocks with fsync while the cleaner cleans; nothing is lost
/// and the cleaner did clean.
#[test]
fn background_cleaner_runs_beside_writers() {
    let dev = memory_image(192 * MIB, 2);
    let config = config(FsyncPath::Async);
    let engine = Arc::new(mount(&dev, &config));
    let files = engine.space_report().capacity_blocks * 7 / 10 / BLOCKS;
    for ino in 1..=files {
        let data = vec![ino as u8; BLOCKS as usize * BLOCK];
        engine
            .write(
                InodeNo(ino),
                FileBlock(0),
                &data,
                WriteOptions::new(&WriteBatch::new(), Durability::Buffered),
            )
            .unwrap();
    }
    let cleaner = engine.start_cleaner(engine::log::gc::CleanerConfig {
        low_free_share: 0.3,
        idle: std::time::Duration::from_millis(2),
    });
    let writers: Vec<_> = (0..3u64)
        .map(|t| {
            let engine = engine.clone();
            std::thread::spawn(move || {
                let mut rng = Rng::from_seed(t);
                let mut model = Model::new();
                for i in 0..3000u64 {
                    // Writer t owns the files congruent to t mod 3.
                    let ino = 1 + t + 3 * rng.below(files / 3);
                    let b = rng.below(BLOCKS);
                    let v = (i % 250) as u8 + 1;
                    write_block(&engine, ino, b, v, Durability::Fsync).unwrap();
                    model.entry(ino).or_default().insert(b, v);
                }
                model
            })
        })
        .collect();
    let models: Vec<Model> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    let cleaned = cleaner.stop().unwrap();
    for ino in 1..=files {
        let mut buf = vec![0u8; BLOCKS as usize * BLOCK];
        engine.read(InodeNo(ino), FileBlock(0), &mut buf).unwrap();
        let owner = &models[((ino - 1) % 3) as usize];
        for b in 0..BLOCKS {
            let want = owner
                .get(&ino)
                .and_then(|f| f.get(&b))
                .copied()
                .unwrap_or(ino as u8);
            assert!(buf[b as usize * BLOCK..(b as usize + 1) * BLOCK]
                .iter()
                .all(|&x| x == want));
        }
    }
    assert_eq!(engine.valid_blocks().iter().sum::<u64>(), files * BLOCKS);
    eprintln!(
        "background cleaner: {cleaned} passes, {:?}",
        engine.space_report()
    );
    assert!(cleaned > 0, "the cleaner ran");
    Arc::into_inner(engine).unwrap().close().unwrap();
}
