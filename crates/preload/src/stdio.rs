//! Exported stdio openers (fopen, fopen64, fdopen, freopen) for augefs files: a
//! `FILE` from `fopencookie` whose read, write, seek and close are this library's
//! descriptor calls, so every stdio function (and fclose) works on it natively.
#![expect(
    clippy::undocumented_unsafe_blocks,
    reason = "each exported function runs under the C contract of the libc function it \
              replaces: its pointers are what that contract says"
)]

use crate::fds;
use crate::real::real;
use crate::route::{self, bytes, set_errno, Route};
use libc::{c_char, c_int, c_void, size_t, ssize_t, FILE};

#[repr(C)]
struct CookieIo {
    read: Option<unsafe extern "C" fn(*mut c_void, *mut c_char, size_t) -> ssize_t>,
    write: Option<unsafe extern "C" fn(*mut c_void, *const c_char, size_t) -> ssize_t>,
    seek: Option<unsafe extern "C" fn(*mut c_void, *mut i64, c_int) -> c_int>,
    close: Option<unsafe extern "C" fn(*mut c_void) -> c_int>,
}

extern "C" {
    fn fopencookie(cookie: *mut c_void, mode: *const c_char, io: CookieIo) -> *mut FILE;
}

fn fd_of(cookie: *mut c_void) -> c_int {
    cookie as usize as c_int
}

unsafe extern "C" fn c_read(c: *mut c_void, buf: *mut c_char, n: size_t) -> ssize_t {
    unsafe { fds::read(fd_of(c), buf.cast(), n) }
}

unsafe extern "C" fn c_write(c: *mut c_void, buf: *const c_char, n: size_t) -> ssize_t {
    // stdio wants the bytes written, 0 on error.
    unsafe { fds::write(fd_of(c), buf.cast(), n) }.max(0)
}

unsafe extern "C" fn c_seek(c: *mut c_void, off: *mut i64, whence: c_int) -> c_int {
    let r = unsafe { fds::lseek(fd_of(c), *off, whence) };
    if r < 0 {
        return -1;
    }
    unsafe { *off = r };
    0
}

unsafe extern "C" fn c_close(c: *mut c_void) -> c_int {
    let fd = fd_of(c);
    if let Ok(mut s) = STREAMS.lock() {
        s.retain(|&(_, d)| d != fd);
    }
    unsafe { fds::close(fd) }
}

/// open(2) flags of an fopen mode string; None if it is not one.
fn flags_of(mode: &[u8]) -> Option<c_int> {
    let (first, rest) = mode.split_first()?;
    let plus = rest.contains(&b'+');
    let mut f = match (first, plus) {
        (b'r', false) => libc::O_RDONLY,
        (b'r', true) => libc::O_RDWR,
        (b'w', false) => libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
        (b'w', true) => libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC,
        (b'a', false) => libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND,
        (b'a', true) => libc::O_RDWR | libc::O_CREAT | libc::O_APPEND,
        _ => return None,
    };
    if rest.contains(&b'x') {
        f |= libc::O_EXCL;
    }
    if rest.contains(&b'e') {
        f |= libc::O_CLOEXEC;
    }
    Some(f)
}

/// The open flags of `mode`, or EINVAL set.
unsafe fn mode_flags(mode: *const c_char) -> Option<c_int> {
    let f = flags_of(unsafe { bytes(mode) });
    if f.is_none() {
        set_errno(libc::EINVAL);
    }
    f
}

/// The streams made here over augefs descriptors, with their descriptors: fileno of a
/// fopencookie stream is -1 to glibc, and programs (git's fopen, which fstats
/// `fileno(fp)`) need the number.
static STREAMS: std::sync::Mutex<Vec<(usize, c_int)>> = std::sync::Mutex::new(Vec::new());

fn stream_fd(f: *mut FILE) -> Option<c_int> {
    let s = STREAMS.lock().ok()?;
    s.iter().find(|&&(p, _)| p == f as usize).map(|&(_, fd)| fd)
}

#[no_mangle]
pub unsafe extern "C" fn fileno(f: *mut FILE) -> c_int {
    if let Some(fd) = stream_fd(f) {
        return fd;
    }
    let real = real!(fileno: fn(*mut FILE) -> c_int);
    unsafe { real(f) }
}

