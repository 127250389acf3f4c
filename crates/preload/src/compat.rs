//! libc functions that glibc implements with calls of its own to other functions
//! (`utime` calls `utimensat` inside libc, `remove` calls `unlink`, `lockf` calls
//! `fcntl`, `mkstemp` calls `open`): those inner calls never reach this library, so
//! without a definition here the call would go to the kernel whatever the path. On
//! an augefs path or descriptor each is written over the interposed functions; on
//! any other it is libc's own, unchanged.
//!
//! Invariants:
//! - Each function has libc's contract (return values, errno, and for the mkstemp
//!   family the template rewritten in place), checked against the kernel's answer for
//!   the same call in `crates/cli/tests/run_apps.rs`.
//! - A path the routing sends to the kernel (or the bridge) goes to libc's own
//!   function with the caller's arguments.
#![expect(
    clippy::undocumented_unsafe_blocks,
    reason = "each exported function runs under the C contract of the libc function it \
              replaces: its pointers are what that contract says"
)]

use crate::route::{self, set_errno, Route};
use crate::wrap::via;
use crate::{fds, guard, names, state};
use libc::{c_char, c_int, c_long, off_t};

/// Seconds and microseconds as timespecs (for the timeval forms of utimensat).
fn timespecs(tv: *const libc::timeval) -> Option<[libc::timespec; 2]> {
    if tv.is_null() {
        return None;
    }
    // SAFETY: the C contract: two timevals.
    let t = unsafe { std::slice::from_raw_parts(tv, 2) };
    Some([0, 1].map(|i| libc::timespec {
        tv_sec: t[i].tv_sec,
        tv_nsec: t[i].tv_usec * 1000,
    }))
}

