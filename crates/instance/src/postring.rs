//! The posting ring: a process's posted requests (`crate::posts`) in shared memory
//! instead of on its posting connection's socket, so that posting a write costs a copy
//! and no system call on either side while the instance's posting thread is awake
//! (augefs.txt §IV: the file system's state in shared memory guarded by protection
//! keys; the shared-memory rings of uFS).
//!
//! The instance makes one memfd per posting connection and sends it with the answer to
//! the connection's first request; the client maps it read-write under its protection
//! key (`crate::pkey`), or without one where it accepts that a stray store may garble
//! its own posts (AUGEFS_MAILBOX=unprotected). Layout: a header page, then
//! [`RING_BYTES`] of records. Header words, each side's in a cache line of its own:
//! - `tail` (the client's): bytes published, ever; its top bit, [`CLOSED`], says the
//!   ring takes no more (set by the instance, never cleared);
//! - `head` (the instance's): bytes consumed, ever; `asleep`: the consumer sleeps on
//!   the socket and must be rung (an empty frame).
//!
//! A record starts at a multiple of 8: a length word, then that many bytes of a
//! frame's body, padded to 8. A record never wraps: where the space left before the
//! ring's end is too short, the producer writes a [`SKIP`] word there and starts the
//! record at the ring's start.
//!
//! Invariants:
//! - One producer (the client holds its posting lock) and one consumer (the posting
//!   connection's thread).
//! - A record is published by one compare-and-swap of `tail` from the value without
//!   [`CLOSED`], after its bytes were written: a closed ring refuses it (the call is
//!   then sent as a request), so what the instance drains after closing the ring is
//!   exactly what was published, and a client that hangs or dies halfway through a
//!   record holds nothing up (its record was never published, its call never
//!   returned).
//! - The consumer takes the final tail from the value that carried [`CLOSED`], never
//!   from a later load: a client that clears the bit cannot make it drain more.
//! - The consumer copies a record out, after checking it lies between `head` and the
//!   tail it loaded and inside the ring, before decoding it (the client can change its
//!   memory at any time); a lie ends the connection.
//! - A sleeper stores `asleep` then loads `tail`; a producer swaps `tail` then loads
//!   `asleep` (all SeqCst): one of them sees the other, so no record waits unnoticed.

use crate::pkey::Window;
use crate::shm::{Mapping, PAGE};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Room for records: many small posts, or at least seven of the largest
/// (`crate::client::posting::POST_BYTES_MAX` and their frames).
pub const RING_BYTES: usize = 512 * 1024;
/// `tail`'s bit that closes the ring.
pub const CLOSED: u64 = 1 << 63;
/// A length word that says the record starts at the ring's start.
pub const SKIP: u32 = u32::MAX;
/// The longest record body a ring takes (a larger post goes as a request).
pub const BODY_MAX: usize = RING_BYTES / 4;
const MAGIC: u64 = 0x6175_6765_706f_7374;
const RING_MAP_BYTES: usize = PAGE + RING_BYTES;

#[repr(C, align(64))]
struct Producer {
    tail: AtomicU64,
}

#[repr(C, align(64))]
struct Consumer {
    head: AtomicU64,
    asleep: AtomicU32,
}

#[repr(C)]
struct Header {
    magic: AtomicU64,
    client: Producer,
    instance: Consumer,
}

const _: () = assert!(std::mem::size_of::<Header>() <= PAGE);
const _: () = assert!(RING_BYTES % 8 == 0 && BODY_MAX + 8 <= RING_BYTES / 2);

/// Bytes a record of `body` bytes takes.
fn record_bytes(body: usize) -> u64 {
    ((4 + body + 7) & !7) as u64
}

/// One posting connection's ring, as the instance or the client maps it.
#[derive(Debug)]
pub struct PostRing {
    map: Mapping,
    fd: Option<OwnedFd>,
    /// The client's protection key (its accesses open a window).
    key: Option<u32>,
}

