//! One attached process on the instance side: the handles it opened, and the requests
//! of its connections run against the vfs (docs/DESIGN.md §12.5).
//!
//! Invariants:
//! - A handle is this session's: a request naming another number is EBADF. Reads need
//!   a handle opened for reading; writes, truncates, fallocates and write locks one
//!   opened for writing (as the kernel checks a descriptor's mode).
//! - Every call runs as the connection's kernel-given identity ([`crate::peer`]); the
//!   process's record locks are owned by its kernel-given pid.
//! - When the session goes (its last connection closed), its process's record locks
//!   are released and every handle is closed (with its description's locks).

use crate::datatable::DataTable;
use crate::posts::{Lease, Posts};
use crate::proto::{self, Request};
use crate::table::{ChangePage, Key, Table};
use crate::wire::Writer;
use crate::{Change, Notify};
use format::InodeNo;
use posix::backend::{close_in, local, open_in, LockSpace, OpenFile};
use posix::{Errno, Result};
use std::collections::HashMap;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use vfs::locks::{LockOwner, LockTable, Wait, WaitCancel};
use vfs::{Creds, FileSystem, VfsError};

fn e(v: VfsError) -> Errno {
    Errno::from(v)
}

/// An open file of a session; closed when the last request using it is done.
#[derive(Debug)]
struct Held {
    fs: Arc<FileSystem>,
    file: Option<OpenFile>,
}

impl Held {
    fn file(&self) -> &OpenFile {
        self.file.as_ref().expect("present until drop")
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(f) = self.file.take() {
            // A failure (read-only file system) leaves an orphan the next mount frees.
            let _ = close_in(&self.fs, f);
        }
    }
}

/// One attached process.
#[derive(Debug)]
pub(crate) struct Session {
    pub token: u64,
    pub pid: i32,
    fs: Arc<FileSystem>,
    notify: Option<Notify>,
    handles: Mutex<HashMap<u64, Arc<Held>>>,
    next_handle: AtomicU64,
    /// The change page clients read, if the instance keeps one (a lease is a change
    /// of its file's data in flight there).
    page: Option<Arc<ChangePage>>,
    /// Its posted requests and leases (`crate::posts`).
    pub posts: Posts,
}

/// Most bytes a lease lets a client post before it sends its writes again (and at
/// most a sixteenth of the free space).
const LEASE_BUDGET: u64 = 64 << 20;
/// Most space leases leave free besides the bytes reserved for posts (and at most a
/// quarter of the free space): what MetaDB and cleaning need meanwhile.
const LEASE_MARGIN: u64 = 256 << 20;

thread_local! {
    /// Set on a posting connection's thread: the changes it runs are not told to the
    /// kernel (it was told to forget the file when the lease began, and any call of
    /// the kernel's ends the lease before it runs; vfs::leases).
    static POSTING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks this thread as a posting connection's.
pub(crate) fn posting_thread() {
    set_posting(true);
}

/// Marks this thread as running posts (or not): what it was.
pub(crate) fn set_posting(on: bool) -> bool {
    POSTING.with(|p| p.replace(on))
}

/// The connection a request came on: who sent it, and its socket (a lock wait watches
/// it for a hang-up).
pub(crate) struct Caller<'a> {
    pub creds: &'a Creds,
    pub socket: BorrowedFd<'a>,
    /// The shared change page and the caller's attribute table, if the instance keeps
    /// them (stats it answers are filled in).
    pub cache: Option<(&'a ChangePage, &'a Table)>,
    /// The caller's identity's data table, if the instance keeps one (reads it
    /// answers are filled in: crate::datatable).
    pub data: Option<&'a DataTable>,
}

impl Caller<'_> {
    /// Keeps what a read of `ino` returned in the caller's data table, if the file's
    /// data count is still `count` (taken before the read, with no change in flight).
    fn keep(&self, ino: InodeNo, count: u64, offset: u64, data: &[u8], asked: usize) {
        if let (Some(table), Some((page, _))) = (self.data, self.cache) {
            if page.data_same(ino, count) {
                table.fill(page, ino, count, offset, data, asked);
            }
        }
    }
}

impl Session {
    pub fn new(
        token: u64,
        pid: i32,
        fs: Arc<FileSystem>,
        notify: Option<Notify>,
        page: Option<Arc<ChangePage>>,
    ) -> Session {
        Session {
            token,
            pid,
            fs,
            notify,
            handles: Mutex::new(HashMap::new()),
            next_handle: AtomicU64::new(1),
            page,
            posts: Posts::default(),
        }
    }

