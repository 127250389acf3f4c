//! Posted requests: a client's small writes and attribute changes, acknowledged before
//! they run, under a lease (docs/DESIGN.md §12.5 "Posted requests"; vfs::leases).
//!
//! A session may open one posting connection. The instance answers its first request
//! and never again: each later frame (a Write, SetAttr or CloseQuiet of the session's
//! own handles) runs in order on the connection's thread, and a failure is kept for
//! the file's next fsync, as the kernel keeps a write-back error. A client posts only
//! for a handle the instance leased it at open (the reply's budget), so:
//! - The session's own later requests run after its posts: a request the client sends
//!   after posting is preceded by a Barrier with its count of posts
//!   ([`Posts::wait_applied`]).
//! - Anyone else's call first ends the session's leases (`crate::server`'s breaker):
//!   the posting connection is shut for reading, so the client's next post fails and
//!   it sends the call instead, and every post already in the socket, which includes
//!   every post the client was told was done, runs before the call goes on.
//! - A lease is a change of its file's data in flight for every client's caches
//!   (`crate::table`), so nobody answers a stat, access or read of the file from
//!   shared memory while it is held; a post that runs is a change like any other.
//!
//! Posts that came through a posting ring (`crate::postring`) are run by whoever holds
//! its [`Drain`]: the connection's thread, or a request of the session that must follow
//! them (a Barrier), which runs them itself rather than wait for that thread to wake.
//!
//! Invariants:
//! - Posts run one at a time, in order: the socket's by the connection's thread, the
//!   ring's by the holder of its drain.
//! - Lock order: the drain, then the state (never the drain while holding the state).
//! - A lease exists only while the posting connection's thread runs: granted only while
//!   it is registered ([`Posts::lease`]), all ended when it ends ([`Posts::close`]),
//!   before a caller that ended the connection ([`Posts::end`]) goes on.
//! - `applied` counts posts run (or refused), in the order sent; it never goes back.

use crate::postring::{PostRing, Reader};
use format::InodeNo;
use platform::reqstats::ThreadStats;
use std::collections::HashMap;
use std::os::fd::RawFd;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use vfs::Creds;

/// A lease of one handle.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Lease {
    pub ino: InodeNo,
    /// Bytes reserved for its posted writes (vfs::leases::Leases::reserve).
    pub budget: u64,
}

#[derive(Debug, Default)]
struct State {
    applied: u64,
    /// The posting connection's socket while its thread serves it.
    channel: Option<RawFd>,
    /// Its posting ring, if it has one (closed before the socket is shut).
    ring: Option<Arc<PostRing>>,
    /// Leases by handle.
    leases: HashMap<u64, Lease>,
    /// The first error of a posted request, by file, until an fsync reports it.
    errors: HashMap<InodeNo, i32>,
}

/// A posting ring's reader, with what running its records needs: whoever holds it runs
/// them.
#[derive(Debug)]
pub(crate) struct Drain {
    pub reader: Reader,
    /// Who the posting connection's process was when it connected (its posts run as
    /// that identity, whichever thread runs them).
    pub creds: Creds,
    /// The posting connection's socket (open while the drain is registered).
    pub fd: RawFd,
    /// A record that was not a post, or a lie, was met: nothing more runs.
    pub refused: bool,
    /// The posts' figures, whichever thread runs them (the posting thread's CPU).
    pub counters: ThreadStats,
}

#[derive(Debug, Default)]
pub(crate) struct Posts {
    state: Mutex<State>,
    changed: Condvar,
    drain: Mutex<Option<Drain>>,
}

