//! Exported descriptor calls: open family, close, dup family, fcntl, and the data
//! calls (read, write, ... ) on augefs descriptors.
//!
//! Every augefs descriptor's number is reserved by a kernel placeholder (an O_PATH
//! descriptor of `/dev/null`), so kernel and augefs numbers never collide, a stray
//! kernel read or write on it fails with EBADF, and a kernel `*at` call relative to it
//! with ENOTDIR (never on the host). dup, dup2, dup3, F_DUPFD and close keep the
//! placeholder and the table in step: the kernel picks the number, the table follows.
#![expect(
    clippy::undocumented_unsafe_blocks,
    reason = "each exported function runs under the C contract of the libc function it \
              replaces: its pointers are what that contract says"
)]

use crate::guard;
use crate::pump;
use crate::real::real;
use crate::route::{self, ret, ret_int, set_errno, Route};
use crate::state;
use crate::wrap::{buf, buf_mut, interpose};
use libc::{c_char, c_int, c_void, iovec, mode_t, off_t, size_t, ssize_t};
use posix::open::Opened;
use posix::{At, Posix};

/// A new placeholder descriptor (close-on-exec as asked).
fn placeholder(cloexec: bool) -> posix::Result<i32> {
    let open = real!(open: fn(*const c_char, c_int, mode_t) -> c_int);
    let flags = libc::O_PATH | if cloexec { libc::O_CLOEXEC } else { 0 };
    // /dev/null, not a directory: a stray kernel *at call relative to a placeholder
    // fails (ENOTDIR) instead of acting on the host.
    let fd = unsafe { open(c"/dev/null".as_ptr(), flags, 0) };
    if fd < 0 {
        return Err(posix::Errno(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EMFILE),
        ));
    }
    Ok(fd)
}

fn open_augefs(px: &Posix, at: At, rel: &[u8], flags: c_int, mode: mode_t) -> i64 {
    let _g = guard::enter();
    match px.open_node(at, rel, flags, state::masked(mode)) {
        Ok(Opened::Desc(desc)) => {
            let cloexec = flags & libc::O_CLOEXEC != 0;
            ret(placeholder(cloexec).inspect(|&fd| {
                px.install(fd, desc, cloexec);
            }))
        }
        // A FIFO, socket or device: the kernel's, on the bridge.
        Ok(Opened::Special { kind, path }) => {
            i64::from(crate::special::open_special(kind, &path, flags, mode))
        }
        Err(e) => ret::<i32>(Err(e)),
    }
}

unsafe fn do_openat(dirfd: c_int, path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    let kernel = real!(openat: fn(c_int, *const c_char, c_int, mode_t) -> c_int);
    match unsafe { route::path_at(dirfd, path) } {
        Route::Kernel => unsafe { kernel(dirfd, path, flags, mode) },
        Route::Bridge(p) => unsafe { kernel(dirfd, p.as_ptr(), flags, mode) },
        Route::Augefs(px, at, rel) => open_augefs(px, at, rel, flags, mode) as c_int,
        Route::Fail(e) => {
            set_errno(e);
            -1
        }
    }
}

// The mode is read as a fixed third argument: on x86-64 (System V) a variadic
// argument travels in the same register (rdx / the fourth in rcx) as a fixed one, so
// reading it when the caller passed none yields garbage that is never used (only
// O_CREAT and O_TMPFILE read it).
#[no_mangle]
pub unsafe extern "C" fn open(path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    unsafe { do_openat(libc::AT_FDCWD, path, flags, mode) }
}

#[no_mangle]
pub unsafe extern "C" fn open64(path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    unsafe { do_openat(libc::AT_FDCWD, path, flags, mode) }
}

