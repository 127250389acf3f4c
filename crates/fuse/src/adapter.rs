//! [`AugeFuse`]: FUSE requests to vfs calls. Each request converts its arguments, makes
//! its vfs call (one call site per vfs operation, so a change of the vfs signatures is
//! mechanical here) and replies with the result or the errno of the error.
//!
//! Invariants:
//! - FUSE inode numbers are vfs inode numbers (the root is 1 in both); vfs numbers are
//!   never reused, so a kernel reference to a removed inode meets ENOENT, never another
//!   file. That is why lookup counts are not tracked: `forget` has nothing to release
//!   (the vfs loads any live inode by number on demand), and generation numbers are 0.
//! - Every open file holds one vfs [`vfs::OpenInode`] from `open`/`create` to `release`,
//!   so a file removed while open keeps its data until the kernel's last release.
//! - Directory handles carry the readdir cursor table ([`crate::tables::DirCursor`]).
//! - Requests run on several threads at once; the adapter's only shared state is the two
//!   handle tables (a mutex each, held for a map operation).

use crate::convert::{attr, errno, file_type, nanos};
use crate::tables::{DirCursor, Dirs, Files, Resume};
use format::InodeNo;
use fuser::{
    AccessFlags, Errno, FileHandle, FopenFlags, Generation, INodeNo, InitFlags, KernelConfig,
    LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyEmpty, ReplyEntry, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request,
    TimeOrNow, WriteFlags,
};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use vfs::{AttrChanges, Creds, FileSystem, Kind, RenameMode, TimeChange, VfsError, XattrMode};

/// How long the kernel may cache attributes and names. Only this process changes the
/// image (the device is locked exclusively), and every change passes through the
/// kernel, which updates or drops its cache for it, so the time could be longer; one
/// second bounds the damage of a missed invalidation.
const TTL: Duration = Duration::from_secs(1);
/// Largest write request asked of the kernel: the vfs applies up to 1 MiB atomically.
const MAX_WRITE_BYTES: u32 = 1 << 20;
/// Entries asked of the vfs per step of a readdir (one reply holds about a page).
const READDIR_BATCH: usize = 128;
const GENERATION: Generation = Generation(0);

/// The FUSE file system over one mounted vfs.
#[derive(Debug)]
pub struct AugeFuse {
    fs: Arc<FileSystem>,
    files: Files,
    dirs: Dirs,
    writeback_cache: bool,
    /// How long the kernel may cache attributes and names ([`TTL`]; zero for a bridge).
    ttl: Duration,
    /// Every open bypasses the kernel's page cache (a bridge: the owner process changes
    /// the file system directly too, so the kernel must cache nothing).
    direct_io: bool,
}

fn ino(i: INodeNo) -> InodeNo {
    InodeNo(i.0)
}

fn name(n: &OsStr) -> &[u8] {
    n.as_bytes()
}

impl AugeFuse {
    pub fn new(fs: Arc<FileSystem>, writeback_cache: bool) -> AugeFuse {
        AugeFuse {
            fs,
            files: Files::default(),
            dirs: Dirs::default(),
            writeback_cache,
            ttl: TTL,
            direct_io: false,
        }
    }

    /// The adapter of an interposer's bridge (docs/DESIGN.md §4f): the process that
    /// serves it also calls the vfs directly, so the kernel caches no attributes, names
    /// or pages (entry and attribute timeouts 0, direct IO on every open).
    pub fn bridge(fs: Arc<FileSystem>) -> AugeFuse {
        AugeFuse {
            ttl: Duration::ZERO,
            direct_io: true,
            ..AugeFuse::new(fs, false)
        }
    }

    fn stat(&self, i: InodeNo) -> Result<fuser::FileAttr, VfsError> {
        Ok(attr(&self.fs.stat_ino(i)?))
    }

    /// Creates an inode owned by `req`'s caller (one batch).
    fn new_inode(
        &self,
        req: &Request,
        parent: INodeNo,
        n: &OsStr,
        kind: Kind,
        perm: u32,
        target: Option<&[u8]>,
    ) -> Result<fuser::FileAttr, VfsError> {
        let created = self
            .fs
            .create(&creds(req), ino(parent), name(n), kind, perm, target)?;
        self.stat(created)
    }

