//! Encoding replies: a [`ReplyBuf`] per request thread, sized at mount for the largest
//! reply (a READ of `max_pages` pages), so no reply allocates. A reply is the out
//! header followed by the opcode's struct or data; an error is the header alone.
//!
//! Invariants:
//! - The buffer is allocated once and zeroed once; `len` bytes of it are the reply in
//!   progress (bytes past `len` are stale, never sent).
//! - `finish` writes the header last, with the length of what was pushed.

use super::abi::{self, bytes_of, OutHeader, Pod};

const HEADER: usize = std::mem::size_of::<OutHeader>();

/// One reply in the making.
#[derive(Debug)]
pub struct ReplyBuf {
    buf: Box<[u8]>,
    len: usize,
    unique: u64,
}

impl ReplyBuf {
    /// A buffer for replies of up to `payload_max` bytes after the header.
    pub fn new(payload_max: usize) -> ReplyBuf {
        ReplyBuf {
            buf: vec![0u8; HEADER + payload_max].into_boxed_slice(),
            len: HEADER,
            unique: 0,
        }
    }

    /// Starts the reply to request `unique`.
    pub fn begin(&mut self, unique: u64) {
        self.len = HEADER;
        self.unique = unique;
    }

    /// Room left for the payload.
    pub fn room(&self) -> usize {
        self.buf.len() - self.len
    }

    /// Bytes of payload pushed so far.
    pub fn payload_len(&self) -> usize {
        self.len - HEADER
    }

    pub fn push<T: Pod>(&mut self, v: &T) {
        self.push_bytes(bytes_of(v));
    }

    pub fn push_bytes(&mut self, b: &[u8]) {
        assert!(
            b.len() <= self.room(),
            "reply of {} bytes overflows",
            b.len()
        );
        self.buf[self.len..self.len + b.len()].copy_from_slice(b);
        self.len += b.len();
    }

    /// `n` bytes of payload to fill in place (a READ's data); `commit` says how many
    /// of them to keep.
    pub fn tail(&mut self, n: usize) -> &mut [u8] {
        let n = n.min(self.room());
        &mut self.buf[self.len..self.len + n]
    }

    pub fn commit(&mut self, n: usize) {
        assert!(n <= self.room());
        self.len += n;
    }

    /// Appends a directory entry if it fits in `size` bytes of payload; false if not.
    pub fn push_dirent(&mut self, size: usize, ino: u64, off: u64, typ: u32, name: &[u8]) -> bool {
        let fixed = std::mem::size_of::<abi::Dirent>();
        let rec = (fixed + name.len() + 7) & !7;
        if self.payload_len() + rec > size.min(self.buf.len() - HEADER) {
            return false;
        }
        let d = abi::Dirent {
            ino,
            off,
            namelen: u32::try_from(name.len()).expect("names are at most 255 bytes"),
            typ,
        };
        self.push(&d);
        self.push_bytes(name);
        let pad = rec - fixed - name.len();
        self.push_bytes(&[0u8; 8][..pad]);
        true
    }

    /// Bytes a READDIRPLUS entry named `name` takes.
    pub fn direntplus_len(name: &[u8]) -> usize {
        (std::mem::size_of::<abi::DirentPlus>() + name.len() + 7) & !7
    }

    /// Whether a READDIRPLUS entry named `name` still fits in `size` bytes of payload.
    pub fn fits_direntplus(&self, size: usize, name: &[u8]) -> bool {
        self.payload_len() + Self::direntplus_len(name) <= size.min(self.buf.len() - HEADER)
    }

    /// Appends a READDIRPLUS entry (the caller checked [`ReplyBuf::fits_direntplus`]).
    pub fn push_direntplus(&mut self, entry: abi::EntryOut, off: u64, typ: u32, name: &[u8]) {
        let rec = Self::direntplus_len(name);
        assert!(rec <= self.room(), "a READDIRPLUS entry that does not fit");
        let d = abi::DirentPlus {
            entry_out: entry,
            dirent: abi::Dirent {
                ino: entry.attr.ino,
                off,
                namelen: u32::try_from(name.len()).expect("names are at most 255 bytes"),
                typ,
            },
        };
        self.push(&d);
        self.push_bytes(name);
        let pad = rec - std::mem::size_of::<abi::DirentPlus>() - name.len();
        self.push_bytes(&[0u8; 8][..pad]);
    }

