//! Write-behind leases: where a front end lets one client's writes land after they
//! were acknowledged, every other front end's call first ends the lease
//! (docs/DESIGN.md §12.5, "Posted requests").
//!
//! The instance (crates/instance) may acknowledge an attached client's small writes
//! and attribute changes before running them, while the client is the only one using
//! the file system's files (a lease). Whoever else then calls, through the kernel's
//! mount or as another client, must see those changes: its call first asks the
//! breaker (set by the instance) to run every acknowledged change and end the lease.
//!
//! The kernel's mount is the front end this module coordinates with: it caches what
//! it was told, so a lease may start only when no kernel call is in flight and none
//! started since the kernel's caches of the file were dropped ([`Leases::kernel_calls`]
//! then [`Leases::try_hold`]). Clients of the instance need no such care: a lease is a
//! change in flight for their caches (crates/instance/src/table.rs).
//!
//! Invariants:
//! - A call marked by [`Leases::call`] starts only after every lease not its caller's
//!   has ended (the breaker returned), if any was held when it began.
//! - A lease starts only if no kernel call was in flight or started between the
//!   caller's [`Leases::kernel_calls`] and its [`Leases::try_hold`]; a kernel call that
//!   begins after a successful `try_hold` sees the lease (both use sequentially
//!   consistent order: one of the two sees the other).
//! - A session's own calls skip the breaker while it alone holds leases (`sole`,
//!   published before its lease's grant returns, so no call that follows a post of
//!   another holder can read it stale).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

/// Who calls: the kernel's mount, or a client session of the instance (its token).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    Kernel,
    Session(u64),
}

/// Ends every lease not held by the caller; returns when their changes have run.
pub type Breaker = Box<dyn Fn(Caller) + Send + Sync>;

#[derive(Default)]
pub struct Leases {
    /// Leases held now.
    held: AtomicU64,
    /// The session holding every lease, when one does (0: none, or several).
    sole: AtomicU64,
    /// Leases held, by session token.
    holders: Mutex<HashMap<u64, u64>>,
    /// Kernel calls begun and ended.
    kernel_started: AtomicU64,
    kernel_finished: AtomicU64,
    /// Bytes reserved for posted writes not yet run.
    reserved: AtomicU64,
    breaker: OnceLock<Breaker>,
}

impl std::fmt::Debug for Leases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leases")
            .field("held", &self.held)
            .field("kernel_started", &self.kernel_started)
            .finish()
    }
}

/// A kernel call in flight, ended when dropped.
#[derive(Debug)]
pub struct KernelCall<'a>(&'a Leases);

impl Drop for KernelCall<'_> {
    fn drop(&mut self) {
        self.0.kernel_finished.fetch_add(1, Ordering::SeqCst);
    }
}

/// A mark of the kernel's calls, taken before its caches are dropped.
#[derive(Debug, Clone, Copy)]
pub struct KernelMark(u64);

impl Leases {
    /// Sets the breaker (once; false if one was set already).
    pub fn set_breaker(&self, b: Breaker) -> bool {
        self.breaker.set(b).is_ok()
    }

    /// A call of `who` is about to run: ends the leases of others first.
    pub fn call(&self, who: Caller) {
        if self.held.load(Ordering::SeqCst) == 0 {
            return;
        }
        if who == Caller::Session(self.sole.load(Ordering::SeqCst)) {
            return;
        }
        if let Some(b) = self.breaker.get() {
            b(who);
        }
    }

    /// Counts a lease of session `token` in (`by` 1) or out (`by` -1), and publishes
    /// the sole holder.
    fn count(&self, token: u64, by: i64) {
        let mut h = self.holders.lock().expect("holders lock");
        let n = h.entry(token).or_insert(0);
        *n = n.checked_add_signed(by).expect("a lease released twice");
        if *n == 0 {
            h.remove(&token);
        }
        let sole = match h.keys().next() {
            Some(&t) if h.len() == 1 => t,
            _ => 0,
        };
        self.sole.store(sole, Ordering::SeqCst);
    }

