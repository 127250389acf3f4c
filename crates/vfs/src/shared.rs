//! The state a mounted file system shares with its background threads (`Core`: the
//! engine, the inode table, the name cache, the page cache, the lanes inode records
//! were last written in) and the file system's size constants. `crate::fs` builds it
//! at mount and starts the threads that take it (the flusher, the background commit,
//! read-ahead); the operations on it live by concern (`crate::store`, `crate::lanes`,
//! [`crate::data`]).
//!
//! Invariants:
//! - This module and the threads that take a `Core` import nothing of `crate::fs`:
//!   the file system sits on top, starting and stopping them.

use crate::caches::{InodeTable, NameCache};
use crate::pagecache::Cache;
use engine::log::Engine;
use format::InodeNo;
use platform::Clock;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex};

/// The file system's block (defined once, in `format`).
pub const BLOCK: u64 = format::constants::BLOCK_SIZE_BYTES;
/// The largest file size (the block index counts 4 KiB blocks in a u64; this keeps
/// offsets within i64 for lseek).
pub const FILE_SIZE_MAX: u64 = 1 << 50;

/// What the file system shares with its background flusher: the engine, where inode
/// records were last written, the inode table and the page cache.
pub(crate) struct Core {
    pub engine: Engine,
    pub clock: Arc<dyn Clock>,
    pub inodes: InodeTable,
    pub names: NameCache,
    /// Per inode whose record was last written in a lane other than its own domain's: a
    /// member of that lane's domain ([`Core::record_in`]).
    pub record_lanes: Mutex<HashMap<InodeNo, InodeNo>>,
    /// Per inode created in a lane other than its own domain's and not yet known durable:
    /// a member of that lane's domain ([`Core::record_in`]).
    pub create_lanes: Mutex<HashMap<InodeNo, InodeNo>>,
    pub cache: Arc<Cache>,
    /// Inodes in use (statfs's `f_files - f_ffree`, `crate::inode_count`).
    pub inode_count: InodeCount,
    /// Inodes left to the reaper (`crate::reap`).
    pub reaps: Reaps,
}

/// Inodes the reaper may have queued at most.
pub const REAPS_MAX: usize = 4096;
/// Queued inodes that end the reaper's wait for more.
pub const REAP_BATCH: usize = 256;
/// How long the reaper waits for more after the first file is queued.
pub const REAP_AFTER: std::time::Duration = std::time::Duration::from_millis(50);

#[derive(Debug, Default)]
pub(crate) struct ReapQueue {
    pub inodes: VecDeque<InodeNo>,
    /// The reaper is freeing one (popped, not done).
    pub busy: bool,
    /// A reaper thread takes the queue.
    pub running: bool,
    pub stop: bool,
}

/// The inodes left for the reaper (`crate::reap`, which runs it).
#[derive(Debug, Default)]
pub(crate) struct Reaps {
    pub queue: Mutex<ReapQueue>,
    /// Wakes the reaper.
    pub wake: Condvar,
    /// The queue emptied.
    pub idle: Condvar,
}

impl Reaps {
    /// Whether an unlink may leave an inode to the reaper now (there is one, with room).
    pub fn room(&self) -> bool {
        let q = self.queue.lock().expect("reaps lock");
        q.running && !q.stop && q.inodes.len() < REAPS_MAX
    }

    /// Queues `ino`, whose orphan record is logged (taken by the reaper, or by the
    /// next `Core::reap_all` if the reaper stopped meanwhile).
    pub fn push(&self, ino: InodeNo) {
        let mut q = self.queue.lock().expect("reaps lock");
        q.inodes.push_back(ino);
        // The first file queued wakes the reaper, which waits a moment for more, and
        // a full batch ends its wait: a wake-up per unlink cost more than it saved.
        if q.inodes.len() == 1 || q.inodes.len() >= REAP_BATCH {
            self.wake.notify_one();
        }
    }
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    #[default]
    Counting,
    Counted(u64),
    /// Failed or stopped: only the delta is known.
    Failed,
}

/// Inodes in use: the mount's scan and the changes since (`crate::inode_count`).
#[derive(Debug, Default)]
pub(crate) struct InodeCount {
    pub phase: Mutex<Phase>,
    done: Condvar,
    pub stop: std::sync::atomic::AtomicBool,
    /// Inodes created minus inodes deleted since the scan's snapshot: creates once their
    /// batch is logged, deletions once their records are in the batch that deletes them
    /// (a batch that then fails leaves the count one low until the next mount).
    pub delta: std::sync::atomic::AtomicI64,
}

impl InodeCount {
    pub fn add(&self, delta: i64) {
        self.delta
            .fetch_add(delta, std::sync::atomic::Ordering::Relaxed);
    }

    /// Inodes in use, once the scan is done.
    pub fn used(&self) -> u64 {
        let phase = self
            .done
            .wait_while(self.phase.lock().expect("inode count lock"), |p| {
                *p == Phase::Counting
            })
            .expect("inode count lock");
        let base = match *phase {
            Phase::Counted(n) => n as i64,
            _ => 0,
        };
        (base + self.delta.load(std::sync::atomic::Ordering::Relaxed)).max(0) as u64
    }

    pub fn finish(&self, phase: Phase) {
        *self.phase.lock().expect("inode count lock") = phase;
        self.done.notify_all();
    }
}
