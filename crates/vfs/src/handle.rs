//! An inode in memory: its state (the record, the open count) and its handle (the
//! locks of its record, its data and its write-back, and its cached pages), which
//! operations get from the inode table through `FileSystem::handle` in `crate::fs`
//! (docs/DESIGN.md §10.5 and §10.8).
//!
//! Invariants:
//! - Lock order within a handle: `ranges`, `writeback`, `state`, `pages`, `xattrs`; no other
//!   inode's locks are taken while holding `writeback` without `state`, but by the
//!   write-back of a group of files (`data::many`), which takes their `writeback` locks
//!   in inode order without waiting (`try_lock`), then their `state` and `pages` one
//!   file at a time: it never waits while holding a `writeback` lock for another, and
//!   a file's `state` is held without its `writeback` only for moments that take no
//!   other inode's lock.
//! - One handle per inode (the inode table, `crate::caches::InodeTable`, makes them):
//!   its record is loaded once, under the table's shard lock.
//! - A directory's `created` record, when set, is newer than `state`'s and is taken
//!   into it by the next holder of the write lock.

use crate::error::VfsError;
use crate::pagecache::{Cache, Pages};
use crate::rangelock::RangeLock;
use crate::records::{Inode, Kind};
use format::InodeNo;
use platform::Signal;
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// An inode in memory: its attributes, and who uses it.
#[derive(Debug)]
pub(crate) struct InodeState {
    /// `None` once the inode is deleted.
    pub inode: Option<Inode>,
    /// Open handles.
    pub open: u32,
    /// Whether [`Handle::xattrs`] holds extended-attribute changes made while the file
    /// had dirty pages, not logged yet: they ride with the write-back of those pages
    /// (docs/DESIGN.md §10.7), and reads of attributes see them first. (A flag here,
    /// in the padding after `open`, and the changes at the handle's end, away from the
    /// lines a stat reads.)
    pub xattrs_pending: bool,
}

/// Attribute changes waiting for a write-back, by name.
pub(crate) type PendingXattrs = std::collections::BTreeMap<Vec<u8>, Option<Vec<u8>>>;

/// An inode in memory. Lock order: `ranges`, `writeback`, `state`, `pages`, `xattrs` (and no
/// other inode's locks while holding `writeback` without `state`, but by a group
/// write-back: see the module's invariants).
///
/// Laid out in declaration order, what a stat or an open reads first: `writeback`,
/// `state`, `created` and the head of `pages` (its dirty counts) follow the reference
/// count, so a stat of a file not in the CPU's caches misses the handle's first four
/// adjacent lines (three of them for a file) rather than five lines spread over eight.
#[derive(Debug)]
#[repr(C)]
pub(crate) struct Handle {
    /// Held by a write-back of the inode's dirty pages for its whole device IO, and by
    /// every writer of the inode's record (see [`Handle::write`]).
    pub writeback: Mutex<()>,
    pub state: RwLock<InodeState>,
    /// A directory's record as creates in it last wrote it, newer than `state`'s: creates
    /// hold `state` in read mode only (so that they run in parallel) and build the
    /// directory's record under the engine's lane lock from this. Taken into `state` by
    /// the next holder of its write lock ([`Handle::write`], [`Handle::state_write`]);
    /// readers of attributes see it through [`Handle::attrs`].
    pub created: Mutex<Option<Inode>>,
    /// Cached blocks of a file.
    pub pages: Mutex<Pages>,
    pub ino: InodeNo,
    /// Block ranges being written (data writers, truncate, fallocate).
    pub ranges: RangeLock,
    /// Notified (with `pages`) whenever a device read of its blocks ends.
    pub fetched: Signal,
    /// The extended-attribute changes waiting for a write-back, by name (`None`:
    /// removed); meaningful only while `state`'s `xattrs_pending` is set, and changed
    /// only under `state`'s write lock.
    pub xattrs: Mutex<PendingXattrs>,
}

/// The inode's state held for writing its record: excludes write-backs in flight too.
pub(crate) struct StateWrite<'a> {
    st: RwLockWriteGuard<'a, InodeState>,
    _writeback: MutexGuard<'a, ()>,
}

impl std::ops::Deref for StateWrite<'_> {
    type Target = InodeState;

    fn deref(&self) -> &InodeState {
        &self.st
    }
}

impl std::ops::DerefMut for StateWrite<'_> {
    fn deref_mut(&mut self) -> &mut InodeState {
        &mut self.st
    }
}

impl Handle {
    /// The handle of `ino` with its record `inode` (`None`: deleted), not open, no
    /// pages cached yet (`cache`: the page cache they count against).
    pub fn new(ino: InodeNo, inode: Option<Inode>, cache: Arc<Cache>) -> Handle {
        Handle {
            ino,
            ranges: RangeLock::default(),
            writeback: Mutex::new(()),
            state: RwLock::new(InodeState {
                inode,
                open: 0,
                xattrs_pending: false,
            }),
            created: Mutex::new(None),
            pages: Mutex::new(Pages::new(cache)),
            fetched: Signal::new(),
            xattrs: Mutex::new(PendingXattrs::new()),
        }
    }

    /// The state for reading (attributes, size): held briefly by the data path.
    pub fn read(&self) -> RwLockReadGuard<'_, InodeState> {
        self.state.read().expect("inode lock")
    }

    /// The state for an operation that may write the inode's record (or delete it):
    /// waits for a write-back in flight, and keeps data writers from installing pages.
    pub fn write(&self) -> StateWrite<'_> {
        let writeback = self.writeback.lock().expect("write-back lock");
        StateWrite {
            st: self.state_write(),
            _writeback: writeback,
        }
    }

    /// The state alone for writing: a data writer installing pages, or a write-back
    /// noting its result (both change no more than size, times and block count).
    pub fn state_write(&self) -> RwLockWriteGuard<'_, InodeState> {
        let mut st = self.state.write().expect("inode lock");
        if let Some(newer) = self.created().take() {
            st.inode = Some(newer);
        }
        st
    }

    pub(crate) fn created(&self) -> MutexGuard<'_, Option<Inode>> {
        self.created.lock().expect("created-record lock")
    }

    /// The inode's attributes with `st` (this handle's state, locked): what creates in
    /// the directory changed since the state's write lock was last taken included.
    pub fn attrs(&self, st: &InodeState) -> Result<Inode, VfsError> {
        let inode = *live(st, self.ino)?;
        if inode.kind != Kind::Dir {
            return Ok(inode); // Only directories have creates in them.
        }
        Ok(self.created().unwrap_or(inode))
    }

    pub fn pages(&self) -> std::sync::MutexGuard<'_, Pages> {
        self.pages.lock().expect("pages lock")
    }
}

/// The inode of a locked state, or ENOENT if it was deleted.
pub(crate) fn live(st: &InodeState, ino: InodeNo) -> Result<&Inode, VfsError> {
    st.inode
        .as_ref()
        .ok_or_else(|| VfsError::NotFound(format!("inode {ino}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn a_stat_reads_no_more_than_the_handles_first_four_cache_lines() {
        // Arc's two counts precede the handle; the pages' counts follow their lock.
        let counts_end = 2 * size_of::<usize>()
            + offset_of!(Handle, pages)
            + size_of::<Mutex<()>>()
            + Pages::COUNTS_END;
        assert!(offset_of!(Handle, writeback) < offset_of!(Handle, state));
        assert!(offset_of!(Handle, state) < offset_of!(Handle, created));
        assert!(counts_end <= 4 * 64, "{counts_end} bytes");
    }
}
