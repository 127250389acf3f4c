//! The front door (`vfs::image::open_image`) on real image files: a read-only open runs
//! recovery on a copy-on-write view and never writes the image, refuses every change
//! with EROFS, shares the image with other readers and never with a writer.

use std::path::Path;
use std::sync::Arc;
use testsupport::bytes::bytes;
use testsupport::image::mkfs_file;
use testsupport::mount::errno;
use vfs::image::{open_image, ImageOptions};
use vfs::{FileSystem, OpenOptions, RenameMode};

const IMAGE_BYTES: u64 = 256 << 20;

fn open(path: &Path, read_only: bool) -> Result<Arc<FileSystem>, vfs::image::ImageError> {
    let opts = ImageOptions {
        read_only,
        ..ImageOptions::default()
    };
    open_image(path, &opts, &mut |_| {}).map(Arc::new)
}

fn read_all(fs: &Arc<FileSystem>, path: &str) -> Vec<u8> {
    let f = OpenOptions::new().read(true).open(fs, path).unwrap();
    let size = f.metadata().unwrap().size as usize;
    let mut buf = vec![0u8; size];
    let mut at = 0;
    while at < size {
        let n = f.read_at(&mut buf[at..], at as u64).unwrap();
        assert!(n > 0, "{path}: short read at {at}");
        at += n;
    }
    buf
}

#[test]
fn a_read_only_open_recovers_and_never_writes_the_image() {
    let dir = tempfile::tempdir().unwrap();
    let (image, crashed) = (dir.path().join("img"), dir.path().join("crashed"));
    mkfs_file(&image, IMAGE_BYTES, 3);
    let fs = open(&image, false).unwrap();
    fs.create_dir("/d", 0o755).unwrap();
    for (i, len) in [(1u64, 5000usize), (2, 3 << 20)] {
        let f = OpenOptions::new()
            .write(true)
            .create(true)
            .open(&fs, &format!("/d/f{i}"))
            .unwrap();
        f.write_at(&bytes(i, len), 0).unwrap();
        f.sync_all().unwrap();
    }
    // A copy taken now is the image of a crash: what was fsync'd is in MetaDB's WAL,
    // not yet in its tables, so opening it needs recovery.
    std::fs::copy(&image, &crashed).unwrap();
    Arc::into_inner(fs).unwrap().unmount().unwrap();

    let before = std::fs::read(&crashed).unwrap();
    let ro = open(&crashed, true).unwrap();
    assert_eq!(read_all(&ro, "/d/f1"), bytes(1, 5000));
    assert_eq!(read_all(&ro, "/d/f2"), bytes(2, 3 << 20));
    assert_eq!(
        ro.read_only_reason().as_deref(),
        Some(vfs::image::READ_ONLY_REASON)
    );
    let erofs = libc::EROFS;
    assert_eq!(errno(ro.create_dir("/e", 0o755)), erofs);
    assert_eq!(errno(ro.remove_file("/d/f1")), erofs);
    assert_eq!(errno(ro.set_permissions("/d/f1", 0o600)), erofs);
    assert_eq!(
        errno(ro.rename_path("/d/f1", "/d/g", RenameMode::Replace)),
        erofs
    );
    assert_eq!(
        errno(
            OpenOptions::new()
                .write(true)
                .create(true)
                .open(&ro, "/new")
        ),
        erofs
    );
    let f = OpenOptions::new().write(true).open(&ro, "/d/f1");
    if let Ok(f) = f {
        assert_eq!(errno(f.write_at(b"x", 0)), erofs);
        assert_eq!(errno(f.set_len(1)), erofs);
    }
    Arc::into_inner(ro).unwrap().unmount().unwrap();
    assert!(
        std::fs::read(&crashed).unwrap() == before,
        "a read-only open changed the image"
    );

    // The read-write open recovers the same state.
    let rw = open(&crashed, false).unwrap();
    assert_eq!(read_all(&rw, "/d/f2"), bytes(2, 3 << 20));
    Arc::into_inner(rw).unwrap().unmount().unwrap();
}

#[test]
fn readers_share_an_image_and_a_writer_has_it_alone() {
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("img");
    mkfs_file(&image, IMAGE_BYTES, 3);
    let a = open(&image, true).unwrap();
    let b = open(&image, true).unwrap();
    let Err(refused) = open(&image, false) else {
        panic!("a writer beside readers")
    };
    assert!(refused.in_use(), "{refused}");
    assert_eq!(refused.errno(), libc::EBUSY);
    drop((a, b));
    let w = open(&image, false).unwrap();
    let Err(refused) = open(&image, true) else {
        panic!("a reader beside a writer")
    };
    assert!(refused.in_use(), "{refused}");
    drop(w);
}
