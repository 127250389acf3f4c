//! Where a call goes: a path under the prefix (or relative, with the working directory
//! inside augefs, or relative to an augefs directory descriptor) goes to augefs: the
//! posix layer for the owner, the bridge (the path rewritten) for everyone else.
//! Everything else goes to the kernel unchanged.

use crate::guard;
use crate::real::real;
use crate::state::{self, Mode, CWD_IN};
use posix::{At, Posix};
use std::ffi::{CStr, CString};
use std::sync::atomic::Ordering;
use std::sync::RwLock;

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
        return match strip(p) {
            Some(rest) => to_augefs(rest),
            None => Route::Kernel,
        };
    }
    if dirfd == libc::AT_FDCWD && state::CWD_LOST.load(Ordering::Relaxed) {
        crate::log::once("cwd-lost", "the working directory inside augefs was lost (augefs could not be reached): relative paths fail with ENOTCONN");
        return Route::Fail(libc::ENOTCONN);
    }
    if dirfd == libc::AT_FDCWD && !CWD_IN.load(Ordering::Relaxed) {
        if let Some(rest) = below_kernel_cwd(p) {
            return to_augefs(rest);
        }
    }
    let Some(px) = state::owner() else {
        // Bridged processes have a kernel working directory in the bridge and kernel
        // directory descriptors: relative paths need nothing.
        return Route::Kernel;
    };
    if dirfd == libc::AT_FDCWD {
        if CWD_IN.load(Ordering::Relaxed) {
            if state::remote().is_some() && climbs_out(px, p) {
                // Attached, the kernel's working directory is the same directory of
                // the mount (`state::park_kernel_cwd`): it resolves a path that leaves
                // the mount through ".." as the kernel would, to the host.
                return Route::Kernel;
            }
            return Route::Augefs(px, At::Cwd, p);
        }
        return Route::Kernel;
    }
    if px.is_open(dirfd) {
        return Route::Augefs(px, At::Fd(dirfd), p);
    }
    Route::Kernel
}

/// Whether the relative path `p`, from the working directory in augefs, climbs above
/// augefs's root with its ".." components (read lexically: a symbolic link inside
/// augefs that points above the root is not seen here).
fn climbs_out(px: &Posix, p: &[u8]) -> bool {
    fn parts(s: &[u8]) -> impl Iterator<Item = &[u8]> {
        s.split(|&c| c == b'/')
            .filter(|c| !c.is_empty() && *c != b".")
    }
    if !parts(p).any(|c| c == b"..") {
        return false;
    }
    let mut depth = parts(px.cwd().path.as_bytes()).count();
    for c in parts(p) {
        if c != b".." {
            depth += 1;
        } else if let Some(d) = depth.checked_sub(1) {
            depth = d;
        } else {
            return true;
        }
    }
    false
}

/// The route of `rest`, a path from augefs's root (attaching on first use).
fn to_augefs(rest: &[u8]) -> Route<'_> {
    match state::attach() {
        Mode::Owner(px) => Route::Augefs(px, At::Cwd, rest),
        Mode::Bridged(b) => {
            let mut full = Vec::with_capacity(b.len() + rest.len() + 1);
            full.extend_from_slice(b);
            full.extend_from_slice(rest);
            Route::Bridge(CString::new(full).unwrap_or_default())
        }
        Mode::Refused(e) => Route::Fail(e),
        Mode::Off | Mode::Unset => Route::Kernel,
    }
}

/// The part of the prefix below the kernel's working directory while that is outside
/// augefs ("m" for /tmp/m from /tmp; None when the prefix is not below it): found on
/// first use, and again after each change of the kernel's working directory
/// ([`kernel_cwd_changed`]).
static LEAD: RwLock<Option<Option<Vec<u8>>>> = RwLock::new(None);

/// After the kernel changed the working directory (a relative path, a kernel
/// descriptor): its lead is found again (one getcwd), and a directory inside the
/// attached mount becomes the posix layer's working directory, so the calls that follow
/// are served directly, not through FUSE.
pub fn kernel_cwd_changed() {
    let cwd = kernel_cwd();
    let lead = cwd.as_deref().and_then(|c| lead_of(c, state::prefix()));
    *LEAD.write().unwrap_or_else(|e| e.into_inner()) = Some(lead);
    if let Some(cwd) = cwd {
        state::kernel_cwd_in_mount(&cwd);
    }
}

/// The part of `prefix` below the directory `cwd`, if any.
fn lead_of(cwd: &[u8], prefix: &[u8]) -> Option<Vec<u8>> {
    let rest = match cwd {
        b"/" => prefix.strip_prefix(b"/")?,
        _ => prefix.strip_prefix(cwd)?.strip_prefix(b"/")?,
    };
    (!rest.is_empty()).then(|| rest.to_vec())
}

/// The augefs path (from its root) of a relative path `p` that leads into augefs from
/// the kernel's working directory outside it ("m/x" from /tmp for the prefix /tmp/m:
/// "/x"), so that a program given a relative path into the mount (`tar -C m`, `cd m`)
/// is served directly, not through FUSE. A path that climbs back with ".." after
/// entering is left to the kernel, which resolves it as the kernel would.
fn below_kernel_cwd(p: &[u8]) -> Option<&[u8]> {
    if let Some(known) = &*LEAD.read().unwrap_or_else(|e| e.into_inner()) {
        return after_lead(p, known.as_deref()?);
    }
    let lead = kernel_cwd().and_then(|cwd| lead_of(&cwd, state::prefix()));
    *LEAD.write().unwrap_or_else(|e| e.into_inner()) = Some(lead.clone());
    after_lead(p, lead.as_deref()?)
}

/// The augefs path of `p` if it starts with `lead` (the part of the prefix below the
/// working directory) and does not climb back with "..".
fn after_lead<'a>(p: &'a [u8], lead: &[u8]) -> Option<&'a [u8]> {
    // "./m", ".//m": the same path as "m" (a relative path does not start with "/").
    let mut q = p;
    while let Some(r) = q.strip_prefix(b"./").or_else(|| q.strip_prefix(b"/")) {
        q = r;
    }
    let rest = q.strip_prefix(lead)?;
    if !(rest.is_empty() || rest[0] == b'/') || rest.split(|&c| c == b'/').any(|c| c == b"..") {
        return None;
    }
    Some(if rest.is_empty() { b"/" } else { rest })
}

/// The kernel's working directory (its real getcwd).
fn kernel_cwd() -> Option<Vec<u8>> {
    let getcwd = real!(getcwd: fn(*mut libc::c_char, libc::size_t) -> *mut libc::c_char);
    let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
    // SAFETY: `buf` is writable for its length.
    let r = unsafe { getcwd(buf.as_mut_ptr().cast(), buf.len()) };
    if r.is_null() {
        return None;
    }
    let n = buf.iter().position(|&c| c == 0)?;
    buf.truncate(n);
    Some(buf)
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
