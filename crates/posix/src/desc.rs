//! Open file descriptions and the descriptor table.
//!
//! Invariants:
//! - A [`Description`] is shared by every descriptor `dup`, `dup2`, `dup3` and
//!   `F_DUPFD` made from it: one offset, one set of status flags, one flock/OFD lock
//!   owner. Close-on-exec belongs to the descriptor (the table entry).
//! - A description holds one open reference ([`crate::backend::OpenFile`]) from open
//!   until its last descriptor goes, so an unlinked open file keeps its data until
//!   then; its flock and OFD locks go with that reference.
//! - The offset is read and moved under one mutex per description, so reads and writes
//!   through shared descriptors never use the same offset twice; positioned calls
//!   (`pread`, `pwrite`) never take it.
//! - The table's membership bitmap ([`Table::contains`]) agrees with its slots whenever
//!   its lock is free: both change under the write lock.

use crate::backend::{Backend, Found, OpenFile};
use crate::dir::DirStream;
use crate::{err, Result};
use format::InodeNo;
use std::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use vfs::locks::LockOwner;
use vfs::Kind;

/// Status flags `F_SETFL` may change (Linux: O_APPEND, O_NONBLOCK, O_ASYNC, O_DIRECT,
/// O_NOATIME); the others are fixed at open.
pub const SETFL_MASK: i32 =
    libc::O_APPEND | libc::O_NONBLOCK | libc::O_ASYNC | libc::O_DIRECT | libc::O_NOATIME;

/// One open file description.
#[derive(Debug)]
pub struct Description {
    fs: Arc<dyn Backend>,
    /// None for O_PATH descriptions (no open reference is held).
    file: Option<OpenFile>,
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
    /// The description of what [`Backend::open`] found (it holds the open reference).
    pub(crate) fn new(
        fs: Arc<dyn Backend>,
        found: Found,
        flags: i32,
        path: String,
    ) -> Arc<Description> {
        let owner = found
            .file
            .as_ref()
            .map_or_else(LockOwner::new_description, |f| f.owner);
        Arc::new(Description {
            fs,
            file: found.file,
            ino: found.ino,
            kind: found.kind,
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
            owner,
            dir: Mutex::new(DirStream::default()),
        })
    }

    pub fn ino(&self) -> InodeNo {
        self.ino
    }

    pub fn fs(&self) -> &Arc<dyn Backend> {
        &self.fs
    }

