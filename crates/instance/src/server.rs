//! The instance's side: a Unix socket accepting attached processes, one thread per
//! connection, from a pool that keeps threads for the next ones (`crate::workers`;
//! docs/DESIGN.md §12.5).
//!
//! A connection's first request is Hello: a new session, or another connection of a
//! session whose process (by the kernel's pid) is the caller. Then each frame is one
//! request, answered in order by a frame of status and payload.
//!
//! Invariants:
//! - A malformed request is answered with its errno and the connection goes on; a
//!   frame that cannot be framed (over [`crate::FRAME_BYTES_MAX`]) ends the connection.
//!   Neither disturbs another connection.
//! - A client that stops reading (hung) blocks only its own connection's thread.
//! - [`Instance::stop`] ends every connection and joins its thread, so no session
//!   holds the file system after it returns.

use crate::datatable::DataTable;
use crate::mailbox::{Conn, Mailbox};
use crate::peer::{self, Peer};
use crate::postring::PostRing;
use crate::posts::Drain;
use crate::proto::{op_name, Request};
use crate::session::{Caller as SessionCaller, Session};
use crate::table::{ChangePage, Table};
use crate::wire::Writer;
use crate::workers::Workers;
use crate::{Notify, CONNECTIONS_MAX};
use format::InodeNo;
use platform::reqstats::{Stats, ThreadStats};
use posix::Errno;
use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use vfs::changes::Event;
use vfs::leases::Caller;
use vfs::FileSystem;

/// What every connection thread shares.
#[derive(Debug)]
struct Shared {
    fs: Arc<FileSystem>,
    notify: Option<Notify>,
    sessions: Mutex<HashMap<u64, Weak<Session>>>,
    /// Live connections: a descriptor of each one's socket (to end them at stop).
    conns: Mutex<HashMap<u64, OwnedFd>>,
    /// The threads that serve them (`crate::workers`).
    workers: Arc<Workers>,
    stopping: AtomicBool,
    /// The change page clients read (None: no attribute tables, every stat asks).
    page: Option<Arc<ChangePage>>,
    /// One attribute table and data table per identity (uid, gid, groups).
    tables: Mutex<HashMap<(u32, u32, u64), Arc<Tables>>>,
    /// Slots of each identity's data table (0: none, every read that misses a
    /// process's own pages asks).
    data_slots: usize,
    /// Requests answered (diagnostics, tests).
    requests: std::sync::atomic::AtomicU64,
    /// Per opcode: requests, and posts (`augefs mount -o stats`).
    stats: Stats,
    posted: Stats,
}

/// What the instance shares with the clients of one identity.
#[derive(Debug)]
struct Tables {
    /// The identity they serve (uid, gid, groups).
    creds: vfs::Creds,
    attrs: Table,
    data: Option<DataTable>,
}

/// How an instance runs.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Time every request and post (the wall and CPU time of each, in the report
    /// [`Instance::stop`] returns).
    pub timing: bool,
    /// The most file bytes each identity's data table keeps (`crate::datatable`; 0:
    /// none).
    pub shared_pages: usize,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            timing: false,
            shared_pages: crate::datatable::default_bytes(),
        }
    }
}

impl Shared {
    /// The tables of `creds`' identity (made on first need).
    fn table(&self, creds: &vfs::Creds) -> Option<Arc<Tables>> {
        self.page.as_ref()?;
        let groups = creds
            .groups()
            .iter()
            .fold(0xcbf2_9ce4_8422_2325u64, |h, &g| {
                (h ^ u64::from(g)).wrapping_mul(0x100_0000_01b3)
            });
        let mut tables = self.tables.lock().expect("tables lock");
        if let Some(t) = tables.get(&(creds.uid, creds.gid, groups)) {
            return Some(t.clone());
        }
        // At most TABLES_MAX identities keep data: an idle one's (no process of it is
        // attached: only this map holds its tables) make room, else this one keeps
        // none and its reads ask.
        let with_data =
            |t: &HashMap<_, Arc<Tables>>| t.values().filter(|t| t.data.is_some()).count();
        if with_data(&tables) >= crate::datatable::TABLES_MAX {
            let idle = tables
                .iter()
                .find(|(_, t)| t.data.is_some() && Arc::strong_count(t) == 1)
                .map(|(&k, _)| k);
            if let Some(k) = idle {
                tables.remove(&k);
            }
        }
        let room = with_data(&tables) < crate::datatable::TABLES_MAX;
        let data = (self.data_slots > 0 && room)
            .then(|| DataTable::create(self.data_slots).ok())
            .flatten();
        let t = Arc::new(Tables {
            creds: creds.clone(),
            attrs: Table::create().ok()?,
            data,
        });
        tables.insert((creds.uid, creds.gid, groups), t.clone());
        Some(t)
    }
}

