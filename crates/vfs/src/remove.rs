//! Removing names (unlink, rmdir), deleting inodes and their blocks, and orphans: inodes
//! whose last link went while open, freed at last close or by the next mount
//! (docs/DESIGN.md §10.4).
//!
//! Invariants:
//! - A file's last link goes in one batch of the file's lane with its records and the
//!   unmapping of its blocks, ordered both ways with its directories' lanes.
//! - An open file's last link leaves the inode with nlink 0 and an orphan record in
//!   the same batch; the freeing drops the record in the batch that frees the inode.
//!   So does a closed file's that has blocks, whose freeing the reaper does
//!   (`crate::reap`).

use crate::creds::{Creds, MAY_EXEC};
use crate::error::VfsError;
use crate::fs::FileSystem;
use crate::handle::{live, Handle, InodeState};
use crate::namespace::{check_name, live_dir, relinked, show};
use crate::records::{self, Inode, Kind};
use engine::log::Durability;
use format::InodeNo;
use metadb::WriteBatch;

impl FileSystem {
    /// Removes `name` from `parent`: a non-directory (`dir` false) or an empty
    /// directory (`dir` true).
    pub fn remove(
        &self,
        cx: &Creds,
        parent: InodeNo,
        name: &[u8],
        dir: bool,
    ) -> Result<(), VfsError> {
        check_name(name)?;
        let ph = self.handle(parent)?;
        let mut pst = ph.write();
        let _forget = self.core.names.forget_on_drop(parent, name);
        let mut pinode = live_dir(&pst, parent, name)?;
        cx.check(&pinode, MAY_EXEC, || show(name))?;
        let entry = self
            .lookup(parent, name)?
            .ok_or_else(|| VfsError::NotFound(show(name)))?;
        match (dir, entry.kind == Kind::Dir) {
            (false, true) => return Err(VfsError::IsDir(show(name))),
            (true, false) => return Err(VfsError::NotDir(show(name))),
            _ => {}
        }
        let ch = self.handle(entry.ino)?;
        let mut cst = ch.write();
        let child = *live(&cst, entry.ino)?;
        cx.may_delete(&pinode, &child, || show(name))?;
        if dir && !self.is_empty_dir(entry.ino)? {
            return Err(VfsError::NotEmpty(show(name)));
        }
        // The record is rewritten: its dirty pages first (a file being deleted has
        // them dropped instead, once the deletion is done).
        if !((dir || child.nlink == 1) && cst.open == 0) {
            self.settle(&ch, &mut cst)?;
        }
        let mut child = *live(&cst, entry.ino)?;
        let now = self.now();
        pinode.mtime_ns = now;
        pinode.ctime_ns = now;
        let mut batch = WriteBatch::new();
        batch.delete(records::dentry_key(parent, name));
        if dir {
            pinode.nlink = relinked(parent, pinode.nlink, -1)?;
            child.nlink = 0;
        } else {
            child.nlink = relinked(entry.ino, child.nlink, -1)?;
        }
        child.ctime_ns = now;
        let gone = child.nlink == 0 && cst.open == 0;
        if gone && child.kind == Kind::File {
            self.remove_last_link(parent, &pinode, (entry.ino, &child), &mut cst, batch)?;
        } else if gone {
            // A directory or a symlink has no blocks: all of it in the parent's lane,
            // after the child's own (a directory's lane holds the removals of its
            // entries: the rmdir must not survive a crash without them).
            batch.put(
                records::inode_key(parent).to_vec(),
                pinode.encode().to_vec(),
            );
            self.core.record_in(parent, parent)?;
            self.core.record_in_names(entry.ino, parent)?;
            self.core.deletion_records(entry.ino, &child, &mut batch)?;
            self.core
                .engine
                .put_metadata(parent, &batch, Durability::Buffered)?;
            cst.inode = None;
            cst.xattrs_pending = false;
        } else {
            batch.put(
                records::inode_key(parent).to_vec(),
                pinode.encode().to_vec(),
            );
            self.core.record_in(parent, parent)?;
            self.core.record_in_names(entry.ino, parent)?;
            batch.put(
                records::inode_key(entry.ino).to_vec(),
                child.encode().to_vec(),
            );
            if child.nlink == 0 {
                // Open, nameless: freed at last close, or by the next mount.
                batch.put(records::orphan_key(entry.ino).to_vec(), Vec::new());
            }
            // The link count changed in the parent's lane: the file's fsync reaches it.
            self.note_lane(entry.ino, parent);
            self.core
                .engine
                .put_metadata(parent, &batch, Durability::Buffered)?;
            cst.inode = Some(child);
        }
        pst.inode = Some(pinode);
        Ok(())
    }

