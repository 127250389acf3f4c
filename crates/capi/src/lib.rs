//! `libaugefs.so`: the C ABI (include/augefs.h, pkg-config file augefs.pc). Each
//! function converts its arguments and calls the posix layer (`crates/posix`) of one
//! mounted image; errors come back as negative errnos (never errno).
//!
//! Invariants:
//! - An `augefs_t` is one mounted image and its own descriptor table (descriptors are
//!   small numbers of that table, not kernel descriptors).
//! - `augefs_unmount` closes every descriptor and unmounts (everything durable).
// Library code says why it cannot fail (`expect`) or returns an error; tests may unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]
#![expect(
    clippy::undocumented_unsafe_blocks,
    clippy::missing_safety_doc,
    reason = "each function runs under its contract in include/augefs.h: pointers are \
              valid for the sizes given, strings are NUL-terminated"
)]

use libc::{c_char, c_int, c_void, size_t, ssize_t};
use posix::{At, Posix};
use std::ffi::CStr;
use std::path::Path;

/// The opaque handle of a mounted image.
#[derive(Debug)]
pub struct Augefs {
    posix: Posix,
    /// The file system the posix layer runs on (unmounted by `augefs_unmount`).
    fs: std::sync::Arc<vfs::FileSystem>,
}

fn neg(r: posix::Result<i64>) -> i64 {
    r.unwrap_or_else(|posix::Errno(e)| -i64::from(e))
}

fn unit(r: posix::Result<()>) -> c_int {
    neg(r.map(|()| 0)) as c_int
}

unsafe fn s<'a>(p: *const c_char) -> &'a [u8] {
    if p.is_null() {
        return b"";
    }
    unsafe { CStr::from_ptr(p) }.to_bytes()
}

unsafe fn fs<'a>(h: *mut Augefs) -> &'a Posix {
    assert!(!h.is_null(), "augefs: a NULL handle");
    unsafe { &(*h).posix }
}

/// Mounts `image` (with `pmr`, or NULL); NULL on failure with `*err` (if not NULL) set
/// to the negative errno (-EBUSY: another process holds it).
#[no_mangle]
pub unsafe extern "C" fn augefs_mount(
    image: *const c_char,
    pmr: *const c_char,
    err: *mut c_int,
) -> *mut Augefs {
    let image = Path::new(os(unsafe { s(image) }));
    let pmr_bytes = unsafe { s(pmr) };
    let pmr = (!pmr_bytes.is_empty()).then(|| Path::new(os(pmr_bytes)));
    match posix::mount::mount_image(image, pmr, std::time::Duration::ZERO) {
        Ok(fs) => {
            let pid = std::process::id() as i32;
            Box::into_raw(Box::new(Augefs {
                posix: Posix::new(fs.clone(), vfs::Creds::of_process(), pid),
                fs,
            }))
        }
        Err(e) => {
            if !err.is_null() {
                // SAFETY: the caller passes NULL or a pointer to an int (augefs.h).
                unsafe { *err = -e.errno() };
            }
            std::ptr::null_mut()
        }
    }
}

fn os(b: &[u8]) -> &std::ffi::OsStr {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::OsStr::from_bytes(b)
}

/// Closes every descriptor and unmounts; 0 or a negative errno. `h` is freed either way.
#[no_mangle]
pub unsafe extern "C" fn augefs_unmount(h: *mut Augefs) -> c_int {
    if h.is_null() {
        return -libc::EINVAL;
    }
    let b = unsafe { Box::from_raw(h) };
    for (fd, _, _) in b.posix.descriptors() {
        let _ = b.posix.close(fd);
    }
    let Augefs { posix, fs } = *b;
    drop(posix);
    match std::sync::Arc::into_inner(fs) {
        Some(fs) => unit(fs.unmount().map_err(posix::Errno::from)),
        None => -libc::EBUSY,
    }
}

#[no_mangle]
pub unsafe extern "C" fn augefs_open(
    h: *mut Augefs,
    path: *const c_char,
    flags: c_int,
    mode: u32,
) -> c_int {
    neg(unsafe { fs(h) }
        .open_fd(At::Cwd, unsafe { s(path) }, flags, mode)
        .map(i64::from)) as c_int
}

#[no_mangle]
pub unsafe extern "C" fn augefs_close(h: *mut Augefs, fd: c_int) -> c_int {
    unit(unsafe { fs(h) }.close(fd))
}

#[no_mangle]
pub unsafe extern "C" fn augefs_read(
    h: *mut Augefs,
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
) -> ssize_t {
    let b = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), n) };
    neg(unsafe { fs(h) }.read(fd, b).map(|n| n as i64)) as ssize_t
}

#[no_mangle]
pub unsafe extern "C" fn augefs_write(
    h: *mut Augefs,
    fd: c_int,
    buf: *const c_void,
    n: size_t,
) -> ssize_t {
    let b = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), n) };
    neg(unsafe { fs(h) }.write(fd, b).map(|n| n as i64)) as ssize_t
}

#[no_mangle]
pub unsafe extern "C" fn augefs_pread(
    h: *mut Augefs,
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    off: i64,
) -> ssize_t {
    let b = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), n) };
    neg(unsafe { fs(h) }.pread(fd, b, off).map(|n| n as i64)) as ssize_t
}

/// A zero-copy read's view ([`augefs_pread_view`]): the bytes and the iovecs that point
/// into them, valid until [`augefs_view_release`].
#[derive(Debug)]
pub struct AugefsView {
    view: vfs::ReadView,
    iov: Vec<libc::iovec>,
}

