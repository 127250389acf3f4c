//! Truncate: a file's new size, its blocks past it unmapped in one batch with the
//! record, the old last block's tail zeroed when the file grows.
//!
//! Invariants:
//! - Truncate holds the whole block range and the record lock; it writes the dirty
//!   pages back first and drops only the pages of the blocks it changes.

use crate::error::VfsError;
use crate::fs::FileSystem;
use crate::handle::{live, Handle, InodeState};
use crate::rangelock::BlockRange;
use crate::records::Kind;
use crate::shared::{BLOCK, FILE_SIZE_MAX};
use engine::log::keys::FileBlock;
use format::InodeNo;
use metadb::WriteBatch;

impl FileSystem {
    /// Sets file `ino`'s size: blocks past it are freed, the tail of the last block is
    /// zeroed, growth leaves a hole.
    pub fn truncate(&self, ino: InodeNo, size: u64) -> Result<(), VfsError> {
        let h = self.handle(ino)?;
        self.drop_setid(&h)?;
        let _range = h.ranges.lock(BlockRange::ALL);
        let mut st = h.write();
        self.truncate_locked(&h, &mut st, size)
    }

    /// [`FileSystem::truncate`] for a caller holding the whole block range and the
    /// inode's record lock.
    pub(crate) fn truncate_locked(
        &self,
        h: &Handle,
        st: &mut InodeState,
        size: u64,
    ) -> Result<(), VfsError> {
        let ino = h.ino;
        let mut inode = *live(st, ino)?;
        match inode.kind {
            Kind::File => {}
            Kind::Dir => return Err(VfsError::IsDir(format!("inode {ino}"))),
            // Linux's truncate(2) of anything else but a directory.
            _ => return Err(VfsError::Invalid(format!("truncate of a {:?}", inode.kind))),
        }
        if size > FILE_SIZE_MAX {
            return Err(VfsError::TooLarge(format!("size {size}")));
        }
        self.core.write_back_held(h, st)?;
        let _data = self.changes().begin_data(ino);
        inode = *live(st, ino)?;
        let old = inode.size;
        // The blocks from the shorter end's block on change under the cache (a shrink
        // unmaps them, growth zeroes the old last block's tail); those before stay.
        if size != old {
            h.pages().drop_range(size.min(old) / BLOCK, u64::MAX);
        }
        let now = self.now();
        inode.size = size;
        inode.mtime_ns = now;
        inode.ctime_ns = now;
        if size < old {
            // One batch: the blocks past the new end and the size. Bytes of the last
            // block past the end stay on the device; writes and growth zero them before
            // they can be read (`write_locked`).
            self.core
                .punch_blocks(ino, &mut inode, FileBlock(size.div_ceil(BLOCK)), None)?;
        } else if old % BLOCK != 0 && size > old {
            // Growth: the old last block's bytes past the old end become zeros, in the
            // same batch as the size.
            let b = old / BLOCK;
            let (block, mapped) = self.core.load_block(ino, b, old)?;
            if mapped {
                self.core
                    .write_blocks(ino, &mut inode, FileBlock(b), &block)?;
            } else {
                self.put_inode(ino, &inode, WriteBatch::new())?;
            }
        } else {
            self.put_inode(ino, &inode, WriteBatch::new())?;
        }
        st.inode = Some(inode);
        Ok(())
    }
}
