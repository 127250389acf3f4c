//! Who is at the other end of a connection, as the kernel says (SO_PEERCRED at
//! connect): its process id, its effective user and group, and its supplementary
//! groups (read from /proc once, at connect).

use posix::{Errno, Result};
use std::os::fd::{AsRawFd, BorrowedFd};
use vfs::Creds;

/// A connected peer.
#[derive(Debug, Clone)]
pub struct Peer {
    pub pid: i32,
    pub creds: Creds,
}

/// The peer of the connected Unix socket `fd`.
pub fn of(fd: BorrowedFd<'_>) -> Result<Peer> {
    let cred = ucred(fd)?;
    let groups = vfs::creds::groups_of(cred.pid as u32);
    Ok(Peer {
        pid: cred.pid,
        creds: Creds::user(cred.uid, cred.gid, groups),
    })
}

/// The effective user of the peer of `fd` (a client checking the instance's owner: no
/// groups read).
pub fn uid_of(fd: BorrowedFd<'_>) -> Result<u32> {
    ucred(fd).map(|c| c.uid)
}

/// What the kernel says of the peer of `fd` (a known process).
fn ucred(fd: BorrowedFd<'_>) -> Result<libc::ucred> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid for the kernel to fill.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(Errno(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        ));
    }
    if cred.pid <= 0 {
        return Err(Errno(libc::EPERM));
    }
    Ok(cred)
}
