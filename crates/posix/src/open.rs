//! `open`/`openat`: flags to a new description.
//!
//! Rules (Linux): the access mode is O_RDONLY, O_WRONLY or O_RDWR; O_CREAT creates a
//! regular file (O_EXCL: it must not exist, and a final symlink is not followed);
//! O_TRUNC empties a regular file opened for writing; O_DIRECTORY fails with ENOTDIR on
//! anything but a directory; O_NOFOLLOW fails with ELOOP on a final symlink; O_PATH
//! opens the inode for name operations and fstat only; O_TMPFILE is EOPNOTSUPP (the vfs
//! has no unnamed files yet).
//! - A FIFO, socket or device node opened other than O_PATH is not an augefs
//!   description: the pipe, socket or device is the kernel's ([`Opened::Special`]; the
//!   interposer opens it on its bridge mount; [`Posix::open`] answers ENXIO).

use crate::desc::Description;
use crate::{err, join, At, Posix, Result};
use std::sync::Arc;
use vfs::Kind;

/// What an open found.
#[derive(Debug)]
pub enum Opened {
    /// A new description (the caller installs it under a number).
    Desc(Arc<Description>),
    /// A FIFO, socket or device node, at `path` (from augefs's root, as opened): only
    /// a kernel mount of the image can give it a pipe, a socket or a device.
    Special { kind: Kind, path: String },
}

impl Posix {
    /// Opens `path` (relative to `at`) and returns the new description; the caller
    /// installs it under a number. A special file is ENXIO ([`Posix::open_node`]).
    pub fn open(&self, at: At, path: &[u8], flags: i32, mode: u32) -> Result<Arc<Description>> {
        match self.open_node(at, path, flags, mode)? {
            Opened::Desc(d) => Ok(d),
            Opened::Special { .. } => Err(err(libc::ENXIO)),
        }
    }

    /// [`Posix::open`], telling a special file apart instead of failing.
    pub fn open_node(&self, at: At, path: &[u8], flags: i32, mode: u32) -> Result<Opened> {
        crate::backend::check_open_flags(flags, path)?;
        let (start, base) = self.start(at, path)?;
        let found = self.fs.open(&self.creds(), start, path, flags, mode)?;
        if found.kind.is_special() && flags & libc::O_PATH == 0 {
            return Ok(Opened::Special {
                kind: found.kind,
                path: join(&base, path),
            });
        }
        let path = join(&base, path);
        Ok(Opened::Desc(Description::new(
            self.fs.clone(),
            found,
            flags,
            path,
        )))
    }

    /// `open` and install at the lowest free number (for callers that number their
    /// own descriptors).
    pub fn open_fd(&self, at: At, path: &[u8], flags: i32, mode: u32) -> Result<i32> {
        let desc = self.open(at, path, flags, mode)?;
        Ok(self.install_lowest(0, desc, flags & libc::O_CLOEXEC != 0))
    }

    /// `dup`: the same description at the lowest free number at or above `min`
    /// (close-on-exec off, or on for F_DUPFD_CLOEXEC).
    pub fn dup_lowest(&self, fd: i32, min: i32, cloexec: bool) -> Result<i32> {
        let desc = self.get(fd)?;
        Ok(self.install_lowest(min, desc, cloexec))
    }
}
