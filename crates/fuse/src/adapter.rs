//! [`AugeFuse`]: FUSE requests to vfs calls. Each request converts its arguments, makes
//! its vfs call (one call site per vfs operation, so a change of the vfs signatures is
//! mechanical here) and replies with the result or the errno of the error. File
//! operations are in [`crate::files`], locks in [`crate::lockops`].
//!
//! Invariants:
//! - FUSE node ids are vfs inode numbers (the root is 1 in both); vfs numbers are never
//!   reused, so a kernel reference to a removed inode never reaches another file.
//!   Generation numbers are 0. The kernel's lookup counts are kept ([`Nodes`]) so that
//!   requests it makes for a removed inode it still holds are told apart from errors.
//! - Every open file holds one vfs [`vfs::OpenInode`] from `open`/`create` to `release`,
//!   so a file removed while open keeps its data until the kernel's last release.
//! - Directory handles carry the readdir cursor table ([`crate::tables::DirCursor`]).
//! - Requests run on several threads at once; the shared state is the handle tables
//!   and the node table (mutexes held for a map operation) and the lock waits.

use crate::constants::TTL;
use crate::convert::{attr, errno, file_type, timeout};
use crate::lockops::LockWaits;
use crate::nodes::Nodes;
use crate::proto::abi::{self, init};
use crate::proto::request::{Op, Request};
use crate::session::{Negotiated, Out};
use crate::tables::{Dirs, Files, OpenFile};
use format::InodeNo;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use vfs::{Creds, FileSystem, Kind, Metadata, RenameMode, VfsError};

/// Who may use the mount besides what the kernel checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Whoever the kernel lets through (it enforces the owner unless allow_other).
    Kernel,
    /// `allow_root`: root and this uid (the kernel was told allow_other).
    RootAnd(u32),
}

/// Told of each read the kernel asks for, so that what it returned can be kept for
/// others (the data tables of the processes attached to the same mount, which read
/// without the kernel). `before` is asked first and gives the token `after` gets with
/// the bytes read, lent as the page cache's own blocks (no copy; the tap may keep them
/// a while); None keeps nothing of this read.
pub trait ReadTap: Send + Sync {
    fn before(&self, uid: u32, gid: u32, ino: u64) -> Option<u64>;
    #[allow(clippy::too_many_arguments)]
    fn after(
        &self,
        uid: u32,
        gid: u32,
        ino: u64,
        token: u64,
        offset: u64,
        data: vfs::ReadView,
        asked: usize,
    );
}

/// The FUSE file system over one mounted vfs.
#[derive(Debug)]
pub struct AugeFuse {
    pub(crate) fs: Arc<FileSystem>,
    pub(crate) files: Files,
    pub(crate) dirs: Dirs,
    pub(crate) nodes: Nodes,
    pub(crate) waits: Arc<LockWaits>,
    writeback_cache: bool,
    /// How long the kernel may cache attributes and names ([`TTL`]; zero for a bridge).
    ttl: Duration,
    /// Every open bypasses the kernel's page cache (a bridge: the owner process changes
    /// the file system directly too, so the kernel must cache nothing).
    pub(crate) direct_io: bool,
    admit: Admit,
    negotiated: OnceLock<Negotiated>,
    /// Told of every read ([`ReadTap`]), once set.
    pub(crate) tap: Tap,
}

/// The read tap, once set.
#[derive(Default)]
pub(crate) struct Tap(OnceLock<Arc<dyn ReadTap>>);

impl std::fmt::Debug for Tap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.get().is_some() {
            "Tap(set)"
        } else {
            "Tap(none)"
        })
    }
}

impl Tap {
    pub(crate) fn get(&self) -> Option<&Arc<dyn ReadTap>> {
        self.0.get()
    }
}

pub(crate) fn ino(n: u64) -> InodeNo {
    InodeNo(n)
}

/// The caller of a request: its uid and gid, and the supplementary groups of its
/// thread, read from /proc only if a decision of the vfs depends on them (none do for
/// root, for the owner, or where an inode's group and other bits agree). The kernel
/// checks permissions too (default_permissions); the vfs's own checks see the same
/// identity.
pub(crate) fn creds(h: &abi::InHeader) -> Creds {
    Creds::with_group_reader(h.uid, h.gid, vfs::creds::groups_of, h.pid)
}

/// Whether `op` changes nothing a stat, lookup, readdir or read shows. Everything
/// else (an open may truncate, a release may free an unlinked file) counts as a change.
fn reads_only(op: &Op<'_>) -> bool {
    matches!(
        op,
        Op::Lookup { .. }
            | Op::Forget(_)
            | Op::BatchForget(_)
            | Op::GetAttr
            | Op::ReadLink
            | Op::Read(_)
            | Op::Statfs
            | Op::GetXattr { .. }
            | Op::ListXattr { .. }
            | Op::OpenDir(_)
            | Op::ReadDir(_)
            | Op::ReadDirPlus(_)
            | Op::ReleaseDir(_)
            | Op::GetLk(_)
            | Op::Access(_)
            | Op::Lseek(_)
            | Op::Interrupt(_)
    )
}

