//! A connection's messages: frames on its socket, and, when the client could protect
//! it, a **mailbox** in shared memory that carries them instead, so that a round trip
//! while both sides are awake needs no system call (augefs.txt §IV; the shared-memory
//! rings of uFS).
//!
//! The instance makes one memfd per connection and sends it to the client, which maps
//! it read-write under its protection key (`crate::pkey`). Layout: a header page with
//! the client's words and the instance's words each in a cache line of their own
//! (`sent`: messages posted; `len`: the last one's length; `taken`: the peer's messages
//! copied out; `asleep`: sleeping on the socket), then the request area and the reply
//! area, [`AREA_BYTES`] each.
//!
//! A sender posts a message that fits: its bytes, its length, then `sent` + 1; then,
//! if the receiver said it sleeps, it rings: an empty frame on the socket. A message
//! that does not fit goes on the socket as a frame. A receiver waits on both: it spins
//! a while on `sent` (checking the socket now and then; `crate::spin`), then says it
//! sleeps, looks once more, and sleeps in poll on the socket.
//!
//! Invariants:
//! - One message is in flight each way: a sender posts only after the receiver took
//!   the last one (`taken`); the client sends one request at a time per connection.
//! - A receiver copies a message out before using it, after checking its length
//!   against the area: the instance never decodes the client's memory in place (the
//!   client may change it at any time), and a lying length ends the connection.
//! - A sleeper stores `asleep` then loads `sent`; a sender stores `sent` then loads
//!   `asleep` (all SeqCst): one of them sees the other, so no message waits unnoticed.
//!   An empty frame is a ring and nothing else (no request or reply is empty).

