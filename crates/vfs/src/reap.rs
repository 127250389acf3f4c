//! Deleting inodes, now or in the background: the records and blocks of an inode whose
//! last link and last handle went, and the reaper, a thread that frees the blocks of
//! closed files an unlink left to it (docs/DESIGN.md §10.4 "Deferred freeing").
//!
//! Freeing a file's blocks scans its block index in MetaDB and deletes each mapping,
//! about 40% of the CPU of an unlink of a small file that has blocks (an rm -rf of a
//! tree). So the last unlink of a closed file with blocks logs, in the file's lane, the
//! removal of its name and its record with no links and an orphan record (as an
//! unlink of an open file does), and queues the file here; the reaper deletes the
//! inode, its orphan record and its blocks in one later batch of the same lane. A
//! crash in between leaves an orphan, which the next mount frees.
//!
//! Invariants:
//! - A queued inode is freed only if it still has no link and no handle: one opened
//!   meanwhile (by inode number) is freed by its last close instead.
//! - The queue holds at most `crate::shared::REAPS_MAX` inodes; an unlink that finds
//!   it full frees the file itself.
//! - Whoever needs the space counted right waits for the queue: statfs, a write that
//!   finds no room, unmount ([`Core::reap_all`]).

use crate::error::VfsError;
use crate::handle::Handle;
use crate::records::{self, Inode, Kind};
use crate::shared::{Core, REAP_AFTER, REAP_BATCH};
use engine::log::keys::FileBlock;
use engine::log::{Durability, WriteOptions};
use format::InodeNo;
use metadb::WriteBatch;
use std::sync::Arc;
use std::thread::JoinHandle;

/// The reaper's thread.
pub(crate) struct Reaper {
    core: Arc<Core>,
    thread: Option<JoinHandle<()>>,
}

impl Reaper {
    pub fn start(core: Arc<Core>) -> Reaper {
        core.reaps.queue.lock().expect("reaps lock").running = true;
        let c = core.clone();
        let thread = std::thread::Builder::new()
            .name("augefs-reap".into())
            .spawn(move || c.reap_queued())
            .expect("spawn the reaper thread");
        Reaper {
            core,
            thread: Some(thread),
        }
    }

    /// Stops the thread after the inode it frees now; the rest stay queued (orphans on
    /// the device: [`Core::reap_all`] or the next mount frees them).
    pub fn stop(mut self) {
        {
            let mut q = self.core.reaps.queue.lock().expect("reaps lock");
            q.stop = true;
            self.core.reaps.wake.notify_all();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.core.reaps.queue.lock().expect("reaps lock").running = false;
        self.core.reaps.idle.notify_all();
    }
}

impl std::fmt::Debug for Reaper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reaper").finish_non_exhaustive()
    }
}

impl Core {
    /// The handle of `ino` (loaded from MetaDB on first use).
    pub(crate) fn handle(&self, ino: InodeNo) -> Result<Arc<Handle>, VfsError> {
        self.inodes.get_or_load(ino, || {
            let inode = self.store().inode(ino)?;
            Ok(Handle::new(ino, inode, self.cache.clone()))
        })
    }

    /// The reaper's loop: frees queued inodes until stopped.
    fn reap_queued(&self) {
        let mut q = self.reaps.queue.lock().expect("reaps lock");
        loop {
            if q.stop {
                return;
            }
            if q.inodes.is_empty() {
                self.reaps.idle.notify_all();
                // No timer: an idle file system wakes nobody.
                q = self.reaps.wake.wait(q).expect("reaps lock");
                continue;
            }
            // The first file queued woke it: a window for more to come, cut short by a
            // full batch or by someone waiting for the queue.
            if q.inodes.len() < REAP_BATCH {
                q = self
                    .reaps
                    .wake
                    .wait_timeout(q, REAP_AFTER)
                    .expect("reaps lock")
                    .0;
            }
            while let Some(ino) = q.inodes.pop_front() {
                if q.stop {
                    q.inodes.push_front(ino);
                    return;
                }
                q.busy = true;
                drop(q);
                // A failure (the file system turned read-only) leaves the orphan
                // record: the next mount frees it.
                let _ = self.reap(ino);
                q = self.reaps.queue.lock().expect("reaps lock");
                q.busy = false;
            }
        }
    }

