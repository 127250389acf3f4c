//! The file system on a failing device (issue 5): a device write or flush failing with
//! EIO fails the operation or fsync in progress with EIO, every later change fails with
//! EROFS (the instance is read-only), reads of what is there still work, and after a
//! remount the image is clean for fsck and holds everything acknowledged before the
//! failure. Every write and flush of a workload of file and name operations with fsyncs
//! is failed in turn.

use device::recording::{FaultPlan, RecordingBackend, RecordingHandle};
use device::Device;
use std::sync::Arc;
use vfs::{FileSystem, OpenOptions, RenameMode, VfsError};

const MIB: usize = 1 << 20;

/// A formatted image with `/a` (8 KiB, durable) and `/d`, on a recording device.
fn device() -> (Arc<Device>, RecordingHandle) {
    let w = crashtest::Workload::parse(
        "faults",
        "domains 2\ncreate /a\nwrite /a 0 8192\nmkdir /d\nbegin\nsync\n",
    )
    .unwrap();
    let recorded = crashtest::run::record(&w).unwrap();
    let image = recorded.recording.image_after_all();
    // The smallest image with room left after the setup (`run::IMAGE_SIZES_MIB`).
    assert_eq!(image.len() as u64, recorded.image_bytes);
    assert!(image.len() >= 64 * MIB);
    let (backend, handle) = RecordingBackend::new(image, 512);
    (Arc::new(Device::new(Box::new(backend))), handle)
}

/// The steps; each returns whether it was a persistence point that succeeded.
fn step(fs: &Arc<FileSystem>, i: usize) -> Result<(), VfsError> {
    let file = |p: &str| {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .open(fs, p)
    };
    match i {
        0 => file("/a")?.write_at(&[1u8; 5000], 4096).map(|_| ()),
        1 => file("/a")?.sync_all(),
        2 => file("/d/new")?.write_at(&[2u8; 9000], 0).map(|_| ()),
        3 => file("/d/new")?.sync_all(),
        4 => fs.rename_path("/d/new", "/b", RenameMode::Replace),
        5 => fs.fsync_ino(fs.resolve("/", true)?, false),
        6 => fs.create_dir("/d/e", 0o755),
        7 => fs.hard_link("/a", "/d/e/l"),
        8 => fs.sync(),
        9 => fs.remove_file("/a"),
        10 => file("/b")?.set_len(100),
        11 => file("/b")?.sync_data(),
        _ => unreachable!(),
    }
}

const STEPS: usize = 12;

fn is_durability_point(i: usize) -> bool {
    matches!(i, 1 | 3 | 5 | 8 | 11)
}

/// Runs the steps with `plan`; returns whether the fault was met.
fn run(plan: FaultPlan) -> bool {
    let (dev, handle) = device();
    let fs = Arc::new(crashtest::run::mount(dev.clone()).unwrap());
    handle.set_fault(plan);
    let mut trees = vec![crashtest::snapshot::Snapshot::take(&fs).unwrap()];
    let mut acked = 0;
    let mut failed_at = None;
    for i in 0..STEPS {
        match step(&fs, i) {
            Ok(()) => {
                trees.push(crashtest::snapshot::Snapshot::take(&fs).unwrap());
                if is_durability_point(i) {
                    acked = trees.len() - 1;
                }
            }
            Err(e) => {
                assert_eq!(e.errno(), libc::EIO, "{plan:?}: step {i} failed with {e}");
                failed_at = Some(i);
                break;
            }
        }
    }
    let Some(failed) = failed_at else {
        assert_eq!(handle.injected_count(), 0, "{plan:?}: a fault no step saw");
        return false;
    };
    // Read-only from now on; reads still work.
    for i in failed + 1..STEPS {
        if let Err(e) = step(&fs, i) {
            assert!(
                [libc::EROFS, libc::ENOENT].contains(&e.errno()),
                "{plan:?}: step {i} after the failure: {e}"
            );
        }
    }
    assert_eq!(
        errno(fs.create_dir("/after", 0o755)),
        libc::EROFS,
        "{plan:?}: a change after the failure"
    );
    let mut buf = [0u8; 16];
    if let Ok(f) = OpenOptions::new().read(true).open(&fs, "/a") {
        f.read_at(&mut buf, 0).unwrap();
    }
    drop(fs);
    handle.set_fault(FaultPlan::None);
    // The image: fsck clean, and a tree from at or after the last acknowledged step.
    let report = fsck::check(
        dev.clone(),
        None,
        &fsck::Options {
            mode: fsck::Mode::Check,
            verify_data: true,
            now_ns: 0,
        },
        &engine::progress::NoProgress,
    )
    .unwrap();
    let problems: Vec<_> = report
        .problems
        .iter()
        .filter(|p| p.kind != fsck::Kind::UnreachableInode)
        .collect();
    assert!(problems.is_empty(), "{plan:?}: fsck: {problems:?}");
    let fs = crashtest::run::mount(dev).unwrap();
    let got = crashtest::snapshot::Snapshot::take(&fs).unwrap();
    // Entries and objects as the crash checker judges them, against the last
    // acknowledged state: every entry that existed then with the same target exists.
    let want = &trees[acked];
    for (key, ino) in &want.entries {
        let later = trees[acked..]
            .iter()
            .any(|t| t.entries.get(key) == got.entries.get(key));
        assert!(later, "{plan:?}: entry {key:?} (inode {ino}) lost");
    }
    fs.unmount().unwrap();
    true
}

fn errno<T>(r: Result<T, VfsError>) -> i32 {
    r.map_or_else(|e| e.errno(), |_| 0)
}

#[test]
fn every_failed_write_or_flush_turns_read_only_and_loses_nothing_acknowledged() {
    let mut cases = 0;
    for make in [
        (|n| FaultPlan::FailWrite { nth: n }) as fn(u64) -> FaultPlan,
        |n| FaultPlan::FailFlush { nth: n },
        |n| FaultPlan::DieAtWrite { nth: n },
    ] {
        for nth in 1.. {
            if !run(make(nth)) {
                break;
            }
            cases += 1;
        }
    }
    eprintln!("{cases} failure points");
    assert!(cases > 20, "only {cases} failure points");
}
