//! Directory streams: what `readdir` and `getdents64` hand out from an open directory.
//!
//! Invariants:
//! - The stream is `.`, `..`, then the entries in name order. Its cursor is the last
//!   name handed out (the vfs resumes after it), so entries created or removed between
//!   calls never make a survivor repeat or go missing.
//! - `d_off` of an entry is its position + 1 (the offset of the next); seeking a
//!   directory to 0 restarts the stream, and seeking it to one of the last
//!   [`MARKS_MAX`] positions it handed out resumes there (what telldir and seekdir, and
//!   readers that step back one entry, such as GlusterFS's bricks, need); a seek to any
//!   other position leaves the stream where it is.
//! - Entries are fetched from the vfs [`BATCH`] at a time; fetched entries the caller's
//!   buffer could not take stay queued for the next call.

use crate::{err, Posix, Result};
use std::collections::VecDeque;
use vfs::{DirEntry, Kind};

/// Entries asked of the vfs per step.
pub const BATCH: usize = 128;
/// Positions a stream remembers for seeks back to them (its latest ones).
pub const MARKS_MAX: usize = 1024;
/// Bytes of `struct linux_dirent64` before the name (d_ino, d_off, d_reclen, d_type).
const DIRENT64_HEADER: usize = 19;

/// One entry as readdir reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dirent {
    pub ino: u64,
    /// The position after this entry (`d_off`).
    pub off: i64,
    /// DT_REG, DT_DIR or DT_LNK.
    pub dtype: u8,
    pub name: Vec<u8>,
}

impl Dirent {
    /// Its length in getdents64's format (8-byte aligned, name NUL-terminated).
    pub fn reclen(&self) -> usize {
        (DIRENT64_HEADER + self.name.len() + 1).next_multiple_of(8)
    }

    /// Writes it in getdents64's format at the start of `out` (which holds `reclen`).
    pub fn encode(&self, out: &mut [u8]) {
        let len = self.reclen();
        assert!(out.len() >= len, "room checked by the caller");
        out[..len].fill(0);
        out[0..8].copy_from_slice(&self.ino.to_ne_bytes());
        out[8..16].copy_from_slice(&self.off.to_ne_bytes());
        out[16..18].copy_from_slice(&(len as u16).to_ne_bytes());
        out[18] = self.dtype;
        out[DIRENT64_HEADER..DIRENT64_HEADER + self.name.len()].copy_from_slice(&self.name);
    }
}

pub fn dtype(kind: Kind) -> u8 {
    kind.dirent_type()
}

/// The cursor of one open directory.
#[derive(Debug, Default)]
pub struct DirStream {
    /// Entries handed out so far (the position).
    pos: i64,
    /// The last name handed out, once past the dots.
    after: Option<Vec<u8>>,
    queued: VecDeque<Dirent>,
    ended: bool,
    /// The latest positions handed out, each with the name the stream resumes after
    /// there (at most [`MARKS_MAX`], oldest first).
    marks: VecDeque<(i64, Option<Vec<u8>>)>,
}

impl DirStream {
    /// Moves the cursor to `to`: 0 restarts; a remembered position resumes after its
    /// name; any other position changes nothing.
    pub(crate) fn seek(&mut self, to: u64) {
        let to = to as i64;
        if to == 0 {
            *self = DirStream::default();
            return;
        }
        if to == self.pos {
            return;
        }
        let Some((_, after)) = self.marks.iter().rev().find(|(p, _)| *p == to) else {
            return;
        };
        let after = after.clone();
        self.pos = to;
        self.after = after;
        self.queued.clear();
        self.ended = false;
    }

    /// The position: the `d_off` of the last entry handed out (telldir).
    pub(crate) fn pos(&self) -> i64 {
        self.pos
    }
}

