//! Exported directory streams (opendir, fdopendir, readdir, readdir64, closedir,
//! dirfd, rewinddir, telldir, seekdir, readdir_r) for augefs directories: a `DIR *` of ours, told
//! apart from libc's by a registry of the pointers handed out. Every function that
//! takes a `DIR *` is here: glibc's own would read and write its private fields in
//! ours.
#![expect(
    clippy::undocumented_unsafe_blocks,
    reason = "each exported function runs under the C contract of the libc function it \
              replaces: its pointers are what that contract says"
)]

use crate::guard;
use crate::real::real;
use crate::route::{self, set_errno, Route};
use libc::{c_char, c_int, DIR};
use std::collections::HashSet;
use std::sync::Mutex;

/// Our `DIR`: the descriptor and the entry readdir returns (valid until the next call).
struct Stream {
    fd: c_int,
    entry: libc::dirent64,
}

static OURS: Mutex<Option<HashSet<usize>>> = Mutex::new(None);

fn ours(d: *mut DIR) -> bool {
    OURS.lock()
        .map(|s| s.as_ref().is_some_and(|s| s.contains(&(d as usize))))
        .unwrap_or(false)
}

fn wrap(fd: c_int) -> *mut DIR {
    let s = Box::new(Stream {
        fd,
        entry: unsafe { std::mem::zeroed() },
    });
    let p = Box::into_raw(s).cast::<DIR>();
    if let Ok(mut set) = OURS.lock() {
        set.get_or_insert_with(HashSet::new).insert(p as usize);
    }
    p
}

#[no_mangle]
pub unsafe extern "C" fn opendir(path: *const c_char) -> *mut DIR {
    let real = real!(opendir: fn(*const c_char) -> *mut DIR);
    match unsafe { route::path(path) } {
        Route::Kernel => unsafe { real(path) },
        Route::Bridge(p) => unsafe { real(p.as_ptr()) },
        Route::Fail(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
        Route::Augefs(..) => {
            let fd = unsafe {
                crate::fds::open(
                    path,
                    libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
                    0,
                )
            };
            if fd < 0 {
                return std::ptr::null_mut();
            }
            wrap(fd)
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn fdopendir(fd: c_int) -> *mut DIR {
    if let Some(px) = route::fd(fd) {
        match px.get(fd) {
            Ok(d) if d.kind() == vfs::Kind::Dir => return wrap(fd),
            Ok(_) => set_errno(libc::ENOTDIR),
            Err(posix::Errno(e)) => set_errno(e),
        }
        return std::ptr::null_mut();
    }
    let real = real!(fdopendir: fn(c_int) -> *mut DIR);
    unsafe { real(fd) }
}

#[no_mangle]
pub unsafe extern "C" fn readdir64(d: *mut DIR) -> *mut libc::dirent64 {
    if !guard::inside() && ours(d) {
        let s = unsafe { &mut *d.cast::<Stream>() };
        let Some(px) = route::fd(s.fd) else {
            set_errno(libc::EBADF);
            return std::ptr::null_mut();
        };
        let _g = guard::enter();
        return match px.readdir(s.fd) {
            Ok(Some(e)) => {
                s.entry.d_ino = e.ino;
                s.entry.d_off = e.off;
                s.entry.d_type = e.dtype;
                let n = e.name.len().min(s.entry.d_name.len() - 1);
                for (i, b) in e.name[..n].iter().enumerate() {
                    s.entry.d_name[i] = *b as c_char;
                }
                s.entry.d_name[n] = 0;
                s.entry.d_reclen = std::mem::size_of::<libc::dirent64>() as u16;
                &mut s.entry
            }
            Ok(None) => std::ptr::null_mut(),
            Err(posix::Errno(e)) => {
                set_errno(e);
                std::ptr::null_mut()
            }
        };
    }
    let real = real!(readdir64: fn(*mut DIR) -> *mut libc::dirent64);
    unsafe { real(d) }
}

// struct dirent and struct dirent64 are the same on 64-bit Linux.
#[no_mangle]
pub unsafe extern "C" fn readdir(d: *mut DIR) -> *mut libc::dirent64 {
    unsafe { readdir64(d) }
}

#[no_mangle]
pub unsafe extern "C" fn closedir(d: *mut DIR) -> c_int {
    if ours(d) {
        if let Ok(mut set) = OURS.lock() {
            set.get_or_insert_with(HashSet::new).remove(&(d as usize));
        }
        let s = unsafe { Box::from_raw(d.cast::<Stream>()) };
        return unsafe { crate::fds::close(s.fd) };
    }
    let real = real!(closedir: fn(*mut DIR) -> c_int);
    unsafe { real(d) }
}

#[no_mangle]
pub unsafe extern "C" fn dirfd(d: *mut DIR) -> c_int {
    if ours(d) {
        return unsafe { (*d.cast::<Stream>()).fd };
    }
    let real = real!(dirfd: fn(*mut DIR) -> c_int);
    unsafe { real(d) }
}

#[no_mangle]
pub unsafe extern "C" fn rewinddir(d: *mut DIR) {
    if ours(d) {
        unsafe { crate::fds::lseek((*d.cast::<Stream>()).fd, 0, libc::SEEK_SET) };
        return;
    }
    let real = real!(rewinddir: fn(*mut DIR) -> ());
    unsafe { real(d) }
}

#[no_mangle]
pub unsafe extern "C" fn telldir(d: *mut DIR) -> libc::c_long {
    if ours(d) {
        let fd = unsafe { (*d.cast::<Stream>()).fd };
        let Some(px) = route::fd(fd) else {
            set_errno(libc::EBADF);
            return -1;
        };
        let _g = guard::enter();
        return match px.telldir(fd) {
            Ok(pos) => pos as libc::c_long,
            Err(posix::Errno(e)) => {
                set_errno(e);
                -1
            }
        };
    }
    let real = real!(telldir: fn(*mut DIR) -> libc::c_long);
    unsafe { real(d) }
}

/// A position telldir gave among the stream's latest (posix::dir::MARKS_MAX), or 0;
/// another leaves the stream where it is (seekdir reports nothing).
#[no_mangle]
pub unsafe extern "C" fn seekdir(d: *mut DIR, pos: libc::c_long) {
    if ours(d) {
        let fd = unsafe { (*d.cast::<Stream>()).fd };
        if let Some(px) = route::fd(fd) {
            let _g = guard::enter();
            let _ = px.seekdir(fd, pos);
        }
        return;
    }
    let real = real!(seekdir: fn(*mut DIR, libc::c_long) -> ());
    unsafe { real(d, pos) }
}

#[no_mangle]
pub unsafe extern "C" fn readdir64_r(
    d: *mut DIR,
    entry: *mut libc::dirent64,
    result: *mut *mut libc::dirent64,
) -> c_int {
    if ours(d) {
        set_errno(0);
        let next = unsafe { readdir64(d) };
        if next.is_null() {
            let e = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
            unsafe { *result = std::ptr::null_mut() };
            return e;
        }
        unsafe {
            entry.write(next.read());
            *result = entry;
        }
        return 0;
    }
    let real =
        real!(readdir64_r: fn(*mut DIR, *mut libc::dirent64, *mut *mut libc::dirent64) -> c_int);
    unsafe { real(d, entry, result) }
}

// struct dirent and struct dirent64 are the same on 64-bit Linux.
#[no_mangle]
pub unsafe extern "C" fn readdir_r(
    d: *mut DIR,
    entry: *mut libc::dirent64,
    result: *mut *mut libc::dirent64,
) -> c_int {
    unsafe { readdir64_r(d, entry, result) }
}
