//! Special files under the prefix (docs/SEMANTICS.md §4 "Special files"): `mknod` and
//! `mkfifo` record the node in the image (the owner through the posix layer, a bridged
//! process through the bridge); a FIFO, socket or device node is never an augefs
//! descriptor: the owner opens it *on the bridge*, where the kernel provides the pipe or
//! device from the node's type and number, and `bind`/`connect` of a Unix socket path
//! under the prefix are given the bridge path. With no bridge (the library loaded
//! without `augefs run`) those fail with ENXIO and one log line.
//!
//! Invariants:
//! - Nothing here reads or writes a pipe, socket or device: the kernel does, on the
//!   bridge's FUSE mount (mounted `nodev`: a device node opens with EACCES there).
//! - A socket address is rewritten only for a pathname under the prefix; abstract
//!   addresses and every other path reach the kernel unchanged.
#![expect(
    clippy::undocumented_unsafe_blocks,
    reason = "each exported function runs under the C contract of the libc function it \
              replaces: its pointers are what that contract says"
)]

use crate::log;
use crate::real::real;
use crate::route::{self, set_errno, Route};
use libc::{c_int, mode_t, sockaddr, sockaddr_un, socklen_t};
use posix::{At, Posix};
use std::ffi::CString;

/// The bridge path of `path` (from augefs's root), or ENXIO with one log line when this
/// process has no bridge.
fn on_bridge(path: &str, what: &'static str) -> Result<CString, i32> {
    crate::convert::bridge_path(path).ok_or_else(|| {
        log::once(
            what,
            &format!(
                "{path}: {what} needs the bridge mount (augefs run), which this process \
                 does not have (ENXIO)"
            ),
        );
        libc::ENXIO
    })
}

/// Opens the special file `path` (from augefs's root) in the owner: a kernel open of it
/// on the bridge, with the caller's flags. -1 with errno on failure.
pub fn open_special(kind: vfs::Kind, path: &str, flags: c_int, mode: mode_t) -> c_int {
    let p = match on_bridge(path, "opening a FIFO, socket or device node") {
        Ok(p) => p,
        Err(e) => {
            set_errno(e);
            return -1;
        }
    };
    debug_assert!(kind.is_special(), "{kind:?}");
    let open = real!(openat: fn(c_int, *const libc::c_char, c_int, mode_t) -> c_int);
    // SAFETY: a NUL-terminated path.
    unsafe { open(libc::AT_FDCWD, p.as_ptr(), flags, mode) }
}

/// The augefs path (from its root) of `rel` relative to `at` in the owner.
fn absolute(px: &Posix, at: At, rel: &[u8]) -> Result<String, i32> {
    let base = match at {
        At::Cwd => px.try_cwd().map_err(|e| e.0)?.path,
        // A socket address has no directory descriptor.
        At::Fd(_) => return Err(libc::EINVAL),
    };
    Ok(posix::join(&base, rel))
}

/// `addr` with its pathname rewritten for the bridge if it names a path under the
/// prefix; None to pass the caller's address unchanged; Err(errno) to fail the call.
///
/// # Safety
/// `addr` points to `len` readable bytes (or is NULL), as the socket call's contract.
unsafe fn socket_path(
    addr: *const sockaddr,
    len: socklen_t,
) -> Result<Option<(sockaddr_un, socklen_t)>, i32> {
    let path_at = std::mem::offset_of!(sockaddr_un, sun_path);
    if addr.is_null() || (len as usize) <= path_at || len as usize > size_of::<sockaddr_un>() {
        return Ok(None);
    }
    // SAFETY: at least `len` bytes, which cover the family.
    if unsafe { (*addr).sa_family } != libc::AF_UNIX as libc::sa_family_t {
        return Ok(None);
    }
    let mut un: sockaddr_un = unsafe { std::mem::zeroed() };
    // SAFETY: `len` bytes from the caller into a structure at least that large.
    unsafe {
        std::ptr::copy_nonoverlapping(addr.cast::<u8>(), (&raw mut un).cast::<u8>(), len as usize)
    };
    let raw: Vec<u8> = un.sun_path[..len as usize - path_at]
        .iter()
        .map(|&c| c as u8)
        .take_while(|&c| c != 0)
        .collect();
    if raw.is_empty() {
        return Ok(None); // unnamed, or an abstract address (leading NUL)
    }
    let c = CString::new(raw).expect("stops at the first NUL");
    let bridged = match unsafe { route::path(c.as_ptr()) } {
        Route::Kernel => return Ok(None),
        Route::Fail(e) => return Err(e),
        Route::Bridge(p) => p,
        Route::Augefs(px, at, rel) => {
            let path = absolute(px, at, rel)?;
            on_bridge(&path, "a Unix socket")?
        }
    };
    let bytes = bridged.as_bytes_with_nul();
    if bytes.len() > un.sun_path.len() {
        return Err(libc::ENAMETOOLONG);
    }
    un.sun_path = [0; 108];
    for (d, &s) in un.sun_path.iter_mut().zip(bytes) {
        *d = s as libc::c_char;
    }
    Ok(Some((un, (path_at + bytes.len()) as socklen_t)))
}

/// Runs `call` with the caller's address or its bridge form.
unsafe fn with_address(
    addr: *const sockaddr,
    len: socklen_t,
    call: impl FnOnce(*const sockaddr, socklen_t) -> c_int,
) -> c_int {
    match unsafe { socket_path(addr, len) } {
        Ok(None) => call(addr, len),
        Ok(Some((un, n))) => call((&raw const un).cast(), n),
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn bind(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    let real = real!(bind: fn(c_int, *const sockaddr, socklen_t) -> c_int);
    unsafe { with_address(addr, len, |a, n| real(fd, a, n)) }
}

#[no_mangle]
pub unsafe extern "C" fn connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    let real = real!(connect: fn(c_int, *const sockaddr, socklen_t) -> c_int);
    unsafe { with_address(addr, len, |a, n| real(fd, a, n)) }
}