/// The reads the kernel's mount of the same file system serves, kept in the data
/// tables of attached processes (`crate::datatable`): a file read through the mount (a
/// program the interposer does not reach, a standard input redirected from a file) is
/// then warm for them too. Its pages go to the tables of the identities with the
/// reader's user and group that may read the file (the vfs's permission check, as
/// each identity): a table never holds bytes its identity could not read itself.
///
/// The request hands over the cache's blocks it read and goes on; a thread of low
/// priority copies them into the tables (a table's first use of a page is fresh
/// memory, which a cold sequential read through the mount must not wait for). At most
/// [`KEPT_READS_MAX`] reads wait for it; more are not kept.
///
/// It holds the instance weakly: the FUSE session keeps its tap until it ends, and the
/// file system must be let go of by then (an unmount takes it back whole).
#[derive(Debug, Clone)]
pub struct KernelReads {
    shared: Weak<Shared>,
    reads: std::sync::mpsc::SyncSender<KernelRead>,
    /// Reads handed over and not yet kept (or dropped).
    pending: Arc<std::sync::atomic::AtomicUsize>,
}

/// Reads of the kernel's mount waiting to be kept (each at most the kernel's largest
/// read, 1 MiB: 256 MiB of blocks held at most).
pub const KEPT_READS_MAX: usize = 256;

/// One read of the kernel's mount to keep.
#[derive(Debug)]
struct KernelRead {
    uid: u32,
    gid: u32,
    ino: InodeNo,
    count: u64,
    offset: u64,
    data: vfs::ReadView,
    asked: usize,
}