pub(crate) fn done(out: &mut Out<'_>, r: Result<(), VfsError>) {
    match r {
        Ok(()) => out.ok(),
        Err(e) => out.error(errno(&e)),
    }
}

impl AugeFuse {
    pub fn new(fs: Arc<FileSystem>, writeback_cache: bool, admit: Admit) -> AugeFuse {
        AugeFuse {
            fs,
            files: Files::default(),
            dirs: Dirs::default(),
            nodes: Nodes::default(),
            waits: Arc::new(LockWaits::default()),
            writeback_cache,
            ttl: TTL,
            direct_io: false,
            admit,
            negotiated: OnceLock::new(),
            tap: Tap::default(),
        }
    }

    /// Tells `tap` of every read from now on (once: a second tap is refused).
    pub fn set_read_tap(&self, tap: Arc<dyn ReadTap>) -> bool {
        self.tap.0.set(tap).is_ok()
    }

    /// The adapter of an interposer's bridge (docs/DESIGN.md §12.3): the process that
    /// serves it also calls the vfs directly, so the kernel caches no attributes, names
    /// or pages (entry and attribute timeouts 0, direct IO on every open).
    pub fn bridge(fs: Arc<FileSystem>) -> AugeFuse {
        AugeFuse {
            ttl: Duration::ZERO,
            direct_io: true,
            ..AugeFuse::new(fs, false, Admit::Kernel)
        }
    }

    /// The kernel's references to inodes, as counted from the replies.
    pub fn nodes(&self) -> &Nodes {
        &self.nodes
    }

    /// INIT flags this adapter asks for (the session adds the protocol's own).
    pub(crate) fn wanted_flags(&self) -> u64 {
        // HANDLE_KILLPRIV_V2: without it the kernel keeps S_ISGID on a write to a file
        // that is not group-executable, which Linux's own file systems drop for a
        // writer outside the file's group (vfs/src/setid.rs decides, told who writes).
        let mut f = init::PARALLEL_DIROPS
            | init::POSIX_LOCKS
            | init::FLOCK_LOCKS
            | init::HANDLE_KILLPRIV_V2
            | init::EXPORT_SUPPORT;
        if !self.ttl.is_zero() {
            // A bridge caches nothing: attributes listed with the names would go unused,
            // and symbolic links' targets (which never change) would not be kept.
            f |= init::DO_READDIRPLUS | init::READDIRPLUS_AUTO | init::CACHE_SYMLINKS;
        }
        if self.writeback_cache {
            f |= init::WRITEBACK_CACHE;
        }
        if self.direct_io {
            // A bridge's opens are direct IO: without this a bridged process's
            // MAP_SHARED mmap fails with ENODEV (docs/DESIGN.md §12.2 "mmap").
            f |= init::DIRECT_IO_ALLOW_MMAP;
        }
        f
    }

    pub(crate) fn set_negotiated(&self, n: Negotiated) {
        let _ = self.negotiated.set(n);
    }

    /// The session is over: end lock waits and close handles the kernel never released
    /// (an aborted connection), so no inode stays counted open.
    pub(crate) fn shutdown(&self) {
        self.waits.shutdown(&self.fs);
        for open in self.files.drain() {
            if let Some(o) = open.take() {
                if let Err(e) = self.fs.close_ino(o) {
                    eprintln!("augefs: closing a file at unmount: {e}");
                }
            }
        }
    }

    fn stat(&self, i: u64) -> Result<Metadata, VfsError> {
        self.fs.stat_ino(ino(i))
    }

    pub(crate) fn attr_out(&self, a: abi::Attr) -> abi::AttrOut {
        let (s, ns) = timeout(self.ttl);
        abi::AttrOut {
            attr_valid: s,
            attr_valid_nsec: ns,
            dummy: 0,
            attr: a,
        }
    }

    /// The entry reply for `m`, which counts one kernel lookup of it.
    pub(crate) fn entry_out(&self, m: &Metadata) -> abi::EntryOut {
        let (s, ns) = timeout(self.ttl);
        self.nodes.looked_up(m.ino, file_type(m.kind));
        abi::EntryOut {
            nodeid: m.ino,
            generation: 0,
            entry_valid: s,
            attr_valid: s,
            entry_valid_nsec: ns,
            attr_valid_nsec: ns,
            attr: attr(m),
        }
    }

