//! What `stat`/`statx` report beyond the model's fields: birth, change and modification
//! times as operations move them, the block size, rdev and the statx mask.

use engine::log::{EngineConfig, EngineEnv};
use platform::ManualClock;
use std::sync::Arc;
use testsupport::image::memory_image;
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
