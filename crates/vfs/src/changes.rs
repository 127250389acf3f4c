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
//! Besides, the vfs itself marks every change of a file's bytes or size (a write, a
//! truncate, a fallocate) with the file's inode ([`Changes::begin_data`]), whichever
//! front end asked for it: an observer can keep per-file counts, so that a copy of a
//! file's data kept outside the vfs (an attached client's) knows when it went stale.
//!
//! Invariants:
//! - `finished <= started` always; both only grow.
//! - A change's `started` increment happens before its first effect is visible, its
//!   `finished` increment after its last.
//! - A data change's [`Event::DataStarted`] reaches the observer before any page or
//!   the size of its file changes, its [`Event::DataFinished`] after the last.

use format::InodeNo;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// What the observer is told, in the order things happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A change a front end marked started (its `started` counter moved).
    Started,
    /// ... finished (its `finished` counter is about to move).
    Finished,
    /// The bytes or size of a file are about to change.
    DataStarted(InodeNo),
    /// ... and have changed.
    DataFinished(InodeNo),
}

/// Told of every change's start and finish: a copy of the counts kept where other
/// processes can read them.
pub type Observer = Box<dyn Fn(Event) + Send + Sync>;

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
        self.0.tell(Event::Finished);
        self.0.finished.fetch_add(1, Ordering::SeqCst);
    }
}

/// A change of one file's data in flight, ended when dropped.
#[derive(Debug)]
pub struct DataChange<'a>(&'a Changes, InodeNo);

impl Drop for DataChange<'_> {
    fn drop(&mut self) {
        self.0.tell(Event::DataFinished(self.1));
    }
}

impl Changes {
    /// Marks a change from now until the guard is dropped.
    pub fn begin(&self) -> Change<'_> {
        self.started.fetch_add(1, Ordering::SeqCst);
        self.tell(Event::Started);
        Change(self)
    }

    /// Marks a change of `ino`'s bytes or size from now until the guard is dropped
    /// (the vfs's own data paths; see the module's invariants).
    pub(crate) fn begin_data(&self, ino: InodeNo) -> DataChange<'_> {
        self.tell(Event::DataStarted(ino));
        DataChange(self, ino)
    }

    fn tell(&self, e: Event) {
        if let Some(o) = self.observer.get() {
            o(e);
        }
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

    #[test]
    fn observer_hears_data_changes_in_order() {
        let c = Changes::default();
        let heard = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let h = heard.clone();
        assert!(c.observe(Box::new(move |e| h.lock().unwrap().push(e))));
        {
            let _a = c.begin();
            let _d = c.begin_data(InodeNo(7));
        }
        let ino = InodeNo(7);
        assert_eq!(
            *heard.lock().unwrap(),
            [
                Event::Started,
                Event::DataStarted(ino),
                Event::DataFinished(ino),
                Event::Finished
            ]
        );
    }
}