    fn open_file(&self, i: InodeNo) -> Result<FileHandle, VfsError> {
        let open = self.fs.open_ino(i)?;
        Ok(FileHandle(self.files.insert(open)))
    }

    fn open_flags(&self) -> FopenFlags {
        if self.direct_io {
            return FopenFlags::FOPEN_DIRECT_IO;
        }
        // The kernel's page cache stays valid across opens: nothing else changes files.
        FopenFlags::FOPEN_KEEP_CACHE
    }

    fn entry(&self, reply: ReplyEntry, r: Result<fuser::FileAttr, VfsError>) {
        match r {
            Ok(a) => reply.entry(&self.ttl, &a, GENERATION),
            Err(e) => reply.error(errno(&e)),
        }
    }

    /// Fills `reply` from `offset` of directory `dir`'s listing.
    fn fill_dir(
        &self,
        cx: &Creds,
        dir: InodeNo,
        cursor: &mut DirCursor,
        offset: u64,
        reply: &mut ReplyDirectory,
    ) -> Result<(), VfsError> {
        let mut after = match cursor.resume(offset) {
            Resume::End => return Ok(()),
            Resume::After(n) => Some(n),
            Resume::Start { dot, dotdot } => {
                if dot && reply.add(INodeNo(dir.0), 1, fuser::FileType::Directory, ".") {
                    return Ok(());
                }
                if dotdot {
                    let parent = self.fs.lookup_ino(cx, dir, b"..")?;
                    if reply.add(INodeNo(parent.0), 2, fuser::FileType::Directory, "..") {
                        return Ok(());
                    }
                }
                None
            }
        };
        loop {
            let batch = self.fs.readdir(cx, dir, after.as_deref(), READDIR_BATCH)?;
            let Some(last) = batch.last() else {
                return Ok(());
            };
            let more = batch.len() == READDIR_BATCH;
            after = Some(last.name.clone());
            for e in batch {
                let kind = file_type(e.kind);
                let next = cursor.push(e.name.clone());
                if reply.add(INodeNo(e.ino), next, kind, OsStr::from_bytes(&e.name)) {
                    return Ok(());
                }
            }
            if !more {
                return Ok(());
            }
        }
    }
}

fn set_time(t: TimeOrNow) -> TimeChange {
    match t {
        TimeOrNow::Now => TimeChange::Now,
        TimeOrNow::SpecificTime(t) => TimeChange::At(nanos(t)),
    }
}

/// The caller of `req`: its uid and gid, and the supplementary groups of its process
/// (from /proc; none if the process is gone). The kernel checks permissions too
/// (default_permissions); the vfs's own checks see the same identity.
fn creds(req: &Request) -> Creds {
    Creds::user(req.uid(), req.gid(), groups_of(req.pid()))
}

fn groups_of(pid: u32) -> Vec<u32> {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return Vec::new();
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|g| {
            g.split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

fn done(reply: ReplyEmpty, r: Result<(), VfsError>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno(&e)),
    }
}