#[no_mangle]
pub unsafe extern "C" fn __open_2(path: *const c_char, flags: c_int) -> c_int {
    unsafe { do_openat(libc::AT_FDCWD, path, flags, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn __open64_2(path: *const c_char, flags: c_int) -> c_int {
    unsafe { do_openat(libc::AT_FDCWD, path, flags, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn openat(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: mode_t,
) -> c_int {
    unsafe { do_openat(dirfd, path, flags, mode) }
}

#[no_mangle]
pub unsafe extern "C" fn openat64(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: mode_t,
) -> c_int {
    unsafe { do_openat(dirfd, path, flags, mode) }
}

#[no_mangle]
pub unsafe extern "C" fn __openat_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    unsafe { do_openat(dirfd, path, flags, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn __openat64_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    unsafe { do_openat(dirfd, path, flags, 0) }
}

const CREAT: c_int = libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC;

#[no_mangle]
pub unsafe extern "C" fn creat(path: *const c_char, mode: mode_t) -> c_int {
    unsafe { do_openat(libc::AT_FDCWD, path, CREAT, mode) }
}

#[no_mangle]
pub unsafe extern "C" fn creat64(path: *const c_char, mode: mode_t) -> c_int {
    unsafe { do_openat(libc::AT_FDCWD, path, CREAT, mode) }
}

#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if !guard::inside() && fd <= 2 && pump::is_pumped(fd) {
        pump::forget(fd);
    }
    if let Some(px) = route::fd(fd) {
        let _g = guard::enter();
        let r = px.close(fd);
        state::real_close(fd);
        return ret_int(r);
    }
    state::real_close(fd)
}

#[no_mangle]
pub unsafe extern "C" fn close_range(
    first: libc::c_uint,
    last: libc::c_uint,
    flags: c_int,
) -> c_int {
    if let Some(px) = state::owner() {
        let _g = guard::enter();
        for (fd, _, _) in px.descriptors() {
            if (first..=last).contains(&(fd as u32)) {
                if flags & libc::CLOSE_RANGE_CLOEXEC as c_int != 0 {
                    let _ = px.set_cloexec(fd, true);
                } else {
                    let _ = px.close(fd);
                }
            }
        }
    }
    let real = real!(close_range: fn(libc::c_uint, libc::c_uint, c_int) -> c_int);
    unsafe { real(first, last, flags) }
}

/// Makes `new` refer to `old`'s description (both augefs or `old` a kernel one).
fn dup_onto(old: c_int, new: c_int, cloexec: bool) -> c_int {
    let dup3 = real!(dup3: fn(c_int, c_int, c_int) -> c_int);
    let flag = if cloexec { libc::O_CLOEXEC } else { 0 };
    let src = route::fd(old);
    if let Some(px) = state::owner() {
        if px.is_open(new) {
            let _g = guard::enter();
            let _ = px.close(new);
        }
    }
    let Some(px) = src else {
        let r = unsafe { dup3(old, new, flag) };
        if r >= 0 && pump::is_pumped(new) {
            pump::forget(new);
        }
        return r;
    };
    let Ok(d) = px.get(old) else {
        set_errno(libc::EBADF);
        return -1;
    };
    if pump::is_pumped(new) {
        pump::forget(new);
    }
    // Standard input, output and error are read and written by libc's own stdio, which
    // no interposer sees: in an attached process a regular file's become kernel
    // descriptors of it on the mount, else pipes served by a pump thread.
    if new <= 2 {
        let _g = guard::enter();
        if crate::convert::std_to_kernel(px, &d, new, cloexec) {
            return new;
        }
        if pump::start(px, d, new, cloexec) {
            return new;
        }
        set_errno(libc::EMFILE);
        return -1;
    }
    let r = unsafe { dup3(old, new, flag) };
    if r >= 0 {
        px.install(new, d, cloexec);
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn dup(old: c_int) -> c_int {
    let real = real!(dup: fn(c_int) -> c_int);
    let r = unsafe { real(old) };
    if r >= 0 {
        if let Some(px) = route::fd(old) {
            if let Ok(d) = px.get(old) {
                px.install(r, d, false);
            }
        }
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    if old == new {
        let real = real!(dup2: fn(c_int, c_int) -> c_int);
        return unsafe { real(old, new) };
    }
    dup_onto(old, new, false)
}

#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    if old == new {
        set_errno(libc::EINVAL);
        return -1;
    }
    dup_onto(old, new, flags & libc::O_CLOEXEC != 0)
}

fn fcntl_augefs(px: &Posix, fd: c_int, cmd: c_int, arg: usize) -> c_int {
    let real = real!(fcntl: fn(c_int, c_int, usize) -> c_int);
    let _g = guard::enter();
    match cmd {
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => {
            let r = unsafe { real(fd, cmd, arg) };
            if r >= 0 {
                if let Ok(d) = px.get(fd) {
                    px.install(r, d, cmd == libc::F_DUPFD_CLOEXEC);
                }
            }
            r
        }
        libc::F_GETFD => ret(px.cloexec(fd).map(|c| if c { libc::FD_CLOEXEC } else { 0 })) as c_int,
        libc::F_SETFD => {
            unsafe { real(fd, cmd, arg) };
            ret_int(px.set_cloexec(fd, arg as c_int & libc::FD_CLOEXEC != 0))
        }
        libc::F_GETFL => ret(px.get(fd).map(|d| d.flags())) as c_int,
        libc::F_SETFL => ret_int(px.get(fd).map(|d| d.set_flags(arg as c_int))),
        libc::F_GETLK
        | libc::F_SETLK
        | libc::F_SETLKW
        | libc::F_OFD_GETLK
        | libc::F_OFD_SETLK
        | libc::F_OFD_SETLKW => lock(px, fd, cmd, arg as *mut libc::flock),
        libc::F_GETPIPE_SZ | libc::F_SETPIPE_SZ => {
            set_errno(libc::EBADF);
            -1
        }
        // Write-lifetime hints (F_GET_RW_HINT .. F_SET_FILE_RW_HINT): advice, accepted.
        1035..=1038 => 0,
        libc::F_GET_SEALS | libc::F_ADD_SEALS => {
            set_errno(libc::EINVAL);
            -1
        }
        libc::F_NOTIFY | libc::F_SETLEASE | libc::F_GETLEASE => {
            set_errno(crate::log::unsupported("fcntl(lease/notify)"));
            -1
        }
        _ => {
            set_errno(crate::log::unsupported("fcntl(unknown command)"));
            -1
        }
    }
}

fn lock(px: &Posix, fd: c_int, cmd: c_int, fl: *mut libc::flock) -> c_int {
    if fl.is_null() {
        set_errno(libc::EFAULT);
        return -1;
    }
    let l = unsafe { &mut *fl };
    let ofd = matches!(
        cmd,
        libc::F_OFD_GETLK | libc::F_OFD_SETLK | libc::F_OFD_SETLKW
    );
    let r = px.lock_start(fd, l.l_whence, l.l_start).and_then(|start| {
        let req = posix::lock::Flock {
            kind: l.l_type,
            start,
            len: l.l_len,
            pid: l.l_pid,
        };
        match cmd {
            libc::F_GETLK | libc::F_OFD_GETLK => {
                let got = px.get_lock(fd, &req, ofd)?;
                l.l_type = got.kind;
                l.l_whence = libc::SEEK_SET as i16;
                l.l_start = got.start;
                l.l_len = got.len;
                l.l_pid = got.pid;
                Ok(())
            }
            _ => px.set_lock(
                fd,
                &req,
                matches!(cmd, libc::F_SETLKW | libc::F_OFD_SETLKW),
                ofd,
            ),
        }
    });
    ret_int(r)
}

// fcntl's third argument is read as a fixed word (an int or a pointer), as for open.
#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    if let Some(px) = route::fd(fd) {
        return fcntl_augefs(px, fd, cmd, arg);
    }
    let real = real!(fcntl: fn(c_int, c_int, usize) -> c_int);
    unsafe { real(fd, cmd, arg) }
}

#[no_mangle]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    unsafe { fcntl(fd, cmd, arg) }
}

interpose! {
    fn flock(fd: c_int, op: c_int) -> c_int;
    fd(fd) => |px| px.flock(fd, op)
}

interpose! {
    fn read(fd: c_int, b: *mut c_void, n: size_t) -> ssize_t;
    fd(fd) => |px| px.read(fd, unsafe { buf_mut(b, n) })
}

#[no_mangle]
pub unsafe extern "C" fn __read_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    _buflen: size_t,
) -> ssize_t {
    unsafe { read(fd, buf, n) }
}

interpose! {
    fn write(fd: c_int, b: *const c_void, n: size_t) -> ssize_t;
    fd(fd) => |px| px.write(fd, unsafe { buf(b, n) })
}

interpose! {
    fn pread(fd: c_int, b: *mut c_void, n: size_t, off: off_t) -> ssize_t;
    fd(fd) => |px| px.pread(fd, unsafe { buf_mut(b, n) }, off)
}

#[no_mangle]
pub unsafe extern "C" fn pread64(fd: c_int, buf: *mut c_void, n: size_t, off: off_t) -> ssize_t {
    unsafe { pread(fd, buf, n, off) }
}

#[no_mangle]
pub unsafe extern "C" fn __pread_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    off: off_t,
    _l: size_t,
) -> ssize_t {
    unsafe { pread(fd, buf, n, off) }
}

#[no_mangle]
pub unsafe extern "C" fn __pread64_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    off: off_t,
    _l: size_t,
) -> ssize_t {
    unsafe { pread(fd, buf, n, off) }
}

