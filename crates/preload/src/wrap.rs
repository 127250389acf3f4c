//! The common shape of an exported call, written once: route the call (by its path or
//! its descriptor), and either run it in augefs's posix layer inside the reentrancy
//! guard and give its result back in the C convention, or call libc's own function
//! with the caller's arguments (a path rewritten under the bridge if need be).
//!
//! [`interpose!`] defines such a function in a few lines from its C prototype, the
//! argument that routes it and the posix layer's call; functions that do more (pick
//! a route of their own, keep state beside the call, return in another convention)
//! are written out with [`via`] and [`on_fd`] or by hand.
//!
//! Invariants:
//! - The posix layer runs only inside the guard; libc's function only outside augefs.
//! - libc's function is looked up only when the call goes to the kernel.
//! - A failure is -1 with errno set, as the kernel's call would give.

use crate::guard;
use crate::route::{self, ret, ret_int, set_errno, Route};
use libc::{c_char, c_int, c_void, off_t, size_t, ssize_t};
use posix::{At, Posix};

/// A posix-layer result as the C function returns it: the value, or -1 with errno set.
pub(crate) trait CReturn<R> {
    fn c_return(self) -> R;
}

impl CReturn<c_int> for posix::Result<()> {
    fn c_return(self) -> c_int {
        ret_int(self)
    }
}

impl CReturn<ssize_t> for posix::Result<usize> {
    fn c_return(self) -> ssize_t {
        ret(self.map(|n| n as i64)) as ssize_t
    }
}

impl CReturn<off_t> for posix::Result<off_t> {
    fn c_return(self) -> off_t {
        ret(self)
    }
}

/// A call on a path, routed as `route`: libc's (`kernel`, given the caller's path or
/// its bridge form) or augefs's inside the guard.
pub(crate) fn via<R, T>(
    route: Route<'_>,
    path: *const c_char,
    kernel: impl FnOnce(*const c_char) -> R,
    augefs: impl FnOnce(&Posix, At, &[u8]) -> posix::Result<T>,
) -> R
where
    posix::Result<T>: CReturn<R>,
{
    match route {
        Route::Kernel => kernel(path),
        Route::Bridge(p) => kernel(p.as_ptr()),
        Route::Augefs(px, at, rel) => {
            let _g = guard::enter();
            augefs(px, at, rel).c_return()
        }
        Route::Fail(e) => Err(posix::Errno(e)).c_return(),
    }
}

/// [`via`] for two paths (`r1` routes `p1`, `r2` routes `p2`) that must be on the same
/// side (rename, link): EXDEV otherwise.
pub(crate) fn via2(
    (r1, p1): (Route<'_>, *const c_char),
    (r2, p2): (Route<'_>, *const c_char),
    kernel: impl FnOnce(*const c_char, *const c_char) -> c_int,
    augefs: impl FnOnce(&Posix, At, &[u8], At, &[u8]) -> posix::Result<()>,
) -> c_int {
    match (r1, r2) {
        (Route::Kernel, Route::Kernel) => kernel(p1, p2),
        (Route::Bridge(a), Route::Bridge(b)) => kernel(a.as_ptr(), b.as_ptr()),
        (Route::Bridge(a), Route::Kernel) => kernel(a.as_ptr(), p2),
        (Route::Kernel, Route::Bridge(b)) => kernel(p1, b.as_ptr()),
        (Route::Augefs(px, a1, rel1), Route::Augefs(_, a2, rel2)) => {
            let _g = guard::enter();
            ret_int(augefs(px, a1, rel1, a2, rel2))
        }
        (Route::Fail(e), _) | (_, Route::Fail(e)) => {
            set_errno(e);
            -1
        }
        _ => {
            set_errno(libc::EXDEV);
            -1
        }
    }
}

/// A call on descriptor `fd`: augefs's inside the guard, or libc's (`kernel`).
pub(crate) fn on_fd<R, T>(
    fd: c_int,
    kernel: impl FnOnce() -> R,
    augefs: impl FnOnce(&Posix) -> posix::Result<T>,
) -> R
where
    posix::Result<T>: CReturn<R>,
{
    match route::fd(fd) {
        Some(px) => {
            let _g = guard::enter();
            augefs(px).c_return()
        }
        None => kernel(),
    }
}

/// The caller's buffer of `n` bytes at `buf`, to be read.
///
/// # Safety
/// The C contract of the call: `buf` holds `n` readable bytes.
pub(crate) unsafe fn buf<'a>(buf: *const c_void, n: size_t) -> &'a [u8] {
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), n) }
}

