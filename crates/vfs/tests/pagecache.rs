//! The page cache: write-back batching, the dirty limit, the background flusher,
//! read-ahead, eviction, st_blocks of dirty data, and the atomicity of a file's
//! write-back at every crash point.

use device::recording::{CrashPolicy, RecordingBackend};
use device::Device;
use engine::log::EngineConfig;
use platform::{ManualClock, SystemClock};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use testsupport::image::{image_bytes, memory_image, SECTOR_BYTES};
use testsupport::mount::{mount, mount_cached, mounted};
use vfs::{CacheConfig, FileSystem, OpenOptions};

const MIB: u64 = 1 << 20;

fn mount_with(dev: &Arc<Device>, cache: CacheConfig, real_clock: bool) -> Arc<FileSystem> {
    let clock: Arc<dyn platform::Clock> = if real_clock {
        Arc::new(SystemClock::new())
    } else {
        Arc::new(ManualClock::new(1_000_000))
    };
    mount_cached(dev, EngineConfig::default(), cache, clock)
}

/// `path` opened for reading and writing, created if missing.
fn open_rw(fs: &Arc<FileSystem>, path: &str) -> vfs::File {
    OpenOptions::new()
        .create(true)
        .read(true)
        .write(true)
        .open(fs, path)
        .unwrap()
}

fn unmount(fs: Arc<FileSystem>) {
    Arc::into_inner(fs).unwrap().unmount().unwrap();
}

#[test]
fn small_appends_are_written_back_together_and_survive_fsync_and_remount() {
    let dev = memory_image(64 * MIB, 1);
    let fs = mount(&dev);
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&fs, "/log")
        .unwrap();
    let blocks_before = fs
        .engine()
        .counters()
        .blocks_written
        .load(Ordering::Relaxed);
    let mut expect = Vec::new();
    for i in 0..1000u32 {
        let line = format!("record {i:06} {}\n", "x".repeat((i % 90) as usize));
        std::io::Write::write_all(&mut f, line.as_bytes()).unwrap();
        expect.extend_from_slice(line.as_bytes());
    }
    // Nothing reached the engine yet; reads see the writes.
    assert_eq!(
        fs.engine()
            .counters()
            .blocks_written
            .load(Ordering::Relaxed),
        blocks_before
    );
    let mut got = vec![0u8; expect.len()];
    assert_eq!(f.read_at(&mut got, 0).unwrap_or(0), 0, "append-only handle");
    let r = OpenOptions::new().read(true).open(&fs, "/log").unwrap();
    assert_eq!(r.read_at(&mut got, 0).unwrap(), expect.len());
    assert_eq!(got, expect);
    f.sync_all().unwrap();
    let stats = fs.cache_stats();
    assert_eq!(stats.dirty, 0);
    assert_eq!(stats.writebacks, 1, "one write-back for 1000 appends");
    let written = fs
        .engine()
        .counters()
        .blocks_written
        .load(Ordering::Relaxed)
        - blocks_before;
    assert_eq!(written, expect.len().div_ceil(4096) as u64);
    drop((f, r));
    // Without an unmount (a crash after the fsync) the data is there.
    drop(fs);
    let fs = mount(&dev);
    let r = OpenOptions::new().read(true).open(&fs, "/log").unwrap();
    let mut got = vec![0u8; expect.len() + 10];
    assert_eq!(r.read_at(&mut got, 0).unwrap(), expect.len());
    assert_eq!(&got[..expect.len()], &expect[..]);
}

#[test]
fn unsynced_writes_are_lost_by_a_crash_and_kept_by_unmount() {
    let dev = memory_image(64 * MIB, 1);
    let fs = mount(&dev);
    let f = OpenOptions::new()
        .create(true)
        .write(true)
        .open(&fs, "/a")
        .unwrap();
    f.sync_all().unwrap();
    f.write_at(b"hello", 0).unwrap();
    drop(f);
    drop(fs); // a crash: the dirty page is lost
    let fs = mount(&dev);
    assert_eq!(fs.metadata("/a").unwrap().size, 0);
    let f = OpenOptions::new().write(true).open(&fs, "/a").unwrap();
    f.write_at(b"hello", 0).unwrap();
    drop(f);
    unmount(fs);
    let fs = mount(&dev);
    assert_eq!(fs.metadata("/a").unwrap().size, 5);
}

