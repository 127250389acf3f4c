//! Counts the changes front ends make to the file system, so that a cache kept outside
//! the vfs (the attached clients' shared attribute table, crates/instance) can tell
//! whether anything changed since it filled an entry (docs/DESIGN.md §12.5).
//!
//! A front end marks each call that may change what a stat, lookup or read shows
//! ([`Changes::begin`]), from before it changes anything until after. Two counters:
//! `started` (moved first) and `finished` (moved last). No change is in flight when
//! they are equal, and `started` never goes back, so "nothing changed since `started`
//! read s, with none in flight then" is `started == s` later.
//!
//! Invariants:
//! - `finished <= started` always; both only grow.
//! - A change's `started` increment happens before its first effect is visible, its
//!   `finished` increment after its last.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// Told of every change's start (true) and finish (false), in the same order as the
/// counters move: a copy of them kept where other processes can read it.
pub type Observer = Box<dyn Fn(bool) + Send + Sync>;

#[derive(Default)]
pub struct Changes {
    started: AtomicU64,
    finished: AtomicU64,
    observer: OnceLock<Observer>,
}

impl std::fmt::Debug for Changes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Changes")
            .field("started", &self.started)
            .field("finished", &self.finished)
            .finish()
    }
}

/// A change in flight, ended when dropped.
#[derive(Debug)]
pub struct Change<'a>(&'a Changes);

impl Drop for Change<'_> {
    fn drop(&mut self) {
        if let Some(o) = self.0.observer.get() {
            o(false);
        }
        self.0.finished.fetch_add(1, Ordering::SeqCst);
    }
}

impl Changes {
    /// Marks a change from now until the guard is dropped.
    pub fn begin(&self) -> Change<'_> {
        self.started.fetch_add(1, Ordering::SeqCst);
        if let Some(o) = self.observer.get() {
            o(true);
        }
        Change(self)
    }

    /// Sets the observer (once; false if one was set already).
    pub fn observe(&self, o: Observer) -> bool {
        self.observer.set(o).is_ok()
    }

    /// The count of changes started, if none is in flight now.
    pub fn quiet(&self) -> Option<u64> {
        let s = self.started.load(Ordering::SeqCst);
        (self.finished.load(Ordering::SeqCst) == s).then_some(s)
    }

    /// Changes started so far.
    pub fn started(&self) -> u64 {
        self.started.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quiet_only_between_changes() {
        let c = Changes::default();
        assert_eq!(c.quiet(), Some(0));
        let a = c.begin();
        let b = c.begin();
        assert_eq!(c.quiet(), None);
        drop(a);
        assert_eq!(c.quiet(), None);
        drop(b);
        assert_eq!(c.quiet(), Some(2));
        assert_eq!(c.started(), 2);
    }
}