impl KernelReads {
    fn start(shared: Weak<Shared>) -> KernelReads {
        let (reads, queue) = std::sync::mpsc::sync_channel(KEPT_READS_MAX);
        let weak = shared.clone();
        let pending = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let left = pending.clone();
        // Without the thread the reads are not kept (the channel's sends fail).
        let _ = std::thread::Builder::new()
            .name("augefs-keep".into())
            .spawn(move || {
                // SAFETY: plain calls about this thread.
                unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as u32, 19) };
                for r in queue {
                    if let Some(shared) = weak.upgrade() {
                        keep_kernel_read(&shared, r);
                    }
                    left.fetch_sub(1, Ordering::AcqRel);
                }
            });
        KernelReads {
            shared,
            reads,
            pending,
        }
    }

    /// Before a read of `ino` by `uid`/`gid`: the file's data count, if an attached
    /// identity of that user and group keeps a data table and no change of the file
    /// is in flight.
    pub fn before(&self, uid: u32, gid: u32, ino: u64) -> Option<u64> {
        let shared = self.shared.upgrade()?;
        let page = shared.page.as_ref()?;
        let tables = shared.tables.lock().expect("tables lock");
        let kept = tables
            .iter()
            .any(|(&(u, g, _), t)| u == uid && g == gid && t.data.is_some());
        drop(tables);
        if !kept {
            return None;
        }
        page.data_quiet(InodeNo(ino))
    }

    /// After it: `data` (read at `offset`, `asked` bytes asked) is kept where
    /// [`KernelReads::before`] allows, if the file's count is still `count` then.
    #[allow(clippy::too_many_arguments)]
    pub fn after(
        &self,
        uid: u32,
        gid: u32,
        ino: u64,
        count: u64,
        offset: u64,
        data: vfs::ReadView,
        asked: usize,
    ) {
        self.pending.fetch_add(1, Ordering::AcqRel);
        let sent = self.reads.try_send(KernelRead {
            uid,
            gid,
            ino: InodeNo(ino),
            count,
            offset,
            data,
            asked,
        });
        if sent.is_err() {
            self.pending.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Reads handed over and not yet kept (tests wait for 0).
    pub fn pending(&self) -> usize {
        self.pending.load(Ordering::Acquire)
    }
}

/// Copies read `r` into the tables that may keep it.
fn keep_kernel_read(shared: &Shared, r: KernelRead) {
    let Some(page) = shared.page.as_deref() else {
        return;
    };
    let (ino, count) = (r.ino, r.count);
    if !page.data_same(ino, count) {
        return;
    }
    let tables: Vec<Arc<Tables>> = {
        let all = shared.tables.lock().expect("tables lock");
        all.iter()
            .filter(|(&(u, g, _), t)| u == r.uid && g == r.gid && t.data.is_some())
            .map(|(_, t)| t.clone())
            .collect()
    };
    if tables.is_empty() {
        return;
    }
    // The kernel asks for no byte past the size it knows, so a read that ends at the
    // file's end is rarely short: the file's size says whether it met it (the count
    // checked after tells that the size goes with the bytes).
    let len = r.data.len();
    let ends = len == r.asked
        && shared
            .fs
            .stat_ino(ino)
            .is_ok_and(|m| m.size == r.offset + len as u64);
    let asked = if ends { r.asked + 1 } else { r.asked };
    if !page.data_same(ino, count) {
        return;
    }
    // The kernel reads whole pages: the view's slices are then the pages.
    let paged = r.offset % crate::datatable::PAGE as u64 == 0
        && r.data.slices().count() == len.div_ceil(crate::datatable::PAGE);
    let owned = (!paged).then(|| r.data.to_vec());
    for t in tables {
        let allowed = shared
            .fs
            .access(&t.creds, ino, vfs::creds::MAY_READ)
            .is_ok();
        let Some(d) = t.data.as_ref().filter(|_| allowed) else {
            continue;
        };
        match &owned {
            Some(bytes) => d.fill(page, ino, count, r.offset, bytes, asked),
            None => d.fill_pages(page, ino, count, r.offset, len, asked, r.data.slices()),
        }
    }
}

/// A running instance; [`Instance::stop`] ends it.
#[derive(Debug)]
pub struct Instance {
    path: PathBuf,
    listener: RawFd,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl Instance {
    /// Serves `fs` on a socket at `path` (replacing a stale one); `notify` hears of
    /// every change a client makes.
    pub fn start(
        fs: Arc<FileSystem>,
        path: &Path,
        notify: Option<Notify>,
    ) -> std::io::Result<Instance> {
        Self::start_with(fs, path, notify, Settings::default())
    }

    /// [`Instance::start`] with `settings`.
    pub fn start_with(
        fs: Arc<FileSystem>,
        path: &Path,
        notify: Option<Notify>,
        settings: Settings,
    ) -> std::io::Result<Instance> {
        let timing = settings.timing;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let listener = UnixListener::bind(path)?;
        // The change page follows the vfs's change counters (once per file system: a
        // second instance of it would keep no tables).
        let page = ChangePage::create().ok().map(Arc::new).filter(|page| {
            let p = page.clone();
            fs.changes().observe(Box::new(move |e| match e {
                Event::Started => p.changed(true),
                Event::Finished => p.changed(false),
                Event::DataStarted(ino) => p.data_changed(ino, true),
                Event::DataFinished(ino) => p.data_changed(ino, false),
            }))
        });
        // Anyone may connect: each request is checked as its sender (the kernel says
        // who), as the kernel checks a call on the FUSE mount.
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))?;
        let shared = Arc::new(Shared {
            fs,
            notify,
            sessions: Mutex::new(HashMap::new()),
            conns: Mutex::new(HashMap::new()),
            workers: Workers::new("augefs-client"),
            stopping: AtomicBool::new(false),
            page,
            tables: Mutex::new(HashMap::new()),
            data_slots: match settings.shared_pages {
                0 => 0,
                bytes => crate::datatable::slots_for(bytes),
            },
            requests: std::sync::atomic::AtomicU64::new(0),
            stats: Stats::new(
                timing,
                "attached processes' requests",
                "its socket",
                op_name,
            ),
            posted: Stats::new(timing, "attached processes' posts", "its socket", op_name),
        });
        // Every other caller's call first runs a lease holder's posts (crate::posts).
        let weak = Arc::downgrade(&shared);
        shared.fs.leases().set_breaker(Box::new(move |who| {
            if let Some(s) = weak.upgrade() {
                end_leases(&s, who);
            }
        }));
        let fd = listener.as_raw_fd();
        let s = shared.clone();
        let accept = std::thread::Builder::new()
            .name("augefs-instance".into())
            .spawn(move || accept_loop(listener, s))?;
        Ok(Instance {
            path: path.to_path_buf(),
            listener: fd,
            shared,
            accept: Some(accept),
        })
    }

    /// What keeps the kernel's mount's reads for attached processes
    /// ([`KernelReads`]).
    pub fn kernel_reads(&self) -> KernelReads {
        KernelReads::start(Arc::downgrade(&self.shared))
    }

    /// Connections open now.
    pub fn connections(&self) -> usize {
        self.shared.conns.lock().expect("conns lock").len()
    }

    /// Requests answered so far (a stat the shared table answers is not one).
    pub fn requests(&self) -> u64 {
        self.shared.requests.load(Ordering::Relaxed)
    }

    /// Sessions alive now (attached processes).
    pub fn sessions(&self) -> usize {
        let s = self.shared.sessions.lock().expect("sessions lock");
        s.values().filter(|w| w.strong_count() > 0).count()
    }

    /// Stops accepting, ends every connection (clients see the instance gone), waits
    /// for their threads, and removes the socket. Returns the figures of its requests
    /// and posts, per opcode (timed if it started timed).
    pub fn stop(mut self) -> String {
        self.shared.stopping.store(true, Ordering::Release);
        // SAFETY: the listener's descriptor is open until the accept thread returns.
        unsafe { libc::shutdown(self.listener, libc::SHUT_RDWR) };
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
        for fd in self.shared.conns.lock().expect("conns lock").values() {
            // SAFETY: the map owns this descriptor of the connection's socket.
            unsafe { libc::shutdown(fd.as_raw_fd(), libc::SHUT_RDWR) };
        }
        // Every connection's thread sees its socket end; the pool waits for them all.
        self.shared.workers.stop();
        self.shared.conns.lock().expect("conns lock").clear();
        let _ = std::fs::remove_file(&self.path);
        format!(
            "{}{}",
            self.shared.stats.report(),
            self.shared.posted.report()
        )
    }
}

