//! FUSE over io_uring (protocol 7.42; the kernel's
//! Documentation/filesystems/fuse-io-uring.rst): requests come through ring entries
//! instead of read(2) and write(2) on /dev/fuse. The kernel keeps a queue per CPU it may
//! run on and puts a request on the queue of the CPU its caller runs on; each queue
//! thread here (one or more per queue, pinned to its CPU) owns an io_uring and a few
//! entries of that queue, so a queue serves as many requests at once as it has threads.
//! An entry
//! is a header area (the request's header, the opcode's argument struct, the entry's
//! fields) and a payload buffer (the rest of the arguments; the reply), registered once
//! (FUSE_IO_URING_CMD_REGISTER, a 128-byte SQE on the /dev/fuse descriptor); its
//! command completes when a request is in it, and COMMIT_AND_FETCH sends the reply and
//! waits for the next request in one system call. The ring is used once every queue
//! has an entry; until then, and for FORGET, INTERRUPT and notifications always, the
//! /dev/fuse descriptor serves (`crate::session`).
//!
//! Invariants:
//! - An entry's buffers never move and live until the ring is gone (the ring is
//!   dropped first): the kernel writes a request into them during this thread's
//!   io_uring_enter, and reads the reply during the next.
//! - A request's reply is committed to the entry it came in. A request whose reply
//!   is deferred (a waiting SETLKW) keeps its entry until the reply comes through the
//!   thread's [`Mailbox`]; meanwhile a new entry takes its place on the queue, so a
//!   queue never runs out of entries while replies wait (at most one per waiter).
//! - No allocation per request: a READ's data is read into the entry's payload, which
//!   the reply goes out of; a reply to a request whose arguments are still in the
//!   payload is built in the thread's scratch buffer and copied (a few hundred bytes;
//!   64 KiB at most, an attribute's value).

use crate::adapter::AugeFuse;
use crate::constants::{RING_DEPTH, RING_ENTRIES_PER_THREAD};
use crate::notify::Notifier;
use crate::proto::abi::{self, uring_cmd, InHeader, UringCmdReq, UringEntInOut};
use crate::proto::reply::ReplyBuf;
use crate::proto::request::{self, Request};
use crate::session::{Out, Sink, State};
use crate::stats::ThreadStats;
use io_uring::{cqueue, opcode, squeue, types, IoUring};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};

/// The `user_data` of the eventfd read that wakes a queue thread for its mailbox.
const MAILBOX_TAG: u64 = u64::MAX;

/// Replies to requests of a queue thread's entries that came from other threads (a
/// SETLKW's waiter), and the eventfd that wakes the thread for them.
#[derive(Debug)]
pub struct Mailbox {
    replies: Mutex<Vec<(usize, Vec<u8>)>>,
    event: OwnedFd,
}

impl Mailbox {
    fn new() -> io::Result<Mailbox> {
        // SAFETY: eventfd has no memory arguments; a non-negative result is ours.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Mailbox {
            replies: Mutex::new(Vec::new()),
            // SAFETY: just created, owned by nothing else.
            event: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Hands the reply `bytes` (header and payload) for entry `entry` to its thread.
    pub(crate) fn post(&self, entry: usize, bytes: &[u8]) {
        self.replies
            .lock()
            .expect("mailbox lock")
            .push((entry, bytes.to_vec()));
        let one = 1u64;
        // SAFETY: writes 8 bytes from a live u64 to our eventfd.
        let r = unsafe { libc::write(self.event.as_raw_fd(), (&one as *const u64).cast(), 8) };
        assert_eq!(r, 8, "eventfd write: {}", io::Error::last_os_error());
    }

    fn take(&self) -> Vec<(usize, Vec<u8>)> {
        std::mem::take(&mut *self.replies.lock().expect("mailbox lock"))
    }
}

/// The kernel's queues: one per CPU it may run on (`num_possible_cpus`), read from
/// /sys/devices/system/cpu/possible (`0-3`, `0,2-5`).
pub fn queue_count() -> io::Result<usize> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    let bad = || io::Error::other(format!("cannot parse the possible CPUs {text:?}"));
    let mut highest = 0usize;
    for part in text.trim().split(',') {
        let last = part.rsplit('-').next().ok_or_else(bad)?;
        highest = highest.max(last.parse().map_err(|_| bad())?);
    }
    Ok(highest + 1)
}

/// `fuse_uring_req_header`: where the kernel puts a request's header, argument struct
/// and the entry's fields, and reads the reply's header and payload size.
#[repr(C, align(64))]
struct Headers {
    in_out: [u8; abi::URING_IN_OUT_HEADER_BYTES],
    op_in: [u8; abi::URING_OP_IN_OUT_BYTES],
    ent: UringEntInOut,
}

