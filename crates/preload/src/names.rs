//! Exported calls on names (stat family, mkdir, unlink, rename, link, symlink,
//! readlink, access, truncate, chmod, chown, utimens, chdir, getcwd, realpath)
//! and the attribute calls on descriptors (fstat, fchmod, fchown, futimens,
//! fstatfs).
#![expect(
    clippy::undocumented_unsafe_blocks,
    reason = "each exported function runs under the C contract of the libc function it \
              replaces: its pointers are what that contract says"
)]

use crate::guard;
use crate::real::real;
use crate::route::{self, bytes, ret_int, set_errno, Route};
use crate::state::{self, CWD_IN};
use crate::wrap::{interpose, via};
use libc::{c_char, c_int, mode_t, size_t, ssize_t};
use posix::{At, Posix};
use std::sync::atomic::Ordering;
use vfs::{AttrChanges, Metadata};

unsafe fn put<T>(out: *mut T, v: T) -> posix::Result<()> {
    if out.is_null() {
        return Err(posix::Errno(libc::EFAULT));
    }
    unsafe { out.write(v) };
    Ok(())
}

unsafe fn stat_at(dirfd: c_int, path: *const c_char, out: *mut libc::stat, flags: c_int) -> c_int {
    let real = real!(fstatat: fn(c_int, *const c_char, *mut libc::stat, c_int) -> c_int);
    unsafe {
        via(
            route::path_at(dirfd, path),
            path,
            |p| real(dirfd, p, out, flags),
            |px, at, rel| {
                let m = px.stat(
                    at,
                    rel,
                    flags & libc::AT_SYMLINK_NOFOLLOW == 0,
                    flags & libc::AT_EMPTY_PATH != 0,
                )?;
                put(out, posix::stat::to_stat(&m))
            },
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn stat(path: *const c_char, out: *mut libc::stat) -> c_int {
    unsafe { stat_at(libc::AT_FDCWD, path, out, 0) }
}
#[no_mangle]
pub unsafe extern "C" fn stat64(path: *const c_char, out: *mut libc::stat) -> c_int {
    unsafe { stat_at(libc::AT_FDCWD, path, out, 0) }
}
#[no_mangle]
pub unsafe extern "C" fn lstat(path: *const c_char, out: *mut libc::stat) -> c_int {
    unsafe { stat_at(libc::AT_FDCWD, path, out, libc::AT_SYMLINK_NOFOLLOW) }
}
#[no_mangle]
pub unsafe extern "C" fn lstat64(path: *const c_char, out: *mut libc::stat) -> c_int {
    unsafe { stat_at(libc::AT_FDCWD, path, out, libc::AT_SYMLINK_NOFOLLOW) }
}
#[no_mangle]
pub unsafe extern "C" fn fstatat(
    d: c_int,
    path: *const c_char,
    out: *mut libc::stat,
    flags: c_int,
) -> c_int {
    unsafe { fstat_or_at(d, path, out, flags) }
}
#[no_mangle]
pub unsafe extern "C" fn fstatat64(
    d: c_int,
    path: *const c_char,
    out: *mut libc::stat,
    flags: c_int,
) -> c_int {
    unsafe { fstat_or_at(d, path, out, flags) }
}

/// fstatat with AT_EMPTY_PATH on an augefs descriptor is fstat.
unsafe fn fstat_or_at(d: c_int, path: *const c_char, out: *mut libc::stat, flags: c_int) -> c_int {
    if flags & libc::AT_EMPTY_PATH != 0 && unsafe { crate::uaccess::cstr(path) } == Ok(b"") {
        return unsafe { fstat(d, out) };
    }
    unsafe { stat_at(d, path, out, flags) }
}

interpose! {
    fn fstat(fd: c_int, out: *mut libc::stat) -> c_int;
    fd(fd) => |px| unsafe { put(out, posix::stat::to_stat(&px.fstat(fd)?)) }
}
#[no_mangle]
pub unsafe extern "C" fn fstat64(fd: c_int, out: *mut libc::stat) -> c_int {
    unsafe { fstat(fd, out) }
}

// The stat interface of programs built against glibc before 2.33 (version argument).
#[no_mangle]
pub unsafe extern "C" fn __xstat(_v: c_int, path: *const c_char, out: *mut libc::stat) -> c_int {
    unsafe { stat(path, out) }
}
#[no_mangle]
pub unsafe extern "C" fn __xstat64(_v: c_int, path: *const c_char, out: *mut libc::stat) -> c_int {
    unsafe { stat(path, out) }
}
#[no_mangle]
pub unsafe extern "C" fn __lxstat(_v: c_int, path: *const c_char, out: *mut libc::stat) -> c_int {
    unsafe { lstat(path, out) }
}
#[no_mangle]
pub unsafe extern "C" fn __lxstat64(_v: c_int, path: *const c_char, out: *mut libc::stat) -> c_int {
    unsafe { lstat(path, out) }
}
#[no_mangle]
pub unsafe extern "C" fn __fxstat(_v: c_int, fd: c_int, out: *mut libc::stat) -> c_int {
    unsafe { fstat(fd, out) }
}
#[no_mangle]
pub unsafe extern "C" fn __fxstat64(_v: c_int, fd: c_int, out: *mut libc::stat) -> c_int {
    unsafe { fstat(fd, out) }
}
#[no_mangle]
pub unsafe extern "C" fn __fxstatat(
    _v: c_int,
    d: c_int,
    p: *const c_char,
    out: *mut libc::stat,
    f: c_int,
) -> c_int {
    unsafe { fstat_or_at(d, p, out, f) }
}
#[no_mangle]
pub unsafe extern "C" fn __fxstatat64(
    _v: c_int,
    d: c_int,
    p: *const c_char,
    out: *mut libc::stat,
    f: c_int,
) -> c_int {
    unsafe { fstat_or_at(d, p, out, f) }
}

#[no_mangle]
pub unsafe extern "C" fn statx(
    d: c_int,
    path: *const c_char,
    flags: c_int,
    mask: libc::c_uint,
    out: *mut libc::statx,
) -> c_int {
    let fill = |m: Metadata| unsafe { put(out, posix::stat::to_statx(&m)) };
    if flags & libc::AT_EMPTY_PATH != 0 && unsafe { crate::uaccess::cstr(path) } == Ok(b"") {
        if let Some(px) = route::fd(d) {
            let _g = guard::enter();
            return ret_int(px.fstat(d).and_then(fill));
        }
    }
    let real =
        real!(statx: fn(c_int, *const c_char, c_int, libc::c_uint, *mut libc::statx) -> c_int);
    unsafe {
        via(
            route::path_at(d, path),
            path,
            |p| real(d, p, flags, mask, out),
            |px, at, rel| fill(px.stat(at, rel, flags & libc::AT_SYMLINK_NOFOLLOW == 0, false)?),
        )
    }
}

interpose! {
    fn statfs(path: *const c_char, out: *mut libc::statfs) -> c_int;
    path(libc::AT_FDCWD, path) => |px, at, rel| {
        px.stat(at, rel, true, false)?;
        unsafe { put(out, posix::stat::to_statfs(&px.statfs()?)) }
    }
}
#[no_mangle]
pub unsafe extern "C" fn statfs64(path: *const c_char, out: *mut libc::statfs) -> c_int {
    unsafe { statfs(path, out) }
}
interpose! {
    fn fstatfs(fd: c_int, out: *mut libc::statfs) -> c_int;
    fd(fd) => |px| {
        let s = px.statfs()?;
        unsafe { put(out, posix::stat::to_statfs(&s)) }
    }
}
#[no_mangle]
pub unsafe extern "C" fn fstatfs64(fd: c_int, out: *mut libc::statfs) -> c_int {
    unsafe { fstatfs(fd, out) }
}

interpose! {
    fn faccessat(d: c_int, path: *const c_char, mode: c_int, flags: c_int) -> c_int;
    path(d, path) => |px, at, rel| px.access(at, rel, mode, flags & libc::AT_SYMLINK_NOFOLLOW == 0)
}
#[no_mangle]
pub unsafe extern "C" fn access(path: *const c_char, mode: c_int) -> c_int {
    unsafe { faccessat(libc::AT_FDCWD, path, mode, 0) }
}
#[no_mangle]
pub unsafe extern "C" fn euidaccess(path: *const c_char, mode: c_int) -> c_int {
    unsafe { faccessat(libc::AT_FDCWD, path, mode, libc::AT_EACCESS) }
}
#[no_mangle]
pub unsafe extern "C" fn eaccess(path: *const c_char, mode: c_int) -> c_int {
    unsafe { faccessat(libc::AT_FDCWD, path, mode, libc::AT_EACCESS) }
}

interpose! {
    fn mkdirat(d: c_int, path: *const c_char, mode: mode_t) -> c_int;
    path(d, path) => |px, at, rel| px.mkdir(at, rel, state::masked(mode))
}
#[no_mangle]
pub unsafe extern "C" fn mkdir(path: *const c_char, mode: mode_t) -> c_int {
    unsafe { mkdirat(libc::AT_FDCWD, path, mode) }
}

interpose! {
    fn unlinkat(d: c_int, path: *const c_char, flags: c_int) -> c_int;
    path(d, path) => |px, at, rel| px.unlink(at, rel, flags & libc::AT_REMOVEDIR != 0)
}
#[no_mangle]
pub unsafe extern "C" fn unlink(path: *const c_char) -> c_int {
    unsafe { unlinkat(libc::AT_FDCWD, path, 0) }
}
#[no_mangle]
pub unsafe extern "C" fn rmdir(path: *const c_char) -> c_int {
    unsafe { unlinkat(libc::AT_FDCWD, path, libc::AT_REMOVEDIR) }
}

interpose! {
    fn renameat2(
        d1: c_int, p1: *const c_char, d2: c_int, p2: *const c_char, flags: libc::c_uint,
    ) -> c_int;
    paths(d1, p1, d2, p2) => |px, a1, r1, a2, r2| px.rename(a1, r1, a2, r2, flags)
}
#[no_mangle]
pub unsafe extern "C" fn renameat(
    d1: c_int,
    p1: *const c_char,
    d2: c_int,
    p2: *const c_char,
) -> c_int {
    unsafe { renameat2(d1, p1, d2, p2, 0) }
}
#[no_mangle]
pub unsafe extern "C" fn rename(p1: *const c_char, p2: *const c_char) -> c_int {
    unsafe { renameat2(libc::AT_FDCWD, p1, libc::AT_FDCWD, p2, 0) }
}

interpose! {
    fn linkat(d1: c_int, p1: *const c_char, d2: c_int, p2: *const c_char, flags: c_int) -> c_int;
    paths(d1, p1, d2, p2) => |px, a1, r1, a2, r2| {
        px.link(a1, r1, a2, r2, flags & libc::AT_SYMLINK_FOLLOW != 0)
    }
}
#[no_mangle]
pub unsafe extern "C" fn link(p1: *const c_char, p2: *const c_char) -> c_int {
    unsafe { linkat(libc::AT_FDCWD, p1, libc::AT_FDCWD, p2, 0) }
}

interpose! {
    fn symlinkat(target: *const c_char, d: c_int, path: *const c_char) -> c_int;
    path(d, path) => |px, at, rel| {
        px.symlink(unsafe { crate::uaccess::cstr(target) }.map_err(posix::Errno)?, at, rel)
    }
}
#[no_mangle]
pub unsafe extern "C" fn symlink(target: *const c_char, path: *const c_char) -> c_int {
    unsafe { symlinkat(target, libc::AT_FDCWD, path) }
}

interpose! {
    fn readlinkat(d: c_int, path: *const c_char, buf: *mut c_char, n: size_t) -> ssize_t;
    path(d, path) => |px, at, rel| {
        let t = px.readlink(at, rel)?;
        let got = t.len().min(n);
        unsafe { std::ptr::copy_nonoverlapping(t.as_ptr(), buf.cast::<u8>(), got) };
        Ok(got)
    }
}
#[no_mangle]
pub unsafe extern "C" fn readlink(path: *const c_char, buf: *mut c_char, n: size_t) -> ssize_t {
    unsafe { readlinkat(libc::AT_FDCWD, path, buf, n) }
}

interpose! {
    fn truncate(path: *const c_char, len: libc::off_t) -> c_int;
    path(libc::AT_FDCWD, path) => |px, at, rel| px.truncate(at, rel, len)
}
#[no_mangle]
pub unsafe extern "C" fn truncate64(path: *const c_char, len: libc::off_t) -> c_int {
    unsafe { truncate(path, len) }
}

fn perm(mode: mode_t) -> AttrChanges {
    AttrChanges {
        perm: Some(mode & 0o7777),
        ..AttrChanges::default()
    }
}

fn owner(uid: libc::uid_t, gid: libc::gid_t) -> AttrChanges {
    AttrChanges {
        uid: (uid != u32::MAX).then_some(uid),
        gid: (gid != u32::MAX).then_some(gid),
        ..AttrChanges::default()
    }
}

fn attr_at(
    px: &Posix,
    at: At,
    rel: &[u8],
    follow: bool,
    empty_ok: bool,
    c: &AttrChanges,
) -> posix::Result<()> {
    let ino = px.lookup(at, rel, follow, empty_ok)?;
    px.set_attr(ino, c)
}

fn attr_fd(px: &Posix, fd: c_int, c: &AttrChanges) -> posix::Result<()> {
    px.set_attr(px.get(fd)?.ino(), c)
}

interpose! {
    /// With AT_SYMLINK_NOFOLLOW on a symbolic link: EOPNOTSUPP, as Linux (a link's
    /// mode cannot change).
    fn fchmodat(d: c_int, path: *const c_char, mode: mode_t, flags: c_int) -> c_int;
    path(d, path) => |px, at, rel| {
        let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
        if !follow && px.stat(at, rel, false, false)?.kind == vfs::Kind::Symlink {
            return Err(posix::Errno(libc::EOPNOTSUPP));
        }
        attr_at(px, at, rel, follow, false, &perm(mode))
    }
}
#[no_mangle]
pub unsafe extern "C" fn chmod(path: *const c_char, mode: mode_t) -> c_int {
    unsafe { fchmodat(libc::AT_FDCWD, path, mode, 0) }
}
interpose! {
    fn fchmod(fd: c_int, mode: mode_t) -> c_int;
    fd(fd) => |px| attr_fd(px, fd, &perm(mode))
}

interpose! {
    fn fchownat(
        d: c_int, path: *const c_char, uid: libc::uid_t, gid: libc::gid_t, flags: c_int,
    ) -> c_int;
    path(d, path) => |px, at, rel| {
        let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
        attr_at(px, at, rel, follow, flags & libc::AT_EMPTY_PATH != 0, &owner(uid, gid))
    }
}
#[no_mangle]
pub unsafe extern "C" fn chown(path: *const c_char, uid: libc::uid_t, gid: libc::gid_t) -> c_int {
    unsafe { fchownat(libc::AT_FDCWD, path, uid, gid, 0) }
}
#[no_mangle]
pub unsafe extern "C" fn lchown(path: *const c_char, uid: libc::uid_t, gid: libc::gid_t) -> c_int {
    unsafe { fchownat(libc::AT_FDCWD, path, uid, gid, libc::AT_SYMLINK_NOFOLLOW) }
}
interpose! {
    fn fchown(fd: c_int, uid: libc::uid_t, gid: libc::gid_t) -> c_int;
    fd(fd) => |px| attr_fd(px, fd, &owner(uid, gid))
}

unsafe fn times(ts: *const libc::timespec) -> posix::Result<AttrChanges> {
    if ts.is_null() {
        return Ok(AttrChanges {
            atime: Some(vfs::TimeChange::Now),
            mtime: Some(vfs::TimeChange::Now),
            ..AttrChanges::default()
        });
    }
    let t = unsafe { std::slice::from_raw_parts(ts, 2) };
    Ok(AttrChanges {
        atime: posix::names::time_change(t[0].tv_sec, t[0].tv_nsec)?,
        mtime: posix::names::time_change(t[1].tv_sec, t[1].tv_nsec)?,
        ..AttrChanges::default()
    })
}

#[no_mangle]
pub unsafe extern "C" fn utimensat(
    d: c_int,
    path: *const c_char,
    ts: *const libc::timespec,
    flags: c_int,
) -> c_int {
    if path.is_null() {
        // Linux: utimensat(fd, NULL, ...) is futimens.
        return unsafe { futimens(d, ts) };
    }
    let real = real!(utimensat: fn(c_int, *const c_char, *const libc::timespec, c_int) -> c_int);
    unsafe {
        via(
            route::path_at(d, path),
            path,
            |p| real(d, p, ts, flags),
            |px, at, rel| {
                attr_at(
                    px,
                    at,
                    rel,
                    flags & libc::AT_SYMLINK_NOFOLLOW == 0,
                    flags & libc::AT_EMPTY_PATH != 0,
                    &times(ts)?,
                )
            },
        )
    }
}
interpose! {
    fn futimens(fd: c_int, ts: *const libc::timespec) -> c_int;
    fd(fd) => |px| attr_fd(px, fd, &unsafe { times(ts) }?)
}
#[no_mangle]
pub unsafe extern "C" fn utimes(path: *const c_char, tv: *const libc::timeval) -> c_int {
    if tv.is_null() {
        return unsafe { utimensat(libc::AT_FDCWD, path, std::ptr::null(), 0) };
    }
    let t = unsafe { std::slice::from_raw_parts(tv, 2) };
    let ts = [0, 1].map(|i| libc::timespec {
        tv_sec: t[i].tv_sec,
        tv_nsec: t[i].tv_usec * 1000,
    });
    unsafe { utimensat(libc::AT_FDCWD, path, ts.as_ptr(), 0) }
}

#[no_mangle]
pub unsafe extern "C" fn chdir(path: *const c_char) -> c_int {
    let real = real!(chdir: fn(*const c_char) -> c_int);
    match unsafe { route::path(path) } {
        Route::Augefs(px, at, rel) => {
            let _g = guard::enter();
            let r = px.chdir(at, rel);
            if r.is_ok() {
                CWD_IN.store(true, Ordering::Relaxed);
                state::park_kernel_cwd();
            }
            ret_int(r)
        }
        Route::Bridge(p) => unsafe { real(p.as_ptr()) },
        Route::Fail(e) => {
            set_errno(e);
            -1
        }
        Route::Kernel => {
            let r = unsafe { real(path) };
            if r == 0 {
                CWD_IN.store(false, Ordering::Relaxed);
                state::CWD_LOST.store(false, Ordering::Relaxed);
                route::kernel_cwd_changed();
            }
            r
        }
    }
}

/// Copies `s` and a NUL into `buf` of `n` bytes (allocating when `buf` is NULL, as
/// glibc's getcwd does).
unsafe fn c_out(s: &[u8], buf: *mut c_char, n: size_t) -> *mut c_char {
    if buf.is_null() {
        let p = unsafe { libc::malloc(s.len() + 1) }.cast::<c_char>();
        if p.is_null() {
            set_errno(libc::ENOMEM);
            return p;
        }
        unsafe {
            std::ptr::copy_nonoverlapping(s.as_ptr(), p.cast::<u8>(), s.len());
            *p.add(s.len()) = 0;
        }
        return p;
    }
    if s.len() + 1 > n {
        set_errno(libc::ERANGE);
        return std::ptr::null_mut();
    }
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), s.len());
        *buf.add(s.len()) = 0;
    }
    buf
}