fn accept_loop(listener: UnixListener, shared: Arc<Shared>) {
    let mut next: u64 = 0;
    for stream in listener.incoming() {
        if shared.stopping.load(Ordering::Acquire) {
            return;
        }
        let Ok(stream) = stream else { continue };
        let mut conns = shared.conns.lock().expect("conns lock");
        if conns.len() >= CONNECTIONS_MAX {
            // Refused: the client falls back to the kernel's mount.
            continue;
        }
        // A descriptor of the socket for stop to end it with (the stream itself
        // closes when its thread is done with it).
        let Ok(end) = stream.as_fd().try_clone_to_owned() else {
            continue;
        };
        next += 1;
        let id = next;
        let s = shared.clone();
        let job = move || {
            serve(&s, stream);
            s.conns.lock().expect("conns lock").remove(&id);
        };
        // Inserted before the job runs: it removes its own entry when done.
        conns.insert(id, end);
        drop(conns);
        if shared.workers.run(job).is_err() {
            shared.conns.lock().expect("conns lock").remove(&id);
        }
    }
}

/// A new session token: random, so a process cannot guess another's.
fn new_token() -> u64 {
    let mut t = [0u8; 8];
    // SAFETY: `t` has room for 8 bytes.
    unsafe { libc::getrandom(t.as_mut_ptr().cast(), 8, 0) };
    u64::from_le_bytes(t) | 1
}