#[test]
fn st_blocks_counts_dirty_pages_as_allocated() {
    let fs = mounted(64 * MIB, 1);
    let f = OpenOptions::new()
        .create(true)
        .write(true)
        .open(&fs, "/f")
        .unwrap();
    f.write_at(&[1; 10000], 0).unwrap();
    f.write_at(&[2; 10], 40960).unwrap();
    let dirty = fs.metadata("/f").unwrap();
    assert_eq!(dirty.blocks, 4 * 8);
    assert_eq!(dirty.size, 40970);
    f.sync_all().unwrap();
    assert_eq!(fs.metadata("/f").unwrap().blocks, 4 * 8);
    // Overwriting mapped blocks allocates nothing new.
    f.write_at(&[3; 4096], 0).unwrap();
    assert_eq!(fs.metadata("/f").unwrap().blocks, 4 * 8);
}

#[test]
fn the_dirty_limit_makes_writers_write_back() {
    let fs = mount_with(
        &memory_image(128 * MIB, 1),
        CacheConfig {
            max_bytes: 4 * MIB,
            dirty_bytes: MIB,
            flush_interval: None,
            ..CacheConfig::default()
        },
        false,
    );
    let f = OpenOptions::new()
        .create(true)
        .write(true)
        .open(&fs, "/big")
        .unwrap();
    let chunk = vec![7u8; 64 << 10];
    for i in 0..64u64 {
        f.write_at(&chunk, i * chunk.len() as u64).unwrap();
        let s = fs.cache_stats();
        assert!(s.dirty * 4096 <= MIB + chunk.len() as u64, "{s:?}");
        assert!(s.pages * 4096 <= 4 * MIB, "{s:?}");
    }
    assert!(fs.cache_stats().writebacks >= 3);
    let r = OpenOptions::new().read(true).open(&fs, "/big").unwrap();
    let mut buf = vec![0u8; 4 * MIB as usize];
    assert_eq!(r.read_at(&mut buf, 0).unwrap(), buf.len());
    assert!(buf.iter().all(|&b| b == 7));
}

#[test]
fn the_flusher_writes_back_old_dirty_pages() {
    // The flusher wakes every 20 ms of real time; the pages' age is the injected clock's,
    // so they stay dirty, however the threads are scheduled, until the clock moves.
    let clock = Arc::new(ManualClock::new(1_000_000));
    let fs = mount_cached(
        &memory_image(64 * MIB, 1),
        EngineConfig::default(),
        CacheConfig {
            flush_interval: Some(Duration::from_millis(20)),
            expire: Duration::from_millis(50),
            ..CacheConfig::default()
        },
        clock.clone(),
    );
    let f = OpenOptions::new()
        .create(true)
        .write(true)
        .open(&fs, "/f")
        .unwrap();
    f.write_at(&[5; 50000], 0).unwrap();
    std::thread::sleep(Duration::from_millis(60));
    assert!(fs.cache_stats().dirty > 0, "written back before expiring");
    clock.advance_ns(50_000_000);
    let start = Instant::now();
    while fs.cache_stats().dirty > 0 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the flusher did not write back: {:?}",
            fs.cache_stats()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(fs.cache_stats().writebacks, 1);
    drop(f);
    unmount(fs);
}

#[test]
fn sequential_reads_read_ahead_and_a_small_cache_evicts() {
    let dev = memory_image(128 * MIB, 1);
    let fs = mount(&dev);
    let f = OpenOptions::new()
        .create(true)
        .write(true)
        .open(&fs, "/seq")
        .unwrap();
    let data: Vec<u8> = (0..8 * MIB).map(|i| (i / 4096) as u8).collect();
    f.write_at(&data, 0).unwrap();
    drop(f);
    unmount(fs);
    let fs = mount_with(
        &dev,
        CacheConfig {
            max_bytes: 2 * MIB,
            dirty_bytes: MIB,
            ..CacheConfig::default()
        },
        false,
    );
    let r = OpenOptions::new().read(true).open(&fs, "/seq").unwrap();
    let mut buf = vec![0u8; 16 << 10];
    let mut at = 0;
    while at < data.len() {
        let n = r.read_at(&mut buf, at as u64).unwrap();
        assert_eq!(&buf[..n], &data[at..at + n]);
        at += n;
    }
    let s = fs.cache_stats();
    assert!(s.readahead > 1500, "{s:?}");
    assert!(s.misses < 100, "{s:?}");
    assert!(s.pages * 4096 <= 2 * MIB, "{s:?}");
    assert!(s.evicted > 0, "{s:?}");
    // A warm re-read of the cached tail hits.
    let hits = s.hits;
    let tail = (data.len() - buf.len()) as u64;
    r.read_at(&mut buf, tail).unwrap();
    assert_eq!(fs.cache_stats().hits, hits + 4);
}