#[no_mangle]
pub unsafe extern "C" fn utime(path: *const c_char, times: *const libc::utimbuf) -> c_int {
    let ts = (!times.is_null()).then(|| {
        // SAFETY: the C contract: one utimbuf.
        let t = unsafe { &*times };
        [t.actime, t.modtime].map(|s| libc::timespec {
            tv_sec: s,
            tv_nsec: 0,
        })
    });
    let at = ts.as_ref().map_or(std::ptr::null(), |t| t.as_ptr());
    unsafe { names::utimensat(libc::AT_FDCWD, path, at, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn futimesat(
    d: c_int,
    path: *const c_char,
    tv: *const libc::timeval,
) -> c_int {
    let ts = timespecs(tv);
    let at = ts.as_ref().map_or(std::ptr::null(), |t| t.as_ptr());
    unsafe { names::utimensat(d, path, at, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn lutimes(path: *const c_char, tv: *const libc::timeval) -> c_int {
    let ts = timespecs(tv);
    let at = ts.as_ref().map_or(std::ptr::null(), |t| t.as_ptr());
    unsafe { names::utimensat(libc::AT_FDCWD, path, at, libc::AT_SYMLINK_NOFOLLOW) }
}

#[no_mangle]
pub unsafe extern "C" fn futimes(fd: c_int, tv: *const libc::timeval) -> c_int {
    let ts = timespecs(tv);
    let at = ts.as_ref().map_or(std::ptr::null(), |t| t.as_ptr());
    unsafe { names::futimens(fd, at) }
}

/// remove: unlink, or rmdir where the path names a directory (glibc's order).
#[no_mangle]
pub unsafe extern "C" fn remove(path: *const c_char) -> c_int {
    let real = crate::real::real!(remove: fn(*const c_char) -> c_int);
    unsafe {
        via(
            route::path(path),
            path,
            |p| real(p),
            |px, at, rel| match px.unlink(at, rel, false) {
                Err(posix::Errno(libc::EISDIR)) => px.unlink(at, rel, true),
                r => r,
            },
        )
    }
}

/// lchmod: Linux cannot change a symbolic link's mode (EOPNOTSUPP), as fchmodat with
/// AT_SYMLINK_NOFOLLOW says.
#[no_mangle]
pub unsafe extern "C" fn lchmod(path: *const c_char, mode: libc::mode_t) -> c_int {
    unsafe { names::fchmodat(libc::AT_FDCWD, path, mode, libc::AT_SYMLINK_NOFOLLOW) }
}

/// lockf over fcntl's record locks, from the descriptor's offset for `len` bytes
/// (POSIX: the same locks as F_SETLK, owned by the process).
#[no_mangle]
pub unsafe extern "C" fn lockf(fd: c_int, cmd: c_int, len: off_t) -> c_int {
    if route::fd(fd).is_none() {
        let real = crate::real::real!(lockf: fn(c_int, c_int, off_t) -> c_int);
        return unsafe { real(fd, cmd, len) };
    }
    let (ty, op) = match cmd {
        libc::F_TEST => (libc::F_WRLCK, libc::F_GETLK),
        libc::F_ULOCK => (libc::F_UNLCK, libc::F_SETLK),
        libc::F_LOCK => (libc::F_WRLCK, libc::F_SETLKW),
        libc::F_TLOCK => (libc::F_WRLCK, libc::F_SETLK),
        _ => {
            set_errno(libc::EINVAL);
            return -1;
        }
    };
    // SAFETY: flock is plain old data; zero is a valid value.
    let mut l: libc::flock = unsafe { std::mem::zeroed() };
    l.l_type = ty as i16;
    l.l_whence = libc::SEEK_CUR as i16;
    l.l_len = len;
    let r = unsafe { fds::fcntl(fd, op, &mut l as *mut libc::flock as usize) };
    if r < 0 || cmd != libc::F_TEST {
        return r;
    }
    // SAFETY: getpid has no preconditions.
    if l.l_type == libc::F_UNLCK as i16 || l.l_pid == unsafe { libc::getpid() } {
        return 0;
    }
    set_errno(libc::EACCES);
    -1
}

#[no_mangle]
pub unsafe extern "C" fn lockf64(fd: c_int, cmd: c_int, len: off_t) -> c_int {
    unsafe { lockf(fd, cmd, len) }
}

/// The statvfs of augefs (statfs's figures; ST_NOSUID and the like are the mount's,
/// which the posix layer does not know: none are set).
fn to_statvfs(s: &vfs::StatFs) -> libc::statvfs {
    let st = posix::stat::to_statfs(s);
    // SAFETY: plain old data; zero is valid.
    let mut v: libc::statvfs = unsafe { std::mem::zeroed() };
    v.f_bsize = st.f_bsize as u64;
    v.f_frsize = st.f_frsize as u64;
    v.f_blocks = st.f_blocks;
    v.f_bfree = st.f_bfree;
    v.f_bavail = st.f_bavail;
    v.f_files = st.f_files;
    v.f_ffree = st.f_ffree;
    v.f_favail = st.f_ffree;
    v.f_namemax = st.f_namelen as u64;
    v
}

#[no_mangle]
pub unsafe extern "C" fn statvfs(path: *const c_char, out: *mut libc::statvfs) -> c_int {
    let real = crate::real::real!(statvfs: fn(*const c_char, *mut libc::statvfs) -> c_int);
    unsafe {
        via(
            route::path(path),
            path,
            |p| real(p, out),
            |px, at, rel| {
                px.stat(at, rel, true, false)?;
                let v = to_statvfs(&px.statfs()?);
                // The C contract: `out` points at a statvfs.
                out.write(v);
                Ok(())
            },
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn statvfs64(path: *const c_char, out: *mut libc::statvfs) -> c_int {
    unsafe { statvfs(path, out) }
}

#[no_mangle]
pub unsafe extern "C" fn fstatvfs(fd: c_int, out: *mut libc::statvfs) -> c_int {
    let real = crate::real::real!(fstatvfs: fn(c_int, *mut libc::statvfs) -> c_int);
    crate::wrap::on_fd(
        fd,
        || unsafe { real(fd, out) },
        |px| {
            let v = to_statvfs(&px.statfs()?);
            // SAFETY: the C contract: `out` points at a statvfs.
            unsafe { out.write(v) };
            Ok(())
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn fstatvfs64(fd: c_int, out: *mut libc::statvfs) -> c_int {
    unsafe { fstatvfs(fd, out) }
}

/// sync: the kernel's file systems, then augefs's (its holder or its instance), which
/// the kernel's sync does not reach (Linux sends no SYNCFS to a /dev/fuse server).
#[no_mangle]
pub unsafe extern "C" fn sync() {
    let real = crate::real::real!(sync: fn() -> ());
    unsafe { real() };
    if let Some(px) = state::owner() {
        let _g = guard::enter();
        if let Err(posix::Errno(e)) = px.fs().sync() {
            crate::log::line(&format!("sync: augefs could not sync (errno {e})"));
        }
    }
}

/// pathconf's answers for augefs (its limits; everything else as Linux's defaults).
fn conf(name: c_int) -> posix::Result<c_long> {
    Ok(match name {
        libc::_PC_LINK_MAX => 65_000,
        libc::_PC_NAME_MAX => 255,
        libc::_PC_PATH_MAX => 4096,
        libc::_PC_PIPE_BUF => 4096,
        libc::_PC_CHOWN_RESTRICTED | libc::_PC_NO_TRUNC => 1,
        libc::_PC_FILESIZEBITS => 64,
        libc::_PC_2_SYMLINKS => 1,
        libc::_PC_MAX_CANON | libc::_PC_MAX_INPUT => 255,
        libc::_PC_VDISABLE => 0,
        libc::_PC_REC_XFER_ALIGN | libc::_PC_ALLOC_SIZE_MIN | libc::_PC_REC_MIN_XFER_SIZE => 4096,
        libc::_PC_SYMLINK_MAX | libc::_PC_REC_MAX_XFER_SIZE | libc::_PC_REC_INCR_XFER_SIZE => -1,
        _ => return Err(posix::Errno(libc::EINVAL)),
    })
}

#[no_mangle]
pub unsafe extern "C" fn pathconf(path: *const c_char, name: c_int) -> c_long {
    let real = crate::real::real!(pathconf: fn(*const c_char, c_int) -> c_long);
    match unsafe { route::path(path) } {
        Route::Kernel => unsafe { real(path, name) },
        Route::Bridge(p) => unsafe { real(p.as_ptr(), name) },
        Route::Augefs(px, at, rel) => {
            let _g = guard::enter();
            match px.stat(at, rel, true, false).and_then(|_| conf(name)) {
                Ok(v) => v,
                Err(posix::Errno(e)) => {
                    set_errno(e);
                    -1
                }
            }
        }
        Route::Fail(e) => {
            set_errno(e);
            -1
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn fpathconf(fd: c_int, name: c_int) -> c_long {
    if route::fd(fd).is_none() {
        let real = crate::real::real!(fpathconf: fn(c_int, c_int) -> c_long);
        return unsafe { real(fd, name) };
    }
    match conf(name) {
        Ok(v) => v,
        Err(posix::Errno(e)) => {
            set_errno(e);
            -1
        }
    }
}

/// get_current_dir_name: getcwd into a new buffer (glibc's calls its own getcwd).
#[no_mangle]
pub unsafe extern "C" fn get_current_dir_name() -> *mut c_char {
    unsafe { names::getcwd(std::ptr::null_mut(), 0) }
}

/// Characters a template's Xs become (glibc's set).
const TEMPLATE_CHARS: &[u8; 62] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
/// Names tried before EEXIST (glibc's TMP_MAX for six Xs: 62^3).
const TEMPLATE_TRIES: u32 = 238_328;

/// The mkstemp family on an augefs template: the six Xs before `suffix` bytes are
/// replaced until `make` (an exclusive create of the name) does not find it taken;
/// libc's `real` for any other path. EINVAL for a template without the Xs.
unsafe fn make_unique(
    template: *mut c_char,
    suffix: c_int,
    real: impl FnOnce() -> c_int,
    make: impl Fn(*const c_char) -> c_int,
) -> c_int {
    if !matches!(unsafe { route::path(template) }, Route::Augefs(..)) {
        return real();
    }
    // SAFETY: the C contract: a NUL-terminated, writable template.
    let len = unsafe { libc::strlen(template) };
    let suffix = usize::try_from(suffix).unwrap_or(usize::MAX);
    let Some(end) = len.checked_sub(suffix).filter(|&e| e >= 6) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    // SAFETY: `end - 6..end` lies inside the template (checked above).
    let xs = unsafe { std::slice::from_raw_parts_mut(template.add(end - 6).cast::<u8>(), 6) };
    if xs != b"XXXXXX" {
        set_errno(libc::EINVAL);
        return -1;
    }
    for _ in 0..TEMPLATE_TRIES {
        let mut random = [0u8; 6];
        // SAFETY: writes 6 bytes into `random`.
        unsafe { libc::getrandom(random.as_mut_ptr().cast(), 6, 0) };
        for (x, r) in xs.iter_mut().zip(random) {
            *x = TEMPLATE_CHARS[usize::from(r) % TEMPLATE_CHARS.len()];
        }
        let r = make(template);
        // SAFETY: errno is this thread's.
        if r >= 0 || unsafe { *libc::__errno_location() } != libc::EEXIST {
            return r;
        }
    }
    set_errno(libc::EEXIST);
    -1
}

/// An exclusive create of `path` with `flags` (the O_CREAT|O_EXCL|O_RDWR of mkstemp and
/// the caller's extra flags), through this library's open.
fn create_exclusive(path: *const c_char, flags: c_int) -> c_int {
    let flags = (flags & !libc::O_ACCMODE) | libc::O_RDWR | libc::O_CREAT | libc::O_EXCL;
    // SAFETY: a NUL-terminated path the caller owns.
    unsafe { fds::open(path, flags, 0o600) }
}

#[no_mangle]
pub unsafe extern "C" fn mkostemps(template: *mut c_char, suffix: c_int, flags: c_int) -> c_int {
    let real = crate::real::real!(mkostemps: fn(*mut c_char, c_int, c_int) -> c_int);
    unsafe {
        make_unique(
            template,
            suffix,
            || real(template, suffix, flags),
            |p| create_exclusive(p, flags),
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn mkostemps64(template: *mut c_char, suffix: c_int, flags: c_int) -> c_int {
    unsafe { mkostemps(template, suffix, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn mkstemp(template: *mut c_char) -> c_int {
    unsafe { mkostemps(template, 0, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn mkstemp64(template: *mut c_char) -> c_int {
    unsafe { mkostemps(template, 0, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn mkostemp(template: *mut c_char, flags: c_int) -> c_int {
    unsafe { mkostemps(template, 0, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn mkostemp64(template: *mut c_char, flags: c_int) -> c_int {
    unsafe { mkostemps(template, 0, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn mkstemps(template: *mut c_char, suffix: c_int) -> c_int {
    unsafe { mkostemps(template, suffix, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn mkstemps64(template: *mut c_char, suffix: c_int) -> c_int {
    unsafe { mkostemps(template, suffix, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn mkdtemp(template: *mut c_char) -> *mut c_char {
    let real = crate::real::real!(mkdtemp: fn(*mut c_char) -> *mut c_char);
    let mut kernel = None;
    let r = unsafe {
        make_unique(
            template,
            0,
            || {
                kernel = Some(real(template));
                0
            },
            |p| names::mkdir(p, 0o700),
        )
    };
    match kernel {
        Some(k) => k,
        None if r == 0 => template,
        None => std::ptr::null_mut(),
    }
}
