//! fcntl record locks and flock over the vfs lock tables (crates/vfs/src/locks.rs).
//!
//! Owners: a classic (F_SETLK) lock belongs to the process (its pid), so any close of
//! the file by the process drops it (`Posix::close`); an OFD lock (F_OFD_SETLK) and a
//! flock belong to the open file description and go with its last descriptor.

use crate::backend::LockSpace;
use crate::{err, Posix, Result};
use vfs::locks::{range, LockKind, LockOwner};

/// A lock request or answer as `struct flock` carries it, with `start` already made
/// absolute (l_whence applied).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flock {
    /// F_RDLCK, F_WRLCK or F_UNLCK.
    pub kind: i16,
    pub start: i64,
    pub len: i64,
    pub pid: i32,
}

fn kind_of(t: i16) -> Result<Option<LockKind>> {
    match i32::from(t) {
        libc::F_RDLCK => Ok(Some(LockKind::Read)),
        libc::F_WRLCK => Ok(Some(LockKind::Write)),
        libc::F_UNLCK => Ok(None),
        _ => Err(err(libc::EINVAL)),
    }
}

impl Posix {
    /// The absolute start of a lock given `l_whence` and `l_start`.
    pub fn lock_start(&self, fd: i32, whence: i16, start: i64) -> Result<i64> {
        let d = self.get(fd)?;
        let base = match i32::from(whence) {
            libc::SEEK_SET => 0,
            libc::SEEK_CUR => *d.offset() as i64,
            libc::SEEK_END => self.fs.stat(d.ino())?.size as i64,
            _ => return Err(err(libc::EINVAL)),
        };
        base.checked_add(start)
            .filter(|&s| s >= 0)
            .ok_or(err(libc::EINVAL))
    }

    fn owner(&self, fd: i32, ofd: bool) -> Result<(LockOwner, i32)> {
        let d = self.get(fd)?;
        Ok(if ofd {
            (d.owner(), -1)
        } else {
            (LockOwner::Process(self.pid), self.pid)
        })
    }

    fn span(l: &Flock) -> Result<(u64, Option<u64>)> {
        // A negative length covers the bytes before start (POSIX).
        let (start, len) = if l.len < 0 {
            (l.start + l.len, -l.len)
        } else {
            (l.start, l.len)
        };
        if start < 0 {
            return Err(err(libc::EINVAL));
        }
        Ok(range(start as u64, len as u64)?)
    }

    /// F_SETLK / F_SETLKW (`ofd`: the F_OFD_ variants).
    pub fn set_lock(&self, fd: i32, l: &Flock, wait: bool, ofd: bool) -> Result<()> {
        let d = self.get(fd)?;
        let kind = kind_of(l.kind)?;
        match kind {
            Some(LockKind::Read) if !d.readable() => return Err(err(libc::EBADF)),
            Some(LockKind::Write) if !d.writable() => return Err(err(libc::EBADF)),
            _ => {}
        }
        let (owner, pid) = self.owner(fd, ofd)?;
        self.fs.lock_set(
            d.file()?,
            LockSpace::Record,
            Self::span(l)?,
            kind,
            owner,
            pid,
            wait,
        )
    }

    /// F_GETLK: the first lock that would block `l`, or `l` with F_UNLCK.
    pub fn get_lock(&self, fd: i32, l: &Flock, ofd: bool) -> Result<Flock> {
        let d = self.get(fd)?;
        let kind = kind_of(l.kind)?.ok_or(err(libc::EINVAL))?;
        let (owner, _) = self.owner(fd, ofd)?;
        let found =
            self.fs
                .lock_conflicting(d.file()?, LockSpace::Record, Self::span(l)?, kind, owner)?;
        Ok(match found {
            None => Flock {
                kind: libc::F_UNLCK as i16,
                ..*l
            },
            Some(h) => Flock {
                kind: match h.kind {
                    LockKind::Read => libc::F_RDLCK as i16,
                    LockKind::Write => libc::F_WRLCK as i16,
                },
                start: h.start as i64,
                len: h.end.map_or(0, |e| (e - h.start) as i64),
                pid: h.pid,
            },
        })
    }

    /// `flock(2)`: LOCK_SH, LOCK_EX, LOCK_UN, optionally | LOCK_NB. A conversion drops
    /// the old lock first, as Linux does.
    pub fn flock(&self, fd: i32, op: i32) -> Result<()> {
        let d = self.get(fd)?;
        let wait = op & libc::LOCK_NB == 0;
        let kind = match op & !libc::LOCK_NB {
            libc::LOCK_SH => Some(LockKind::Read),
            libc::LOCK_EX => Some(LockKind::Write),
            libc::LOCK_UN => None,
            _ => return Err(err(libc::EINVAL)),
        };
        let f = d.file()?;
        let whole = (0, None);
        let set = |kind, wait| {
            self.fs
                .lock_set(f, LockSpace::Flock, whole, kind, d.owner(), self.pid, wait)
        };
        // A conversion (shared to exclusive or back) that must wait lets go first, as
        // Linux's flock does.
        let free = kind.is_some()
            && self
                .fs
                .lock_conflicting(f, LockSpace::Flock, whole, LockKind::Write, d.owner())?
                .is_none();
        if !free {
            set(None, false)?;
        }
        set(kind, wait)
    }
}
