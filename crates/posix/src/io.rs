//! Data calls on descriptors: read, write (O_APPEND atomic), their positioned (`p*`)
//! and vectored (`*v`) forms, lseek (with SEEK_DATA and SEEK_HOLE), fsync, fdatasync,
//! ftruncate and fallocate.
//!
//! Invariants:
//! - A call that moves the offset holds the description's offset lock across the
//!   vfs call, so descriptors sharing a description never read or write at one offset
//!   twice.
//! - An O_APPEND write takes the file's end and writes there under the inode's lock
//!   (`FileSystem::append_ino`), whatever other descriptors do meanwhile.
//! - A vectored call is one vfs call (buffers gathered unless there is only one), so it
//!   is atomic as a `read` or `write`.

use crate::desc::Description;
use crate::{err, Posix, Result};
use std::sync::Arc;
use vfs::Kind;

/// Largest offset a file may reach (Linux's MAX_LFS_FILESIZE is larger; the vfs's
/// EFBIG limit applies first).
const OFFSET_MAX: u64 = i64::MAX as u64;

impl Posix {
    fn readable(&self, fd: i32) -> Result<Arc<Description>> {
        let d = self.get(fd)?;
        if !d.readable() {
            return Err(err(libc::EBADF));
        }
        if d.kind() == Kind::Dir {
            return Err(err(libc::EISDIR));
        }
        Ok(d)
    }

    fn writable(&self, fd: i32) -> Result<Arc<Description>> {
        let d = self.get(fd)?;
        if !d.writable() {
            return Err(err(libc::EBADF));
        }
        Ok(d)
    }

    pub fn read(&self, fd: i32, buf: &mut [u8]) -> Result<usize> {
        self.read_from(&*self.readable(fd)?, buf)
    }

    /// `read` on a description held outside the table (the interposer's pumps).
    pub fn read_from(&self, d: &Description, buf: &mut [u8]) -> Result<usize> {
        let mut off = d.offset();
        let n = self.fs.read(d.file()?, *off, buf)?;
        *off += n as u64;
        Ok(n)
    }

    pub fn pread(&self, fd: i32, buf: &mut [u8], offset: i64) -> Result<usize> {
        let d = self.readable(fd)?;
        let offset = u64::try_from(offset).map_err(|_| err(libc::EINVAL))?;
        self.fs.read(d.file()?, offset, buf)
    }

    /// `pread` without a copy: up to `n` bytes at `offset` as a [`vfs::ReadView`] of
    /// the page cache's blocks, valid and unchanging until dropped whatever happens to
    /// the file (docs/DESIGN.md §10.7, "Views"). The file offset does not move.
    pub fn pread_view(&self, fd: i32, n: usize, offset: i64) -> Result<vfs::ReadView> {
        let d = self.readable(fd)?;
        let offset = u64::try_from(offset).map_err(|_| err(libc::EINVAL))?;
        self.fs.read_view(d.file()?, offset, n)
    }

    /// Writes at the offset (or the end, with O_APPEND) and moves it past the data.
    pub fn write(&self, fd: i32, buf: &[u8]) -> Result<usize> {
        self.write_to(&*self.writable(fd)?, buf)
    }

    /// `write` on a description held outside the table (the interposer's pumps).
    pub fn write_to(&self, d: &Description, buf: &[u8]) -> Result<usize> {
        let mut off = d.offset();
        if d.flags() & libc::O_APPEND != 0 {
            let (at, n) = self.fs.append(d.file()?, buf)?;
            *off = at + n as u64;
            drop(off);
            return self.synced(d, n);
        }
        let n = self.fs.write(d.file()?, *off, buf)?;
        *off += n as u64;
        drop(off);
        self.synced(d, n)
    }

    /// Writes at `offset` (Linux: at the end when the description has O_APPEND).
    pub fn pwrite(&self, fd: i32, buf: &[u8], offset: i64) -> Result<usize> {
        let d = self.writable(fd)?;
        let offset = u64::try_from(offset).map_err(|_| err(libc::EINVAL))?;
        let n = if d.flags() & libc::O_APPEND != 0 {
            self.fs.append(d.file()?, buf)?.1
        } else {
            self.fs.write(d.file()?, offset, buf)?
        };
        self.synced(&d, n)
    }

