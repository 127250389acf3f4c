//! The POSIX descriptor layer over `vfs` (docs/DESIGN.md §12.1): what a process sees of
//! augefs through file descriptors, with no C symbols, so the LD_PRELOAD interposer
//! (`crates/preload`) and the C ABI (`crates/capi`) are thin converters over it.
//!
//! - [`backend`]: what this layer needs of a file system: a vfs in this process, or an
//!   instance this process is attached to.
//! - [`desc`]: open file descriptions (shared by `dup`: one offset, status flags, lock
//!   owner) and the descriptor table (per-descriptor close-on-exec).
//! - [`open`]: `open`/`openat` flags.
//! - [`io`]: read, write and their positioned and vectored forms, lseek, fsync,
//!   truncate, fallocate.
//! - [`names`]: calls on names (`*at` relative to a directory descriptor or the working
//!   directory): stat, mkdir, unlink, rename, link, symlink, readlink, chmod, chown,
//!   utimens, xattrs, access, chdir.
//! - [`dir`]: directory streams with a stable cursor, getdents64's byte format.
//! - [`lock`]: fcntl record locks (process and OFD owners) and flock.
//! - [`mount`]: mounting an image for the process's own use.
//! - [`stat`]: `libc::stat`, `libc::statx` and `libc::statfs` from vfs attributes.
//!
//! Invariants:
//! - Every error is a negative-errno-ready [`Errno`] from `VfsError::errno` (or the
//!   POSIX rule this layer applies, e.g. EBADF for an unknown descriptor).
//! - Paths given here are inside augefs: absolute ones start at its root (the front end
//!   strips its prefix), relative ones at a directory descriptor or the working
//!   directory.
//! - Descriptor numbers are chosen by the caller ([`Posix::install`]) or, for callers
//!   without a kernel to agree with (the C ABI, tests), by [`Posix::install_lowest`].
// Library code says why it cannot fail (`expect`) or returns an error; tests may unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod backend;
pub mod desc;
pub mod dir;
pub mod io;
pub mod lock;
pub mod mount;
pub mod names;
pub mod open;
pub mod stat;

use backend::Backend;
use desc::{Description, Table};
use format::InodeNo;
use std::sync::{Arc, Mutex};
use vfs::{Creds, VfsError};

/// An errno (positive), as POSIX calls report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Errno(pub i32);

impl From<VfsError> for Errno {
    fn from(e: VfsError) -> Errno {
        Errno(e.errno())
    }
}

impl std::fmt::Display for Errno {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", std::io::Error::from_raw_os_error(self.0))
    }
}

pub type Result<T> = std::result::Result<T, Errno>;

/// Where a relative path starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum At {
    /// The working directory (AT_FDCWD).
    Cwd,
    /// A directory descriptor of this table.
    Fd(i32),
}

/// The working directory when it is inside augefs: its inode and its path (for
/// getcwd; kept as the path it was entered by).
#[derive(Debug, Clone)]
pub struct Cwd {
    pub ino: InodeNo,
    pub path: String,
}

/// One process's view of a mounted augefs: its descriptors, its working directory, its
/// identity.
#[derive(Debug)]
pub struct Posix {
    fs: Arc<dyn Backend>,
    /// Who the process is (its file-system uid and gid, its groups): replaced when it
    /// changes them (`set_creds`), read by every name call without a lock.
    creds: arc_swap::ArcSwap<Creds>,
    table: Table,
    cwd: Mutex<Cwd>,
    pid: i32,
}

impl Posix {
    /// A process acting as `creds` over `fs`, its working directory the root.
    pub fn new(fs: Arc<dyn Backend>, creds: Creds, pid: i32) -> Posix {
        fs.set_creds(creds.clone());
        Posix {
            fs,
            creds: arc_swap::ArcSwap::from_pointee(creds),
            table: Table::default(),
            cwd: Mutex::new(Cwd {
                ino: vfs::records::ROOT,
                path: "/".into(),
            }),
            pid,
        }
    }

    pub fn fs(&self) -> &Arc<dyn Backend> {
        &self.fs
    }

    /// Who the process is now.
    pub fn creds(&self) -> arc_swap::Guard<Arc<Creds>> {
        self.creds.load()
    }

