//! Read-ahead of sequential readers (docs/DESIGN.md §10.7): it keeps going when a
//! reader's requests are noted out of order (as FUSE's threads deliver them), random
//! readers never trigger it, the cache stays within its bound, and no read, read ahead
//! or not, returns a block older than a write that finished before the read began
//! (a job overtaken by a truncate: `data_concurrency.rs`).

use device::Device;
use engine::log::EngineConfig;
use platform::SystemClock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use testsupport::image::memory_image;
use testsupport::mount::{mount, mount_cached};
use vfs::{CacheConfig, FileSystem, OpenOptions};

const MIB: u64 = 1 << 20;
const BLOCK: u64 = 4096;

/// `dev` mounted with a cache of `max_bytes` (a quarter of it dirty at most) and the
/// real clock (the flusher and read-ahead run as in production).
fn mount_small(dev: &Arc<Device>, max_bytes: u64) -> Arc<FileSystem> {
    let cache = CacheConfig {
        max_bytes,
        dirty_bytes: max_bytes / 4,
        ..CacheConfig::default()
    };
    mount_cached(
        dev,
        EngineConfig::default(),
        cache,
        Arc::new(SystemClock::new()),
    )
}

/// A file of `bytes` whose block `b` holds `b` as its first 8 bytes, written and
/// unmounted: the next mount reads it cold.
fn cold_file(bytes: u64) -> Arc<Device> {
    let dev = memory_image(128 * MIB, 1);
    let fs = mount(&dev);
    let f = OpenOptions::new()
        .create(true)
        .write(true)
        .open(&fs, "/f")
        .unwrap();
    let mut data = vec![0u8; bytes as usize];
    for (b, block) in data.chunks_mut(BLOCK as usize).enumerate() {
        block[..8].copy_from_slice(&(b as u64).to_le_bytes());
        block[8..].fill(b as u8 ^ 0x5a);
    }
    f.write_at(&data, 0).unwrap();
    drop(f);
    Arc::into_inner(fs).unwrap().unmount().unwrap();
    dev
}

fn block_tag(block: &[u8]) -> u64 {
    u64::from_le_bytes(block[..8].try_into().unwrap())
}

/// 128 KiB requests of one sequential reader, each pair swapped (how two FUSE threads
/// may hand the vfs a reader's READs): the read-ahead still reads almost all of it, and
/// the cache stays within its bound.
#[test]
fn a_sequential_readers_requests_noted_out_of_order_keep_reading_ahead() {
    let bytes = 16 * MIB;
    let dev = cold_file(bytes);
    let fs = mount_small(&dev, 4 * MIB);
    let r = OpenOptions::new().read(true).open(&fs, "/f").unwrap();
    let chunk = 128 << 10;
    let chunks = bytes / chunk;
    let mut order: Vec<u64> = (0..chunks).collect();
    for pair in order[1..].chunks_mut(2) {
        pair.reverse();
    }
    let mut buf = vec![0u8; chunk as usize];
    for c in order {
        assert_eq!(r.read_at(&mut buf, c * chunk).unwrap(), buf.len());
        for (i, block) in buf.chunks(BLOCK as usize).enumerate() {
            assert_eq!(block_tag(block), c * chunk / BLOCK + i as u64);
        }
        let s = fs.cache_stats();
        assert!(s.pages * BLOCK <= 4 * MIB + chunk, "{s:?}");
    }
    let s = fs.cache_stats();
    let blocks = bytes / BLOCK;
    // Without the swapped requests kept sequential, every swap closed the window and
    // about half the blocks were the reader's own misses.
    assert!(s.misses < blocks / 10, "{s:?}");
    assert!(s.readahead > blocks / 2, "{s:?}");
}

