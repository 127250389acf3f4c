//! A FUSE session: the INIT exchange, then request threads that each read a request
//! from their /dev/fuse descriptor, decode it, hand it to the adapter and write the
//! reply, until the kernel ends the session (ENODEV: the file system was unmounted or
//! the connection aborted).
//!
//! Structure, so a second transport (FUSE over io_uring) and notifications can be added
//! without touching the adapter: the protocol ([`crate::proto`]) knows no descriptors;
//! the [`Channel`] moves whole messages; the adapter answers through an [`Out`], which
//! knows only "send these bytes for this request" and "answer later" ([`Deferred`]).
//!
//! Invariants:
//! - Every request gets exactly one reply, except FORGET, BATCH_FORGET and INTERRUPT,
//!   which get none; a deferred reply (a SETLKW that waits) is sent later by its owner.
//!   `Out` asserts it.
//! - A malformed request is answered with EINVAL (or dropped, if even its header is
//!   unreadable), never a panic.
//! - No request allocates in the session: each thread owns a read buffer and a reply
//!   buffer sized at INIT for the negotiated maximum.

use crate::adapter::AugeFuse;
use crate::channel::Channel;
use crate::constants::{MAX_BACKGROUND, MAX_PAGES_CAP, PAGE_BYTES, REQUEST_SLACK_BYTES};
use crate::notify::Notifier;
use crate::proto::abi::{self, init, Pod};
use crate::proto::reply::ReplyBuf;
use crate::proto::request::{self, Op};
use crate::stats::{Stats, ThreadStats};
use crate::uring::Mailbox;
use std::io;
use std::sync::Arc;
use std::thread::JoinHandle;

/// What the INIT exchange settled.
#[derive(Debug, Clone, Copy)]
pub struct Negotiated {
    /// The kernel's minor version, or ours if lower.
    pub minor: u32,
    pub max_write: u32,
    pub max_pages: u32,
    /// Flags both sides agreed on.
    pub flags: u64,
}

impl Negotiated {
    fn request_buffer_bytes(&self) -> usize {
        (self.max_write as usize + REQUEST_SLACK_BYTES).max(abi::MIN_READ_BUFFER)
    }

    fn reply_buffer_bytes(&self) -> usize {
        (self.max_pages * PAGE_BYTES).max(self.max_write) as usize + REQUEST_SLACK_BYTES
    }
}

/// How a session serves.
#[derive(Debug, Clone, Copy)]
pub struct SessionOptions {
    /// Request threads.
    pub threads: usize,
    /// Each request thread past the first reads from a /dev/fuse descriptor of its own
    /// (else they share the first).
    pub clone_fd: bool,
    /// Time each request (`-o stats`); requests are counted either way.
    pub stats: bool,
    /// Serve through FUSE over io_uring where the kernel offers it (`crate::uring`:
    /// `threads / queues` queue threads on each of the kernel's queues, one per
    /// possible CPU, at least one).
    pub uring: bool,
}

/// A session whose INIT is done, ready to serve.
#[derive(Debug)]
pub struct Session {
    fs: Arc<AugeFuse>,
    first: Arc<Channel>,
    negotiated: Negotiated,
    opts: SessionOptions,
    stats: Arc<Stats>,
    notifier: Notifier,
}

/// The kernel's fs.fuse.max_pages_limit (256 where the sysctl does not exist).
fn max_pages_limit() -> u32 {
    std::fs::read_to_string("/proc/sys/fs/fuse/max_pages_limit")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(abi::MAX_PAGES_DEFAULT)
}

