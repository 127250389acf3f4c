//! Background commit (`FileSystem::set_commit_interval`, docs/SEMANTICS.md §2): everything
//! written is made durable within the interval even if nobody calls fsync or sync, as
//! ext4's `commit=` does for its journal. Off unless a front end asks (the FUSE mount and
//! the interposer's owner do, 5 s by default); tests and embedders keep full control.
//!
//! Invariants:
//! - A commit is a whole-file-system sync (write-back of every dirty page, then the
//!   engine's checkpoint), the same as `FileSystem::sync` but for forgetting the fsync
//!   lanes, which only makes a later fsync cheaper.
//! - Idle costs no IO: a round syncs only if MetaDB's sequence number moved since the
//!   start of the last successful commit or dirty pages are cached. The sequence is read
//!   before the sync, so a change racing a commit is covered by the next round at the
//!   latest. Idle, the thread sleeps on a condition variable for the interval and reads
//!   one counter and one sequence number when it wakes.
//! - A failed commit is reported on standard error (the daemon's log) and retried next
//!   round, unless the file system turned read-only (a device failure): then the thread
//!   ends, since no round could commit. A read-only mount starts none.

use crate::shared::Core;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// The commit interval front ends use when the user gives none (ext4's default).
pub const COMMIT_INTERVAL_DEFAULT: Duration = Duration::from_secs(5);

/// The commit thread of one mount.
pub(crate) struct Committer {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl Committer {
    pub fn start(core: Arc<Core>, every: Duration) -> Committer {
        assert!(!every.is_zero(), "a zero interval means no committer");
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let s = stop.clone();
        let thread = std::thread::Builder::new()
            .name("augefs-commit".into())
            .spawn(move || run(&core, &s, every))
            .expect("spawn the commit thread");
        Committer {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops the thread (after a commit in progress) and waits for it.
    pub fn stop(mut self) {
        *self.stop.0.lock().expect("commit stop lock") = true;
        self.stop.1.notify_all();
        if let Some(t) = self.thread.take() {
            // A panic in the committer was already reported; unmount goes on.
            let _ = t.join();
        }
    }
}

fn run(core: &Core, stop: &(Mutex<bool>, Condvar), every: Duration) {
    let mut committed = None;
    loop {
        {
            let stopped = stop.0.lock().expect("commit stop lock");
            let (stopped, _) = stop
                .1
                .wait_timeout_while(stopped, every, |s| !*s)
                .expect("commit stop lock");
            if *stopped {
                return;
            }
        }
        let seq = core.store().seq();
        let dirty = core.cache.stats().dirty > 0;
        if committed == Some(seq) && !dirty {
            continue;
        }
        match core.write_back_all().and_then(|()| Ok(core.engine.sync()?)) {
            Ok(()) => committed = Some(seq),
            Err(e) => {
                eprintln!("augefs: background commit failed: {e}");
                if core.engine.read_only_reason().is_some() {
                    // Read-only from now on: no later round can commit.
                    return;
                }
            }
        }
    }
}

impl std::fmt::Debug for Committer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Committer").finish_non_exhaustive()
    }
}