    /// Where the payload begins, for a transport that hands the buffer to the kernel
    /// (FUSE over io_uring: the kernel writes a request's arguments there and reads the
    /// reply from there), and how many bytes it holds.
    pub fn payload_area(&mut self) -> (*mut u8, usize) {
        let len = self.buf.len() - HEADER;
        (self.buf[HEADER..].as_mut_ptr(), len)
    }

    /// The first `n` bytes of the payload area (a request the kernel put there).
    pub fn payload_bytes(&self, n: usize) -> &[u8] {
        &self.buf[HEADER..HEADER + n]
    }

    /// The header of the reply [`ReplyBuf::finish`] made.
    pub fn header(&self) -> OutHeader {
        abi::read(&self.buf).expect("a header's worth of bytes")
    }

    /// Makes this buffer's reply a copy of `other`'s finished one (its header and
    /// payload).
    pub fn copy_reply(&mut self, other: &ReplyBuf) {
        let n = other.len;
        assert!(n <= self.buf.len(), "a reply of {n} bytes overflows");
        self.buf[..n].copy_from_slice(&other.buf[..n]);
        self.len = n;
        self.unique = other.unique;
    }

    /// Makes this buffer's reply `bytes` (a header and its payload, as sent).
    pub fn set_reply(&mut self, bytes: &[u8]) {
        assert!(bytes.len() >= HEADER && bytes.len() <= self.buf.len());
        self.buf[..bytes.len()].copy_from_slice(bytes);
        self.len = bytes.len();
    }

    /// The header of a successful reply to this buffer's request whose `payload` bytes
    /// are sent from elsewhere (not pushed here).
    pub fn header_of_payload(&self, payload: usize) -> OutHeader {
        OutHeader {
            len: u32::try_from(HEADER + payload).expect("replies are far below 4 GiB"),
            error: 0,
            unique: self.unique,
        }
    }

    /// The finished reply: `error` 0 with the payload, else a negative errno alone.
    pub fn finish(&mut self, error: i32) -> &[u8] {
        assert!(error <= 0, "errors are negative errnos, got {error}");
        if error != 0 {
            self.len = HEADER;
        }
        let h = OutHeader {
            len: u32::try_from(self.len).expect("replies are far below 4 GiB"),
            error,
            unique: self.unique,
        };
        self.buf[..HEADER].copy_from_slice(bytes_of(&h));
        &self.buf[..self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_carry_their_length_and_errors_drop_the_payload() {
        let mut r = ReplyBuf::new(64);
        r.begin(7);
        r.push(&abi::WriteOut {
            size: 5,
            padding: 0,
        });
        let out = r.finish(0).to_vec();
        let h: OutHeader = abi::read(&out).unwrap();
        assert_eq!((h.len, h.error, h.unique), (24, 0, 7));
        r.begin(8);
        r.push_bytes(b"abc");
        let h: OutHeader = abi::read(r.finish(-libc::ENOENT)).unwrap();
        assert_eq!((h.len, h.error, h.unique), (16, -libc::ENOENT, 8));
    }

    #[test]
    fn dirents_are_padded_and_stop_at_the_size() {
        let mut r = ReplyBuf::new(4096);
        r.begin(1);
        assert!(r.push_dirent(64, 5, 1, 4, b"abc"));
        assert_eq!(r.payload_len(), 32);
        assert!(r.push_dirent(64, 6, 2, 4, b"0123456"));
        assert!(!r.push_dirent(64, 7, 3, 4, b"x"));
        assert_eq!(r.payload_len(), 64);
        r.begin(2);
        assert_eq!(ReplyBuf::direntplus_len(b"abc"), 160);
        assert!(r.fits_direntplus(320, b"abc"));
        let mut e = abi::EntryOut::default();
        e.attr.ino = 9;
        r.push_direntplus(e, 3, 8, b"abc");
        r.push_direntplus(abi::EntryOut::default(), 4, 4, b"..");
        assert!(!r.fits_direntplus(320, b"x"));
        let first: abi::DirentPlus = abi::read(&r.finish(0)[HEADER..]).unwrap();
        assert_eq!(
            (first.dirent.ino, first.dirent.off, first.dirent.namelen),
            (9, 3, 3)
        );
    }
}
