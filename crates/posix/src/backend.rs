//! What the posix layer needs of a file system: the [`Backend`] trait, with two
//! implementations. `vfs::FileSystem` itself (this module: the process holds the image,
//! docs/DESIGN.md §12) and the attached client of a running instance (crates/instance:
//! each call a request to the process that holds the image).
//!
//! The trait is the boundary a request crosses, so its calls are shaped for that:
//! - An open is one call ([`Backend::open`]): resolve, create, check permissions and
//!   truncate together, so the side that holds the image decides all of it.
//! - Data calls and lock calls name an [`OpenFile`] (what the open returned), never a
//!   bare inode number: the instance serves them only for a file its client opened, in
//!   the access mode it opened it with.
//! - Errors are errnos ([`Errno`]): what crosses a process boundary.
//!
//! Invariants:
//! - An [`OpenFile`] counts as one open reference of its inode until
//!   [`Backend::close`] consumes it (an unlinked file keeps its data until then).
//! - `close` releases the locks the file's description owner holds.

use crate::{err, Errno, Result};
use format::InodeNo;
use vfs::creds::{MAY_READ, MAY_WRITE};
use vfs::locks::{LockKind, LockOwner, RangeLock};
use vfs::{
    AttrChanges, Creds, DirEntry, Fallocate, FileSystem, Kind, Metadata, OpenInode, ReadView,
    RenameMode, StatFs, VfsError, XattrMode,
};

/// Which lock table a lock call means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockSpace {
    /// fcntl record locks (classic and OFD).
    Record,
    /// flock.
    Flock,
}

/// An open file: its inode, the lock owner of its description, and the reference the
/// backend holds for it.
#[derive(Debug)]
pub struct OpenFile {
    pub ino: InodeNo,
    /// The description's own lock owner (OFD locks, flock).
    pub owner: LockOwner,
    /// Opened for reading / for writing.
    pub read: bool,
    pub write: bool,
    pub reference: Reference,
}

/// What keeps a file open, by backend.
#[derive(Debug)]
pub enum Reference {
    /// A vfs open reference in this process.
    Local(OpenInode),
    /// A handle number of the instance this process is attached to.
    Remote(u64),
}

/// What an open found.
#[derive(Debug)]
pub struct Found {
    pub ino: InodeNo,
    pub kind: Kind,
    /// None for O_PATH and for special files (FIFOs, sockets, devices: the kernel's).
    pub file: Option<OpenFile>,
    /// The directory and name of the file this open created (O_CREAT), if it did.
    pub created: Option<(InodeNo, Vec<u8>)>,
}

