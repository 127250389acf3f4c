//! Special files (FIFOs, sockets, character and block devices) in the vfs: mknod records
//! the kind and a device's number, stat and readdir report them, name and attribute
//! operations treat them as any non-directory, they survive a remount and a crash
//! after a sync, and an open through the vfs refuses them (ENXIO: the pipe, socket or
//! device is a kernel front end's, docs/SEMANTICS.md §4).

use std::sync::Arc;
use testsupport::image::{crash_copy, memory_image};
use testsupport::mount::{errno, mount};
use vfs::records::{dev_of, rdev_of};
use vfs::{AttrChanges, Creds, FileSystem, Kind, OpenOptions, RenameMode, TimeChange};

const NODES: [(&str, u32, u64); 4] = [
    ("/fifo", libc::S_IFIFO, 0),
    ("/sock", libc::S_IFSOCK, 0),
    ("/null", libc::S_IFCHR, 0x103), // makedev(1, 3)
    ("/sda", libc::S_IFBLK, 0x800),  // makedev(8, 0)
];

fn make_all(fs: &FileSystem) {
    for (path, ty, dev) in NODES {
        fs.make_node(path, ty | 0o640, dev).unwrap();
    }
}

fn check_all(fs: &FileSystem) {
    for (path, ty, dev) in NODES {
        let m = fs.symlink_metadata(path).unwrap();
        assert_eq!(m.mode, ty | 0o640, "{path}");
        assert_eq!(m.kind, Kind::from_mode(ty).unwrap(), "{path}");
        assert_eq!(m.rdev, dev, "{path}");
        assert_eq!((m.size, m.blocks, m.nlink), (0, 0, 1), "{path}");
    }
}

#[test]
fn mknod_records_kind_and_device_number() {
    let dev = memory_image(64 << 20, 2);
    let fs = mount(&dev);
    make_all(&fs);
    check_all(&fs);
    // A large device number keeps every bit (minor above 255: bits 20-31 on disk).
    let big = libc::makedev(259, 70_000);
    fs.make_node("/nvme", libc::S_IFBLK | 0o600, big).unwrap();
    assert_eq!(fs.metadata("/nvme").unwrap().rdev, big);
    // A FIFO or socket ignores the number (Linux does).
    fs.make_node("/fifo2", libc::S_IFIFO | 0o600, 0x103)
        .unwrap();
    assert_eq!(fs.metadata("/fifo2").unwrap().rdev, 0);
    // A regular file by mknod is a file.
    fs.make_node("/reg", libc::S_IFREG | 0o600, 0).unwrap();
    assert_eq!(fs.metadata("/reg").unwrap().kind, Kind::File);
    // What mknod cannot make.
    assert_eq!(
        errno(fs.make_node("/d", libc::S_IFDIR | 0o755, 0)),
        libc::EINVAL
    );
    assert_eq!(
        errno(fs.make_node("/l", libc::S_IFLNK | 0o777, 0)),
        libc::EINVAL
    );
    assert_eq!(errno(fs.make_node("/x", 0o644, 0)), libc::EINVAL);
    let wide = libc::makedev(4096, 0);
    assert_eq!(
        errno(fs.make_node("/w", libc::S_IFCHR | 0o600, wide)),
        libc::EINVAL
    );
    assert_eq!(
        errno(fs.make_node("/fifo", libc::S_IFIFO | 0o600, 0)),
        libc::EEXIST
    );
    // readdir's kinds.
    let kinds: Vec<(String, Kind)> = fs
        .read_dir("/")
        .unwrap()
        .into_iter()
        .map(|e| (String::from_utf8(e.name).unwrap(), e.kind))
        .collect();
    for (path, ty, _) in NODES {
        let want = (path[1..].to_string(), Kind::from_mode(ty).unwrap());
        assert!(kinds.contains(&want), "{want:?} in {kinds:?}");
    }
    // Remounted: read back from the records.
    Arc::into_inner(fs).unwrap().unmount().unwrap();
    let fs = mount(&dev);
    check_all(&fs);
    assert_eq!(fs.metadata("/nvme").unwrap().rdev, big);
    Arc::into_inner(fs).unwrap().unmount().unwrap();
}

