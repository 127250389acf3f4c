//! Orphans: a file unlinked (or replaced by a rename) while open keeps its data until its
//! last close; a crash before that close leaves an orphan record, and the next mount
//! frees the inode and its blocks.

mod common;

use format::InodeNo;
use std::sync::Arc;
use testsupport::image::{crash_copy, memory_image};
use testsupport::mount::mount;
use vfs::{FileSystem, OpenOptions, RenameMode};

const MIB: u64 = 1 << 20;
const IMAGE: u64 = 128 * MIB;

/// Makes `path` with 1 MiB of data and returns it open for reading.
fn big_open_file(fs: &Arc<FileSystem>, path: &str) -> vfs::File {
    let f = OpenOptions::new()
        .write(true)
        .create(true)
        .open(fs, path)
        .unwrap();
    f.write_at(&vec![9u8; MIB as usize], 0).unwrap();
    f.sync_all().unwrap();
    drop(f);
    OpenOptions::new().read(true).open(fs, path).unwrap()
}

#[test]
fn unlinked_open_file_is_readable_and_freed_at_last_close() {
    let dev = memory_image(IMAGE, 3);
    let fs = mount(&dev);
    let f = big_open_file(&fs, "/a");
    let ino = f.ino();
    fs.remove_file("/a").unwrap();
    assert!(fs.metadata("/a").is_err());
    assert_eq!(common::orphan_records(&fs), 1);
    let mut buf = vec![0u8; 4096];
    assert_eq!(f.read_at(&mut buf, 12_288).unwrap(), 4096);
    assert!(buf.iter().all(|&b| b == 9));
    assert_eq!(f.metadata().unwrap().nlink, 0);
    drop(f);
    assert_eq!(common::orphan_records(&fs), 0);
    assert_eq!(common::mapped_blocks(&fs, ino), 0);
    Arc::into_inner(fs).unwrap().unmount().unwrap();
}

#[test]
fn crash_while_an_unlinked_file_is_open_frees_it_at_mount() {
    let dev = memory_image(IMAGE, 3);
    let fs = mount(&dev);
    let before = fs.engine().space_report().live_blocks;
    let f = big_open_file(&fs, "/a");
    let g = big_open_file(&fs, "/b");
    fs.create_dir("/d", 0o755).unwrap();
    let replacing = big_open_file(&fs, "/d/c");
    let (fi, gi, ri) = (f.ino(), g.ino(), replacing.ino());
    fs.remove_file("/a").unwrap();
    // A rename over an open file orphans it too.
    fs.rename_path("/b", "/d/c", RenameMode::Replace).unwrap();
    fs.sync().unwrap();
    assert_eq!(common::orphan_records(&fs), 2);
    let crashed = crash_copy(&dev);
    drop((f, g, replacing));
    Arc::into_inner(fs).unwrap().unmount().unwrap();

    let fs = mount(&crashed);
    assert_eq!(common::orphan_records(&fs), 0);
    assert_eq!(common::mapped_blocks(&fs, fi), 0);
    assert_eq!(common::mapped_blocks(&fs, ri), 0);
    assert!(fs.stat_ino(InodeNo(fi)).is_err());
    assert!(fs.stat_ino(InodeNo(ri)).is_err());
    // The renamed file lives on under its new name.
    assert_eq!(fs.metadata("/d/c").unwrap().ino, gi);
    assert_eq!(common::mapped_blocks(&fs, gi), 256);
    // Space: only /d/c's MiB is still live.
    assert_eq!(fs.engine().space_report().live_blocks - before, 256);
    Arc::into_inner(fs).unwrap().unmount().unwrap();
}

/// Closed files with blocks, unlinked: their blocks are freed after the unlinks return
/// (`vfs::reap`), all of them by the time statfs answers; a crash right after the
/// unlinks frees the rest at the next mount.
#[test]
fn unlinked_closed_files_are_freed_by_statfs_or_the_next_mount() {
    let dev = memory_image(IMAGE, 3);
    let fs = mount(&dev);
    let before = fs.engine().space_report().live_blocks;
    let files_before = fs.statfs().files - fs.statfs().files_free;
    let mut inos = Vec::new();
    for i in 0..64 {
        let f = big_open_file(&fs, &format!("/f{i}"));
        inos.push(f.ino());
    }
    for i in 0..64 {
        fs.remove_file(&format!("/f{i}")).unwrap();
        assert!(fs.metadata(&format!("/f{i}")).is_err());
    }
    fs.sync().unwrap();
    let crashed = crash_copy(&dev);
    // statfs waits for the reaper: everything is freed when it answers.
    let st = fs.statfs();
    assert_eq!(fs.engine().space_report().live_blocks, before);
    assert_eq!(st.files - st.files_free, files_before);
    assert_eq!(common::orphan_records(&fs), 0);
    for &ino in &inos {
        assert_eq!(common::mapped_blocks(&fs, ino), 0);
        assert!(fs.stat_ino(InodeNo(ino)).is_err());
    }
    assert_eq!(fs.engine().space_report().live_blocks, before);
    Arc::into_inner(fs).unwrap().unmount().unwrap();

    let fs = mount(&crashed);
    assert_eq!(common::orphan_records(&fs), 0);
    for &ino in &inos {
        assert_eq!(common::mapped_blocks(&fs, ino), 0);
        assert!(fs.stat_ino(InodeNo(ino)).is_err());
    }
    assert_eq!(fs.engine().space_report().live_blocks, before);
    let st = fs.statfs();
    assert_eq!(st.files - st.files_free, files_before);
    Arc::into_inner(fs).unwrap().unmount().unwrap();
}
