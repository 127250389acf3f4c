//! POSIX asynchronous IO (`aio_read`, `aio_write`, `aio_fsync`, `lio_listio`) on augefs
//! descriptors (docs/SEMANTICS.md §4 "Asynchronous IO").
//!
//! glibc runs an aio request on a helper thread of its own that calls its inner
//! `pread`/`pwrite`, which no interposer sees: on an augefs descriptor (a kernel
//! placeholder) the request failed with EBADF. GlusterFS's brick health check is such
//! a caller: its failed `aio_write` made every attached brick shut itself down. Here an
//! augefs request runs at once, in the calling thread, through the posix layer, and is
//! left complete in the control block the way glibc leaves one (its error code and
//! return value), so glibc's own `aio_error`, `aio_return`, `aio_suspend` and
//! `aio_cancel` answer for it unchanged; then the request's notification is given
//! (none, a queued signal, or a new thread calling the program's function).
//!
//! Invariants:
//! - A request on a kernel descriptor goes to glibc's function untouched; in a
//!   `lio_listio` of both kinds, the augefs ones complete first and glibc gets the
//!   others, with the list's own notification, which thus comes after all of them.
//! - A control block's return value is written before its error code (release), which
//!   `aio_error` reads: a program that sees the error code sees the value.
#![expect(
    clippy::undocumented_unsafe_blocks,
    reason = "each exported function runs under the C contract of the libc function it \
              replaces: its pointers are what that contract says"
)]

use crate::real::real;
use crate::route;
use crate::wrap::{buf, buf_mut};
use libc::{c_int, c_void, off_t, size_t, ssize_t};
use posix::Posix;
use std::sync::atomic::{AtomicI32, Ordering};

/// glibc's `struct aiocb` on x86-64, its private fields named (the `libc` crate hides
/// them): `aio_error` returns `error_code`, `aio_return` returns `return_value`.
#[repr(C)]
struct AioCb {
    fildes: c_int,
    lio_opcode: c_int,
    reqprio: c_int,
    buf: *mut c_void,
    nbytes: size_t,
    sigevent: SigEvent,
    next_prio: *mut c_void,
    abs_prio: c_int,
    policy: c_int,
    error_code: AtomicI32,
    return_value: ssize_t,
    offset: off_t,
    reserved: [u8; 32],
}

/// glibc's `struct sigevent` with the union's thread member named.
#[repr(C)]
struct SigEvent {
    value: libc::sigval,
    signo: c_int,
    notify: c_int,
    function: Option<extern "C" fn(libc::sigval)>,
    attributes: *mut libc::pthread_attr_t,
    pad: [c_int; 8],
}

const _: () = {
    assert!(size_of::<AioCb>() == size_of::<libc::aiocb>());
    assert!(size_of::<SigEvent>() == size_of::<libc::sigevent>());
    assert!(std::mem::offset_of!(AioCb, offset) == std::mem::offset_of!(libc::aiocb, aio_offset));
    assert!(
        std::mem::offset_of!(AioCb, sigevent) == std::mem::offset_of!(libc::aiocb, aio_sigevent)
    );
};

/// One request's work on augefs: the value `aio_return` gives, or the errno.
fn run(px: &Posix, cb: &AioCb, op: c_int) -> posix::Result<ssize_t> {
    let fd = cb.fildes;
    match op {
        libc::LIO_READ => {
            let b = unsafe { buf_mut(cb.buf, cb.nbytes) };
            px.pread(fd, b, cb.offset).map(|n| n as ssize_t)
        }
        libc::LIO_WRITE => {
            let b = unsafe { buf(cb.buf, cb.nbytes) };
            px.pwrite(fd, b, cb.offset).map(|n| n as ssize_t)
        }
        libc::O_SYNC => px.fsync(fd, false).map(|()| 0),
        libc::O_DSYNC => px.fsync(fd, true).map(|()| 0),
        libc::LIO_NOP => Ok(0),
        _ => Err(posix::Errno(libc::EINVAL)),
    }
}

/// Runs `op` of `cb` on augefs and leaves it complete in `cb`.
fn complete(px: &Posix, cb: &mut AioCb, op: c_int) {
    let r = {
        let _g = crate::guard::enter();
        run(px, cb, op)
    };
    let (value, error) = match r {
        Ok(v) => (v, 0),
        Err(e) => (-1, e.0),
    };
    cb.return_value = value;
    cb.error_code.store(error, Ordering::Release);
}