const _: () = assert!(
    std::mem::offset_of!(Headers, ent) + std::mem::size_of::<UringEntInOut>()
        == abi::URING_REQ_HEADER_BYTES
);

/// One ring entry.
struct Entry {
    headers: Box<Headers>,
    payload: ReplyBuf,
    /// The two buffers as the REGISTER command names them.
    iov: Box<[libc::iovec; 2]>,
    /// The request in the entry (its reply's commit id).
    commit_id: u64,
    /// Its reply is deferred: the entry waits for the mailbox.
    parked: bool,
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry")
            .field("commit_id", &self.commit_id)
            .field("parked", &self.parked)
            .finish()
    }
}

impl Entry {
    fn new(payload_bytes: usize) -> Entry {
        let mut headers = Box::new(Headers {
            in_out: [0; abi::URING_IN_OUT_HEADER_BYTES],
            op_in: [0; abi::URING_OP_IN_OUT_BYTES],
            ent: UringEntInOut::default(),
        });
        let mut payload = ReplyBuf::new(payload_bytes);
        let (base, len) = payload.payload_area();
        let iov = Box::new([
            libc::iovec {
                iov_base: (&mut *headers as *mut Headers).cast(),
                iov_len: abi::URING_REQ_HEADER_BYTES,
            },
            libc::iovec {
                iov_base: base.cast(),
                iov_len: len,
            },
        ]);
        Entry {
            headers,
            payload,
            iov,
            commit_id: 0,
            parked: false,
        }
    }
}

/// What a queue thread serves: which queue, on which descriptor, with what buffers.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QueueSpec {
    pub qid: u16,
    pub dev_fd: RawFd,
    /// At least the kernel's largest request or reply payload (`max_write`,
    /// `max_pages` pages).
    pub payload_bytes: usize,
    /// Room for a reply built apart from the entry (an attribute's value).
    pub scratch_bytes: usize,
    /// Run on the queue's CPU only.
    pub pin: bool,
}

/// A 128-byte SQE of FUSE's io_uring command `cmd_op` for entry `tag`.
fn fuse_cmd(
    spec: &QueueSpec,
    cmd_op: u32,
    commit_id: u64,
    iov: Option<*const libc::iovec>,
    tag: u64,
) -> squeue::Entry128 {
    let req = UringCmdReq {
        commit_id,
        qid: spec.qid,
        ..UringCmdReq::default()
    };
    let mut cmd = [0u8; 80];
    cmd[..std::mem::size_of::<UringCmdReq>()].copy_from_slice(abi::bytes_of(&req));
    let mut op = opcode::UringCmd80::new(types::Fd(spec.dev_fd), cmd_op).cmd(cmd);
    if let Some(iov) = iov {
        op = op.addr(Some(iov as u64));
    }
    let sqe = op.build().user_data(tag);
    if iov.is_none() {
        return sqe;
    }
    // The kernel wants the iovec count (2) in the SQE's `len`, which the command
    // builder does not set: bytes 24..28 of the SQE (struct io_uring_sqe).
    // SAFETY: Entry128 is repr(C) and 128 bytes, the kernel's SQE; every byte is an
    // initialized integer, so it round-trips through a byte array.
    let mut raw: [u8; 128] = unsafe { std::mem::transmute(sqe) };
    raw[24..28].copy_from_slice(&2u32.to_ne_bytes());
    // SAFETY: as above.
    unsafe { std::mem::transmute::<[u8; 128], squeue::Entry128>(raw) }
}

const _: () = assert!(std::mem::size_of::<squeue::Entry128>() == 128);

/// Pins the calling thread to `cpu`.
fn pin_to(cpu: usize) -> io::Result<()> {
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: CPU_SET writes one bit of `set`, within its size for cpu < CPU_SETSIZE.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is live for the call and its size is passed.
    let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// One queue thread's state.
struct Queue<'a> {
    fs: &'a AugeFuse,
    spec: QueueSpec,
    notifier: &'a Notifier,
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
    /// Entries move when this grows; the buffers their commands name do not (boxed).
    entries: Vec<Entry>,
    mailbox: Arc<Mailbox>,
    scratch: ReplyBuf,
    /// The eventfd read's target.
    wakeup: Box<u64>,
    /// Requests served whose replies are not submitted yet (vfs::leases).
    kernel_calls: u64,
}

