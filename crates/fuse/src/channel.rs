//! A /dev/fuse descriptor of one session: requests are read from it and replies written
//! to it, one whole message per read(2) or write(2). A reply must go to the descriptor
//! its request was read from (each cloned descriptor has its own list of requests in
//! processing); [`Channel::clone_attached`] makes a descriptor per request thread.
//!
//! Invariants:
//! - The descriptor is close-on-exec and owned: closing the last descriptor of a session
//!   aborts the connection (the kernel fails every request in flight with ENOTCONN).

use crate::proto::abi;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

#[derive(Debug)]
pub struct Channel {
    fd: OwnedFd,
}

fn cvt(r: isize) -> io::Result<usize> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

impl Channel {
    pub fn new(fd: OwnedFd) -> Channel {
        Channel { fd }
    }

    pub fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// A new descriptor of the same session (FUSE_DEV_IOC_CLONE).
    pub fn clone_attached(&self) -> io::Result<Channel> {
        let fd = open_dev_fuse()?;
        let mut session = u32::try_from(self.raw()).expect("descriptors are non-negative");
        // SAFETY: FUSE_DEV_IOC_CLONE reads a u32 descriptor number from the pointer,
        // which points to a live u32; both descriptors are open.
        let r = unsafe { libc::ioctl(fd.as_raw_fd(), abi::DEV_IOC_CLONE as _, &mut session) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Channel { fd })
    }

    /// Reads one request into `buf`; its length.
    pub fn receive(&self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: `buf` is valid for writes of its length for the call.
        cvt(unsafe { libc::read(self.raw(), buf.as_mut_ptr().cast(), buf.len()) })
    }

    /// Writes one reply made of `parts` (a header and its payload's pieces) with one
    /// writev(2), pieces adjacent in memory joined; `Ok(false)`, and nothing written,
    /// when they make more than the kernel's IOV_MAX pieces. ENOENT as [`Channel::send`].
    pub fn send_parts<'a>(&self, parts: impl Iterator<Item = &'a [u8]>) -> io::Result<bool> {
        const IOV_MAX: usize = 1024;
        let mut iov: Vec<libc::iovec> = Vec::with_capacity(64);
        let mut total = 0;
        for p in parts.filter(|p| !p.is_empty()) {
            total += p.len();
            let full = iov.len() == IOV_MAX;
            match iov.last_mut() {
                Some(last) if (last.iov_base as usize) + last.iov_len == p.as_ptr() as usize => {
                    last.iov_len += p.len();
                }
                _ if full => return Ok(false),
                _ => iov.push(libc::iovec {
                    iov_base: p.as_ptr() as *mut libc::c_void,
                    iov_len: p.len(),
                }),
            }
        }
        let count = libc::c_int::try_from(iov.len()).expect("at most IOV_MAX pieces");
        // SAFETY: every iovec points into a slice borrowed for the call (`parts`), for
        // reads of its length.
        match cvt(unsafe { libc::writev(self.raw(), iov.as_ptr(), count) }) {
            Ok(n) if n == total => Ok(true),
            Ok(n) => Err(io::Error::other(format!(
                "short write of a reply: {n} of {total} bytes"
            ))),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(true),
            Err(e) => Err(e),
        }
    }

    /// Writes one reply. ENOENT (the request was interrupted and is gone) is not an
    /// error: the kernel no longer waits for the answer.
    pub fn send(&self, reply: &[u8]) -> io::Result<()> {
        // SAFETY: `reply` is valid for reads of its length for the call.
        match cvt(unsafe { libc::write(self.raw(), reply.as_ptr().cast(), reply.len()) }) {
            Ok(n) if n == reply.len() => Ok(()),
            Ok(n) => Err(io::Error::other(format!(
                "short write of a reply: {n} of {} bytes",
                reply.len()
            ))),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// Opens /dev/fuse (close-on-exec).
pub fn open_dev_fuse() -> io::Result<OwnedFd> {
    // SAFETY: a NUL-terminated path; the descriptor returned is ours.
    let fd = unsafe { libc::open(c"/dev/fuse".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A channel writing into a pipe, and the pipe's read end.
    fn piped() -> (Channel, OwnedFd) {
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors pipe2 returns.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        // SAFETY: both descriptors were just created and are owned by nothing else.
        let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // Room for the largest message here.
        // SAFETY: F_SETPIPE_SZ on a pipe we own.
        unsafe { libc::fcntl(w.as_raw_fd(), libc::F_SETPIPE_SZ, 1 << 20) };
        (Channel::new(w), r)
    }

    fn drain(r: &OwnedFd) -> Vec<u8> {
        let mut buf = vec![0u8; 1 << 20];
        // SAFETY: `buf` is valid for writes of its length; O_NONBLOCK is not needed:
        // the test wrote before it reads.
        let n = unsafe { libc::read(r.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        buf.truncate(usize::try_from(n).expect("a read"));
        buf
    }

    #[test]
    fn parts_go_in_order_adjacent_ones_joined_too_many_not_at_all() {
        let (ch, r) = piped();
        let head = [7u8; 16];
        let body: Vec<u8> = (0..64 * 1024).map(|i| (i % 251) as u8).collect();
        // 2,048 pieces of one buffer: adjacent, so one piece for writev.
        let parts = std::iter::once(&head[..]).chain(body.chunks(32));
        assert!(ch.send_parts(parts).unwrap());
        let got = drain(&r);
        assert_eq!(&got[..16], &head);
        assert!(got[16..] == body[..]);
        // Every other piece of a buffer: 1,100 pieces apart, more than IOV_MAX, so
        // nothing is written; ten of them are.
        let apart = || body.chunks(8).step_by(2);
        assert!(!ch.send_parts(apart().take(1100)).unwrap());
        assert!(ch.send_parts(apart().take(10)).unwrap());
        assert_eq!(drain(&r), apart().take(10).collect::<Vec<_>>().concat());
    }
}
