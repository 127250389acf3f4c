//! O_TMPFILE: a nameless open file in a directory, freed at its last close, by the next
//! mount after a crash, or kept when `File::link` names it.

mod common;

use format::InodeNo;
use std::sync::Arc;
use testsupport::check::fsck_problems;
use testsupport::image::{crash_copy, memory_image};
use testsupport::mount::{mount, mounted};
use vfs::{FileSystem, OpenOptions};

const IMAGE: u64 = 128 << 20;

fn tmpfile(fs: &Arc<FileSystem>, dir: &str) -> vfs::File {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open_tmpfile(fs, dir)
        .unwrap()
}

#[test]
fn a_tmpfile_has_no_name_until_linked() {
    let dev = memory_image(IMAGE, 3);
    let fs = mount(&dev);
    fs.create_dir("/d", 0o755).unwrap();
    let f = tmpfile(&fs, "/d");
    let data: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
    f.write_at(&data, 0).unwrap();
    assert!(fs.read_dir("/d").unwrap().is_empty());
    assert_eq!(f.metadata().unwrap().nlink, 0);
    assert_eq!(common::orphan_records(&fs), 1);

    f.link("/d/x").unwrap();
    assert_eq!(f.metadata().unwrap().nlink, 1);
    assert_eq!(common::orphan_records(&fs), 0);
    assert_eq!(fs.metadata("/d/x").unwrap().ino, f.ino());
    // A second name, then the first goes: the file stays.
    f.link("/y").unwrap();
    fs.remove_file("/d/x").unwrap();
    drop(f);
    Arc::into_inner(fs).unwrap().unmount().unwrap();
    assert_eq!(fsck_problems(&dev), Vec::<String>::new());
    let fs = mount(&dev);
    let mut buf = vec![0u8; 20_000];
    let ino = fs.resolve("/y", false).unwrap();
    assert_eq!(fs.read_at(ino, 0, &mut buf).unwrap(), data.len());
    assert_eq!(&buf[..data.len()], &data[..]);
    Arc::into_inner(fs).unwrap().unmount().unwrap();
}

#[test]
fn an_unlinked_tmpfile_is_freed_at_close() {
    let dev = memory_image(IMAGE, 3);
    let fs = mount(&dev);
    let live = || fs.engine().space_report().live_blocks;
    let before = live();
    let f = tmpfile(&fs, "/");
    let ino = f.ino();
    f.write_at(&vec![7u8; 1 << 20], 0).unwrap();
    // Written back (the page cache holds it until then).
    f.sync_all().unwrap();
    assert_eq!(live() - before, 256);
    drop(f);
    assert_eq!(live(), before);
    assert_eq!(common::orphan_records(&fs), 0);
    assert_eq!(common::mapped_blocks(&fs, ino), 0);
    assert_eq!(fs.stat_ino(InodeNo(ino)).unwrap_err().errno(), libc::ENOENT);
    Arc::into_inner(fs).unwrap().unmount().unwrap();
    assert_eq!(fsck_problems(&dev), Vec::<String>::new());
}

#[test]
fn a_crash_with_an_open_tmpfile_leaks_no_inode() {
    let dev = memory_image(IMAGE, 3);
    let fs = mount(&dev);
    fs.create_dir("/d", 0o755).unwrap();
    let before = fs.engine().space_report().live_blocks;
    let open = tmpfile(&fs, "/d");
    open.write_at(&vec![1u8; 1 << 20], 0).unwrap();
    open.sync_all().unwrap();
    let linked = tmpfile(&fs, "/d");
    linked.write_at(&vec![2u8; 8192], 0).unwrap();
    linked.link("/d/kept").unwrap();
    linked.sync_all().unwrap();
    let crashed = crash_copy(&dev);
    let (oi, li) = (open.ino(), linked.ino());
    drop((open, linked));
    Arc::into_inner(fs).unwrap().unmount().unwrap();

    // fsck of the crash image sees the nameless inode kept by its orphan record.
    assert_eq!(fsck_problems(&crashed), Vec::<String>::new());
    let fs = mount(&crashed);
    assert_eq!(common::orphan_records(&fs), 0);
    assert_eq!(common::mapped_blocks(&fs, oi), 0);
    assert!(fs.stat_ino(InodeNo(oi)).is_err());
    assert_eq!(fs.metadata("/d/kept").unwrap().ino, li);
    assert_eq!(fs.engine().space_report().live_blocks - before, 2);
    Arc::into_inner(fs).unwrap().unmount().unwrap();
    assert_eq!(fsck_problems(&crashed), Vec::<String>::new());
}

#[test]
fn tmpfile_errors() {
    let fs = mounted(IMAGE, 1);
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&fs, "/f")
        .unwrap();
    let err = |r: Result<vfs::File, vfs::VfsError>| r.unwrap_err().errno();
    assert_eq!(
        err(OpenOptions::new().read(true).open_tmpfile(&fs, "/")),
        libc::EINVAL
    );
    assert_eq!(
        err(OpenOptions::new().write(true).open_tmpfile(&fs, "/f")),
        libc::ENOTDIR
    );
    assert_eq!(
        err(OpenOptions::new().write(true).open_tmpfile(&fs, "/no")),
        libc::ENOENT
    );
    let f = OpenOptions::new()
        .write(true)
        .open_tmpfile(&fs, "/")
        .unwrap();
    assert_eq!(f.link("/f").unwrap_err().errno(), libc::EEXIST);
    drop(f);
    Arc::into_inner(fs).unwrap().unmount().unwrap();
}
