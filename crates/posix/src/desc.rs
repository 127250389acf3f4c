//! Open file descriptions and the descriptor table.
//!
//! Invariants:
//! - A [`Description`] is shared by every descriptor `dup`, `dup2`, `dup3` and
//!   `F_DUPFD` made from it: one offset, one set of status flags, one flock/OFD lock
//!   owner. Close-on-exec belongs to the descriptor (the table entry).
//! - A description holds one vfs open reference ([`vfs::OpenInode`]) from open until
//!   its last descriptor goes, so an unlinked open file keeps its data until then.
//! - The offset is read and moved under one mutex per description, so reads and writes
//!   through shared descriptors never use the same offset twice.

use crate::dir::DirStream;
use crate::{err, Result};
use format::InodeNo;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use vfs::locks::LockOwner;
use vfs::{FileSystem, Kind, OpenInode};

/// Status flags `F_SETFL` may change (Linux: O_APPEND, O_NONBLOCK, O_ASYNC, O_DIRECT,
/// O_NOATIME); the others are fixed at open.
pub const SETFL_MASK: i32 =
    libc::O_APPEND | libc::O_NONBLOCK | libc::O_ASYNC | libc::O_DIRECT | libc::O_NOATIME;

/// Lock owners of descriptions (flock and OFD locks): apart from process ids, which
/// own classic record locks.
static NEXT_OWNER: AtomicU64 = AtomicU64::new(1 << 40);

/// One open file description.
#[derive(Debug)]
pub struct Description {
    fs: Arc<FileSystem>,
    /// None for O_PATH descriptions (no open reference is held).
    open: Mutex<Option<OpenInode>>,
    ino: InodeNo,
    kind: Kind,
    /// The open flags as F_GETFL reports them (access mode and status flags).
    flags: AtomicI32,
    offset: Mutex<u64>,
    /// The path it was opened by (absolute inside augefs), for getcwd via fchdir and
    /// for handing the descriptor to another process.
    path: String,
    owner: LockOwner,
    /// The directory stream of an open directory.
    pub(crate) dir: Mutex<DirStream>,
}

impl Description {
    pub(crate) fn new(
        fs: Arc<FileSystem>,
        ino: InodeNo,
        kind: Kind,
        flags: i32,
        path: String,
    ) -> Result<Arc<Description>> {
        let open = if flags & libc::O_PATH != 0 {
            None
        } else {
            Some(fs.open_ino(ino)?)
        };
        Ok(Arc::new(Description {
            fs,
            open: Mutex::new(open),
            ino,
            kind,
            flags: AtomicI32::new(
                flags
                    & !(libc::O_CLOEXEC
                        | libc::O_CREAT
                        | libc::O_EXCL
                        | libc::O_TRUNC
                        | libc::O_NOCTTY),
            ),
            offset: Mutex::new(0),
            path,
            owner: LockOwner(NEXT_OWNER.fetch_add(1, Ordering::Relaxed)),
            dir: Mutex::new(DirStream::default()),
        }))
    }

    pub fn ino(&self) -> InodeNo {
        self.ino
    }

    pub fn fs(&self) -> &Arc<FileSystem> {
        &self.fs
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    /// F_GETFL.
    pub fn flags(&self) -> i32 {
        self.flags.load(Ordering::Relaxed)
    }

    /// F_SETFL: only the changeable status flags move.
    pub fn set_flags(&self, flags: i32) {
        let old = self.flags();
        self.flags.store(
            (old & !SETFL_MASK) | (flags & SETFL_MASK),
            Ordering::Relaxed,
        );
    }

    pub fn owner(&self) -> LockOwner {
        self.owner
    }

    pub fn readable(&self) -> bool {
        let acc = self.flags() & libc::O_ACCMODE;
        self.flags() & libc::O_PATH == 0 && (acc == libc::O_RDONLY || acc == libc::O_RDWR)
    }

    pub fn writable(&self) -> bool {
        let acc = self.flags() & libc::O_ACCMODE;
        self.flags() & libc::O_PATH == 0 && (acc == libc::O_WRONLY || acc == libc::O_RDWR)
    }

    pub fn is_path_only(&self) -> bool {
        self.flags() & libc::O_PATH != 0
    }

    /// The offset now, if no call holds it (a forked child reads it this way: the lock
    /// may have been held by a thread that does not exist in the child).
    pub fn try_offset(&self) -> Option<u64> {
        self.offset.try_lock().ok().map(|o| *o)
    }

    /// The offset, locked for a read or write that moves it.
    pub fn offset(&self) -> MutexGuard<'_, u64> {
        self.offset.lock().expect("offset lock")
    }
}

impl Drop for Description {
    fn drop(&mut self) {
        self.fs.flocks().release(self.ino, self.owner);
        self.fs.record_locks().release(self.ino, self.owner);
        if let Some(open) = self.open.get_mut().expect("open lock").take() {
            // A failure (the file system turned read-only) leaves an orphan record the
            // next mount frees; there is no caller left to tell.
            let _ = self.fs.close_ino(open);
        }
    }
}

/// A descriptor: its number, its description, its close-on-exec flag.
pub type Entry = (i32, Arc<Description>, bool);

#[derive(Debug)]
struct Slot {
    desc: Arc<Description>,
    cloexec: bool,
}

/// Descriptor number -> description.
#[derive(Debug, Default)]
pub struct Table {
    slots: Mutex<BTreeMap<i32, Slot>>,
}

impl Table {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<i32, Slot>> {
        self.slots.lock().expect("descriptor table lock")
    }

    pub fn get(&self, fd: i32) -> Result<Arc<Description>> {
        self.lock()
            .get(&fd)
            .map(|s| s.desc.clone())
            .ok_or(err(libc::EBADF))
    }

    pub fn install(
        &self,
        fd: i32,
        desc: Arc<Description>,
        cloexec: bool,
    ) -> Option<Arc<Description>> {
        assert!(fd >= 0, "descriptor numbers are not negative");
        self.lock()
            .insert(fd, Slot { desc, cloexec })
            .map(|s| s.desc)
    }

    pub fn install_lowest(&self, min: i32, desc: Arc<Description>, cloexec: bool) -> i32 {
        let mut t = self.lock();
        let mut fd = min.max(0);
        while t.contains_key(&fd) {
            fd += 1;
        }
        t.insert(fd, Slot { desc, cloexec });
        fd
    }

    pub fn remove(&self, fd: i32) -> Result<Arc<Description>> {
        self.lock()
            .remove(&fd)
            .map(|s| s.desc)
            .ok_or(err(libc::EBADF))
    }

    pub fn all(&self) -> Vec<Entry> {
        self.lock()
            .iter()
            .map(|(&fd, s)| (fd, s.desc.clone(), s.cloexec))
            .collect()
    }

    /// [`Table::all`] unless the table is locked (a forked child's view).
    pub fn try_all(&self) -> Option<Vec<Entry>> {
        let t = self.slots.try_lock().ok()?;
        Some(
            t.iter()
                .map(|(&fd, s)| (fd, s.desc.clone(), s.cloexec))
                .collect(),
        )
    }

    pub fn cloexec(&self, fd: i32) -> Result<bool> {
        self.lock()
            .get(&fd)
            .map(|s| s.cloexec)
            .ok_or(err(libc::EBADF))
    }

    pub fn set_cloexec(&self, fd: i32, on: bool) -> Result<()> {
        let mut t = self.lock();
        let s = t.get_mut(&fd).ok_or(err(libc::EBADF))?;
        s.cloexec = on;
        Ok(())
    }
}