impl Queue<'_> {
    fn push(&mut self, sqe: &squeue::Entry128) {
        // SAFETY: every buffer an SQE names (an entry's iovec and buffers, the wakeup
        // counter) is boxed in `self` and outlives the ring, which is dropped first.
        let r = unsafe { self.ring.submission().push(sqe) };
        r.expect("the submission queue holds an SQE per entry and one more");
    }

    /// Registers a new entry (its command completes with the entry's first request).
    fn register_new(&mut self) {
        let entry = Entry::new(self.spec.payload_bytes);
        let tag = self.entries.len() as u64;
        let sqe = fuse_cmd(
            &self.spec,
            uring_cmd::REGISTER,
            0,
            Some(entry.iov.as_ptr()),
            tag,
        );
        self.entries.push(entry);
        self.push(&sqe);
    }

    fn arm_mailbox(&mut self) {
        let target: *mut u64 = &mut *self.wakeup;
        let sqe = opcode::Read::new(types::Fd(self.mailbox.event.as_raw_fd()), target.cast(), 8)
            .build()
            .user_data(MAILBOX_TAG);
        self.push(&sqe.into());
    }

    /// Sends entry `i`'s finished reply (its header, and the payload already in the
    /// entry) and asks for the entry's next request.
    fn commit(&mut self, i: usize) {
        let e = &mut self.entries[i];
        let head = e.payload.header();
        e.headers.in_out[..16].copy_from_slice(abi::bytes_of(&head));
        e.headers.ent.payload_sz = head.len - std::mem::size_of::<abi::OutHeader>() as u32;
        let sqe = fuse_cmd(
            &self.spec,
            uring_cmd::COMMIT_AND_FETCH,
            e.commit_id,
            None,
            i as u64,
        );
        self.push(&sqe);
    }

    /// Serves the request in entry `i`; what became of it.
    fn handle(&mut self, i: usize, counters: &mut ThreadStats) -> State {
        let sink = Sink::Ring {
            mailbox: &self.mailbox,
            entry: i,
        };
        let e = &mut self.entries[i];
        let ent = e.headers.ent;
        e.commit_id = ent.commit_id;
        let len = (ent.payload_sz as usize).min(self.spec.payload_bytes);
        let stamp = counters.begin();
        let req = request::decode_ring(
            &e.headers.in_out,
            &e.headers.op_in,
            e.payload.payload_bytes(len),
        );
        let req = match req {
            Ok(r) => r,
            Err(err) => {
                eprintln!("augefs: malformed FUSE request: {err}");
                let unique = abi::read::<InHeader>(&e.headers.in_out).map_or(0, |h| h.unique);
                e.payload.begin(unique);
                e.payload.finish(-libc::EINVAL);
                return State::Sent;
            }
        };
        let (header, opcode) = (req.header, req.header.opcode);
        // Ended once the commit of the reply was submitted (serve_queue).
        self.fs.leases().begin_kernel();
        self.kernel_calls += 1;
        let state = match req.op.detached() {
            // Nothing of the request is in the payload any more: the reply is built
            // there (a READ's data in place).
            Some(op) => {
                let req = Request { header, op };
                e.payload.begin(header.unique);
                let mut out = Out::new(&mut e.payload, sink, self.notifier);
                self.fs.dispatch(&req, &mut out);
                out.check(&req.op);
                out.state()
            }
            None => {
                self.scratch.begin(header.unique);
                let mut out = Out::new(&mut self.scratch, sink, self.notifier);
                self.fs.dispatch(&req, &mut out);
                out.check(&req.op);
                let state = out.state();
                if state == State::Sent {
                    e.payload.copy_reply(&self.scratch);
                }
                state
            }
        };
        counters.end(opcode, stamp);
        match state {
            State::Sent | State::Deferred => state,
            // Nothing that takes no reply comes through a ring (FORGET and INTERRUPT
            // come through /dev/fuse); the entry must still be given back.
            State::NoReply | State::Pending => {
                e.payload.begin(header.unique);
                e.payload.finish(-libc::ENOSYS);
                State::Sent
            }
        }
    }

    /// Submits the commits of the replies served since the last submit: only then are
    /// their calls over for the kernel (vfs::leases).
    fn end_kernel_calls(&mut self) -> io::Result<()> {
        if self.kernel_calls == 0 {
            return Ok(());
        }
        loop {
            match self.ring.submit() {
                Ok(_) => break,
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) => return Err(e),
            }
        }
        self.fs
            .leases()
            .end_kernel(std::mem::take(&mut self.kernel_calls));
        Ok(())
    }

    /// Commits the replies the mailbox holds.
    fn deliver_mail(&mut self) {
        for (i, bytes) in self.mailbox.take() {
            let e = &mut self.entries[i];
            assert!(
                e.parked,
                "a deferred reply for entry {i}, which waits for none"
            );
            e.parked = false;
            e.payload.set_reply(&bytes);
            self.commit(i);
        }
        self.arm_mailbox();
    }
}

/// Errors of an entry's command that mean the session is over.
fn session_ended(errno: i32) -> bool {
    matches!(
        errno,
        libc::ENOTCONN | libc::ECONNABORTED | libc::ENODEV | libc::ECANCELED
    )
}