impl Session {
    /// Reads the kernel's INIT from `channel`, answers it with what `fs` wants, and
    /// returns the session.
    pub fn init(fs: Arc<AugeFuse>, channel: Channel, opts: SessionOptions) -> io::Result<Session> {
        assert!(opts.threads >= 1);
        let mut buf = vec![0u8; abi::MIN_READ_BUFFER.max(4096 + REQUEST_SLACK_BYTES)];
        loop {
            let n = match channel.receive(&mut buf) {
                Ok(n) => n,
                Err(e) if retry(&e) => continue,
                Err(e) => return Err(e),
            };
            let req = match request::decode(&buf[..n]) {
                Ok(r) => r,
                Err(e) => return Err(io::Error::other(format!("before INIT: {e}"))),
            };
            let Op::Init(arg) = req.op else {
                // Nothing but INIT comes first; answer anything else with EIO.
                let mut r = ReplyBuf::new(0);
                r.begin(req.header.unique);
                channel.send(r.finish(-libc::EIO))?;
                continue;
            };
            let ring = if opts.uring { init::OVER_IO_URING } else { 0 };
            let (reply, negotiated) = negotiate(&arg, fs.wanted_flags() | ring)?;
            let mut r = ReplyBuf::new(std::mem::size_of::<abi::InitOut>());
            r.begin(req.header.unique);
            r.push(&reply);
            channel.send(r.finish(0))?;
            fs.set_negotiated(negotiated);
            let first = Arc::new(channel);
            return Ok(Session {
                fs,
                notifier: Notifier::new(first.clone()),
                first,
                negotiated,
                opts,
                stats: Arc::new(crate::stats::new_stats(opts.stats)),
            });
        }
    }

    /// Serves on `threads` threads (this one among them) until the kernel ends the
    /// session, then ends the adapter's lock waits.
    pub fn run(self) -> io::Result<()> {
        let (mut running, ring) = self.start_rings();
        let dev_threads = if ring {
            // FORGET, INTERRUPT and what comes before the ring is ready.
            1
        } else {
            self.opts.threads
        };
        running
            .handles
            .extend(self.spawn_workers(1, dev_threads)?.handles);
        eprintln!(
            "augefs: serving FUSE requests over {}",
            self.stats.transport()
        );
        let first = serve_thread(
            &self.fs,
            &self.first,
            self.negotiated,
            &self.stats,
            &self.notifier,
        );
        let rest = running.join();
        self.fs.shutdown();
        first.and(rest)
    }

    /// Notifications to the kernel on this session.
    pub fn notifier(&self) -> Notifier {
        self.notifier.clone()
    }

    /// The session's request counters (complete once every thread has ended).
    pub fn stats(&self) -> Arc<Stats> {
        self.stats.clone()
    }

    /// Serves from `threads` background threads; [`Running::join`] waits for them.
    pub fn spawn(self) -> io::Result<Running> {
        assert!(
            !self.opts.uring,
            "background sessions serve through /dev/fuse"
        );
        self.spawn_workers(0, self.opts.threads)
    }