impl fuser::Filesystem for AugeFuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let caps = config.capabilities();
        let mut wanted = InitFlags::FUSE_PARALLEL_DIROPS;
        if self.writeback_cache {
            wanted |= InitFlags::FUSE_WRITEBACK_CACHE;
        }
        // Capabilities the kernel lacks are left off, not fatal.
        let _ = config.add_capabilities(wanted & caps);
        let _ = config.set_max_write(MAX_WRITE_BYTES);
        Ok(())
    }

    fn destroy(&mut self) {
        // Handles the kernel never released (an aborted connection): close them so the
        // inodes are not counted open.
        for open in self.files.drain() {
            if let Err(e) = self.fs.close_ino(open) {
                eprintln!("augefs: closing a file at unmount: {e}");
            }
        }
    }

    fn lookup(&self, req: &Request, parent: INodeNo, n: &OsStr, reply: ReplyEntry) {
        let r = self
            .fs
            .lookup_ino(&creds(req), ino(parent), name(n))
            .and_then(|i| self.stat(i));
        self.entry(reply, r);
    }

    fn getattr(&self, _req: &Request, i: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.stat(ino(i)) {
            Ok(a) => reply.attr(&self.ttl, &a),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        i: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let i = ino(i);
        let change = AttrChanges {
            perm: mode,
            uid,
            gid,
            atime: atime.map(set_time),
            mtime: mtime.map(set_time),
        };
        let r = (|| {
            if let Some(size) = size {
                self.fs.truncate(i, size)?;
            }
            if change != AttrChanges::default() {
                self.fs.set_attr(&creds(req), i, &change)?;
            }
            self.stat(i)
        })();
        match r {
            Ok(a) => reply.attr(&self.ttl, &a),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readlink(&self, _req: &Request, i: INodeNo, reply: ReplyData) {
        match self.fs.readlink_ino(ino(i)) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        n: &OsStr,
        mode: u32,
        umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        if mode & libc::S_IFMT != libc::S_IFREG {
            // Device nodes, FIFOs and sockets have no vfs kind yet (vfat answers so too).
            reply.error(Errno::EPERM);
            return;
        }
        let r = self.new_inode(req, parent, n, Kind::File, mode & !umask, None);
        self.entry(reply, r);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        n: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let r = self.new_inode(req, parent, n, Kind::Dir, mode & !umask, None);
        self.entry(reply, r);
    }

    fn unlink(&self, req: &Request, parent: INodeNo, n: &OsStr, reply: ReplyEmpty) {
        done(
            reply,
            self.fs.remove(&creds(req), ino(parent), name(n), false),
        );
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, n: &OsStr, reply: ReplyEmpty) {
        done(
            reply,
            self.fs.remove(&creds(req), ino(parent), name(n), true),
        );
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let target = target.as_os_str().as_bytes();
        let r = self.new_inode(req, parent, link_name, Kind::Symlink, 0o777, Some(target));
        self.entry(reply, r);
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        n: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let mode = if flags.is_empty() {
            RenameMode::Replace
        } else if flags == RenameFlags::RENAME_NOREPLACE {
            RenameMode::NoReplace
        } else if flags == RenameFlags::RENAME_EXCHANGE {
            RenameMode::Exchange
        } else {
            // RENAME_WHITEOUT (overlayfs) or a combination.
            reply.error(Errno::EINVAL);
            return;
        };
        let r = self.fs.rename(
            &creds(req),
            ino(parent),
            name(n),
            ino(newparent),
            name(newname),
            mode,
        );
        done(reply, r);
    }

    fn link(
        &self,
        req: &Request,
        i: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let r = self
            .fs
            .link(&creds(req), ino(i), ino(newparent), name(newname))
            .and_then(|()| self.stat(ino(i)));
        self.entry(reply, r);
    }

    fn open(&self, _req: &Request, i: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        // Access modes are the kernel's to check (default_permissions); O_TRUNC arrives
        // as a setattr of the size, O_APPEND as writes at the size the kernel knows.
        match self.open_file(ino(i)) {
            Ok(fh) => reply.opened(fh, self.open_flags()),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        n: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let r = self
            .new_inode(req, parent, n, Kind::File, mode & !umask, None)
            .and_then(|a| Ok((a, self.open_file(InodeNo(a.ino.0))?)));
        match r {
            Ok((a, fh)) => reply.created(&self.ttl, &a, GENERATION, fh, self.open_flags()),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        i: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let mut buf = vec![0u8; size as usize];
        match self.fs.read_at(ino(i), offset, &mut buf) {
            Ok(n) => reply.data(&buf[..n]),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn write(
        &self,
        _req: &Request,
        i: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        match self.fs.write_at(ino(i), offset, data) {
            Ok(n) => reply.written(u32::try_from(n).expect("a FUSE write is below 4 GiB")),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _i: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        if self.direct_io {
            // A bridge's server is also a client of it (docs/DESIGN.md §4f): without
            // FLUSH (ENOSYS stops the kernel sending it) a close never waits for a reply,
            // so a process exiting with files open on its own bridge cannot hang.
            reply.error(Errno::ENOSYS);
            return;
        }
        // close(2): writes already reached the vfs; durability is fsync's.
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _i: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        match self.files.remove(fh.0) {
            Some(open) => done(reply, self.fs.close_ino(open)),
            None => reply.error(Errno::EBADF),
        }
    }

    fn fsync(
        &self,
        _req: &Request,
        i: INodeNo,
        _fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        done(reply, self.fs.fsync_ino(ino(i), datasync));
    }

    fn fallocate(
        &self,
        _req: &Request,
        i: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let r = vfs::Fallocate::from_mode(mode)
            .and_then(|op| self.fs.fallocate(ino(i), op, offset, length));
        done(reply, r);
    }

    /// Only SEEK_DATA and SEEK_HOLE reach here (the kernel does the others).
    fn lseek(
        &self,
        _req: &Request,
        i: INodeNo,
        _fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        let Ok(offset) = u64::try_from(offset) else {
            return reply.error(Errno::EINVAL);
        };
        let r = match whence {
            libc::SEEK_DATA => self.fs.seek_data(ino(i), offset),
            libc::SEEK_HOLE => self.fs.seek_hole(ino(i), offset),
            _ => return reply.error(Errno::EINVAL),
        };
        match r {
            Ok(at) => reply.offset(at as i64),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn opendir(&self, _req: &Request, i: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.fs.stat_ino(ino(i)) {
            Ok(m) if m.kind == Kind::Dir => {
                let fh = self.dirs.insert(Arc::new(Mutex::new(DirCursor::default())));
                reply.opened(FileHandle(fh), FopenFlags::empty());
            }
            Ok(_) => reply.error(Errno::ENOTDIR),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readdir(
        &self,
        req: &Request,
        i: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let Some(cursor) = self.dirs.get(fh.0) else {
            reply.error(Errno::EBADF);
            return;
        };
        let mut cursor = cursor.lock().expect("directory cursor lock");
        match self.fill_dir(&creds(req), ino(i), &mut cursor, offset, &mut reply) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        _i: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        match self.dirs.remove(fh.0) {
            Some(_) => reply.ok(),
            None => reply.error(Errno::EBADF),
        }
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        i: INodeNo,
        _fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        done(reply, self.fs.fsync_ino(ino(i), datasync));
    }

    fn statfs(&self, _req: &Request, _i: INodeNo, reply: ReplyStatfs) {
        let s = self.fs.statfs();
        // Inodes cost only metadata records: report a large, never shrinking count.
        let files = u64::from(u32::MAX);
        reply.statfs(
            s.blocks,
            s.blocks_free,
            s.blocks_free,
            files,
            files,
            s.block_size,
            s.name_max,
            s.block_size,
        );
    }

    fn setxattr(
        &self,
        req: &Request,
        i: INodeNo,
        n: &OsStr,
        value: &[u8],
        flags: i32,
        position: u32,
        reply: ReplyEmpty,
    ) {
        let mode = match flags {
            0 => XattrMode::Either,
            libc::XATTR_CREATE => XattrMode::Create,
            libc::XATTR_REPLACE => XattrMode::Replace,
            _ => {
                reply.error(Errno::EINVAL);
                return;
            }
        };
        if position != 0 {
            reply.error(Errno::EINVAL);
            return;
        }
        done(
            reply,
            self.fs
                .set_xattr_ino(&creds(req), ino(i), name(n), value, mode),
        );
    }

    fn getxattr(&self, req: &Request, i: INodeNo, n: &OsStr, size: u32, reply: ReplyXattr) {
        match self.fs.get_xattr_ino(&creds(req), ino(i), name(n)) {
            Ok(v) => reply_xattr(reply, size, &v),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn listxattr(&self, req: &Request, i: INodeNo, size: u32, reply: ReplyXattr) {
        match self.fs.list_xattr_ino(&creds(req), ino(i)) {
            Ok(names) => {
                let mut list = Vec::new();
                for n in names {
                    list.extend_from_slice(&n);
                    list.push(0);
                }
                reply_xattr(reply, size, &list);
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn removexattr(&self, req: &Request, i: INodeNo, n: &OsStr, reply: ReplyEmpty) {
        done(
            reply,
            self.fs.remove_xattr_ino(&creds(req), ino(i), name(n)),
        );
    }

    fn access(&self, req: &Request, i: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        // With default_permissions the kernel checks access itself; the vfs answers the
        // same (F_OK: whether the inode still exists).
        let mask = (mask.bits() as u32) & 7;
        done(reply, self.fs.access(&creds(req), ino(i), mask));
    }
}

/// getxattr/listxattr: the size alone for a zero-sized probe, ERANGE if it does not fit.
fn reply_xattr(reply: ReplyXattr, size: u32, value: &[u8]) {
    let len = u32::try_from(value.len()).expect("attribute values are at most 64 KiB");
    if size == 0 {
        reply.size(len);
    } else if len > size {
        reply.error(Errno::ERANGE);
    } else {
        reply.data(value);
    }
}
