//! The data log nearly full: files fill 90% (then 97%) of the space left for data, then
//! random 4 KiB overwrites with fsync rewrite all of it. No ENOSPC may come while live data
//! stays within that space, nothing may be lost, accounting stays exact, and the GC write
//! cost (blocks written per block the user wrote) is reported.
//!
//! "Space left for data" is what the documented reserve leaves: the segment area minus the
//! GC reserve, minus MetaDB's tables at the time, minus two log heads per domain
//! (docs/DESIGN.md §9.6).

mod common;

use common::{mount, small_config, write_block, BLOCK};
use engine::log::keys::FileBlock;
use engine::log::{Durability, Engine, EngineConfig, FsyncPath, WriteOptions};
use format::constants::MIB;
use format::InodeNo;
use metadb::WriteBatch;
use platform::Rng;
use std::sync::atomic::Ordering;
use testsupport::image::memory_image;

const FILE_BLOCKS: u64 = 256;

fn config() -> EngineConfig {
    small_config(FsyncPath::Async, 256 << 10, false)
}

/// Blocks of data the engine promises room for right now.
fn data_capacity(engine: &Engine) -> u64 {
    engine.space_report().capacity_blocks
}

fn fill_then_overwrite(utilization: f64, domains: u32) {
    let dev = memory_image(192 * MIB, domains);
    let engine = mount(&dev, None, &config());
    // Fill whole files until live data reaches the target share of the capacity (which
    // shrinks as MetaDB's tables grow, so it is read again each time).
    let mut files = 0u64;
    let data = vec![0x5au8; FILE_BLOCKS as usize * BLOCK];
    loop {
        let live: u64 = engine.valid_blocks().iter().sum();
        if live + FILE_BLOCKS > (data_capacity(&engine) as f64 * utilization) as u64 {
            break;
        }
        files += 1;
        engine
            .write(
                InodeNo(files),
                FileBlock(0),
                &data,
                WriteOptions::new(&WriteBatch::new(), Durability::Buffered),
            )
            .unwrap_or_else(|e| panic!("fill to {utilization}: file {files}: {e}"));
    }
    engine.sync().unwrap();
    let live = files * FILE_BLOCKS;
    assert_eq!(engine.valid_blocks().iter().sum::<u64>(), live);
    // Random 4 KiB overwrites with fsync, as many as there are live blocks.
    let mut rng = Rng::from_seed((utilization * 1000.0) as u64);
    let mut last = vec![vec![0x5au8; FILE_BLOCKS as usize]; files as usize];
    let written_before = engine.counters().blocks_written.load(Ordering::Relaxed);
    let overwrites = live;
    for i in 0..overwrites {
        let ino = 1 + rng.below(files);
        let b = rng.below(FILE_BLOCKS);
        let v = (i % 251) as u8 + 1;
        write_block(&engine, ino, b, v, Durability::Fsync).unwrap_or_else(|e| {
            panic!(
                "{utilization}: overwrite {i} of {overwrites}: {e} (live {live}, capacity {})",
                data_capacity(&engine)
            )
        });
        last[ino as usize - 1][b as usize] = v;
    }
    let user = engine.counters().blocks_written.load(Ordering::Relaxed) - written_before;
    let moved = engine.counters().gc_blocks_moved.load(Ordering::Relaxed);
    let discarded = engine.counters().segments_discarded.load(Ordering::Relaxed);
    assert!(
        discarded > 0,
        "freed segments are discarded (the memory device supports it)"
    );
    assert_eq!(
        engine.valid_blocks().iter().sum::<u64>(),
        live,
        "accounting"
    );
    engine.close().unwrap();
    let engine = mount(&dev, None, &config());
    assert_eq!(
        engine.valid_blocks().iter().sum::<u64>(),
        live,
        "accounting after remount"
    );
    let mut buf = vec![0u8; FILE_BLOCKS as usize * BLOCK];
    for ino in 1..=files {
        engine.read(InodeNo(ino), FileBlock(0), &mut buf).unwrap();
        for (b, want) in last[ino as usize - 1].iter().enumerate() {
            assert!(
                buf[b * BLOCK..(b + 1) * BLOCK].iter().all(|x| x == want),
                "ino {ino} block {b}"
            );
        }
    }
    eprintln!(
        "utilization {:.0}% ({domains} domains, {live} live blocks, {:?}): {user} user blocks, {moved} moved by GC: write cost {:.2}",
        utilization * 100.0,
        engine.space_report(),
        (user + moved) as f64 / user as f64
    );
}

#[test]
fn ninety_percent_full_overwrites_without_enospc() {
    fill_then_overwrite(0.90, 2);
}

#[test]
fn ninety_seven_percent_full_overwrites_without_enospc() {
    fill_then_overwrite(0.97, 1);
}