/// The calls the posix layer makes of a file system. `cx` is who the calling process
/// says it is; a backend that serves other processes takes their identity from the
/// kernel instead.
pub trait Backend: Send + Sync + std::fmt::Debug {
    fn resolve(&self, cx: &Creds, start: InodeNo, path: &[u8], follow: bool) -> Result<InodeNo>;
    /// The directory and the last name of `path`.
    fn resolve_parent(&self, cx: &Creds, start: InodeNo, path: &[u8])
        -> Result<(InodeNo, Vec<u8>)>;
    fn lookup(&self, cx: &Creds, dir: InodeNo, name: &[u8]) -> Result<InodeNo>;
    fn stat(&self, ino: InodeNo) -> Result<Metadata>;
    /// The attributes of what `path` names (one call: a request for a remote backend).
    fn stat_at(&self, cx: &Creds, start: InodeNo, path: &[u8], follow: bool) -> Result<Metadata> {
        self.stat(self.resolve(cx, start, path, follow)?)
    }
    fn access(&self, cx: &Creds, ino: InodeNo, mask: u32) -> Result<()>;
    /// `open(2)` of `path` from `start` (flags and mode as the call gave them).
    fn open(&self, cx: &Creds, start: InodeNo, path: &[u8], flags: i32, mode: u32)
        -> Result<Found>;
    fn close(&self, file: OpenFile) -> Result<()>;
    /// A directory, symlink (`target`) or regular file named `name` in `parent`.
    fn create(
        &self,
        cx: &Creds,
        parent: InodeNo,
        name: &[u8],
        kind: Kind,
        perm: u32,
        target: Option<&[u8]>,
    ) -> Result<InodeNo>;
    fn mknod(
        &self,
        cx: &Creds,
        parent: InodeNo,
        name: &[u8],
        kind: Kind,
        perm: u32,
        dev: u64,
    ) -> Result<InodeNo>;
    fn remove(&self, cx: &Creds, parent: InodeNo, name: &[u8], dir: bool) -> Result<()>;
    /// [`Backend::create`] of the last name of `path` (from `start`): a backend across a
    /// boundary resolves the parent on the far side, in the same call.
    fn create_at(
        &self,
        cx: &Creds,
        start: InodeNo,
        path: &[u8],
        kind: Kind,
        perm: u32,
        target: Option<&[u8]>,
    ) -> Result<InodeNo> {
        let (parent, name) = self.resolve_parent(cx, start, path)?;
        self.create(cx, parent, &name, kind, perm, target)
    }
    /// [`Backend::remove`] of the last name of `path` (from `start`).
    fn remove_at(&self, cx: &Creds, start: InodeNo, path: &[u8], dir: bool) -> Result<()> {
        let (parent, name) = self.resolve_parent(cx, start, path)?;
        self.remove(cx, parent, &name, dir)
    }
    /// [`Backend::rename`] of paths, each from its start directory.
    fn rename_at(
        &self,
        cx: &Creds,
        from: (InodeNo, &[u8]),
        to: (InodeNo, &[u8]),
        mode: RenameMode,
    ) -> Result<()> {
        let (fp, fname) = self.resolve_parent(cx, from.0, from.1)?;
        let (tp, tname) = self.resolve_parent(cx, to.0, to.1)?;
        self.rename(cx, (fp, &fname), (tp, &tname), mode)
    }
    fn rename(
        &self,
        cx: &Creds,
        from: (InodeNo, &[u8]),
        to: (InodeNo, &[u8]),
        mode: RenameMode,
    ) -> Result<()>;
    fn link(&self, cx: &Creds, ino: InodeNo, parent: InodeNo, name: &[u8]) -> Result<()>;
    fn readlink(&self, ino: InodeNo) -> Result<Vec<u8>>;
    fn set_attr(&self, cx: &Creds, ino: InodeNo, changes: &AttrChanges) -> Result<()>;
    /// `truncate(2)` by name: needs write permission.
    fn truncate_ino(&self, cx: &Creds, ino: InodeNo, size: u64) -> Result<()>;
    fn set_xattr(
        &self,
        cx: &Creds,
        ino: InodeNo,
        name: &[u8],
        value: &[u8],
        mode: XattrMode,
    ) -> Result<()>;
    fn get_xattr(&self, cx: &Creds, ino: InodeNo, name: &[u8]) -> Result<Vec<u8>>;
    fn list_xattr(&self, cx: &Creds, ino: InodeNo) -> Result<Vec<Vec<u8>>>;
    fn remove_xattr(&self, cx: &Creds, ino: InodeNo, name: &[u8]) -> Result<()>;
    /// Up to `max` entries of `dir` after the name `after` (from the start: None).
    fn readdir(
        &self,
        cx: &Creds,
        dir: InodeNo,
        after: Option<&[u8]>,
        max: usize,
    ) -> Result<Vec<DirEntry>>;
    fn statfs(&self) -> Result<StatFs>;

    fn read(&self, f: &OpenFile, offset: u64, buf: &mut [u8]) -> Result<usize>;
    /// Up to `len` bytes at `offset` as a view (docs/DESIGN.md §10.7, "Views"): the
    /// cache's own blocks where the cache is in this process; a backend without one
    /// reads them into a view of its own (one copy, the same lifetime rule).
    fn read_view(&self, f: &OpenFile, offset: u64, len: usize) -> Result<ReadView> {
        let mut buf = vec![0u8; len];
        let n = self.read(f, offset, &mut buf)?;
        buf.truncate(n);
        Ok(ReadView::of_bytes(buf))
    }
    fn write(&self, f: &OpenFile, offset: u64, data: &[u8]) -> Result<usize>;
    /// Writes at the file's end, atomically; returns where and how much.
    fn append(&self, f: &OpenFile, data: &[u8]) -> Result<(u64, usize)>;
    fn truncate(&self, f: &OpenFile, size: u64) -> Result<()>;
    /// `fallocate(2)` with its `mode` bits.
    fn fallocate(&self, f: &OpenFile, mode: i32, offset: u64, len: u64) -> Result<()>;
    fn seek_data(&self, f: &OpenFile, offset: u64) -> Result<u64>;
    fn seek_hole(&self, f: &OpenFile, offset: u64) -> Result<u64>;
    fn fsync(&self, f: &OpenFile, data_only: bool) -> Result<()>;
    /// Everything acknowledged so far made durable.
    fn sync(&self) -> Result<()>;

