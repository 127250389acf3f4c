//! An attached process's reads: its own kept pages (`crate::filecache`), its
//! identity's data table (`crate::datatable`), then the instance.

use super::Remote;
use crate::filecache::{PAGE, READ_CACHED_MAX};
use crate::proto::Request;
use crate::IO_BYTES_MAX;
use posix::backend::OpenFile;
use posix::Result;

impl Remote {
    /// A read: from this process's kept pages, else this identity's data table (as
    /// much as it holds from the start), else the instance.
    pub(super) fn read_at(&self, f: &OpenFile, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let handle = Self::handle(f)?;
        let small = self.files.enabled() && !buf.is_empty() && buf.len() <= READ_CACHED_MAX;
        let page = self.cache().map(|(page, _)| page);
        if let (Some(page), true) = (page, small) {
            if let Some(n) = self.files.read(page, f.ino, offset, buf) {
                return Ok(n);
            }
        }
        // What this identity's table holds, from the start of the range; the rest asks.
        let mut done = 0;
        if let (Some(page), Some(data)) = (page, self.data()) {
            let (n, answered) = data.read(page, f.ino, offset, buf);
            if answered {
                return Ok(n);
            }
            done = n;
        }
        let (at, rest) = (offset + done as u64, &mut buf[done..]);
        if page.is_some() && small {
            return Ok(done + self.read_cached(f, handle, at, rest)?);
        }
        for chunk in rest.chunks_mut(IO_BYTES_MAX) {
            let want = chunk.len();
            let n = self.read_chunk(handle, offset + done as u64, chunk, |_, _| {})?;
            done += n;
            if n < want {
                break;
            }
        }
        Ok(done)
    }

    /// Reads into `buf` at `offset`; `keep` is told the file's data count (if the
    /// instance gave one) and the bytes read.
    fn read_chunk(
        &self,
        handle: u64,
        offset: u64,
        buf: &mut [u8],
        keep: impl FnOnce(u64, &[u8]),
    ) -> Result<usize> {
        let len = buf.len() as u32;
        self.call(
            &Request::Read {
                handle,
                offset,
                len,
            },
            |r| {
                let count = r.opt_u64()?;
                let data = r.rest();
                let n = data.len().min(buf.len());
                buf[..n].copy_from_slice(&data[..n]);
                if let Some(c) = count {
                    keep(c, &data[..n]);
                }
                Ok(n)
            },
        )
    }

    /// A small read the kept pages did not answer: whole pages from the instance, kept
    /// for the next reads.
    fn read_cached(&self, f: &OpenFile, handle: u64, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let first = offset - offset % PAGE as u64;
        let end = (offset + buf.len() as u64).next_multiple_of(PAGE as u64);
        let mut pages = vec![0u8; (end - first) as usize];
        let asked = pages.len();
        let n = self.read_chunk(handle, first, &mut pages, |count, data| {
            self.files.fill(f.ino, count, first, data, asked);
        })?;
        let skip = (offset - first) as usize;
        let got = n.saturating_sub(skip).min(buf.len());
        buf[..got].copy_from_slice(&pages[skip..skip + got]);
        Ok(got)
    }
}
