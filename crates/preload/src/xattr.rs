//! Exported extended-attribute calls: by path (following symbolic links or not) and by
//! descriptor.

#![expect(
    clippy::undocumented_unsafe_blocks,
    reason = "each exported function runs under the C contract of the libc function it \
              replaces: its pointers are what that contract says"
)]

use crate::guard;
use crate::names::via;
use crate::real::real;
use crate::route::{self, bytes, ret};
use libc::{c_char, c_int, c_void, size_t, ssize_t};
use posix::Posix;

unsafe fn copy_out(v: &[u8], buf: *mut c_void, n: size_t) -> posix::Result<ssize_t> {
    if n == 0 {
        return Ok(v.len() as ssize_t);
    }
    if v.len() > n {
        return Err(posix::Errno(libc::ERANGE));
    }
    unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), buf.cast::<u8>(), v.len()) };
    Ok(v.len() as ssize_t)
}

unsafe fn xattr_path(
    path: *const c_char,
    follow: bool,
    kernel: impl FnOnce(*const c_char) -> ssize_t,
    augefs: impl FnOnce(&Posix, format::InodeNo) -> posix::Result<ssize_t>,
) -> ssize_t {
    let out = std::cell::Cell::new(0 as ssize_t);
    let r = unsafe {
        via(
            libc::AT_FDCWD,
            path,
            |p| {
                out.set(kernel(p));
                out.get().min(0) as c_int
            },
            |px, at, rel| {
                out.set(augefs(px, px.lookup(at, rel, follow, false)?)?);
                Ok(())
            },
        )
    };
    if r < 0 {
        -1
    } else {
        out.get()
    }
}

unsafe fn xattr_fd(
    fd: c_int,
    kernel: impl FnOnce() -> ssize_t,
    augefs: impl FnOnce(&Posix, format::InodeNo) -> posix::Result<ssize_t>,
) -> ssize_t {
    match route::fd(fd) {
        Some(px) => {
            let _g = guard::enter();
            ret(px
                .get(fd)
                .and_then(|d| augefs(px, d.ino()))
                .map(|n| n as i64)) as ssize_t
        }
        None => kernel(),
    }
}

macro_rules! xattr_calls {
    ($set:ident, $get:ident, $list:ident, $remove:ident, $follow:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $set(path: *const c_char, name: *const c_char, v: *const c_void, n: size_t, flags: c_int) -> c_int {
            let real = real!($set: fn(*const c_char, *const c_char, *const c_void, size_t, c_int) -> c_int);
            let value = unsafe { std::slice::from_raw_parts(v.cast::<u8>(), n) };
            unsafe { xattr_path(path, $follow, |p| real(p, name, v, n, flags) as ssize_t, |px, ino| {
                px.set_xattr(ino, bytes(name), value, flags).map(|()| 0)
            }) as c_int }
        }
        #[no_mangle]
        pub unsafe extern "C" fn $get(path: *const c_char, name: *const c_char, v: *mut c_void, n: size_t) -> ssize_t {
            let real = real!($get: fn(*const c_char, *const c_char, *mut c_void, size_t) -> ssize_t);
            unsafe { xattr_path(path, $follow, |p| real(p, name, v, n), |px, ino| copy_out(&px.get_xattr(ino, bytes(name))?, v, n)) }
        }
        #[no_mangle]
        pub unsafe extern "C" fn $list(path: *const c_char, v: *mut c_char, n: size_t) -> ssize_t {
            let real = real!($list: fn(*const c_char, *mut c_char, size_t) -> ssize_t);
            unsafe { xattr_path(path, $follow, |p| real(p, v, n), |px, ino| copy_out(&px.list_xattr(ino)?, v.cast(), n)) }
        }
        #[no_mangle]
        pub unsafe extern "C" fn $remove(path: *const c_char, name: *const c_char) -> c_int {
            let real = real!($remove: fn(*const c_char, *const c_char) -> c_int);
            unsafe { xattr_path(path, $follow, |p| real(p, name) as ssize_t, |px, ino| px.remove_xattr(ino, bytes(name)).map(|()| 0)) as c_int }
        }
    };
}

xattr_calls!(setxattr, getxattr, listxattr, removexattr, true);
xattr_calls!(lsetxattr, lgetxattr, llistxattr, lremovexattr, false);

#[no_mangle]
pub unsafe extern "C" fn fsetxattr(
    fd: c_int,
    name: *const c_char,
    v: *const c_void,
    n: size_t,
    flags: c_int,
) -> c_int {
    let real = real!(fsetxattr: fn(c_int, *const c_char, *const c_void, size_t, c_int) -> c_int);
    let value = unsafe { std::slice::from_raw_parts(v.cast::<u8>(), n) };
    unsafe {
        xattr_fd(
            fd,
            || real(fd, name, v, n, flags) as ssize_t,
            |px, ino| px.set_xattr(ino, bytes(name), value, flags).map(|()| 0),
        ) as c_int
    }
}
#[no_mangle]
pub unsafe extern "C" fn fgetxattr(
    fd: c_int,
    name: *const c_char,
    v: *mut c_void,
    n: size_t,
) -> ssize_t {
    let real = real!(fgetxattr: fn(c_int, *const c_char, *mut c_void, size_t) -> ssize_t);
    unsafe {
        xattr_fd(
            fd,
            || real(fd, name, v, n),
            |px, ino| copy_out(&px.get_xattr(ino, bytes(name))?, v, n),
        )
    }
}
#[no_mangle]
pub unsafe extern "C" fn flistxattr(fd: c_int, v: *mut c_char, n: size_t) -> ssize_t {
    let real = real!(flistxattr: fn(c_int, *mut c_char, size_t) -> ssize_t);
    unsafe {
        xattr_fd(
            fd,
            || real(fd, v, n),
            |px, ino| copy_out(&px.list_xattr(ino)?, v.cast(), n),
        )
    }
}
#[no_mangle]
pub unsafe extern "C" fn fremovexattr(fd: c_int, name: *const c_char) -> c_int {
    let real = real!(fremovexattr: fn(c_int, *const c_char) -> c_int);
    unsafe {
        xattr_fd(
            fd,
            || real(fd, name) as ssize_t,
            |px, ino| px.remove_xattr(ino, bytes(name)).map(|()| 0),
        ) as c_int
    }
}
