//! The damage report through the real binary (docs/TESTING.md §1b): an image cleanly
//! unmounted with an 8 MiB file, one block of MetaDB's WAL overwritten. `mount` must
//! refuse it with the damage named, `fsck -n` must report it (exit 4, image unchanged),
//! `fsck -y` must salvage it and name the file that lost acknowledged changes, and the
//! salvaged image must check clean.

mod common;

use common::{augefs, mkfs};
use engine::log::EngineConfig;
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;
use testsupport::mount::{open_file, unmount};
use testsupport::process::{check, describe, s};
use testsupport::scratch;

/// mkfs, an 8 MiB file written in 1 MiB buffered writes, a clean unmount; returns the
/// WAL region's non-zero blocks.
fn image_with_file(path: &Path) -> Vec<u64> {
    check("mkfs", &mkfs(path, "256M", &[]));
    let fs = open_file(path, EngineConfig::default());
    let f = vfs::OpenOptions::new()
        .write(true)
        .create(true)
        .open(&fs, "/f8")
        .unwrap();
    for i in 0..8u8 {
        f.write_at(&[i + 1; 1 << 20], u64::from(i) << 20).unwrap();
    }
    drop(f);
    unmount(fs);
    let dev = device::open(path, &device::OpenOptions::default()).unwrap();
    let wal = engine::image::read_superblock(&dev)
        .unwrap()
        .superblock
        .geometry
        .wal;
    drop(dev);
    let bytes = std::fs::read(path).unwrap();
    (wal.start_block..wal.end_block())
        .filter(|&b| bytes[b as usize * 4096..][..4096].iter().any(|&x| x != 0))
        .collect()
}

#[test]
fn a_damaged_wal_block_is_refused_reported_and_salvaged() {
    let dir = scratch!();
    let image = dir.path().join("img");
    let used = image_with_file(&image);
    // The next-to-last block the log uses: in the middle of the file's lane, with
    // intact records after it, all durable at the unmount.
    assert!(used.len() >= 3, "WAL blocks {used:?}");
    let block = used[used.len() - 2];
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(&image)
        .unwrap();
    f.seek(SeekFrom::Start(block * 4096)).unwrap();
    let noise: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    f.write_all(&noise).unwrap();
    drop(f);
    let before = std::fs::read(&image).unwrap();

    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let o = augefs(&["mount", s(&image), s(&mnt)]);
    assert!(
        !o.status.success(),
        "mount accepted a damaged log: {}",
        describe(&o)
    );
    assert!(
        describe(&o).contains("damaged MetaDB WAL record"),
        "{}",
        describe(&o)
    );
    assert!(
        std::fs::read(&image).unwrap() == before,
        "a refused mount wrote"
    );

    let o = augefs(&["fsck", s(&image), "-n"]);
    assert_eq!(o.status.code(), Some(4), "{}", describe(&o));
    assert!(describe(&o).contains("metadb_damaged"), "{}", describe(&o));
    assert!(
        std::fs::read(&image).unwrap() == before,
        "-n changed the image"
    );

    let o = augefs(&["fsck", s(&image), "-y"]);
    assert_eq!(o.status.code(), Some(1), "{}", describe(&o));
    let out = describe(&o);
    assert!(
        out.contains("acknowledged_changes_lost") && out.contains("/f8"),
        "{out}"
    );
    let o = augefs(&["fsck", s(&image), "-n", "--verify-data"]);
    assert_eq!(o.status.code(), Some(0), "{}", describe(&o));
}
