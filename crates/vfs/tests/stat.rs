//! What `stat`/`statx` report beyond the model's fields: birth, change and modification
//! times as operations move them, the block size, rdev and the statx mask; and statfs's
//! inode count, which a mount's background scan and the changes since make up, and its
//! free blocks, which count a write's dirty pages as taken.

use engine::log::{EngineConfig, EngineEnv};
use platform::ManualClock;
use std::sync::Arc;
use testsupport::image::memory_image;
use testsupport::mount::mount;
use vfs::{FileSystem, Metadata, OpenOptions};

#[test]
fn statx_fields_follow_the_operations() {
    let clock = Arc::new(ManualClock::new(1_000));
    let env = EngineEnv {
        device: memory_image(64 << 20, 1),
        pmr: None,
        clock: clock.clone(),
    };
    let fs = Arc::new(FileSystem::mount(env, EngineConfig::default()).unwrap());
    let now = |c: &ManualClock| platform::Clock::wall_ns(c) as i64;
    let born = now(&clock);
    let f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&fs, "/f")
        .unwrap();
    let m = f.metadata().unwrap();
    assert_eq!((m.btime_ns, m.mtime_ns, m.ctime_ns), (born, born, born));
    assert_eq!((m.blksize, m.rdev), (4096, 0));
    assert_eq!(
        Metadata::STATX_MASK & libc::STATX_BASIC_STATS,
        libc::STATX_BASIC_STATS
    );
    assert_ne!(Metadata::STATX_MASK & libc::STATX_BTIME, 0);

    clock.advance_ns(5_000);
    let written = now(&clock);
    f.write_at(b"data", 0).unwrap();
    let m = f.metadata().unwrap();
    assert_eq!(
        (m.btime_ns, m.mtime_ns, m.ctime_ns),
        (born, written, written)
    );

    clock.advance_ns(5_000);
    let changed = now(&clock);
    fs.set_permissions("/f", 0o600).unwrap();
    let m = fs.metadata("/f").unwrap();
    assert_eq!(
        (m.btime_ns, m.mtime_ns, m.ctime_ns),
        (born, written, changed)
    );
    // A rename keeps the birth time (the inode is the same).
    fs.rename_path("/f", "/g", vfs::RenameMode::Replace)
        .unwrap();
    assert_eq!(fs.metadata("/g").unwrap().btime_ns, born);
    drop(f);
    Arc::into_inner(fs).unwrap().unmount().unwrap();
}

/// Files made before the mount are counted by the mount's background scan, files made
/// and removed while it runs by the changes since: statfs's count is exact, neither
/// twice (a scan of the live state would also meet the new files, numbered above the
/// old) nor short (nor meet the removed ones first).
#[test]
fn statfs_counts_inodes_made_before_and_while_the_mount_counts() {
    const BEFORE: u64 = 20_000;
    const MADE: u64 = 300;
    const REMOVED: u64 = 200;
    let dev = memory_image(256 << 20, 2);
    let fs = mount(&dev);
    fs.create_dir("/d", 0o755).unwrap();
    for i in 0..BEFORE {
        fs.make_node(&format!("/d/{i}"), libc::S_IFREG | 0o644, 0)
            .unwrap();
    }
    Arc::into_inner(fs).unwrap().unmount().unwrap();

    let fs = mount(&dev);
    // Removed from the end (the newest inode numbers, last in the scan) and made anew
    // while the count runs.
    for i in 0..MADE.max(REMOVED) {
        if i < REMOVED {
            fs.remove_file(&format!("/d/{}", BEFORE - 1 - i)).unwrap();
        }
        if i < MADE {
            fs.make_node(&format!("/d/new{i}"), libc::S_IFREG | 0o644, 0)
                .unwrap();
        }
    }
    let st = fs.statfs();
    // The root, /d and the files.
    assert_eq!(st.files - st.files_free, 2 + BEFORE + MADE - REMOVED);
    Arc::into_inner(fs).unwrap().unmount().unwrap();
    let fs = mount(&dev);
    let st = fs.statfs();
    assert_eq!(st.files - st.files_free, 2 + BEFORE + MADE - REMOVED);
    Arc::into_inner(fs).unwrap().unmount().unwrap();
}

/// Pages written but not yet written back take their blocks in statfs at once (as
/// ext4's delayed allocation reserves them): a benchmark filling a file system by df
/// overfilled it by its dirty pages.
#[test]
fn statfs_counts_dirty_pages_as_used() {
    let dev = memory_image(128 << 20, 2);
    let cache = vfs::CacheConfig {
        flush_interval: None,
        dirty_bytes: 1 << 30,
        ..vfs::CacheConfig::default()
    };
    let fs = testsupport::mount::mount_cached(
        &dev,
        engine::log::EngineConfig::default(),
        cache,
        testsupport::mount::manual_clock(),
    );
    let before = fs.statfs().blocks_free;
    let f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&fs, "/f")
        .unwrap();
    f.write_at(&vec![7u8; 8 << 20], 0).unwrap();
    let dirty = fs.statfs().blocks_free;
    assert!(
        dirty + 2048 <= before,
        "8 MiB dirty: {before} free before, {dirty} after"
    );
    f.sync_all().unwrap();
    let written = fs.statfs().blocks_free;
    assert!(
        written + 2048 <= before && written.abs_diff(dirty) < 256,
        "after the write-back: {written} free ({dirty} while dirty, {before} before)"
    );
    drop(f);
    Arc::into_inner(fs).unwrap().unmount().unwrap();
}