impl Posix {
    /// The next entry of directory `fd` without consuming it (None at the end).
    fn peek_entry(&self, fd: i32, s: &mut DirStream) -> Result<Option<Dirent>> {
        let d = self.get(fd)?;
        if s.queued.is_empty() && !s.ended {
            let ino = d.ino();
            if s.pos < 2 {
                if s.pos == 0 {
                    s.queued.push_back(Dirent {
                        ino: ino.0,
                        off: 1,
                        dtype: libc::DT_DIR,
                        name: b".".to_vec(),
                    });
                }
                let parent = self.fs.lookup(&self.creds(), ino, b"..")?;
                s.queued.push_back(Dirent {
                    ino: parent.0,
                    off: 2,
                    dtype: libc::DT_DIR,
                    name: b"..".to_vec(),
                });
            } else {
                let page = self
                    .fs
                    .readdir(&self.creds(), ino, s.after.as_deref(), BATCH)?;
                s.ended = page.len() < BATCH;
                let mut off = s.pos;
                s.queued.extend(page.into_iter().map(|e: DirEntry| {
                    off += 1;
                    Dirent {
                        ino: e.ino,
                        off,
                        dtype: dtype(e.kind),
                        name: e.name,
                    }
                }));
            }
        }
        Ok(s.queued.front().cloned())
    }

    fn consume(s: &mut DirStream) {
        let e = s.queued.pop_front().expect("peeked first");
        s.pos = e.off;
        if e.name != b"." && e.name != b".." {
            s.after = Some(e.name);
        }
        if s.marks.len() == MARKS_MAX {
            s.marks.pop_front();
        }
        s.marks.push_back((s.pos, s.after.clone()));
    }

    fn stream_of(&self, fd: i32) -> Result<std::sync::Arc<crate::desc::Description>> {
        let d = self.get(fd)?;
        if d.kind() != Kind::Dir {
            return Err(err(libc::ENOTDIR));
        }
        if d.is_path_only() {
            return Err(err(libc::EBADF));
        }
        Ok(d)
    }

    /// `readdir`: the next entry of directory `fd`, None at the end.
    pub fn readdir(&self, fd: i32) -> Result<Option<Dirent>> {
        let d = self.stream_of(fd)?;
        let mut s = d.dir.lock().expect("dir lock");
        let e = self.peek_entry(fd, &mut s)?;
        if e.is_some() {
            Self::consume(&mut s);
        }
        *d.offset() = s.pos() as u64;
        Ok(e)
    }

    /// `telldir`: the position of directory `fd`'s stream.
    pub fn telldir(&self, fd: i32) -> Result<i64> {
        let d = self.stream_of(fd)?;
        let s = d.dir.lock().expect("dir lock");
        Ok(s.pos())
    }

    /// `seekdir`: back (or on) to a position [`Posix::telldir`] gave, among the
    /// stream's latest [`MARKS_MAX`]; 0 restarts; another position changes nothing.
    pub fn seekdir(&self, fd: i32, pos: i64) -> Result<()> {
        let d = self.stream_of(fd)?;
        let mut s = d.dir.lock().expect("dir lock");
        s.seek(u64::try_from(pos).map_err(|_| err(libc::EINVAL))?);
        *d.offset() = s.pos() as u64;
        Ok(())
    }

    /// `getdents64`: fills `buf` with whole entries; 0 at the end; EINVAL if the next
    /// entry does not fit at all.
    pub fn getdents64(&self, fd: i32, buf: &mut [u8]) -> Result<usize> {
        let d = self.stream_of(fd)?;
        let mut s = d.dir.lock().expect("dir lock");
        let mut used = 0;
        while let Some(e) = self.peek_entry(fd, &mut s)? {
            let len = e.reclen();
            if used + len > buf.len() {
                if used == 0 {
                    return Err(err(libc::EINVAL));
                }
                break;
            }
            e.encode(&mut buf[used..]);
            used += len;
            Self::consume(&mut s);
        }
        *d.offset() = s.pos as u64;
        Ok(used)
    }
}