    /// Sets (`kind` Some) or releases (None) a lock of `owner` (the process's, `pid`,
    /// or the description's) over `span` (start, exclusive end) of `f`'s inode.
    #[allow(clippy::too_many_arguments)]
    fn lock_set(
        &self,
        f: &OpenFile,
        space: LockSpace,
        span: (u64, Option<u64>),
        kind: Option<LockKind>,
        owner: LockOwner,
        pid: i32,
        wait: bool,
    ) -> Result<()>;
    /// A lock another owner holds that conflicts with `kind` over `span`.
    fn lock_conflicting(
        &self,
        f: &OpenFile,
        space: LockSpace,
        span: (u64, Option<u64>),
        kind: LockKind,
        owner: LockOwner,
    ) -> Result<Option<RangeLock>>;
    /// Releases every lock `owner` holds on `ino` (a close by the process).
    fn lock_release(&self, ino: InodeNo, space: LockSpace, owner: LockOwner);

    /// The calling process changed its identity (setuid and friends).
    fn set_creds(&self, creds: Creds);
}

fn e(v: VfsError) -> Errno {
    Errno::from(v)
}

/// The vfs open reference of a file this backend opened.
pub fn local(f: &OpenFile) -> Result<&OpenInode> {
    match &f.reference {
        Reference::Local(open) => Ok(open),
        Reference::Remote(_) => Err(err(libc::EBADF)),
    }
}

fn table(fs: &FileSystem, space: LockSpace) -> &vfs::locks::LockTable {
    match space {
        LockSpace::Record => fs.record_locks(),
        LockSpace::Flock => fs.flocks(),
    }
}

/// The permission bits `flags` asks of an existing file.
pub fn wanted(flags: i32) -> u32 {
    let acc = match flags & libc::O_ACCMODE {
        libc::O_RDONLY => MAY_READ,
        libc::O_WRONLY => MAY_WRITE,
        _ => MAY_READ | MAY_WRITE,
    };
    acc | if flags & libc::O_TRUNC != 0 {
        MAY_WRITE
    } else {
        0
    }
}

/// The checks of `open(2)` that need no file system: Ok, or the errno.
pub fn check_open_flags(flags: i32, path: &[u8]) -> Result<()> {
    if flags & libc::O_TMPFILE == libc::O_TMPFILE {
        return Err(err(libc::EOPNOTSUPP));
    }
    if path.is_empty() {
        return Err(err(libc::ENOENT));
    }
    if flags & libc::O_ACCMODE == libc::O_ACCMODE {
        return Err(err(libc::EINVAL));
    }
    Ok(())
}

/// `open(2)` against a vfs: resolve (creating a regular file for O_CREAT), check the
/// kind and the permissions (a file just created is the creator's to open in any mode),
/// take an open reference, and empty the file for O_TRUNC.
pub fn open_in(
    fs: &FileSystem,
    cx: &Creds,
    start: InodeNo,
    path: &[u8],
    flags: i32,
    mode: u32,
) -> Result<Found> {
    check_open_flags(flags, path)?;
    let excl = flags & libc::O_CREAT != 0 && flags & libc::O_EXCL != 0;
    let follow = flags & libc::O_NOFOLLOW == 0 && !excl;
    let (ino, created) = match fs.resolve_at(cx, start, path, follow) {
        Ok(_) if excl => return Err(err(libc::EEXIST)),
        Ok(ino) => (ino, None),
        Err(VfsError::NotFound(_)) if flags & libc::O_CREAT != 0 => {
            if path.ends_with(b"/") {
                return Err(err(libc::EISDIR));
            }
            let (parent, name) = fs.resolve_parent_at(cx, start, path).map_err(e)?;
            match fs.create(cx, parent, name, Kind::File, mode & 0o7777, None) {
                Ok(ino) => (ino, Some((parent, name.to_vec()))),
                Err(VfsError::Exists(_)) if !excl => {
                    (fs.resolve_at(cx, start, path, follow).map_err(e)?, None)
                }
                Err(x) => return Err(e(x)),
            }
        }
        Err(x) => return Err(e(x)),
    };
    let meta = fs.stat_ino(ino).map_err(e)?;
    let acc = flags & libc::O_ACCMODE;
    let writes = acc != libc::O_RDONLY;
    let path_only = flags & libc::O_PATH != 0;
    match meta.kind {
        Kind::Symlink if !path_only => return Err(err(libc::ELOOP)),
        Kind::Dir if writes && !path_only => return Err(err(libc::EISDIR)),
        k if k != Kind::Dir && flags & libc::O_DIRECTORY != 0 => return Err(err(libc::ENOTDIR)),
        _ => {}
    }
    if path_only || meta.kind.is_special() {
        // A special file's permission bits are the kernel's to check, at its own open.
        return Ok(Found {
            ino,
            kind: meta.kind,
            file: None,
            created,
        });
    }
    if created.is_none() {
        fs.access(cx, ino, wanted(flags)).map_err(e)?;
    }
    let open = fs.open_ino(ino).map_err(e)?;
    let file = OpenFile {
        ino,
        owner: LockOwner::new_description(),
        read: acc != libc::O_WRONLY,
        write: writes,
        reference: Reference::Local(open),
    };
    if flags & libc::O_TRUNC != 0 && writes && meta.kind == Kind::File && meta.size > 0 {
        if let Err(x) = fs.truncate(ino, 0) {
            let _ = close_in(fs, file);
            return Err(e(x));
        }
    }
    Ok(Found {
        ino,
        kind: meta.kind,
        file: Some(file),
        created,
    })
}