/// Serves queue `spec.qid` until the session ends. `registered` is told, once, whether
/// the kernel took the entries (else the thread returns at once with the error).
pub(crate) fn serve_queue(
    fs: &AugeFuse,
    spec: QueueSpec,
    notifier: &Notifier,
    counters: &mut ThreadStats,
    registered: impl FnOnce(Result<(), String>),
) -> io::Result<()> {
    let start = (|| -> io::Result<Queue<'_>> {
        // A CPU that is possible but not online refuses the pin; its queue still needs
        // entries (the kernel uses the ring only once every queue has one) and its
        // thread serves them from wherever it runs.
        if spec.pin && pin_to(usize::from(spec.qid)).is_err() {
            eprintln!("augefs: FUSE ring queue {} runs unpinned", spec.qid);
        }
        let ring = IoUring::<squeue::Entry128, cqueue::Entry>::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .build(RING_DEPTH)?;
        Ok(Queue {
            fs,
            spec,
            notifier,
            ring,
            entries: Vec::new(),
            mailbox: Arc::new(Mailbox::new()?),
            scratch: ReplyBuf::new(spec.scratch_bytes),
            wakeup: Box::new(0),
            kernel_calls: 0,
        })
    })();
    let mut q = match start {
        Ok(q) => q,
        Err(e) => {
            registered(Err(e.to_string()));
            return Err(e);
        }
    };
    for _ in 0..RING_ENTRIES_PER_THREAD {
        q.register_new();
    }
    q.arm_mailbox();
    // A REGISTER the kernel refuses completes at once; one it takes completes with
    // the entry's first request.
    let mut cqes: Vec<(u64, i32)> = Vec::with_capacity(RING_DEPTH as usize * 2);
    let mut work: Vec<(u64, i32)> = Vec::with_capacity(RING_DEPTH as usize * 2);
    let refused = q.ring.submit().err().map(|e| e.to_string()).or_else(|| {
        cqes.extend(q.ring.completion().map(|c| (c.user_data(), c.result())));
        cqes.iter()
            .find(|&&(tag, res)| tag != MAILBOX_TAG && res < 0)
            .map(|&(_, res)| io::Error::from_raw_os_error(-res).to_string())
    });
    match refused {
        Some(why) => {
            registered(Err(why.clone()));
            return Err(io::Error::other(why));
        }
        None => registered(Ok(())),
    }
    loop {
        std::mem::swap(&mut cqes, &mut work);
        for (tag, res) in work.drain(..) {
            if tag == MAILBOX_TAG {
                if res < 0 && session_ended(-res) {
                    return Ok(());
                }
                q.deliver_mail();
                continue;
            }
            if res < 0 {
                if session_ended(-res) {
                    return Ok(());
                }
                return Err(io::Error::from_raw_os_error(-res));
            }
            let i = tag as usize;
            match q.handle(i, counters) {
                State::Deferred => {
                    q.entries[i].parked = true;
                    q.register_new();
                }
                _ => q.commit(i),
            }
        }
        q.end_kernel_calls()?;
        match q.ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
            Err(e) => return Err(e),
        }
        cqes.extend(q.ring.completion().map(|c| (c.user_data(), c.result())));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queues_are_counted_from_the_possible_cpus() {
        let n = queue_count().expect("possible CPUs");
        assert!(n >= 1);
        let online = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert!(n >= online, "{n} possible CPUs, {online} online");
    }

    #[test]
    fn a_register_command_carries_its_iovec_count_and_queue() {
        let spec = QueueSpec {
            qid: 3,
            dev_fd: 9,
            payload_bytes: 4096,
            scratch_bytes: 4096,
            pin: false,
        };
        let entry = Entry::new(4096);
        let sqe = fuse_cmd(&spec, uring_cmd::REGISTER, 0, Some(entry.iov.as_ptr()), 5);
        // SAFETY: as in fuse_cmd.
        let raw: [u8; 128] = unsafe { std::mem::transmute(sqe) };
        let word = |at: usize| u32::from_ne_bytes(raw[at..at + 4].try_into().unwrap());
        let quad = |at: usize| u64::from_ne_bytes(raw[at..at + 8].try_into().unwrap());
        assert_eq!(word(4), 9, "fd");
        assert_eq!(quad(16), entry.iov.as_ptr() as u64, "addr");
        assert_eq!(word(24), 2, "len: two iovecs");
        assert_eq!(quad(32), 5, "user_data");
        // The command area starts at byte 48: fuse_uring_cmd_req.
        let req: UringCmdReq = abi::read(&raw[48..]).unwrap();
        assert_eq!((req.qid, req.commit_id), (3, 0));
        assert_eq!(entry.iov[0].iov_len, 288);
        assert!(entry.iov[1].iov_len >= 4096);
    }
}