    /// The file a posted request changes (0 if its handle is unknown: its error is
    /// then reported by a sync).
    pub fn ino_of(&self, req: &Request<'_>) -> InodeNo {
        match *req {
            Request::SetAttr { ino, .. } => ino,
            Request::Write { handle, .. } | Request::CloseQuiet { handle } => {
                self.held(handle).map_or(InodeNo(0), |h| h.file().ino)
            }
            _ => InodeNo(0),
        }
    }

    /// Ends a lease: its change in flight, its hold and its reservation.
    pub fn end_lease(&self, l: Lease) {
        if let Some(page) = &self.page {
            page.data_changed(l.ino, false);
        }
        self.fs.leases().release(self.token);
        self.fs.leases().unreserve(l.budget);
    }

    /// Leases `handle` (open for writing on regular file `ino`) to the client if it
    /// can be: the budget granted (0: none). `created`: the open made the file (the
    /// kernel has nothing of it to forget).
    fn grant(&self, handle: u64, ino: InodeNo, created: bool) -> u64 {
        if !self.posts.has_channel() {
            return 0;
        }
        let leases = self.fs.leases();
        let free = self.fs.room_left();
        let budget = LEASE_BUDGET.min(free / 16);
        if budget == 0 || !leases.reserve(budget, free, LEASE_MARGIN.min(free / 4)) {
            return 0;
        }
        let mark = leases.kernel_calls();
        if !created {
            self.tell(Change::Data { ino: ino.0 });
        }
        if !leases.try_hold(mark, self.token) {
            leases.unreserve(budget);
            return 0;
        }
        if let Some(page) = &self.page {
            page.data_changed(ino, true);
        }
        let lease = Lease { ino, budget };
        if !self.posts.lease(handle, lease) {
            self.end_lease(lease);
            return 0;
        }
        budget
    }

    fn held(&self, handle: u64) -> Result<Arc<Held>> {
        self.handles
            .lock()
            .expect("handles lock")
            .get(&handle)
            .cloned()
            .ok_or(Errno(libc::EBADF))
    }

    fn readable(&self, handle: u64) -> Result<Arc<Held>> {
        let h = self.held(handle)?;
        if !h.file().read {
            return Err(Errno(libc::EBADF));
        }
        Ok(h)
    }

    fn writable(&self, handle: u64) -> Result<Arc<Held>> {
        let h = self.held(handle)?;
        if !h.file().write {
            return Err(Errno(libc::EBADF));
        }
        Ok(h)
    }

    fn tell(&self, c: Change<'_>) {
        if POSTING.with(std::cell::Cell::get) {
            return;
        }
        if let Some(n) = &self.notify {
            (n.0)(c);
        }
    }

    /// A name in `parent` changed, and with it the directory's attributes.
    fn tell_named(&self, parent: InodeNo, name: &[u8]) {
        self.tell(Change::Entry {
            parent: parent.0,
            name,
        });
        self.tell(Change::Attrs { ino: parent.0 });
    }

    fn table(&self, space: LockSpace) -> &LockTable {
        match space {
            LockSpace::Record => self.fs.record_locks(),
            LockSpace::Flock => self.fs.flocks(),
        }
    }

    fn owner(&self, h: &Held, description: bool) -> LockOwner {
        if description {
            h.file().owner
        } else {
            LockOwner::Process(self.pid)
        }
    }

