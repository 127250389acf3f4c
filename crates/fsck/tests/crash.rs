//! fsck on crash images: a VFS workload across two domains (names in one domain's lane,
//! data in another's, fsyncs of single files) on the recording device, then fsck `-n`
//! at sampled crash states. Every state must recover and check clean, except for the
//! known VFS leak below, which `-y` must repair.
//!
//! Nameless inodes after a crash (docs/SEMANTICS.md, "deviations"): a file's write batch
//! goes to the file's domain lane and carries the inode record, while its name went to
//! the parent directory's lane. When the file's lane reaches the device and the
//! directory's does not (an fsync of another file of the file's domain, or a crash
//! inside the file's own fsync, which persists the file's lane before the directories'
//! lanes), the crash image holds an inode with data and no name: fsck reports
//! `unreachable_inode` and `-y` links it into /lost+found. Nothing acknowledged is lost
//! that way; a completed fsync of a new file keeps its name (the regression test below
//! reproduced the VFS bug fixed on main in bca6c4f).

use device::recording::{CrashPolicy, RecordingBackend};
use device::Device;
use fsck::Mode;
use std::sync::Arc;
use testsupport::check::run_fsck;
use testsupport::image::{image_bytes, memory_image, SECTOR_BYTES};
use testsupport::mount::{foreground_config, mount_with};
use vfs::{FileSystem, OpenOptions};

const IMAGE_BYTES: u64 = 64 << 20;

fn mount(dev: &Arc<Device>) -> Arc<FileSystem> {
    mount_with(dev, foreground_config())
}

fn write(fs: &Arc<FileSystem>, path: &str, len: usize, sync: bool) {
    let f = OpenOptions::new()
        .write(true)
        .create(true)
        .open(fs, path)
        .unwrap();
    f.write_at(&vec![7u8; len], 0).unwrap();
    if sync {
        f.sync_all().unwrap();
    }
}

/// Records the workload; returns the recording handle.
fn record() -> device::recording::RecordingHandle {
    let raw = image_bytes(&memory_image(IMAGE_BYTES, 2));
    let (backend, handle) = RecordingBackend::new(raw, SECTOR_BYTES);
    let dev = Arc::new(Device::new(Box::new(backend)));
    let fs = mount(&dev);
    // Inode numbers: /d 2 (domain 0), then 3, 4, 5 ... alternate domains.
    fs.create_dir("/d", 0o755).unwrap();
    write(&fs, "/d/f", 8192, false); // name in /d's lane (0), data in lane 1
    write(&fs, "/g", 4096, false); // name in root's lane (1), data in lane 0
    write(&fs, "/h", 4096, true); // domain 1: fsync persists lane 1 only
    fs.hard_link("/d/f", "/link").unwrap(); // name in lane 1
    write(&fs, "/d/f", 12288, false); // f's inode (nlink 2) in lane 1
    write(&fs, "/g", 8192, true); // domain 0: fsync
    fs.rename_path("/d/f", "/f2", vfs::RenameMode::Replace)
        .unwrap();
    fs.remove_file("/link").unwrap();
    write(&fs, "/h", 8192, true);
    fs.create_dir("/d/e", 0o755).unwrap();
    write(&fs, "/d/e/x", 4096, true);
    Arc::into_inner(fs).unwrap().unmount().unwrap();
    handle
}

/// One crash state: its name, the `-n` report, and (if it found problems) the `-y`
/// report and a `-n` report after it.
type Checked = (String, fsck::Report, Option<(fsck::Report, fsck::Report)>);

/// fsck on every sampled crash state.
fn check_states() -> Vec<Checked> {
    let handle = record();
    let recording = handle.snapshot();
    let states = recording.crash_states(&CrashPolicy {
        states_max: 40,
        ..CrashPolicy::with_seed(5)
    });
    assert!(states.states.len() >= 10);
    let mut out = Vec::new();
    for state in &states.states {
        let dev = Arc::new(recording.device(state, SECTOR_BYTES));
        let found = run_fsck(dev.clone(), Mode::Check, true);
        let repaired = (!found.problems.is_empty()).then(|| {
            let fixed = run_fsck(dev.clone(), Mode::Repair, true);
            let again = run_fsck(dev, Mode::Check, true);
            (fixed, again)
        });
        out.push((state.to_string(), found, repaired));
    }
    out
}

#[test]
fn crash_states_check_clean_or_only_leak_a_nameless_inode_that_y_repairs() {
    for (state, found, repaired) in check_states() {
        let Some((fixed, again)) = repaired else {
            continue;
        };
        assert!(
            found
                .problems
                .iter()
                .all(|p| p.kind == fsck::Kind::UnreachableInode),
            "state {state}: {:#?}",
            found.problems
        );
        assert_eq!(fixed.exit_code(), 1, "state {state}: {:#?}", fixed.problems);
        assert_eq!(again.problems, vec![], "state {state} after -y");
    }
}

/// A new file in the root (domain 1) whose inode is in domain 0, written and fsync'd,
/// then a crash (the file system dropped without unmount): its name survives. Before
/// bca6c4f the directory lanes to persist lived in a handle dropped between create and
/// open, and the name was lost.
#[test]
fn fsynced_new_file_keeps_its_name_across_a_crash() {
    let dev = memory_image(IMAGE_BYTES, 2);
    let fs = mount(&dev);
    fs.create_dir("/a", 0o755).unwrap(); // inode 2: the next, 3, is in domain 1
    fs.create_dir("/b", 0o755).unwrap(); // inode 3: the file, 4, is in domain 0
    write(&fs, "/f", 20_000, true);
    assert_eq!(
        fs.resolve("/f", false).unwrap().0 % 2,
        0,
        "file in domain 0"
    );
    drop(fs); // a crash: no unmount
    let fs = mount(&dev);
    assert_eq!(fs.metadata("/f").map(|m| m.size).ok(), Some(20_000));
}
