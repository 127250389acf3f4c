//! The attached side: [`Remote`], a posix [`Backend`] whose every call is a request to
//! the instance (docs/DESIGN.md §12.5).
//!
//! Connections are pooled: a call takes one (or connects), sends its request, reads
//! the reply, and gives it back, so threads never share a connection mid-call. The
//! first connection starts the process's session; later ones join it with its token.
//!
//! Invariants:
//! - A connection made before a fork is never used after it by the child
//!   ([`Remote::forked`] starts a new session; pooled connections carry a generation),
//!   nor one made before a change of identity ([`Backend::set_creds`]): the instance
//!   takes identity from the kernel at connect.
//! - The instance must be root's or this user's (SO_PEERCRED of the server), so a
//!   stale socket another user bound cannot impersonate it.
//! - A broken connection fails the call with ENOTCONN and is dropped; nothing is
//!   retried (a request may have run).

mod posting;
mod reads;
mod shared;

use crate::datatable::DataTable;
use crate::filecache::FileCache;
use crate::forklock::ForkLock;
use crate::mailbox::Conn;
use crate::namecache::{Answer, NameCache, Question};
use crate::proto::{self, Request, READDIR_MAX};
use crate::table::{ChangePage, Key, Table};
use crate::wire::{Reader, Writer};
use crate::IO_BYTES_MAX;
use format::InodeNo;
use posix::backend::{Backend, Found, LockSpace, OpenFile, Reference};
use posix::{Errno, Result};
use posting::Poster;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use vfs::locks::{LockKind, LockOwner, RangeLock};
use vfs::{AttrChanges, Creds, DirEntry, Kind, Metadata, RenameMode, StatFs, XattrMode};

fn notconn() -> Errno {
    Errno(libc::ENOTCONN)
}

/// Pooled connections, under a lock the fork handlers hold across a fork
/// ([`Remote::before_fork`]), so a child never inherits it mid-change.
type Pool = ForkLock<Vec<(u64, Conn)>>;

/// How requests travel to the instance (`crate::mailbox`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// A mailbox guarded by a protection key where the machine has keys, else the
    /// socket only (said once on standard error).
    Auto,
    /// The socket only (AUGEFS_MAILBOX=off).
    Socket,
    /// A mailbox even without protection keys (AUGEFS_MAILBOX=unprotected): a stray
    /// store of the application can then garble its own requests, never the instance
    /// or another client (the instance copies and checks every message). Keys are
    /// still used where the machine has them.
    Unprotected,
}

impl Transport {
    /// The transport AUGEFS_MAILBOX asks for (auto, off or unprotected).
    pub fn from_env() -> Transport {
        match std::env::var("AUGEFS_MAILBOX").as_deref() {
            Ok("off") => Transport::Socket,
            Ok("unprotected") => Transport::Unprotected,
            _ => Transport::Auto,
        }
    }
}

/// A process's attachment to an instance.
#[derive(Debug)]
pub struct Remote {
    path: PathBuf,
    transport: Transport,
    /// The session's token (0: none yet).
    token: AtomicU64,
    /// Bumped by a fork (in the child) and a change of identity: older connections
    /// are closed instead of reused.
    generation: AtomicU64,
    pool: Pool,
    /// The session's first connection, kept open and idle: the session lives as long
    /// as it does (this process), whatever the pool holds.
    anchor: Pool,
    /// The instance's change page and this identity's attribute table, mapped
    /// read-only: a stat they answer needs no request (`crate::table`).
    cache: OnceLock<Option<(ChangePage, Table)>>,
    /// This identity's data table, mapped read-only: a read of pages another process
    /// of the identity read needs no request (`crate::datatable`).
    data: OnceLock<Option<DataTable>>,
    /// Set when this process changed identity: the table is another identity's now.
    cache_off: AtomicBool,
    /// File data this process read, kept while the file's data count stays
    /// ([`crate::filecache`]).
    files: FileCache,
    /// Names this process looked up and directory pages it read, kept while nothing
    /// changes ([`crate::namecache`]).
    names: NameCache,
    /// Who this process was when its connections were made.
    identity: std::sync::Mutex<Creds>,
    /// Inodes on which this process set record locks: a close of another file asks the
    /// instance to release nothing.
    locked: std::sync::Mutex<std::collections::HashSet<u64>>,
    /// Posted requests: the posting connection and the leases (`crate::posting`).
    poster: Poster,
}

