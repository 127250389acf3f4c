//! The attached side of posted requests (`crate::posts`, docs/DESIGN.md §12.5): the
//! posting connection, the leases the instance granted, and the count that orders the
//! process's later requests after its posts.
//!
//! Posts go through the connection's posting ring (`crate::postring`) where the process
//! could protect it (or was told to do without: AUGEFS_MAILBOX=unprotected), else as
//! frames on its socket.
//!
//! Invariants:
//! - A post is counted (`sent`) only once it is published: its record in the ring, or
//!   its whole frame in the socket. The instance runs exactly the counted posts (a
//!   partial frame, cut by the end of a lease, is dropped by the instance; a record the
//!   closed ring refused was never published; the call is then sent as a request).
//! - With a ring, the socket carries nothing but rings of the bell: a frame there would
//!   end the connection.
//! - A lease is used only while the connection it was granted under is the one open
//!   (its epoch): once a post fails, every lease of that connection is void.
//! - `fenced` moves only after a request that followed a Barrier was answered: a
//!   thread that reads `fenced >= n` knows the first `n` posts have run.
//! - The connection is never used after a fork by the child, nor after a change of
//!   identity ([`Poster::drop_channel`]).

use super::{notconn, Remote, Transport};
use crate::forklock::ForkLock;
use crate::mailbox::Conn;
use crate::postring::{PostRing, Pushed};
use crate::proto::{self, Request};
use crate::wire::Writer;
use format::InodeNo;
use posix::Result;
use std::collections::HashMap;
use std::io::IoSlice;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use vfs::{AttrChanges, Creds};

/// Largest write posted (larger ones are few, and cost little more as requests).
pub const POST_BYTES_MAX: usize = 64 << 10;

/// A lease of one handle, as the client keeps it.
#[derive(Debug, Clone, Copy)]
struct Lease {
    ino: InodeNo,
    /// Bytes it may still post.
    left: u64,
    /// The file's owner when leased.
    owner: u32,
    epoch: u64,
}

/// The posting connection.
#[derive(Debug)]
struct Channel {
    /// The generation of the process's connections it belongs to.
    generation: u64,
    stream: UnixStream,
    /// Its posting ring, where posts go if it has one.
    ring: Option<PostRing>,
}

#[derive(Debug, Default)]
pub(crate) struct Poster {
    /// The posting connection.
    channel: ForkLock<Option<Channel>>,
    /// Bumped whenever the connection goes: older leases are void.
    epoch: AtomicU64,
    /// Posts sent whole.
    sent: AtomicU64,
    /// Posts known to have run.
    fenced: AtomicU64,
    leases: ForkLock<HashMap<u64, Lease>>,
    /// A thread is opening the posting connection: the instance takes one per session
    /// at a time (a second one waits for the first to close), so two threads that both
    /// found none and both dialled would leave the second waiting for good.
    opening: AtomicBool,
}

