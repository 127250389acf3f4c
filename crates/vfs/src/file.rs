//! Open files, shaped like `std::fs::File` and `std::fs::OpenOptions`.
//!
//! Invariants:
//! - A handle keeps its inode alive: an unlinked file's blocks are freed when its last
//!   handle is dropped (or closed).
//! - O_APPEND writes take the size and write under one inode lock, so concurrent
//!   appenders never overwrite each other.

use crate::attr::Metadata;
use crate::creds::{MAY_READ, MAY_WRITE};
use crate::data::view::ReadView;
use crate::error::VfsError;
use crate::fs::FileSystem;
use crate::handle::Handle;
use crate::locks::{LockKind, LockOwner};
use crate::records::Kind;
use crate::sparse::Fallocate;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::sync::Arc;

/// How to open a file (as `std::fs::OpenOptions`, plus the mode for new files).
#[derive(Debug, Clone, Copy)]
pub struct OpenOptions {
    read: bool,
    write: bool,
    append: bool,
    truncate: bool,
    create: bool,
    create_new: bool,
    mode: u32,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions::new()
    }
}

impl OpenOptions {
    pub fn new() -> OpenOptions {
        OpenOptions {
            read: false,
            write: false,
            append: false,
            truncate: false,
            create: false,
            create_new: false,
            mode: 0o644,
        }
    }
    pub fn read(&mut self, v: bool) -> &mut Self {
        self.read = v;
        self
    }
    pub fn write(&mut self, v: bool) -> &mut Self {
        self.write = v;
        self
    }
    pub fn append(&mut self, v: bool) -> &mut Self {
        self.append = v;
        self
    }
    pub fn truncate(&mut self, v: bool) -> &mut Self {
        self.truncate = v;
        self
    }
    pub fn create(&mut self, v: bool) -> &mut Self {
        self.create = v;
        self
    }
    pub fn create_new(&mut self, v: bool) -> &mut Self {
        self.create_new = v;
        self
    }
    /// Permission bits of a file this open creates.
    pub fn mode(&mut self, mode: u32) -> &mut Self {
        self.mode = mode;
        self
    }

    /// Opens `path` in `fs` (O_CREAT, O_EXCL, O_TRUNC, O_APPEND as set).
    pub fn open(&self, fs: &Arc<FileSystem>, path: &str) -> Result<File, VfsError> {
        let writes = self.write || self.append;
        if !self.read && !writes {
            return Err(VfsError::Invalid(
                "open for neither reading nor writing".into(),
            ));
        }
        if (self.truncate || self.create || self.create_new) && !writes {
            return Err(VfsError::Invalid(
                "create or truncate without write access".into(),
            ));
        }
        let cx = fs.creds();
        // (inode, whether this open created it: a new file is opened whatever its mode)
        let (ino, created) = match fs.resolve_as(&cx, path, true) {
            Ok(_) if self.create_new => return Err(VfsError::Exists(path.into())),
            Ok(ino) => (ino, false),
            Err(VfsError::NotFound(_)) if self.create || self.create_new => {
                let (parent, name) = fs.resolve_parent_as(&cx, path)?;
                match fs.create(&cx, parent, name, Kind::File, self.mode, None) {
                    Ok(ino) => (ino, true),
                    // Created by someone else meanwhile: O_CREAT opens it, O_EXCL fails.
                    Err(VfsError::Exists(_)) if !self.create_new => {
                        (fs.resolve_as(&cx, path, true)?, false)
                    }
                    Err(e) => return Err(e),
                }
            }
            Err(e) => return Err(e),
        };
        let meta = fs.attrs_ino(ino)?;
        if meta.kind.is_special() {
            return Err(VfsError::SpecialFile(path.into()));
        }
        if meta.kind == Kind::Dir && writes {
            return Err(VfsError::IsDir(path.into()));
        }
        if !created {
            let mask = if self.read { MAY_READ } else { 0 } | if writes { MAY_WRITE } else { 0 };
            fs.access(&cx, ino, mask)?;
        }
        let handle = fs.handle(ino)?;
        fs.opened(&handle)?;
        let file = self.file(fs, handle);
        if self.truncate && meta.kind == Kind::File && meta.size > 0 {
            file.set_len(0)?;
        }
        Ok(file)
    }