    /// Starts a queue thread per kernel queue if the kernel agreed to FUSE over
    /// io_uring; whether it took every thread's entries (else the /dev/fuse threads
    /// serve everything, and the reason is printed).
    fn start_rings(&self) -> (Running, bool) {
        let mut running = Running {
            handles: Vec::new(),
            fs: self.fs.clone(),
        };
        if self.negotiated.flags & init::OVER_IO_URING == 0 {
            if self.opts.uring {
                say_why_no_ring();
            }
            return (running, false);
        }
        let queues = match crate::uring::queue_count() {
            Ok(n) => n,
            Err(e) => {
                eprintln!("augefs: FUSE over io_uring unused: {e}");
                return (running, false);
            }
        };
        // `threads` counts request threads over either transport: a queue thread serves
        // its requests one at a time, so more than one per queue lets a request that
        // waits for the device (a cold READ, an FSYNC) not hold up the next.
        let per_queue = (self.opts.threads / queues).max(1);
        let (tell, told) = std::sync::mpsc::channel();
        for (qid, k) in (0..queues).flat_map(|q| (0..per_queue).map(move |k| (q, k))) {
            let spec = crate::uring::QueueSpec {
                qid: u16::try_from(qid).expect("fewer than 65536 CPUs"),
                dev_fd: self.first.raw(),
                payload_bytes: self.negotiated.reply_buffer_bytes(),
                scratch_bytes: REQUEST_SLACK_BYTES,
                pin: true,
            };
            let (fs, stats, notifier) =
                (self.fs.clone(), self.stats.clone(), self.notifier.clone());
            let first = self.first.clone();
            let (tell, told_spawn) = (tell.clone(), tell.clone());
            let spawned = std::thread::Builder::new()
                .name(format!("augefs-ring-{qid}.{k}"))
                .spawn(move || {
                    // The descriptor the commands name stays open while they are in use.
                    let _dev = first;
                    let mut counters = stats.thread();
                    let r = crate::uring::serve_queue(&fs, spec, &notifier, &mut counters, |r| {
                        let _ = tell.send(r);
                    });
                    stats.merge(counters);
                    r
                });
            match spawned {
                Ok(h) => running.handles.push(h),
                Err(e) => {
                    let _ = told_spawn.send(Err(e.to_string()));
                }
            }
        }
        drop(tell);
        let refused: Vec<String> = told
            .iter()
            .take(queues * per_queue)
            .filter_map(Result::err)
            .collect();
        if refused.is_empty() {
            self.stats.set_transport("io_uring");
            return (running, true);
        }
        eprintln!(
            "augefs: FUSE over io_uring unused, serving through /dev/fuse: {}",
            refused[0]
        );
        // Threads whose entries the kernel took wait for the end of the session (the
        // ring never starts without every queue); they are joined with the others.
        running.handles.retain(|h| !h.is_finished());
        (running, false)
    }

    /// Starts the /dev/fuse request threads from `skip` to `count`.
    fn spawn_workers(&self, skip: usize, count: usize) -> io::Result<Running> {
        let mut handles = Vec::new();
        for i in skip..count {
            let ch = if self.opts.clone_fd && i > 0 {
                Arc::new(self.first.clone_attached()?)
            } else {
                self.first.clone()
            };
            let (fs, n, stats) = (self.fs.clone(), self.negotiated, self.stats.clone());
            let notifier = self.notifier.clone();
            let h = std::thread::Builder::new()
                .name(format!("augefs-fuse-{i}"))
                .spawn(move || serve_thread(&fs, &ch, n, &stats, &notifier))?;
            handles.push(h);
        }
        Ok(Running {
            handles,
            fs: self.fs.clone(),
        })
    }
}

/// Request threads serving in the background.
#[derive(Debug)]
pub struct Running {
    handles: Vec<JoinHandle<io::Result<()>>>,
    fs: Arc<AugeFuse>,
}

impl Running {
    /// Waits for every thread (they end when the kernel ends the session); the first
    /// error any of them met.
    pub fn join(self) -> io::Result<()> {
        let mut result = Ok(());
        for h in self.handles {
            let r = h
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("a request thread panicked")));
            result = result.and(r);
        }
        result
    }

    /// [`Running::join`], then ends the adapter's lock waits.
    pub fn join_and_shutdown(self) -> io::Result<()> {
        let fs = self.fs.clone();
        let r = self.join();
        fs.shutdown();
        r
    }
}

/// Errors of a /dev/fuse read after which the next read may succeed.
fn retry(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOENT | libc::EINTR | libc::EAGAIN)
    )
}

