//! Locks through FUSE, served by the vfs lock tables (crates/vfs/src/locks.rs), so
//! processes on the mount and the interposer's owner see one set of locks: GETLK,
//! SETLK and SETLKW go to the flock table when the kernel marks them FUSE_LK_FLOCK, to
//! the record-lock table otherwise, with the kernel's lock owner as a
//! [`LockOwner::Kernel`]. FLUSH and RELEASE release them (`crate::files`).
//!
//! A SETLKW that has to wait does not hold its request thread: it is answered later
//! from a waiter thread of its own ([`LockWaits`], at most `LOCK_WAITERS_MAX` at once),
//! whose vfs wait an INTERRUPT of the request cancels (EINTR; the kernel restarts the
//! call if the signal's handler allows, or lets a killed process go).
//!
//! Invariants:
//! - A waiter is registered under its request's unique id from before its wait starts
//!   until its reply is sent; an INTERRUPT naming an id not registered (yet) is kept
//!   (bounded) and applied when that id registers.
//! - At shutdown every wait is cancelled and every waiter thread has ended before the
//!   vfs is unmounted.

use crate::adapter::{ino, AugeFuse};
use crate::constants::{EARLY_INTERRUPTS_MAX, LOCK_WAITERS_MAX};
use crate::convert::errno;
use crate::proto::abi;
use crate::session::{Deferred, Out};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex};
use vfs::locks::{LockKind, LockOwner, Wait, WaitCancel};
use vfs::{FileSystem, VfsError};

/// The largest byte offset (`OFFSET_MAX`): a lock ending here runs to infinity.
const OFFSET_MAX: u64 = i64::MAX as u64;

/// One lock request as the vfs takes it.
#[derive(Debug, Clone, Copy)]
struct LockArgs {
    kind: Option<LockKind>,
    span: (u64, Option<u64>),
    owner: LockOwner,
    pid: i32,
    flock: bool,
}

fn lock_args(a: &abi::LkIn) -> Result<LockArgs, i32> {
    let kind = match a.lk.typ as i32 {
        libc::F_RDLCK => Some(LockKind::Read),
        libc::F_WRLCK => Some(LockKind::Write),
        libc::F_UNLCK => None,
        _ => return Err(libc::EINVAL),
    };
    let (start, end) = (a.lk.start, a.lk.end);
    if start > OFFSET_MAX || end < start {
        return Err(libc::EINVAL);
    }
    let end = (end < OFFSET_MAX).then(|| end + 1);
    Ok(LockArgs {
        kind,
        span: (start, end),
        owner: LockOwner::Kernel(a.owner),
        pid: a.lk.pid as i32,
        flock: a.lk_flags & abi::LK_FLOCK != 0,
    })
}

/// Takes (or drops) the lock `l` on `i`.
fn set(fs: &FileSystem, i: u64, l: &LockArgs, wait: Wait<'_>) -> Result<(), VfsError> {
    if l.flock {
        fs.flocks().flock(ino(i), l.kind, l.owner, l.pid, wait)
    } else {
        fs.record_locks()
            .set_waiting(ino(i), l.span, l.kind, l.owner, l.pid, wait)
    }
}

impl AugeFuse {
    pub(crate) fn getlk(&self, i: u64, a: &abi::LkIn, out: &mut Out<'_>) {
        let l = match lock_args(a) {
            Ok(l) => l,
            Err(e) => return out.error(e),
        };
        let Some(kind) = l.kind else {
            return out.error(libc::EINVAL);
        };
        let table = if l.flock {
            self.fs.flocks()
        } else {
            self.fs.record_locks()
        };
        let lk = match table.conflicting(ino(i), l.span, kind, l.owner) {
            None => abi::FileLock {
                typ: libc::F_UNLCK as u32,
                ..a.lk
            },
            Some(h) => abi::FileLock {
                start: h.start,
                end: h.end.map_or(OFFSET_MAX, |e| e - 1),
                typ: match h.kind {
                    LockKind::Read => libc::F_RDLCK as u32,
                    LockKind::Write => libc::F_WRLCK as u32,
                },
                pid: h.pid.max(0) as u32,
            },
        };
        out.send(&abi::LkOut { lk });
    }

    pub(crate) fn setlk(&self, h: &abi::InHeader, a: &abi::LkIn, sleep: bool, out: &mut Out<'_>) {
        let i = h.nodeid;
        let l = match lock_args(a) {
            Ok(l) => l,
            Err(e) => return out.error(e),
        };
        if !l.flock && l.kind.is_some() {
            // Its locks go when this handle is released (OFD locks are named in no FLUSH).
            if let Some(f) = self.files.get(a.fh) {
                f.note_owner(a.owner);
            }
        }
        match set(&self.fs, i, &l, Wait::No) {
            Err(VfsError::WouldBlock(_)) if sleep => {
                let reply = out.defer(h.unique);
                self.wait_for_lock(h.unique, i, l, reply);
            }
            Err(e) => out.error(errno(&e)),
            Ok(()) => out.ok(),
        }
    }

