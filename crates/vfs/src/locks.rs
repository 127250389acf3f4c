//! Advisory locks within one file-system instance: POSIX record locks (`fcntl` F_GETLK,
//! F_SETLK, F_SETLKW, and open-file-description locks) and `flock`. Every front end that
//! serves processes from one instance uses the same two tables (the interposer's owner
//! directly, the C ABI, the FUSE mount and the interposer's bridge through the kernel), so
//! a process's lock conflicts with every other process's however each reaches augefs.
//!
//! Rules (POSIX, as Linux applies them):
//! - A lock covers bytes `[start, end)` of one inode; `end` None means "to infinity" (a
//!   length of 0). Locks of different owners conflict when they overlap and one of them
//!   is a write lock; an owner never conflicts with itself.
//! - Setting a lock (or unlocking) replaces what the owner held in that range: a read lock
//!   over part of a write lock splits it, an unlock in the middle leaves two pieces, and
//!   touching or overlapping locks of one kind merge.
//! - F_SETLKW waits; if waiting would close a cycle (this owner waits for an owner that,
//!   directly or through others, waits for this one) it fails with EDEADLK instead.
//! - flock locks are whole-file, per open file description, and independent of record
//!   locks (Linux); converting one is not atomic (it is dropped, then taken).
//!
//! Invariants:
//! - An owner's locks on an inode never overlap each other (they are kept merged).
//! - A waiter is registered in the wait-for map exactly while it sleeps.
//! - Owners of different front ends never compare equal: [`LockOwner`] is tagged with
//!   the namespace that numbered it (a pid, a description, a kernel lock owner).
//! - A cancellable wait ([`Wait::Cancellable`]) ends with EINTR at the latest when the
//!   table is next notified after [`LockTable::cancel`] (which notifies it).

use crate::error::VfsError;
use format::InodeNo;
use platform::Signal;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

/// Who holds a lock. Each variant is a namespace of its own, so the owners the posix
/// layer uses in a process and those the FUSE kernel module sends for other processes
/// (which `augefs run` serves from the same instance) never collide.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LockOwner {
    /// A process of the posix layer (classic fcntl record locks), by pid.
    Process(i32),
    /// An open file description of this process: OFD locks and flock of the posix
    /// layer, flock of a [`crate::File`] ([`LockOwner::new_description`]).
    Description(u64),
    /// A lock owner the kernel names in a FUSE request (its id of a process's file
    /// table, or of an open file for flock and OFD locks).
    Kernel(u64),
}

