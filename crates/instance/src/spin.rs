//! Waiting for a socket to become readable by spinning a little before sleeping.
//!
//! A request and its reply each wake a sleeping thread on another CPU; on a virtual
//! machine such a wake-up costs tens of microseconds (the idle CPU must be woken by
//! the host), several times the request's own work. A thread that expects its peer's
//! answer soon polls for it for a short while first: the client after sending a
//! request, the instance after answering one (a client's next request usually follows
//! at once). Both are bounded ([`crate::SPIN`]), so an idle connection sleeps, and each
//! turn of the poll yields the CPU to any other runnable thread.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::{Duration, Instant};

/// Polls `fd` for input without sleeping for up to `spin`; returns once input is
/// there or the time is up (the caller's read then sleeps as usual).
pub fn wait_readable(fd: BorrowedFd<'_>, spin: Duration) {
    if spin.is_zero() {
        return;
    }
    let start = Instant::now();
    loop {
        let mut p = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd; a zero timeout never sleeps.
        if unsafe { libc::poll(&mut p, 1, 0) } != 0 || start.elapsed() >= spin {
            return;
        }
        // Let a runnable thread of this CPU go first: on a busy machine it may be the
        // very peer this one waits for.
        // SAFETY: sched_yield has no arguments and cannot fail.
        unsafe { libc::sched_yield() };
    }
}
