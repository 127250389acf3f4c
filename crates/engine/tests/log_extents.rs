//! Extents in the block index (docs/FORMAT.md §6.2): long writes are mapped by `e`
//! records, short overwrites inside them by shadowing `x` records, long overwrites trim
//! them, punches split them, GC moves them as extents, and all of it survives remounts
//! and reads back block for block.

mod common;

use common::{memory_image, mount, read_values, small_config, write_block, BLOCK};
use engine::log::keys::{self, FileBlock};
use engine::log::{Durability, Engine, FsyncPath};
use engine::space::victim::Policy;
use format::constants::MIB;
use format::InodeNo;
use metadb::WriteBatch;
use std::collections::BTreeMap;

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
            &WriteBatch::new(),
            Durability::Buffered,
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
    let dev = memory_image(64 * MIB, 1, None);
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
            &WriteBatch::new(),
            Durability::Buffered,
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
            &WriteBatch::new(),
            Durability::Fsync,
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