/// Sends `frame` then `data` on `s` without raising SIGPIPE: false if the connection
/// refused any of it (a partial frame is then the instance's to drop).
fn send_all(s: &UnixStream, frame: &[u8], data: &[u8]) -> bool {
    let mut parts = [IoSlice::new(frame), IoSlice::new(data)];
    let used = if data.is_empty() { 1 } else { 2 };
    let mut bufs = &mut parts[..used];
    while !bufs.is_empty() {
        // SAFETY: a zeroed msghdr is valid; it names `bufs` (IoSlice is ABI-compatible
        // with iovec), live for the call.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = bufs.as_mut_ptr().cast();
        msg.msg_iovlen = bufs.len();
        // SAFETY: `msg` names buffers that live for the call.
        let n = unsafe { libc::sendmsg(s.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        match n {
            n if n > 0 => IoSlice::advance_slices(&mut bufs, n as usize),
            _ if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted => {}
            _ => return false,
        }
    }
    true
}

/// Whether the instance's end of `s` is gone (a zero-timeout poll).
fn hung_up(s: &UnixStream) -> bool {
    let mut p = libc::pollfd {
        fd: s.as_raw_fd(),
        events: libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: one valid pollfd; a zero timeout never sleeps.
    unsafe { libc::poll(&mut p, 1, 0) > 0 && p.revents != 0 }
}

/// Publishes one post in `ring` (rings the bell on `s` if the instance sleeps): false
/// if the ring refused it.
fn push(ring: &PostRing, s: &UnixStream, frame: &[u8], data: &[u8]) -> bool {
    match ring.push(frame, data, || hung_up(s)) {
        Pushed::Published { ring: true } => {
            // Published whatever becomes of the ring: a closed socket means the
            // instance already reads on (its lease ended) or is gone.
            // SAFETY: sends 4 bytes of a live array.
            unsafe {
                libc::send(
                    s.as_raw_fd(),
                    [0u8; 4].as_ptr().cast(),
                    4,
                    libc::MSG_NOSIGNAL,
                )
            };
            true
        }
        Pushed::Published { ring: false } => true,
        Pushed::Closed | Pushed::Gone => false,
    }
}

impl Poster {
    /// Claims the opening of the posting connection: false if another thread is at it
    /// (the caller goes on without posts for now).
    pub fn begin_open(&self) -> bool {
        self.opening
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// The opening claimed by [`Poster::begin_open`] is over (done or given up).
    pub fn end_open(&self) {
        self.opening.store(false, Ordering::Release);
    }

    /// Whether a posting connection of `generation` is open.
    pub fn has_channel(&self, generation: u64) -> bool {
        self.channel
            .with(|c| matches!(c, Some(c) if c.generation == generation))
    }

    /// Posts sent so far (what a new posting connection tells the instance).
    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::SeqCst)
    }

    /// Takes `stream` as the posting connection of `generation`, with its posting
    /// `ring` if it has one.
    pub fn set_channel(&self, generation: u64, stream: UnixStream, ring: Option<PostRing>) {
        let channel = Channel {
            generation,
            stream,
            ring,
        };
        let old = self.channel.with(|c| c.replace(channel));
        self.epoch.fetch_add(1, Ordering::SeqCst);
        drop(old);
    }

    /// Closes the posting connection (a change of identity): its leases are void.
    pub fn drop_channel(&self) {
        let old = self.channel.with(Option::take);
        self.epoch.fetch_add(1, Ordering::SeqCst);
        self.leases.with(HashMap::clear);
        drop(old);
    }

    /// The fork prepare handler: holds the connection so the child copies it whole.
    pub fn before_fork(&self) {
        self.channel.lock();
        self.leases.lock();
    }

    pub fn after_fork_parent(&self) {
        self.leases.unlock();
        self.channel.unlock();
    }

    /// The fork child handler: the parent's connection and leases are the parent's.
    pub fn forked(&self) {
        // SAFETY: the prepare handler holds both locks; this is the only thread.
        let old = unsafe { self.channel.held() }.take();
        // SAFETY: as above.
        unsafe { self.leases.held() }.clear();
        self.leases.unlock();
        self.channel.unlock();
        drop(old);
        self.epoch.fetch_add(1, Ordering::SeqCst);
        self.sent.store(0, Ordering::SeqCst);
        self.fenced.store(0, Ordering::SeqCst);
        // A parent's thread that was opening its connection is not in the child.
        self.opening.store(false, Ordering::Release);
    }

    /// Keeps the lease the instance granted `handle` (`budget` bytes; 0: none).
    pub fn leased(&self, handle: u64, ino: InodeNo, budget: u64, owner: u32) {
        if budget == 0 {
            return;
        }
        let lease = Lease {
            ino,
            left: budget,
            owner,
            epoch: self.epoch.load(Ordering::SeqCst),
        };
        self.leases.with(|l| l.insert(handle, lease));
    }

    /// Forgets `handle`'s lease (it closes): whether it was live.
    pub fn unlease(&self, handle: u64) -> bool {
        let l = self.leases.with(|l| l.remove(&handle));
        l.is_some_and(|l| l.epoch == self.epoch.load(Ordering::SeqCst))
    }

    /// Whether a write of `len` bytes through `handle` may be posted: its lease is
    /// live and has the budget (taken from it).
    pub fn may_write(&self, handle: u64, len: usize) -> bool {
        if len > POST_BYTES_MAX {
            return false;
        }
        let epoch = self.epoch.load(Ordering::SeqCst);
        self.leases.with(|leases| match leases.get_mut(&handle) {
            Some(l) if l.epoch == epoch && l.left >= len as u64 => {
                l.left -= len as u64;
                true
            }
            _ => false,
        })
    }

    /// Whether `changes` to `ino` by `cx` may be posted: a live lease of the file, and
    /// a change the instance will allow (root's, or the owner's that keeps the owner
    /// and group): the instance still checks it, and a refusal would only be reported
    /// at the next fsync.
    pub fn may_set_attr(&self, cx: &Creds, ino: InodeNo, changes: &AttrChanges) -> bool {
        let epoch = self.epoch.load(Ordering::SeqCst);
        let owner = self.leases.with(|leases| {
            leases
                .values()
                .find(|l| l.ino == ino && l.epoch == epoch)
                .map(|l| l.owner)
        });
        match owner {
            Some(owner) => {
                cx.uid == 0 || (cx.uid == owner && changes.uid.is_none() && changes.gid.is_none())
            }
            None => false,
        }
    }

    /// Where this process's posting ring is mapped, and its length (the test that a
    /// stray store faults).
    pub fn ring_region(&self) -> Option<(usize, usize)> {
        self.channel.with(|c| {
            c.as_ref()
                .and_then(|c| c.ring.as_ref())
                .map(PostRing::region)
        })
    }

    /// Posts one frame (`frame`, then `data`): false if the posting connection is gone (the
    /// caller sends the request instead; every lease of the connection is void now).
    pub fn post(&self, frame: &[u8], data: &[u8]) -> bool {
        let sent = self.channel.with(|c| match c {
            Some(ch) => {
                let ok = match &ch.ring {
                    Some(ring) => push(ring, &ch.stream, frame, data),
                    None => send_all(&ch.stream, frame, data),
                };
                if ok {
                    self.sent.fetch_add(1, Ordering::SeqCst);
                } else {
                    *c = None;
                }
                ok
            }
            None => false,
        });
        if !sent {
            self.epoch.fetch_add(1, Ordering::SeqCst);
        }
        sent
    }

    /// The count a request must wait for (a Barrier sent before it), if some posts
    /// may not have run yet.
    pub fn fence(&self) -> Option<u64> {
        let sent = self.sent.load(Ordering::SeqCst);
        (sent > self.fenced.load(Ordering::SeqCst)).then_some(sent)
    }

    /// A request sent after a Barrier of `count` was answered.
    pub fn fenced(&self, count: u64) {
        self.fenced.fetch_max(count, Ordering::SeqCst);
    }
}

impl Remote {
    /// Sends a Barrier on `conn` if some of this process's posts may not have run: the
    /// next request on it waits for them (its count).
    pub(super) fn barrier(&self, conn: &mut Conn) -> Result<Option<u64>> {
        let Some(n) = self.poster.fence() else {
            return Ok(None);
        };
        let mut w = Writer::new();
        Request::Barrier { count: n }.encode(&mut w);
        conn.send(w.finish(0), &[]).map_err(|_| notconn())?;
        Ok(Some(n))
    }

    /// Opens the posting connection if this process has none (`crate::posting`): its
    /// opens for writing may then be leased. Nothing is said if it cannot be.
    pub(super) fn open_posts(&self) {
        // AUGEFS_POSTS=off: every call waits for its reply (for comparisons).
        static OFF: OnceLock<bool> = OnceLock::new();
        if *OFF.get_or_init(|| std::env::var_os("AUGEFS_POSTS").is_some_and(|v| v == "off")) {
            return;
        }
        if !self.poster.begin_open() {
            return;
        }
        self.dial_posts();
        self.poster.end_open();
    }

    /// [`Remote::open_posts`] by the one thread that claimed the opening.
    fn dial_posts(&self) {
        let generation = self.generation.load(Ordering::Acquire);
        if self.poster.has_channel(generation) || self.anchor().is_err() {
            return;
        }
        let token = self.token.load(Ordering::Acquire);
        let Ok(s) = self.connect_socket() else {
            return;
        };
        // A ring where its memory can be protected (or the process does without).
        let ring_key = match (self.transport, crate::pkey::key()) {
            (Transport::Socket, _) | (Transport::Auto, None) => None,
            (_, key) => Some(key),
        };
        let mut conn = Conn::new(s);
        let hello = Request::Posts {
            token,
            version: proto::VERSION,
            sent: self.poster.sent(),
            ring: ring_key.is_some(),
        };
        let mut w = Writer::new();
        hello.encode(&mut w);
        if conn.send(w.finish(0), &[]).is_err() {
            return;
        }
        // The reply: its length, a status and the token, with the ring's descriptor.
        let mut reply = [0u8; 16];
        let Ok(fds) = conn.recv_fds(&mut reply, 1) else {
            return;
        };
        if reply[4..8] != [0; 4] {
            return;
        }
        let ring = match (fds.into_iter().next(), ring_key) {
            (Some(fd), Some(key)) => match PostRing::attach(fd, key) {
                Ok(ring) => Some(ring),
                // The instance reads posts from the ring only: none can be posted.
                Err(_) => return,
            },
            _ => None,
        };
        self.poster.set_channel(generation, conn.stream, ring);
    }

    /// Posts `req` (with `data` after its frame): false if it must be sent as a
    /// request instead.
    pub(super) fn post(&self, req: &Request<'_>, data: &[u8]) -> bool {
        let mut w = Writer::new();
        req.encode(&mut w);
        self.poster.post(w.finish(data.len()), data)
    }
}