/// What became of a record the client offered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    /// Published; `ring`: the consumer sleeps, so the client must ring it.
    Published { ring: bool },
    /// The ring is closed (the lease ended): nothing was published.
    Closed,
    /// The client gave up waiting for room (`gone` said the instance went away).
    Gone,
}

/// Why a ring's contents were refused (the connection ends).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lie;

impl PostRing {
    /// The instance's side of a new ring.
    pub fn create() -> posix::Result<PostRing> {
        let (fd, map) = Mapping::create(c"augefs-posts", RING_MAP_BYTES, false)?;
        let r = PostRing {
            map,
            fd: Some(fd),
            key: None,
        };
        r.header().magic.store(MAGIC, Ordering::Release);
        Ok(r)
    }

    /// The client's side of the ring the instance sent, tagged with `key` (None:
    /// unprotected).
    pub fn attach(fd: OwnedFd, key: Option<u32>) -> posix::Result<PostRing> {
        let map = Mapping::map(fd.as_raw_fd(), RING_MAP_BYTES, true)?;
        if let Some(key) = key {
            crate::pkey::protect(map.at() as usize, map.len(), key)
                .map_err(|e| posix::Errno(e.raw_os_error().unwrap_or(libc::EIO)))?;
        }
        let r = PostRing { map, fd: None, key };
        let _w = Window::open(key);
        if r.header().magic.load(Ordering::Acquire) != MAGIC {
            return Err(posix::Errno(libc::EPROTO));
        }
        Ok(r)
    }

    /// The instance's descriptor of the ring (to send).
    pub fn fd(&self) -> Option<RawFd> {
        self.fd.as_ref().map(AsRawFd::as_raw_fd)
    }

    /// Where the mapping starts, and its length.
    pub fn region(&self) -> (usize, usize) {
        (self.map.at() as usize, self.map.len())
    }

    fn header(&self) -> &Header {
        // SAFETY: the mapping starts with a page holding a Header (zeroed memory is a
        // valid one), aligned as mmap aligns.
        unsafe { &*self.map.at().cast::<Header>() }
    }

    /// The record area.
    fn area(&self) -> *mut u8 {
        // SAFETY: the area follows the header page inside the mapping.
        unsafe { self.map.at().add(PAGE) }
    }