/// Ends the leases of every session but `who` (vfs::leases): returns once their posts
/// have run.
fn end_leases(shared: &Shared, who: Caller) {
    let holders: Vec<Arc<Session>> = {
        let sessions = shared.sessions.lock().expect("sessions lock");
        sessions
            .values()
            .filter_map(Weak::upgrade)
            .filter(|s| who != Caller::Session(s.token) && s.posts.holds())
            .collect()
    };
    for s in holders {
        s.posts.end();
    }
}

/// What a connection is for, by its first request.
enum Role {
    /// Requests answered in order (Hello).
    Calls,
    /// The session's posted requests (Posts): the client's count of earlier ones, and
    /// the posting ring it asked for (None: posts come on the socket).
    Posts {
        sent: u64,
        ring: Option<Arc<PostRing>>,
    },
}

/// The first request, Hello or Posts: the caller's session (joined or new), or None
/// after answering with an errno.
fn handshake(shared: &Arc<Shared>, peer: &Peer, conn: &mut Conn) -> Option<(Arc<Session>, Role)> {
    let session = match conn.recv().ok()?.map(Request::decode) {
        Some(Ok(Request::Hello { token, version })) if version == crate::proto::VERSION => {
            join(shared, peer, token).map(|s| (s, Role::Calls))
        }
        Some(Ok(Request::Posts {
            token,
            version,
            sent,
            ring,
        })) if version == crate::proto::VERSION && token != 0 => {
            // A ring that cannot be made leaves the posts on the socket.
            let ring = ring
                .then(PostRing::create)
                .and_then(Result::ok)
                .map(Arc::new);
            join(shared, peer, token).map(|s| (s, Role::Posts { sent, ring }))
        }
        _ => Err(Errno(libc::EPROTO)),
    };
    let mut w = Writer::new();
    match session {
        Ok((s, role)) => {
            let mut fds = Vec::new();
            if let Role::Posts { sent, ring } = &role {
                // Registered before the client hears so: its opens may be leased.
                s.posts.open(conn.stream.as_raw_fd(), ring.clone(), *sent);
                fds.extend(ring.as_ref().and_then(|r| r.fd()));
            }
            w.i32(0).u64(s.token);
            let sent = if fds.is_empty() {
                conn.send(w.finish(0), &[]).is_ok()
            } else {
                crate::shm::send_fds(conn.stream.as_raw_fd(), w.finish(0), &fds).is_ok()
            };
            if sent {
                Some((s, role))
            } else {
                if let Role::Posts { .. } = role {
                    s.posts.close(|l| s.end_lease(l));
                }
                None
            }
        }
        Err(Errno(e)) => {
            w.i32(e);
            let _ = conn.send(w.finish(0), &[]);
            None
        }
    }
}

fn serve(shared: &Arc<Shared>, stream: UnixStream) {
    let Ok(peer) = peer::of(stream.as_fd()) else {
        return;
    };
    let mut conn = Conn::for_instance(stream);
    let Some((session, role)) = handshake(shared, &peer, &mut conn) else {
        return;
    };
    let tables = shared.table(&peer.creds);
    let cache = shared
        .page
        .as_deref()
        .zip(tables.as_deref().map(|t| &t.attrs));
    // The socket, apart from the connection: a lock wait watches it while `conn`
    // stays borrowed by the request it runs.
    let Ok(socket) = conn.stream.try_clone() else {
        return;
    };
    let caller = SessionCaller {
        creds: &peer.creds,
        socket: socket.as_fd(),
        cache,
        data: tables.as_deref().and_then(|t| t.data.as_ref()),
    };
    if let Role::Posts { ring, .. } = role {
        let counters = shared.posted.thread();
        let counters = match ring {
            Some(ring) => serve_ring(&session, &caller, conn, ring, counters),
            None => serve_posts(&session, &caller, conn, counters),
        };
        shared.posted.merge(counters);
        return;
    }
    let mut counters = shared.stats.thread();
    serve_calls(shared, &session, &caller, &mut conn, &mut counters);
    shared.stats.merge(counters);
}

