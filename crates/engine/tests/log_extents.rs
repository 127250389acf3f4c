//! Extents in the block index (docs/FORMAT.md §6.2): long writes are mapped by `e`
//! records, short overwrites inside them by shadowing `x` records, long overwrites trim
//! them, punches split them, GC moves them as extents, and all of it survives remounts
//! and reads back block for block.

mod common;

use common::{mount, read_values, small_config, write_block, BLOCK};
use engine::log::keys::{self, FileBlock};
use engine::log::{Durability, Engine, FsyncPath, WriteOptions};
use engine::space::victim::Policy;
use format::constants::MIB;
use format::InodeNo;
use metadb::WriteBatch;
use std::collections::BTreeMap;
use testsupport::image::memory_image;

const INO: u64 = 5;

fn write(engine: &Engine, first: u64, values: &[u8]) {
    let mut data = vec![0u8; values.len() * BLOCK];
    for (i, &v) in values.iter().enumerate() {
        data[i * BLOCK..(i + 1) * BLOCK].fill(v);
    }
    engine
        .write(
            InodeNo(INO),
            FileBlock(first),
            &data,
            WriteOptions::new(&WriteBatch::new(), Durability::Buffered),
        )
        .unwrap();
}

/// (x records, extents) of the file.
fn records(engine: &Engine) -> (usize, Vec<(u64, u64)>) {
    let db = engine.metadb();
    let singles = db
        .prefix(&keys::mapping_prefix(InodeNo(INO)), None)
        .unwrap()
        .count();
    let extents = db
        .prefix(&keys::extent_prefix(InodeNo(INO)), None)
        .unwrap()
        .map(|item| {
            let (key, value) = item.unwrap();
            let (_, last) = keys::parse_extent_key(&key).unwrap();
            let e = keys::Extent::decode(last, &value).unwrap();
            (e.first.0, last.0)
        })
        .collect();
    (singles, extents)
}

fn check(engine: &Engine, model: &BTreeMap<u64, u8>, blocks: u64) {
    for (b, got) in read_values(engine, INO, blocks).into_iter().enumerate() {
        assert_eq!(got, model.get(&(b as u64)).copied(), "block {b}");
    }
    let live: u64 = engine.valid_blocks().iter().sum();
    assert_eq!(live, model.len() as u64, "live blocks equal mapped blocks");
}