impl Remote {
    /// Attaches to the instance at socket `path` (one connection, which starts the
    /// session).
    pub fn connect(path: &Path) -> Result<Remote> {
        Self::connect_with(path, Transport::from_env())
    }

    /// [`Remote::connect`] with the transport given.
    pub fn connect_with(path: &Path, transport: Transport) -> Result<Remote> {
        let r = Remote {
            path: path.to_path_buf(),
            transport,
            token: AtomicU64::new(0),
            generation: AtomicU64::new(0),
            pool: Pool::default(),
            anchor: Pool::default(),
            cache: OnceLock::new(),
            data: OnceLock::new(),
            cache_off: AtomicBool::new(false),
            files: FileCache::new(FileCache::budget_from_env()),
            names: NameCache::default(),
            identity: std::sync::Mutex::new(Creds::of_process()),
            locked: std::sync::Mutex::new(std::collections::HashSet::new()),
            poster: Poster::default(),
        };
        r.anchor()?;
        // AUGEFS_NO_SHARED_TABLE: every stat asks (for comparisons and diagnosis).
        let tables = std::env::var_os("AUGEFS_NO_SHARED_TABLE").is_none();
        let mut c = r.dial_plain()?;
        let (cache, data) = match tables.then(|| r.fetch_tables(&mut c.1)).flatten() {
            Some((page, table, data)) => (Some((page, table)), data),
            None => (None, None),
        };
        let _ = r.cache.set(cache);
        let _ = r.data.set(data);
        r.add_mailbox(&mut c.1);
        r.put(c);
        Ok(r)
    }

    /// Starts the session: its anchor connection (if there is none).
    fn anchor(&self) -> Result<()> {
        self.anchor.lock();
        // SAFETY: the anchor's lock is held.
        let slot = unsafe { self.anchor.held() };
        let r = if slot.is_empty() {
            self.dial_plain().map(|c| slot.push(c))
        } else {
            Ok(())
        };
        self.anchor.unlock();
        r
    }

    /// Waits until every request this process posted has run (a Barrier, then a stat
    /// of the root behind it), so that the kernel's mount of the instance serves what
    /// they did. Nothing is sent when nothing is outstanding.
    pub fn settle(&self) -> Result<()> {
        if self.poster.fence().is_none() {
            return Ok(());
        }
        self.call(
            &Request::Stat {
                ino: vfs::records::ROOT,
            },
            |_| Ok(()),
        )
    }

    /// The fork prepare handler: holds the pool so the child copies it unchanged.
    pub fn before_fork(&self) {
        self.anchor.lock();
        self.pool.lock();
        self.poster.before_fork();
        self.files.before_fork();
        self.names.before_fork();
    }

    /// The fork parent handler.
    pub fn after_fork_parent(&self) {
        self.names.after_fork();
        self.files.after_fork_parent();
        self.poster.after_fork_parent();
        self.pool.unlock();
        self.anchor.unlock();
    }

    /// The fork child handler: the parent's connections are the parent's; the child
    /// closes its copies and starts a session of its own at its next call.
    pub fn forked(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.token.store(0, Ordering::Release);
        // SAFETY: the prepare handler holds the locks for us; this is the only thread.
        let old = std::mem::take(unsafe { self.pool.held() });
        // SAFETY: as above.
        let anchor = std::mem::take(unsafe { self.anchor.held() });
        drop((old, anchor));
        self.poster.forked();
        self.files.forked();
        self.names.after_fork();
        self.pool.unlock();
        self.anchor.unlock();
    }

    /// A new connection of the session, with a mailbox if it can have one.
    fn dial(&self) -> Result<(u64, Conn)> {
        let mut c = self.dial_plain()?;
        self.add_mailbox(&mut c.1);
        Ok(c)
    }

