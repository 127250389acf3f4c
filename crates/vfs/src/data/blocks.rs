//! File blocks to and from the engine: whole blocks written or unmapped in one batch
//! with the inode's record (its block count made exact by the engine,
//! `Extra::Counted`), and blocks read from the device as pages.
//!
//! Invariants:
//! - Every batch that maps or unmaps blocks of a file carries the file's record, with
//!   the block count the batch leaves (docs/FORMAT.md §6.4).
//! - A record written here is settled in the file's own lane first
//!   ([`Core::record_in`]).

use crate::error::VfsError;
use crate::handle::PendingXattrs;
use crate::pagecache::{zero_block, Block, PAGE};
use crate::records::{self, Inode};
use crate::shared::{Core, BLOCK};
use engine::log::keys::FileBlock;
use engine::log::{Durability, Extra, FileWrite, WriteOptions};
use format::InodeNo;
use metadb::WriteBatch;

impl Core {
    /// Writes whole blocks `first..` of `ino` with `inode` (its new attributes) in the
    /// same batch, its block count adjusted by the blocks the write newly maps.
    pub(crate) fn write_blocks(
        &self,
        ino: InodeNo,
        inode: &mut Inode,
        first: FileBlock,
        data: &[u8],
    ) -> Result<(), VfsError> {
        let count = (data.len() as u64) / BLOCK;
        self.write_ranges(ino, inode, &[(first, count)], data, None, None)
    }

    /// [`Core::write_blocks`] for several ranges (ascending) in one batch.
    /// `fsync`: the write is an fsync of these inodes' domains (`ino`'s included).
    pub(super) fn write_ranges(
        &self,
        ino: InodeNo,
        inode: &mut Inode,
        ranges: &[(FileBlock, u64)],
        data: &[u8],
        fsync: Option<&[InodeNo]>,
        xattrs: Option<&PendingXattrs>,
    ) -> Result<(), VfsError> {
        self.record_in(ino, ino)?;
        let counted = Counted::new(ino, inode, xattrs);
        let extra = Extra::Counted(&|delta| counted.batch(delta));
        let opts = match fsync {
            Some(also) => WriteOptions::fsync_also(extra, also),
            None => WriteOptions::new(extra, Durability::Buffered),
        };
        self.engine.write(ino, ranges, data, opts)?;
        *inode = counted.done();
        Ok(())
    }

