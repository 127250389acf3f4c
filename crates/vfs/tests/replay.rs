//! A file written, closed and removed, then a sync: the removal survives a clean unmount
//! and a crash right after the sync. (The WAL replay once judged the removed file's data,
//! made durable by the sync and then freed, discarded and zeroed with its segment, as
//! never written, and dropped the rest of the lane with the removal: the file came back
//! after a remount with its blocks reused. Found by sqlite's rollback journal and
//! RocksDB's WAL on a FUSE mount.)

use device::Device;
use std::sync::Arc;
use testsupport::image::{crash_copy, memory_image};
use testsupport::mount::mount;
use vfs::{FileSystem, OpenOptions};

fn names(fs: &FileSystem) -> Vec<String> {
    fs.read_dir("/d")
        .unwrap()
        .iter()
        .map(|e| String::from_utf8_lossy(&e.name).into_owned())
        .collect()
}

/// A 5.5 MB database and a 2.8 MB journal written in unaligned 4100-byte pieces (more than
/// a segment), the journal closed and removed; returns the image and the mounted fs.
fn workload(domains: u32) -> (Arc<Device>, Arc<FileSystem>) {
    let dev = memory_image(512 << 20, domains);
    let fs = mount(&dev);
    fs.create_dir("/d", 0o755).unwrap();
    let open = |p: &str| {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .open(&fs, p)
            .unwrap()
    };
    let db = open("/d/t.db");
    let mut off = 0;
    while off < 5_558_272 {
        db.write_at(&[(off / 4096) as u8; 128 << 10], off).unwrap();
        off += 128 << 10;
    }
    let journal = open("/d/t.db-journal");
    let mut off = 0;
    while off < 2_800_000 {
        journal.write_at(&[7u8; 4100], off).unwrap();
        off += 4100;
    }
    drop(journal);
    fs.remove_file("/d/t.db-journal").unwrap();
    drop(db);
    assert_eq!(names(&fs), ["t.db"]);
    (dev, fs)
}

#[test]
fn a_removed_file_stays_removed_after_unmount() {
    for domains in [1, 4] {
        let (dev, fs) = workload(domains);
        Arc::into_inner(fs).unwrap().unmount().unwrap();
        assert_eq!(names(&mount(&dev)), ["t.db"], "{domains} domains");
    }
}

#[test]
fn a_removed_file_stays_removed_after_a_crash_after_sync() {
    let (dev, fs) = workload(2);
    fs.sync().unwrap();
    // A crash: the memory device keeps everything written; nothing more is written.
    let crashed = crash_copy(&dev);
    drop(fs);
    assert_eq!(names(&mount(&crashed)), ["t.db"]);
}