    /// Runs `req` as `caller`; the reply's payload goes to `w`.
    pub fn run(&self, caller: &Caller<'_>, req: Request<'_>, w: &mut Writer) -> Result<()> {
        // Marked from before its first effect to after its last (vfs::changes).
        let _change = req.changes().then(|| self.fs.changes().begin());
        let cx = caller.creds;
        let fs = &*self.fs;
        match req {
            Request::Hello { .. } => return Err(Errno(libc::EPROTO)),
            // Name answers carry the change count taken before looking (if quiet):
            // the client keeps them while it stays (crate::namecache).
            Request::Resolve {
                start,
                follow,
                path,
            } => {
                let count = caller.cache.and_then(|(page, _)| page.quiet());
                let ino = fs.resolve_at(cx, start, path, follow).map_err(e)?;
                w.opt_u64(count).u64(ino.0);
            }
            Request::ResolveParent { start, path } => {
                let count = caller.cache.and_then(|(page, _)| page.quiet());
                let (dir, name) = fs.resolve_parent_at(cx, start, path).map_err(e)?;
                w.opt_u64(count).u64(dir.0).bytes(name);
            }
            Request::Lookup { dir, name } => {
                let count = caller.cache.and_then(|(page, _)| page.quiet());
                let ino = fs.lookup_ino(cx, dir, name).map_err(e)?;
                w.opt_u64(count).u64(ino.0);
            }
            Request::Stat { ino } => {
                let quiet = caller.cache.and_then(|(page, _)| page.quiet());
                let m = fs.stat_ino(ino).map_err(e)?;
                if let (Some(q), Some((_, table))) = (quiet, caller.cache) {
                    table.fill(Key::Inode(ino), q, &m);
                }
                proto::put_metadata(w, &m);
            }
            Request::StatAt {
                start,
                follow,
                path,
            } => {
                let quiet = caller.cache.and_then(|(page, _)| page.quiet());
                let ino = fs.resolve_at(cx, start, path, follow).map_err(e)?;
                let m = fs.stat_ino(ino).map_err(e)?;
                if let (Some(q), Some((_, table))) = (quiet, caller.cache) {
                    let key = Key::Path {
                        start,
                        path,
                        follow,
                    };
                    table.fill(key, q, &m);
                }
                proto::put_metadata(w, &m);
            }
            Request::Access { ino, mask } => {
                let count = caller.cache.and_then(|(page, _)| page.quiet());
                fs.access(cx, ino, mask).map_err(e)?;
                w.opt_u64(count);
            }
            Request::Open {
                start,
                flags,
                mode,
                prefetch,
                path,
            } => self.open(caller, start, (flags, mode, prefetch), path, w)?,
            Request::Close { handle } | Request::CloseQuiet { handle } => {
                let gone = self.handles.lock().expect("handles lock").remove(&handle);
                gone.ok_or(Errno(libc::EBADF))?;
                if let Some(l) = self.posts.unlease(handle) {
                    self.end_lease(l);
                }
            }
            req => return self.run_names(caller, req, w),
        }
        Ok(())
    }

    /// The path forms of Create, Remove and Rename: their parents resolved here, then
    /// run as the name forms.
    fn run_paths(&self, caller: &Caller<'_>, req: Request<'_>, w: &mut Writer) -> Result<()> {
        let (cx, fs) = (caller.creds, &*self.fs);
        match req {
            Request::CreateAt {
                start,
                kind,
                perm,
                path,
                target,
            } => {
                let (parent, name) = fs.create_parent_at(cx, start, path).map_err(e)?;
                let req = Request::Create {
                    parent,
                    kind,
                    perm,
                    name,
                    target,
                };
                self.run_names(caller, req, w)
            }
            Request::RemoveAt { start, dir, path } => {
                let (parent, name) = fs.resolve_parent_at(cx, start, path).map_err(e)?;
                let req = Request::Remove { parent, dir, name };
                self.run_names(caller, req, w)
            }
            Request::RenameAt {
                from,
                from_path,
                to,
                to_path,
                mode,
            } => {
                let (from, from_name) = fs.resolve_parent_at(cx, from, from_path).map_err(e)?;
                let (to, to_name) = fs.resolve_parent_at(cx, to, to_path).map_err(e)?;
                let req = Request::Rename {
                    from,
                    from_name,
                    to,
                    to_name,
                    mode,
                };
                self.run_names(caller, req, w)
            }
            _ => Err(Errno(libc::EINVAL)),
        }
    }