#[test]
fn extents_map_long_runs_and_survive_overwrites_punches_gc_and_remounts() {
    let dev = memory_image(64 * MIB, 1);
    let config = small_config(FsyncPath::Async, 64 << 10, false);
    let mut engine = mount(&dev, None, &config);
    let mut model = BTreeMap::new();
    let blocks = 700u64;

    // 600 blocks in one write: extents of at most 256 blocks, no x record.
    write(&engine, 0, &[1; 600]);
    model.extend((0..600).map(|b| (b, 1u8)));
    let (singles, extents) = records(&engine);
    assert_eq!(singles, 0);
    assert!(extents.len() >= 3, "{extents:?}");
    assert!(extents.iter().all(|(f, l)| l - f < keys::EXTENT_MAX_BLOCKS));
    check(&engine, &model, blocks);

    // A short overwrite inside an extent shadows it: one x record, the extent unchanged.
    write_block(&engine, INO, 10, 2, Durability::Buffered).unwrap();
    model.insert(10, 2);
    let (singles, after) = records(&engine);
    assert_eq!((singles, &after), (1, &extents));
    check(&engine, &model, blocks);

    // A long overwrite across an extent boundary and the shadowed block trims both
    // extents and deletes the x record it covers.
    write(&engine, 5, &[3; 300]);
    model.extend((5..305).map(|b| (b, 3u8)));
    let (singles, extents) = records(&engine);
    assert_eq!(singles, 0, "{extents:?}");
    assert_eq!(extents.first(), Some(&(0, 4)));
    check(&engine, &model, blocks);

    // A punch in the middle splits an extent; SEEK_DATA / SEEK_HOLE see the split.
    engine
        .punch(
            InodeNo(INO),
            FileBlock(100),
            Some(FileBlock(120)),
            WriteOptions::new(&WriteBatch::new(), Durability::Buffered),
        )
        .unwrap();
    for b in 100..120 {
        model.remove(&b);
    }
    check(&engine, &model, blocks);
    let ino = InodeNo(INO);
    assert_eq!(
        engine.next_unmapped(ino, FileBlock(0)).unwrap(),
        FileBlock(100)
    );
    assert_eq!(
        engine.next_mapped(ino, FileBlock(100)).unwrap(),
        Some(FileBlock(120))
    );
    assert_eq!(
        engine.next_mapped(ino, FileBlock(130)).unwrap(),
        Some(FileBlock(130))
    );
    assert_eq!(
        engine.next_unmapped(ino, FileBlock(120)).unwrap(),
        FileBlock(600)
    );
    assert_eq!(engine.next_mapped(ino, FileBlock(600)).unwrap(), None);

    // Short writes shadow again; then GC moves everything (the extents' blocks as
    // extents again) and the file reads back the same, before and after a remount.
    for b in (200..260).step_by(7) {
        write_block(&engine, INO, b, 4, Durability::Buffered).unwrap();
        model.insert(b, 4);
    }
    engine.sync().unwrap();
    let mut moved = 0;
    while let Some(r) = engine
        .gc_domain(format::DomainId(0), Policy::Greedy)
        .unwrap()
    {
        moved += r.moved;
        if r.moved == 0 {
            break;
        }
    }
    assert!(moved > 0, "GC moved live blocks");
    check(&engine, &model, blocks);
    let (_, extents) = records(&engine);
    assert!(!extents.is_empty(), "moved runs stay extents");
    engine.sync().unwrap();
    drop(engine);
    engine = mount(&dev, None, &config);
    check(&engine, &model, blocks);

    // Truncating to block 50 leaves one trimmed extent.
    engine
        .punch(
            ino,
            FileBlock(50),
            None,
            WriteOptions::new(&WriteBatch::new(), Durability::Fsync),
        )
        .unwrap();
    model.retain(|&b, _| b < 50);
    check(&engine, &model, blocks);
    drop(engine);
    let engine = mount(&dev, None, &config);
    check(&engine, &model, blocks);
    assert_eq!(
        engine.next_unmapped(ino, FileBlock(0)).unwrap(),
        FileBlock(50)
    );
}