/// Answers a connection's requests in order until it ends.
fn serve_calls(
    shared: &Arc<Shared>,
    session: &Arc<Session>,
    caller: &SessionCaller<'_>,
    conn: &mut Conn,
    counters: &mut ThreadStats,
) {
    let mut w = Writer::new();
    let sock = caller.socket.as_raw_fd();
    let me = vfs::leases::Caller::Session(session.token);
    loop {
        let buf = match conn.recv() {
            Ok(Some(b)) => b,
            Ok(None) | Err(_) => return,
        };
        let op = buf.first().copied().map_or(0, u32::from);
        let stamp = counters.begin();
        w.clear();
        w.i32(0);
        let req = Request::decode(buf);
        // A Barrier (no reply) holds the connection's next request back.
        if let Ok(Request::Barrier { count }) = req {
            run_posts_for(session, count);
            session.posts.wait_applied(count);
            counters.end(op, stamp);
            continue;
        }
        shared.requests.fetch_add(1, Ordering::Relaxed);
        // Requests answered with descriptors (on the socket).
        match (&req, caller.cache) {
            (Ok(Request::Tables), Some((page, table))) => {
                // The change page, the attribute table, and the data table if kept.
                let mut fds = vec![page.fd(), table.fd()];
                fds.extend(caller.data.map(DataTable::fd));
                let fds: Vec<RawFd> = fds
                    .into_iter()
                    .map(|f| f.expect("the instance's own"))
                    .collect();
                if crate::shm::send_fds(sock, w.finish(0), &fds).is_err() {
                    return;
                }
                continue;
            }
            (Ok(Request::Mailbox { writable }), _) => {
                if let Ok(m) = Mailbox::create(*writable) {
                    let fd = m.fd().expect("the instance's own");
                    if crate::shm::send_fds(sock, w.finish(0), &[fd]).is_err() {
                        return;
                    }
                    conn.set_mailbox(m);
                    continue;
                }
            }
            _ => {}
        }
        shared.fs.leases().call(me);
        let quiet = matches!(req, Ok(Request::CloseQuiet { .. }));
        let r = req.and_then(|req| match req {
            Request::Tables | Request::Mailbox { .. } => Err(Errno(libc::EOPNOTSUPP)),
            req => session.run(caller, req, &mut w),
        });
        if quiet {
            counters.end(op, stamp);
            continue;
        }
        if let Err(Errno(e)) = r {
            w.clear();
            w.i32(e);
        }
        let sent = conn.send(w.finish(0), &[]);
        counters.end(op, stamp);
        if sent.is_err() {
            return;
        }
    }
}

/// Runs a session's posted requests in order until the connection ends (the client
/// closed it, died, or a lease ended: crate::posts), then ends its leases.
fn serve_posts(
    session: &Session,
    caller: &SessionCaller<'_>,
    mut conn: Conn,
    mut counters: ThreadStats,
) -> ThreadStats {
    crate::session::posting_thread();
    let mut w = Writer::new();
    while let Ok(Some(buf)) = conn.recv() {
        if !run_post(session, caller, buf, &mut w, &mut counters) {
            break;
        }
    }
    session.posts.close(|l| session.end_lease(l));
    counters
}

/// Runs one posted request (`body`, a frame's): false if it is not one a client may
/// post (the connection then ends: a client that does is not ours).
fn run_post(
    session: &Session,
    caller: &SessionCaller<'_>,
    body: &[u8],
    w: &mut Writer,
    counters: &mut ThreadStats,
) -> bool {
    if let Some(d) = post_delay() {
        std::thread::sleep(d);
    }
    let stamp = counters.begin();
    let failed = match Request::decode(body) {
        Ok(
            req @ (Request::Write { .. } | Request::SetAttr { .. } | Request::CloseQuiet { .. }),
        ) => {
            let ino = session.ino_of(&req);
            w.clear();
            session.run(caller, req, w).err().map(|Errno(e)| (ino, e))
        }
        _ => return false,
    };
    session.posts.applied(failed);
    counters.end(body.first().copied().map_or(0, u32::from), stamp);
    true
}

