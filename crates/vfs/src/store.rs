//! The vfs's records in MetaDB, read (and the one record written outside the engine's
//! lanes, the inode-number high-water mark): the only module of the vfs that calls
//! MetaDB directly. Every other change of a record is a batch built with the keys of
//! [`crate::records`] and logged by the engine in a domain's lane
//! (`Engine::put_metadata`, `put_create`, `write`, `punch`), which orders it with the
//! file's blocks (docs/DESIGN.md §10.3; the records are docs/FORMAT.md
//! §6.4).
//!
//! Invariants:
//! - A read sees MetaDB's newest state: a batch the engine applied is visible to every
//!   read that starts after it.
//! - What is read is decoded here; a record that does not decode is corruption
//!   (`VfsError::Corrupt`), never taken for an absent one.
//! - Scans (a directory's entries, an inode's attribute names, the orphans) read one
//!   MetaDB snapshot each, so each returns keys in order with none twice.

use crate::error::VfsError;
use crate::records::{self, Dentry, Inode};
use crate::shared::Core;
use engine::log::Engine;
use format::InodeNo;
use metadb::{Durability, MetaDb};

/// The vfs's view of MetaDB ([`Core::store`]).
#[derive(Clone, Copy)]
pub(crate) struct Store<'a> {
    db: &'a MetaDb,
}

impl Core {
    /// The vfs's records in MetaDB.
    pub(crate) fn store(&self) -> Store<'_> {
        Store::of(&self.engine)
    }
}