    /// The calls that change names.
    fn run_names(&self, caller: &Caller<'_>, req: Request<'_>, w: &mut Writer) -> Result<()> {
        let (cx, fs) = (caller.creds, &*self.fs);
        match req {
            req @ (Request::CreateAt { .. }
            | Request::RemoveAt { .. }
            | Request::RenameAt { .. }) => return self.run_paths(caller, req, w),
            Request::Create {
                parent,
                kind,
                perm,
                name,
                target,
            } => {
                let ino = fs.create(cx, parent, name, kind, perm, target).map_err(e)?;
                self.tell_named(parent, name);
                w.u64(ino.0);
            }
            Request::Mknod {
                parent,
                kind,
                perm,
                dev,
                name,
            } => {
                let ino = fs.mknod(cx, parent, name, kind, perm, dev).map_err(e)?;
                self.tell_named(parent, name);
                w.u64(ino.0);
            }
            Request::Remove { parent, dir, name } => {
                let child = fs.lookup_ino(cx, parent, name).ok();
                fs.remove(cx, parent, name, dir).map_err(e)?;
                self.tell_named(parent, name);
                if let Some(c) = child {
                    self.tell(Change::Attrs { ino: c.0 });
                }
            }
            Request::Rename {
                from,
                from_name,
                to,
                to_name,
                mode,
            } => {
                let moved = fs.lookup_ino(cx, from, from_name).ok();
                fs.rename(cx, from, from_name, to, to_name, mode)
                    .map_err(e)?;
                for (dir, name) in [(from, from_name), (to, to_name)] {
                    self.tell_named(dir, name);
                }
                if let Some(m) = moved {
                    self.tell(Change::Attrs { ino: m.0 });
                }
            }
            Request::Link { ino, parent, name } => {
                fs.link(cx, ino, parent, name).map_err(e)?;
                self.tell_named(parent, name);
                self.tell(Change::Attrs { ino: ino.0 });
            }
            Request::Readlink { ino } => {
                w.bytes(&fs.readlink_ino(ino).map_err(e)?);
            }
            req => return self.run_attrs(caller, req, w),
        }
        Ok(())
    }

    /// The calls on attributes and extended attributes, and statfs.
    fn run_attrs(&self, caller: &Caller<'_>, req: Request<'_>, w: &mut Writer) -> Result<()> {
        let (cx, fs) = (caller.creds, &*self.fs);
        match req {
            Request::SetAttr { ino, changes } => {
                fs.set_attr(cx, ino, &changes).map_err(e)?;
                self.tell(Change::Attrs { ino: ino.0 });
            }
            Request::TruncateIno { ino, size } => {
                posix::backend::Backend::truncate_ino(fs, cx, ino, size)?;
                self.tell(Change::Data { ino: ino.0 });
            }
            Request::SetXattr {
                ino,
                mode,
                name,
                value,
            } => {
                fs.set_xattr_ino(cx, ino, name, value, mode).map_err(e)?;
                self.tell(Change::Attrs { ino: ino.0 });
            }
            Request::GetXattr { ino, name } => {
                w.bytes(&fs.get_xattr_ino(cx, ino, name).map_err(e)?);
            }
            Request::ListXattr { ino } => {
                let names = fs.list_xattr_ino(cx, ino).map_err(e)?;
                w.u32(names.len() as u32);
                for n in &names {
                    w.bytes(n);
                }
            }
            Request::RemoveXattr { ino, name } => {
                fs.remove_xattr_ino(cx, ino, name).map_err(e)?;
                self.tell(Change::Attrs { ino: ino.0 });
            }
            Request::Readdir { dir, max, after } => {
                let count = caller.cache.and_then(|(page, _)| page.quiet());
                let page = fs.readdir(cx, dir, after, max as usize).map_err(e)?;
                w.opt_u64(count).u32(page.len() as u32);
                for d in &page {
                    w.u64(d.ino).bytes(&d.name);
                    proto::put_kind(w, d.kind);
                }
            }
            Request::Statfs => {
                let s = fs.statfs();
                w.u32(s.block_size)
                    .u64(s.blocks)
                    .u64(s.blocks_free)
                    .u64(s.files)
                    .u64(s.files_free)
                    .u32(s.name_max);
            }
            req => return self.run_on_handle(caller, req, w),
        }
        Ok(())
    }

