//! Write-back: a file's dirty pages to the engine in batches with its record, and the
//! callers that need it (fsync, sync, the dirty limit, every other writer of the
//! record); the device's room for dirty pages (docs/DESIGN.md §10.7).
//!
//! Invariants:
//! - A write-back holds the handle's `writeback` lock across its device IO and the
//!   state lock only to snapshot and to note its result: readers and writers go on.
//! - Batches go in ascending order, each recording a size no larger than what is
//!   written so far: after a crash a file is some prefix of its write-backs.
//! - Pages rewritten during a write-back stay dirty; a deleted inode's pages are
//!   dropped, never written.

use crate::error::VfsError;
use crate::fs::FileSystem;
use crate::handle::{Handle, InodeState, PendingXattrs};
use crate::pagecache::Block;
use crate::records::Inode;
use crate::shared::{Core, BLOCK};
use engine::log::keys::FileBlock;
use format::InodeNo;
use std::sync::atomic::Ordering;

/// Blocks per engine write (keeps each batch well under MetaDB's record limit).
pub(super) const WRITE_CHUNK_BLOCKS: u64 = 256;
/// Segments the room for dirty pages leaves for MetaDB's tables to grow into between
/// look-ups of the room (a flush or compaction writes a table before it frees the old
/// ones). Not a bound MetaDB keeps: writes let in against the room hold no reservation in
/// the segment pool (docs/DESIGN.md §10.7).
const METADB_GROWTH: u32 = 2;