impl Store<'_> {
    /// The records of `engine`'s MetaDB (at mount, before there is a [`Core`]).
    pub fn of(engine: &Engine) -> Store<'_> {
        Store {
            db: engine.metadb(),
        }
    }

    /// The durable high-water mark of inode numbers, if one was written.
    pub fn inode_counter(&self) -> Result<Option<u64>, VfsError> {
        match self.db.get(records::COUNTER_KEY)? {
            Some(v) if v.len() == 8 => Ok(Some(u64::from_le_bytes(v.try_into().expect("8 bytes")))),
            Some(v) => Err(VfsError::corrupt("inode counter", "length", 8, v.len())),
            None => Ok(None),
        }
    }

    /// How many inode records `snapshot` holds (one scan of the inode keys, whose tag no
    /// other record shares: `crate::inode_count`); `None` if `stop` was set meanwhile.
    pub fn inode_count(
        &self,
        snapshot: &metadb::db::Snapshot,
        stop: &std::sync::atomic::AtomicBool,
    ) -> Result<Option<u64>, VfsError> {
        let start = [records::INODE_TAG];
        let end = [records::INODE_TAG + 1];
        let mut count = 0;
        for item in self.db.range(&start, Some(&end), Some(snapshot))? {
            item?;
            count += 1;
            if count % crate::inode_count::STOP_CHECK_EVERY == 0
                && stop.load(std::sync::atomic::Ordering::Relaxed)
            {
                return Ok(None);
            }
        }
        Ok(Some(count))
    }

    /// How many inodes there are of each kind, by on-disk `kind` (index 0 unused).
    pub fn inode_kinds(&self) -> Result<[u64; 8], VfsError> {
        let start = [records::INODE_TAG];
        let end = [records::INODE_TAG + 1];
        let mut counts = [0u64; 8];
        for item in self.db.range(&start, Some(&end), None)? {
            let (key, value) = item?;
            let ino = match key.get(1..9) {
                Some(b) => InodeNo(u64::from_be_bytes(b.try_into().expect("8 bytes"))),
                None => return Err(VfsError::corrupt("inode key", "length", 9, key.len())),
            };
            counts[Inode::decode(ino, &value)?.kind as usize] += 1;
        }
        Ok(counts)
    }

    /// Makes `high` the durable high-water mark of inode numbers (a synchronous MetaDB
    /// write of its own: numbers below it may be handed out once it returns).
    pub fn put_inode_counter(&self, high: u64) -> Result<(), VfsError> {
        self.db
            .put(records::COUNTER_KEY, &high.to_le_bytes(), Durability::Sync)?;
        Ok(())
    }

    /// Inode `ino`'s record, if it exists.
    pub fn inode(&self, ino: InodeNo) -> Result<Option<Inode>, VfsError> {
        match self.db.get(&records::inode_key(ino))? {
            Some(v) => Ok(Some(Inode::decode(ino, &v)?)),
            None => Ok(None),
        }
    }

    /// The entry `name` of directory `dir`, if it exists.
    pub fn dentry(&self, dir: InodeNo, name: &[u8]) -> Result<Option<Dentry>, VfsError> {
        match self.db.get(&records::dentry_key(dir, name))? {
            Some(v) => Ok(Some(Dentry::decode(&v)?)),
            None => Ok(None),
        }
    }

    /// The target of symbolic link `ino`, if recorded.
    pub fn symlink_target(&self, ino: InodeNo) -> Result<Option<Vec<u8>>, VfsError> {
        Ok(self.db.get(&records::symlink_key(ino))?)
    }

    /// Entries of directory `dir` (name, entry) in name order after `after` (or from the
    /// first), until `max` are found (at least one, if there is one).
    pub fn entries(
        &self,
        dir: InodeNo,
        after: Option<&[u8]>,
        max: usize,
    ) -> Result<Vec<(Vec<u8>, Dentry)>, VfsError> {
        let prefix = records::dentry_prefix(dir);
        let start = match after {
            Some(name) => {
                let mut k = records::dentry_key(dir, name);
                k.push(0);
                k
            }
            None => prefix.clone(),
        };
        // The first key past this directory's entries: the next inode's prefix (a byte
        // increment of the last byte would overflow for inodes ending in 0xff).
        // (Inode u64::MAX, named by a damaged entry, has no next: its entries run to the
        // end of the entry keys.)
        let end = match dir.0.checked_add(1) {
            Some(next) => records::dentry_prefix(InodeNo(next)),
            None => vec![records::DENTRY_TAG + 1],
        };
        let mut out = Vec::new();
        for item in self.db.range(&start, Some(&end), None)? {
            let (key, value) = item?;
            out.push((key[prefix.len()..].to_vec(), Dentry::decode(&value)?));
            if out.len() >= max {
                break;
            }
        }
        Ok(out)
    }

    /// Whether directory `dir` has no entries.
    pub fn is_empty_dir(&self, dir: InodeNo) -> Result<bool, VfsError> {
        let prefix = records::dentry_prefix(dir);
        let mut iter = self.db.prefix(&prefix, None)?;
        Ok(iter.next().transpose()?.is_none())
    }

    /// The keys of every orphan record, in order.
    pub fn orphan_keys(&self) -> Result<Vec<Vec<u8>>, VfsError> {
        Ok(self
            .db
            .prefix(&[records::ORPHAN_TAG], None)?
            .map(|item| item.map(|(key, _)| key))
            .collect::<Result<Vec<_>, _>>()?)
    }

    /// The value of extended attribute `name` of `ino`, if set.
    pub fn xattr(&self, ino: InodeNo, name: &[u8]) -> Result<Option<Vec<u8>>, VfsError> {
        Ok(self.db.get(&records::xattr_key(ino, name))?)
    }

    /// The names of `ino`'s extended attributes, sorted.
    pub fn xattr_names(&self, ino: InodeNo) -> Result<Vec<Vec<u8>>, VfsError> {
        let prefix = records::xattr_prefix(ino);
        let mut names = Vec::new();
        for item in self.db.prefix(&prefix, None)? {
            names.push(item?.0[prefix.len()..].to_vec());
        }
        Ok(names)
    }

    /// MetaDB's sequence number now: it moves with every applied batch (the background
    /// commit does nothing while it stands still).
    pub fn seq(&self) -> metadb::Seq {
        self.db.snapshot().seq()
    }
}
