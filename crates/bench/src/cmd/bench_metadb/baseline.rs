//! The baseline of `augefs bench metadb`: fjall 3, an LSM tree with a journal, in a
//! directory on the same disk as the augefs image.
//!
//! - A synchronous put is a one-item write batch committed with
//!   `durability(Some(PersistMode::SyncData))`: fjall writes the journal record and
//!   `fdatasync`s the journal before `commit` returns, holding its journal lock
//!   throughout. `SyncData` rather than `SyncAll` because fjall sizes journal files up
//!   front (64 MiB), so `fdatasync` already makes a record retrievable; `SyncAll` would
//!   add an inode (mtime) commit per write and only make fjall slower.
//! - A buffered put is `Keyspace::insert`, fjall's default: the record reaches the OS
//!   (one `write`) but nothing is synced.
//! - Bytes written are the process's `/proc/self/io` `write_bytes` (pages the kernel
//!   sends to storage on fjall's behalf, 4 KiB-granular), since fjall has no per-cause
//!   accounting; runs of the two stores never overlap, so the delta is fjall's.
//!
//! Invariant: the block cache has MetaDB's size, so neither side caches more than the
//! other in user space (fjall also has the kernel's page cache, MetaDB uses direct IO).

use super::workload::Store;
use crate::scratch::remove_dir;
use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};
use std::path::{Path, PathBuf};
use std::time::Instant;

const KEYSPACE: &str = "bench";

/// fjall open in a directory of its own.
pub struct Fjall {
    db: Database,
    keyspace: Keyspace,
    dir: PathBuf,
}

impl std::fmt::Debug for Fjall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fjall")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

fn open(dir: &Path, cache_bytes: u64) -> Result<Fjall, String> {
    let err = |e: fjall::Error| format!("fjall at {}: {e}", dir.display());
    let db = Database::builder(dir)
        .cache_size(cache_bytes)
        .open()
        .map_err(err)?;
    let keyspace = db
        .keyspace(KEYSPACE, KeyspaceCreateOptions::default)
        .map_err(err)?;
    Ok(Fjall {
        db,
        keyspace,
        dir: dir.to_path_buf(),
    })
}

impl Fjall {
    /// A fresh, empty database in `dir` (whatever was there is removed).
    pub fn create(dir: &Path, cache_bytes: u64) -> Result<Fjall, String> {
        remove_dir(dir)?;
        open(dir, cache_bytes)
    }

    /// Reopens `dir` (replaying its journal); returns fjall and how long opening the
    /// database and its keyspace took in nanoseconds.
    pub fn reopen(dir: &Path, cache_bytes: u64) -> Result<(Fjall, u64), String> {
        let started = Instant::now();
        let fjall = open(dir, cache_bytes)?;
        Ok((fjall, started.elapsed().as_nanos() as u64))
    }

    fn err(&self, e: fjall::Error) -> String {
        format!("fjall at {}: {e}", self.dir.display())
    }

    /// Makes every write durable (`fdatasync` of the journal).
    pub fn persist(&self) -> Result<(), String> {
        self.db
            .persist(PersistMode::SyncData)
            .map_err(|e| self.err(e))
    }

    /// Writes the memtable to a table and waits, then compacts every table into the last
    /// level. Both calls are `#[doc(hidden)]` in fjall 3 (its tests use them); there is
    /// no other way to ask fjall for "everything flushed and compacted".
    pub fn flush_and_compact(&self) -> Result<(), String> {
        self.keyspace
            .rotate_memtable_and_wait()
            .map_err(|e| self.err(e))?;
        self.keyspace.major_compact().map_err(|e| self.err(e))
    }

    /// Writes the memtable to a table and waits for it.
    pub fn flush(&self) -> Result<(), String> {
        self.keyspace
            .rotate_memtable_and_wait()
            .map_err(|e| self.err(e))
    }

    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
        let value = self.keyspace.get(key).map_err(|e| self.err(e))?;
        Ok(value.map(|v| v.to_vec()))
    }

    /// Bytes fjall's files take on disk.
    pub fn disk_bytes(&self) -> Result<u64, String> {
        self.db.disk_space().map_err(|e| self.err(e))
    }

    /// Closes fjall (its `Drop` syncs the journal and stops its threads). fjall has no
    /// way to crash in-process; recovery of the journal happens on reopen all the same,
    /// because fjall does not flush memtables on close.
    pub fn close(self) {
        drop(self.keyspace);
        drop(self.db);
    }
}

impl Store for Fjall {
    fn put(&self, key: &[u8], value: &[u8], sync: bool) -> Result<(), String> {
        if sync {
            let mut batch = self.db.batch().durability(Some(PersistMode::SyncData));
            batch.insert(&self.keyspace, key, value);
            batch.commit().map_err(|e| self.err(e))
        } else {
            self.keyspace.insert(key, value).map_err(|e| self.err(e))
        }
    }

    fn settle(&self) -> Result<(), String> {
        self.flush_and_compact()
    }
}

/// The process's `write_bytes` from `/proc/self/io`, if the kernel provides it.
pub fn process_write_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/io").ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix("write_bytes:"))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fjall_round_trip_and_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fjall");
        let fjall = Fjall::create(&path, 1 << 20).unwrap();
        fjall.put(b"k1", b"v1", true).unwrap();
        fjall.put(b"k2", b"v2", false).unwrap();
        fjall.persist().unwrap();
        assert_eq!(fjall.get(b"k1").unwrap(), Some(b"v1".to_vec()));
        fjall.close();
        let (fjall, _) = Fjall::reopen(&path, 1 << 20).unwrap();
        assert_eq!(fjall.get(b"k2").unwrap(), Some(b"v2".to_vec()));
        fjall.close();
        remove_dir(&path).unwrap();
        assert!(!path.exists());
    }
}