    /// Client: appends one record, `frame`'s body (a frame from `Writer::finish`, its
    /// length word first) then `data`, waiting for room while the consumer drains (a
    /// spin that yields; `gone` is asked now and then whether to give up).
    pub fn push(&self, frame: &[u8], data: &[u8], gone: impl Fn() -> bool) -> Pushed {
        let body = frame.len() - 4 + data.len();
        assert!(body > 0 && body <= BODY_MAX, "a record of {body} bytes");
        let _w = Window::open(self.key);
        let h = self.header();
        let need = record_bytes(body);
        let mut turns = 0u32;
        let (tail, at, total) = loop {
            let tail = h.client.tail.load(Ordering::Acquire);
            if tail & CLOSED != 0 {
                return Pushed::Closed;
            }
            let pos = (tail % RING_BYTES as u64) as usize;
            let to_end = (RING_BYTES - pos) as u64;
            let (at, total) = if to_end < need {
                (0, to_end + need)
            } else {
                (pos, need)
            };
            let head = h.instance.head.load(Ordering::Acquire);
            if tail + total - head <= RING_BYTES as u64 {
                if at != pos {
                    self.write_word(pos, SKIP);
                }
                break (tail, at, total);
            }
            turns += 1;
            if turns % 64 == 0 {
                if gone() {
                    return Pushed::Gone;
                }
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        };
        self.write_word(at, body as u32);
        // SAFETY: `body` bytes after the length word fit before the ring's end (a record
        // never wraps), in space the consumer has given back and does not read until
        // `tail` says so.
        unsafe {
            let to = self.area().add(at + 4);
            let head_bytes = frame.len() - 4;
            std::ptr::copy_nonoverlapping(frame[4..].as_ptr(), to, head_bytes);
            std::ptr::copy_nonoverlapping(data.as_ptr(), to.add(head_bytes), data.len());
        }
        if h.client
            .tail
            .compare_exchange(tail, tail + total, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            return Pushed::Closed;
        }
        Pushed::Published {
            ring: h.instance.asleep.load(Ordering::SeqCst) != 0,
        }
    }

    fn write_word(&self, at: usize, word: u32) {
        debug_assert!(at % 8 == 0 && at + 4 <= RING_BYTES);
        // SAFETY: an aligned word inside the area, in space the consumer gave back.
        unsafe { self.area().add(at).cast::<u32>().write_volatile(word) };
    }

    /// Instance: closes the ring (no more records are published): the final tail.
    pub fn close(&self) -> u64 {
        self.header().client.tail.fetch_or(CLOSED, Ordering::SeqCst) & !CLOSED
    }

    /// Instance: whether records seem published beyond what was read (a hint for
    /// waiting, from the shared words; the reader checks what it reads).
    pub fn pending(&self) -> bool {
        let h = self.header();
        h.client.tail.load(Ordering::SeqCst) & !CLOSED != h.instance.head.load(Ordering::SeqCst)
    }

    /// Instance: says whether the consumer sleeps (the client rings it after
    /// publishing).
    pub fn set_asleep(&self, asleep: bool) {
        self.header()
            .instance
            .asleep
            .store(asleep.into(), Ordering::SeqCst);
    }
}

/// The instance's reader of a ring: records copied out, in order.
#[derive(Debug)]
pub struct Reader {
    ring: std::sync::Arc<PostRing>,
    /// Bytes consumed (the instance's own count; `head` in the ring mirrors it).
    head: u64,
    /// The tail at the close, once closed: nothing past it is read.
    last: Option<u64>,
    body: Vec<u8>,
}

impl Reader {
    pub fn new(ring: std::sync::Arc<PostRing>) -> Reader {
        Reader {
            ring,
            head: 0,
            last: None,
            body: Vec::new(),
        }
    }

    /// The ring it reads.
    pub fn ring(&self) -> &PostRing {
        &self.ring
    }

    /// The tail as far as the reader may read: the final one once closed.
    fn tail(&mut self) -> u64 {
        if let Some(last) = self.last {
            return last;
        }
        let t = self.ring.header().client.tail.load(Ordering::SeqCst);
        if t & CLOSED != 0 {
            self.last = Some(t & !CLOSED);
        }
        t & !CLOSED
    }

    /// Whether the ring is closed and every record published before was read.
    pub fn finished(&mut self) -> bool {
        self.tail();
        self.last == Some(self.head)
    }

    /// Closes the ring (the client is gone or its lease ended): the reader then reads
    /// what was published, and no more.
    pub fn close(&mut self) {
        let last = self.ring.close();
        self.last.get_or_insert(last);
    }

    /// The next record's body, copied out: None if none is published.
    pub fn next_record(&mut self) -> Result<Option<&[u8]>, Lie> {
        loop {
            let tail = self.tail();
            if tail == self.head {
                return Ok(None);
            }
            if tail < self.head || tail - self.head > RING_BYTES as u64 {
                return Err(Lie);
            }
            let pos = (self.head % RING_BYTES as u64) as usize;
            let to_end = (RING_BYTES - pos) as u64;
            // SAFETY: an aligned word inside the area (records start at multiples of 8).
            let len = unsafe { self.ring.area().add(pos).cast::<u32>().read_volatile() };
            if len == SKIP {
                if self.head + to_end > tail {
                    return Err(Lie);
                }
                self.consumed(to_end);
                continue;
            }
            let need = record_bytes(len as usize);
            if len == 0 || len as usize > BODY_MAX || need > to_end || self.head + need > tail {
                return Err(Lie);
            }
            self.body.clear();
            // SAFETY: `len` bytes after the word, inside the area (checked above).
            let from =
                unsafe { std::slice::from_raw_parts(self.ring.area().add(pos + 4), len as usize) };
            self.body.extend_from_slice(from);
            self.consumed(need);
            return Ok(Some(&self.body));
        }
    }