/// Random 4 KiB reads read nothing ahead.
#[test]
fn random_reads_read_nothing_ahead() {
    let bytes = 16 * MIB;
    let dev = cold_file(bytes);
    let fs = mount_small(&dev, 64 * MIB);
    let r = OpenOptions::new().read(true).open(&fs, "/f").unwrap();
    let blocks = bytes / BLOCK;
    let mut buf = vec![0u8; BLOCK as usize];
    let mut x: u64 = 88_172_645_463_325_252;
    let mut prev = u64::MAX;
    for _ in 0..2000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let mut b = x % blocks;
        if b == prev.wrapping_add(1) {
            b = (b + 2) % blocks; // The one block a sequential reader would read next.
        }
        assert_eq!(r.read_at(&mut buf, b * BLOCK).unwrap(), buf.len());
        assert_eq!(block_tag(&buf), b);
        prev = b;
    }
    let s = fs.cache_stats();
    assert_eq!(s.readahead, 0, "{s:?}");
    assert!(s.misses > 1000, "{s:?}");
}

/// A writer rewrites random 64 KiB pieces with ever larger versions while a reader
/// reads the file sequentially over and over through a cache smaller than the file
/// (so its reads miss, read ahead, and race write-backs and evictions): every block a
/// read returns is at least as new as the last write of it that finished before the
/// read began. A stress check: the race of a read-ahead job with a write is too narrow
/// here to be hit reliably, so the deterministic case of a job overtaken by a truncate
/// is `data_concurrency.rs`'s, with the device holding the job's read.
#[test]
fn read_ahead_never_returns_a_block_older_than_a_finished_write() {
    let bytes = 8 * MIB;
    let dev = cold_file(bytes);
    let fs = mount_small(&dev, 2 * MIB);
    let piece_blocks = 16;
    let pieces = bytes / BLOCK / piece_blocks;
    // The version each piece's last finished write gave it (0: the original file,
    // whose tags are block numbers: versions are tags minus the block count).
    let done: Arc<Vec<AtomicU64>> = Arc::new((0..pieces).map(|_| AtomicU64::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let base = bytes / BLOCK;
    let writer = {
        let (fs, done, stop) = (fs.clone(), done.clone(), stop.clone());
        std::thread::spawn(move || {
            let w = OpenOptions::new().write(true).open(&fs, "/f").unwrap();
            let mut x: u64 = 0x2545_f491_4f6c_dd1d;
            let mut v = 1;
            while !stop.load(Ordering::Relaxed) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let p = x % pieces;
                let mut data = vec![0u8; (piece_blocks * BLOCK) as usize];
                for block in data.chunks_mut(BLOCK as usize) {
                    block[..8].copy_from_slice(&(base + v).to_le_bytes());
                }
                w.write_at(&data, p * piece_blocks * BLOCK).unwrap();
                done[p as usize].store(v, Ordering::SeqCst);
                v += 1;
            }
            v
        })
    };
    let r = OpenOptions::new().read(true).open(&fs, "/f").unwrap();
    let chunk = 128 << 10;
    let mut buf = vec![0u8; chunk as usize];
    for _ in 0..6 {
        for c in 0..bytes / chunk {
            let first = c * chunk / BLOCK;
            let before: Vec<u64> = (0..chunk / BLOCK)
                .map(|i| done[((first + i) / piece_blocks) as usize].load(Ordering::SeqCst))
                .collect();
            assert_eq!(r.read_at(&mut buf, c * chunk).unwrap(), buf.len());
            for (i, block) in buf.chunks(BLOCK as usize).enumerate() {
                let b = first + i as u64;
                let tag = block_tag(block);
                let version = tag.saturating_sub(base);
                assert!(
                    tag == b || tag >= base,
                    "block {b}: tag {tag} is neither the original nor a version"
                );
                assert!(
                    version >= before[i],
                    "block {b}: version {version}, but version {} had been written",
                    before[i]
                );
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let versions = writer.join().unwrap();
    let s = fs.cache_stats();
    assert!(versions > 10, "{versions} writes");
    assert!(s.readahead > 0 && s.evicted > 0, "{s:?}");
}
