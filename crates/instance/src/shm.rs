//! Shared memory and descriptor passing: the memfds the instance shares with its
//! clients (`crate::table`, `crate::mailbox`) and the socket messages that carry them.
//!
//! Invariants:
//! - A [`Mapping`] is unmapped exactly once, when dropped.
//! - A memfd's size never changes after [`Mapping::create`] (sealed), so a mapping of
//!   it never faults for lack of backing.

use posix::{Errno, Result};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// The page size every shared region is laid out in.
pub const PAGE: usize = 4096;

pub(crate) fn os_err() -> Errno {
    Errno(
        std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO),
    )
}

/// A shared mapping: the instance's (read-write) or a client's.
#[derive(Debug)]
pub(crate) struct Mapping {
    at: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain shared memory, touched only through atomics.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping this value made, unmapped once.
        unsafe { libc::munmap(self.at.cast(), self.len) };
    }
}

impl Mapping {
    pub fn map(fd: RawFd, len: usize, writable: bool) -> Result<Mapping> {
        let prot = libc::PROT_READ | if writable { libc::PROT_WRITE } else { 0 };
        // SAFETY: a fresh shared mapping of `len` bytes of `fd`.
        let at = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_SHARED, fd, 0) };
        if at == libc::MAP_FAILED {
            return Err(os_err());
        }
        Ok(Mapping { at: at.cast(), len })
    }

    /// A new memfd of `len` bytes, mapped read-write, then sealed so that no one can
    /// change its size, nor (if `read_only`) map it writable again.
    pub fn create(
        name: &std::ffi::CStr,
        len: usize,
        read_only: bool,
    ) -> Result<(OwnedFd, Mapping)> {
        // SAFETY: a NUL-terminated name; the descriptor is ours.
        let fd = unsafe {
            libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
        };
        if fd < 0 {
            return Err(os_err());
        }
        // SAFETY: a descriptor just returned to us.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: plain calls on our descriptor.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
            return Err(os_err());
        }
        let map = Mapping::map(fd.as_raw_fd(), len, true)?;
        let write = if read_only {
            libc::F_SEAL_FUTURE_WRITE
        } else {
            0
        };
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | write | libc::F_SEAL_SEAL;
        // SAFETY: as above.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
            return Err(os_err());
        }
        Ok((fd, map))
    }

    /// Where the mapping starts.
    pub fn at(&self) -> *mut u8 {
        self.at
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Replaces the mapping's contents, in place, by private zeros, read-only: what it
    /// showed is gone from this process, and a reader in the middle of it reads zeros
    /// (no slot of a table, whose sequence is then 0) instead of faulting.
    pub fn blank(&self) {
        // SAFETY: a fixed mapping over exactly our own range, which stays ours (Drop
        // unmaps it as before).
        let at = unsafe {
            libc::mmap(
                self.at.cast(),
                self.len,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        assert!(
            at != libc::MAP_FAILED,
            "remapping our own range: {}",
            os_err().0
        );
    }
}

/// Sends `bytes` and the descriptors `fds` on the Unix socket `sock`.
pub fn send_fds(sock: RawFd, bytes: &[u8], fds: &[RawFd]) -> Result<()> {
    // SAFETY: CMSG_SPACE is arithmetic.
    let space = unsafe { libc::CMSG_SPACE((fds.len() * 4) as u32) } as usize;
    let mut control = vec![0u8; space];
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    // SAFETY: msghdr is plain data, filled below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space;
    // SAFETY: the control buffer has room for one header and `fds`.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN((fds.len() * 4) as u32) as usize;
        std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(c).cast::<RawFd>(), fds.len());
    }
    // SAFETY: a valid message on our socket.
    let n = unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) };
    if n != bytes.len() as isize {
        return Err(os_err());
    }
    Ok(())
}

/// Receives exactly `buf.len()` bytes and up to `max` descriptors from `sock`.
pub fn recv_fds(sock: RawFd, buf: &mut [u8], max: usize) -> Result<Vec<OwnedFd>> {
    // SAFETY: CMSG_SPACE is arithmetic.
    let space = unsafe { libc::CMSG_SPACE((max * 4) as u32) } as usize;
    let mut control = vec![0u8; space];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: msghdr is plain data, filled below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space;
    // SAFETY: a valid message on our socket; MSG_WAITALL fills the buffer.
    let n = unsafe { libc::recvmsg(sock, &mut msg, libc::MSG_WAITALL | libc::MSG_CMSG_CLOEXEC) };
    if n != buf.len() as isize {
        return Err(Errno(libc::ENOTCONN));
    }
    let mut out = Vec::new();
    // SAFETY: walking the control messages the kernel wrote.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let count = ((*c).cmsg_len - libc::CMSG_LEN(0) as usize) / 4;
                let data = libc::CMSG_DATA(c).cast::<RawFd>();
                for i in 0..count {
                    out.push(OwnedFd::from_raw_fd(*data.add(i)));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok(out)
}