#[test]
fn growth_after_truncate_reads_zeros_through_the_cache() {
    let fs = mounted(64 * MIB, 1);
    let f = open_rw(&fs, "/t");
    f.write_at(&[9; 8192], 0).unwrap();
    f.sync_all().unwrap();
    f.set_len(100).unwrap();
    let mut b = [0u8; 8192];
    f.read_at(&mut b, 0).unwrap(); // caches block 0 with its stale tail on the device
    f.write_at(b"x", 6000).unwrap();
    assert_eq!(f.read_at(&mut b, 0).unwrap(), 6001);
    assert!(b[..100].iter().all(|&x| x == 9));
    assert!(b[100..6000].iter().all(|&x| x == 0));
    f.sync_all().unwrap();
    f.set_len(50).unwrap();
    f.set_len(5000).unwrap();
    assert_eq!(f.read_at(&mut b, 0).unwrap(), 5000);
    assert!(b[..50].iter().all(|&x| x == 9) && b[50..5000].iter().all(|&x| x == 0));
}

/// A truncate or a punched hole drops only the pages it changes: the rest of the file
/// still reads from the cache (RocksDB truncates each table it finishes, then reads it).
#[test]
fn truncate_and_punch_keep_the_other_pages_cached() {
    let fs = mounted(64 * MIB, 1);
    let f = open_rw(&fs, "/t");
    let data: Vec<u8> = (0..64 * 4096u32).map(|i| (i / 4096 + 1) as u8).collect();
    f.write_at(&data, 0).unwrap();
    f.set_len(40 * 4096 + 100).unwrap();
    f.fallocate(vfs::Fallocate::PunchHole, 8 * 4096 + 10, 4096)
        .unwrap();
    let misses = fs.cache_stats().misses;
    let mut got = vec![0u8; 64 * 4096];
    assert_eq!(f.read_at(&mut got, 0).unwrap(), 40 * 4096 + 100);
    // Blocks 8 and 9 (the hole's) and 40 (the new end's) come from the device again.
    assert_eq!(fs.cache_stats().misses - misses, 3);
    let mut expect = data[..40 * 4096 + 100].to_vec();
    expect[8 * 4096 + 10..9 * 4096 + 10].fill(0);
    assert!(got[..expect.len()] == expect[..]);
    // Growth again: the old end's block is zero past 100 bytes, the rest a hole.
    f.set_len(48 * 4096).unwrap();
    assert_eq!(f.read_at(&mut got, 0).unwrap(), 48 * 4096);
    expect.resize(48 * 4096, 0);
    assert!(got[..expect.len()] == expect[..]);
}

/// Scattered unsynced writes to one file are written back in one batch: at every crash
/// point the file has all of them or none.
#[test]
fn a_file_write_back_is_atomic_at_every_crash_point() {
    let raw = image_bytes(&memory_image(64 * MIB, 1));
    let (backend, handle) = RecordingBackend::new(raw, 512);
    let dev = Arc::new(Device::new(Box::new(backend)));
    let fs = mount(&dev);
    let f = OpenOptions::new()
        .create(true)
        .write(true)
        .open(&fs, "/f")
        .unwrap();
    f.write_at(&[1; 20000], 0).unwrap();
    f.sync_all().unwrap();
    let before = handle.write_count();
    // Out of order and scattered: blocks 4, 1 and 30 (growing the file).
    f.write_at(&[2; 4096], 4 * 4096).unwrap();
    f.write_at(&[3; 100], 4096 + 7).unwrap();
    f.write_at(&[4; 4096], 30 * 4096).unwrap();
    f.sync_all().unwrap();
    drop(f);
    unmount(fs);
    let recording = handle.snapshot();
    let states = recording.crash_states(&CrashPolicy {
        states_max: usize::MAX,
        ..CrashPolicy::with_seed(5)
    });
    let mut old = 0;
    let mut new = 0;
    for state in &states.states {
        if state.durable_writes() < before {
            continue;
        }
        let crashed = Arc::new(recording.device(state, SECTOR_BYTES));
        let fs = mount(&crashed);
        let r = OpenOptions::new().read(true).open(&fs, "/f").unwrap();
        let size = fs.metadata("/f").unwrap().size;
        let mut buf = vec![0u8; size as usize];
        r.read_at(&mut buf, 0).unwrap();
        if size == 20000 {
            assert!(
                buf.iter().all(|&b| b == 1),
                "state {state}: a partial write-back"
            );
            old += 1;
        } else {
            assert_eq!(size, 31 * 4096, "state {state}");
            assert!(
                buf[4 * 4096..5 * 4096].iter().all(|&b| b == 2),
                "state {state}"
            );
            assert!(
                buf[4096 + 7..4096 + 107].iter().all(|&b| b == 3),
                "state {state}"
            );
            assert!(buf[30 * 4096..].iter().all(|&b| b == 4), "state {state}");
            assert!(buf[20000..30 * 4096].iter().all(|&b| b == 0 || b == 2));
            new += 1;
        }
    }
    assert!(
        old > 0 && new > 0,
        "crash states before and after: {old} {new}"
    );
}