/// The INIT reply for the kernel's `arg` and the flags the adapter `wants`.
fn negotiate(arg: &abi::InitIn, wants: u64) -> io::Result<(abi::InitOut, Negotiated)> {
    if arg.major != abi::KERNEL_VERSION || arg.minor < 23 {
        return Err(io::Error::other(format!(
            "the kernel speaks FUSE {}.{}; augefs needs 7.23 or later",
            arg.major, arg.minor
        )));
    }
    let mut offered = u64::from(arg.flags);
    if offered & init::INIT_EXT != 0 {
        offered |= u64::from(arg.flags2) << 32;
    }
    let base = init::ASYNC_READ | init::BIG_WRITES | init::MAX_PAGES | init::INIT_EXT;
    let flags = (base | wants) & offered;
    let max_pages = if flags & init::MAX_PAGES != 0 {
        max_pages_limit().clamp(1, MAX_PAGES_CAP)
    } else {
        // Without FUSE_MAX_PAGES the kernel sends at most 32 pages per request.
        32
    };
    let max_write = max_pages * PAGE_BYTES;
    let out = abi::InitOut {
        major: abi::KERNEL_VERSION,
        minor: abi::KERNEL_MINOR_VERSION,
        max_readahead: arg.max_readahead,
        flags: flags as u32,
        flags2: (flags >> 32) as u32,
        max_background: MAX_BACKGROUND,
        congestion_threshold: MAX_BACKGROUND * 3 / 4,
        max_write,
        time_gran: 1,
        max_pages: u16::try_from(max_pages).expect("MAX_PAGES_CAP fits in u16"),
        ..abi::InitOut::default()
    };
    let negotiated = Negotiated {
        minor: arg.minor.min(abi::KERNEL_MINOR_VERSION),
        max_write,
        max_pages,
        flags,
    };
    Ok((out, negotiated))
}

/// One request thread: read, decode, dispatch, until the session ends; its counters
/// join `stats` at the end.
fn serve_thread(
    fs: &AugeFuse,
    ch: &Arc<Channel>,
    n: Negotiated,
    stats: &Stats,
    notifier: &Notifier,
) -> io::Result<()> {
    let mut counters = stats.thread();
    let r = serve_loop(fs, ch, n, &mut counters, notifier);
    stats.merge(counters);
    r
}

fn serve_loop(
    fs: &AugeFuse,
    ch: &Arc<Channel>,
    n: Negotiated,
    counters: &mut ThreadStats,
    notifier: &Notifier,
) -> io::Result<()> {
    let mut buf = vec![0u8; n.request_buffer_bytes()];
    let mut reply = ReplyBuf::new(n.reply_buffer_bytes());
    loop {
        let len = match ch.receive(&mut buf) {
            // End of file: not /dev/fuse's way, but a transport that closes (a test's).
            Ok(0) => return Ok(()),
            Ok(len) => len,
            Err(e) if retry(&e) => continue,
            Err(e) if e.raw_os_error() == Some(libc::ENODEV) => return Ok(()),
            Err(e) => return Err(e),
        };
        let bytes = &buf[..len];
        let stamp = counters.begin();
        match request::decode(bytes) {
            Ok(req) => {
                reply.begin(req.header.unique);
                let mut out = Out::new(&mut reply, Sink::Channel(ch), notifier);
                // The reply is written before the mark ends.
                let _kernel = fs.leases().kernel_call();
                fs.dispatch(&req, &mut out);
                out.check(&req.op);
                counters.end(req.header.opcode, stamp);
            }
            Err(e) => {
                eprintln!("augefs: malformed FUSE request: {e}");
                if let Ok(h) = request::header(bytes) {
                    reply.begin(h.unique);
                    send(ch, reply.finish(-libc::EINVAL));
                }
            }
        }
    }
}

fn send(ch: &Channel, bytes: &[u8]) {
    if let Err(e) = ch.send(bytes) {
        reply_failed(&e);
    }
}

/// Says that a reply could not be written, unless the session ended meanwhile
/// (ENODEV: the read loop sees it next).
fn reply_failed(e: &io::Error) {
    if e.raw_os_error() != Some(libc::ENODEV) {
        eprintln!("augefs: writing a FUSE reply: {e}");
    }
}

/// What became of a request once the adapter was done with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    Pending,
    Sent,
    NoReply,
    Deferred,
}

/// Where a reply goes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Sink<'a> {
    /// Written to this /dev/fuse descriptor at once.
    Channel(&'a Arc<Channel>),
    /// Left finished in the reply buffer: the ring transport commits it to entry
    /// `entry` of its thread, whose mailbox takes the reply if it is deferred.
    Ring {
        mailbox: &'a Arc<Mailbox>,
        entry: usize,
    },
}