interpose! {
    fn pwrite(fd: c_int, b: *const c_void, n: size_t, off: off_t) -> ssize_t;
    fd(fd) => |px| px.pwrite(fd, unsafe { buf(b, n) }, off)
}

#[no_mangle]
pub unsafe extern "C" fn pwrite64(fd: c_int, buf: *const c_void, n: size_t, off: off_t) -> ssize_t {
    unsafe { pwrite(fd, buf, n, off) }
}

/// Vectors up to this many buffers are handled without a heap allocation.
const IOV_INLINE_MAX: usize = 8;

/// The caller's buffers as slices, in an inline array for short vectors.
enum Iovs<'a> {
    Inline([&'a mut [u8]; IOV_INLINE_MAX], usize),
    Heap(Vec<&'a mut [u8]>),
}

impl<'a> Iovs<'a> {
    fn as_mut(&mut self) -> &mut [&'a mut [u8]] {
        match self {
            Iovs::Inline(a, n) => &mut a[..*n],
            Iovs::Heap(v) => v,
        }
    }
}

unsafe fn iovs<'a>(iov: *const iovec, cnt: c_int) -> Iovs<'a> {
    if iov.is_null() || cnt <= 0 {
        return Iovs::Inline(Default::default(), 0);
    }
    let v = unsafe { std::slice::from_raw_parts(iov, cnt as usize) };
    let slice =
        |i: &iovec| unsafe { std::slice::from_raw_parts_mut(i.iov_base.cast::<u8>(), i.iov_len) };
    if v.len() <= IOV_INLINE_MAX {
        let mut a: [&mut [u8]; IOV_INLINE_MAX] = Default::default();
        for (slot, i) in a.iter_mut().zip(v) {
            *slot = slice(i);
        }
        return Iovs::Inline(a, v.len());
    }
    Iovs::Heap(v.iter().map(slice).collect())
}

/// writev of the caller's vector on augefs descriptor `fd` (at `off`, if given).
///
/// # Safety
/// As [`iovs`].
unsafe fn writev_at(
    px: &Posix,
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    off: Option<off_t>,
) -> posix::Result<usize> {
    let mut bufs = unsafe { iovs(iov, cnt) };
    let bufs = bufs.as_mut();
    if bufs.len() <= IOV_INLINE_MAX {
        let mut refs: [&[u8]; IOV_INLINE_MAX] = Default::default();
        for (r, b) in refs.iter_mut().zip(bufs.iter()) {
            *r = b;
        }
        return px.writev(fd, &refs[..bufs.len()], off);
    }
    let refs: Vec<&[u8]> = bufs.iter().map(|b| &**b).collect();
    px.writev(fd, &refs, off)
}

interpose! {
    fn readv(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t;
    fd(fd) => |px| px.readv(fd, unsafe { iovs(iov, cnt) }.as_mut(), None)
}

interpose! {
    fn writev(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t;
    fd(fd) => |px| unsafe { writev_at(px, fd, iov, cnt, None) }
}

interpose! {
    fn preadv(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t) -> ssize_t;
    fd(fd) => |px| px.readv(fd, unsafe { iovs(iov, cnt) }.as_mut(), Some(off))
}

#[no_mangle]
pub unsafe extern "C" fn preadv64(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t) -> ssize_t {
    unsafe { preadv(fd, iov, cnt, off) }
}

interpose! {
    fn pwritev(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t) -> ssize_t;
    fd(fd) => |px| unsafe { writev_at(px, fd, iov, cnt, Some(off)) }
}

#[no_mangle]
pub unsafe extern "C" fn pwritev64(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    off: off_t,
) -> ssize_t {
    unsafe { pwritev(fd, iov, cnt, off) }
}

interpose! {
    fn preadv2(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t, flags: c_int) -> ssize_t;
    fd(fd) => |px| px.readv2(fd, unsafe { iovs(iov, cnt) }.as_mut(), off, flags)
}

#[no_mangle]
pub unsafe extern "C" fn preadv64v2(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    off: off_t,
    flags: c_int,
) -> ssize_t {
    unsafe { preadv2(fd, iov, cnt, off, flags) }
}

interpose! {
    fn pwritev2(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t, flags: c_int) -> ssize_t;
    fd(fd) => |px| {
        let mut bufs = unsafe { iovs(iov, cnt) };
        let refs: Vec<&[u8]> = bufs.as_mut().iter().map(|b| &**b).collect();
        px.writev2(fd, &refs, off, flags)
    }
}

#[no_mangle]
pub unsafe extern "C" fn pwritev64v2(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    off: off_t,
    flags: c_int,
) -> ssize_t {
    unsafe { pwritev2(fd, iov, cnt, off, flags) }
}

interpose! {
    fn lseek(fd: c_int, off: off_t, whence: c_int) -> off_t;
    fd(fd) => |px| px.lseek(fd, off, whence)
}

#[no_mangle]
pub unsafe extern "C" fn lseek64(fd: c_int, off: off_t, whence: c_int) -> off_t {
    unsafe { lseek(fd, off, whence) }
}

interpose! {
    fn fsync(fd: c_int) -> c_int;
    fd(fd) => |px| px.fsync(fd, false)
}

interpose! {
    fn fdatasync(fd: c_int) -> c_int;
    fd(fd) => |px| px.fsync(fd, true)
}

interpose! {
    /// sync_file_range on augefs: fdatasync of the file (a superset of any range).
    fn sync_file_range(fd: c_int, off: off_t, n: off_t, flags: libc::c_uint) -> c_int;
    fd(fd) => |px| px.fsync(fd, true)
}

interpose! {
    fn syncfs(fd: c_int) -> c_int;
    fd(fd) => |px| px.fs().sync()
}

interpose! {
    fn ftruncate(fd: c_int, len: off_t) -> c_int;
    fd(fd) => |px| px.ftruncate(fd, len)
}

#[no_mangle]
pub unsafe extern "C" fn ftruncate64(fd: c_int, len: off_t) -> c_int {
    unsafe { ftruncate(fd, len) }
}

interpose! {
    fn fallocate(fd: c_int, mode: c_int, off: off_t, len: off_t) -> c_int;
    fd(fd) => |px| px.fallocate(fd, mode, off, len)
}

#[no_mangle]
pub unsafe extern "C" fn fallocate64(fd: c_int, mode: c_int, off: off_t, len: off_t) -> c_int {
    unsafe { fallocate(fd, mode, off, len) }
}

/// posix_fallocate returns the error number instead of setting errno.
#[no_mangle]
pub unsafe extern "C" fn posix_fallocate(fd: c_int, off: off_t, len: off_t) -> c_int {
    if let Some(px) = route::fd(fd) {
        let _g = guard::enter();
        return match px.fallocate(fd, 0, off, len) {
            Ok(()) => 0,
            Err(posix::Errno(e)) => e,
        };
    }
    let real = real!(posix_fallocate: fn(c_int, off_t, off_t) -> c_int);
    unsafe { real(fd, off, len) }
}

#[no_mangle]
pub unsafe extern "C" fn posix_fallocate64(fd: c_int, off: off_t, len: off_t) -> c_int {
    unsafe { posix_fallocate(fd, off, len) }
}

interpose! {
    /// Advice is accepted and ignored on augefs (there is no page cache to advise yet).
    fn posix_fadvise(fd: c_int, off: off_t, len: off_t, advice: c_int) -> c_int;
    fd(fd) => |_| Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn posix_fadvise64(
    fd: c_int,
    off: off_t,
    len: off_t,
    advice: c_int,
) -> c_int {
    unsafe { posix_fadvise(fd, off, len, advice) }
}

interpose! {
    fn readahead(fd: c_int, off: off_t, n: size_t) -> ssize_t;
    fd(fd) => |_| Ok(0)
}

#[no_mangle]
pub unsafe extern "C" fn isatty(fd: c_int) -> c_int {
    if route::fd(fd).is_some() {
        set_errno(libc::ENOTTY);
        return 0;
    }
    let real = real!(isatty: fn(c_int) -> c_int);
    unsafe { real(fd) }
}

// ioctl's third argument is read as a fixed word, as for open.
interpose! {
    fn ioctl(fd: c_int, req: libc::c_ulong, arg: usize) -> c_int;
    fd(fd) => |_| Err(posix::Errno(crate::log::unsupported("ioctl")))
}

interpose! {
    fn getdents64(fd: c_int, b: *mut c_void, n: size_t) -> ssize_t;
    fd(fd) => |px| px.getdents64(fd, unsafe { buf_mut(b, n) })
}

#[no_mangle]
pub unsafe extern "C" fn fchdir(fd: c_int) -> c_int {
    if let Some(px) = route::fd(fd) {
        let _g = guard::enter();
        let r = px.fchdir(fd);
        if r.is_ok() {
            state::CWD_IN.store(true, std::sync::atomic::Ordering::Relaxed);
            state::park_kernel_cwd();
        }
        return ret_int(r);
    }
    let real = real!(fchdir: fn(c_int) -> c_int);
    let r = unsafe { real(fd) };
    if r == 0 {
        state::CWD_IN.store(false, std::sync::atomic::Ordering::Relaxed);
        state::CWD_LOST.store(false, std::sync::atomic::Ordering::Relaxed);
        route::kernel_cwd_changed();
    }
    r
}

/// Copies up to `n` bytes from `input` to `output` through a buffer (either side may
/// be augefs or the kernel), at the offsets given or the descriptors' own.
unsafe fn buffered_copy(
    input: c_int,
    in_off: *mut off_t,
    output: c_int,
    out_off: *mut off_t,
    n: size_t,
) -> ssize_t {
    let mut buf = vec![0u8; n.min(1 << 20)];
    let mut done: usize = 0;
    while done < n {
        let want = (n - done).min(buf.len());
        let got = unsafe {
            if in_off.is_null() {
                read(input, buf.as_mut_ptr().cast(), want)
            } else {
                pread(input, buf.as_mut_ptr().cast(), want, *in_off)
            }
        };
        if got <= 0 {
            if got < 0 && done == 0 {
                return -1;
            }
            break;
        }
        let put = unsafe {
            if out_off.is_null() {
                write(output, buf.as_ptr().cast(), got as usize)
            } else {
                pwrite(output, buf.as_ptr().cast(), got as usize, *out_off)
            }
        };
        if put < 0 {
            return if done == 0 { -1 } else { done as ssize_t };
        }
        unsafe {
            if !in_off.is_null() {
                *in_off += put as off_t;
            }
            if !out_off.is_null() {
                *out_off += put as off_t;
            }
        }
        done += put as usize;
        if (put as usize) < want {
            break;
        }
    }
    done as ssize_t
}

#[no_mangle]
pub unsafe extern "C" fn sendfile(out: c_int, input: c_int, off: *mut off_t, n: size_t) -> ssize_t {
    if route::fd(out).is_some() || route::fd(input).is_some() {
        return unsafe { buffered_copy(input, off, out, std::ptr::null_mut(), n) };
    }
    let real = real!(sendfile: fn(c_int, c_int, *mut off_t, size_t) -> ssize_t);
    unsafe { real(out, input, off, n) }
}

#[no_mangle]
pub unsafe extern "C" fn sendfile64(
    out: c_int,
    input: c_int,
    off: *mut off_t,
    n: size_t,
) -> ssize_t {
    unsafe { sendfile(out, input, off, n) }
}

#[no_mangle]
pub unsafe extern "C" fn copy_file_range(
    input: c_int,
    in_off: *mut off_t,
    out: c_int,
    out_off: *mut off_t,
    n: size_t,
    flags: libc::c_uint,
) -> ssize_t {
    if route::fd(out).is_some() || route::fd(input).is_some() {
        if flags != 0 {
            set_errno(libc::EINVAL);
            return -1;
        }
        return unsafe { buffered_copy(input, in_off, out, out_off, n) };
    }
    let real = real!(copy_file_range: fn(c_int, *mut off_t, c_int, *mut off_t, size_t, libc::c_uint) -> ssize_t);
    unsafe { real(input, in_off, out, out_off, n, flags) }
}