    /// Waits for lock `l` on a thread of its own, then answers `reply`.
    fn wait_for_lock(&self, unique: u64, i: u64, l: LockArgs, reply: Deferred) {
        let Some(cancel) = self.waits.register(unique) else {
            return reply.reply(Err(libc::ENOLCK));
        };
        let (fs, waits) = (self.fs.clone(), self.waits.clone());
        let spawned = std::thread::Builder::new()
            .name("augefs-lockwait".into())
            .spawn(move || {
                let r = set(&fs, i, &l, Wait::Cancellable(&cancel));
                waits.unregister(unique);
                reply.reply(r.map(|()| &[][..]).map_err(|e| errno(&e)));
            });
        if spawned.is_err() {
            // The closure (and its reply) was dropped with the failed spawn: the kernel
            // gets no answer unless the waiter is unregistered and answered here.
            self.waits.unregister(unique);
            eprintln!("augefs: cannot start a lock waiter thread");
        }
    }
}

/// SETLKW requests waiting for their locks.
#[derive(Debug, Default)]
pub struct LockWaits {
    state: Mutex<Waits>,
    /// Signalled when a waiter unregisters (shutdown waits for none to be left).
    gone: Condvar,
}

#[derive(Debug, Default)]
struct Waits {
    waiting: HashMap<u64, Arc<WaitCancel>>,
    early: VecDeque<u64>,
    closed: bool,
}

impl LockWaits {
    fn lock(&self) -> std::sync::MutexGuard<'_, Waits> {
        self.state.lock().expect("lock waits")
    }

    /// Registers request `unique` as waiting; None if too many wait or the session is
    /// over. Its wait is cancelled already if an INTERRUPT for it came first.
    fn register(&self, unique: u64) -> Option<Arc<WaitCancel>> {
        let mut w = self.lock();
        if w.closed || w.waiting.len() >= LOCK_WAITERS_MAX {
            return None;
        }
        let interrupted = match w.early.iter().position(|&u| u == unique) {
            Some(at) => w.early.remove(at).is_some(),
            None => false,
        };
        // Nobody waits on it yet: the flag alone ends the wait at its first check.
        let cancel = Arc::new(if interrupted {
            WaitCancel::cancelled()
        } else {
            WaitCancel::default()
        });
        let old = w.waiting.insert(unique, cancel.clone());
        assert!(old.is_none(), "request {unique} waits twice");
        Some(cancel)
    }

    fn unregister(&self, unique: u64) {
        let mut w = self.lock();
        w.waiting.remove(&unique);
        drop(w);
        self.gone.notify_all();
    }

    /// FUSE_INTERRUPT of request `unique`.
    pub fn interrupt(&self, fs: &FileSystem, unique: u64) {
        let mut w = self.lock();
        match w.waiting.get(&unique) {
            Some(c) => cancel(fs, c),
            None => {
                // Not a waiting SETLKW, or one not registered yet.
                if w.early.len() == EARLY_INTERRUPTS_MAX {
                    w.early.pop_front();
                }
                w.early.push_back(unique);
            }
        }
    }

    /// Cancels every wait and waits for the waiters to end.
    pub fn shutdown(&self, fs: &FileSystem) {
        let mut w = self.lock();
        w.closed = true;
        for c in w.waiting.values() {
            cancel(fs, c);
        }
        while !w.waiting.is_empty() {
            w = self.gone.wait(w).expect("lock waits");
        }
    }

    /// Waiters now (tests).
    pub fn waiting(&self) -> usize {
        self.lock().waiting.len()
    }
}

/// Cancels `c` in whichever table it waits on.
fn cancel(fs: &FileSystem, c: &WaitCancel) {
    fs.record_locks().cancel(c);
    fs.flocks().cancel(c);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_ranges_convert_inclusive_ends() {
        let a = abi::LkIn {
            owner: 9,
            lk: abi::FileLock {
                start: 10,
                end: 19,
                typ: libc::F_WRLCK as u32,
                pid: 42,
            },
            ..abi::LkIn::default()
        };
        let l = lock_args(&a).unwrap();
        assert_eq!(l.span, (10, Some(20)));
        assert_eq!((l.owner, l.pid, l.flock), (LockOwner::Kernel(9), 42, false));
        let whole = abi::LkIn {
            lk: abi::FileLock {
                end: OFFSET_MAX,
                typ: libc::F_UNLCK as u32,
                ..a.lk
            },
            lk_flags: abi::LK_FLOCK,
            ..a
        };
        let l = lock_args(&whole).unwrap();
        assert_eq!((l.span, l.kind, l.flock), ((10, None), None, true));
        let bad = abi::LkIn {
            lk: abi::FileLock { end: 5, ..a.lk },
            ..a
        };
        assert_eq!(lock_args(&bad).unwrap_err(), libc::EINVAL);
    }

    #[test]
    fn an_early_interrupt_cancels_the_wait_that_registers_later() {
        let w = LockWaits::default();
        let fs_free = |w: &LockWaits, u| w.register(u).expect("room");
        // An interrupt for request 5 before it registers.
        let mut st = w.lock();
        st.early.push_back(5);
        drop(st);
        assert!(fs_free(&w, 5).is_cancelled());
        assert!(!fs_free(&w, 6).is_cancelled());
        assert_eq!(w.waiting(), 2);
        w.unregister(5);
        w.unregister(6);
        assert_eq!(w.waiting(), 0);
    }
}