impl Posts {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("posts lock")
    }

    /// Registers the posting connection `fd` (with its posting `ring`, if any), after
    /// the client's `sent` earlier posts (all run: an earlier connection is waited for
    /// until its thread ended).
    pub fn open(&self, fd: RawFd, ring: Option<Arc<PostRing>>, sent: u64) {
        let mut s = self.state();
        while s.channel.is_some() {
            s = self.changed.wait(s).expect("posts lock");
        }
        s.channel = Some(fd);
        s.ring = ring;
        s.applied = s.applied.max(sent);
    }

    /// Registers the drain of the posting connection's ring.
    pub fn set_drain(&self, d: Drain) {
        *self.drain.lock().expect("drain lock") = Some(d);
    }

    /// The ring's drain, waiting while another thread runs its records (None inside:
    /// no ring, or its connection ended).
    pub fn drain(&self) -> MutexGuard<'_, Option<Drain>> {
        self.drain.lock().expect("drain lock")
    }

    /// The ring's drain if no other thread runs its records now (else that thread runs
    /// them: the caller waits for them as usual).
    pub fn try_drain(&self) -> Option<MutexGuard<'_, Option<Drain>>> {
        self.drain.try_lock().ok()
    }

    /// Posts run so far.
    pub fn applied_count(&self) -> u64 {
        self.state().applied
    }

    /// The posting connection's thread ends: each of its leases is ended by `end`
    /// before anyone waiting for the end ([`Posts::end`]) goes on; how many there were.
    pub fn close(&self, end: impl Fn(Lease)) -> usize {
        self.close_with_drain(end).0
    }

    /// [`Posts::close`], also giving back the ring's drain, if it had one.
    pub fn close_with_drain(&self, end: impl Fn(Lease)) -> (usize, Option<Drain>) {
        // Before the state: a drain's holder takes the state lock while it holds the
        // drain (each post it runs counts).
        let drain = self.drain.lock().expect("drain lock").take();
        let mut s = self.state();
        let n = s.leases.len();
        for (_, l) in s.leases.drain() {
            end(l);
        }
        s.channel = None;
        s.ring = None;
        self.changed.notify_all();
        (n, drain)
    }

    /// Records the lease of `handle`, if the posting connection is served (else the
    /// caller ends it: false).
    pub fn lease(&self, handle: u64, lease: Lease) -> bool {
        let mut s = self.state();
        if s.channel.is_none() {
            return false;
        }
        s.leases.insert(handle, lease);
        true
    }

    /// The lease of `handle`, taken (it closes).
    pub fn unlease(&self, handle: u64) -> Option<Lease> {
        self.state().leases.remove(&handle)
    }

    /// Whether a posting connection is served.
    pub fn has_channel(&self) -> bool {
        self.state().channel.is_some()
    }

    /// Whether the session holds a lease.
    pub fn holds(&self) -> bool {
        !self.state().leases.is_empty()
    }

    /// One more post has run; `failed`: its file and error, if it failed.
    pub fn applied(&self, failed: Option<(InodeNo, i32)>) {
        let mut s = self.state();
        s.applied += 1;
        if let Some((ino, e)) = failed {
            s.errors.entry(ino).or_insert(e);
        }
        self.changed.notify_all();
    }

    /// Returns once `count` posts have run, or no posting connection is served (every
    /// post it received has run then).
    pub fn wait_applied(&self, count: u64) {
        let mut s = self.state();
        while s.applied < count && s.channel.is_some() {
            s = self.changed.wait(s).expect("posts lock");
        }
    }

    /// The error a post of `ino` met, taken (an fsync of it reports it once).
    pub fn take_error(&self, ino: InodeNo) -> Option<i32> {
        self.state().errors.remove(&ino)
    }

    /// Any error a post met, taken (a sync reports it).
    pub fn take_any_error(&self) -> Option<i32> {
        let mut s = self.state();
        let ino = *s.errors.keys().next()?;
        s.errors.remove(&ino)
    }

    /// Ends the posting connection for reading and waits until every post it holds
    /// has run and its thread let go of the leases. Its ring is closed first, so the
    /// client's next post fails and what its thread drains is what was published.
    pub fn end(&self) {
        let mut s = self.state();
        if let Some(ring) = &s.ring {
            ring.close();
        }
        if let Some(fd) = s.channel {
            // SAFETY: the socket stays open while `channel` names it (its thread clears
            // `channel` under this lock before the socket closes).
            unsafe { libc::shutdown(fd, libc::SHUT_RD) };
        }
        while s.channel.is_some() {
            s = self.changed.wait(s).expect("posts lock");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_barrier_waits_for_the_posts_or_the_end_of_the_connection() {
        let p = Arc::new(Posts::default());
        p.open(-1, None, 2);
        p.wait_applied(2);
        let q = p.clone();
        let t = std::thread::spawn(move || q.wait_applied(4));
        p.applied(None);
        p.applied(Some((InodeNo(7), libc::EIO)));
        t.join().unwrap();
        assert_eq!(p.take_error(InodeNo(7)), Some(libc::EIO));
        assert_eq!(p.take_error(InodeNo(7)), None);
        let q = p.clone();
        let t = std::thread::spawn(move || q.wait_applied(9));
        assert_eq!(p.close(|_| panic!("no lease")), 0);
        t.join().unwrap();
    }

    #[test]
    fn leases_live_only_with_the_connection() {
        let p = Posts::default();
        let l = Lease {
            ino: InodeNo(3),
            budget: 10,
        };
        assert!(!p.lease(1, l), "no connection");
        p.open(-1, None, 0);
        assert!(p.lease(1, l) && p.lease(2, l));
        assert!(p.unlease(1).is_some());
        let ended = std::sync::atomic::AtomicUsize::new(0);
        let count = |_| {
            ended.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        };
        assert_eq!(p.close(count), 1);
        assert_eq!(ended.into_inner(), 1);
        assert!(!p.holds() && !p.has_channel());
    }
}
