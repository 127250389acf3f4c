//! `augefs_mount` on an image shorter than its file system: NULL and -EUCLEAN, the errno
//! of the refusal, not a catch-all EIO, and no panic across the C boundary.

use engine::mkfs::{format, MkfsOptions};
use engine::progress::NoProgress;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;

#[test]
fn a_truncated_image_is_refused_with_euclean() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let image = dir.path().join("img");
    let file = std::fs::File::create(&image).unwrap();
    file.set_len(128 << 20).unwrap();
    let dev = device::open(&image, &device::OpenOptions::default()).unwrap();
    let opts = MkfsOptions {
        domain_count: None,
        fs_uuid: [3; 16],
        created_unix_ns: 1,
        force: true,
        label: String::new(),
    };
    format(&dev, None, &opts, &NoProgress).unwrap();
    drop(dev);
    file.set_len(64 << 20).unwrap();

    let path = CString::new(image.as_os_str().as_bytes()).unwrap();
    let mut err = 0;
    // SAFETY: a NUL-terminated path, NULL for no PMR, and a pointer to an int.
    let h = unsafe { augefs::augefs_mount(path.as_ptr(), std::ptr::null(), &mut err) };
    assert!(h.is_null(), "a truncated image mounted");
    assert_eq!(err, -libc::EUCLEAN);
}