/// Closes `file` in `fs`: its description's locks go, then its open reference.
pub fn close_in(fs: &FileSystem, file: OpenFile) -> Result<()> {
    fs.flocks().release(file.ino, file.owner);
    fs.record_locks().release(file.ino, file.owner);
    match file.reference {
        Reference::Local(open) => fs.close_ino(open).map_err(e),
        // Never made by this backend.
        Reference::Remote(_) => Err(err(libc::EBADF)),
    }
}

impl Backend for FileSystem {
    fn resolve(&self, cx: &Creds, start: InodeNo, path: &[u8], follow: bool) -> Result<InodeNo> {
        self.resolve_at(cx, start, path, follow).map_err(e)
    }

    fn resolve_parent(
        &self,
        cx: &Creds,
        start: InodeNo,
        path: &[u8],
    ) -> Result<(InodeNo, Vec<u8>)> {
        let (dir, name) = self.resolve_parent_at(cx, start, path).map_err(e)?;
        Ok((dir, name.to_vec()))
    }

    fn lookup(&self, cx: &Creds, dir: InodeNo, name: &[u8]) -> Result<InodeNo> {
        self.lookup_ino(cx, dir, name).map_err(e)
    }

    fn stat(&self, ino: InodeNo) -> Result<Metadata> {
        self.stat_ino(ino).map_err(e)
    }

    fn access(&self, cx: &Creds, ino: InodeNo, mask: u32) -> Result<()> {
        FileSystem::access(self, cx, ino, mask).map_err(e)
    }

    fn open(
        &self,
        cx: &Creds,
        start: InodeNo,
        path: &[u8],
        flags: i32,
        mode: u32,
    ) -> Result<Found> {
        open_in(self, cx, start, path, flags, mode)
    }

    fn close(&self, file: OpenFile) -> Result<()> {
        close_in(self, file)
    }

    fn create(
        &self,
        cx: &Creds,
        parent: InodeNo,
        name: &[u8],
        kind: Kind,
        perm: u32,
        target: Option<&[u8]>,
    ) -> Result<InodeNo> {
        FileSystem::create(self, cx, parent, name, kind, perm, target).map_err(e)
    }

    fn create_at(
        &self,
        cx: &Creds,
        start: InodeNo,
        path: &[u8],
        kind: Kind,
        perm: u32,
        target: Option<&[u8]>,
    ) -> Result<InodeNo> {
        // EEXIST for a path ending in the root, `.` or `..` (mkdir of a mount point).
        let (parent, name) = self.create_parent_at(cx, start, path).map_err(e)?;
        FileSystem::create(self, cx, parent, name, kind, perm, target).map_err(e)
    }

    fn mknod(
        &self,
        cx: &Creds,
        parent: InodeNo,
        name: &[u8],
        kind: Kind,
        perm: u32,
        dev: u64,
    ) -> Result<InodeNo> {
        FileSystem::mknod(self, cx, parent, name, kind, perm, dev).map_err(e)
    }

    fn remove(&self, cx: &Creds, parent: InodeNo, name: &[u8], dir: bool) -> Result<()> {
        FileSystem::remove(self, cx, parent, name, dir).map_err(e)
    }

    fn rename(
        &self,
        cx: &Creds,
        from: (InodeNo, &[u8]),
        to: (InodeNo, &[u8]),
        mode: RenameMode,
    ) -> Result<()> {
        FileSystem::rename(self, cx, from.0, from.1, to.0, to.1, mode).map_err(e)
    }

    fn link(&self, cx: &Creds, ino: InodeNo, parent: InodeNo, name: &[u8]) -> Result<()> {
        FileSystem::link(self, cx, ino, parent, name).map_err(e)
    }

    fn readlink(&self, ino: InodeNo) -> Result<Vec<u8>> {
        self.readlink_ino(ino).map_err(e)
    }