    /// `open(dir, O_TMPFILE)`: a new regular file with no name in directory `dir` (it
    /// needs write access), freed at its last close unless [`File::link`] names it.
    pub fn open_tmpfile(&self, fs: &Arc<FileSystem>, dir: &str) -> Result<File, VfsError> {
        if !(self.write || self.append) {
            return Err(VfsError::Invalid("O_TMPFILE without write access".into()));
        }
        let cx = fs.creds();
        let dir = fs.resolve_as(&cx, dir, true)?;
        let open = fs.create_tmpfile(&cx, dir, self.mode)?;
        Ok(self.file(fs, open.into_handle()))
    }

    /// A `File` for `handle`, which the caller has counted as open.
    fn file(&self, fs: &Arc<FileSystem>, handle: Arc<Handle>) -> File {
        File {
            fs: fs.clone(),
            handle,
            pos: 0,
            read: self.read,
            write: self.write || self.append,
            append: self.append,
            owner: LockOwner::new_description(),
        }
    }
}

/// An open file.
pub struct File {
    fs: Arc<FileSystem>,
    handle: Arc<Handle>,
    pos: u64,
    read: bool,
    write: bool,
    append: bool,
    /// This open file's identity as a lock owner (flock locks are per open file).
    owner: LockOwner,
}

impl std::fmt::Debug for File {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("File")
            .field("ino", &self.handle.ino)
            .field("pos", &self.pos)
            .finish()
    }
}

impl File {
    pub fn ino(&self) -> u64 {
        self.handle.ino.0
    }

    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize, VfsError> {
        if !self.read {
            return Err(VfsError::BadAccess("not open for reading".into()));
        }
        self.fs.read_data(&self.handle, offset, buf)
    }

    /// Up to `len` bytes at `offset` without a copy ([`FileSystem::read_view_at`]).
    pub fn read_view(&self, offset: u64, len: usize) -> Result<ReadView, VfsError> {
        if !self.read {
            return Err(VfsError::BadAccess("not open for reading".into()));
        }
        self.fs.read_view(&self.handle, offset, len)
    }

    /// Writes at `offset` (at the end, for a handle opened with append).
    pub fn write_at(&self, buf: &[u8], offset: u64) -> Result<usize, VfsError> {
        if !self.write {
            return Err(VfsError::BadAccess("not open for writing".into()));
        }
        let at = if self.append {
            crate::data::At::End
        } else {
            crate::data::At::Offset(offset)
        };
        Ok(self.fs.write_data(&self.handle, at, buf)?.1)
    }

    pub fn set_len(&self, size: u64) -> Result<(), VfsError> {
        if !self.write {
            return Err(VfsError::BadAccess("not open for writing".into()));
        }
        self.fs.truncate(self.handle.ino, size)
    }

    /// `fallocate(2)` (needs a handle open for writing).
    pub fn fallocate(&self, op: Fallocate, offset: u64, len: u64) -> Result<(), VfsError> {
        if !self.write {
            return Err(VfsError::BadAccess("not open for writing".into()));
        }
        self.fs.fallocate(self.handle.ino, op, offset, len)
    }

    /// `lseek(fd, offset, SEEK_DATA)`: moves to and returns the next data offset.
    pub fn seek_data(&mut self, offset: u64) -> Result<u64, VfsError> {
        self.pos = self.fs.seek_data(self.handle.ino, offset)?;
        Ok(self.pos)
    }

    /// `lseek(fd, offset, SEEK_HOLE)`: moves to and returns the next hole offset.
    pub fn seek_hole(&mut self, offset: u64) -> Result<u64, VfsError> {
        self.pos = self.fs.seek_hole(self.handle.ino, offset)?;
        Ok(self.pos)
    }

