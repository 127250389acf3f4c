//! Notifications: the daemon tells the kernel that what it caches about an inode or a
//! name is stale, for changes the kernel did not make itself (a set-id bit the vfs
//! dropped on a write; changes made through the vfs directly, by the process that
//! serves a mount in the background). Each is one write of a `fuse_out_header` with
//! `unique` 0 and the notification's code in `error`, on the session's /dev/fuse
//! descriptor (FUSE over io_uring has no notifications; they take this way there too).
//!
//! Invariants:
//! - A notification about something the kernel does not cache (ENOENT) or of a session
//!   that ended (ENODEV) succeeds: there is nothing stale left.
//! - The kernel takes locks to apply a notification: the parent directory's for
//!   [`Notifier::inval_entry`] and [`Notifier::delete`], the pages' for
//!   [`Notifier::inval_data`]. So those are never sent from a request thread of the
//!   session while its request holds such a lock (the kernel would wait for the reply
//!   that waits for it), nor while holding a vfs lock a request thread may wait for.
//!   [`Notifier::inval_attrs`] takes none and may be sent from anywhere.

use crate::channel::Channel;
use crate::proto::abi::{self, notify, Pod};
use std::io;
use std::sync::Arc;

/// The longest notification: header, the largest body, a 255-byte name and its NUL.
const MESSAGE_MAX: usize = 16 + 24 + 256;

/// Sends notifications to the kernel on one session.
#[derive(Debug, Clone)]
pub struct Notifier {
    channel: Arc<Channel>,
}

impl Notifier {
    pub fn new(channel: Arc<Channel>) -> Notifier {
        Notifier { channel }
    }

    /// The kernel forgets the attributes it caches of `ino` (the next stat asks).
    pub fn inval_attrs(&self, ino: u64) -> io::Result<()> {
        let body = abi::NotifyInvalInodeOut {
            ino,
            off: -1,
            len: 0,
        };
        self.send(notify::INVAL_INODE, &body, None)
    }

    /// The kernel forgets the attributes of `ino` and its cached pages from byte `off`
    /// on, `len` bytes of them (0: to the end).
    pub fn inval_data(&self, ino: u64, off: u64, len: u64) -> io::Result<()> {
        let to_i64 = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let body = abi::NotifyInvalInodeOut {
            ino,
            off: to_i64(off),
            len: to_i64(len),
        };
        self.send(notify::INVAL_INODE, &body, None)
    }

    /// The kernel forgets what it caches of `name` in directory `parent`: an entry, or
    /// that there is none (a name created without the kernel).
    pub fn inval_entry(&self, parent: u64, name: &[u8]) -> io::Result<()> {
        let body = abi::NotifyInvalEntryOut {
            parent,
            namelen: name_len(name)?,
            flags: 0,
        };
        self.send(notify::INVAL_ENTRY, &body, Some(name))
    }

    /// `name` in `parent`, which named `child`, is gone (removed without the kernel): the
    /// kernel drops the entry, and `child`'s cached link count with it.
    pub fn delete(&self, parent: u64, child: u64, name: &[u8]) -> io::Result<()> {
        let body = abi::NotifyDeleteOut {
            parent,
            child,
            namelen: name_len(name)?,
            padding: 0,
        };
        self.send(notify::DELETE, &body, Some(name))
    }

    fn send<T: Pod>(&self, code: i32, body: &T, name: Option<&[u8]>) -> io::Result<()> {
        let body = abi::bytes_of(body);
        let head_len = std::mem::size_of::<abi::OutHeader>();
        let name_len = name.map_or(0, |n| n.len() + 1);
        let len = head_len + body.len() + name_len;
        assert!(len <= MESSAGE_MAX, "a notification of {len} bytes");
        let head = abi::OutHeader {
            len: len as u32,
            error: code,
            unique: 0,
        };
        let mut msg = [0u8; MESSAGE_MAX];
        msg[..head_len].copy_from_slice(abi::bytes_of(&head));
        msg[head_len..head_len + body.len()].copy_from_slice(body);
        if let Some(n) = name {
            let at = head_len + body.len();
            msg[at..at + n.len()].copy_from_slice(n);
            // The NUL after the name is already there.
        }
        match self.channel.send(&msg[..len]) {
            Err(e) if e.raw_os_error() == Some(libc::ENODEV) => Ok(()),
            r => r,
        }
    }
}

fn name_len(name: &[u8]) -> io::Result<u32> {
    if name.is_empty() || name.len() > 255 || name.contains(&0) {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    Ok(name.len() as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

    /// The bytes each notification puts on the wire, read from a socket pair.
    #[test]
    fn notifications_carry_their_code_body_and_name() {
        let mut pair = [0; 2];
        // SAFETY: `pair` has room for two descriptors.
        let r =
            unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET, 0, pair.as_mut_ptr()) };
        assert_eq!(r, 0);
        // SAFETY: both descriptors were just created and are ours.
        let (a, b) = unsafe { (OwnedFd::from_raw_fd(pair[0]), OwnedFd::from_raw_fd(pair[1])) };
        let n = Notifier::new(Arc::new(Channel::new(a)));
        let read = || {
            let mut buf = [0u8; 512];
            // SAFETY: `buf` is valid for writes of its length.
            let len = unsafe { libc::read(b.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            buf[..len as usize].to_vec()
        };
        n.inval_attrs(7).unwrap();
        let m = read();
        let h: abi::OutHeader = abi::read(&m).unwrap();
        let body: abi::NotifyInvalInodeOut = abi::read(&m[16..]).unwrap();
        assert_eq!((h.len, h.error, h.unique), (40, notify::INVAL_INODE, 0));
        assert_eq!((body.ino, body.off, body.len), (7, -1, 0));
        n.inval_data(7, 4096, 0).unwrap();
        let body: abi::NotifyInvalInodeOut = abi::read(&read()[16..]).unwrap();
        assert_eq!((body.off, body.len), (4096, 0));
        n.inval_entry(1, b"name").unwrap();
        let m = read();
        let h: abi::OutHeader = abi::read(&m).unwrap();
        let body: abi::NotifyInvalEntryOut = abi::read(&m[16..]).unwrap();
        assert_eq!((h.len, h.error), (16 + 16 + 5, notify::INVAL_ENTRY));
        assert_eq!((body.parent, body.namelen), (1, 4));
        assert_eq!(&m[32..], b"name\0");
        n.delete(1, 9, b"x").unwrap();
        let m = read();
        let body: abi::NotifyDeleteOut = abi::read(&m[16..]).unwrap();
        assert_eq!((body.parent, body.child, body.namelen), (1, 9, 1));
        assert_eq!(&m[40..], b"x\0");
        assert!(n.inval_entry(1, b"").is_err());
        assert!(n.inval_entry(1, &[b'a'; 256]).is_err());
    }
}