    /// The last link of closed file `ino` (`child`, its state `cst`) goes with `batch`
    /// (the entry's removal) and the directory's new record (`pinode`): with the
    /// unmapping of its blocks in one batch of the file's lane, or, for a file with
    /// blocks, with an orphan record (the reaper unmaps them in a later batch of the
    /// lane), ordered both ways with the directory's lane. An unlink and an fsync of the
    /// directory write one lane.
    fn remove_last_link(
        &self,
        parent: InodeNo,
        pinode: &Inode,
        (ino, child): (InodeNo, &Inode),
        cst: &mut InodeState,
        mut batch: WriteBatch,
    ) -> Result<(), VfsError> {
        self.order_deletion(ino, &[parent], &[]);
        batch.put(
            records::inode_key(parent).to_vec(),
            pinode.encode().to_vec(),
        );
        // The directory's newest record is now in the file's lane: its next record, in
        // any other lane, follows it.
        self.core.record_in(parent, ino)?;
        if child.blocks > 0 && self.core.reaps.room() {
            // Its blocks are freed by the reaper, in a later batch of this lane: this
            // one leaves the inode with no link and an orphan record (`crate::reap`).
            self.core.record_in(ino, ino)?;
            batch.put(records::inode_key(ino).to_vec(), child.encode().to_vec());
            batch.put(records::orphan_key(ino).to_vec(), Vec::new());
            self.core
                .engine
                .put_metadata(ino, &batch, Durability::Buffered)?;
            cst.inode = Some(*child);
            self.core.reaps.push(ino);
        } else {
            self.core.delete_inode(ino, child, batch)?;
            cst.inode = None;
            cst.xattrs_pending = false;
        }
        self.drop_pages(ino);
        self.core.engine.order_after(parent, ino);
        // Logged in the file's lane: an fsync of the directory must reach it.
        self.note_lane(parent, ino);
        Ok(())
    }

    /// The last handle of `ino` closed: an unlinked inode's blocks are freed now.
    pub(crate) fn release(&self, h: &Handle) -> Result<(), VfsError> {
        let last_of_orphan = {
            let mut st = h.state_write();
            st.open -= 1;
            st.open == 0 && st.inode.is_some_and(|i| i.nlink == 0)
        };
        if !last_of_orphan {
            return Ok(());
        }
        // Deleting: also wait for a write-back in flight (then check again: it may
        // have been reopened or linked meanwhile).
        let mut st = h.write();
        if st.open == 0 {
            if let Some(inode) = st.inode {
                if inode.nlink == 0 {
                    self.reap_orphan(h.ino, &inode)?;
                    st.inode = None;
                    st.xattrs_pending = false;
                    self.drop_pages(h.ino);
                }
            }
        }
        Ok(())
    }

    /// Frees the orphan `ino`: its deletion goes to its own lane, the name operation
    /// that orphaned it went to its parent's; that lane is made durable first, so a
    /// crash never keeps the deletion without the unlink (a name for a freed inode).
    fn reap_orphan(&self, ino: InodeNo, inode: &Inode) -> Result<(), VfsError> {
        self.persist_lanes(self.take_lanes(ino))?;
        let mut batch = WriteBatch::new();
        batch.delete(records::orphan_key(ino).to_vec());
        self.core.delete_inode(ino, inode, batch)
    }

    /// Mount: frees every orphan a crash (or a failed close) left. An orphan record whose
    /// inode is gone or named again is dropped.
    pub(crate) fn reap_orphans(&self) -> Result<u64, VfsError> {
        let found = self.core.store().orphan_keys()?;
        let mut reaped = 0;
        for key in found {
            let ino = records::parse_orphan_key(&key)?;
            let h = self.handle(ino)?;
            let mut st = h.write();
            match st.inode {
                Some(inode) if inode.nlink == 0 => {
                    self.reap_orphan(ino, &inode)?;
                    st.inode = None;
                    st.xattrs_pending = false;
                    reaped += 1;
                }
                _ => {
                    let mut batch = WriteBatch::new();
                    batch.delete(key);
                    self.core
                        .engine
                        .put_metadata(ino, &batch, Durability::Buffered)?;
                }
            }
        }
        Ok(reaped)
    }
}
