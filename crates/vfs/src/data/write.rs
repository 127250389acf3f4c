//! Writes: a writer locks the block range it changes, builds its new blocks without
//! other locks, then installs them with the new size and times under the state lock
//! (docs/DESIGN.md §10.8).
//!
//! Invariants:
//! - The size changes only under the range from the old last block on, so a writer
//!   past the end holds it stable.
//! - Bytes past the end of a file are zeros in any page whose block a write grows the
//!   file over.
//! - A write fits the device's room (claimed before it is cached) or fails with ENOSPC.

use crate::error::VfsError;
use crate::fs::FileSystem;
use crate::handle::{live, Handle};
use crate::pagecache::{Block, PAGE, WRITE_BEHIND_BLOCKS};
use crate::rangelock::BlockRange;
use crate::records::Kind;
use crate::shared::{BLOCK, FILE_SIZE_MAX};
use format::InodeNo;
use std::sync::Arc;

/// Where a data write goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum At {
    Offset(u64),
    /// At the end of the file (O_APPEND), atomically.
    End,
}

impl At {
    /// Where the write goes in a file of `size` bytes.
    fn offset(self, size: u64) -> u64 {
        match self {
            At::Offset(o) => o,
            At::End => size,
        }
    }
}

impl FileSystem {
    /// A writer that keeps what it writes elsewhere too (the kernel's page cache of a
    /// FUSE mount) wrote to file `ino`: once the file has [`WRITE_BEHIND_BLOCKS`] dirty
    /// pages the flusher writes them back at once and then lets the file's clean whole
    /// pages go. A stream written through the mount then reuses the cache's memory
    /// instead of taking new memory for all of it (each new page a fault and a zeroing,
    /// which cost the daemon more than the copy on this VM), and its write-back runs
    /// beside the writer instead of all at its fsync. Small files never get there.
    pub fn write_behind(&self, ino: InodeNo) {
        let Ok(h) = self.handle(ino) else {
            return;
        };
        let mut pages = h.pages();
        if pages.dirty_count() < WRITE_BEHIND_BLOCKS {
            return;
        }
        pages.let_go_clean = true;
        drop(pages);
        self.core.cache.kick(false);
    }

    /// Writes `data` at `offset` of file `ino` (growing it as needed); returns the bytes
    /// written.
    pub fn write_at(&self, ino: InodeNo, offset: u64, data: &[u8]) -> Result<usize, VfsError> {
        let h = self.handle(ino)?;
        Ok(self.write_data(&h, At::Offset(offset), data)?.1)
    }

    /// Writes `data` to file `h` at `at`; returns where it was written and how many
    /// bytes. The block range is locked while the new blocks are built; they are
    /// installed, with the new size and times, at once.
    pub(crate) fn write_data(
        &self,
        h: &Arc<Handle>,
        at: At,
        data: &[u8],
    ) -> Result<(u64, usize), VfsError> {
        let ino = h.ino;
        let file_size = || -> Result<(u64, bool), VfsError> {
            let st = h.read();
            let inode = live(&st, ino)?;
            if inode.kind != Kind::File {
                return Err(VfsError::IsDir(format!("inode {ino}")));
            }
            Ok((inode.size, inode.perm & crate::setid::SETID_BITS != 0))
        };
        let span = |offset: u64| -> Result<u64, VfsError> {
            offset
                .checked_add(data.len() as u64)
                .filter(|&e| e <= FILE_SIZE_MAX)
                .ok_or_else(|| VfsError::TooLarge(format!("write to {offset} + {}", data.len())))
        };
        let (mut size, setid) = file_size()?;
        if data.is_empty() {
            let offset = at.offset(size);
            return Ok((offset, 0));
        }
        // A read-only file system refuses writes now, not at write-back; so does a full
        // one: if the dirty pages and this write could exceed the device's room, all
        // dirty pages are written back first, and then this write must fit. (An
        // overwrite of mapped blocks needs no room in the end, but its write-back takes
        // new blocks before the old ones are freed.)
        self.core.engine.check_writable()?;
        if setid {
            self.drop_setid(h)?;
        }
        let pages_bytes = (data.len() as u64).div_ceil(BLOCK).saturating_add(1) * BLOCK;
        let claim = self.claim_room(pages_bytes)?;
        loop {
            // The range this write needs given the size seen last: its blocks, and for
            // a write past the end everything from the old last block on (which it
            // zeroes past the end; the size is then stable while the range is held).
            let offset = at.offset(size);
            let end = span(offset)?;
            let range = needed_range(offset, end, size);
            let guard = h.ranges.lock(range);
            size = file_size()?.0;
            let offset = at.offset(size);
            let end = span(offset)?;
            if !covers(&guard.range, &needed_range(offset, end, size)) {
                continue;
            }
            let blocks = self.build_blocks(h, offset, data, size)?;
            let last = (end - 1) / BLOCK;
            {
                let _data = self.changes().begin_data(ino);
                let mut st = h.state_write();
                let mut inode = *live(&st, ino)?;
                let mut pages = h.pages();
                if pages.dirty_count() == 0 {
                    pages.durable_size = Some(inode.size);
                    pages.dirty_since = Some(self.core.clock.now_ns());
                }
                // Nothing is mapped past the last written record's size (a write-back
                // records a size covering what it maps; a truncate unmaps past it).
                let durable_blocks = pages
                    .durable_size
                    .expect("dirty pages note the durable size")
                    .div_ceil(BLOCK);
                pages.install_all(blocks.into_iter().map(|(b, block, mapped)| {
                    (b, block, mapped.or((b >= durable_blocks).then_some(false)))
                }));
                let now = self.now();
                inode.size = inode.size.max(end);
                inode.mtime_ns = now;
                inode.ctime_ns = now;
                st.inode = Some(inode);
                self.core.cache.note_dirty(h.ino);
            }
            // The pages count dirty now.
            drop(claim);
            if self.core.cache.over_dirty_limit() {
                self.core.write_back(h)?;
            } else if self.core.cache.over_background_limit() {
                self.core.cache.kick(false);
            }
            drop(guard);
            self.keep_budget(h, last);
            return Ok((offset, data.len()));
        }
    }

