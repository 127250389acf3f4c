//! Calls on names, each relative to [`At`] (a directory descriptor or the working
//! directory; absolute paths start at augefs's root), and calls on a descriptor's inode
//! (fstat, fchmod, ...). `AT_EMPTY_PATH` with an empty path means the descriptor itself.

use crate::{err, join, At, Cwd, Posix, Result};
use format::InodeNo;
use vfs::{AttrChanges, Kind, Metadata, RenameMode, TimeChange, XattrMode};

/// UTIME_NOW and UTIME_OMIT as `utimensat` takes them in `tv_nsec`.
pub const UTIME_NOW: i64 = (1 << 30) - 1;
pub const UTIME_OMIT: i64 = (1 << 30) - 2;

/// One time argument of `utimensat` (seconds, nanoseconds or UTIME_NOW/OMIT).
pub fn time_change(sec: i64, nsec: i64) -> Result<Option<TimeChange>> {
    match nsec {
        UTIME_OMIT => Ok(None),
        UTIME_NOW => Ok(Some(TimeChange::Now)),
        0..=999_999_999 => Ok(Some(TimeChange::At(sec * 1_000_000_000 + nsec))),
        _ => Err(err(libc::EINVAL)),
    }
}

impl Posix {
    /// The inode `path` names (`follow`: a final symlink is followed); an empty path
    /// with `empty_ok` is the descriptor `at` itself.
    pub fn lookup(&self, at: At, path: &[u8], follow: bool, empty_ok: bool) -> Result<InodeNo> {
        if path.is_empty() {
            return match at {
                At::Fd(fd) if empty_ok => Ok(self.get(fd)?.ino()),
                At::Cwd if empty_ok => Ok(self.cwd().ino),
                _ => Err(err(libc::ENOENT)),
            };
        }
        let (start, _) = self.start(at, path)?;
        self.fs.resolve(&self.creds(), start, path, follow)
    }

    fn parent(&self, at: At, path: &[u8]) -> Result<(InodeNo, Vec<u8>)> {
        let start = self.parent_start(at, path)?;
        self.fs.resolve_parent(&self.creds(), start, path)
    }

    /// Where the parent of `path` is resolved from (ENOENT for an empty path).
    fn parent_start(&self, at: At, path: &[u8]) -> Result<InodeNo> {
        if path.is_empty() {
            return Err(err(libc::ENOENT));
        }
        Ok(self.start(at, path)?.0)
    }

    pub fn stat(&self, at: At, path: &[u8], follow: bool, empty_ok: bool) -> Result<Metadata> {
        if path.is_empty() {
            let ino = self.lookup(at, path, follow, empty_ok)?;
            return self.fs.stat(ino);
        }
        let (start, _) = self.start(at, path)?;
        self.fs.stat_at(&self.creds(), start, path, follow)
    }

    pub fn fstat(&self, fd: i32) -> Result<Metadata> {
        self.fs.stat(self.get(fd)?.ino())
    }

    pub fn mkdir(&self, at: At, path: &[u8], mode: u32) -> Result<()> {
        let start = self.parent_start(at, path)?;
        self.fs
            .create_at(&self.creds(), start, path, Kind::Dir, mode & 0o7777, None)?;
        Ok(())
    }

    /// `mknodat`: a regular file, FIFO, socket or device node (`dev` for a device) of
    /// the `S_IFMT` bits of `mode` (0 is a regular file, as Linux takes it). The node is
    /// recorded only: opening one is [`Posix::open_node`]'s business.
    pub fn mknod(&self, at: At, path: &[u8], mode: u32, dev: u64) -> Result<()> {
        let ty = match mode & libc::S_IFMT {
            0 => libc::S_IFREG,
            ty => ty,
        };
        let kind = match Kind::from_mode(ty) {
            Some(k) if k == Kind::File || k.is_special() => k,
            // Linux: EPERM for a directory (mkdir's), EINVAL for anything else.
            Some(Kind::Dir) => return Err(err(libc::EPERM)),
            _ => return Err(err(libc::EINVAL)),
        };
        let (dir, name) = self.parent(at, path)?;
        self.fs
            .mknod(&self.creds(), dir, &name, kind, mode & 0o7777, dev)?;
        Ok(())
    }

    pub fn symlink(&self, target: &[u8], at: At, path: &[u8]) -> Result<()> {
        if target.is_empty() {
            return Err(err(libc::ENOENT));
        }
        let start = self.parent_start(at, path)?;
        self.fs.create_at(
            &self.creds(),
            start,
            path,
            Kind::Symlink,
            0o777,
            Some(target),
        )?;
        Ok(())
    }

