//! Which WAL lanes an operation's records went to, and the orderings between lanes that
//! keep every crash state one the file system had (docs/DESIGN.md §10.3,
//! §10.4).
//!
//! Invariants:
//! - An inode's record written in a lane other than the one that last wrote it is
//!   ordered after that lane: its batch survives a crash only with that lane's newest
//!   record ([`Core::record_in`]).
//! - An fsync of an inode reaches every lane noted for it ([`FileSystem::note_lane`]);
//!   the notes are forgotten by that fsync and by sync.
//! - The maps stay bounded: past [`NAME_LANES_MAX`] inodes their lanes are persisted
//!   and forgotten.

use crate::error::VfsError;
use crate::fs::FileSystem;
use crate::shared::Core;
use format::InodeNo;

/// Inodes with noted name lanes beyond which the lanes are persisted and forgotten.
const NAME_LANES_MAX: usize = 1 << 16;

impl Core {
    /// Before a batch of `lane`'s domain writes inode `x`'s record: if `x`'s record was
    /// last written in another domain's lane, `lane`'s next batch requires that lane's
    /// newest record (`Engine::order_after`: a crash keeps it only with that record and
    /// everything before it, and a persist of it persists that too, in one device
    /// flush). Each lane keeps a prefix of its batches after a crash; without this, a
    /// record written in one lane could carry changes whose other records (an
    /// attribute, an entry) sat in a lost batch of another lane, giving the inode a state
    /// it never had. Called under `x`'s write lock, which orders all writes of its record.
    /// A new inode's record, written in its parent's lane by the create, is ordered so
    /// only before a name operation (`names`: a link, an unlink, a rename, whose link
    /// count or parent counts the create's entry) writes it in another lane, not before
    /// writes of its data or attributes: a crash can then at worst leave the inode
    /// without its name (docs/SEMANTICS.md §2). Neither costs a device flush (it did,
    /// when the other lane was made durable first: a link through GlusterFS's
    /// .glusterfs tree took 376 us, most of it that flush).
    pub(crate) fn record_in(&self, x: InodeNo, lane: InodeNo) -> Result<(), VfsError> {
        self.record_in_for(x, lane, false)
    }

    /// [`Core::record_in`] for a name operation.
    pub(crate) fn record_in_names(&self, x: InodeNo, lane: InodeNo) -> Result<(), VfsError> {
        self.record_in_for(x, lane, true)
    }

    fn record_in_for(&self, x: InodeNo, lane: InodeNo, names: bool) -> Result<(), VfsError> {
        let d = self.engine.domain_of(lane);
        if names || d != self.engine.domain_of(x) {
            let created = self
                .create_lanes
                .lock()
                .expect("create lanes lock")
                .remove(&x);
            if let Some(c) = created.filter(|&c| self.engine.domain_of(c) != d) {
                self.engine.order_after(lane, c);
            }
        }
        let last = self
            .record_lanes
            .lock()
            .expect("record lanes lock")
            .get(&x)
            .copied()
            .unwrap_or(x);
        if self.engine.domain_of(last) != d {
            self.engine.order_after(lane, last);
        }
        let mut map = self.record_lanes.lock().expect("record lanes lock");
        if self.engine.domain_of(x) == d {
            map.remove(&x);
        } else {
            map.insert(x, lane);
        }
        Ok(())
    }
}

impl FileSystem {
    /// Notes that `lane`'s domain lane holds a name operation an fsync of `ino` must
    /// reach (one entry per domain: each list stays as short as the domain count).
    pub(crate) fn note_lane(&self, ino: InodeNo, lane: InodeNo) {
        let d = self.core.engine.domain_of(lane);
        if d == self.core.engine.domain_of(ino) {
            return;
        }
        let mut map = self.name_lanes.lock().expect("name lanes lock");
        let lanes = map.entry(ino).or_default();
        if !lanes.iter().any(|&x| self.core.engine.domain_of(x) == d) {
            lanes.push(lane);
        }
        if map.len() > NAME_LANES_MAX {
            // Many inodes never fsync'd: forget them once their lanes are durable.
            let all = std::mem::take(&mut *map);
            drop(map);
            // An error turns the file system read-only; the next fsync reports it.
            let _ = self.persist_lanes(all.into_values().flatten());
        }
    }

    /// Makes the lanes of `lanes`' domains durable (one device flush at most).
    pub(crate) fn persist_lanes(
        &self,
        lanes: impl IntoIterator<Item = InodeNo>,
    ) -> Result<(), VfsError> {
        let lanes: Vec<InodeNo> = lanes.into_iter().collect();
        self.core.engine.fsync_all(&lanes)?;
        Ok(())
    }

    /// Notes that `ino` was created in `parent`'s lane (see [`FileSystem::record_in`]).
    pub(crate) fn note_create(&self, ino: InodeNo, parent: InodeNo) -> Result<(), VfsError> {
        if self.core.engine.domain_of(ino) == self.core.engine.domain_of(parent) {
            return Ok(());
        }
        let mut map = self.core.create_lanes.lock().expect("create lanes lock");
        map.insert(ino, parent);
        if map.len() > NAME_LANES_MAX {
            // Many creates never linked elsewhere: make their lanes durable, forget them.
            let all = std::mem::take(&mut *map);
            drop(map);
            self.persist_lanes(all.into_values())?;
        }
        Ok(())
    }

    /// Forgets every noted lane (a sync covers them all).
    pub(crate) fn forget_lanes(&self) {
        std::mem::take(&mut *self.name_lanes.lock().expect("name lanes lock"));
        std::mem::take(&mut *self.core.record_lanes.lock().expect("record lanes lock"));
        std::mem::take(&mut *self.core.create_lanes.lock().expect("create lanes lock"));
    }

    /// The lanes `ino`'s fsync must persist, forgotten here.
    pub(crate) fn take_lanes(&self, ino: InodeNo) -> Vec<InodeNo> {
        self.name_lanes
            .lock()
            .expect("name lanes lock")
            .remove(&ino)
            .unwrap_or_default()
    }

    /// Orders the batch about to delete `ino` in its own lane (its last link went, by an
    /// unlink or a rename over it) after what it depends on in other lanes: the lanes of
    /// `dirs`, whose entries it changes (where the removed name was created, or renamed
    /// or linked to), of `ino`'s other name operations not yet durable (an unlink of
    /// another of its links), and of `also` (a name the batch gives). So no crash keeps
    /// the deletion and loses one of them, which would leave a name for the freed inode.
    /// The other direction, after the deletion, is `Engine::order_after(dir, ino)` for
    /// each of `dirs`: a later batch there (reusing a removed name) never survives
    /// without it (docs/DESIGN.md §10.4 "Deletions in the file's lane").
    pub(crate) fn order_deletion(&self, ino: InodeNo, dirs: &[InodeNo], also: &[InodeNo]) {
        let lanes = self.take_lanes(ino);
        for &lane in dirs.iter().chain(&lanes).chain(also) {
            self.core.engine.order_after(ino, lane);
        }
    }

    /// The lanes `ino`'s fsync must persist (kept for it).
    pub(crate) fn lanes_of(&self, ino: InodeNo) -> Vec<InodeNo> {
        self.name_lanes
            .lock()
            .expect("name lanes lock")
            .get(&ino)
            .cloned()
            .unwrap_or_default()
    }
}