/// [`serve_posts`] for a connection whose posts come through `ring`
/// (`crate::postring`): runs each record in order while there are some (holding the
/// ring's drain: a request of the session that must follow them may run them itself,
/// [`run_posts_for`]); when there are none, spins a while, then says it sleeps and
/// waits on the socket, which carries only the client's rings (empty frames) and, at
/// its end, the close. The end of the socket (the client died or closed it, or a lease
/// ended: `Posts::end` shut it for reading after closing the ring) closes the ring;
/// what was published before runs, then the leases end.
fn serve_ring(
    session: &Session,
    caller: &SessionCaller<'_>,
    conn: Conn,
    ring: Arc<PostRing>,
    counters: ThreadStats,
) -> ThreadStats {
    crate::session::posting_thread();
    let fd = conn.stream.as_raw_fd();
    session.posts.set_drain(Drain {
        reader: crate::postring::Reader::new(ring.clone()),
        creds: caller.creds.clone(),
        fd,
        refused: false,
        counters,
    });
    let mut spinner = crate::spin::Spinner::for_instance(crate::spin());
    let mut w = Writer::new();
    loop {
        let drained = match session.posts.drain().as_mut() {
            Some(d) => run_published(session, d, u64::MAX, &mut w),
            None => Drained::Finished,
        };
        if drained != Drained::Empty {
            break;
        }
        let mut turns = 0u32;
        let came = spinner.wait_until(|| {
            turns += 1;
            ring.pending() || (turns % 64 == 0 && crate::mailbox::readable(fd, 0))
        });
        if !came {
            ring.set_asleep(true);
            if !ring.pending() {
                crate::mailbox::readable(fd, -1);
            }
            ring.set_asleep(false);
        }
        if crate::mailbox::readable(fd, 0) && !take_rings(fd) {
            ring.close();
        }
    }
    ring.close();
    let (_, drain) = session.posts.close_with_drain(|l| session.end_lease(l));
    drain
        .expect("the thread's own drain, until it ends")
        .counters
}

/// How a run of a ring's records ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Drained {
    /// None is published now (or `count` have run).
    Empty,
    /// The ring is closed and every record published before ran.
    Finished,
    /// A record was not a post, or the ring lied: nothing more runs.
    Refused,
}

/// Runs `d`'s published records in order, as the posting connection's process, until
/// none is left or the session's `count` posts have run.
fn run_published(session: &Session, d: &mut Drain, count: u64, w: &mut Writer) -> Drained {
    if d.refused {
        return Drained::Refused;
    }
    // SAFETY: the posting connection's socket stays open while its drain is registered
    // (its thread clears the drain before the socket closes), and the caller holds the
    // drain.
    let socket = unsafe { BorrowedFd::borrow_raw(d.fd) };
    let caller = SessionCaller {
        creds: &d.creds,
        socket,
        cache: None,
        data: None,
    };
    let drained = loop {
        if session.posts.applied_count() >= count {
            break Drained::Empty;
        }
        match d.reader.next_record() {
            Ok(Some(body)) => {
                if !run_post(session, &caller, body, w, &mut d.counters) {
                    break Drained::Refused;
                }
                continue;
            }
            Ok(None) => {}
            Err(crate::postring::Lie) => break Drained::Refused,
        }
        break if d.reader.finished() {
            Drained::Finished
        } else {
            Drained::Empty
        };
    };
    d.refused = drained == Drained::Refused;
    drained
}