    /// Waits for an exclusive advisory lock on the whole file (`flock(LOCK_EX)`, as
    /// `std::fs::File::lock`); EDEADLK instead of waiting forever in a cycle.
    pub fn lock(&self) -> Result<(), VfsError> {
        self.flock(Some(LockKind::Write), true)
    }

    /// Waits for a shared advisory lock (`flock(LOCK_SH)`).
    pub fn lock_shared(&self) -> Result<(), VfsError> {
        self.flock(Some(LockKind::Read), true)
    }

    /// An exclusive lock now, or EAGAIN (`LOCK_EX | LOCK_NB`).
    pub fn try_lock(&self) -> Result<(), VfsError> {
        self.flock(Some(LockKind::Write), false)
    }

    /// A shared lock now, or EAGAIN (`LOCK_SH | LOCK_NB`).
    pub fn try_lock_shared(&self) -> Result<(), VfsError> {
        self.flock(Some(LockKind::Read), false)
    }

    /// Drops this file's lock (`LOCK_UN`); also done when the file is dropped.
    pub fn unlock(&self) -> Result<(), VfsError> {
        self.flock(None, false)
    }

    /// A conversion drops the old lock first, as Linux's flock does.
    fn flock(&self, kind: Option<LockKind>, wait: bool) -> Result<(), VfsError> {
        let (ino, table) = (self.handle.ino, self.fs.flocks());
        let whole = (0, None);
        if kind.is_some()
            && table
                .conflicting(ino, whole, LockKind::Write, self.owner)
                .is_none()
        {
            // Nothing else holds it: take (or convert) in one step.
            return table.set(ino, whole, kind, self.owner, 0, false);
        }
        table.set(ino, whole, None, self.owner, 0, false)?;
        table.set(ino, whole, kind, self.owner, 0, wait)
    }

    /// fsync.
    pub fn sync_all(&self) -> Result<(), VfsError> {
        self.fs.fsync_ino(self.handle.ino, false)
    }

    /// fdatasync.
    pub fn sync_data(&self) -> Result<(), VfsError> {
        self.fs.fsync_ino(self.handle.ino, true)
    }

    pub fn metadata(&self) -> Result<Metadata, VfsError> {
        self.fs.stat_ino(self.handle.ino)
    }

    /// `linkat(fd, "", AT_FDCWD, path, AT_EMPTY_PATH)`: a new name for this open file,
    /// also for one with no name (O_TMPFILE, or unlinked while open), which then stays.
    pub fn link(&self, path: &str) -> Result<(), VfsError> {
        let cx = self.fs.creds();
        let (parent, name) = self.fs.resolve_parent_as(&cx, path)?;
        self.fs.link(&cx, self.handle.ino, parent, name)
    }
}

impl Drop for File {
    fn drop(&mut self) {
        self.fs.flocks().release(self.handle.ino, self.owner);
        // A failure here (the file system turned read-only) leaves an orphan record: the
        // next mount frees the inode. There is no one to report it to.
        let _ = self.fs.release(&self.handle);
    }
}

fn io_error(e: VfsError) -> io::Error {
    io::Error::from_raw_os_error(e.errno())
}

impl Read for File {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.read_at(buf, self.pos).map_err(io_error)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl Write for File {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.write_at(buf, self.pos).map_err(io_error)?;
        self.pos = if self.append {
            self.fs.attrs_ino(self.handle.ino).map_err(io_error)?.size
        } else {
            self.pos + n as u64
        };
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Seek for File {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let base = match to {
            SeekFrom::Start(n) => {
                self.pos = n;
                return Ok(n);
            }
            SeekFrom::Current(d) => (self.pos, d),
            SeekFrom::End(d) => (
                self.fs.attrs_ino(self.handle.ino).map_err(io_error)?.size,
                d,
            ),
        };
        match base.0.checked_add_signed(base.1) {
            Some(p) => {
                self.pos = p;
                Ok(p)
            }
            None => Err(io::Error::from_raw_os_error(libc::EINVAL)),
        }
    }
}
