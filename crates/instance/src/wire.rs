//! The byte encoding of requests and replies (docs/DESIGN.md §12.5):
//! little-endian integers, byte strings as a u32 length and the bytes, an option as a
//! presence byte. A frame on the socket is a u32 length and that many bytes.
//!
//! Invariants:
//! - A [`Reader`] never reads past its slice and never panics: a short or malformed
//!   input is EPROTO, a string longer than its bound E2BIG or ENAMETOOLONG, at the
//!   first field that does not fit.
//! - A frame longer than [`crate::FRAME_BYTES_MAX`] is refused before anything is
//!   allocated for it.

use posix::{Errno, Result};

/// Builds one frame: its length is filled in by [`Writer::finish`].
#[derive(Debug, Default)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    /// A frame with room for its length.
    pub fn new() -> Writer {
        Writer { buf: vec![0; 4] }
    }

    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.buf.push(v);
        self
    }

    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub fn i32(&mut self, v: i32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub fn i64(&mut self, v: i64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.u32(u32::try_from(v.len()).expect("a field under 4 GiB"));
        self.buf.extend_from_slice(v);
        self
    }

    pub fn opt_bytes(&mut self, v: Option<&[u8]>) -> &mut Self {
        match v {
            None => self.u8(0),
            Some(b) => self.u8(1).bytes(b),
        }
    }

    pub fn opt_u64(&mut self, v: Option<u64>) -> &mut Self {
        match v {
            None => self.u8(0),
            Some(x) => self.u8(1).u64(x),
        }
    }

    /// Makes room for `n` bytes the caller fills in place ([`Writer::reserved`]);
    /// returns where they start.
    pub fn reserve(&mut self, n: usize) -> usize {
        let at = self.buf.len();
        self.buf.resize(at + n, 0);
        at
    }

    /// The bytes from `at` on, to fill.
    pub fn reserved(&mut self, at: usize) -> &mut [u8] {
        &mut self.buf[at..]
    }

    /// Keeps `n` of the bytes reserved at `at`.
    pub fn truncate_reserved(&mut self, at: usize, n: usize) {
        self.buf.truncate(at + n);
    }

    /// Starts the frame over (an error replaces a payload begun).
    pub fn clear(&mut self) {
        self.buf.truncate(4);
    }

    /// The frame's bytes so far, without the length (tests, fuzzing).
    pub fn body(&self) -> &[u8] {
        &self.buf[4..]
    }

    /// The frame, its length filled in; `extra` more bytes will follow it on the
    /// socket (a write's data, sent from the caller's buffer).
    pub fn finish(&mut self, extra: usize) -> &[u8] {
        let len = self.buf.len() - 4 + extra;
        let len = u32::try_from(len).expect("a frame under 4 GiB");
        self.buf[..4].copy_from_slice(&len.to_le_bytes());
        &self.buf
    }
}

/// Reads fields from one frame's body.
#[derive(Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
}

fn proto() -> Errno {
    Errno(libc::EPROTO)
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.buf.len() < n {
            return Err(proto());
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let b = self.take(N)?;
        let mut a = [0; N];
        a.copy_from_slice(b);
        Ok(a)
    }

    pub fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    pub fn bool(&mut self) -> Result<bool> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(proto()),
        }
    }

    pub fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    pub fn i32(&mut self) -> Result<i32> {
        Ok(i32::from_le_bytes(self.array()?))
    }

    pub fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    pub fn i64(&mut self) -> Result<i64> {
        Ok(i64::from_le_bytes(self.array()?))
    }

    /// A byte string of at most `max` bytes (longer: `too_long`).
    pub fn bytes(&mut self, max: usize, too_long: i32) -> Result<&'a [u8]> {
        let len = self.u32()? as usize;
        if len > max {
            return Err(Errno(too_long));
        }
        self.take(len)
    }

    pub fn opt_bytes(&mut self, max: usize, too_long: i32) -> Result<Option<&'a [u8]>> {
        Ok(match self.bool()? {
            false => None,
            true => Some(self.bytes(max, too_long)?),
        })
    }

    pub fn opt_u64(&mut self) -> Result<Option<u64>> {
        Ok(match self.bool()? {
            false => None,
            true => Some(self.u64()?),
        })
    }

    /// What is left (a write's data).
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.buf)
    }

    /// The frame must end here.
    pub fn end(&self) -> Result<()> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(proto())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_and_short_input_is_eproto() {
        let mut w = Writer::new();
        w.u8(7)
            .u32(9)
            .i64(-3)
            .bytes(b"name")
            .opt_bytes(None)
            .opt_u64(Some(5));
        let body = w.body().to_vec();
        let mut r = Reader::new(&body);
        assert_eq!(r.u8().unwrap(), 7);
        assert_eq!(r.u32().unwrap(), 9);
        assert_eq!(r.i64().unwrap(), -3);
        assert_eq!(r.bytes(255, libc::ENAMETOOLONG).unwrap(), b"name");
        assert_eq!(r.opt_bytes(10, libc::E2BIG).unwrap(), None);
        assert_eq!(r.opt_u64().unwrap(), Some(5));
        r.end().unwrap();
        for cut in 0..body.len() {
            let mut r = Reader::new(&body[..cut]);
            let all = (|| -> Result<()> {
                r.u8()?;
                r.u32()?;
                r.i64()?;
                r.bytes(255, libc::ENAMETOOLONG)?;
                r.opt_bytes(10, libc::E2BIG)?;
                r.opt_u64()?;
                Ok(())
            })();
            assert_eq!(all, Err(Errno(libc::EPROTO)), "cut at {cut}");
        }
        let mut r = Reader::new(&body[5..]);
        r.u64().unwrap();
        assert_eq!(
            r.bytes(3, libc::ENAMETOOLONG),
            Err(Errno(libc::ENAMETOOLONG))
        );
    }
}
