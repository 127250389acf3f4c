//! Many files written by one call (`Engine::write_many`, docs/DESIGN.md §9.4 "Many
//! files at once"): every file reads back as if written alone, its own batch counts
//! exactly the blocks it newly maps and carries the caller's operations, a domain's
//! files take consecutive blocks of its user head written as one device write per run
//! (two where the head's segment fills, a file straddling the boundary), files of
//! several domains go to their own domains, and all of it survives a remount (WAL
//! replay) with exact block accounting. On both fsync paths.

mod common;

use common::{mount, read_values, small_config, write_block, BLOCK};
use device::Device;
use engine::log::keys::{self, FileBlock};
use engine::log::{Durability, Engine, Extra, FileWrite, FsyncPath};
use format::constants::{BLOCKS_PER_SEGMENT, MIB};
use format::{BlockAddr, InodeNo};
use metadb::WriteBatch;
use platform::IoCause;
use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::Arc;
use testsupport::image::memory_image;

/// A file's part of a call: its ranges and one value per block.
struct Part {
    ino: u64,
    ranges: Vec<(FileBlock, u64)>,
    values: Vec<u8>,
}

impl Part {
    /// `count` blocks from `first`, values from `seed` on.
    fn new(ino: u64, ranges: &[(u64, u64)], seed: u8) -> Part {
        let count: u64 = ranges.iter().map(|r| r.1).sum();
        Part {
            ino,
            ranges: ranges.iter().map(|&(f, n)| (FileBlock(f), n)).collect(),
            values: (0..count)
                .map(|i| 1 + (u64::from(seed) * 31 + ino * 7 + i) as u8 % 250)
                .collect(),
        }
    }

    /// (file block, value) of each block, in order.
    fn blocks(&self) -> impl Iterator<Item = (u64, u8)> + '_ {
        self.ranges
            .iter()
            .flat_map(|&(f, n)| f.0..f.0 + n)
            .zip(self.values.iter().copied())
    }
}

/// The key each file's batch puts beside its blocks (the caller's operations).
fn marker(ino: u64) -> Vec<u8> {
    format!("~test-marker-{ino:08}").into_bytes()
}

/// Writes `parts` with one `write_many`; per part, the mapped-block change its batch
/// counted. Adds the blocks to `model`.
fn write_many(engine: &Engine, parts: &[Part], model: &mut BTreeMap<(u64, u64), u8>) -> Vec<i64> {
    let data: Vec<Vec<u8>> = parts
        .iter()
        .map(|p| p.values.iter().flat_map(|&v| [v; BLOCK]).collect())
        .collect();
    // In pieces of one block, as a page cache hands its blocks over.
    let pieces: Vec<Vec<&[u8]>> = data.iter().map(|d| d.chunks(BLOCK).collect()).collect();
    let deltas: Vec<Cell<Option<i64>>> = parts.iter().map(|_| Cell::new(None)).collect();
    let makers: Vec<_> = parts
        .iter()
        .zip(&deltas)
        .map(|(p, d)| {
            move |delta: i64| {
                assert!(d.replace(Some(delta)).is_none(), "one batch per file");
                let mut batch = WriteBatch::new();
                batch.put(marker(p.ino), delta.to_le_bytes().to_vec());
                batch
            }
        })
        .collect();
    let files: Vec<FileWrite<'_>> = parts
        .iter()
        .zip(&pieces)
        .zip(&makers)
        .map(|((p, data), make)| FileWrite {
            ino: InodeNo(p.ino),
            ranges: &p.ranges,
            data,
            extra: Extra::Counted(make),
        })
        .collect();
    let mut made = vec![false; files.len()];
    engine.write_many(&files, &mut made).unwrap();
    assert!(made.iter().all(|&m| m), "every file's batch made");
    for p in parts {
        model.extend(p.blocks().map(|(b, v)| ((p.ino, b), v)));
    }
    deltas
        .into_iter()
        .map(|d| d.into_inner().expect("every file's batch made"))
        .collect()
}

/// Every file of `model` reads back as the model says, and live blocks equal mapped
/// blocks, per domain.
fn check(engine: &Engine, model: &BTreeMap<(u64, u64), u8>) {
    let mut files: BTreeMap<u64, BTreeMap<u64, u8>> = BTreeMap::new();
    for (&(ino, b), &v) in model {
        files.entry(ino).or_default().insert(b, v);
    }
    let mut live = vec![0u64; engine.valid_blocks().len()];
    for (ino, blocks) in &files {
        let end = blocks.keys().last().unwrap() + 2;
        for (b, got) in read_values(engine, *ino, end).into_iter().enumerate() {
            assert_eq!(got, blocks.get(&(b as u64)).copied(), "ino {ino} block {b}");
        }
        live[usize::from(engine.domain_of(InodeNo(*ino)).0)] += blocks.len() as u64;
    }
    assert_eq!(engine.valid_blocks(), live, "live blocks per domain");
}