    /// After a write of `n` bytes through `d`: O_SYNC makes it durable with an fsync,
    /// O_DSYNC with an fdatasync, before the write returns (docs/SEMANTICS.md §2).
    fn synced(&self, d: &Description, n: usize) -> Result<usize> {
        let flags = d.flags();
        if flags & libc::O_DSYNC != 0 {
            // O_SYNC is O_DSYNC plus a bit of its own.
            let data_only = flags & libc::O_SYNC != libc::O_SYNC;
            self.fs.fsync(d.file()?, data_only)?;
        }
        Ok(n)
    }

    /// `readv` (offset None) or `preadv`: one read (into the caller's buffer when
    /// there is one, else into one buffer then scattered), so it is atomic as a `read`.
    pub fn readv(&self, fd: i32, bufs: &mut [&mut [u8]], offset: Option<i64>) -> Result<usize> {
        let mut nonempty = bufs.iter_mut().filter(|b| !b.is_empty());
        if let (Some(only), None) = (nonempty.next(), nonempty.next()) {
            return match offset {
                None => self.read(fd, only),
                Some(o) => self.pread(fd, only, o),
            };
        }
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        let mut tmp = vec![0u8; total];
        let n = match offset {
            None => self.read(fd, &mut tmp)?,
            Some(o) => self.pread(fd, &mut tmp, o)?,
        };
        let mut from = &tmp[..n];
        for b in bufs.iter_mut() {
            let k = from.len().min(b.len());
            b[..k].copy_from_slice(&from[..k]);
            from = &from[k..];
        }
        Ok(n)
    }

    /// `writev` (offset None) or `pwritev`: one write (of the caller's buffer when there
    /// is one, else of the buffers gathered).
    pub fn writev(&self, fd: i32, bufs: &[&[u8]], offset: Option<i64>) -> Result<usize> {
        let mut nonempty = bufs.iter().filter(|b| !b.is_empty());
        let data = match (nonempty.next(), nonempty.next()) {
            (Some(only), None) => std::borrow::Cow::Borrowed(*only),
            _ => std::borrow::Cow::Owned(bufs.concat()),
        };
        match offset {
            None => self.write(fd, &data),
            Some(o) => self.pwrite(fd, &data, o),
        }
    }

    /// `preadv2`: `preadv` at `offset` (-1: at and past the description's offset).
    /// RWF_HIPRI is a polling hint and the write-only flags mean nothing to a read;
    /// RWF_NOWAIT, RWF_ATOMIC, RWF_DONTCACHE and unknown flags are EOPNOTSUPP, as on a
    /// Linux file system without them.
    pub fn readv2(
        &self,
        fd: i32,
        bufs: &mut [&mut [u8]],
        offset: i64,
        flags: i32,
    ) -> Result<usize> {
        check_rwf(flags)?;
        self.readv(fd, bufs, (offset != -1).then_some(offset))
    }

    /// `pwritev2`: `pwritev` at `offset` (-1: at the description's offset), with
    /// RWF_APPEND (at the end whatever the offset), RWF_NOAPPEND (at the offset even on
    /// an O_APPEND description), RWF_DSYNC and RWF_SYNC (durable before it returns, as
    /// fdatasync and fsync would make it) honoured; the rest as [`Posix::readv2`].
    pub fn writev2(&self, fd: i32, bufs: &[&[u8]], offset: i64, flags: i32) -> Result<usize> {
        check_rwf(flags)?;
        let d = self.writable(fd)?;
        let data = bufs.concat();
        let append = flags & libc::RWF_APPEND != 0
            || (d.flags() & libc::O_APPEND != 0 && flags & libc::RWF_NOAPPEND == 0);
        let n = if append {
            let (at, n) = self.fs.append(d.file()?, &data)?;
            if offset == -1 {
                *d.offset() = at + n as u64;
            }
            n
        } else if offset == -1 {
            let mut off = d.offset();
            let n = self.fs.write(d.file()?, *off, &data)?;
            *off += n as u64;
            n
        } else {
            let at = u64::try_from(offset).map_err(|_| err(libc::EINVAL))?;
            self.fs.write(d.file()?, at, &data)?
        };
        if flags & (libc::RWF_DSYNC | libc::RWF_SYNC) != 0 {
            self.fs.fsync(d.file()?, flags & libc::RWF_SYNC == 0)?;
        }
        Ok(n)
    }

