//! Where a call goes: a path under the prefix (or relative, with the working directory
//! inside augefs, or relative to an augefs directory descriptor) goes to augefs: the
//! posix layer for the owner, the bridge (the path rewritten) for everyone else.
//! Everything else goes to the kernel unchanged.

use crate::guard;
use crate::state::{self, Mode, CWD_IN};
use posix::{At, Posix};
use std::ffi::{CStr, CString};
use std::sync::atomic::Ordering;

/// The decision for one path argument (`'a`: the caller's path string).
pub enum Route<'a> {
    /// Pass the caller's arguments to the kernel as they are.
    Kernel,
    /// The owner: the posix layer, with the path made relative to augefs (a part of
    /// the caller's string, not a copy).
    Augefs(&'static Posix, At, &'a [u8]),
    /// Not the owner: the kernel, with this path (under the bridge).
    Bridge(CString),
    /// The call fails with this errno (augefs could not be attached).
    Fail(i32),
}

/// The bytes of a C string (empty for NULL).
///
/// # Safety
/// `p` is NULL or a NUL-terminated string that outlives the returned slice.
pub unsafe fn bytes<'a>(p: *const libc::c_char) -> &'a [u8] {
    if p.is_null() {
        return b"";
    }
    // SAFETY: the caller's contract.
    unsafe { CStr::from_ptr(p) }.to_bytes()
}

/// `path` with the prefix removed, if it is under the prefix ("/" for the prefix).
pub fn strip(path: &[u8]) -> Option<&[u8]> {
    let pre = state::prefix();
    let rest = path.strip_prefix(pre)?;
    if rest.is_empty() {
        return Some(b"/");
    }
    if rest[0] != b'/' {
        return None;
    }
    Some(rest)
}

/// Routes `path` relative to `dirfd` (AT_FDCWD for the working directory).
///
/// A bad `path` (NULL, unreadable, longer than PATH_MAX) fails with its errno, as the
/// kernel's call would.
///
/// # Safety
/// `path` may be any pointer (`crate::uaccess`).
pub unsafe fn path_at<'a>(dirfd: i32, path: *const libc::c_char) -> Route<'a> {
    if guard::inside() {
        return Route::Kernel;
    }
    // SAFETY: the slice is used for this call only.
    let p = match unsafe { crate::uaccess::cstr(path) } {
        Ok(p) => p,
        Err(e) => return Route::Fail(e),
    };
    if p.first() == Some(&b'/') {
        let Some(rest) = strip(p) else {
            return Route::Kernel;
        };
        return match state::attach() {
            Mode::Owner(px) => Route::Augefs(px, At::Cwd, rest),
            Mode::Bridged(b) => {
                let mut full = Vec::with_capacity(b.len() + rest.len() + 1);
                full.extend_from_slice(b);
                full.extend_from_slice(rest);
                Route::Bridge(CString::new(full).unwrap_or_default())
            }
            Mode::Refused(e) => Route::Fail(e),
            Mode::Off | Mode::Unset => Route::Kernel,
        };
    }
    if dirfd == libc::AT_FDCWD && state::CWD_LOST.load(Ordering::Relaxed) {
        crate::log::once("cwd-lost", "the working directory inside augefs was lost (augefs could not be reached): relative paths fail with ENOTCONN");
        return Route::Fail(libc::ENOTCONN);
    }
    let Some(px) = state::owner() else {
        // Bridged processes have a kernel working directory in the bridge and kernel
        // directory descriptors: relative paths need nothing.
        return Route::Kernel;
    };
    if dirfd == libc::AT_FDCWD {
        if CWD_IN.load(Ordering::Relaxed) {
            return Route::Augefs(px, At::Cwd, p);
        }
        return Route::Kernel;
    }
    if px.is_open(dirfd) {
        return Route::Augefs(px, At::Fd(dirfd), p);
    }
    Route::Kernel
}

/// Routes `path` (the working directory for relative ones).
///
/// # Safety
/// As [`path_at`].
pub unsafe fn path<'a>(path: *const libc::c_char) -> Route<'a> {
    // SAFETY: the caller's contract.
    unsafe { path_at(libc::AT_FDCWD, path) }
}

/// The owner's posix layer if `fd` is one of its descriptors (a kernel descriptor
/// costs a bit test: [`state::owner_of`]).
pub fn fd(fd: i32) -> Option<&'static Posix> {
    state::owner_of(fd)
}

/// Sets errno.
pub fn set_errno(e: i32) {
    // SAFETY: errno is this thread's.
    unsafe { *libc::__errno_location() = e };
}

/// -1 with errno for an error, else the value.
pub fn ret<T: Into<i64>>(r: posix::Result<T>) -> i64 {
    match r {
        Ok(v) => v.into(),
        Err(posix::Errno(e)) => {
            set_errno(e);
            -1
        }
    }
}

/// Like [`ret`] for calls returning int.
pub fn ret_int(r: posix::Result<()>) -> libc::c_int {
    ret(r.map(|()| 0i32)) as libc::c_int
}

/// A path the kernel returned, mapped back from the bridge to the prefix.
pub fn from_bridge(path: &[u8]) -> Option<Vec<u8>> {
    let rest = path.strip_prefix(state::bridge_dir()?)?;
    if !rest.is_empty() && rest[0] != b'/' {
        return None;
    }
    let mut out = state::prefix().to_vec();
    out.extend_from_slice(rest);
    Some(out)
}