/// The device address of each mapped block of `ino` (block records and extents).
fn addresses(engine: &Engine, ino: u64) -> BTreeMap<u64, u64> {
    let db = engine.metadb();
    let mut out = BTreeMap::new();
    for item in db.prefix(&keys::extent_prefix(InodeNo(ino)), None).unwrap() {
        let (key, value) = item.unwrap();
        let (_, last) = keys::parse_extent_key(&key).unwrap();
        let e = keys::Extent::decode(last, &value).unwrap();
        for b in e.first.0..=last.0 {
            out.insert(b, e.mapping(FileBlock(b)).addr.0);
        }
    }
    for item in db
        .prefix(&keys::mapping_prefix(InodeNo(ino)), None)
        .unwrap()
    {
        let (key, value) = item.unwrap();
        let (_, b) = keys::parse_mapping_key(&key).unwrap();
        out.insert(b.0, keys::Mapping::decode(&value).unwrap().addr.0);
    }
    out
}

/// The addresses of `parts`' blocks, in the order of the call (file by file, each in
/// its ranges' order).
fn addresses_in_order(engine: &Engine, parts: &[&Part]) -> Vec<u64> {
    parts
        .iter()
        .flat_map(|p| {
            let map = addresses(engine, p.ino);
            p.blocks().map(move |(b, _)| map[&b]).collect::<Vec<_>>()
        })
        .collect()
}

/// The user data writes `f` made.
fn user_writes(engine: &Engine, f: impl FnOnce()) -> u64 {
    let before = engine.device().counters().snapshot();
    f();
    let io = engine.device().counters().snapshot().since(&before);
    io.cause(IoCause::UserData).write_ops
}

/// Makes everything durable without a checkpoint and mounts again: recovery replays
/// the WAL's batches.
fn remount(engine: Engine, dev: &Arc<Device>, path: FsyncPath) -> Engine {
    engine.persist_all().unwrap();
    drop(engine);
    mount(dev, None, &small_config(path, 256 << 10, false))
}

fn many_files_in_one_call(path: FsyncPath) {
    let dev = memory_image(64 * MIB, 1);
    let mut engine = mount(&dev, None, &small_config(path, 256 << 10, false));
    let mut model = BTreeMap::new();
    // 40 files of 1-7 blocks, every third in two ranges (a page cache's scattered pages).
    let parts: Vec<Part> = (0..40u64)
        .map(|i| {
            let n = i % 7 + 1;
            let ranges = if i % 3 == 0 {
                vec![(0, n), (n + 5, 2)]
            } else {
                vec![(0, n)]
            };
            Part::new(100 + i, &ranges, 1)
        })
        .collect();
    let mut deltas = Vec::new();
    let writes = user_writes(&engine, || deltas = write_many(&engine, &parts, &mut model));
    assert_eq!(writes, 1, "one device write for the domain's files");
    for (p, d) in parts.iter().zip(&deltas) {
        assert_eq!(
            *d,
            p.values.len() as i64,
            "ino {}: its batch counts its blocks",
            p.ino
        );
    }
    let addrs = addresses_in_order(&engine, &parts.iter().collect::<Vec<_>>());
    assert!(
        addrs.windows(2).all(|w| w[1] == w[0] + 1),
        "one reservation, in the files' order: {addrs:?}"
    );
    check(&engine, &model);

    // Overwrites of each file's first run's first half and new blocks past its end: each batch
    // counts only its new blocks, and the blocks it replaces are invalid.
    let again: Vec<Part> = parts
        .iter()
        .map(|p| {
            let first = p.ranges[0].1;
            Part::new(p.ino, &[(0, first.div_ceil(2)), (first + 10, 3)], 2)
        })
        .collect();
    let deltas = write_many(&engine, &again, &mut model);
    assert!(deltas.iter().all(|&d| d == 3), "{deltas:?}");
    check(&engine, &model);

    engine = remount(engine, &dev, path);
    check(&engine, &model);
    for p in &parts {
        let got = engine.metadb().get(&marker(p.ino)).unwrap();
        assert_eq!(got, Some(3i64.to_le_bytes().to_vec()), "ino {}", p.ino);
    }
    // The recovered engine takes more writes of the same files.
    write_block(&engine, 100, 50, 9, Durability::Fsync).unwrap();
    model.insert((100, 50), 9);
    check(&engine, &model);
}

#[test]
fn many_files_in_one_call_each_with_its_own_batch() {
    many_files_in_one_call(FsyncPath::Async);
    many_files_in_one_call(FsyncPath::Ordered);
}

