//! What the data-log tests share (images come from testsupport): a small engine
//! configuration, mounting the engine alone, and random block writes whose contents a
//! model can follow (every byte of a block is one value, so a block read back names the
//! write it came from).
#![allow(dead_code)] // each test file uses its own subset

use device::Device;
use engine::log::keys::FileBlock;
use engine::log::{Durability, Engine, EngineConfig, EngineEnv, FsyncPath, WriteOptions};
use engine::EngineError;
use format::InodeNo;
use metadb::compaction::policy::CompactionConfig;
use metadb::{MetaDbConfig, WriteBatch};
use platform::{Clock, ManualClock, Rng};
use pmr::Pmr;
use std::sync::Arc;

pub const BLOCK: usize = 4096;

/// An engine for small images: a table occupies a whole segment, so MetaDB's tree is
/// kept shallow; `memtable_bytes` sets how often it flushes.
pub fn small_config(path: FsyncPath, memtable_bytes: usize, background: bool) -> EngineConfig {
    EngineConfig {
        fsync_path: path,
        metadb: MetaDbConfig {
            lanes: 2,
            memtable_bytes,
            background,
            immutables_max: 2,
            level0_stop_tables: if background { 6 } else { 4 },
            compaction: CompactionConfig {
                level0_file_trigger: 2,
                level_base_bytes: 2 << 20,
                job_input_bytes_max: 4 << 20,
                ..CompactionConfig::default()
            },
            ..MetaDbConfig::default()
        },
        ..EngineConfig::default()
    }
}

pub fn try_mount(
    dev: &Arc<Device>,
    pmr: Option<&Arc<Pmr>>,
    config: &EngineConfig,
    clock: Arc<dyn Clock>,
) -> Result<Engine, EngineError> {
    Engine::open(
        EngineEnv {
            device: dev.clone(),
            pmr: pmr.cloned(),
            clock,
        },
        config.clone(),
    )
}

/// Mounts with a manual clock (tests that need real time pass their own to `try_mount`).
pub fn mount(dev: &Arc<Device>, pmr: Option<&Arc<Pmr>>, config: &EngineConfig) -> Engine {
    try_mount(dev, pmr, config, Arc::new(ManualClock::new(1_000))).unwrap()
}

/// A random write of 1..=`count_max` blocks inside the first `blocks` blocks of a file,
/// each block filled with one random non-zero value, fsync'd with chance 1/`fsync_one_in`.
#[derive(Debug, Clone)]
pub struct RandomWrite {
    pub first: u64,
    pub values: Vec<u8>,
    pub durability: Durability,
}

impl RandomWrite {
    pub fn new(rng: &mut Rng, blocks: u64, count_max: u64, fsync_one_in: u64) -> RandomWrite {
        let first = rng.below(blocks);
        let count = 1 + rng.below(count_max.min(blocks - first));
        let values = (0..count).map(|_| 1 + rng.below(255) as u8).collect();
        let durability = if rng.chance(1, fsync_one_in) {
            Durability::Fsync
        } else {
            Durability::Buffered
        };
        RandomWrite {
            first,
            values,
            durability,
        }
    }

    /// (file block, value) of each block written.
    pub fn blocks(&self) -> impl Iterator<Item = (u64, u8)> + '_ {
        self.values
            .iter()
            .enumerate()
            .map(|(i, &v)| (self.first + i as u64, v))
    }

    pub fn apply(&self, engine: &Engine, ino: u64) -> Result<(), EngineError> {
        let mut data = vec![0u8; self.values.len() * BLOCK];
        for (i, &v) in self.values.iter().enumerate() {
            data[i * BLOCK..(i + 1) * BLOCK].fill(v);
        }
        engine.write(
            InodeNo(ino),
            FileBlock(self.first),
            &data,
            WriteOptions::new(&WriteBatch::new(), self.durability),
        )
    }
}

/// Writes block `block` of `ino` filled with `value`.
pub fn write_block(
    engine: &Engine,
    ino: u64,
    block: u64,
    value: u8,
    durability: Durability,
) -> Result<(), EngineError> {
    engine.write(
        InodeNo(ino),
        FileBlock(block),
        &vec![value; BLOCK],
        WriteOptions::new(&WriteBatch::new(), durability),
    )
}

/// Unmaps blocks `from..` of `ino` (buffered).
pub fn punch_from(engine: &Engine, ino: u64, from: u64) {
    engine
        .punch(
            InodeNo(ino),
            FileBlock(from),
            None,
            WriteOptions::new(&WriteBatch::new(), Durability::Buffered),
        )
        .unwrap();
}

/// The first `blocks` blocks of `ino`: each mapped block's value (asserting the block
/// holds one value throughout), `None` for holes.
pub fn read_values(engine: &Engine, ino: u64, blocks: u64) -> Vec<Option<u8>> {
    let mut buf = vec![0u8; blocks as usize * BLOCK];
    let mapped = engine
        .read(InodeNo(ino), FileBlock(0), &mut buf)
        .unwrap_or_else(|e| panic!("reading inode {ino}: {e}"));
    buf.chunks(BLOCK)
        .zip(mapped)
        .enumerate()
        .map(|(b, (block, mapped))| {
            if !mapped {
                assert!(
                    block.iter().all(|&x| x == 0),
                    "ino {ino} hole {b} reads non-zero"
                );
                return None;
            }
            assert!(
                block.iter().all(|&x| x == block[0]),
                "ino {ino} block {b} mixes writes"
            );
            Some(block[0])
        })
        .collect()
}