    fn entry(&self, out: &mut Out<'_>, r: Result<Metadata, VfsError>) {
        match r {
            Ok(m) => out.send(&self.entry_out(&m)),
            Err(e) => out.error(errno(&e)),
        }
    }

    pub(crate) fn attr_reply(&self, out: &mut Out<'_>, r: Result<Metadata, VfsError>) {
        match r {
            Ok(m) => out.send(&self.attr_out(attr(&m))),
            Err(e) => out.error(errno(&e)),
        }
    }

    /// Creates an inode owned by the caller (one batch).
    fn new_inode(
        &self,
        h: &abi::InHeader,
        name: &[u8],
        kind: Kind,
        perm: u32,
        target: Option<&[u8]>,
    ) -> Result<Metadata, VfsError> {
        let created = self
            .fs
            .create(&creds(h), ino(h.nodeid), name, kind, perm, target)?;
        self.fs.stat_ino(created)
    }

    /// MKNOD: a regular file, FIFO, socket or device node (the kernel sends no other
    /// types). The kernel then provides the FIFO, socket or device itself from the
    /// type and `rdev` in the attributes.
    fn mknod(
        &self,
        h: &abi::InHeader,
        arg: &abi::MknodIn,
        name: &[u8],
    ) -> Result<Metadata, VfsError> {
        let kind = Kind::from_mode(arg.mode)
            .ok_or_else(|| VfsError::Invalid(format!("mknod of mode {:o}", arg.mode)))?;
        let perm = arg.mode & !arg.umask & 0o7777;
        let dev = vfs::records::dev_of(arg.rdev);
        let made = self
            .fs
            .mknod(&creds(h), ino(h.nodeid), name, kind, perm, dev)?;
        self.fs.stat_ino(made)
    }

    fn admits(&self, h: &abi::InHeader) -> bool {
        match self.admit {
            Admit::Kernel => true,
            Admit::RootAnd(uid) => h.uid == 0 || h.uid == uid,
        }
    }

    /// The write-behind leases of the instance's clients: every request is marked a
    /// kernel call from before it runs (which ends any lease, so every acknowledged
    /// change of an attached client has run first) until its reply reached the kernel
    /// (vfs::leases), by the transport that delivers the reply.
    pub(crate) fn leases(&self) -> &vfs::leases::Leases {
        self.fs.leases()
    }

    /// Answers one request (exactly once, or not at all for those that take no reply).
    pub(crate) fn dispatch(&self, req: &Request<'_>, out: &mut Out<'_>) {
        let h = &req.header;
        match &req.op {
            Op::Forget(f) => {
                self.nodes.forget(h.nodeid, f.nlookup);
                return out.no_reply();
            }
            Op::BatchForget(list) => {
                for one in list.clone() {
                    self.nodes.forget(one.nodeid, one.nlookup);
                }
                return out.no_reply();
            }
            Op::Interrupt(i) => {
                self.waits.interrupt(&self.fs, i.unique);
                return out.no_reply();
            }
            _ if !self.admits(h) => return out.error(libc::EACCES),
            _ => {}
        }
        // Marked from before its first effect to after its last (vfs::changes).
        let _change = (!reads_only(&req.op)).then(|| self.fs.changes().begin());
        if !self.dispatch_names(req, out) {
            self.dispatch_files(req, out);
        }
    }

    /// Name and attribute operations; false if `req` is not one.
    fn dispatch_names(&self, req: &Request<'_>, out: &mut Out<'_>) -> bool {
        let h = &req.header;
        match &req.op {
            Op::Lookup { name } => self.lookup(h, name, out),
            Op::GetAttr => self.attr_reply(out, self.stat(h.nodeid)),
            Op::SetAttr(a) => self.setattr(h, a, out),
            Op::ReadLink => match self.fs.readlink_ino(ino(h.nodeid)) {
                Ok(t) => {
                    out.buf().push_bytes(&t);
                    out.send_payload();
                }
                Err(e) => out.error(errno(&e)),
            },
            Op::Symlink { name, target } => {
                let r = self.new_inode(h, name, Kind::Symlink, 0o777, Some(target));
                self.entry(out, r);
            }
            Op::Mknod { arg, name } => {
                let r = self.mknod(h, arg, name);
                self.entry(out, r);
            }
            Op::Mkdir { arg, name } => {
                let r = self.new_inode(h, name, Kind::Dir, arg.mode & !arg.umask, None);
                self.entry(out, r);
            }
            Op::Unlink { name } => done(out, self.fs.remove(&creds(h), ino(h.nodeid), name, false)),
            Op::Rmdir { name } => done(out, self.fs.remove(&creds(h), ino(h.nodeid), name, true)),
            Op::Rename {
                newdir,
                flags,
                name,
                newname,
            } => self.rename(h, (*newdir, *flags), name, newname, out),
            Op::Link { oldnodeid, newname } => {
                let r = self
                    .fs
                    .link(&creds(h), ino(*oldnodeid), ino(h.nodeid), newname)
                    .and_then(|()| self.stat(*oldnodeid));
                self.entry(out, r);
            }
            Op::Create { arg, name } => self.create(h, arg, name, out),
            Op::Access(a) => {
                // With default_permissions the kernel checks access itself; the vfs
                // answers the same (F_OK: whether the inode still exists).
                done(out, self.fs.access(&creds(h), ino(h.nodeid), a.mask & 7));
            }
            Op::Statfs => self.statfs(out),
            Op::Init(_) => out.error(libc::EIO), // only once, before the threads start
            Op::Destroy => out.ok(),
            _ => return false,
        }
        true
    }