    /// A new connection of the session (starting it), on the socket only.
    fn dial_plain(&self) -> Result<(u64, Conn)> {
        let generation = self.generation.load(Ordering::Acquire);
        let s = self.connect_socket()?;
        let token = self.token.load(Ordering::Acquire);
        let mut c = (generation, Conn::new(s));
        let hello = Request::Hello {
            token,
            version: proto::VERSION,
        };
        let got = self.exchange(&mut c.1, &hello, |r| r.u64())?;
        if token == 0 {
            let _ = self
                .token
                .compare_exchange(0, got, Ordering::AcqRel, Ordering::Acquire);
        }
        Ok(c)
    }

    /// A new connection to the instance, which must be root's or this user's, numbered
    /// out of the program's way ([`crate::CLIENT_FD_MIN`]).
    fn connect_socket(&self) -> Result<UnixStream> {
        let s = UnixStream::connect(&self.path).map_err(|_| notconn())?;
        let s = UnixStream::from(crate::high_fd(s.into()));
        let server = crate::peer::uid_of(s.as_fd()).map_err(|_| notconn())?;
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        if server != 0 && server != me {
            return Err(Errno(libc::EPERM));
        }
        Ok(s)
    }

    fn take(&self) -> Result<(u64, Conn)> {
        let generation = self.generation.load(Ordering::Acquire);
        loop {
            match self.pool.with(|p| p.pop()) {
                Some((g, s)) if g == generation => return Ok((g, s)),
                Some(_) => continue, // an old one: closed as it drops
                None => {
                    self.anchor()?;
                    return self.dial();
                }
            }
        }
    }

    fn put(&self, c: (u64, Conn)) {
        if c.0 == self.generation.load(Ordering::Acquire) {
            self.pool.with(|p| p.push(c));
        }
    }