    pub fn readlink(&self, at: At, path: &[u8]) -> Result<Vec<u8>> {
        let ino = self.lookup(at, path, false, true)?;
        self.fs.readlink(ino)
    }

    /// `unlinkat` (`dir`: AT_REMOVEDIR).
    pub fn unlink(&self, at: At, path: &[u8], dir: bool) -> Result<()> {
        let start = self.parent_start(at, path)?;
        self.fs.remove_at(&self.creds(), start, path, dir)
    }

    /// `renameat2` with RENAME_NOREPLACE or RENAME_EXCHANGE in `flags`.
    pub fn rename(&self, from_at: At, from: &[u8], to_at: At, to: &[u8], flags: u32) -> Result<()> {
        let mode = match flags {
            0 => RenameMode::Replace,
            libc::RENAME_NOREPLACE => RenameMode::NoReplace,
            libc::RENAME_EXCHANGE => RenameMode::Exchange,
            _ => return Err(err(libc::EINVAL)),
        };
        let from_start = self.parent_start(from_at, from)?;
        let to_start = self.parent_start(to_at, to)?;
        self.fs
            .rename_at(&self.creds(), (from_start, from), (to_start, to), mode)
    }

    /// `linkat` (`follow`: AT_SYMLINK_FOLLOW).
    pub fn link(&self, from_at: At, from: &[u8], to_at: At, to: &[u8], follow: bool) -> Result<()> {
        let ino = self.lookup(from_at, from, follow, false)?;
        let (dp, dname) = self.parent(to_at, to)?;
        self.fs.link(&self.creds(), ino, dp, &dname)
    }

    /// `faccessat` (`mode`: R_OK, W_OK, X_OK bits, or F_OK).
    pub fn access(&self, at: At, path: &[u8], mode: i32, follow: bool) -> Result<()> {
        let ino = self.lookup(at, path, follow, true)?;
        let mask = (mode & 7) as u32;
        self.fs.access(&self.creds(), ino, mask)
    }

    /// chmod, chown, utimens of an inode.
    pub fn set_attr(&self, ino: InodeNo, changes: &AttrChanges) -> Result<()> {
        self.fs.set_attr(&self.creds(), ino, changes)
    }

    /// `truncate(2)`: by name, needs write permission.
    pub fn truncate(&self, at: At, path: &[u8], size: i64) -> Result<()> {
        let size = u64::try_from(size).map_err(|_| err(libc::EINVAL))?;
        let ino = self.lookup(at, path, true, false)?;
        self.fs.truncate_ino(&self.creds(), ino, size)
    }

    pub fn set_xattr(&self, ino: InodeNo, name: &[u8], value: &[u8], flags: i32) -> Result<()> {
        let mode = match flags {
            0 => XattrMode::Either,
            libc::XATTR_CREATE => XattrMode::Create,
            libc::XATTR_REPLACE => XattrMode::Replace,
            _ => return Err(err(libc::EINVAL)),
        };
        self.fs.set_xattr(&self.creds(), ino, name, value, mode)
    }

    pub fn get_xattr(&self, ino: InodeNo, name: &[u8]) -> Result<Vec<u8>> {
        self.fs.get_xattr(&self.creds(), ino, name)
    }

    /// The names, each followed by a NUL (listxattr's format).
    pub fn list_xattr(&self, ino: InodeNo) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        for n in self.fs.list_xattr(&self.creds(), ino)? {
            out.extend_from_slice(&n);
            out.push(0);
        }
        Ok(out)
    }

    pub fn remove_xattr(&self, ino: InodeNo, name: &[u8]) -> Result<()> {
        self.fs.remove_xattr(&self.creds(), ino, name)
    }

    /// `chdir`: the working directory becomes `path` (needs search permission).
    pub fn chdir(&self, at: At, path: &[u8]) -> Result<()> {
        let ino = self.lookup(at, path, true, true)?;
        self.enter(ino, || {
            let (_, base) = self.start(at, path)?;
            Ok(join(&base, path))
        })
    }

    /// `fchdir`.
    pub fn fchdir(&self, fd: i32) -> Result<()> {
        let d = self.get(fd)?;
        self.enter(d.ino(), || Ok(d.path().to_string()))
    }

    fn enter(&self, ino: InodeNo, path: impl FnOnce() -> Result<String>) -> Result<()> {
        if self.fs.stat(ino)?.kind != Kind::Dir {
            return Err(err(libc::ENOTDIR));
        }
        self.fs.access(&self.creds(), ino, vfs::creds::MAY_EXEC)?;
        let path = path()?;
        *self.cwd.lock().expect("cwd lock") = Cwd { ino, path };
        Ok(())
    }

    pub fn statfs(&self) -> Result<vfs::StatFs> {
        self.fs.statfs()
    }
}