/// With a dirty limit larger than the device (the default cache on a small image), a
/// write the device cannot hold fails with ENOSPC when it is made; every write that
/// succeeded is written back and survives a remount. The next write after freeing
/// space succeeds.
#[test]
fn a_full_device_fails_the_write_not_the_write_back() {
    let dev = memory_image(96 * MIB, 2);
    let cache = CacheConfig {
        max_bytes: 1 << 30,
        dirty_bytes: 1 << 30,
        ..CacheConfig::default()
    };
    let fs = mount_with(&dev, cache, false);
    let free_before = fs.statfs().blocks_free;
    let f = OpenOptions::new()
        .create(true)
        .write(true)
        .open(&fs, "/fill")
        .unwrap();
    let chunk = |i: u64| vec![(i % 251) as u8 + 1; MIB as usize];
    let mut written = 0u64;
    let err = loop {
        match f.write_at(&chunk(written / MIB), written) {
            Ok(n) => written += n as u64,
            Err(e) => break e,
        }
        assert!(
            written <= 2 * free_before * 4096,
            "writes went on past the device"
        );
    };
    assert_eq!(err.errno(), libc::ENOSPC, "{err}");
    assert!(written > 16 * MIB, "only {written} bytes fit");
    assert_eq!(
        f.metadata().unwrap().size,
        written,
        "the failed write left nothing"
    );
    f.sync_all().unwrap();
    drop(f);
    unmount(fs);
    let fs = mount_with(&dev, cache, false);
    let f = OpenOptions::new().read(true).open(&fs, "/fill").unwrap();
    assert_eq!(f.metadata().unwrap().size, written);
    let mut buf = vec![0u8; MIB as usize];
    for i in 0..written / MIB {
        f.read_at(&mut buf, i * MIB).unwrap();
        assert!(buf == chunk(i), "MiB {i} read back wrong");
    }
    drop(f);
    fs.remove_file("/fill").unwrap();
    let g = OpenOptions::new()
        .create(true)
        .write(true)
        .open(&fs, "/after")
        .unwrap();
    g.write_at(&chunk(7), 0).unwrap();
    g.sync_all().unwrap();
}

#[test]
fn extended_attributes_of_a_dirty_file_wait_for_its_write_back() {
    // GlusterFS sets attributes on every file it writes: each used to write the file's
    // pages back first. They now wait in memory for that write-back, seen at once.
    let dev = memory_image(64 * MIB, 1);
    let fs = mount_with(
        &dev,
        CacheConfig {
            flush_interval: None,
            ..CacheConfig::default()
        },
        false,
    );
    let f = open_rw(&fs, "/f");
    f.write_at(&[7; 10_000], 0).unwrap();
    let set = |name: &[u8], value: &[u8]| {
        fs.set_xattr("/f", name, value, vfs::XattrMode::Either)
            .unwrap()
    };
    set(b"user.a", b"1");
    set(b"trusted.b", b"2");
    fs.remove_xattr("/f", b"trusted.b").unwrap();
    set(b"user.c", b"3");
    assert_eq!(
        fs.cache_stats().writebacks,
        0,
        "an attribute wrote pages back"
    );
    assert_eq!(fs.get_xattr("/f", b"user.a").unwrap(), b"1");
    assert!(fs.get_xattr("/f", b"trusted.b").is_err());
    let names = fs.list_xattr("/f").unwrap();
    assert_eq!(names, [b"user.a".to_vec(), b"user.c".to_vec()]);
    // The write-back logs them with the data; after a remount they are there.
    drop(f);
    unmount(fs);
    let fs = mount_with(&dev, CacheConfig::default(), false);
    assert_eq!(fs.get_xattr("/f", b"user.c").unwrap(), b"3");
    assert_eq!(fs.list_xattr("/f").unwrap().len(), 2);
    // A clean file's attribute is logged at once (nothing to wait for).
    fs.set_xattr("/f", b"user.d", b"4", vfs::XattrMode::Create)
        .unwrap();
    assert_eq!(fs.cache_stats().writebacks, 0);
    unmount(fs);
    let fs = mount_with(&dev, CacheConfig::default(), false);
    assert_eq!(fs.get_xattr("/f", b"user.d").unwrap(), b"4");
    unmount(fs);
}
