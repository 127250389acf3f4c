//! Exported extended-attribute calls: by path (following symbolic links or not) and by
//! descriptor.

#![expect(
    clippy::undocumented_unsafe_blocks,
    reason = "each exported function runs under the C contract of the libc function it \
              replaces: its pointers are what that contract says"
)]

use crate::route::bytes;
use crate::wrap::{buf, interpose};
use format::InodeNo;
use libc::{c_char, c_int, c_void, size_t, ssize_t};
use posix::Posix;

/// The value of a get or list call: its size when `n` is 0, else copied into `buf`
/// (ERANGE if it does not fit).
unsafe fn copy_out(v: &[u8], buf: *mut c_void, n: size_t) -> posix::Result<usize> {
    if n == 0 {
        return Ok(v.len());
    }
    if v.len() > n {
        return Err(posix::Errno(libc::ERANGE));
    }
    unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), buf.cast::<u8>(), v.len()) };
    Ok(v.len())
}

/// The inode of augefs descriptor `fd`.
fn ino_of(px: &Posix, fd: c_int) -> posix::Result<InodeNo> {
    Ok(px.get(fd)?.ino())
}

/// The calls by path: following a final symbolic link (`true`) or not.
macro_rules! xattr_calls {
    ($set:ident, $get:ident, $list:ident, $remove:ident, $follow:expr) => {
        interpose! {
            fn $set(
                path: *const c_char, name: *const c_char, v: *const c_void, n: size_t, flags: c_int,
            ) -> c_int;
            path(libc::AT_FDCWD, path) => |px, at, rel| {
                let ino = px.lookup(at, rel, $follow, false)?;
                px.set_xattr(ino, unsafe { bytes(name) }, unsafe { buf(v, n) }, flags)
            }
        }
        interpose! {
            fn $get(path: *const c_char, name: *const c_char, v: *mut c_void, n: size_t) -> ssize_t;
            path(libc::AT_FDCWD, path) => |px, at, rel| {
                let ino = px.lookup(at, rel, $follow, false)?;
                unsafe { copy_out(&px.get_xattr(ino, bytes(name))?, v, n) }
            }
        }
        interpose! {
            fn $list(path: *const c_char, v: *mut c_char, n: size_t) -> ssize_t;
            path(libc::AT_FDCWD, path) => |px, at, rel| {
                let ino = px.lookup(at, rel, $follow, false)?;
                unsafe { copy_out(&px.list_xattr(ino)?, v.cast(), n) }
            }
        }
        interpose! {
            fn $remove(path: *const c_char, name: *const c_char) -> c_int;
            path(libc::AT_FDCWD, path) => |px, at, rel| {
                let ino = px.lookup(at, rel, $follow, false)?;
                px.remove_xattr(ino, unsafe { bytes(name) })
            }
        }
    };
}

xattr_calls!(setxattr, getxattr, listxattr, removexattr, true);
xattr_calls!(lsetxattr, lgetxattr, llistxattr, lremovexattr, false);

interpose! {
    fn fsetxattr(
        fd: c_int, name: *const c_char, v: *const c_void, n: size_t, flags: c_int,
    ) -> c_int;
    fd(fd) => |px| {
        px.set_xattr(ino_of(px, fd)?, unsafe { bytes(name) }, unsafe { buf(v, n) }, flags)
    }
}
interpose! {
    fn fgetxattr(fd: c_int, name: *const c_char, v: *mut c_void, n: size_t) -> ssize_t;
    fd(fd) => |px| unsafe { copy_out(&px.get_xattr(ino_of(px, fd)?, bytes(name))?, v, n) }
}
interpose! {
    fn flistxattr(fd: c_int, v: *mut c_char, n: size_t) -> ssize_t;
    fd(fd) => |px| unsafe { copy_out(&px.list_xattr(ino_of(px, fd)?)?, v.cast(), n) }
}
interpose! {
    fn fremovexattr(fd: c_int, name: *const c_char) -> c_int;
    fd(fd) => |px| px.remove_xattr(ino_of(px, fd)?, unsafe { bytes(name) })
}