    /// [`Core::write_ranges`] of several files (buffered) with one engine call
    /// (`Engine::write_many`): each file's blocks in a batch of its own with its record
    /// and the attribute changes riding with it. A file whose batch was made is marked
    /// `written`, its `inode` then as the batch wrote it, also when a later file's failed.
    pub(super) fn write_files(&self, files: &mut [FileBlocks<'_>]) -> Result<(), VfsError> {
        for f in files.iter() {
            self.record_in(f.ino, f.ino)?;
        }
        let counted: Vec<Counted<'_>> = files
            .iter()
            .map(|f| Counted::new(f.ino, &f.inode, f.xattrs))
            .collect();
        let makers: Vec<_> = counted.iter().map(|c| |delta| c.batch(delta)).collect();
        let writes: Vec<FileWrite<'_>> = files
            .iter()
            .zip(&makers)
            .map(|(f, make)| FileWrite {
                ino: f.ino,
                ranges: &f.ranges,
                data: &f.data,
                extra: Extra::Counted(make),
            })
            .collect();
        let mut made = vec![false; writes.len()];
        let result = self.engine.write_many(&writes, &mut made);
        drop(writes);
        for ((f, counted), made) in files.iter_mut().zip(counted).zip(made) {
            if made {
                f.inode = counted.done();
                f.written = true;
            }
        }
        Ok(result?)
    }

    /// Unmaps blocks `from..to` (to the end without `to`) of `ino` with `inode` in the
    /// same batch, its block count adjusted.
    pub(crate) fn punch_blocks(
        &self,
        ino: InodeNo,
        inode: &mut Inode,
        from: FileBlock,
        to: Option<FileBlock>,
    ) -> Result<(), VfsError> {
        self.record_in(ino, ino)?;
        let counted = Counted::new(ino, inode, None);
        let extra = Extra::Counted(&|delta| counted.batch(delta));
        self.engine.punch(
            ino,
            from,
            to,
            WriteOptions::new(extra, Durability::Buffered),
        )?;
        *inode = counted.done();
        Ok(())
    }

    /// Block `b` of `ino` for a partial write: its bytes (zeros past `size`, the file's
    /// size) and whether it is mapped.
    pub(super) fn load_block(
        &self,
        ino: InodeNo,
        b: u64,
        size: u64,
    ) -> Result<(Vec<u8>, bool), VfsError> {
        let mut block = vec![0u8; PAGE];
        let mapped = self.engine.read(ino, FileBlock(b), &mut block)?[0];
        let lo = b * BLOCK;
        if size < lo + BLOCK {
            block[size.saturating_sub(lo) as usize..].fill(0);
        }
        Ok((block, mapped))
    }

    /// Blocks `first..first + count` of `ino` read from the device as pages, each with
    /// whether it is mapped (a hole is the shared zero block). The device reads straight
    /// into new cache blocks where a run of consecutive free slots is at hand (no copy);
    /// otherwise each block is copied from the device's buffer.
    pub(crate) fn read_pages(
        &self,
        ino: InodeNo,
        first: u64,
        count: u64,
    ) -> Result<Vec<(Block, bool)>, VfsError> {
        let run = Block::run(count as usize);
        let mut blocks: Vec<Option<(Block, bool)>> = vec![None; count as usize];
        let dest = |i: u64, n: usize| {
            // SAFETY: the run's blocks are cloned below only once the engine hands out
            // what it read into them, after the device is done with them.
            run.as_ref()
                .map(|run| unsafe { Block::run_buf(run, i as usize, n) })
        };
        let deliver = |i: u64, block: Option<&[u8]>| {
            blocks[i as usize] = Some(match (block, &run) {
                (Some(bytes), Some(run)) if run[i as usize].holds(bytes) => {
                    (run[i as usize].clone(), true)
                }
                (Some(bytes), _) => (Block::from(bytes), true),
                (None, _) => (zero_block(), false),
            });
        };
        self.engine
            .read_blocks_into(ino, FileBlock(first), count, dest, deliver)?;
        Ok(blocks
            .into_iter()
            .map(|b| b.expect("every block delivered"))
            .collect())
    }

    /// Whether block `b` of `ino` is mapped on the device.
    pub(super) fn is_mapped(&self, ino: InodeNo, b: u64) -> Result<bool, VfsError> {
        Ok(self.engine.next_mapped(ino, FileBlock(b))? == Some(FileBlock(b)))
    }
}

/// One file's part of [`Core::write_files`].
pub(super) struct FileBlocks<'a> {
    pub ino: InodeNo,
    /// The record to write (its block count as the file's last batch left it); once
    /// `written`, as the file's batch wrote it.
    pub inode: Inode,
    /// Ascending, with their blocks in order in `data`.
    pub ranges: Vec<(FileBlock, u64)>,
    /// The blocks' bytes, one 4 KiB piece per block (the cache's own blocks).
    pub data: Vec<&'a [u8]>,
    /// Attribute changes logged in the same batch.
    pub xattrs: Option<&'a PendingXattrs>,
    /// Whether the file's batch is logged.
    pub written: bool,
}

/// An inode record made for a batch once the engine knows how many blocks the batch maps
/// or unmaps (`Extra::Counted`), and the inode as that batch wrote it.
struct Counted<'a> {
    ino: InodeNo,
    inode: std::cell::Cell<Inode>,
    /// Attribute changes logged in the same batch (they waited for it).
    xattrs: Option<&'a PendingXattrs>,
}

impl<'a> Counted<'a> {
    fn new(ino: InodeNo, inode: &Inode, xattrs: Option<&'a PendingXattrs>) -> Counted<'a> {
        Counted {
            ino,
            inode: std::cell::Cell::new(*inode),
            xattrs,
        }
    }

    fn batch(&self, delta: i64) -> WriteBatch {
        let mut inode = self.inode.get();
        // Exact unless the record was corrupted (fsck's business): never below zero.
        inode.blocks = inode.blocks.saturating_add_signed(delta);
        self.inode.set(inode);
        let mut batch = WriteBatch::new();
        for (name, value) in self.xattrs.into_iter().flatten() {
            let key = records::xattr_key(self.ino, name);
            match value {
                Some(v) => batch.put(key, v.clone()),
                None => batch.delete(key),
            };
        }
        batch.put(
            records::inode_key(self.ino).to_vec(),
            inode.encode().to_vec(),
        );
        batch
    }

    fn done(self) -> Inode {
        self.inode.into_inner()
    }
}