    /// The new blocks of a write of `data` at `offset` into a file of `size` bytes
    /// (the caller holds the range the write needs): each block with its starting bytes
    /// (the cached page, the device's block for a partial write, or zeros) and the
    /// write's bytes, and whether it is mapped on the device if known.
    fn build_blocks(
        &self,
        h: &Handle,
        offset: u64,
        data: &[u8],
        size: u64,
    ) -> Result<Vec<(u64, Block, Option<bool>)>, VfsError> {
        let ino = h.ino;
        let end = offset + data.len() as u64;
        let first = offset / BLOCK;
        let last = (end - 1) / BLOCK;
        let cached = |b: u64| {
            h.pages()
                .get(b)
                .map(|p| (p.data.clone(), p.dirty, p.mapped))
        };
        let mut out = Vec::with_capacity((last - first + 2) as usize);
        // Growth past a partial last block the write does not reach: that block's bytes
        // past the end become zeros (a truncate may have left old bytes there).
        let tail = (size % BLOCK) as usize;
        let b = size / BLOCK;
        if offset > size && tail != 0 && b < first {
            let page = cached(b);
            // Only a block with data needs it (a hole reads as zeros and stays one).
            let has_data = match page {
                Some((_, true, _)) | Some((_, false, Some(true))) => true,
                Some((_, false, Some(false))) => false,
                _ => self.core.is_mapped(ino, b)?,
            };
            if has_data {
                let (mut block, mapped): (Block, Option<bool>) = match page {
                    Some((data, _, mapped)) => (Block::from(&data[..]), mapped),
                    None => {
                        let (block, mapped) = self.core.load_block(ino, b, size)?;
                        (Block::from(&block[..]), Some(mapped))
                    }
                };
                block.get_mut().expect("a new block")[tail..].fill(0);
                out.push((b, block, mapped));
            }
        }
        for b in first..=last {
            let (lo, hi) = (b * BLOCK, (b + 1) * BLOCK);
            if offset <= lo && end >= hi {
                // A whole block: the write's bytes alone.
                let whole = Block::from(&data[(lo - offset) as usize..(hi - offset) as usize]);
                out.push((b, whole, None));
                continue;
            }
            let (mut block, mapped): (Block, Option<bool>) = match cached(b) {
                Some((data, _, mapped)) => (Block::from(&data[..]), mapped),
                None if lo < size => {
                    let (block, mapped) = self.core.load_block(ino, b, size)?;
                    (Block::from(&block[..]), Some(mapped))
                }
                None => (Block::from(&[0u8; PAGE][..]), None),
            };
            let bytes = block.get_mut().expect("a new block");
            if lo < size && size < hi && end > size {
                // The block holding the end of the file, which this write grows.
                bytes[(size - lo) as usize..].fill(0);
            }
            let from = offset.max(lo);
            let to = end.min(hi);
            bytes[(from - lo) as usize..(to - lo) as usize]
                .copy_from_slice(&data[(from - offset) as usize..(to - offset) as usize]);
            out.push((b, block, mapped));
        }
        Ok(out)
    }

    /// Room for `bytes` of new pages: if the dirty pages and these could exceed the
    /// device's room, the files unlinked last are freed and every dirty page is written
    /// back first, and then they must fit (ENOSPC).
    fn claim_room(&self, bytes: u64) -> Result<crate::pagecache::RoomClaim<'_>, VfsError> {
        if let Some(claim) = self.core.cache.claim_room(bytes) {
            return Ok(claim);
        }
        self.core.reap_all();
        self.core.write_back_all()?;
        self.core.refresh_room();
        self.core
            .cache
            .claim_room(bytes)
            .ok_or_else(|| VfsError::no_space(0))
    }
}

/// The blocks a write of `offset..end` into a file of `size` bytes changes: its own,
/// and for a write past the end everything from the old last block on (the size then
/// changes only under this range).
fn needed_range(offset: u64, end: u64, size: u64) -> BlockRange {
    let first = offset / BLOCK;
    if end > size {
        BlockRange::from(first.min(size / BLOCK))
    } else {
        BlockRange {
            first,
            last: (end - 1) / BLOCK,
        }
    }
}

fn covers(held: &BlockRange, needed: &BlockRange) -> bool {
    held.first <= needed.first && needed.last <= held.last
}