    /// A call of the kernel's mount, marked in flight until the guard drops (after its
    /// reply: what the reply told the kernel is cached by then).
    pub fn kernel_call(&self) -> KernelCall<'_> {
        self.begin_kernel();
        KernelCall(self)
    }

    /// [`Leases::kernel_call`] for a transport whose replies reach the kernel later
    /// than the call's end: ended by [`Leases::end_kernel`] once they did.
    pub fn begin_kernel(&self) {
        self.kernel_started.fetch_add(1, Ordering::SeqCst);
        self.call(Caller::Kernel);
    }

    /// `n` calls [`Leases::begin_kernel`] marked have had their replies delivered.
    pub fn end_kernel(&self, n: u64) {
        self.kernel_finished.fetch_add(n, Ordering::SeqCst);
    }

    /// The kernel's calls so far, taken before the kernel's caches of a file to be
    /// leased are dropped.
    pub fn kernel_calls(&self) -> KernelMark {
        KernelMark(self.kernel_started.load(Ordering::SeqCst))
    }

    /// Starts a lease of session `token` (nonzero) if no kernel call ran or began
    /// since `mark` (and none is in flight); false: no lease (nothing changed).
    pub fn try_hold(&self, mark: KernelMark, token: u64) -> bool {
        assert_ne!(token, 0, "session tokens are nonzero");
        self.count(token, 1);
        self.held.fetch_add(1, Ordering::SeqCst);
        let started = self.kernel_started.load(Ordering::SeqCst);
        if started == mark.0 && self.kernel_finished.load(Ordering::SeqCst) == started {
            return true;
        }
        self.release(token);
        false
    }

    /// A lease of session `token` that [`Leases::try_hold`] started has ended.
    pub fn release(&self, token: u64) {
        let before = self.held.fetch_sub(1, Ordering::SeqCst);
        assert!(before > 0, "a lease released twice");
        self.count(token, -1);
    }

    /// Reserves `want` bytes of `free` for a lease's posted writes, keeping `margin`
    /// free besides every reservation made: true if reserved.
    pub fn reserve(&self, want: u64, free: u64, margin: u64) -> bool {
        let mut now = self.reserved.load(Ordering::SeqCst);
        loop {
            let after = now.saturating_add(want);
            if after.saturating_add(margin) > free {
                return false;
            }
            match self
                .reserved
                .compare_exchange(now, after, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => return true,
                Err(v) => now = v,
            }
        }
    }

    /// Gives back a reservation of `n` bytes.
    pub fn unreserve(&self, n: u64) {
        let before = self.reserved.fetch_sub(n, Ordering::SeqCst);
        assert!(before >= n, "a reservation given back twice");
    }

    /// Leases held now.
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn a_kernel_call_in_flight_or_since_the_mark_refuses_a_lease() {
        let l = Leases::default();
        let mark = l.kernel_calls();
        {
            let _k = l.kernel_call();
            assert!(!l.try_hold(mark, 5), "in flight");
        }
        assert!(!l.try_hold(mark, 5), "began since the mark");
        assert!(l.try_hold(l.kernel_calls(), 5));
        assert_eq!(l.held(), 1);
        l.release(5);
        assert_eq!(l.held(), 0);
    }

    #[test]
    fn reservations_keep_the_margin_free() {
        let l = Leases::default();
        assert!(l.reserve(60, 100, 30));
        assert!(!l.reserve(20, 100, 30), "60 + 20 + 30 > 100");
        assert!(l.reserve(10, 100, 30));
        l.unreserve(60);
        assert!(l.reserve(50, 100, 30));
    }

    #[test]
    fn a_call_ends_the_leases_held_and_only_then() {
        let l = Leases::default();
        let heard = Arc::new(Mutex::new(Vec::new()));
        let h = heard.clone();
        assert!(l.set_breaker(Box::new(move |who| h.lock().unwrap().push(who))));
        l.call(Caller::Session(3));
        assert!(heard.lock().unwrap().is_empty(), "no lease, no break");
        assert!(l.try_hold(l.kernel_calls(), 5));
        l.call(Caller::Session(3));
        drop(l.kernel_call());
        assert_eq!(*heard.lock().unwrap(), [Caller::Session(3), Caller::Kernel]);
    }

    #[test]
    fn the_sole_holders_own_calls_end_nothing() {
        let l = Leases::default();
        let heard = Arc::new(Mutex::new(Vec::new()));
        let h = heard.clone();
        assert!(l.set_breaker(Box::new(move |who| h.lock().unwrap().push(who))));
        assert!(l.try_hold(l.kernel_calls(), 5));
        assert!(l.try_hold(l.kernel_calls(), 5));
        l.call(Caller::Session(5));
        assert!(heard.lock().unwrap().is_empty(), "its own leases only");
        assert!(l.try_hold(l.kernel_calls(), 7));
        l.call(Caller::Session(5));
        assert_eq!(
            *heard.lock().unwrap(),
            [Caller::Session(5)],
            "7 holds one too"
        );
        l.release(7);
        l.call(Caller::Session(5));
        l.release(5);
        l.release(5);
        assert_eq!(l.held(), 0);
        assert_eq!(heard.lock().unwrap().len(), 1);
    }
}