    /// `lseek`: SEEK_SET, SEEK_CUR, SEEK_END, SEEK_DATA, SEEK_HOLE. On a directory,
    /// only a rewind to 0 is meaningful (it restarts the stream).
    pub fn lseek(&self, fd: i32, offset: i64, whence: i32) -> Result<i64> {
        let d = self.get(fd)?;
        if d.is_path_only() {
            return Err(err(libc::EBADF));
        }
        let mut off = d.offset();
        let size = || -> Result<u64> { Ok(self.fs.stat(d.ino())?.size) };
        let base = match whence {
            libc::SEEK_SET => 0,
            libc::SEEK_CUR => *off,
            libc::SEEK_END => size()?,
            libc::SEEK_DATA | libc::SEEK_HOLE => {
                let from = u64::try_from(offset).map_err(|_| err(libc::ENXIO))?;
                let to = if whence == libc::SEEK_DATA {
                    self.fs.seek_data(d.file()?, from)?
                } else {
                    self.fs.seek_hole(d.file()?, from)?
                };
                *off = to;
                return Ok(to as i64);
            }
            _ => return Err(err(libc::EINVAL)),
        };
        let to = base
            .checked_add_signed(offset)
            .filter(|&t| t <= OFFSET_MAX)
            .ok_or(err(libc::EINVAL))?;
        if d.kind() == Kind::Dir {
            d.dir.lock().expect("dir lock").seek(to);
        }
        *off = to;
        Ok(to as i64)
    }

    /// fsync (`data_only`: fdatasync).
    pub fn fsync(&self, fd: i32, data_only: bool) -> Result<()> {
        let d = self.get(fd)?;
        if d.is_path_only() {
            return Err(err(libc::EBADF));
        }
        self.fs.fsync(d.file()?, data_only)
    }

    pub fn ftruncate(&self, fd: i32, size: i64) -> Result<()> {
        let d = self.get(fd)?;
        let size = u64::try_from(size).map_err(|_| err(libc::EINVAL))?;
        if !d.writable() {
            return Err(err(libc::EINVAL));
        }
        if d.kind() != Kind::File {
            return Err(err(libc::EINVAL));
        }
        self.fs.truncate(d.file()?, size)
    }

    /// `fallocate(2)` with Linux's mode bits.
    pub fn fallocate(&self, fd: i32, mode: i32, offset: i64, len: i64) -> Result<()> {
        let d = self.writable(fd)?;
        if offset < 0 || len <= 0 {
            return Err(err(libc::EINVAL));
        }
        if d.kind() != Kind::File {
            return Err(err(libc::ENODEV));
        }
        self.fs
            .fallocate(d.file()?, mode, offset as u64, len as u64)
    }
}

/// The RWF_* flags of `preadv2`/`pwritev2` augefs knows (docs/SEMANTICS.md §4).
const RWF_KNOWN: i32 =
    libc::RWF_HIPRI | libc::RWF_DSYNC | libc::RWF_SYNC | libc::RWF_APPEND | libc::RWF_NOAPPEND;

/// EOPNOTSUPP for a flag augefs does not honour: RWF_NOWAIT (a read may wait for the
/// device, a write for room), RWF_ATOMIC (no untorn-write guarantee is offered),
/// RWF_DONTCACHE, and any unknown bit; Linux answers the same for a file system without
/// them.
fn check_rwf(flags: i32) -> Result<()> {
    if flags & !RWF_KNOWN != 0 {
        return Err(err(libc::EOPNOTSUPP));
    }
    Ok(())
}