/// Runs the session's published posts in this thread until its first `count` posts have
/// run, if no other thread is running them: what a request that must follow them does
/// instead of waiting for the posting thread to wake. Posts run as the posting thread
/// runs them (not told to the kernel: `crate::session::posting_thread`). A refusal
/// ends the posting connection (its thread then ends the leases).
fn run_posts_for(session: &Session, count: u64) {
    let Some(mut guard) = session.posts.try_drain() else {
        return;
    };
    let Some(d) = guard.as_mut() else {
        return;
    };
    let was = crate::session::set_posting(true);
    let drained = run_published(session, d, count, &mut Writer::new());
    crate::session::set_posting(was);
    if drained == Drained::Refused {
        d.reader.ring().close();
        // SAFETY: the socket is open while the drain is registered (held here).
        unsafe { libc::shutdown(d.fd, libc::SHUT_RD) };
    }
}

/// Reads what the socket of a ring's connection holds now (without waiting): false at
/// its end, or if it held anything but rings (empty frames: zero bytes).
fn take_rings(fd: RawFd) -> bool {
    let mut buf = [0u8; 256];
    loop {
        // SAFETY: reads into `buf`, which is live and that long.
        let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
        match n {
            0 => return false,
            n if n > 0 => {
                if buf[..n as usize].iter().any(|&b| b != 0) {
                    return false;
                }
            }
            _ => {
                let e = std::io::Error::last_os_error();
                match e.kind() {
                    std::io::ErrorKind::WouldBlock => return true,
                    std::io::ErrorKind::Interrupted => {}
                    _ => return false,
                }
            }
        }
    }
}

/// AUGEFS_POST_DELAY_US: each posted request waits that long before it runs, so that
/// posts lag far behind the client (fault injection for the tests that a post the
/// client was told was done is seen by every other caller: docs/TESTING.md).
fn post_delay() -> Option<std::time::Duration> {
    static DELAY: std::sync::OnceLock<Option<std::time::Duration>> = std::sync::OnceLock::new();
    *DELAY.get_or_init(|| {
        let us: u64 = std::env::var("AUGEFS_POST_DELAY_US").ok()?.parse().ok()?;
        Some(std::time::Duration::from_micros(us))
    })
}

/// The session `token` names (its process must be the caller), or a new one.
fn join(shared: &Arc<Shared>, peer: &Peer, token: u64) -> Result<Arc<Session>, Errno> {
    let mut sessions = shared.sessions.lock().expect("sessions lock");
    sessions.retain(|_, w| w.strong_count() > 0);
    if token != 0 {
        let s = sessions.get(&token).and_then(Weak::upgrade);
        return match s {
            Some(s) if s.pid == peer.pid => Ok(s),
            _ => Err(Errno(libc::EPERM)),
        };
    }
    let s = Arc::new(Session::new(
        new_token(),
        peer.pid,
        shared.fs.clone(),
        shared.notify.clone(),
        shared.page.clone(),
    ));
    sessions.insert(s.token, Arc::downgrade(&s));
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Data tables are kept for at most TABLES_MAX identities at once: another identity
    /// gets none while all of them are attached, and one that left makes room.
    #[test]
    fn data_tables_are_kept_for_a_few_identities() {
        let dir = tempfile::tempdir().unwrap();
        let fs = testsupport::mount::mounted(64 << 20, 1);
        let inst = Instance::start(fs, &dir.path().join("i.sock"), None).unwrap();
        let user = |i: u32| vfs::Creds::user(61_000 + i, 61_000 + i, vec![]);
        let max = crate::datatable::TABLES_MAX as u32;
        // Held as connections hold them.
        let mut held: Vec<Arc<Tables>> = (0..max)
            .map(|i| inst.shared.table(&user(i)).unwrap())
            .collect();
        assert!(held.iter().all(|t| t.data.is_some()));
        let extra = inst.shared.table(&user(max)).unwrap();
        assert!(
            extra.data.is_none(),
            "an identity past the limit got a data table"
        );
        assert!(
            inst.shared.table(&user(0)).unwrap().data.is_some(),
            "kept as it was"
        );
        drop(extra);
        // The first identity's last connection ends: its tables make room.
        held.remove(0);
        let next = inst.shared.table(&user(max + 1)).unwrap();
        assert!(
            next.data.is_some(),
            "an idle identity's tables made no room"
        );
        drop((held, next));
        inst.stop();
    }
}