impl LockOwner {
    /// A description owner no other owner of this process equals.
    pub fn new_description() -> LockOwner {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        LockOwner::Description(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

/// Whether and how [`LockTable::set_waiting`] waits for a conflicting lock.
#[derive(Debug, Clone, Copy)]
pub enum Wait<'a> {
    /// Fail with EAGAIN (F_SETLK, LOCK_NB).
    No,
    /// Sleep until the lock can be taken (F_SETLKW, flock), or EDEADLK.
    Yes,
    /// As `Yes`, and fail with EINTR once `cancel` is cancelled ([`LockTable::cancel`]):
    /// a FUSE SETLKW that the kernel interrupts.
    Cancellable(&'a WaitCancel),
}

/// The cancellation flag of one [`Wait::Cancellable`] wait.
#[derive(Debug, Default)]
pub struct WaitCancel(AtomicBool);

impl WaitCancel {
    /// A flag cancelled from the start (the wait it is given to ends at once).
    pub fn cancelled() -> WaitCancel {
        WaitCancel(AtomicBool::new(true))
    }

    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockKind {
    Read,
    Write,
}

/// One held lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RangeLock {
    pub start: u64,
    /// Exclusive end; None: to infinity.
    pub end: Option<u64>,
    pub kind: LockKind,
    pub owner: LockOwner,
    /// The process that holds it, as F_GETLK reports it (`l_pid`).
    pub pid: i32,
}

impl RangeLock {
    fn overlaps(&self, start: u64, end: Option<u64>) -> bool {
        let before_end = end.is_none_or(|e| self.start < e);
        let after_start = self.end.is_none_or(|e| e > start);
        before_end && after_start
    }

    fn conflicts(&self, start: u64, end: Option<u64>, kind: LockKind, owner: LockOwner) -> bool {
        self.owner != owner
            && self.overlaps(start, end)
            && (self.kind == LockKind::Write || kind == LockKind::Write)
    }
}

#[derive(Debug, Default)]
struct Table {
    held: HashMap<InodeNo, Vec<RangeLock>>,
    /// Owner -> the owner it waits for (F_SETLKW sleeping).
    waits_for: HashMap<LockOwner, LockOwner>,
}

/// A lock table (one for record locks, one for flock).
#[derive(Debug, Default)]
pub struct LockTable {
    table: Mutex<Table>,
    changed: Signal,
    /// How many inodes have locks (`held`'s length, stored under the table's lock): a
    /// close with none anywhere skips the table (every close asks to release).
    locked_files: AtomicUsize,
}

/// The byte range of `start` and `len` (0: to infinity); EINVAL if it overflows.
pub fn range(start: u64, len: u64) -> Result<(u64, Option<u64>), VfsError> {
    if len == 0 {
        return Ok((start, None));
    }
    let end = start
        .checked_add(len)
        .filter(|&e| e <= i64::MAX as u64)
        .ok_or_else(|| VfsError::Invalid(format!("lock of {len} bytes at {start}")))?;
    Ok((start, Some(end)))
}

impl LockTable {
    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().expect("lock table")
    }

    /// F_GETLK: the first lock that would block `owner` from taking `kind` on the range.
    pub fn conflicting(
        &self,
        ino: InodeNo,
        (start, end): (u64, Option<u64>),
        kind: LockKind,
        owner: LockOwner,
    ) -> Option<RangeLock> {
        let t = self.lock();
        t.held
            .get(&ino)?
            .iter()
            .find(|l| l.conflicts(start, end, kind, owner))
            .copied()
    }

    /// F_SETLK (`wait` false: EAGAIN on a conflict) or F_SETLKW (`wait`: sleeps until it
    /// can, EDEADLK if that would deadlock). `kind` None unlocks the range.
    pub fn set(
        &self,
        ino: InodeNo,
        span: (u64, Option<u64>),
        kind: Option<LockKind>,
        owner: LockOwner,
        pid: i32,
        wait: bool,
    ) -> Result<(), VfsError> {
        let wait = if wait { Wait::Yes } else { Wait::No };
        self.set_waiting(ino, span, kind, owner, pid, wait)
    }

    /// [`LockTable::set`] with the choice of [`Wait`].
    pub fn set_waiting(
        &self,
        ino: InodeNo,
        (start, end): (u64, Option<u64>),
        kind: Option<LockKind>,
        owner: LockOwner,
        pid: i32,
        wait: Wait<'_>,
    ) -> Result<(), VfsError> {
        let mut t = self.lock();
        if let Some(kind) = kind {
            loop {
                let blocker = t
                    .held
                    .get(&ino)
                    .and_then(|ls| ls.iter().find(|l| l.conflicts(start, end, kind, owner)))
                    .map(|l| l.owner);
                let Some(blocker) = blocker else { break };
                if matches!(wait, Wait::No) {
                    return Err(VfsError::WouldBlock(format!(
                        "inode {ino}: bytes {start}.. locked by another owner"
                    )));
                }
                if let Wait::Cancellable(c) = wait {
                    if c.is_cancelled() {
                        return Err(VfsError::Interrupted(format!(
                            "inode {ino}: waiting for bytes {start}.."
                        )));
                    }
                }
                // Would waiting for `blocker` close a cycle back to us?
                let mut at = blocker;
                for _ in 0..=t.waits_for.len() {
                    if at == owner {
                        return Err(VfsError::Deadlock(format!(
                            "inode {ino}: waiting for bytes {start}.. would deadlock"
                        )));
                    }
                    match t.waits_for.get(&at) {
                        Some(&next) => at = next,
                        None => break,
                    }
                }
                t.waits_for.insert(owner, blocker);
                t = self.changed.wait(t).expect("lock table");
                t.waits_for.remove(&owner);
            }
        }
        let held = t.held.entry(ino).or_default();
        replace(held, start, end, kind, owner, pid);
        if held.is_empty() {
            t.held.remove(&ino);
        }
        self.locked_files.store(t.held.len(), Ordering::Release);
        drop(t);
        self.changed.notify_all();
        Ok(())
    }

    /// flock(2) on `ino` for `owner` (`kind` None: LOCK_UN). Converting a lock the owner
    /// holds drops it first, then takes the new kind (not atomic, as Linux), unless
    /// nobody else holds the file.
    pub fn flock(
        &self,
        ino: InodeNo,
        kind: Option<LockKind>,
        owner: LockOwner,
        pid: i32,
        wait: Wait<'_>,
    ) -> Result<(), VfsError> {
        let whole = (0, None);
        let free = kind.is_some()
            && self
                .conflicting(ino, whole, LockKind::Write, owner)
                .is_none();
        if !free {
            self.set_waiting(ino, whole, None, owner, pid, Wait::No)?;
        }
        self.set_waiting(ino, whole, kind, owner, pid, wait)
    }

    /// Ends the wait of `cancel` (with EINTR), now if it sleeps, else at its next check.
    pub fn cancel(&self, cancel: &WaitCancel) {
        cancel.0.store(true, Ordering::Release);
        // Under the table's lock: a waiter between its check and its sleep holds it, so
        // this notification cannot fall between the two.
        drop(self.lock());
        self.changed.notify_all();
    }

    /// Drops every lock `owner` holds on `ino` (a close: POSIX drops a process's record
    /// locks on a file when it closes any descriptor of it). A lock another thread of
    /// the owner takes while the close runs may outlive the close, as it could before
    /// this count was kept (Linux rechecks the descriptor after taking a lock; the
    /// front ends do not).
    pub fn release(&self, ino: InodeNo, owner: LockOwner) {
        if self.locked_files.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut t = self.lock();
        let Some(held) = t.held.get_mut(&ino) else {
            return; // The common close: no locks on the file.
        };
        let before = held.len();
        held.retain(|l| l.owner != owner);
        let released = held.len() < before;
        if held.is_empty() {
            t.held.remove(&ino);
        }
        self.locked_files.store(t.held.len(), Ordering::Release);
        drop(t);
        if released {
            self.changed.notify_all();
        }
    }

    /// Locks held on `ino` (tests, diagnostics), sorted by owner and start.
    pub fn held(&self, ino: InodeNo) -> Vec<RangeLock> {
        let mut v = self.lock().held.get(&ino).cloned().unwrap_or_default();
        v.sort_by_key(|l| (l.owner, l.start));
        v
    }
}

/// Makes `owner`'s locks in `held` cover `[start, end)` with `kind` (None: nothing),
/// splitting what it held across the edges and merging with touching locks of the kind.
fn replace(
    held: &mut Vec<RangeLock>,
    start: u64,
    end: Option<u64>,
    kind: Option<LockKind>,
    owner: LockOwner,
    pid: i32,
) {
    let mut kept = Vec::with_capacity(held.len() + 2);
    for l in held.drain(..) {
        if l.owner != owner || !l.overlaps(start, end) {
            kept.push(l);
            continue;
        }
        // The parts of `l` outside the range survive.
        if l.start < start {
            kept.push(RangeLock {
                end: Some(start),
                ..l
            });
        }
        if let Some(e) = end {
            if l.end.is_none_or(|le| le > e) {
                kept.push(RangeLock { start: e, ..l });
            }
        }
    }
    if let Some(kind) = kind {
        let mut new = RangeLock {
            start,
            end,
            kind,
            owner,
            pid,
        };
        // Merge with the owner's touching locks of the same kind.
        kept.retain(|l| {
            let touches = l.owner == owner
                && l.kind == kind
                && (l.end == Some(new.start) || new.end == Some(l.start));
            if touches {
                new.start = new.start.min(l.start);
                new.end = match (new.end, l.end) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    _ => None,
                };
            }
            !touches
        });
        kept.push(new);
    }
    *held = kept;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    const F: InodeNo = InodeNo(7);
    const A: LockOwner = LockOwner::Process(1);
    const B: LockOwner = LockOwner::Process(2);
    const C: LockOwner = LockOwner::Process(3);

    fn pid(o: LockOwner) -> i32 {
        match o {
            LockOwner::Process(p) => p,
            _ => 0,
        }
    }

    fn set(t: &LockTable, s: u64, len: u64, k: Option<LockKind>, o: LockOwner) -> i32 {
        match t.set(F, range(s, len).unwrap(), k, o, pid(o), false) {
            Ok(()) => 0,
            Err(e) => e.errno(),
        }
    }

    fn spans(t: &LockTable, o: LockOwner) -> Vec<(u64, Option<u64>, LockKind)> {
        t.held(F)
            .into_iter()
            .filter(|l| l.owner == o)
            .map(|l| (l.start, l.end, l.kind))
            .collect()
    }

    #[test]
    fn conflicts_follow_kind_and_owner() {
        let t = LockTable::default();
        assert_eq!(set(&t, 0, 100, Some(LockKind::Read), A), 0);
        assert_eq!(set(&t, 50, 100, Some(LockKind::Read), B), 0);
        assert_eq!(set(&t, 90, 5, Some(LockKind::Write), B), libc::EAGAIN);
        assert_eq!(set(&t, 100, 10, Some(LockKind::Write), C), libc::EAGAIN);
        assert_eq!(set(&t, 150, 0, Some(LockKind::Write), C), 0);
        // An owner upgrades its own range unless another holds it.
        assert_eq!(set(&t, 0, 50, Some(LockKind::Write), A), 0);
        let got = t
            .conflicting(F, range(40, 20).unwrap(), LockKind::Read, B)
            .unwrap();
        assert_eq!((got.owner, got.start, got.end), (A, 0, Some(50)));
        assert!(t
            .conflicting(F, range(40, 20).unwrap(), LockKind::Read, A)
            .is_none());
    }

    #[test]
    fn locks_split_and_merge() {
        let t = LockTable::default();
        assert_eq!(set(&t, 0, 100, Some(LockKind::Write), A), 0);
        assert_eq!(set(&t, 40, 20, None, A), 0);
        assert_eq!(
            spans(&t, A),
            vec![
                (0, Some(40), LockKind::Write),
                (60, Some(100), LockKind::Write)
            ]
        );
        assert_eq!(set(&t, 40, 20, Some(LockKind::Read), A), 0);
        assert_eq!(set(&t, 40, 20, Some(LockKind::Write), A), 0);
        assert_eq!(spans(&t, A), vec![(0, Some(100), LockKind::Write)]);
        assert_eq!(set(&t, 50, 0, Some(LockKind::Read), A), 0);
        assert_eq!(
            spans(&t, A),
            vec![(0, Some(50), LockKind::Write), (50, None, LockKind::Read)]
        );
        t.release(F, A);
        assert!(t.held(F).is_empty());
    }

    #[test]
    fn a_waiter_wakes_when_the_range_is_free_and_cycles_are_refused() {
        let t = Arc::new(LockTable::default());
        assert_eq!(set(&t, 0, 10, Some(LockKind::Write), A), 0);
        assert_eq!(set(&t, 20, 10, Some(LockKind::Write), B), 0);
        let t2 = t.clone();
        // B waits for A's bytes.
        let waiter = std::thread::spawn(move || {
            t2.set(F, range(0, 10).unwrap(), Some(LockKind::Write), B, 2, true)
        });
        while t.lock().waits_for.get(&B) != Some(&A) {
            std::thread::yield_now();
        }
        // A waiting for B's bytes would close the cycle.
        let e = t
            .set(F, range(20, 10).unwrap(), Some(LockKind::Write), A, 1, true)
            .unwrap_err();
        assert_eq!(e.errno(), libc::EDEADLK);
        t.set(F, range(0, 10).unwrap(), None, A, 1, false).unwrap();
        waiter.join().unwrap().unwrap();
        assert_eq!(
            spans(&t, B),
            vec![
                (0, Some(10), LockKind::Write),
                (20, Some(30), LockKind::Write)
            ]
        );
    }

    #[test]
    fn owners_of_different_namespaces_never_collide() {
        let t = LockTable::default();
        let (p, d, k) = (
            LockOwner::Process(5),
            LockOwner::Description(5),
            LockOwner::Kernel(5),
        );
        assert_eq!(set(&t, 0, 10, Some(LockKind::Write), p), 0);
        assert_eq!(set(&t, 0, 10, Some(LockKind::Write), d), libc::EAGAIN);
        assert_eq!(set(&t, 0, 10, Some(LockKind::Read), k), libc::EAGAIN);
        assert_ne!(LockOwner::new_description(), LockOwner::new_description());
    }

    #[test]
    fn a_cancelled_wait_ends_with_eintr_and_registers_nothing() {
        let t = Arc::new(LockTable::default());
        assert_eq!(set(&t, 0, 10, Some(LockKind::Write), A), 0);
        let cancel = Arc::new(WaitCancel::default());
        let (t2, c2) = (t.clone(), cancel.clone());
        let waiter = std::thread::spawn(move || {
            let w = Wait::Cancellable(&c2);
            t2.set_waiting(F, range(0, 10).unwrap(), Some(LockKind::Read), B, 2, w)
        });
        while t.lock().waits_for.get(&B) != Some(&A) {
            std::thread::yield_now();
        }
        t.cancel(&cancel);
        let e = waiter.join().unwrap().unwrap_err();
        assert_eq!(e.errno(), libc::EINTR);
        assert!(t.lock().waits_for.is_empty());
        assert_eq!(spans(&t, B), vec![]);
        // A cancelled flag matters only to a wait: a free range is still taken.
        let w = Wait::Cancellable(&cancel);
        let r = t.set_waiting(F, range(20, 5).unwrap(), Some(LockKind::Read), B, 2, w);
        assert!(r.is_ok());
    }

    #[test]
    fn flock_converts_by_dropping_first() {
        let t = LockTable::default();
        let (x, y) = (LockOwner::Kernel(1), LockOwner::Kernel(2));
        t.flock(F, Some(LockKind::Read), x, 1, Wait::No).unwrap();
        t.flock(F, Some(LockKind::Read), y, 2, Wait::No).unwrap();
        // x's upgrade fails while y reads, and x's read lock is gone (Linux drops it).
        let e = t
            .flock(F, Some(LockKind::Write), x, 1, Wait::No)
            .unwrap_err();
        assert_eq!(e.errno(), libc::EAGAIN);
        assert!(t.held(F).iter().all(|l| l.owner == y));
        t.flock(F, None, y, 2, Wait::No).unwrap();
        t.flock(F, Some(LockKind::Write), x, 1, Wait::No).unwrap();
        assert_eq!(t.held(F).len(), 1);
    }

    #[test]
    fn ranges_are_checked() {
        assert!(range(u64::MAX - 5, 10).is_err());
        assert_eq!(range(5, 0).unwrap(), (5, None));
    }
}