    /// The process changed its identity (setuid and friends): every later call, and
    /// the vfs's own decisions for this process's writes (set-id bits), use `creds`.
    pub fn set_creds(&self, creds: Creds) {
        self.fs.set_creds(creds.clone());
        self.creds.store(Arc::new(creds));
    }

    /// The description behind `fd` (EBADF if none).
    pub fn get(&self, fd: i32) -> Result<Arc<Description>> {
        self.table.get(fd)
    }

    /// Whether `fd` is an augefs descriptor of this table: a bit test, no lock (the
    /// interposer asks this on every descriptor call, kernel descriptors included).
    pub fn is_open(&self, fd: i32) -> bool {
        self.table.contains(fd)
    }

    /// Installs `desc` at `fd` (a number the caller reserved); returns what was there.
    pub fn install(
        &self,
        fd: i32,
        desc: Arc<Description>,
        cloexec: bool,
    ) -> Option<Arc<Description>> {
        self.table.install(fd, desc, cloexec)
    }

    /// Installs `desc` at the lowest free number at or above `min`.
    pub fn install_lowest(&self, min: i32, desc: Arc<Description>, cloexec: bool) -> i32 {
        self.table.install_lowest(min, desc, cloexec)
    }

    /// Removes descriptor `fd`; the description closes with its last descriptor. The
    /// process's record locks on its inode go (POSIX: any close drops them).
    pub fn close(&self, fd: i32) -> Result<()> {
        let desc = self.table.remove(fd)?;
        self.fs.lock_release(
            desc.ino(),
            backend::LockSpace::Record,
            vfs::locks::LockOwner::Process(self.pid),
        );
        Ok(())
    }

    /// Removes descriptor `fd` from the table only (the caller keeps the number as
    /// something else, e.g. a kernel descriptor of the same file): record locks stay.
    pub fn detach_fd(&self, fd: i32) -> Result<Arc<Description>> {
        self.table.remove(fd)
    }

    /// Every descriptor with its close-on-exec flag.
    pub fn descriptors(&self) -> Vec<desc::Entry> {
        self.table.all()
    }

    /// The working directory unless another thread holds its lock.
    pub fn try_cwd(&self) -> Result<Cwd> {
        Ok(self.cwd.try_lock().map_err(|_| err(libc::EAGAIN))?.clone())
    }

    /// [`Posix::descriptors`], or None if another thread holds the table's lock.
    pub fn try_descriptors(&self) -> Option<Vec<desc::Entry>> {
        self.table.try_all()
    }

    pub fn cloexec(&self, fd: i32) -> Result<bool> {
        self.table.cloexec(fd)
    }

    pub fn set_cloexec(&self, fd: i32, on: bool) -> Result<()> {
        self.table.set_cloexec(fd, on)
    }

    /// The working directory.
    pub fn cwd(&self) -> Cwd {
        self.cwd.lock().expect("cwd lock").clone()
    }

    fn start(&self, at: At, path: &[u8]) -> Result<(InodeNo, String)> {
        if path.first() == Some(&b'/') {
            return Ok((vfs::records::ROOT, "/".into()));
        }
        match at {
            At::Cwd => {
                let c = self.cwd();
                Ok((c.ino, c.path))
            }
            At::Fd(fd) => {
                let d = self.get(fd)?;
                if d.kind() != vfs::Kind::Dir {
                    return Err(err(libc::ENOTDIR));
                }
                Ok((d.ino(), d.path().to_string()))
            }
        }
    }
}

/// `base` joined with `rel` and normalised (`.`, `..`, repeated slashes), as an
/// absolute augefs path; symbolic links are not resolved (a remembered path).
pub fn join(base: &str, rel: &[u8]) -> String {
    let rel = String::from_utf8_lossy(rel);
    let mut parts: Vec<&str> = if rel.starts_with('/') {
        Vec::new()
    } else {
        base.split('/').filter(|p| !p.is_empty()).collect()
    };
    for p in rel.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            _ => parts.push(p),
        }
    }
    format!("/{}", parts.join("/"))
}

fn err(code: i32) -> Errno {
    Errno(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn join_normalises() {
        assert_eq!(join("/", b"a/b"), "/a/b");
        assert_eq!(join("/x/y", b"../z/./w//"), "/x/z/w");
        assert_eq!(join("/x", b"/abs"), "/abs");
        assert_eq!(join("/", b".."), "/");
        assert_eq!(join("/a", b""), "/a");
    }
}