    fn consumed(&mut self, bytes: u64) {
        self.head += bytes;
        self.ring
            .header()
            .instance
            .head
            .store(self.head, Ordering::Release);
    }
}

/// Reads, as the instance would, a ring whose record area holds `area` from offset
/// `head % RING_BYTES` on (wrapping; the rest zero), whose head is `head` and whose tail
/// says `tail` (closed or not): the bodies read until none is left, or the lie that
/// ended the reading. For the fuzzer (crates/fuzzing): any bytes a client could leave
/// in its ring must come back as records or a [`Lie`], never a panic.
pub fn read_image(head: u64, tail: u64, area: &[u8]) -> (Vec<Vec<u8>>, Result<(), Lie>) {
    thread_local! {
        static RING: Option<std::sync::Arc<PostRing>> = PostRing::create().ok().map(std::sync::Arc::new);
    }
    assert!(area.len() <= RING_BYTES, "an image larger than the ring");
    let head = head & !7 & !CLOSED;
    RING.with(|ring| {
        let ring = ring.as_ref().expect("a memfd for the fuzzer's ring");
        let start = (head % RING_BYTES as u64) as usize;
        let place = |bytes: &mut dyn FnMut(usize) -> u8| {
            for i in 0..area.len() {
                let at = (start + i) % RING_BYTES;
                // SAFETY: a byte inside the area.
                unsafe { ring.area().add(at).write_volatile(bytes(i)) };
            }
        };
        place(&mut |i| area[i]);
        let h = ring.header();
        h.client.tail.store(tail, Ordering::SeqCst);
        h.instance.head.store(head, Ordering::SeqCst);
        let mut reader = Reader::new(ring.clone());
        reader.head = head;
        let mut bodies = Vec::new();
        let end = loop {
            match reader.next_record() {
                Ok(Some(b)) => bodies.push(b.to_vec()),
                Ok(None) => break Ok(()),
                Err(lie) => break Err(lie),
            }
        };
        // Zero again, so that each image is read alone.
        place(&mut |_| 0);
        (bodies, end)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Writer;
    use std::sync::Arc;

    /// The instance's ring and a client's mapping of it.
    fn pair() -> (Arc<PostRing>, PostRing) {
        let ring = PostRing::create().unwrap();
        // SAFETY: dup of a descriptor we own, owned by the new OwnedFd.
        let fd = unsafe { libc::dup(ring.fd().unwrap()) };
        assert!(fd >= 0);
        // SAFETY: as above.
        let fd = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        let client = PostRing::attach(fd, None).unwrap();
        (Arc::new(ring), client)
    }

    /// A frame whose body is one byte `tag`, then `n - 1` bytes as data.
    fn record(tag: u8, n: usize) -> (Vec<u8>, Vec<u8>) {
        let mut w = Writer::new();
        w.u8(tag);
        let frame = w.finish(n - 1).to_vec();
        let data = (0..n - 1).map(|i| (i % 251) as u8 ^ tag).collect();
        (frame, data)
    }

    fn check(body: &[u8], tag: u8, n: usize) {
        assert_eq!(body.len(), n, "record {tag}");
        assert_eq!(body[0], tag);
        assert!(body[1..]
            .iter()
            .enumerate()
            .all(|(i, &b)| b == (i % 251) as u8 ^ tag));
    }

    #[test]
    fn records_of_every_size_cross_in_order_across_the_wrap() {
        let (ring, client) = pair();
        let mut reader = Reader::new(ring);
        let sizes = [1usize, 7, 8, 4096, BODY_MAX, 13, BODY_MAX - 3, 100];
        // Several rounds, so records meet the ring's end at every offset mod 8.
        for round in 0..40u8 {
            for (k, &n) in sizes.iter().enumerate() {
                let tag = round.wrapping_mul(8).wrapping_add(k as u8);
                let (frame, data) = record(tag, n);
                assert_eq!(
                    client.push(&frame, &data, || false),
                    Pushed::Published { ring: false }
                );
                let body = reader.next_record().unwrap().expect("a record");
                check(body, tag, n);
            }
        }
        assert_eq!(reader.next_record(), Ok(None));
    }

    #[test]
    fn a_full_ring_waits_for_the_consumer() {
        let (ring, client) = pair();
        let mut reader = Reader::new(ring);
        let n = BODY_MAX;
        let count = 64;
        let t = std::thread::spawn(move || {
            for k in 0..count {
                let (frame, data) = record(k, n);
                assert!(matches!(
                    client.push(&frame, &data, || false),
                    Pushed::Published { .. }
                ));
            }
        });
        let mut got = 0u8;
        while got < count {
            if let Some(body) = reader.next_record().unwrap() {
                check(body, got, n);
                got += 1;
            } else {
                std::thread::yield_now();
            }
        }
        t.join().unwrap();
    }

    #[test]
    fn a_closed_ring_takes_nothing_and_the_reader_drains_what_was_published() {
        let (ring, client) = pair();
        let mut reader = Reader::new(ring);
        let (frame, data) = record(1, 10);
        assert!(matches!(
            client.push(&frame, &data, || false),
            Pushed::Published { .. }
        ));
        reader.close();
        assert_eq!(client.push(&frame, &data, || false), Pushed::Closed);
        assert!(!reader.finished());
        check(reader.next_record().unwrap().unwrap(), 1, 10);
        assert!(reader.finished());
        // A client that clears the bit afterwards gets nothing more read.
        let _ = client
            .header()
            .client
            .tail
            .fetch_and(!CLOSED, Ordering::SeqCst);
        assert!(matches!(
            client.push(&frame, &data, || false),
            Pushed::Published { .. }
        ));
        assert_eq!(reader.next_record(), Ok(None));
        assert!(reader.finished());
    }

    #[test]
    fn a_sleeping_consumer_is_told_to_be_rung() {
        let (ring, client) = pair();
        assert!(!ring.pending());
        ring.set_asleep(true);
        let (frame, data) = record(3, 3);
        assert_eq!(
            client.push(&frame, &data, || false),
            Pushed::Published { ring: true }
        );
        assert!(ring.pending());
    }

    #[test]
    fn a_full_ring_with_the_instance_gone_gives_up() {
        let (_ring, client) = pair();
        let (frame, data) = record(1, BODY_MAX);
        while client.push(&frame, &data, || true) != Pushed::Gone {}
    }

    #[test]
    fn lies_end_the_reading() {
        for lie in 0..5 {
            let (ring, client) = pair();
            let mut reader = Reader::new(ring);
            let (frame, data) = record(1, 10);
            assert!(matches!(
                client.push(&frame, &data, || false),
                Pushed::Published { .. }
            ));
            let h = client.header();
            match lie {
                // A tail beyond the ring's room, or behind the head.
                0 => h.client.tail.store(RING_BYTES as u64 + 8, Ordering::SeqCst),
                1 => {
                    reader.next_record().unwrap();
                    h.client.tail.store(8, Ordering::SeqCst);
                }
                // A length past the tail, past the ring's end, or a skip past the tail.
                2 => client.write_word(0, 4000),
                3 => {
                    h.client.tail.store(RING_BYTES as u64 - 8, Ordering::SeqCst);
                    reader.head = RING_BYTES as u64 - 16;
                    client.write_word(RING_BYTES - 16, 64);
                }
                _ => client.write_word(0, SKIP),
            }
            assert_eq!(reader.next_record(), Err(Lie), "lie {lie}");
        }
    }
}