    /// Returns once every inode queued before the call is freed: by the reaper, or here
    /// if it does not run.
    pub(crate) fn reap_all(&self) {
        let mut q = self.reaps.queue.lock().expect("reaps lock");
        loop {
            if q.inodes.is_empty() && !q.busy {
                return;
            }
            if !q.running || q.stop {
                let Some(ino) = q.inodes.pop_front() else {
                    // The stopping reaper finishes its last one.
                    q = self.reaps.idle.wait(q).expect("reaps lock");
                    continue;
                };
                drop(q);
                let _ = self.reap(ino);
                q = self.reaps.queue.lock().expect("reaps lock");
                continue;
            }
            // The reaper waits for a batch: this caller wants it now.
            self.reaps.wake.notify_one();
            q = self.reaps.idle.wait(q).expect("reaps lock");
        }
    }

    /// Frees queued `ino` if it still has no link and no handle.
    fn reap(&self, ino: InodeNo) -> Result<(), VfsError> {
        let h = self.handle(ino)?;
        let mut st = h.write();
        let Some(inode) = st.inode else {
            return Ok(()); // freed by a last close, or by the next mount's pass
        };
        if inode.nlink != 0 || st.open != 0 {
            return Ok(()); // opened meanwhile: its last close frees it
        }
        let mut batch = WriteBatch::new();
        batch.delete(records::orphan_key(ino).to_vec());
        self.delete_inode(ino, &inode, batch)?;
        st.inode = None;
        st.xattrs_pending = false;
        Ok(())
    }

    /// Deletes inode `ino` and its blocks, with `batch` (the name operation that
    /// dropped its last link, or the deletion of its orphan record), in one batch of the
    /// inode's lane.
    pub(crate) fn delete_inode(
        &self,
        ino: InodeNo,
        inode: &Inode,
        mut batch: WriteBatch,
    ) -> Result<(), VfsError> {
        self.deletion_records(ino, inode, &mut batch)?;
        if inode.blocks == 0 {
            // Nothing mapped (the count is exact: the batches that map and unmap blocks
            // carry it), so no index to scan: an empty file, or a temporary one whose
            // pages were dropped unwritten, is deleted for the price of its records.
            debug_assert_eq!(
                self.engine.next_mapped(ino, FileBlock(0))?,
                None,
                "inode {ino} counts no blocks but maps some"
            );
            self.engine
                .put_metadata(ino, &batch, Durability::Buffered)?;
            return Ok(());
        }
        self.engine.punch(
            ino,
            FileBlock(0),
            None,
            WriteOptions::new(&batch, Durability::Buffered),
        )?;
        Ok(())
    }

    /// Adds the deletion of inode `ino`'s records (not its blocks) to `batch`, and
    /// counts it gone. A deletion needs no [`Core::record_in`]: whichever lane keeps or
    /// loses it, the inode is either gone or in a state it had.
    pub(crate) fn deletion_records(
        &self,
        ino: InodeNo,
        inode: &Inode,
        batch: &mut WriteBatch,
    ) -> Result<(), VfsError> {
        batch.delete(records::inode_key(ino).to_vec());
        self.count_inodes(-1);
        if inode.kind == Kind::Symlink {
            batch.delete(records::symlink_key(ino).to_vec());
        }
        for name in self.store().xattr_names(ino)? {
            batch.delete(records::xattr_key(ino, &name));
        }
        self.record_lanes
            .lock()
            .expect("record lanes lock")
            .remove(&ino);
        Ok(())
    }

    /// Counts an inode whose creating batch was logged (or, with `-1`, one whose
    /// deletion is in a batch).
    pub(crate) fn count_inodes(&self, delta: i64) {
        self.inode_count.add(delta);
    }
}
