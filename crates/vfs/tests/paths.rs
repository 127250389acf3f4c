//! Paths as the front ends hand them to `resolve_parent_at`: trailing slashes, however
//! many, name the last component (Linux: mkdir("d//") makes d); a path of slashes alone
//! names no entry; a create of such a path that resolves is EEXIST (Linux's mkdir of
//! "/" or of a mount point, which Gluster's bricks make when they make each prefix of a
//! path).

use testsupport::image::memory_image;
use testsupport::mount::mount;
use vfs::records::ROOT;
use vfs::{Creds, VfsError};

#[test]
fn trailing_slashes_name_the_last_component() {
    let dev = memory_image(64 << 20, 1);
    let fs = mount(&dev);
    let cx = Creds::root();
    fs.create_dir("/a", 0o755).unwrap();
    for (path, name) in [
        (&b"d"[..], &b"d"[..]),
        (b"d/", b"d"),
        (b"d//", b"d"),
        (b"/a/b///", b"b"),
        (b"a//b//", b"b"),
    ] {
        let (parent, got) = fs.resolve_parent_at(&cx, ROOT, path).unwrap();
        assert_eq!(got, name, "{}", String::from_utf8_lossy(path));
        let want = if path.starts_with(b"d") {
            ROOT
        } else {
            fs.resolve_at(&cx, ROOT, b"a", true).unwrap()
        };
        assert_eq!(parent, want, "{}", String::from_utf8_lossy(path));
    }
    for path in [&b"/"[..], b"//", b"a/.//", b"a/..//"] {
        let r = fs.resolve_parent_at(&cx, ROOT, path);
        assert!(
            matches!(r, Err(VfsError::Invalid(_))),
            "{}: {r:?}",
            String::from_utf8_lossy(path)
        );
    }
}

#[test]
fn a_create_of_the_root_dot_or_dotdot_is_eexist() {
    let dev = memory_image(64 << 20, 1);
    let fs = mount(&dev);
    let cx = Creds::root();
    fs.create_dir("/a", 0o755).unwrap();
    for path in [&b"/"[..], b"//", b"/a/.", b"a/..//"] {
        let r = fs.create_parent_at(&cx, ROOT, path);
        assert!(
            matches!(r, Err(VfsError::Exists(_))),
            "{}: {r:?}",
            String::from_utf8_lossy(path)
        );
    }
    let r = fs.create_parent_at(&cx, ROOT, b"/missing/..");
    assert!(matches!(r, Err(VfsError::NotFound(_))), "{r:?}");
    assert_eq!(fs.create_parent_at(&cx, ROOT, b"/a/b//").unwrap().1, b"b");
}