/// The caller's buffer of `n` bytes at `buf`, to be written into.
///
/// # Safety
/// The C contract of the call: `buf` holds `n` bytes this thread may write.
pub(crate) unsafe fn buf_mut<'a>(buf: *mut c_void, n: size_t) -> &'a mut [u8] {
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), n) }
}

/// Defines an exported libc function from its C prototype and how it is routed:
///
/// ```text
/// interpose! {
///     fn mkdirat(d: c_int, path: *const c_char, mode: mode_t) -> c_int;
///     path(d, path) => |px, at, rel| px.mkdir(at, rel, state::masked(mode))
/// }
/// ```
///
/// - `path(DIRFD, PATH)`: routed by the path argument `PATH` relative to `DIRFD`
///   ([`via`]); augefs's call is a closure of the posix layer, the directory and the
///   path relative to augefs.
/// - `paths(D1, P1, D2, P2)`: routed by two paths that must be on the same side
///   ([`via2`]); the closure takes both.
/// - `fd(FD)`: routed by descriptor `FD` ([`on_fd`]); the closure takes the posix layer.
///
/// The closure returns a `posix::Result` of what the C function returns on success
/// ([`CReturn`]); one that reads or writes through the caller's pointers does so in an
/// `unsafe` block of its own. Otherwise libc's own function gets the caller's
/// arguments, the routed paths rewritten under the bridge if need be.
macro_rules! interpose {
    (
        $(#[$meta:meta])*
        fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty;
        path($dirfd:expr, $path:ident) => $augefs:expr
    ) => {
        $(#[$meta])*
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            // The closure's parameter shadows the path argument: libc's function gets
            // the routed path.
            let kernel = |$path| {
                let real = $crate::real::real!($name: fn($($ty),*) -> $ret);
                // SAFETY: libc's function with the caller's arguments.
                unsafe { real($($arg),*) }
            };
            // SAFETY: the path may be any pointer (`crate::uaccess`).
            let route = unsafe { $crate::route::path_at($dirfd, $path) };
            $crate::wrap::via(route, $path, kernel, $augefs)
        }
    };
    (
        $(#[$meta:meta])*
        fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty;
        paths($d1:expr, $p1:ident, $d2:expr, $p2:ident) => $augefs:expr
    ) => {
        $(#[$meta])*
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            let kernel = |$p1, $p2| {
                let real = $crate::real::real!($name: fn($($ty),*) -> $ret);
                // SAFETY: libc's function with the caller's arguments.
                unsafe { real($($arg),*) }
            };
            // SAFETY: the paths may be any pointers (`crate::uaccess`).
            let r1 = unsafe { $crate::route::path_at($d1, $p1) };
            // SAFETY: as for the first.
            let r2 = unsafe { $crate::route::path_at($d2, $p2) };
            $crate::wrap::via2((r1, $p1), (r2, $p2), kernel, $augefs)
        }
    };
    (
        $(#[$meta:meta])*
        fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty;
        fd($fd:expr) => $augefs:expr
    ) => {
        $(#[$meta])*
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            let kernel = || {
                let real = $crate::real::real!($name: fn($($ty),*) -> $ret);
                // SAFETY: libc's function with the caller's arguments.
                unsafe { real($($arg),*) }
            };
            $crate::wrap::on_fd($fd, kernel, $augefs)
        }
    };
}

pub(crate) use interpose;
