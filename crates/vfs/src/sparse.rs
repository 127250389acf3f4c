//! Sparse files: `fallocate` (allocate, keep size, punch hole, zero range) and `lseek`'s
//! SEEK_DATA and SEEK_HOLE, over the engine's block index (a hole is a block with no
//! mapping).
//!
//! Invariants:
//! - Every change runs under the inode's write lock and each batch carries the inode with
//!   its exact mapped-block count (`Inode::blocks`).
//! - Data is found at block granularity: a mapped block is data even where it holds
//!   zeros (as ext4 reports written extents), and the end of the file is a hole.
//! - Allocation maps nothing and writes nothing: it fails with ENOSPC unless the free
//!   space holds every hole of the range, then (mode 0) grows the size. In a
//!   log-structured file system every write of a block takes a fresh block, allocated or
//!   not, so mapping zeros ahead would cost the writes without making later writes safer
//!   (OpenZFS's fallocate does the same for the same reason; docs/SEMANTICS.md).

use crate::error::VfsError;
use crate::fs::FileSystem;
use crate::handle::{live, InodeState};
use crate::records::{Inode, Kind};
use crate::shared::{BLOCK, FILE_SIZE_MAX};
use engine::log::keys::FileBlock;
use format::InodeNo;

/// What `fallocate` does to a byte range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fallocate {
    /// Map every hole in the range (mode 0, or FALLOC_FL_KEEP_SIZE with `keep_size`);
    /// without `keep_size` the file grows to cover the range.
    Allocate { keep_size: bool },
    /// Unmap the range: it reads as zeros (PUNCH_HOLE | KEEP_SIZE).
    PunchHole,
    /// The range reads as zeros (ZERO_RANGE, optionally with KEEP_SIZE).
    ZeroRange { keep_size: bool },
}

impl Fallocate {
    /// The operation Linux's `fallocate(2)` mode bits ask for; EOPNOTSUPP for modes augefs
    /// does not implement (COLLAPSE_RANGE, INSERT_RANGE, UNSHARE_RANGE, a punch without
    /// KEEP_SIZE), EINVAL for unknown bits.
    pub fn from_mode(mode: i32) -> Result<Fallocate, VfsError> {
        const KNOWN: i32 = libc::FALLOC_FL_KEEP_SIZE
            | libc::FALLOC_FL_PUNCH_HOLE
            | libc::FALLOC_FL_COLLAPSE_RANGE
            | libc::FALLOC_FL_ZERO_RANGE
            | libc::FALLOC_FL_INSERT_RANGE
            | libc::FALLOC_FL_UNSHARE_RANGE;
        if mode & !KNOWN != 0 {
            return Err(VfsError::Invalid(format!("fallocate mode {mode:#x}")));
        }
        let keep_size = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
        match mode & !libc::FALLOC_FL_KEEP_SIZE {
            0 => Ok(Fallocate::Allocate { keep_size }),
            libc::FALLOC_FL_PUNCH_HOLE if keep_size => Ok(Fallocate::PunchHole),
            libc::FALLOC_FL_ZERO_RANGE => Ok(Fallocate::ZeroRange { keep_size }),
            _ => Err(VfsError::Unsupported(format!("fallocate mode {mode:#x}"))),
        }
    }
}

impl FileSystem {
    /// `fallocate(2)` on file `ino` for `len` bytes at `offset`.
    pub fn fallocate(
        &self,
        ino: InodeNo,
        op: Fallocate,
        offset: u64,
        len: u64,
    ) -> Result<(), VfsError> {
        let end = offset
            .checked_add(len)
            .filter(|_| len > 0)
            .ok_or_else(|| VfsError::Invalid(format!("fallocate of {len} bytes at {offset}")))?;
        if end > FILE_SIZE_MAX {
            return Err(VfsError::TooLarge(format!("fallocate to {end}")));
        }
        let h = self.handle(ino)?;
        let _range = h.ranges.lock(crate::rangelock::BlockRange::ALL);
        let mut st = h.write();
        let _data = self.changes().begin_data(ino);
        let inode = *live(&st, ino)?;
        if inode.kind != Kind::File {
            return Err(if inode.kind == Kind::Dir {
                VfsError::IsDir(format!("inode {ino}"))
            } else {
                VfsError::Invalid(format!("fallocate of inode {ino}, not a file"))
            });
        }
        let keep_size = match op {
            Fallocate::Allocate { keep_size } => {
                self.check_space_for_holes(ino, offset / BLOCK, end.div_ceil(BLOCK))?;
                if !keep_size && end > inode.size {
                    self.truncate_locked(&h, &mut st, end)?;
                }
                return Ok(());
            }
            Fallocate::PunchHole => true,
            Fallocate::ZeroRange { keep_size } => keep_size,
        };
        // The range's blocks change under the cache: write it back and drop them.
        self.settle(&h, &mut st)?;
        h.pages().drop_range(offset / BLOCK, end.div_ceil(BLOCK));
        self.zero_range(ino, &mut st, offset, end)?;
        if !keep_size && end > live(&st, ino)?.size {
            self.truncate_locked(&h, &mut st, end)?;
        }
        Ok(())
    }