fn files_across_a_segment_boundary(path: FsyncPath) {
    let dev = memory_image(64 * MIB, 1);
    let mut engine = mount(&dev, None, &small_config(path, 256 << 10, false));
    let mut model = BTreeMap::new();
    // A file leaving 5 blocks in the head's segment.
    let segment = BLOCKS_PER_SEGMENT;
    let filler = Part::new(90, &[(0, segment - 5)], 3);
    write_many(&engine, std::slice::from_ref(&filler), &mut model);
    // 3 blocks, then 20 (2 in this segment, 18 in the next: block records and an
    // extent), then 6.
    let parts = [
        Part::new(91, &[(0, 3)], 4),
        Part::new(92, &[(0, 20)], 4),
        Part::new(93, &[(4, 6)], 4),
    ];
    let writes = user_writes(&engine, || {
        let deltas = write_many(&engine, &parts, &mut model);
        assert_eq!(deltas, vec![3, 20, 6]);
    });
    assert_eq!(writes, 2, "one device write per segment's run");
    let addrs = addresses_in_order(&engine, &parts.iter().collect::<Vec<_>>());
    let first_segment_end = addrs[0] + 5;
    assert_eq!(
        addrs[..5],
        (addrs[0]..first_segment_end).collect::<Vec<_>>()[..],
        "the first segment's last five blocks"
    );
    let next = addrs[5];
    let geometry = engine.geometry();
    let new_segment = geometry.segment_of(BlockAddr(next)).unwrap();
    assert_ne!(
        geometry.segment_of(BlockAddr(addrs[0])),
        Some(new_segment),
        "the second file continues in another segment"
    );
    assert_eq!(geometry.segment_start(new_segment).0, next, "at its start");
    assert_eq!(
        addrs[5..],
        (next..next + 24).collect::<Vec<_>>()[..],
        "then consecutive from the new segment's start"
    );
    assert_eq!(engine.domain_segments(), vec![2]);
    check(&engine, &model);
    engine = remount(engine, &dev, path);
    check(&engine, &model);
}

#[test]
fn files_spanning_a_segment_boundary_are_split_between_its_runs() {
    files_across_a_segment_boundary(FsyncPath::Async);
    files_across_a_segment_boundary(FsyncPath::Ordered);
}

fn files_of_several_domains(path: FsyncPath) {
    let dev = memory_image(96 * MIB, 3);
    let mut engine = mount(&dev, None, &small_config(path, 256 << 10, false));
    let mut model = BTreeMap::new();
    // Inode numbers of all three domains, interleaved, 1-9 blocks each.
    let parts: Vec<Part> = (0..36u64)
        .map(|i| Part::new(300 + i, &[(0, i % 9 + 1)], 5))
        .collect();
    let mut deltas = Vec::new();
    let writes = user_writes(&engine, || deltas = write_many(&engine, &parts, &mut model));
    assert_eq!(writes, 3, "one device write per domain");
    for (p, d) in parts.iter().zip(&deltas) {
        assert_eq!(*d, p.values.len() as i64, "ino {}", p.ino);
    }
    for d in 0..3u16 {
        let mine: Vec<&Part> = parts
            .iter()
            .filter(|p| engine.domain_of(InodeNo(p.ino)).0 == d)
            .collect();
        assert_eq!(mine.len(), 12);
        let addrs = addresses_in_order(&engine, &mine);
        assert!(
            addrs.windows(2).all(|w| w[1] == w[0] + 1),
            "domain {d}: its files' blocks consecutive, in the call's order"
        );
    }
    check(&engine, &model);
    engine = remount(engine, &dev, path);
    check(&engine, &model);
}

#[test]
fn files_of_several_domains_go_to_their_own_domains() {
    files_of_several_domains(FsyncPath::Async);
    files_of_several_domains(FsyncPath::Ordered);
}

/// Free segments beyond what ordinary writers must leave.
fn segments_left(engine: &Engine) -> u32 {
    let config = engine.pool().config();
    engine.pool().stats().free - config.reserve_segments - config.metadb_headroom
}

#[test]
fn files_that_do_not_fit_at_once_are_written_one_at_a_time() {
    let dev = memory_image(64 * MIB, 1);
    // A memtable holding the whole test: no table takes a segment meanwhile.
    let engine = mount(&dev, None, &small_config(FsyncPath::Async, 8 << 20, false));
    let mut model = BTreeMap::new();
    let segment = BLOCKS_PER_SEGMENT;
    // A file of two whole segments, then a filler leaving exactly one segment free
    // beyond the reserve, the head full.
    write_many(
        &engine,
        &[Part::new(80, &[(0, 2 * segment)], 6)],
        &mut model,
    );
    let filler = u64::from(segments_left(&engine) - 1) * segment;
    write_many(&engine, &[Part::new(81, &[(0, filler)], 7)], &mut model);
    assert_eq!(segments_left(&engine), 1);
    // The first file's first segment rewritten and one block of another file: two
    // segments at once, but one at a time the rewrite empties a segment, which a
    // checkpoint frees for the second.
    let parts = [
        Part::new(80, &[(0, segment)], 8),
        Part::new(82, &[(0, 1)], 8),
    ];
    let deltas = write_many(&engine, &parts, &mut model);
    assert_eq!(deltas, vec![0, 1]);
    check(&engine, &model);
    let engine = remount(engine, &dev, FsyncPath::Async);
    check(&engine, &model);
}