#[test]
fn names_and_attributes_of_special_files() {
    let dev = memory_image(64 << 20, 2);
    let fs = mount(&dev);
    make_all(&fs);
    fs.create_dir("/d", 0o755).unwrap();
    let root = Creds::root();
    for (path, ty, rdev) in NODES {
        let moved = format!("/d{path}");
        let linked = format!("{path}.link");
        fs.rename_path(path, &moved, RenameMode::Replace).unwrap();
        fs.hard_link(&moved, &linked).unwrap();
        let m = fs.metadata(&linked).unwrap();
        assert_eq!(
            (m.mode & libc::S_IFMT, m.rdev, m.nlink),
            (ty, rdev, 2),
            "{path}"
        );
        fs.set_permissions(&linked, 0o604).unwrap();
        fs.chown(&linked, 7, 8).unwrap();
        let ino = fs.resolve(&moved, false).unwrap();
        let changes = AttrChanges {
            atime: Some(TimeChange::At(11)),
            mtime: Some(TimeChange::At(22)),
            ..AttrChanges::default()
        };
        fs.set_attr(&root, ino, &changes).unwrap();
        let m = fs.metadata(&moved).unwrap();
        assert_eq!(m.mode, ty | 0o604, "{path}");
        assert_eq!(
            (m.uid, m.gid, m.atime_ns, m.mtime_ns),
            (7, 8, 11, 22),
            "{path}"
        );
        assert_eq!(m.rdev, rdev, "{path}: attribute changes keep the number");
        fs.remove_file(&moved).unwrap();
        assert_eq!(fs.metadata(&linked).unwrap().nlink, 1);
        fs.remove_file(&linked).unwrap();
        assert_eq!(errno(fs.metadata(&linked)), libc::ENOENT);
    }
    // A rename over a special file replaces it like a file; over a directory it fails.
    fs.make_node("/p", libc::S_IFIFO | 0o600, 0).unwrap();
    fs.make_node("/q", libc::S_IFCHR | 0o600, 0x103).unwrap();
    fs.rename_path("/q", "/p", RenameMode::Replace).unwrap();
    assert_eq!(fs.metadata("/p").unwrap().kind, Kind::CharDev);
    assert_eq!(
        errno(fs.rename_path("/p", "/d", RenameMode::Replace)),
        libc::EISDIR
    );
    assert_eq!(errno(fs.remove_dir("/p")), libc::ENOTDIR);
    Arc::into_inner(fs).unwrap().unmount().unwrap();
}

#[test]
fn the_vfs_opens_no_special_file() {
    let fs = mount(&memory_image(64 << 20, 1));
    make_all(&fs);
    for (path, ..) in NODES {
        for write in [false, true] {
            let r = OpenOptions::new().read(!write).write(write).open(&fs, path);
            assert_eq!(errno(r), libc::ENXIO, "{path}");
        }
    }
    // Data calls on one by inode number (what a front end could attempt) fail too.
    let fifo = fs.resolve("/fifo", true).unwrap();
    assert_eq!(errno(fs.truncate(fifo, 0)), libc::EINVAL);
    // No user. attributes on special files (Linux: EPERM).
    let r = fs.set_xattr("/fifo", b"user.a", b"v", vfs::xattr::XattrMode::Either);
    assert_eq!(errno(r), libc::EPERM);
    Arc::into_inner(fs).unwrap().unmount().unwrap();
}

#[test]
fn special_files_survive_a_crash_after_sync() {
    let dev = memory_image(64 << 20, 2);
    let fs = mount(&dev);
    make_all(&fs);
    fs.sync().unwrap();
    let crashed = crash_copy(&dev);
    Arc::into_inner(fs).unwrap().unmount().unwrap();
    let fs = mount(&crashed);
    check_all(&fs);
    Arc::into_inner(fs).unwrap().unmount().unwrap();
}

#[test]
fn device_numbers_round_trip() {
    for dev in [
        0,
        libc::makedev(1, 3),
        libc::makedev(8, 17),
        libc::makedev(4095, 1 << 19),
    ] {
        assert_eq!(dev_of(rdev_of(dev).unwrap()), dev);
    }
}