/// Reads go through the map cache (whole extents with their shadows, kept after the
/// first read of a block in them); every kind of index change drops the file's spans,
/// so the next read sees it.
#[test]
fn reads_through_the_map_cache_see_every_change_made_before_them() {
    let dev = memory_image(64 * MIB, 1);
    let config = small_config(FsyncPath::Async, 64 << 10, false);
    let engine = mount(&dev, None, &config);
    let ino = InodeNo(INO);
    let mut model = BTreeMap::new();
    let blocks = 700u64;
    let read_one = |b: u64| read_values(&engine, INO, b + 1)[b as usize];

    // More than a segment, so that GC has a victim that is not the open head.
    write(&engine, 0, &[1; 600]);
    model.extend((0..600).map(|b| (b, 1u8)));
    assert_eq!(engine.cached_spans(), 0);
    assert_eq!(read_one(7), Some(1));
    assert!(engine.cached_spans() >= 1, "a read keeps the extent");

    // Each change, then a read served by a refilled cache.
    type Change<'a> = Box<dyn Fn(&mut BTreeMap<u64, u8>) + 'a>;
    let changes: Vec<Change> = vec![
        Box::new(|m| {
            write_block(&engine, INO, 7, 2, Durability::Buffered).unwrap();
            m.insert(7, 2);
        }),
        Box::new(|m| {
            write(&engine, 100, &[3; 20]);
            m.extend((100..120).map(|b| (b, 3u8)));
        }),
        Box::new(|m| {
            engine
                .punch(
                    ino,
                    FileBlock(50),
                    Some(FileBlock(60)),
                    WriteOptions::new(&WriteBatch::new(), Durability::Buffered),
                )
                .unwrap();
            for b in 50..60 {
                m.remove(&b);
            }
        }),
        Box::new(|_| {
            engine.sync().unwrap();
            let mut moved = 0;
            while let Some(r) = engine
                .gc_domain(format::DomainId(0), Policy::Greedy)
                .unwrap()
            {
                moved += r.moved;
                if r.moved == 0 {
                    break;
                }
            }
            assert!(moved > 0, "GC moved live blocks");
        }),
        Box::new(|m| {
            write_block(&engine, INO, 200, 5, Durability::Fsync).unwrap();
            m.insert(200, 5);
        }),
        Box::new(|m| {
            engine
                .punch(
                    ino,
                    FileBlock(30),
                    None,
                    WriteOptions::new(&WriteBatch::new(), Durability::Buffered),
                )
                .unwrap();
            m.retain(|&b, _| b < 30);
        }),
    ];
    // Block by block, so that reads inside extents are answered by the cache.
    let check_each = |model: &BTreeMap<u64, u8>, k: usize| {
        for b in 0..blocks {
            assert_eq!(read_one(b), model.get(&b).copied(), "change {k}, block {b}");
        }
        check(&engine, model, blocks);
    };
    for (k, change) in changes.iter().enumerate() {
        // Fill the cache over the whole file, change, and read again.
        check_each(&model, k);
        assert!(engine.cached_spans() >= 1, "change {k}: cache filled");
        change(&mut model);
        check_each(&model, k);
    }
}

/// Readers racing a writer and the cleaner: once a write returned, no read may return
/// the block's older contents (a stale cached mapping would: the old data still checks
/// against the old CRC).
#[test]
fn concurrent_readers_never_see_a_block_older_than_its_last_returned_write() {
    use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
    let dev = memory_image(64 * MIB, 1);
    let config = small_config(FsyncPath::Async, 64 << 10, false);
    let engine = mount(&dev, None, &config);
    const BLOCKS: u64 = 64;
    write(&engine, 0, &[1; BLOCKS as usize]);
    let written: Vec<AtomicU8> = (0..BLOCKS).map(|_| AtomicU8::new(1)).collect();
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let (engine, written, done) = (&engine, &written, &done);
            s.spawn(move || {
                let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ t;
                while !done.load(Ordering::SeqCst) {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let b = rng % BLOCKS;
                    let floor = written[b as usize].load(Ordering::SeqCst);
                    let mut out = vec![0u8; BLOCK];
                    engine.read(InodeNo(INO), FileBlock(b), &mut out).unwrap();
                    let got = out[0];
                    assert!(out.iter().all(|&x| x == got), "block {b} torn");
                    // Values only grow (wrapping is avoided below).
                    assert!(
                        got >= floor,
                        "block {b}: read {got} after {floor} was written"
                    );
                }
            });
        }
        let mut value = 1u8;
        for round in 0..120u64 {
            value += 1;
            if round % 3 == 0 {
                // A long rewrite: new extents.
                write(&engine, 0, &[value; BLOCKS as usize]);
                for w in &written {
                    w.store(value, Ordering::SeqCst);
                }
            } else {
                // Short overwrites: shadows.
                for b in (round % 5..BLOCKS).step_by(9) {
                    write_block(&engine, INO, b, value, Durability::Buffered).unwrap();
                    written[b as usize].store(value, Ordering::SeqCst);
                }
            }
            if round % 10 == 9 {
                engine.sync().unwrap();
                let _ = engine
                    .gc_domain(format::DomainId(0), Policy::Greedy)
                    .unwrap();
            }
            if value == 250 {
                break;
            }
        }
        done.store(true, Ordering::SeqCst);
    });
}