/// How a write-back reaches the inode's state.
pub(super) enum StateAccess<'a> {
    /// The caller holds the inode for writing its record ([`Handle::write`]).
    Held(&'a mut InodeState),
    /// A write-back on its own: it holds the write-back lock and takes the state lock
    /// only to snapshot and to note its result.
    Own(&'a Handle),
}

/// A file's dirty pages as they were at one moment, with its record then.
pub(super) struct Snapshot {
    pub inode: Inode,
    /// The dirty blocks by run, in batches of at most `WRITE_CHUNK_BLOCKS` blocks,
    /// ascending.
    pub batches: Vec<Vec<(u64, Vec<Block>)>>,
    /// The size the log holds for the file.
    pub durable: u64,
    /// Attribute changes that ride with the last batch.
    pub xattrs: Option<PendingXattrs>,
}

impl Core {
    /// Writes back `h`'s dirty pages, for a caller that holds its record lock
    /// ([`Handle::write`]) as `st` (an operation about to write the record).
    pub(crate) fn write_back_held(&self, h: &Handle, st: &mut InodeState) -> Result<(), VfsError> {
        self.write_back_with(h, StateAccess::Held(st), None)
            .map(drop)
    }

    /// Writes back `h`'s dirty pages while its readers and writers go on.
    pub(crate) fn write_back(&self, h: &Handle) -> Result<(), VfsError> {
        let _writeback = h.writeback.lock().expect("write-back lock");
        self.write_back_with(h, StateAccess::Own(h), None).map(drop)
    }

    /// The dirty pages as they are now go to the engine: all in one batch with the
    /// inode's record when they number at most `WRITE_CHUNK_BLOCKS` (the file then has
    /// every write so far or none after a crash), else in batches of that many blocks in
    /// ascending order, each but the last recording a size no larger than what is
    /// written so far. Pages rewritten meanwhile stay dirty. A deleted inode's pages are
    /// dropped.
    ///
    /// With `fsync` (inodes whose domains an fsync makes durable, `h`'s among them) the
    /// last batch is written as that fsync (its data and WAL writes in flight together,
    /// one flush); returns whether it was (not when nothing was dirty).
    fn write_back_with(
        &self,
        h: &Handle,
        access: StateAccess<'_>,
        fsync: Option<&[InodeNo]>,
    ) -> Result<bool, VfsError> {
        match self.snapshot(h, &access) {
            Some(snap) => self.write_snapshot(h, access, snap, fsync),
            None => Ok(false),
        }
    }

    /// The inode and its dirty blocks, consistent (writers install both under the state
    /// lock), in batches; `None` if nothing is dirty (a deleted inode's pages are
    /// dropped). The caller holds the write-back lock.
    pub(super) fn snapshot(&self, h: &Handle, access: &StateAccess<'_>) -> Option<Snapshot> {
        let read_guard;
        let st: &InodeState = match access {
            StateAccess::Held(st) => st,
            StateAccess::Own(h) => {
                read_guard = h.read();
                &read_guard
            }
        };
        let mut pages = h.pages();
        if pages.dirty_count() == 0 {
            return None;
        }
        let Some(inode) = st.inode else {
            pages.clear();
            self.cache.note_clean(h.ino);
            return None;
        };
        // Attribute changes made while the pages were dirty ride with them.
        let xattrs = st
            .xattrs_pending
            .then(|| h.xattrs.lock().expect("xattrs lock").clone());
        let batches: Vec<Vec<(u64, Vec<Block>)>> = pack(
            pages.dirty_runs(WRITE_CHUNK_BLOCKS),
            |r| r.1,
            WRITE_CHUNK_BLOCKS,
        )
        .into_iter()
        .map(|runs| {
            runs.into_iter()
                .map(|(first, n)| (first, pages.blocks(first, n)))
                .collect()
        })
        .collect();
        let durable = pages
            .durable_size
            .expect("dirty pages note the durable size");
        Some(Snapshot {
            inode,
            batches,
            durable,
            xattrs,
        })
    }

    /// Writes `snap` (`h`'s dirty pages, taken under its write-back lock, which the
    /// caller still holds) back in its batches, noting each batch's result.
    pub(super) fn write_snapshot(
        &self,
        h: &Handle,
        mut access: StateAccess<'_>,
        snap: Snapshot,
        fsync: Option<&[InodeNo]>,
    ) -> Result<bool, VfsError> {
        // Before the blocks' mappings change: a stat meanwhile (which does not wait for
        // the write-back) counts the blocks as they were until the result is noted.
        self.learn_mappings(h)?;
        let Snapshot {
            inode,
            batches,
            mut durable,
            xattrs,
        } = snap;
        let count = batches.len();
        let mut blocks = inode.blocks;
        for (i, runs) in batches.into_iter().enumerate() {
            let mut record = inode;
            record.blocks = blocks;
            let (last_first, last_blocks) = runs.last().expect("a batch has a run");
            if i + 1 < count {
                let written_end = (last_first + last_blocks.len() as u64) * BLOCK;
                record.size = durable.max(inode.size.min(written_end));
            }
            let (ranges, data) = ranges_and_bytes(&runs);
            let last = i + 1 == count;
            let also = fsync.filter(|_| last);
            let riding = xattrs.as_ref().filter(|_| last);
            self.write_ranges(h.ino, &mut record, &ranges, &data, also, riding)?;
            blocks = record.blocks;
            durable = record.size;
            let mut write_guard;
            let st: &mut InodeState = match &mut access {
                StateAccess::Held(st) => st,
                StateAccess::Own(h) => {
                    write_guard = h.state_write();
                    &mut write_guard
                }
            };
            self.noted(h, st, &runs, &record, riding);
        }
        Ok(fsync.is_some())
    }

    /// The result of a logged batch of `h` (`runs`, with `record` as the batch wrote
    /// it and `riding` the attribute changes it carried): the block count, the
    /// attribute changes no longer pending unless changed again, and pages not
    /// rewritten meanwhile clean. The caller holds the state lock for writing as `st`.
    pub(super) fn noted(
        &self,
        h: &Handle,
        st: &mut InodeState,
        runs: &[(u64, Vec<Block>)],
        record: &Inode,
        riding: Option<&PendingXattrs>,
    ) {
        if let Some(current) = st.inode.as_mut() {
            current.blocks = record.blocks;
        }
        if let (Some(logged), true) = (riding, st.xattrs_pending) {
            // Logged now, unless changed again meanwhile.
            let mut pending = h.xattrs.lock().expect("xattrs lock");
            pending.retain(|name, value| logged.get(name) != Some(value));
            st.xattrs_pending = !pending.is_empty();
        }
        self.note_written(h, runs, record.size);
    }

    /// A batch of `h`'s blocks is logged (the file durable up to `durable` bytes once
    /// it is): its pages not rewritten meanwhile count clean. The caller holds the
    /// state lock for writing.
    fn note_written(&self, h: &Handle, runs: &[(u64, Vec<Block>)], durable: u64) {
        // Counted as taken (an overwrite frees as much later) before the pages count
        // clean: the room errs low until the next look-up.
        let written: u64 = runs.iter().map(|(_, run)| run.len() as u64).sum();
        self.cache.take_room(written * BLOCK);
        let mut pages = h.pages();
        for (first, run) in runs {
            for (j, block) in run.iter().enumerate() {
                pages.written(first + j as u64, block);
            }
        }
        if pages.dirty_count() > 0 {
            pages.durable_size = Some(durable);
        } else {
            self.cache.note_clean(h.ino);
        }
        self.cache
            .written_back
            .fetch_add(written, Ordering::Relaxed);
        self.cache.writebacks.fetch_add(1, Ordering::Relaxed);
    }

    /// Looks up the device's room for new data for the dirty limit (at mount, in every
    /// flusher round, and when a write finds itself beyond it): what statfs reports
    /// free (capacity beyond the live blocks), or the blocks of the free segments data
    /// may take now if that is more (a tiny image promises no capacity, its log heads
    /// and reserves taking it all, yet takes writes while it has free segments).
    /// Less [`METADB_GROWTH`] segments: MetaDB's tables come out of the same free
    /// segments, and a table written after a write was let in must not leave its
    /// write-back without room. A look-up a write-back overtook is not stored (it could
    /// give back room that write-back took) and is made again.
    pub(crate) fn refresh_room(&self) {
        loop {
            let epoch = self.cache.room_epoch();
            let space = self.engine.space_report();
            let room = space
                .room_blocks()
                .saturating_sub(u64::from(METADB_GROWTH) * format::constants::BLOCKS_PER_SEGMENT);
            if self.cache.set_room(epoch, room * BLOCK) {
                return;
            }
        }
    }

    /// Learns whether each of `h`'s dirty blocks of unknown mapping is mapped on the
    /// device (what `st_blocks` needs), looked up without the pages' lock: readers and
    /// writers go on. A block's mapping changes only by a write-back, which learns its
    /// blocks' mappings before it writes them (so a lookup that overtakes it finds the
    /// block known already), or by a truncate or punch, which drops the pages first (a
    /// drop meanwhile voids the lookups).
    pub(crate) fn learn_mappings(&self, h: &Handle) -> Result<(), VfsError> {
        let (unknown, drops) = {
            let pages = h.pages();
            if pages.dirty_count() == 0 {
                return Ok(());
            }
            (pages.unknown_dirty(), pages.drops())
        };
        if unknown.is_empty() {
            return Ok(());
        }
        let mut found = Vec::with_capacity(unknown.len());
        for b in unknown {
            found.push((b, self.is_mapped(h.ino, b)?));
        }
        let mut pages = h.pages();
        if pages.drops() == drops {
            for (b, mapped) in found {
                pages.learn_mapped(b, mapped);
            }
        }
        Ok(())
    }
}

impl FileSystem {
    /// Writes back `h`'s dirty pages before its record is written elsewhere (the caller
    /// holds its write lock as `st`).
    pub(crate) fn settle(&self, h: &Handle, st: &mut InodeState) -> Result<(), VfsError> {
        self.core.write_back_held(h, st)
    }

    /// Drops the pages of `ino`, whose deletion is done (dirty pages of a deleted inode
    /// are never written back; until the deletion succeeds they still serve reads).
    pub(crate) fn drop_pages(&self, ino: InodeNo) {
        if let Some(h) = self.core.inodes.get(ino) {
            let mut pages = h.pages();
            pages.clear();
            self.core.cache.note_clean(ino);
        }
    }

    /// fsync: makes `ino`'s data and attributes durable, and the names it was created or
    /// renamed under since its last fsync (`data_only`: fdatasync, the same here since
    /// the size rides with the data).
    pub fn fsync_ino(&self, ino: InodeNo, data_only: bool) -> Result<(), VfsError> {
        let _ = data_only;
        let h = self.handle(ino)?;
        // The file's lane and the lanes of the names it gained, in one device flush (a
        // crash before it returns keeps any combination of them, as without an fsync; a
        // new file's contents never survive without its create, which they require).
        // Names noted from here on are made after the fsync began: it need not cover them.
        let mut lanes = self.take_lanes(ino);
        lanes.push(ino);
        let synced = {
            let _writeback = h.writeback.lock().expect("write-back lock");
            self.core
                .write_back_with(&h, StateAccess::Own(&h), Some(&lanes))
        };
        let synced = match synced {
            Ok(true) => Ok(()),
            Ok(false) => self.core.engine.fsync_all(&lanes).map_err(Into::into),
            Err(e) => Err(e),
        };
        if synced.is_err() {
            // A later fsync (after ENOSPC, say) must still cover them.
            for &lane in &lanes[..lanes.len() - 1] {
                self.note_lane(ino, lane);
            }
        }
        synced
    }

    /// sync / syncfs: everything so far is durable (a whole-file-system checkpoint).
    /// Everything written before the call durable, like [`FileSystem::sync`], but as
    /// an fsync of every file would make it: one persist and one device flush, no
    /// checkpoint (an fsync of a FUSE mount's root directory, which programs such as
    /// sqlite also call after creating a file there).
    pub fn persist_all(&self) -> Result<(), VfsError> {
        self.core.write_back_all()?;
        self.forget_lanes();
        self.core.engine.persist_all()?;
        Ok(())
    }

    pub fn sync(&self) -> Result<(), VfsError> {
        self.core.write_back_all()?;
        // What was noted before the sync is covered by it.
        self.forget_lanes();
        self.core.engine.sync()?;
        Ok(())
    }
}

/// The ranges of `runs` for the engine, and their blocks' bytes in order.
fn ranges_and_bytes(runs: &[(u64, Vec<Block>)]) -> (Vec<(FileBlock, u64)>, Vec<u8>) {
    let mut data = Vec::new();
    for (_, run) in runs {
        for block in run {
            data.extend_from_slice(block);
        }
    }
    (ranges_of(runs), data)
}

/// The ranges of `runs` for the engine.
pub(super) fn ranges_of(runs: &[(u64, Vec<Block>)]) -> Vec<(FileBlock, u64)> {
    runs.iter()
        .map(|(first, run)| (FileBlock(*first), run.len() as u64))
        .collect()
}

/// `items` in consecutive batches, in order, each as long as its sizes stay within
/// `max` (an item larger than `max` is a batch of its own): a file's dirty runs into
/// engine writes, small files into groups.
pub(super) fn pack<T>(items: Vec<T>, size: impl Fn(&T) -> u64, max: u64) -> Vec<Vec<T>> {
    let mut batches: Vec<Vec<T>> = Vec::new();
    let mut total = 0;
    for item in items {
        let n = size(&item);
        match batches.last_mut() {
            Some(batch) if total + n <= max => batch.push(item),
            _ => {
                batches.push(vec![item]);
                total = 0;
            }
        }
        total += n;
    }
    batches
}

#[cfg(test)]
mod tests {
    use super::pack;

    #[test]
    fn items_are_packed_in_order_up_to_the_limit() {
        let runs = vec![(0, 2), (5, 3), (9, 4), (20, 4), (30, 1)];
        assert_eq!(
            pack(runs, |r| r.1, 5),
            vec![vec![(0, 2), (5, 3)], vec![(9, 4)], vec![(20, 4), (30, 1)]]
        );
        assert!(pack(Vec::<(u64, u64)>::new(), |r| r.1, 5).is_empty());
        // An item over the limit goes alone.
        assert_eq!(
            pack(vec![1, 9, 2, 2], |&n| n, 4),
            vec![vec![1], vec![9], vec![2, 2]]
        );
    }
}