    /// The open file (EBADF for an O_PATH description).
    pub fn file(&self) -> Result<&OpenFile> {
        self.file.as_ref().ok_or(err(libc::EBADF))
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
        if let Some(file) = self.file.take() {
            // Its locks go with it. A failure (the file system turned read-only)
            // leaves an orphan record the next mount frees; there is no caller left to
            // tell.
            let _ = self.fs.close(file);
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

/// Descriptor numbers the lock-free membership bitmap covers (a kernel hands out the
/// lowest free number, so programs rarely go past it; numbers above it are still
/// served, through the lock). 64 Ki numbers: 8 KiB of bits.
pub const FAST_FDS_MAX: usize = 1 << 16;
const FAST_WORDS: usize = FAST_FDS_MAX / 64;

/// Descriptor number -> description.
///
/// - `slots` is indexed by number (numbers are small and dense: the kernel hands out
///   the lowest free one), read-mostly behind an `RwLock`: lookups share it.
/// - `bits` mirrors which numbers below [`FAST_FDS_MAX`] are in `slots`, changed only
///   under the write lock, so [`Table::contains`] answers without any lock: the
///   interposer asks it on every call on every descriptor, and a kernel descriptor
///   (the common case) must cost no more than that bit test.
#[derive(Debug)]
pub struct Table {
    slots: RwLock<Vec<Option<Slot>>>,
    bits: Box<[AtomicU64]>,
    /// How many numbers at or above [`FAST_FDS_MAX`] are in the table.
    high_count: AtomicUsize,
}

impl Default for Table {
    fn default() -> Table {
        Table {
            slots: RwLock::new(Vec::new()),
            bits: (0..FAST_WORDS).map(|_| AtomicU64::new(0)).collect(),
            high_count: AtomicUsize::new(0),
        }
    }
}

impl Table {
    fn read(&self) -> RwLockReadGuard<'_, Vec<Option<Slot>>> {
        self.slots.read().expect("descriptor table lock")
    }

    fn write(&self) -> TableWrite<'_> {
        TableWrite {
            slots: self.slots.write().expect("descriptor table lock"),
            table: self,
        }
    }

    /// Whether `fd` is in the table, without taking its lock for numbers below
    /// [`FAST_FDS_MAX`]. A number being installed or removed by another thread at the
    /// same moment may read either way, as with the kernel's own table.
    pub fn contains(&self, fd: i32) -> bool {
        let Ok(n) = usize::try_from(fd) else {
            return false;
        };
        if n < FAST_FDS_MAX {
            return self.bits[n / 64].load(Ordering::Acquire) & (1 << (n % 64)) != 0;
        }
        self.high_count.load(Ordering::Acquire) != 0 && self.get(fd).is_ok()
    }

    pub fn get(&self, fd: i32) -> Result<Arc<Description>> {
        let n = usize::try_from(fd).map_err(|_| err(libc::EBADF))?;
        self.read()
            .get(n)
            .and_then(Option::as_ref)
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
        self.write().put(fd as usize, Slot { desc, cloexec })
    }

    pub fn install_lowest(&self, min: i32, desc: Arc<Description>, cloexec: bool) -> i32 {
        let mut t = self.write();
        let mut n = min.max(0) as usize;
        while t.slots.get(n).is_some_and(Option::is_some) {
            n += 1;
        }
        let old = t.put(n, Slot { desc, cloexec });
        assert!(old.is_none(), "the lowest free number was free");
        i32::try_from(n).expect("descriptor numbers fit an int")
    }

    pub fn remove(&self, fd: i32) -> Result<Arc<Description>> {
        let n = usize::try_from(fd).map_err(|_| err(libc::EBADF))?;
        self.write().take(n).ok_or(err(libc::EBADF))
    }

    fn entries(slots: &[Option<Slot>]) -> Vec<Entry> {
        slots
            .iter()
            .enumerate()
            .filter_map(|(n, s)| Some((n as i32, s.as_ref()?.desc.clone(), s.as_ref()?.cloexec)))
            .collect()
    }

    pub fn all(&self) -> Vec<Entry> {
        Table::entries(&self.read())
    }

    /// [`Table::all`] unless the table is locked (a forked child's view).
    pub fn try_all(&self) -> Option<Vec<Entry>> {
        let t = self.slots.try_read().ok()?;
        Some(Table::entries(&t))
    }

    pub fn cloexec(&self, fd: i32) -> Result<bool> {
        let n = usize::try_from(fd).map_err(|_| err(libc::EBADF))?;
        self.read()
            .get(n)
            .and_then(Option::as_ref)
            .map(|s| s.cloexec)
            .ok_or(err(libc::EBADF))
    }

    pub fn set_cloexec(&self, fd: i32, on: bool) -> Result<()> {
        let n = usize::try_from(fd).map_err(|_| err(libc::EBADF))?;
        let mut t = self.write();
        let s = t
            .slots
            .get_mut(n)
            .and_then(Option::as_mut)
            .ok_or(err(libc::EBADF))?;
        s.cloexec = on;
        Ok(())
    }
}

/// The table locked for a change: every change of a slot goes through `put` and
/// `take`, which keep the bitmap in step.
struct TableWrite<'a> {
    slots: RwLockWriteGuard<'a, Vec<Option<Slot>>>,
    table: &'a Table,
}

impl TableWrite<'_> {
    fn put(&mut self, n: usize, slot: Slot) -> Option<Arc<Description>> {
        if self.slots.len() <= n {
            self.slots.resize_with(n + 1, || None);
        }
        let old = self.slots[n].replace(slot).map(|s| s.desc);
        if old.is_none() {
            self.mark(n, true);
        }
        old
    }

    fn take(&mut self, n: usize) -> Option<Arc<Description>> {
        let old = self.slots.get_mut(n)?.take()?.desc;
        self.mark(n, false);
        Some(old)
    }

    fn mark(&self, n: usize, present: bool) {
        let t = self.table;
        if n < FAST_FDS_MAX {
            let bit = 1u64 << (n % 64);
            if present {
                t.bits[n / 64].fetch_or(bit, Ordering::Release);
            } else {
                t.bits[n / 64].fetch_and(!bit, Ordering::Release);
            }
        } else if present {
            t.high_count.fetch_add(1, Ordering::Release);
        } else {
            t.high_count.fetch_sub(1, Ordering::Release);
        }
    }
}