/// `pread` without a copy: `*view` lends up to `n` bytes at `off` (the cache's own
/// blocks); returns the bytes lent (0 at the end), or a negative errno with `*view`
/// NULL.
#[no_mangle]
pub unsafe extern "C" fn augefs_pread_view(
    h: *mut Augefs,
    fd: c_int,
    n: size_t,
    off: i64,
    view: *mut *mut AugefsView,
) -> ssize_t {
    assert!(!view.is_null(), "augefs: a NULL view pointer");
    let (out, r) = match unsafe { fs(h) }.pread_view(fd, n, off) {
        Ok(v) => {
            let iov = v
                .slices()
                .map(|s| libc::iovec {
                    iov_base: s.as_ptr().cast_mut().cast::<c_void>(),
                    iov_len: s.len(),
                })
                .collect();
            let len = v.len() as ssize_t;
            // The iovecs point into the blocks (or the owned vector's heap), which do
            // not move with the box.
            (Box::into_raw(Box::new(AugefsView { view: v, iov })), len)
        }
        Err(posix::Errno(e)) => (std::ptr::null_mut(), -(e as ssize_t)),
    };
    unsafe { *view = out };
    r
}

/// The view's bytes as iovecs, in order (`*iov` valid until the view is released);
/// returns their count.
#[no_mangle]
pub unsafe extern "C" fn augefs_view_iov(
    view: *const AugefsView,
    iov: *mut *const libc::iovec,
) -> c_int {
    assert!(!view.is_null() && !iov.is_null(), "augefs: a NULL view");
    let v = unsafe { &*view };
    debug_assert_eq!(v.iov.iter().map(|i| i.iov_len).sum::<usize>(), v.view.len());
    unsafe { *iov = v.iov.as_ptr() };
    c_int::try_from(v.iov.len()).expect("a view's iovecs fit an int")
}

/// Ends the loan of `view` (NULL: nothing); its iovecs are invalid after.
#[no_mangle]
pub unsafe extern "C" fn augefs_view_release(view: *mut AugefsView) {
    if !view.is_null() {
        drop(unsafe { Box::from_raw(view) });
    }
}

#[no_mangle]
pub unsafe extern "C" fn augefs_pwrite(
    h: *mut Augefs,
    fd: c_int,
    buf: *const c_void,
    n: size_t,
    off: i64,
) -> ssize_t {
    let b = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), n) };
    neg(unsafe { fs(h) }.pwrite(fd, b, off).map(|n| n as i64)) as ssize_t
}

#[no_mangle]
pub unsafe extern "C" fn augefs_lseek(h: *mut Augefs, fd: c_int, off: i64, whence: c_int) -> i64 {
    neg(unsafe { fs(h) }.lseek(fd, off, whence))
}

#[no_mangle]
pub unsafe extern "C" fn augefs_fsync(h: *mut Augefs, fd: c_int) -> c_int {
    unit(unsafe { fs(h) }.fsync(fd, false))
}

/// `stat` (follows a final symlink) into `*out`.
#[no_mangle]
pub unsafe extern "C" fn augefs_stat(
    h: *mut Augefs,
    path: *const c_char,
    out: *mut libc::stat,
) -> c_int {
    let r = unsafe { fs(h) }.stat(At::Cwd, unsafe { s(path) }, true, false);
    unit(r.map(|m| unsafe { out.write(posix::stat::to_stat(&m)) }))
}

#[no_mangle]
pub unsafe extern "C" fn augefs_mkdir(h: *mut Augefs, path: *const c_char, mode: u32) -> c_int {
    unit(unsafe { fs(h) }.mkdir(At::Cwd, unsafe { s(path) }, mode))
}

#[no_mangle]
pub unsafe extern "C" fn augefs_unlink(h: *mut Augefs, path: *const c_char) -> c_int {
    unit(unsafe { fs(h) }.unlink(At::Cwd, unsafe { s(path) }, false))
}

#[no_mangle]
pub unsafe extern "C" fn augefs_rmdir(h: *mut Augefs, path: *const c_char) -> c_int {
    unit(unsafe { fs(h) }.unlink(At::Cwd, unsafe { s(path) }, true))
}

#[no_mangle]
pub unsafe extern "C" fn augefs_rename(
    h: *mut Augefs,
    from: *const c_char,
    to: *const c_char,
) -> c_int {
    unit(unsafe { fs(h) }.rename(At::Cwd, unsafe { s(from) }, At::Cwd, unsafe { s(to) }, 0))
}

/// The next entry of directory descriptor `fd` (opened with O_DIRECTORY): its name
/// (NUL-terminated, truncated to `cap`) in `name`; 1 for an entry, 0 at the end.
#[no_mangle]
pub unsafe extern "C" fn augefs_readdir(
    h: *mut Augefs,
    fd: c_int,
    name: *mut c_char,
    cap: size_t,
) -> c_int {
    match unsafe { fs(h) }.readdir(fd) {
        Ok(Some(e)) => {
            if cap > 0 {
                let n = e.name.len().min(cap - 1);
                unsafe {
                    std::ptr::copy_nonoverlapping(e.name.as_ptr(), name.cast::<u8>(), n);
                    *name.add(n) = 0;
                }
            }
            1
        }
        Ok(None) => 0,
        Err(posix::Errno(e)) => -e,
    }
}