    /// ENOSPC unless the free space holds every hole among blocks `first..end` (blocks
    /// only in the cache count as holes: their write-back needs the space too).
    fn check_space_for_holes(&self, ino: InodeNo, first: u64, end: u64) -> Result<(), VfsError> {
        let holes = self.holes(ino, first, end)?;
        let needed: u64 = holes.iter().map(|(a, b)| b - a).sum();
        let free = self.statfs().blocks_free;
        if needed > free {
            return Err(VfsError::no_space(free));
        }
        Ok(())
    }

    /// The holes among blocks `first..end`, as block ranges.
    fn holes(&self, ino: InodeNo, first: u64, end: u64) -> Result<Vec<(u64, u64)>, VfsError> {
        let mut out = Vec::new();
        let mut at = first;
        while at < end {
            let data = self
                .core
                .engine
                .next_mapped(ino, FileBlock(at))?
                .map_or(end, |b| b.0.min(end));
            if data > at {
                out.push((at, data));
            }
            if data >= end {
                break;
            }
            at = self.core.engine.next_unmapped(ino, FileBlock(data))?.0;
        }
        Ok(out)
    }

    /// Bytes `offset..end` read as zeros: whole blocks are unmapped, the partial blocks at
    /// either end have their bytes in the range zeroed. The size does not change.
    fn zero_range(
        &self,
        ino: InodeNo,
        st: &mut InodeState,
        offset: u64,
        end: u64,
    ) -> Result<(), VfsError> {
        let mut inode = *live(st, ino)?;
        let now = self.now();
        inode.mtime_ns = now;
        inode.ctime_ns = now;
        let first_whole = offset.div_ceil(BLOCK);
        let end_whole = end / BLOCK;
        if first_whole > end_whole {
            // Inside one block, short of both its ends.
            let b = offset / BLOCK;
            self.zero_in_block(ino, &mut inode, b, offset % BLOCK, end - b * BLOCK)?;
        } else {
            if offset % BLOCK != 0 {
                self.zero_in_block(ino, &mut inode, offset / BLOCK, offset % BLOCK, BLOCK)?;
            }
            if end % BLOCK != 0 {
                self.zero_in_block(ino, &mut inode, end_whole, 0, end % BLOCK)?;
            }
        }
        if end_whole > first_whole {
            self.core.punch_blocks(
                ino,
                &mut inode,
                FileBlock(first_whole),
                Some(FileBlock(end_whole)),
            )?;
        } else {
            self.put_inode(ino, &inode, metadb::WriteBatch::new())?;
        }
        st.inode = Some(inode);
        Ok(())
    }

    /// Zeroes bytes `from..to` of block `b` if it is mapped (a hole is zeros already).
    fn zero_in_block(
        &self,
        ino: InodeNo,
        inode: &mut Inode,
        b: u64,
        from: u64,
        to: u64,
    ) -> Result<(), VfsError> {
        let mut block = vec![0u8; BLOCK as usize];
        if self.core.engine.read(ino, FileBlock(b), &mut block)?[0] {
            block[from as usize..to as usize].fill(0);
            self.core.write_blocks(ino, inode, FileBlock(b), &block)?;
        }
        Ok(())
    }

    /// `lseek(SEEK_DATA)`: the first offset at or after `offset` inside data; ENXIO at or
    /// past the end of the file, or when only a hole follows.
    pub fn seek_data(&self, ino: InodeNo, offset: u64) -> Result<u64, VfsError> {
        let h = self.handle(ino)?;
        // Dirty pages are data the block index does not show yet.
        let mut st = h.write();
        self.settle(&h, &mut st)?;
        let size = live(&st, ino)?.size;
        let beyond = || VfsError::NoSuchOffset(format!("inode {ino} offset {offset}"));
        if offset >= size {
            return Err(beyond());
        }
        match self
            .core
            .engine
            .next_mapped(ino, FileBlock(offset / BLOCK))?
        {
            Some(b) if b.0 * BLOCK < size => Ok(offset.max(b.0 * BLOCK)),
            _ => Err(beyond()),
        }
    }

    /// `lseek(SEEK_HOLE)`: the first offset at or after `offset` inside a hole (the end
    /// of the file counts as one); ENXIO at or past the end.
    pub fn seek_hole(&self, ino: InodeNo, offset: u64) -> Result<u64, VfsError> {
        let h = self.handle(ino)?;
        // Dirty pages are data the block index does not show yet.
        let mut st = h.write();
        self.settle(&h, &mut st)?;
        let size = live(&st, ino)?.size;
        if offset >= size {
            return Err(VfsError::NoSuchOffset(format!(
                "inode {ino} offset {offset}"
            )));
        }
        let hole = self
            .core
            .engine
            .next_unmapped(ino, FileBlock(offset / BLOCK))?;
        Ok(offset.max(hole.0 * BLOCK).min(size))
    }
}
