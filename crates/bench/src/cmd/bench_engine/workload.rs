//! The workloads of `augefs bench engine`: threads appending blocks to their own files
//! with fsync, on the engine or on any file system through `std::fs`, and the content
//! every block carries so that what survives a crash can be checked.
//!
//! Invariants:
//! - Thread `t` writes only file `t + 1` (inode number on the engine, file name on
//!   ext4), blocks 0, 1, 2, ... in order: appends, never overwrites.
//! - Block `b` of file `f` holds [`block_into`]'s bytes for (f, b): a block read back
//!   after recovery is checked against them.
//! - A run is timed as `crate::threads` times every run.

use crate::threads::{self, Limit, Run};
use engine::log::keys::FileBlock;
use engine::log::{Durability, Engine, WriteOptions};
use format::constants::BLOCK_SIZE_BYTES;
use format::InodeNo;
use metadb::WriteBatch;
use platform::Rng;
use std::os::unix::fs::FileExt;
use std::path::Path;

pub const BLOCK: usize = BLOCK_SIZE_BYTES as usize;

/// The file thread `thread` appends to.
pub fn file_of(thread: usize) -> u64 {
    thread as u64 + 1
}

/// Fills `out` (one block) with the content of block `block` of file `file`.
pub fn block_into(file: u64, block: u64, out: &mut [u8]) {
    assert_eq!(out.len(), BLOCK, "one block");
    // Below 2^40 blocks per file (4 PiB) the seed is unique per (file, block).
    Rng::from_seed((file << 40) ^ block ^ 0x5eed_0000_0000_0000).fill(out);
}

/// Whether `data` (one block) is block `block` of file `file`.
pub fn is_block(file: u64, block: u64, data: &[u8]) -> bool {
    let mut expected = [0u8; BLOCK];
    block_into(file, block, &mut expected);
    data == expected
}

/// `threads` threads appending one block with `Durability::Fsync` per operation.
pub fn engine_appends(engine: &Engine, threads: usize, limit: Limit) -> Result<Run, String> {
    threads::timed(threads, limit, 1, |thread| {
        let file = file_of(thread);
        let extra = WriteBatch::new();
        let mut block = vec![0u8; BLOCK];
        Ok(move |i: u64| {
            block_into(file, i, &mut block);
            engine
                .write(
                    InodeNo(file),
                    FileBlock(i),
                    &block,
                    WriteOptions::new(&extra, Durability::Fsync),
                )
                .map_err(|e| format!("append to inode {file}: {e}"))
        })
    })
}

/// `threads` threads appending one block with `pwrite` and `fdatasync` per operation,
/// to files `f1`, `f2`, ... in `dir` (created empty).
pub fn file_appends(dir: &Path, threads: usize, limit: Limit) -> Result<Run, String> {
    threads::timed(threads, limit, 1, |thread| {
        let file = file_of(thread);
        let path = dir.join(format!("f{file}"));
        let handle = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let mut block = vec![0u8; BLOCK];
        Ok(move |i: u64| {
            block_into(file, i, &mut block);
            handle
                .write_all_at(&block, i * BLOCK as u64)
                .and_then(|()| handle.sync_data())
                .map_err(|e| format!("append to {}: {e}", path.display()))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn blocks_differ_by_file_and_index() {
        let mut a = [0u8; BLOCK];
        block_into(1, 7, &mut a);
        assert!(is_block(1, 7, &a));
        assert!(!is_block(1, 8, &a));
        assert!(!is_block(2, 7, &a));
        assert!(a.iter().filter(|&&b| b == 0).count() < 64, "not zeros");
    }

    #[test]
    fn file_appends_write_every_block_of_every_file() {
        let dir = tempfile::tempdir().unwrap();
        let limit = Limit {
            duration: Duration::from_secs(60),
            ops_per_thread: Some(5),
        };
        let run = file_appends(dir.path(), 2, limit).unwrap();
        assert_eq!(run.ops, 10);
        for file in [1, 2] {
            let data = std::fs::read(dir.path().join(format!("f{file}"))).unwrap();
            assert_eq!(data.len(), 5 * BLOCK);
            for (b, block) in data.chunks(BLOCK).enumerate() {
                assert!(is_block(file, b as u64, block));
            }
        }
    }
}