    /// The calls that name a handle.
    fn run_on_handle(&self, caller: &Caller<'_>, req: Request<'_>, w: &mut Writer) -> Result<()> {
        let fs = &*self.fs;
        match req {
            Request::Read {
                handle,
                offset,
                len,
            } => {
                let h = self.readable(handle)?;
                // Taken before the read: a change after it moves the count.
                let count = caller
                    .cache
                    .and_then(|(page, _)| page.data_quiet(h.file().ino));
                w.opt_u64(count);
                let at = w.reserve(len as usize);
                let n = fs
                    .read_open(local(h.file())?, offset, w.reserved(at))
                    .map_err(e)?;
                if let Some(c) = count {
                    caller.keep(h.file().ino, c, offset, &w.reserved(at)[..n], len as usize);
                }
                w.truncate_reserved(at, n);
            }
            Request::Write {
                handle,
                offset,
                data,
            } => {
                let h = self.writable(handle)?;
                let n = fs.write_open(local(h.file())?, offset, data).map_err(e)?;
                self.tell(Change::Data {
                    ino: h.file().ino.0,
                });
                w.u64(n as u64);
            }
            Request::Append { handle, data } => {
                let h = self.writable(handle)?;
                let (at, n) = fs.append_open(local(h.file())?, data).map_err(e)?;
                self.tell(Change::Data {
                    ino: h.file().ino.0,
                });
                w.u64(at).u64(n as u64);
            }
            Request::Truncate { handle, size } => {
                let h = self.writable(handle)?;
                fs.truncate(h.file().ino, size).map_err(e)?;
                self.tell(Change::Data {
                    ino: h.file().ino.0,
                });
            }
            Request::Fallocate {
                handle,
                mode,
                offset,
                len,
            } => {
                let h = self.writable(handle)?;
                let op = vfs::Fallocate::from_mode(mode).map_err(e)?;
                fs.fallocate(h.file().ino, op, offset, len).map_err(e)?;
                self.tell(Change::Data {
                    ino: h.file().ino.0,
                });
            }
            Request::SeekData { handle, offset } => {
                w.u64(
                    fs.seek_data(self.held(handle)?.file().ino, offset)
                        .map_err(e)?,
                );
            }
            Request::SeekHole { handle, offset } => {
                w.u64(
                    fs.seek_hole(self.held(handle)?.file().ino, offset)
                        .map_err(e)?,
                );
            }
            // A posted request's failure is reported here, once (as the kernel
            // reports a failed write-back).
            Request::Fsync { handle, data_only } => {
                let ino = self.held(handle)?.file().ino;
                fs.fsync_ino(ino, data_only).map_err(e)?;
                if let Some(err) = self.posts.take_error(ino) {
                    return Err(Errno(err));
                }
            }
            Request::Sync => {
                fs.sync().map_err(e)?;
                if let Some(err) = self.posts.take_any_error() {
                    return Err(Errno(err));
                }
            }
            _ => return self.run_locks(caller, req, w),
        }
        Ok(())
    }