/// The prefix joined with an augefs path.
fn under_prefix(path: &str) -> Vec<u8> {
    let mut out = state::prefix().to_vec();
    if path != "/" {
        out.extend_from_slice(path.as_bytes());
    }
    out
}

#[no_mangle]
pub unsafe extern "C" fn getcwd(buf: *mut c_char, n: size_t) -> *mut c_char {
    if let Some(px) = state::owner() {
        if CWD_IN.load(Ordering::Relaxed) {
            return unsafe { c_out(&under_prefix(&px.cwd().path), buf, n) };
        }
    }
    let real = real!(getcwd: fn(*mut c_char, size_t) -> *mut c_char);
    let r = unsafe { real(buf, n) };
    if !r.is_null() && !guard::inside() {
        if let Some(mapped) = route::from_bridge(unsafe { bytes(r) }) {
            if buf.is_null() {
                unsafe { libc::free(r.cast()) };
                return unsafe { c_out(&mapped, std::ptr::null_mut(), 0) };
            }
            return unsafe { c_out(&mapped, buf, n) };
        }
    }
    r
}
#[no_mangle]
pub unsafe extern "C" fn __getcwd_chk(buf: *mut c_char, n: size_t, _l: size_t) -> *mut c_char {
    unsafe { getcwd(buf, n) }
}