    /// Sends `req` on `conn` and reads the reply's payload with `reply`.
    fn exchange<T>(
        &self,
        conn: &mut Conn,
        req: &Request<'_>,
        reply: impl FnOnce(&mut Reader<'_>) -> Result<T>,
    ) -> Result<T> {
        let mut w = Writer::new();
        req.encode(&mut w);
        let data = req.data();
        conn.send(w.finish(data.len()), data)
            .map_err(|_| notconn())?;
        let body = conn.recv().map_err(|_| notconn())?.ok_or_else(notconn)?;
        let mut r = Reader::new(body);
        match r.i32()? {
            0 => reply(&mut r),
            e => Err(Errno(e)),
        }
    }

    /// One request on a pooled connection (after this process's posts).
    fn call<T>(
        &self,
        req: &Request<'_>,
        reply: impl FnOnce(&mut Reader<'_>) -> Result<T>,
    ) -> Result<T> {
        let mut c = self.take()?;
        let fence = self.barrier(&mut c.1)?;
        let r = self.exchange(&mut c.1, req, reply);
        if !matches!(r, Err(Errno(libc::ENOTCONN))) {
            if let Some(n) = fence {
                self.poster.fenced(n);
            }
            self.put(c);
        }
        r
    }

    fn unit(&self, req: &Request<'_>) -> Result<()> {
        self.call(req, |_| Ok(()))
    }

    fn ino(&self, req: &Request<'_>) -> Result<InodeNo> {
        self.call(req, |r| Ok(InodeNo(r.u64()?)))
    }

    /// A name question: the answer kept, if the change count has not moved since, else
    /// asked (`read` reads the reply's answer after its count) and kept.
    fn ask_names<T>(
        &self,
        q: Question,
        req: &Request<'_>,
        from_kept: impl FnOnce(Answer) -> Option<T>,
        read: impl FnOnce(&mut Reader<'_>) -> Result<T>,
        keep: impl FnOnce(&T) -> Answer,
    ) -> Result<T> {
        let page = self.cache().map(|(page, _)| page);
        if let Some(now) = page.and_then(ChangePage::quiet) {
            if let Some(t) = self.names.get(now, &q).and_then(from_kept) {
                return Ok(t);
            }
        }
        self.call(req, |r| {
            let count = r.opt_u64()?;
            let t = read(r)?;
            if let (Some(c), Some(_)) = (count, page) {
                self.names.put(c, q, keep(&t));
            }
            Ok(t)
        })
    }

    fn handle(f: &OpenFile) -> Result<u64> {
        match f.reference {
            Reference::Remote(h) => Ok(h),
            Reference::Local(_) => Err(Errno(libc::EBADF)),
        }
    }
}

impl Backend for Remote {
    fn resolve(&self, _cx: &Creds, start: InodeNo, path: &[u8], follow: bool) -> Result<InodeNo> {
        let q = Question::Resolve {
            start: start.0,
            path: path.to_vec(),
            follow,
        };
        let req = Request::Resolve {
            start,
            follow,
            path,
        };
        self.ask_names(
            q,
            &req,
            Answer::ino,
            |r| Ok(InodeNo(r.u64()?)),
            |i| Answer::Ino(i.0),
        )
    }

    fn resolve_parent(
        &self,
        _cx: &Creds,
        start: InodeNo,
        path: &[u8],
    ) -> Result<(InodeNo, Vec<u8>)> {
        let q = Question::ResolveParent {
            start: start.0,
            path: path.to_vec(),
        };
        let from_kept = |a| match a {
            Answer::Parent(dir, name) => Some((InodeNo(dir), name)),
            _ => None,
        };
        let read = |r: &mut Reader<'_>| {
            Ok((
                InodeNo(r.u64()?),
                r.bytes(255, libc::ENAMETOOLONG)?.to_vec(),
            ))
        };
        let keep = |(dir, name): &(InodeNo, Vec<u8>)| Answer::Parent(dir.0, name.clone());
        let req = Request::ResolveParent { start, path };
        self.ask_names(q, &req, from_kept, read, keep)
    }

    fn lookup(&self, _cx: &Creds, dir: InodeNo, name: &[u8]) -> Result<InodeNo> {
        let q = Question::Lookup {
            dir: dir.0,
            name: name.to_vec(),
        };
        let req = Request::Lookup { dir, name };
        self.ask_names(
            q,
            &req,
            Answer::ino,
            |r| Ok(InodeNo(r.u64()?)),
            |i| Answer::Ino(i.0),
        )
    }

    fn stat(&self, ino: InodeNo) -> Result<Metadata> {
        if let Some((page, table)) = self.cache() {
            if let Some(m) = table.get(page, Key::Inode(ino)) {
                return Ok(m);
            }
        }
        self.call(&Request::Stat { ino }, proto::get_metadata)
    }

    fn stat_at(&self, _cx: &Creds, start: InodeNo, path: &[u8], follow: bool) -> Result<Metadata> {
        if let Some((page, table)) = self.cache() {
            let key = Key::Path {
                start,
                path,
                follow,
            };
            if let Some(m) = table.get(page, key) {
                return Ok(m);
            }
        }
        self.call(
            &Request::StatAt {
                start,
                follow,
                path,
            },
            proto::get_metadata,
        )
    }

    fn access(&self, _cx: &Creds, ino: InodeNo, mask: u32) -> Result<()> {
        let req = Request::Access { ino, mask };
        // A leased file's mode may have changed by a post not run yet (crate::posts).
        if let Some((page, _)) = self.cache() {
            if page.data_quiet(ino).is_none() {
                return self.call(&req, |r| r.opt_u64().map(drop));
            }
        }
        let q = Question::Access { ino: ino.0, mask };
        let granted = |a| matches!(a, Answer::Granted).then_some(());
        self.ask_names(q, &req, granted, |_| Ok(()), |()| Answer::Granted)
    }

    fn open(
        &self,
        _cx: &Creds,
        start: InodeNo,
        path: &[u8],
        flags: i32,
        mode: u32,
    ) -> Result<Found> {
        if flags & libc::O_ACCMODE != libc::O_RDONLY {
            self.open_posts();
        }
        // A small file opened to be read comes with its bytes, kept as a read's (stdio,
        // git and compilers read small files whole at once).
        let prefetch = match self.cache() {
            Some(_) if self.files.enabled() && flags & libc::O_ACCMODE == libc::O_RDONLY => {
                proto::PREFETCH_MAX
            }
            _ => 0,
        };
        self.call(
            &Request::Open {
                start,
                flags,
                mode,
                prefetch,
                path,
            },
            |r| {
                let ino = InodeNo(r.u64()?);
                let kind = proto::get_kind(r)?;
                let (handle, read, write) = (r.u64()?, r.bool()?, r.bool()?);
                let (budget, owner) = (r.u64()?, r.u32()?);
                if handle != 0 {
                    self.poster.leased(handle, ino, budget, owner);
                }
                let file = (handle != 0).then_some(OpenFile {
                    ino,
                    owner: LockOwner::Description(handle),
                    read,
                    write,
                    reference: Reference::Remote(handle),
                });
                if read && handle != 0 {
                    self.files.opened(ino);
                }
                if let Some(count) = r.opt_u64()? {
                    // The whole file: fewer bytes than asked for means its end.
                    let data = r.rest();
                    self.files.fill(ino, count, 0, data, prefetch as usize);
                }
                Ok(Found {
                    ino,
                    kind,
                    file,
                    created: None,
                })
            },
        )
    }

    fn close(&self, file: OpenFile) -> Result<()> {
        // Nothing to wait for: a close reports no error here (writes were acknowledged
        // when made), and the connection runs its next request after it.
        let handle = Self::handle(&file)?;
        let req = Request::CloseQuiet { handle };
        if file.read {
            self.files.closed(file.ino);
        }
        if self.poster.unlease(handle) && self.post(&req, &[]) {
            return Ok(());
        }
        let mut c = self.take()?;
        self.barrier(&mut c.1)?;
        let mut w = Writer::new();
        req.encode(&mut w);
        c.1.send(w.finish(0), &[]).map_err(|_| notconn())?;
        self.put(c);
        Ok(())
    }

    fn create(
        &self,
        _cx: &Creds,
        parent: InodeNo,
        name: &[u8],
        kind: Kind,
        perm: u32,
        target: Option<&[u8]>,
    ) -> Result<InodeNo> {
        self.ino(&Request::Create {
            parent,
            kind,
            perm,
            name,
            target,
        })
    }

    fn mknod(
        &self,
        _cx: &Creds,
        parent: InodeNo,
        name: &[u8],
        kind: Kind,
        perm: u32,
        dev: u64,
    ) -> Result<InodeNo> {
        self.ino(&Request::Mknod {
            parent,
            kind,
            perm,
            dev,
            name,
        })
    }

    fn remove(&self, _cx: &Creds, parent: InodeNo, name: &[u8], dir: bool) -> Result<()> {
        self.unit(&Request::Remove { parent, dir, name })
    }

    fn create_at(
        &self,
        _cx: &Creds,
        start: InodeNo,
        path: &[u8],
        kind: Kind,
        perm: u32,
        target: Option<&[u8]>,
    ) -> Result<InodeNo> {
        self.ino(&Request::CreateAt {
            start,
            kind,
            perm,
            path,
            target,
        })
    }

    fn remove_at(&self, _cx: &Creds, start: InodeNo, path: &[u8], dir: bool) -> Result<()> {
        self.unit(&Request::RemoveAt { start, dir, path })
    }

    fn rename_at(
        &self,
        _cx: &Creds,
        from: (InodeNo, &[u8]),
        to: (InodeNo, &[u8]),
        mode: RenameMode,
    ) -> Result<()> {
        self.unit(&Request::RenameAt {
            from: from.0,
            from_path: from.1,
            to: to.0,
            to_path: to.1,
            mode,
        })
    }

    fn rename(
        &self,
        _cx: &Creds,
        from: (InodeNo, &[u8]),
        to: (InodeNo, &[u8]),
        mode: RenameMode,
    ) -> Result<()> {
        self.unit(&Request::Rename {
            from: from.0,
            from_name: from.1,
            to: to.0,
            to_name: to.1,
            mode,
        })
    }

    fn link(&self, _cx: &Creds, ino: InodeNo, parent: InodeNo, name: &[u8]) -> Result<()> {
        self.unit(&Request::Link { ino, parent, name })
    }

    fn readlink(&self, ino: InodeNo) -> Result<Vec<u8>> {
        self.call(&Request::Readlink { ino }, |r| {
            Ok(r.bytes(usize::MAX, libc::E2BIG)?.to_vec())
        })
    }

    fn set_attr(&self, cx: &Creds, ino: InodeNo, changes: &AttrChanges) -> Result<()> {
        let req = Request::SetAttr {
            ino,
            changes: *changes,
        };
        if self.poster.may_set_attr(cx, ino, changes) && self.post(&req, &[]) {
            return Ok(());
        }
        self.unit(&req)
    }

    fn truncate_ino(&self, _cx: &Creds, ino: InodeNo, size: u64) -> Result<()> {
        self.unit(&Request::TruncateIno { ino, size })
    }

    fn set_xattr(
        &self,
        _cx: &Creds,
        ino: InodeNo,
        name: &[u8],
        value: &[u8],
        mode: XattrMode,
    ) -> Result<()> {
        self.unit(&Request::SetXattr {
            ino,
            mode,
            name,
            value,
        })
    }

    fn get_xattr(&self, _cx: &Creds, ino: InodeNo, name: &[u8]) -> Result<Vec<u8>> {
        self.call(&Request::GetXattr { ino, name }, |r| {
            Ok(r.bytes(usize::MAX, libc::E2BIG)?.to_vec())
        })
    }

    fn list_xattr(&self, _cx: &Creds, ino: InodeNo) -> Result<Vec<Vec<u8>>> {
        self.call(&Request::ListXattr { ino }, |r| {
            let n = r.u32()?;
            (0..n)
                .map(|_| Ok(r.bytes(usize::MAX, libc::E2BIG)?.to_vec()))
                .collect()
        })
    }

    fn remove_xattr(&self, _cx: &Creds, ino: InodeNo, name: &[u8]) -> Result<()> {
        self.unit(&Request::RemoveXattr { ino, name })
    }

    fn readdir(
        &self,
        _cx: &Creds,
        dir: InodeNo,
        after: Option<&[u8]>,
        max: usize,
    ) -> Result<Vec<DirEntry>> {
        let max = max.clamp(1, READDIR_MAX as usize) as u32;
        let q = Question::Readdir {
            dir: dir.0,
            after: after.map(<[u8]>::to_vec),
            max,
        };
        let from_kept = |a| match a {
            Answer::Entries(e) => Some(e),
            _ => None,
        };
        let read = |r: &mut Reader<'_>| {
            let n = r.u32()?;
            (0..n)
                .map(|_| {
                    let ino = r.u64()?;
                    let name = r.bytes(255, libc::ENAMETOOLONG)?.to_vec();
                    Ok(DirEntry {
                        name,
                        ino,
                        kind: proto::get_kind(r)?,
                    })
                })
                .collect()
        };
        let keep = |e: &Vec<DirEntry>| Answer::Entries(e.clone());
        self.ask_names(
            q,
            &Request::Readdir { dir, max, after },
            from_kept,
            read,
            keep,
        )
    }

    fn statfs(&self) -> Result<StatFs> {
        self.call(&Request::Statfs, |r| {
            Ok(StatFs {
                block_size: r.u32()?,
                blocks: r.u64()?,
                blocks_free: r.u64()?,
                files: r.u64()?,
                files_free: r.u64()?,
                name_max: r.u32()?,
            })
        })
    }

    fn read(&self, f: &OpenFile, offset: u64, buf: &mut [u8]) -> Result<usize> {
        self.read_at(f, offset, buf)
    }

    fn write(&self, f: &OpenFile, offset: u64, data: &[u8]) -> Result<usize> {
        let handle = Self::handle(f)?;
        let mut done = 0;
        for chunk in data.chunks(IO_BYTES_MAX) {
            let req = Request::Write {
                handle,
                offset: offset + done as u64,
                data: chunk,
            };
            if self.poster.may_write(handle, chunk.len()) && self.post(&req, chunk) {
                done += chunk.len();
                continue;
            }
            let n = self.call(&req, |r| Ok(r.u64()? as usize))?;
            done += n;
            if n < chunk.len() {
                break;
            }
        }
        Ok(done)
    }

    fn append(&self, f: &OpenFile, data: &[u8]) -> Result<(u64, usize)> {
        let handle = Self::handle(f)?;
        let mut first = None;
        let mut done = 0;
        for chunk in data.chunks(IO_BYTES_MAX) {
            let (at, n) = self.call(
                &Request::Append {
                    handle,
                    data: chunk,
                },
                |r| Ok((r.u64()?, r.u64()? as usize)),
            )?;
            first.get_or_insert(at);
            done += n;
        }
        Ok((first.unwrap_or(0), done))
    }

    fn truncate(&self, f: &OpenFile, size: u64) -> Result<()> {
        self.unit(&Request::Truncate {
            handle: Self::handle(f)?,
            size,
        })
    }

    fn fallocate(&self, f: &OpenFile, mode: i32, offset: u64, len: u64) -> Result<()> {
        self.unit(&Request::Fallocate {
            handle: Self::handle(f)?,
            mode,
            offset,
            len,
        })
    }

    fn seek_data(&self, f: &OpenFile, offset: u64) -> Result<u64> {
        self.call(
            &Request::SeekData {
                handle: Self::handle(f)?,
                offset,
            },
            |r| r.u64(),
        )
    }

    fn seek_hole(&self, f: &OpenFile, offset: u64) -> Result<u64> {
        self.call(
            &Request::SeekHole {
                handle: Self::handle(f)?,
                offset,
            },
            |r| r.u64(),
        )
    }

    fn fsync(&self, f: &OpenFile, data_only: bool) -> Result<()> {
        self.unit(&Request::Fsync {
            handle: Self::handle(f)?,
            data_only,
        })
    }

    fn sync(&self) -> Result<()> {
        self.unit(&Request::Sync)
    }

    fn lock_set(
        &self,
        f: &OpenFile,
        space: LockSpace,
        (start, end): (u64, Option<u64>),
        kind: Option<LockKind>,
        owner: LockOwner,
        _pid: i32,
        wait: bool,
    ) -> Result<()> {
        let description = matches!(owner, LockOwner::Description(_));
        if !description && space == LockSpace::Record && kind.is_some() {
            // Noted before the request: a close racing with it must not skip it.
            self.locked.lock().expect("locked lock").insert(f.ino.0);
        }
        self.unit(&Request::LockSet {
            handle: Self::handle(f)?,
            space,
            start,
            end,
            kind,
            description,
            wait,
        })
    }

    fn lock_conflicting(
        &self,
        f: &OpenFile,
        space: LockSpace,
        (start, end): (u64, Option<u64>),
        kind: LockKind,
        owner: LockOwner,
    ) -> Result<Option<RangeLock>> {
        let description = matches!(owner, LockOwner::Description(_));
        let req = Request::LockGet {
            handle: Self::handle(f)?,
            space,
            start,
            end,
            kind,
            description,
        };
        self.call(&req, |r| {
            let Some(kind) = proto::lock_of(r.u8()?)? else {
                return Ok(None);
            };
            let (start, end, pid) = (r.u64()?, r.opt_u64()?, r.i32()?);
            Ok(Some(RangeLock {
                start,
                end,
                kind,
                owner: LockOwner::Process(pid),
                pid,
            }))
        })
    }

    fn lock_release(&self, ino: InodeNo, space: LockSpace, _owner: LockOwner) {
        // Nothing to release where this process never set a record lock.
        if space == LockSpace::Record && !self.locked.lock().expect("locked lock").remove(&ino.0) {
            return;
        }
        // Only the process's own locks: the instance knows the process.
        let _ = self.unit(&Request::LockRelease { ino, space });
    }

    fn set_creds(&self, creds: Creds) {
        let same = {
            let was = self.identity.lock().expect("identity lock");
            was.uid == creds.uid && was.gid == creds.gid && was.groups() == creds.groups()
        };
        if same {
            return;
        }
        *self.identity.lock().expect("identity lock") = creds;
        self.cache_off.store(true, Ordering::Relaxed);
        // The old identity's answers and pages may be of files the new one may not
        // see or read.
        if let Some((_, table)) = self.cache.get().and_then(Option::as_ref) {
            table.revoke();
        }
        if let Some(d) = self.data.get().and_then(Option::as_ref) {
            d.revoke();
        }
        self.names.clear();
        // New connections carry the new identity (the kernel's, at connect); the
        // session (its handles) stays.
        self.generation.fetch_add(1, Ordering::AcqRel);
        let old = self.pool.with(std::mem::take);
        drop(old);
        self.poster.drop_channel();
    }
}