    /// The lock calls.
    fn run_locks(&self, caller: &Caller<'_>, req: Request<'_>, w: &mut Writer) -> Result<()> {
        match req {
            Request::LockSet {
                handle,
                space,
                start,
                end,
                kind,
                description,
                wait,
            } => {
                // A record lock needs the access it locks for; a flock does not.
                let h = match (space, kind) {
                    (LockSpace::Record, Some(vfs::locks::LockKind::Read)) => {
                        self.readable(handle)?
                    }
                    (LockSpace::Record, Some(vfs::locks::LockKind::Write)) => {
                        self.writable(handle)?
                    }
                    _ => self.held(handle)?,
                };
                let owner = self.owner(&h, description);
                self.lock(caller, space, h.file().ino, (start, end), kind, owner, wait)?;
            }
            Request::LockGet {
                handle,
                space,
                start,
                end,
                kind,
                description,
            } => {
                let h = self.held(handle)?;
                let owner = self.owner(&h, description);
                match self
                    .table(space)
                    .conflicting(h.file().ino, (start, end), kind, owner)
                {
                    None => {
                        w.u8(0);
                    }
                    Some(l) => {
                        w.u8(proto::lock_code(Some(l.kind)))
                            .u64(l.start)
                            .opt_u64(l.end)
                            .i32(l.pid);
                    }
                }
            }
            Request::LockRelease { ino, space } => {
                self.table(space).release(ino, LockOwner::Process(self.pid));
            }
            _ => return Err(Errno(libc::EPROTO)),
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn lock(
        &self,
        caller: &Caller<'_>,
        space: LockSpace,
        ino: InodeNo,
        span: (u64, Option<u64>),
        kind: Option<vfs::locks::LockKind>,
        owner: LockOwner,
        wait: bool,
    ) -> Result<()> {
        let table = self.table(space);
        let first = table.set_waiting(ino, span, kind, owner, self.pid, Wait::No);
        match first {
            Err(VfsError::WouldBlock(_)) if wait => {}
            other => return other.map_err(e),
        }
        // A wait ends when the lock is free, or when the client hangs up (it died or
        // gave up): a watcher cancels it then, so a dead client never takes a lock.
        let cancel = WaitCancel::default();
        let done = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| watch_hangup(caller.socket, &done, || table.cancel(&cancel)));
            let r = table.set_waiting(ino, span, kind, owner, self.pid, Wait::Cancellable(&cancel));
            done.store(true, Ordering::Release);
            r.map_err(e)
        })
    }

    fn open(
        &self,
        caller: &Caller<'_>,
        start: InodeNo,
        (flags, mode, prefetch): (i32, u32, u32),
        path: &[u8],
        w: &mut Writer,
    ) -> Result<()> {
        // An open that changes nothing fills the table with the file's attributes, so
        // the fstat programs make next (git before it maps an object, stdio before it
        // reads) needs no request. The count is taken before looking.
        let quiet = caller.cache.and_then(|(page, _)| page.quiet());
        let found = open_in(&self.fs, caller.creds, start, path, flags, mode)?;
        let mut size = None;
        let table = caller.cache.map(|(_, t)| t).zip(quiet);
        if table.is_some() || prefetch > 0 {
            if let Ok(m) = self.fs.stat_ino(found.ino) {
                if let Some((table, q)) = table {
                    table.fill(Key::Inode(found.ino), q, &m);
                }
                size = Some(m.size);
            }
        }
        if let Some((parent, name)) = &found.created {
            self.tell_named(*parent, name);
        }
        if flags & libc::O_TRUNC != 0 {
            self.tell(Change::Data { ino: found.ino.0 });
        }
        w.u64(found.ino.0);
        proto::put_kind(w, found.kind);
        match found.file {
            None => {
                w.u64(0).u8(0).u8(0).u64(0).u32(u32::MAX);
            }
            Some(file) => {
                let (read, write) = (file.read, file.write);
                let handle = self.next_handle.fetch_add(1, Ordering::Relaxed);
                let held = Arc::new(Held {
                    fs: self.fs.clone(),
                    file: Some(file),
                });
                self.handles
                    .lock()
                    .expect("handles lock")
                    .insert(handle, held);
                let budget = if write && found.kind == vfs::Kind::File {
                    self.grant(handle, found.ino, found.created.is_some())
                } else {
                    0
                };
                let owner = if budget > 0 {
                    self.fs.stat_ino(found.ino).map_or(u32::MAX, |m| m.uid)
                } else {
                    u32::MAX
                };
                w.u64(handle)
                    .u8(read.into())
                    .u8(write.into())
                    .u64(budget)
                    .u32(owner);
                // A small file opened to be read comes with its bytes: the read that
                // follows (or the mapping) needs no request.
                let small = size.is_some_and(|s| s <= u64::from(prefetch));
                if read && !write && small && found.kind == vfs::Kind::File {
                    return self.prefetch(caller, handle, found.ino, prefetch, w);
                }
            }
        }
        w.opt_u64(None);
        Ok(())
    }

    /// The end of an open's reply: all the bytes of `ino`, opened as `handle`, with its
    /// data count taken before the read (none if a change of it is in flight: then no
    /// bytes either).
    fn prefetch(
        &self,
        caller: &Caller<'_>,
        handle: u64,
        ino: InodeNo,
        prefetch: u32,
        w: &mut Writer,
    ) -> Result<()> {
        let count = caller.cache.and_then(|(page, _)| page.data_quiet(ino));
        let mark = w.reserve(0);
        w.opt_u64(count);
        if count.is_some() {
            let h = self.readable(handle)?;
            let at = w.reserve(prefetch as usize);
            match self.fs.read_open(local(h.file())?, 0, w.reserved(at)) {
                Ok(n) => {
                    if let Some(c) = count {
                        let data = &w.reserved(at)[..n];
                        caller.keep(ino, c, 0, data, prefetch as usize);
                    }
                    w.truncate_reserved(at, n);
                }
                // The open stands (its handle is the client's): no bytes, and the
                // first read asks.
                Err(_) => {
                    w.truncate_reserved(mark, 0);
                    w.opt_u64(None);
                }
            }
        }
        Ok(())
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let handles = std::mem::take(self.handles.get_mut().expect("handles lock"));
        for h in handles.values() {
            let ino = h.file().ino;
            self.fs
                .record_locks()
                .release(ino, LockOwner::Process(self.pid));
        }
        // Each handle closes (its description's locks with it) as its Arc goes.
        drop(handles);
    }
}

/// Polls `socket` until `done` or a hang-up, which runs `cancel`.
fn watch_hangup(socket: BorrowedFd<'_>, done: &AtomicBool, cancel: impl Fn()) {
    while !done.load(Ordering::Acquire) {
        let mut p = libc::pollfd {
            fd: socket.as_raw_fd(),
            events: libc::POLLRDHUP,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut p, 1, 50) };
        if n > 0 && p.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0 {
            cancel();
            return;
        }
    }
}
