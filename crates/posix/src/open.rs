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
use vfs::creds::{MAY_READ, MAY_WRITE};
use vfs::{Kind, VfsError};

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
        if flags & libc::O_TMPFILE == libc::O_TMPFILE {
            return Err(err(libc::EOPNOTSUPP));
        }
        if path.is_empty() {
            return Err(err(libc::ENOENT));
        }
        let acc = flags & libc::O_ACCMODE;
        if acc == libc::O_ACCMODE {
            return Err(err(libc::EINVAL));
        }
        let (start, base) = self.start(at, path)?;
        let cx = &self.creds();
        let excl = flags & libc::O_CREAT != 0 && flags & libc::O_EXCL != 0;
        let follow = flags & libc::O_NOFOLLOW == 0 && !excl;
        let found = self.fs.resolve_at(cx, start, path, follow);
        let (ino, created) = match found {
            Ok(_) if excl => return Err(err(libc::EEXIST)),
            Ok(ino) => (ino, false),
            Err(VfsError::NotFound(_)) if flags & libc::O_CREAT != 0 => {
                if path.ends_with(b"/") {
                    return Err(err(libc::EISDIR));
                }
                let (parent, name) = self.fs.resolve_parent_at(cx, start, path)?;
                match self
                    .fs
                    .create(cx, parent, name, Kind::File, mode & 0o7777, None)
                {
                    Ok(ino) => (ino, true),
                    Err(VfsError::Exists(_)) if !excl => {
                        (self.fs.resolve_at(cx, start, path, follow)?, false)
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            Err(e) => return Err(e.into()),
        };
        let meta = self.fs.stat_ino(ino)?;
        let writes = acc != libc::O_RDONLY;
        let path_only = flags & libc::O_PATH != 0;
        match meta.kind {
            Kind::Symlink if !path_only => return Err(err(libc::ELOOP)),
            Kind::Dir if writes && !path_only => return Err(err(libc::EISDIR)),
            k if k != Kind::Dir && flags & libc::O_DIRECTORY != 0 => {
                return Err(err(libc::ENOTDIR))
            }
            _ => {}
        }
        if meta.kind.is_special() && !path_only {
            // Its permission bits are the kernel's to check, at its own open.
            return Ok(Opened::Special {
                kind: meta.kind,
                path: join(&base, path),
            });
        }
        if !created && !path_only {
            let want = match acc {
                libc::O_RDONLY => MAY_READ,
                libc::O_WRONLY => MAY_WRITE,
                _ => MAY_READ | MAY_WRITE,
            } | if flags & libc::O_TRUNC != 0 {
                MAY_WRITE
            } else {
                0
            };
            self.fs.access(cx, ino, want)?;
        }
        let desc = Description::new(self.fs.clone(), ino, meta.kind, flags, join(&base, path))?;
        if flags & libc::O_TRUNC != 0 && writes && meta.kind == Kind::File && meta.size > 0 {
            self.fs.truncate(ino, 0)?;
        }
        Ok(Opened::Desc(desc))
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
