//! The tables behind FUSE file handles: open files (each holding a vfs [`OpenInode`], so
//! an unlinked file keeps its data until the kernel releases the last handle, and the
//! lock owners that took record locks through it) and open directories (each with the
//! readdir cursor table that maps FUSE offsets to vfs name cursors).
//!
//! Invariants:
//! - File handle numbers are never reused within a mount (a 64-bit counter).
//! - A directory offset `k >= FIRST_ENTRY_OFFSET` names the entry at index
//!   `k - FIRST_ENTRY_OFFSET` of that handle's `names`; offsets 1 and 2 follow `.` and
//!   `..`, offset 0 is the start. Reading from offset `k` forgets the names past it,
//!   so the offsets handed out are always a prefix of one listing.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use vfs::OpenInode;

/// The offset of the first entry after `.` and `..`.
pub const FIRST_ENTRY_OFFSET: u64 = 3;

/// File handles to values; `T` is shared (`Arc`) so a lookup does not hold the table lock.
#[derive(Debug)]
pub struct Table<T> {
    next: AtomicU64,
    map: Mutex<HashMap<u64, T>>,
}

impl<T> Default for Table<T> {
    fn default() -> Self {
        Table {
            next: AtomicU64::new(1),
            map: Mutex::new(HashMap::new()),
        }
    }
}

impl<T> Table<T> {
    pub fn insert(&self, value: T) -> u64 {
        let fh = self.next.fetch_add(1, Ordering::Relaxed);
        let old = self.lock().insert(fh, value);
        assert!(old.is_none(), "file handle {fh} reused");
        fh
    }

    pub fn remove(&self, fh: u64) -> Option<T> {
        self.lock().remove(&fh)
    }

    /// Every value left (at unmount).
    pub fn drain(&self) -> Vec<T> {
        self.lock().drain().map(|(_, v)| v).collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, T>> {
        self.map.lock().expect("handle table lock")
    }
}

impl<T: Clone> Table<T> {
    pub fn get(&self, fh: u64) -> Option<T> {
        self.lock().get(&fh).cloned()
    }
}

/// One open file (an open file description of the kernel's).
#[derive(Debug)]
pub struct OpenFile {
    /// Taken by the release (other threads may still hold the `Arc` for a moment).
    open: Mutex<Option<OpenInode>>,
    /// Kernel lock owners that set record locks through this handle: at its release
    /// their locks on the inode go. (A process's locks go at its FLUSH; an OFD lock's
    /// owner is the open file itself, which the kernel names in no FLUSH.)
    lock_owners: Mutex<Vec<u64>>,
}

impl OpenFile {
    pub fn new(open: OpenInode) -> Arc<OpenFile> {
        Arc::new(OpenFile {
            open: Mutex::new(Some(open)),
            lock_owners: Mutex::new(Vec::new()),
        })
    }

    /// The vfs handle, for the release (once).
    pub fn take(&self) -> Option<OpenInode> {
        self.open.lock().expect("open file lock").take()
    }

    /// The owners noted by [`OpenFile::note_owner`].
    pub fn owners(&self) -> Vec<u64> {
        self.lock_owners.lock().expect("lock owners lock").clone()
    }

    /// Notes that `owner` locked through this handle.
    pub fn note_owner(&self, owner: u64) {
        let mut o = self.lock_owners.lock().expect("lock owners lock");
        if !o.contains(&owner) {
            o.push(owner);
        }
    }
}

/// Open files.
pub type Files = Table<Arc<OpenFile>>;
/// Open directories.
pub type Dirs = Table<Arc<Mutex<DirCursor>>>;

/// The names one open directory has handed to the kernel, in order.
#[derive(Debug, Default)]
pub struct DirCursor {
    names: Vec<Vec<u8>>,
}

/// Where a readdir at a FUSE offset resumes.
#[derive(Debug, PartialEq, Eq)]
pub enum Resume {
    /// Emit `.` (offset 0) and/or `..` (offset <= 1), then list from the start.
    Start { dot: bool, dotdot: bool },
    /// List the entries after this name.
    After(Vec<u8>),
    /// The offset is past the end of anything handed out: nothing more.
    End,
}

impl DirCursor {
    /// Where to resume for `offset`; forgets the names handed out past it.
    pub fn resume(&mut self, offset: u64) -> Resume {
        if offset < FIRST_ENTRY_OFFSET {
            self.names.clear();
            return Resume::Start {
                dot: offset == 0,
                dotdot: offset <= 1,
            };
        }
        let index = (offset - FIRST_ENTRY_OFFSET) as usize;
        match self.names.get(index) {
            Some(name) => {
                let name = name.clone();
                self.names.truncate(index + 1);
                Resume::After(name)
            }
            None => Resume::End,
        }
    }

    /// The FUSE offset the next name pushed will have (the offset a readdir resumes
    /// from to get the entries after it).
    pub fn next_offset(&self) -> u64 {
        self.names.len() as u64 + FIRST_ENTRY_OFFSET
    }

    /// Records `name` as handed out next; returns its FUSE offset.
    pub fn push(&mut self, name: Vec<u8>) -> u64 {
        let off = self.next_offset();
        self.names.push(name);
        off
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_map_to_name_cursors_and_rewinds_forget_the_tail() {
        let mut c = DirCursor::default();
        assert_eq!(
            c.resume(0),
            Resume::Start {
                dot: true,
                dotdot: true
            }
        );
        assert_eq!(c.push(b"a".to_vec()), 3);
        assert_eq!(c.push(b"b".to_vec()), 4);
        assert_eq!(c.push(b"c".to_vec()), 5);
        assert_eq!(c.resume(4), Resume::After(b"b".to_vec()));
        // "c" was forgotten: the next name handed out gets offset 5 again.
        assert_eq!(c.push(b"d".to_vec()), 5);
        assert_eq!(c.resume(9), Resume::End);
        assert_eq!(
            c.resume(2),
            Resume::Start {
                dot: false,
                dotdot: false
            }
        );
        assert_eq!(c.push(b"x".to_vec()), 3);
    }

    #[test]
    fn handles_are_not_reused() {
        let t: Table<u32> = Table::default();
        let a = t.insert(1);
        assert_eq!(t.remove(a), Some(1));
        let b = t.insert(2);
        assert_ne!(a, b);
        assert_eq!(t.get(b), Some(2));
        assert_eq!(t.drain(), vec![2]);
    }
}