#[no_mangle]
pub unsafe extern "C" fn fileno_unlocked(f: *mut FILE) -> c_int {
    if let Some(fd) = stream_fd(f) {
        return fd;
    }
    let real = real!(fileno_unlocked: fn(*mut FILE) -> c_int);
    unsafe { real(f) }
}

fn cookie_file(fd: c_int, mode: *const c_char) -> *mut FILE {
    let io = CookieIo {
        read: Some(c_read),
        write: Some(c_write),
        seek: Some(c_seek),
        close: Some(c_close),
    };
    let f = unsafe { fopencookie(fd as usize as *mut c_void, mode, io) };
    if f.is_null() {
        unsafe { fds::close(fd) };
    } else if let Ok(mut s) = STREAMS.lock() {
        s.push((f as usize, fd));
    }
    f
}

unsafe fn fopen_any(path: *const c_char, mode: *const c_char) -> *mut FILE {
    let real = real!(fopen: fn(*const c_char, *const c_char) -> *mut FILE);
    match unsafe { route::path(path) } {
        Route::Kernel => unsafe { real(path, mode) },
        Route::Bridge(p) => unsafe { real(p.as_ptr(), mode) },
        Route::Fail(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
        Route::Augefs(..) => match unsafe { mode_flags(mode) } {
            None => std::ptr::null_mut(),
            Some(flags) => match unsafe { fds::open(path, flags, 0o666) } {
                fd if fd < 0 => std::ptr::null_mut(),
                fd if route::fd(fd).is_some() => cookie_file(fd, mode),
                // A FIFO, socket or device, opened on the bridge: a kernel descriptor.
                fd => {
                    let fdopen = real!(fdopen: fn(c_int, *const c_char) -> *mut FILE);
                    let f = unsafe { fdopen(fd, mode) };
                    if f.is_null() {
                        crate::state::real_close(fd);
                    }
                    f
                }
            },
        },
    }
}

#[no_mangle]
pub unsafe extern "C" fn fopen(path: *const c_char, mode: *const c_char) -> *mut FILE {
    unsafe { fopen_any(path, mode) }
}

#[no_mangle]
pub unsafe extern "C" fn fopen64(path: *const c_char, mode: *const c_char) -> *mut FILE {
    unsafe { fopen_any(path, mode) }
}

#[no_mangle]
pub unsafe extern "C" fn fdopen(fd: c_int, mode: *const c_char) -> *mut FILE {
    if route::fd(fd).is_some() {
        return cookie_file(fd, mode);
    }
    let real = real!(fdopen: fn(c_int, *const c_char) -> *mut FILE);
    unsafe { real(fd, mode) }
}

/// freopen onto an augefs path: the stream's descriptor is replaced (dup2) by the new
/// file, so the stream keeps its identity (stdout stays stdout).
#[no_mangle]
pub unsafe extern "C" fn freopen(
    path: *const c_char,
    mode: *const c_char,
    stream: *mut FILE,
) -> *mut FILE {
    let real = real!(freopen: fn(*const c_char, *const c_char, *mut FILE) -> *mut FILE);
    if path.is_null() {
        return unsafe { real(path, mode, stream) };
    }
    match unsafe { route::path(path) } {
        Route::Kernel => unsafe { real(path, mode, stream) },
        Route::Bridge(p) => unsafe { real(p.as_ptr(), mode, stream) },
        Route::Fail(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
        Route::Augefs(..) => {
            let Some(flags) = (unsafe { mode_flags(mode) }) else {
                return std::ptr::null_mut();
            };
            unsafe { libc::fflush(stream) };
            let target = unsafe { libc::fileno(stream) };
            let fd = unsafe { fds::open(path, flags, 0o666) };
            if fd < 0 {
                return std::ptr::null_mut();
            }
            let r = unsafe { fds::dup2(fd, target) };
            unsafe { fds::close(fd) };
            if r < 0 {
                return std::ptr::null_mut();
            }
            unsafe { libc::clearerr(stream) };
            stream
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn freopen64(
    path: *const c_char,
    mode: *const c_char,
    stream: *mut FILE,
) -> *mut FILE {
    unsafe { freopen(path, mode, stream) }
}
