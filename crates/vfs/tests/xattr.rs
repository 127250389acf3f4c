//! Extended attributes: set/get/list/remove with XATTR_CREATE and XATTR_REPLACE, the
//! supported namespaces and size limits, persistence across a remount, and removal
//! with the inode.

use format::constants::MIB;
use std::sync::Arc;
use testsupport::image::memory_image;
use testsupport::mount::mount;
use vfs::{OpenOptions, XattrMode};

#[test]
fn attributes_behave_like_linux_and_persist() {
    let dev = memory_image(128 * MIB, 2);
    let fs = mount(&dev);
    drop(
        OpenOptions::new()
            .write(true)
            .create(true)
            .open(&fs, "/f")
            .unwrap(),
    );
    let e = |r: Result<(), vfs::VfsError>| r.map_err(|e| e.errno());
    assert_eq!(
        e(fs.set_xattr("/f", b"user.a", b"1", XattrMode::Replace)),
        Err(libc::ENODATA)
    );
    fs.set_xattr("/f", b"user.a", b"1", XattrMode::Create)
        .unwrap();
    assert_eq!(
        e(fs.set_xattr("/f", b"user.a", b"2", XattrMode::Create)),
        Err(libc::EEXIST)
    );
    fs.set_xattr("/f", b"user.a", b"2", XattrMode::Replace)
        .unwrap();
    fs.set_xattr("/f", b"trusted.b", &vec![7; 65536], XattrMode::Either)
        .unwrap();
    assert_eq!(
        e(fs.set_xattr("/f", b"user.big", &vec![7; 65537], XattrMode::Either)),
        Err(libc::E2BIG)
    );
    assert_eq!(
        e(fs.set_xattr("/f", b"security.x", b"1", XattrMode::Either)),
        Err(libc::EOPNOTSUPP)
    );
    assert_eq!(
        e(fs.set_xattr("/f", b"user.", b"1", XattrMode::Either)),
        Err(libc::EOPNOTSUPP)
    );
    assert_eq!(fs.get_xattr("/f", b"user.a").unwrap(), b"2");
    assert_eq!(
        fs.get_xattr("/f", b"user.zz").map_err(|e| e.errno()),
        Err(libc::ENODATA)
    );
    assert_eq!(
        fs.list_xattr("/f").unwrap(),
        vec![b"trusted.b".to_vec(), b"user.a".to_vec()]
    );
    Arc::into_inner(fs).unwrap().unmount().unwrap();
    let fs = mount(&dev);
    assert_eq!(fs.get_xattr("/f", b"trusted.b").unwrap(), vec![7; 65536]);
    fs.remove_xattr("/f", b"user.a").unwrap();
    assert_eq!(e(fs.remove_xattr("/f", b"user.a")), Err(libc::ENODATA));
    assert_eq!(fs.list_xattr("/f").unwrap(), vec![b"trusted.b".to_vec()]);
    let ino = fs.resolve("/f", true).unwrap();
    fs.remove_file("/f").unwrap();
    let left = fs
        .engine()
        .metadb()
        .prefix(&vfs::records::xattr_prefix(ino), None)
        .unwrap()
        .count();
    assert_eq!(left, 0, "attributes go with the inode");
    Arc::into_inner(fs).unwrap().unmount().unwrap();
}