/// Gives the notification `ev` asks for: none, a signal queued to this process, or a
/// new thread calling the program's function.
fn notify(ev: &SigEvent) {
    match ev.notify {
        libc::SIGEV_SIGNAL => {
            unsafe { libc::sigqueue(libc::getpid(), ev.signo, ev.value) };
        }
        libc::SIGEV_THREAD => {
            if let Some(f) = ev.function {
                let value = ev.value.sival_ptr as usize;
                let attrs = ev.attributes;
                let mut thread: libc::pthread_t = 0;
                extern "C" fn start(arg: *mut c_void) -> *mut c_void {
                    let (f, value): (extern "C" fn(libc::sigval), usize) =
                        *unsafe { Box::from_raw(arg.cast()) };
                    f(libc::sigval {
                        sival_ptr: value as *mut c_void,
                    });
                    std::ptr::null_mut()
                }
                let arg = Box::into_raw(Box::new((f, value))).cast::<c_void>();
                let r = unsafe { libc::pthread_create(&mut thread, attrs, start, arg) };
                if r == 0 {
                    unsafe { libc::pthread_detach(thread) };
                } else {
                    drop(unsafe {
                        Box::from_raw(arg.cast::<(extern "C" fn(libc::sigval), usize)>())
                    });
                    crate::log::once(
                        "aio notification",
                        "an aio request's SIGEV_THREAD notification: no thread could be \
                         made; the request is complete, its function was not called",
                    );
                }
            }
        }
        _ => {}
    }
}

/// A single request: augefs's at once, else glibc's.
unsafe fn submit(cb: *mut libc::aiocb, op: c_int, kernel: impl FnOnce() -> c_int) -> c_int {
    if cb.is_null() {
        return kernel();
    }
    let ours = unsafe { &mut *cb.cast::<AioCb>() };
    let Some(px) = route::fd(ours.fildes) else {
        return kernel();
    };
    complete(px, ours, op);
    notify(&ours.sigevent);
    0
}

#[no_mangle]
pub unsafe extern "C" fn aio_read(cb: *mut libc::aiocb) -> c_int {
    let real = real!(aio_read: fn(*mut libc::aiocb) -> c_int);
    unsafe { submit(cb, libc::LIO_READ, || real(cb)) }
}

#[no_mangle]
pub unsafe extern "C" fn aio_read64(cb: *mut libc::aiocb) -> c_int {
    unsafe { aio_read(cb) }
}

#[no_mangle]
pub unsafe extern "C" fn aio_write(cb: *mut libc::aiocb) -> c_int {
    let real = real!(aio_write: fn(*mut libc::aiocb) -> c_int);
    unsafe { submit(cb, libc::LIO_WRITE, || real(cb)) }
}

#[no_mangle]
pub unsafe extern "C" fn aio_write64(cb: *mut libc::aiocb) -> c_int {
    unsafe { aio_write(cb) }
}

#[no_mangle]
pub unsafe extern "C" fn aio_fsync(op: c_int, cb: *mut libc::aiocb) -> c_int {
    let real = real!(aio_fsync: fn(c_int, *mut libc::aiocb) -> c_int);
    if op != libc::O_SYNC && op != libc::O_DSYNC {
        return unsafe { real(op, cb) };
    }
    unsafe { submit(cb, op, || real(op, cb)) }
}

#[no_mangle]
pub unsafe extern "C" fn aio_fsync64(op: c_int, cb: *mut libc::aiocb) -> c_int {
    unsafe { aio_fsync(op, cb) }
}

#[no_mangle]
pub unsafe extern "C" fn lio_listio(
    mode: c_int,
    list: *const *mut libc::aiocb,
    nent: c_int,
    sig: *mut libc::sigevent,
) -> c_int {
    let real =
        real!(lio_listio: fn(c_int, *const *mut libc::aiocb, c_int, *mut libc::sigevent) -> c_int);
    if list.is_null() || nent <= 0 || (mode != libc::LIO_WAIT && mode != libc::LIO_NOWAIT) {
        return unsafe { real(mode, list, nent, sig) };
    }
    let entries = unsafe { std::slice::from_raw_parts(list, nent as usize) };
    let (mut kernel, mut ours, mut failed) = (Vec::new(), 0, false);
    for &cb in entries.iter().filter(|cb| !cb.is_null()) {
        let c = unsafe { &mut *cb.cast::<AioCb>() };
        match route::fd(c.fildes) {
            // glibc gives no notification of a list's single requests (its
            // LIO_NO_INDIVIDUAL_EVENT), only the list's.
            Some(px) => {
                complete(px, c, c.lio_opcode);
                ours += 1;
                failed |= c.error_code.load(Ordering::Acquire) != 0;
            }
            None => kernel.push(cb),
        }
    }
    if ours == 0 {
        return unsafe { real(mode, list, nent, sig) };
    }
    if !kernel.is_empty() {
        let r = unsafe { real(mode, kernel.as_ptr(), kernel.len() as c_int, sig) };
        if r != 0 || mode != libc::LIO_WAIT || !failed {
            return r;
        }
    } else if mode == libc::LIO_NOWAIT && !sig.is_null() {
        notify(unsafe { &*sig.cast::<SigEvent>() });
    }
    // LIO_WAIT reports a request that failed with EIO (its own error in aio_error).
    if mode == libc::LIO_WAIT && failed {
        route::set_errno(libc::EIO);
        return -1;
    }
    0
}

#[no_mangle]
pub unsafe extern "C" fn lio_listio64(
    mode: c_int,
    list: *const *mut libc::aiocb,
    nent: c_int,
    sig: *mut libc::sigevent,
) -> c_int {
    unsafe { lio_listio(mode, list, nent, sig) }
}