use crate::pkey::Window;
use crate::shm::{Mapping, PAGE};
use crate::spin::Spinner;
use crate::FRAME_BYTES_MAX;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Room for one message each way (a message is a frame's body).
pub const AREA_BYTES: usize = 128 * 1024;
const MAGIC: u64 = 0x6175_6765_6d62_7831;
const MAILBOX_BYTES: usize = PAGE + 2 * AREA_BYTES;

/// One side's words.
#[repr(C, align(64))]
struct Side {
    sent: AtomicU32,
    len: AtomicU32,
    taken: AtomicU32,
    asleep: AtomicU32,
}

#[repr(C)]
struct Header {
    magic: AtomicU64,
    client: Side,
    instance: Side,
}

const _: () = assert!(std::mem::size_of::<Header>() <= PAGE);

/// One connection's mailbox, as the instance or the client sees it.
#[derive(Debug)]
pub struct Mailbox {
    map: Mapping,
    fd: Option<OwnedFd>,
    /// This side is the client (it sends into the request area).
    client: bool,
    /// The client writes it too (requests, `taken`, `asleep`); else the client maps it
    /// read-only and only replies go through it.
    writable: bool,
    /// The client's protection key (its accesses open a window).
    key: Option<u32>,
}

impl Mailbox {
    /// The instance's side of a new mailbox; not `writable`: sealed against writable
    /// mappings, for replies only.
    pub fn create(writable: bool) -> posix::Result<Mailbox> {
        let (fd, map) = Mapping::create(c"augefs-mailbox", MAILBOX_BYTES, !writable)?;
        let m = Mailbox {
            map,
            fd: Some(fd),
            client: false,
            writable,
            key: None,
        };
        m.header().magic.store(MAGIC, Ordering::Release);
        Ok(m)
    }

    /// The client's side of the mailbox the instance sent: `writable` and tagged with
    /// `key` (None: unprotected, as asked by [`crate::client::Transport::Unprotected`]),
    /// or read-only (replies only).
    pub fn attach(fd: OwnedFd, writable: bool, key: Option<u32>) -> posix::Result<Mailbox> {
        let map = Mapping::map(fd.as_raw_fd(), MAILBOX_BYTES, writable)?;
        let key = key.filter(|_| writable);
        if let Some(key) = key {
            crate::pkey::protect(map.at() as usize, map.len(), key)
                .map_err(|e| posix::Errno(e.raw_os_error().unwrap_or(libc::EIO)))?;
        }
        let m = Mailbox {
            map,
            fd: None,
            client: true,
            writable,
            key,
        };
        let _w = Window::open(m.key);
        if m.header().magic.load(Ordering::Acquire) != MAGIC {
            return Err(posix::Errno(libc::EPROTO));
        }
        Ok(m)
    }

    pub fn fd(&self) -> Option<RawFd> {
        self.fd.as_ref().map(AsRawFd::as_raw_fd)
    }

    /// Where the mapping starts, and its length.
    pub fn region(&self) -> (usize, usize) {
        (self.map.at() as usize, self.map.len())
    }

    /// Whether this side posts its messages here (else on the socket).
    fn posts(&self) -> bool {
        self.writable || !self.client
    }

    /// Whether the other side posts its messages here.
    fn peer_posts(&self) -> bool {
        self.writable || self.client
    }

    fn header(&self) -> &Header {
        // SAFETY: the mapping starts with a page holding a Header (zeroed memory is a
        // valid one), aligned as mmap aligns.
        unsafe { &*self.map.at().cast::<Header>() }
    }

    fn mine(&self) -> &Side {
        let h = self.header();
        if self.client {
            &h.client
        } else {
            &h.instance
        }
    }

    fn peers(&self) -> &Side {
        let h = self.header();
        if self.client {
            &h.instance
        } else {
            &h.client
        }
    }

    /// The area this side sends into (`out`) or receives from.
    fn area(&self, out: bool) -> *mut u8 {
        let requests = out == self.client;
        let at = PAGE + if requests { 0 } else { AREA_BYTES };
        // SAFETY: both areas lie inside the mapping (MAILBOX_BYTES).
        unsafe { self.map.at().add(at) }
    }
}

/// Frames read from a socket, buffered: a reader may get more than a frame in one read
/// (a request right after a close that has no reply, a ring before a frame).
#[derive(Debug, Default)]
pub struct Frames {
    buf: Vec<u8>,
    /// The buffered bytes are `buf[at..end]`.
    at: usize,
    end: usize,
}

/// Bytes asked of one read.
const READ_BYTES: usize = 64 * 1024;

impl Frames {
    /// Buffers at least `n` bytes: false at a clean end of the stream before any.
    fn fill(&mut self, mut stream: &UnixStream, n: usize) -> std::io::Result<bool> {
        if self.end - self.at >= n {
            return Ok(true);
        }
        if self.at > 0 {
            self.buf.copy_within(self.at..self.end, 0);
            self.end -= self.at;
            self.at = 0;
        }
        if self.buf.len() < n.max(READ_BYTES) {
            self.buf.resize(n.max(READ_BYTES), 0);
        }
        while self.end < n {
            match stream.read(&mut self.buf[self.end..]) {
                Ok(0) if self.end == 0 => return Ok(false),
                Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                Ok(k) => self.end += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Whether a whole frame is buffered already.
    pub fn has_frame(&self) -> bool {
        let b = &self.buf[self.at..self.end];
        b.len() >= 4 && b.len() - 4 >= u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize
    }

    /// The next frame's body (empty: a ring): None at a clean end of the stream.
    pub fn next(&mut self, stream: &UnixStream) -> std::io::Result<Option<&[u8]>> {
        Ok(self.next_range(stream)?.map(|r| &self.buf[r]))
    }

    /// [`Frames::next`], as where its body lies in the buffer.
    fn next_range(
        &mut self,
        stream: &UnixStream,
    ) -> std::io::Result<Option<std::ops::Range<usize>>> {
        if !self.fill(stream, 4)? {
            return Ok(None);
        }
        let h = &self.buf[self.at..self.at + 4];
        let len = u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize;
        if len > FRAME_BYTES_MAX {
            return Err(std::io::Error::from_raw_os_error(libc::E2BIG));
        }
        if !self.fill(stream, 4 + len)? {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let body = self.at + 4..self.at + 4 + len;
        self.at = body.end;
        Ok(Some(body))
    }
}

/// Whether `fd` has input (or an end) within `timeout_ms` (-1: however long).
pub(crate) fn readable(fd: RawFd, timeout_ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, timeout_ms) != 0 }
}

/// Where the next message is.
enum Arrived {
    Mailbox,
    Socket,
}

/// One end of a connection: its socket, and its mailbox once it has one.
#[derive(Debug)]
pub struct Conn {
    pub stream: UnixStream,
    frames: Frames,
    mailbox: Option<Mailbox>,
    /// Messages of the peer taken from the mailbox.
    seen: u32,
    /// The last message taken from the mailbox, copied out.
    msg: Vec<u8>,
    spinner: Spinner,
    /// A read-only client asked to be rung for the message it waits for.
    ring_asked: bool,
}

fn broken() -> std::io::Error {
    std::io::Error::from_raw_os_error(libc::EPROTO)
}

impl Conn {
    pub fn new(stream: UnixStream) -> Conn {
        Conn {
            stream,
            frames: Frames::default(),
            mailbox: None,
            seen: 0,
            msg: Vec::new(),
            spinner: Spinner::new(crate::spin()),
            ring_asked: false,
        }
    }

    /// The instance's end of a connection: its waits spin only in one of the
    /// instance's spin slots (`crate::spin`).
    pub fn for_instance(stream: UnixStream) -> Conn {
        Conn {
            spinner: Spinner::for_instance(crate::spin()),
            ..Conn::new(stream)
        }
    }

    /// From now on messages that fit go through `m`.
    pub fn set_mailbox(&mut self, m: Mailbox) {
        self.mailbox = Some(m);
    }

    pub fn mailbox(&self) -> Option<&Mailbox> {
        self.mailbox.as_ref()
    }

    /// Sends one message: `frame` (a frame from `Writer::finish`, its length word
    /// first) and `extra` bytes that follow it.
    pub fn send(&mut self, frame: &[u8], extra: &[u8]) -> std::io::Result<()> {
        let body = frame.len() - 4 + extra.len();
        if let Some(m) = &self.mailbox {
            if m.posts() && body > 0 && body <= AREA_BYTES {
                let _w = Window::open(m.key);
                // The peer took the last message (a request without a reply, or a
                // reply not yet read: never, a client reads every reply first; a
                // read-only client reports nothing, and needs not).
                if m.writable {
                    self.wait_taken(m)?;
                }
                let to = m.area(true);
                // SAFETY: `body` bytes fit the area (checked above); the peer does not
                // read it until `sent` moves (it took the last message).
                unsafe {
                    std::ptr::copy_nonoverlapping(frame[4..].as_ptr(), to, frame.len() - 4);
                    std::ptr::copy_nonoverlapping(
                        extra.as_ptr(),
                        to.add(frame.len() - 4),
                        extra.len(),
                    );
                }
                let me = m.mine();
                me.len.store(body as u32, Ordering::Relaxed);
                me.sent.fetch_add(1, Ordering::SeqCst);
                // A read-only client asks to be rung with an empty frame instead.
                if m.writable && m.peers().asleep.load(Ordering::SeqCst) != 0 {
                    (&self.stream).write_all(&0u32.to_le_bytes())?;
                }
                return Ok(());
            }
        }
        // A read-only client that will sleep for the reply asks for its ring with the
        // request (an empty frame after it): the instance finds it buffered at once
        // after posting the reply.
        let ring: &[u8] = match &self.mailbox {
            Some(m) if m.client && !m.writable && !self.spinner.will_spin() => {
                self.ring_asked = true;
                &[0; 4]
            }
            _ => &[],
        };
        let mut parts = [
            std::io::IoSlice::new(frame),
            std::io::IoSlice::new(extra),
            std::io::IoSlice::new(ring),
        ];
        let mut bufs = &mut parts[..];
        while !bufs.is_empty() {
            match (&self.stream).write_vectored(bufs) {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => std::io::IoSlice::advance_slices(&mut bufs, n),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Waits until the peer took this side's last message.
    fn wait_taken(&self, m: &Mailbox) -> std::io::Result<()> {
        let me = m.mine();
        let mut turns = 0u32;
        while m.peers().taken.load(Ordering::Acquire) != me.sent.load(Ordering::Relaxed) {
            turns += 1;
            if turns % 64 == 0 {
                std::thread::yield_now();
                let mut p = libc::pollfd {
                    fd: self.stream.as_raw_fd(),
                    events: libc::POLLRDHUP,
                    revents: 0,
                };
                // SAFETY: one valid pollfd; a zero timeout never sleeps.
                if unsafe { libc::poll(&mut p, 1, 0) } > 0 && p.revents != 0 {
                    return Err(std::io::ErrorKind::BrokenPipe.into());
                }
            } else {
                std::hint::spin_loop();
            }
        }
        Ok(())
    }

    /// Whether the peer posted a message not yet taken.
    fn posted(&self, m: &Mailbox) -> bool {
        m.peers().sent.load(Ordering::SeqCst) != self.seen
    }

    /// Waits for the next message, in the mailbox or on the socket.
    fn wait(&mut self) -> Arrived {
        let Some(m) = self.mailbox.as_ref().filter(|m| m.peer_posts()) else {
            if !self.frames.has_frame() {
                self.spinner.wait(self.stream.as_fd());
            }
            return Arrived::Socket;
        };
        let _w = Window::open(m.key);
        let fd = self.stream.as_raw_fd();
        loop {
            if self.posted(m) {
                return Arrived::Mailbox;
            }
            if self.frames.has_frame() {
                return Arrived::Socket;
            }
            let (frames, seen) = (&self.frames, self.seen);
            let mut turns = 0u32;
            let came = self.spinner.wait_until(|| {
                turns += 1;
                m.peers().sent.load(Ordering::SeqCst) != seen
                    || frames.has_frame()
                    || (turns % 64 == 0 && readable(fd, 0))
            });
            if !came {
                // Sleep on the socket: a ring or a frame wakes it. A read-only client
                // asks for the ring with an empty frame (answered by one after the
                // instance posted its reply, or at once if it did already).
                let me = m.mine();
                if m.writable {
                    me.asleep.store(1, Ordering::SeqCst);
                } else if !self.ring_asked {
                    if (&self.stream).write_all(&0u32.to_le_bytes()).is_err() {
                        return Arrived::Socket;
                    }
                    self.ring_asked = true;
                }
                if !self.posted(m) {
                    readable(fd, -1);
                }
                if m.writable {
                    me.asleep.store(0, Ordering::SeqCst);
                }
            }
            if self.posted(m) {
                return Arrived::Mailbox;
            }
            if readable(fd, 0) {
                return Arrived::Socket;
            }
        }
    }

    /// The next message's body: None when the peer closed the connection.
    pub fn recv(&mut self) -> std::io::Result<Option<&[u8]>> {
        loop {
            match self.wait() {
                Arrived::Mailbox => {
                    let m = self.mailbox.as_ref().expect("a message in the mailbox");
                    let _w = Window::open(m.key);
                    let peer = m.peers();
                    let len = peer.len.load(Ordering::Acquire) as usize;
                    if len == 0 || len > AREA_BYTES {
                        return Err(broken());
                    }
                    self.msg.clear();
                    // SAFETY: `len` bytes of the peer's area, inside the mapping.
                    let from = unsafe { std::slice::from_raw_parts(m.area(false), len) };
                    self.msg.extend_from_slice(from);
                    self.seen = self.seen.wrapping_add(1);
                    self.ring_asked = false;
                    if m.writable {
                        m.mine().taken.store(self.seen, Ordering::Release);
                    }
                    return Ok(Some(&self.msg));
                }
                Arrived::Socket => match self.frames.next_range(&self.stream)? {
                    None => return Ok(None),
                    // A ring says to look at the mailbox again; from a read-only
                    // client it asks to be rung (its reply, if any, is posted).
                    Some(r) if r.is_empty() => {
                        if let Some(m) = &self.mailbox {
                            if !m.client && !m.writable {
                                (&self.stream).write_all(&0u32.to_le_bytes())?;
                            }
                        }
                        continue;
                    }
                    Some(r) => {
                        self.ring_asked = false;
                        return Ok(Some(&self.frames.buf[r]));
                    }
                },
            }
        }
    }

    /// Reads a reply that carries descriptors (nothing may be buffered: it is the
    /// connection's first exchange, or follows one with none).
    pub fn recv_fds(&mut self, buf: &mut [u8], max: usize) -> posix::Result<Vec<OwnedFd>> {
        if self.frames.at != self.frames.end {
            return Err(posix::Errno(libc::EPROTO));
        }
        let fds = crate::shm::recv_fds(self.stream.as_raw_fd(), buf, max)?;
        Ok(fds.into_iter().map(crate::high_fd).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Writer;

    /// An instance's end and a client's end of one connection, with a mailbox.
    fn pair(writable: bool) -> (Conn, Conn) {
        let (a, b) = UnixStream::pair().unwrap();
        let (mut server, mut client) = (Conn::new(a), Conn::new(b));
        let m = Mailbox::create(writable).unwrap();
        // SAFETY: dup of a descriptor we own, owned by the new OwnedFd.
        let fd = unsafe { libc::dup(m.fd().unwrap()) };
        assert!(fd >= 0);
        // SAFETY: as above.
        let fd = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        client.set_mailbox(Mailbox::attach(fd, writable, None).unwrap());
        server.set_mailbox(m);
        (server, client)
    }

    fn frame(body: &[u8]) -> Vec<u8> {
        let mut w = Writer::new();
        w.u8(body.first().copied().unwrap_or(1));
        let mut f = w.finish(body.len().saturating_sub(1)).to_vec();
        f.extend_from_slice(body.get(1..).unwrap_or(&[]));
        f
    }

    /// Runs `f`, failing if it takes over 20 s (a side asleep that no one rang).
    fn within_a_deadline(f: impl FnOnce() + Send + 'static) {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            f();
            let _ = tx.send(());
        });
        rx.recv_timeout(std::time::Duration::from_secs(20))
            .expect("messages stopped crossing: a sleeping side was never rung");
    }

    #[test]
    fn messages_of_every_size_cross_both_ways() {
        within_a_deadline(|| messages_cross(true));
    }

    #[test]
    fn replies_cross_a_read_only_mailbox() {
        within_a_deadline(|| messages_cross(false));
    }

    fn messages_cross(writable: bool) {
        let (mut server, mut client) = pair(writable);
        let sizes = [
            1,
            7,
            4096,
            AREA_BYTES - 1,
            AREA_BYTES,
            AREA_BYTES + 1,
            3 << 20,
        ];
        let t = std::thread::spawn(move || {
            for &n in &sizes {
                let got = server.recv().unwrap().unwrap().to_vec();
                assert_eq!(got.len(), n);
                assert!(got.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8));
                // The reply: the same bytes reversed.
                let back: Vec<u8> = got.into_iter().rev().collect();
                server.send(&frame(&back), &[]).unwrap();
            }
            // A close of the client's end ends the server's loop (a reset if rings it
            // asked for were left unread).
            assert!(!matches!(server.recv(), Ok(Some(_))));
        });
        for &n in &sizes {
            let body: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
            // Split the body between the frame and the data that follows it.
            let split = n.min(5);
            let mut w = frame(&body[..split]);
            let len = (n as u32).to_le_bytes();
            w[..4].copy_from_slice(&len);
            client.send(&w, &body[split..]).unwrap();
            let got = client.recv().unwrap().unwrap();
            assert!(got.iter().rev().eq(body.iter()), "size {n}");
            // Sleep now and then, so the other side's wait goes to sleep and must be
            // rung.
            if n == 4096 {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }
        drop(client);
        t.join().unwrap();
    }

    #[test]
    fn a_lying_length_ends_the_connection() {
        let (mut server, client) = pair(true);
        let m = client.mailbox().unwrap();
        m.mine().len.store(AREA_BYTES as u32 + 1, Ordering::Relaxed);
        m.mine().sent.fetch_add(1, Ordering::SeqCst);
        let e = server.recv().unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EPROTO));
    }
}