/// Where the adapter answers one request.
#[derive(Debug)]
pub struct Out<'a> {
    buf: &'a mut ReplyBuf,
    sink: Sink<'a>,
    notifier: &'a Notifier,
    state: State,
}

impl<'a> Out<'a> {
    pub(crate) fn new(buf: &'a mut ReplyBuf, sink: Sink<'a>, notifier: &'a Notifier) -> Out<'a> {
        Out {
            buf,
            sink,
            notifier,
            state: State::Pending,
        }
    }

    fn done(&mut self, s: State) {
        assert_eq!(self.state, State::Pending, "a request answered twice");
        self.state = s;
    }

    /// The reply buffer, to push a payload into before [`Out::send_payload`].
    pub fn buf(&mut self) -> &mut ReplyBuf {
        self.buf
    }

    fn finish(&mut self, error: i32) {
        let bytes = self.buf.finish(error);
        if let Sink::Channel(ch) = self.sink {
            send(ch, bytes);
        }
    }

    /// Success with what was pushed into [`Out::buf`].
    pub fn send_payload(&mut self) {
        self.done(State::Sent);
        self.finish(0);
    }

    /// Success with `view` as the payload, written from the cache's own blocks where
    /// this transport writes replies itself (/dev/fuse: one writev, no copy into the
    /// reply buffer); false, and nothing sent, where it cannot (the ring transport reads
    /// replies out of its buffer, or the pieces are too many): the caller copies.
    pub fn send_view(&mut self, view: &vfs::ReadView) -> bool {
        let Sink::Channel(ch) = self.sink else {
            return false;
        };
        let h = self.buf.header_of_payload(view.len());
        let head = crate::proto::abi::bytes_of(&h);
        match ch.send_parts(std::iter::once(head).chain(view.slices())) {
            Ok(false) => false,
            sent => {
                self.done(State::Sent);
                if let Err(e) = sent {
                    reply_failed(&e);
                }
                true
            }
        }
    }

    /// Success with `v` as the payload.
    pub fn send<T: Pod>(&mut self, v: &T) {
        self.buf.push(v);
        self.send_payload();
    }

    /// Success without a payload.
    pub fn ok(&mut self) {
        self.send_payload();
    }

    /// Failure with `errno` (positive).
    pub fn error(&mut self, errno: i32) {
        assert!(errno > 0, "errno {errno}");
        self.done(State::Sent);
        self.finish(-errno);
    }

    /// Tells the kernel, before this reply, that its cached attributes of `ino` are
    /// stale (a change the kernel did not make itself, such as set-id bits a flagged
    /// write dropped). Attributes only: no page is invalidated, so nothing the request
    /// holds is waited for.
    pub fn inval_attrs(&mut self, ino: u64) {
        if let Err(e) = self.notifier.inval_attrs(ino) {
            eprintln!("augefs: invalidating the kernel's attributes of {ino}: {e}");
        }
    }

    /// The request takes no reply (FORGET, BATCH_FORGET, INTERRUPT).
    pub fn no_reply(&mut self) {
        self.done(State::NoReply);
    }

    /// The reply will be sent later, from another thread.
    pub fn defer(&mut self, unique: u64) -> Deferred {
        self.done(State::Deferred);
        let to = match self.sink {
            Sink::Channel(ch) => DeferredTo::Channel(ch.clone()),
            Sink::Ring { mailbox, entry } => DeferredTo::Ring(mailbox.clone(), entry),
        };
        Deferred { to, unique }
    }

    /// What became of the request.
    pub(crate) fn state(&self) -> State {
        self.state
    }

    pub(crate) fn check(&self, op: &Op<'_>) {
        let silent = matches!(op, Op::Forget(_) | Op::BatchForget(_) | Op::Interrupt(_));
        assert!(
            match self.state {
                State::Pending => false,
                State::NoReply => silent,
                State::Sent | State::Deferred => !silent,
            },
            "request {op:?} left in state {:?}",
            self.state
        );
    }
}

/// Where a deferred reply goes: the descriptor its request came from, or the ring
/// thread (its mailbox) that holds the request's entry.
#[derive(Debug)]
enum DeferredTo {
    Channel(Arc<Channel>),
    Ring(Arc<Mailbox>, usize),
}

/// A reply owed to the kernel, sent from another thread (a lock wait's).
#[derive(Debug)]
pub struct Deferred {
    to: DeferredTo,
    unique: u64,
}

impl Deferred {
    /// Sends the reply: `Ok` with `payload`, or the errno.
    pub fn reply(self, r: Result<&[u8], i32>) {
        let mut buf = ReplyBuf::new(64);
        buf.begin(self.unique);
        let bytes = match r {
            Ok(p) => {
                buf.push_bytes(p);
                buf.finish(0)
            }
            Err(e) => buf.finish(-e),
        };
        match &self.to {
            DeferredTo::Channel(ch) => send(ch, bytes),
            DeferredTo::Ring(mailbox, entry) => mailbox.post(*entry, bytes),
        }
    }
}

/// Where Linux turns FUSE over io_uring on and off (compiled in, off by default).
const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";

/// The kernel did not offer FUSE over io_uring: when that is its switch being off (the
/// default), says how to turn it on, since the ring is the faster transport.
fn say_why_no_ring() {
    if std::fs::read_to_string(ENABLE_URING).is_ok_and(|v| v.trim() == "N") {
        eprintln!(
            "augefs: FUSE over io_uring is off in this kernel ({ENABLE_URING} is N); \
             as root, `echo Y > {ENABLE_URING}` before mounting serves requests faster"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_agrees_on_what_both_sides_offer() {
        let arg = abi::InitIn {
            major: 7,
            minor: 45,
            max_readahead: 1 << 17,
            flags: (init::ASYNC_READ | init::POSIX_LOCKS | init::MAX_PAGES | init::INIT_EXT) as u32,
            ..abi::InitIn::default()
        };
        let (out, n) = negotiate(&arg, init::POSIX_LOCKS | init::FLOCK_LOCKS).unwrap();
        assert_eq!((out.major, out.minor), (7, abi::KERNEL_MINOR_VERSION));
        let flags = u64::from(out.flags);
        assert!(flags & init::POSIX_LOCKS != 0 && flags & init::FLOCK_LOCKS == 0);
        assert_eq!(out.max_write, n.max_pages * PAGE_BYTES);
        assert!(n.max_pages >= 1 && n.max_pages <= MAX_PAGES_CAP);
        assert!(n.request_buffer_bytes() >= n.max_write as usize + 80);
        let old = abi::InitIn {
            major: 7,
            minor: 22,
            ..abi::InitIn::default()
        };
        assert!(negotiate(&old, 0).is_err());
    }

    #[test]
    fn flags2_bits_are_negotiated_through_the_extension() {
        let mmap = init::DIRECT_IO_ALLOW_MMAP;
        let offered = |flags2: u64| abi::InitIn {
            major: 7,
            minor: 45,
            flags: (init::ASYNC_READ | init::INIT_EXT) as u32,
            flags2: (flags2 >> 32) as u32,
            ..abi::InitIn::default()
        };
        let (out, n) = negotiate(&offered(mmap), mmap).unwrap();
        assert_eq!(
            u64::from(out.flags2) << 32,
            mmap,
            "asked and offered: granted"
        );
        assert_ne!(n.flags & mmap, 0);
        let (out, _) = negotiate(&offered(0), mmap).unwrap();
        assert_eq!(
            out.flags2, 0,
            "a kernel without it (before 6.6) is not sent it"
        );
        let (out, _) = negotiate(&offered(mmap), 0).unwrap();
        assert_eq!(out.flags2, 0, "not asked for");
    }
}
