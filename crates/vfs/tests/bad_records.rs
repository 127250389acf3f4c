//! Records that decode but hold numbers at the end of their range (a damaged image):
//! link counts that cannot go up or down, a directory at inode u64::MAX. Each operation
//! returns an errno (EMLINK, EUCLEAN) instead of overflowing (docs/TESTING.md §1).

use format::InodeNo;
use metadb::Durability;
use std::sync::Arc;
use testsupport::image::memory_image;
use testsupport::mount::{errno, mount};
use vfs::records::{self, Dentry, Inode, Kind};
use vfs::{FileSystem, RenameMode};

/// Rewrites inode `ino`'s record through MetaDB (the VFS's cache is dropped by the
/// remount that follows).
fn set_nlink(fs: &FileSystem, ino: InodeNo, nlink: u32) {
    let db = fs.engine().metadb();
    let v = db
        .get(&records::inode_key(ino))
        .unwrap()
        .expect("inode record");
    let mut inode = Inode::decode(ino, &v).unwrap();
    inode.nlink = nlink;
    db.put(&records::inode_key(ino), &inode.encode(), Durability::Sync)
        .unwrap();
}

fn remount(dev: &Arc<device::Device>, fs: Arc<FileSystem>) -> Arc<FileSystem> {
    Arc::try_unwrap(fs).expect("one holder").unmount().unwrap();
    mount(dev)
}

#[test]
fn link_counts_at_their_limits_are_errors_not_overflows() {
    let dev = memory_image(96 << 20, 1);
    let fs = mount(&dev);
    fs.create_dir("/full", 0o755).unwrap();
    fs.create_dir("/empty", 0o755).unwrap();
    fs.create_dir("/empty/sub", 0o755).unwrap();
    vfs::OpenOptions::new()
        .write(true)
        .create(true)
        .open(&fs, "/f")
        .unwrap();
    fs.create_dir("/mover", 0o755).unwrap();
    let full = fs.resolve("/full", true).unwrap();
    let empty = fs.resolve("/empty", true).unwrap();
    let file = fs.resolve("/f", true).unwrap();
    set_nlink(&fs, full, u32::MAX);
    set_nlink(&fs, empty, 0);
    set_nlink(&fs, file, u32::MAX);
    let fs = remount(&dev, fs);

    assert_eq!(errno(fs.create_dir("/full/d", 0o755)), libc::EMLINK);
    assert_eq!(errno(fs.hard_link("/f", "/g")), libc::EMLINK);
    assert_eq!(
        errno(fs.rename_path("/mover", "/full/mover", RenameMode::Replace)),
        libc::EMLINK
    );
    assert_eq!(errno(fs.remove_dir("/empty/sub")), libc::EUCLEAN);
    set_nlink(&fs, file, 0);
    let fs = remount(&dev, fs);
    assert_eq!(errno(fs.remove_file("/f")), libc::EUCLEAN);
}

#[test]
fn a_directory_at_the_last_inode_number_lists() {
    let dev = memory_image(96 << 20, 1);
    let fs = mount(&dev);
    let last = InodeNo(u64::MAX);
    let db = fs.engine().metadb();
    let dir = Inode::new(Kind::Dir, 0o755, 0, 0, records::ROOT, 5);
    db.put(&records::inode_key(last), &dir.encode(), Durability::Sync)
        .unwrap();
    let entry = Dentry {
        ino: last,
        kind: Kind::Dir,
    };
    db.put(
        &records::dentry_key(records::ROOT, b"last"),
        &entry.encode(),
        Durability::Sync,
    )
    .unwrap();
    let fs = remount(&dev, fs);
    assert_eq!(fs.read_dir("/last").unwrap().len(), 0);
}