    fn set_attr(&self, cx: &Creds, ino: InodeNo, changes: &AttrChanges) -> Result<()> {
        FileSystem::set_attr(self, cx, ino, changes).map_err(e)
    }

    fn truncate_ino(&self, cx: &Creds, ino: InodeNo, size: u64) -> Result<()> {
        match self.stat_ino(ino).map_err(e)?.kind {
            Kind::Dir => return Err(err(libc::EISDIR)),
            Kind::File => {}
            _ => return Err(err(libc::EINVAL)),
        }
        FileSystem::access(self, cx, ino, MAY_WRITE).map_err(e)?;
        FileSystem::truncate(self, ino, size).map_err(e)
    }

    fn set_xattr(
        &self,
        cx: &Creds,
        ino: InodeNo,
        name: &[u8],
        value: &[u8],
        mode: XattrMode,
    ) -> Result<()> {
        self.set_xattr_ino(cx, ino, name, value, mode).map_err(e)
    }

    fn get_xattr(&self, cx: &Creds, ino: InodeNo, name: &[u8]) -> Result<Vec<u8>> {
        self.get_xattr_ino(cx, ino, name).map_err(e)
    }

    fn list_xattr(&self, cx: &Creds, ino: InodeNo) -> Result<Vec<Vec<u8>>> {
        self.list_xattr_ino(cx, ino).map_err(e)
    }

    fn remove_xattr(&self, cx: &Creds, ino: InodeNo, name: &[u8]) -> Result<()> {
        self.remove_xattr_ino(cx, ino, name).map_err(e)
    }

    fn readdir(
        &self,
        cx: &Creds,
        dir: InodeNo,
        after: Option<&[u8]>,
        max: usize,
    ) -> Result<Vec<DirEntry>> {
        FileSystem::readdir(self, cx, dir, after, max).map_err(e)
    }

    fn statfs(&self) -> Result<StatFs> {
        Ok(FileSystem::statfs(self))
    }

    fn read(&self, f: &OpenFile, offset: u64, buf: &mut [u8]) -> Result<usize> {
        self.read_open(local(f)?, offset, buf).map_err(e)
    }

    fn read_view(&self, f: &OpenFile, offset: u64, len: usize) -> Result<ReadView> {
        self.read_view_open(local(f)?, offset, len).map_err(e)
    }

    fn write(&self, f: &OpenFile, offset: u64, data: &[u8]) -> Result<usize> {
        self.write_open(local(f)?, offset, data).map_err(e)
    }

    fn append(&self, f: &OpenFile, data: &[u8]) -> Result<(u64, usize)> {
        self.append_open(local(f)?, data).map_err(e)
    }

    fn truncate(&self, f: &OpenFile, size: u64) -> Result<()> {
        FileSystem::truncate(self, f.ino, size).map_err(e)
    }

    fn fallocate(&self, f: &OpenFile, mode: i32, offset: u64, len: u64) -> Result<()> {
        let op = Fallocate::from_mode(mode).map_err(e)?;
        FileSystem::fallocate(self, f.ino, op, offset, len).map_err(e)
    }

    fn seek_data(&self, f: &OpenFile, offset: u64) -> Result<u64> {
        FileSystem::seek_data(self, f.ino, offset).map_err(e)
    }

    fn seek_hole(&self, f: &OpenFile, offset: u64) -> Result<u64> {
        FileSystem::seek_hole(self, f.ino, offset).map_err(e)
    }

    fn fsync(&self, f: &OpenFile, data_only: bool) -> Result<()> {
        self.fsync_ino(f.ino, data_only).map_err(e)
    }

    fn sync(&self) -> Result<()> {
        FileSystem::sync(self).map_err(e)
    }

    fn lock_set(
        &self,
        f: &OpenFile,
        space: LockSpace,
        span: (u64, Option<u64>),
        kind: Option<LockKind>,
        owner: LockOwner,
        pid: i32,
        wait: bool,
    ) -> Result<()> {
        table(self, space)
            .set(f.ino, span, kind, owner, pid, wait)
            .map_err(e)
    }

    fn lock_conflicting(
        &self,
        f: &OpenFile,
        space: LockSpace,
        span: (u64, Option<u64>),
        kind: LockKind,
        owner: LockOwner,
    ) -> Result<Option<RangeLock>> {
        Ok(table(self, space).conflicting(f.ino, span, kind, owner))
    }

    fn lock_release(&self, ino: InodeNo, space: LockSpace, owner: LockOwner) {
        table(self, space).release(ino, owner);
    }

    fn set_creds(&self, creds: Creds) {
        FileSystem::set_creds(self, creds);
    }
}