/// realpath: for augefs paths, the path made absolute and normalised (symbolic links
/// inside augefs are not resolved), ENOENT if it does not exist.
#[no_mangle]
pub unsafe extern "C" fn realpath(path: *const c_char, out: *mut c_char) -> *mut c_char {
    let real = real!(realpath: fn(*const c_char, *mut c_char) -> *mut c_char);
    let size = libc::PATH_MAX as usize;
    match unsafe { route::path(path) } {
        Route::Augefs(px, at, rel) => {
            let _g = guard::enter();
            if let Err(posix::Errno(e)) = px.stat(at, rel, true, false) {
                set_errno(e);
                return std::ptr::null_mut();
            }
            let base = if rel.first() == Some(&b'/') {
                "/".to_string()
            } else {
                px.cwd().path
            };
            unsafe { c_out(&under_prefix(&posix::join(&base, rel)), out, size) }
        }
        Route::Fail(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
        Route::Bridge(p) => {
            let r = unsafe { real(p.as_ptr(), out) };
            if r.is_null() {
                return r;
            }
            match route::from_bridge(unsafe { bytes(r) }) {
                Some(mapped) => {
                    if out.is_null() {
                        unsafe { libc::free(r.cast()) };
                    }
                    unsafe { c_out(&mapped, out, size) }
                }
                None => r,
            }
        }
        Route::Kernel => {
            let r = unsafe { real(path, out) };
            if r.is_null() || guard::inside() {
                return r;
            }
            match route::from_bridge(unsafe { bytes(r) }) {
                Some(mapped) => {
                    if out.is_null() {
                        unsafe { libc::free(r.cast()) };
                    }
                    unsafe { c_out(&mapped, out, size) }
                }
                None => r,
            }
        }
    }
}
#[no_mangle]
pub unsafe extern "C" fn canonicalize_file_name(path: *const c_char) -> *mut c_char {
    unsafe { realpath(path, std::ptr::null_mut()) }
}
#[no_mangle]
pub unsafe extern "C" fn __realpath_chk(
    path: *const c_char,
    out: *mut c_char,
    _l: size_t,
) -> *mut c_char {
    unsafe { realpath(path, out) }
}

interpose! {
    /// A regular file, FIFO, socket or device node, recorded in the image (opening one
    /// is [`crate::special`]'s).
    fn mknodat(d: c_int, path: *const c_char, mode: mode_t, dev: libc::dev_t) -> c_int;
    path(d, path) => |px, at, rel| px.mknod(at, rel, state::masked(mode), dev)
}
#[no_mangle]
pub unsafe extern "C" fn mknod(path: *const c_char, mode: mode_t, dev: libc::dev_t) -> c_int {
    unsafe { mknodat(libc::AT_FDCWD, path, mode, dev) }
}
#[no_mangle]
pub unsafe extern "C" fn mkfifo(path: *const c_char, mode: mode_t) -> c_int {
    unsafe { mknodat(libc::AT_FDCWD, path, mode | libc::S_IFIFO, 0) }
}
#[no_mangle]
pub unsafe extern "C" fn mkfifoat(d: c_int, path: *const c_char, mode: mode_t) -> c_int {
    unsafe { mknodat(d, path, mode | libc::S_IFIFO, 0) }
}
/// The mknod ABI of programs built against glibc before 2.33 (`ver` is 0 on x86-64).
#[no_mangle]
pub unsafe extern "C" fn __xmknodat(
    _ver: c_int,
    d: c_int,
    path: *const c_char,
    mode: mode_t,
    dev: *const libc::dev_t,
) -> c_int {
    if dev.is_null() {
        set_errno(libc::EFAULT);
        return -1;
    }
    unsafe { mknodat(d, path, mode, *dev) }
}
#[no_mangle]
pub unsafe extern "C" fn __xmknod(
    ver: c_int,
    path: *const c_char,
    mode: mode_t,
    dev: *const libc::dev_t,
) -> c_int {
    unsafe { __xmknodat(ver, libc::AT_FDCWD, path, mode, dev) }
}