    /// LOOKUP: the entry, or a negative entry the kernel caches for as long as it
    /// caches names (a create through the kernel replaces it). With export support the
    /// kernel also asks for `.` of any inode by number (open_by_handle_at of an inode it
    /// no longer caches; only callers with CAP_DAC_READ_SEARCH get there) and for `..`
    /// of a directory.
    fn lookup(&self, h: &abi::InHeader, name: &[u8], out: &mut Out<'_>) {
        let r = if name == b"." {
            self.fs.stat_ino(ino(h.nodeid))
        } else {
            self.fs
                .lookup_ino(&creds(h), ino(h.nodeid), name)
                .and_then(|i| self.fs.stat_ino(i))
        };
        match r {
            Err(VfsError::NotFound(_)) if !self.ttl.is_zero() && name != b"." => {
                let (s, ns) = timeout(self.ttl);
                out.send(&abi::EntryOut {
                    nodeid: 0,
                    entry_valid: s,
                    entry_valid_nsec: ns,
                    ..abi::EntryOut::default()
                });
            }
            r => self.entry(out, r),
        }
    }

    fn rename(
        &self,
        h: &abi::InHeader,
        (newdir, flags): (u64, u32),
        name: &[u8],
        newname: &[u8],
        out: &mut Out<'_>,
    ) {
        let mode = match flags {
            0 => RenameMode::Replace,
            libc::RENAME_NOREPLACE => RenameMode::NoReplace,
            libc::RENAME_EXCHANGE => RenameMode::Exchange,
            // RENAME_WHITEOUT (overlayfs) or a combination.
            _ => return out.error(libc::EINVAL),
        };
        let r = self
            .fs
            .rename(&creds(h), ino(h.nodeid), name, ino(newdir), newname, mode);
        done(out, r);
    }

    fn create(&self, h: &abi::InHeader, arg: &abi::CreateIn, name: &[u8], out: &mut Out<'_>) {
        let r = self
            .new_inode(h, name, Kind::File, arg.mode & !arg.umask, None)
            .and_then(|m| Ok((m.ino, self.fs.open_ino(ino(m.ino))?, m)));
        match r {
            Ok((_, open, m)) => {
                let fh = self.files.insert(OpenFile::new(open));
                let entry = self.entry_out(&m);
                out.buf().push(&entry);
                out.buf().push(&abi::OpenOut {
                    fh,
                    open_flags: self.open_flags(h),
                    padding: 0,
                });
                out.send_payload();
            }
            Err(e) => out.error(errno(&e)),
        }
    }

    fn statfs(&self, out: &mut Out<'_>) {
        let s = self.fs.statfs();
        let st = abi::Kstatfs {
            blocks: s.blocks,
            bfree: s.blocks_free,
            bavail: s.blocks_free,
            files: s.files,
            ffree: s.files_free,
            bsize: s.block_size,
            namelen: s.name_max,
            frsize: s.block_size,
            ..abi::Kstatfs::default()
        };
        out.send(&abi::StatfsOut { st });
    }

    /// FOPEN flags of an open by the request `h`'s caller.
    pub(crate) fn open_flags(&self, h: &abi::InHeader) -> u32 {
        if self.direct_io {
            // A bridge's server is also a client of it (docs/DESIGN.md §12.3): its own
            // opens take no FLUSH, so a close of them never waits for a reply (a
            // process exiting with files open on its own bridge cannot hang). Other
            // processes' opens are flushed: FLUSH releases their record locks.
            let own = own_thread(h.pid);
            return abi::fopen::DIRECT_IO | if own { abi::fopen::NOFLUSH } else { 0 };
        }
        // The kernel's page cache stays valid across opens: nothing else changes files.
        abi::fopen::KEEP_CACHE
    }
}

/// Whether thread `tid` (a request header's pid) belongs to this process.
fn own_thread(tid: u32) -> bool {
    std::path::Path::new(&format!("/proc/self/task/{tid}")).exists()
}
