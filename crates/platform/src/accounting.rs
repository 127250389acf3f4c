//! IO accounting by cause.
//!
//! Every device and PMR operation names why it happens ([`IoCause`]); [`IoCounters`]
//! keeps lock-free per-cause counters of operations and bytes so that read, write and
//! space amplification (io-amplification.txt) can be reported exactly for any span of
//! work: take a snapshot before and after and subtract.
//!
//! Invariants:
//! - Counters only grow; `IoSnapshot::since` never underflows for snapshots of one
//!   counter set taken in order.
//! - Each cause has a fixed discriminant (used as an array index and in JSON output).

use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};

/// Why an IO happens. Discriminants index the counter arrays; never reorder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
#[repr(u8)]
pub enum IoCause {
    /// File data written or read on behalf of a user.
    UserData = 0,
    /// Per-file index (node) blocks.
    Node = 1,
    /// MetaDB write-ahead log (device or PMR).
    Wal = 2,
    /// MetaDB sorted tables written by memtable flush, or read by lookups.
    Table = 3,
    /// MetaDB table compaction.
    Compaction = 4,
    /// Checkpoints (per domain and global).
    Checkpoint = 5,
    /// Garbage collection moving valid blocks.
    Gc = 6,
    /// Superblock copies.
    Superblock = 7,
    /// MetaDB manifest.
    Manifest = 8,
    /// Segment summaries.
    Summary = 9,
    /// Format-time initialisation and tools (mkfs zeroing, device benchmarks).
    Tool = 10,
    /// Mount-time recovery checking data named by unflushed index records.
    Recovery = 11,
}

impl IoCause {
    pub const COUNT: usize = 12;
    pub const ALL: [IoCause; Self::COUNT] = [
        IoCause::UserData,
        IoCause::Node,
        IoCause::Wal,
        IoCause::Table,
        IoCause::Compaction,
        IoCause::Checkpoint,
        IoCause::Gc,
        IoCause::Superblock,
        IoCause::Manifest,
        IoCause::Summary,
        IoCause::Tool,
        IoCause::Recovery,
    ];

    pub fn name(self) -> &'static str {
        match self {
            IoCause::UserData => "user_data",
            IoCause::Node => "node",
            IoCause::Wal => "wal",
            IoCause::Table => "table",
            IoCause::Compaction => "compaction",
            IoCause::Checkpoint => "checkpoint",
            IoCause::Gc => "gc",
            IoCause::Superblock => "superblock",
            IoCause::Manifest => "manifest",
            IoCause::Summary => "summary",
            IoCause::Tool => "tool",
            IoCause::Recovery => "recovery",
        }
    }
}

const _: () = assert!(IoCause::Recovery as usize + 1 == IoCause::COUNT);

/// Counts for one cause.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CauseCounts {
    pub read_ops: u64,
    pub read_bytes: u64,
    pub write_ops: u64,
    pub write_bytes: u64,
    pub flush_ops: u64,
    pub discard_ops: u64,
    pub discard_bytes: u64,
}

impl CauseCounts {
    fn since(&self, earlier: &CauseCounts) -> CauseCounts {
        CauseCounts {
            read_ops: self.read_ops - earlier.read_ops,
            read_bytes: self.read_bytes - earlier.read_bytes,
            write_ops: self.write_ops - earlier.write_ops,
            write_bytes: self.write_bytes - earlier.write_bytes,
            flush_ops: self.flush_ops - earlier.flush_ops,
            discard_ops: self.discard_ops - earlier.discard_ops,
            discard_bytes: self.discard_bytes - earlier.discard_bytes,
        }
    }

    fn add(&mut self, other: &CauseCounts) {
        self.read_ops += other.read_ops;
        self.read_bytes += other.read_bytes;
        self.write_ops += other.write_ops;
        self.write_bytes += other.write_bytes;
        self.flush_ops += other.flush_ops;
        self.discard_ops += other.discard_ops;
        self.discard_bytes += other.discard_bytes;
    }
}

#[derive(Debug, Default)]
struct AtomicCounts {
    read_ops: AtomicU64,
    read_bytes: AtomicU64,
    write_ops: AtomicU64,
    write_bytes: AtomicU64,
    flush_ops: AtomicU64,
    discard_ops: AtomicU64,
    discard_bytes: AtomicU64,
}

/// Lock-free per-cause counters. One set per device and one per PMR.
#[derive(Debug, Default)]
pub struct IoCounters {
    by_cause: [AtomicCounts; IoCause::COUNT],
}

impl IoCounters {
    pub fn new() -> Self {
        Self::default()
    }

    fn slot(&self, cause: IoCause) -> &AtomicCounts {
        &self.by_cause[cause as usize]
    }

    pub fn count_read(&self, cause: IoCause, bytes: u64) {
        let c = self.slot(cause);
        c.read_ops.fetch_add(1, Ordering::Relaxed);
        c.read_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    pub fn count_write(&self, cause: IoCause, bytes: u64) {
        let c = self.slot(cause);
        c.write_ops.fetch_add(1, Ordering::Relaxed);
        c.write_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    pub fn count_flush(&self, cause: IoCause) {
        self.slot(cause).flush_ops.fetch_add(1, Ordering::Relaxed);
    }

    pub fn count_discard(&self, cause: IoCause, bytes: u64) {
        let c = self.slot(cause);
        c.discard_ops.fetch_add(1, Ordering::Relaxed);
        c.discard_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> IoSnapshot {
        let mut by_cause = [CauseCounts::default(); IoCause::COUNT];
        for (out, c) in by_cause.iter_mut().zip(self.by_cause.iter()) {
            *out = CauseCounts {
                read_ops: c.read_ops.load(Ordering::Relaxed),
                read_bytes: c.read_bytes.load(Ordering::Relaxed),
                write_ops: c.write_ops.load(Ordering::Relaxed),
                write_bytes: c.write_bytes.load(Ordering::Relaxed),
                flush_ops: c.flush_ops.load(Ordering::Relaxed),
                discard_ops: c.discard_ops.load(Ordering::Relaxed),
                discard_bytes: c.discard_bytes.load(Ordering::Relaxed),
            };
        }
        IoSnapshot { by_cause }
    }
}

/// A point-in-time copy of [`IoCounters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoSnapshot {
    by_cause: [CauseCounts; IoCause::COUNT],
}

impl IoSnapshot {
    pub fn cause(&self, cause: IoCause) -> CauseCounts {
        self.by_cause[cause as usize]
    }

    /// The work done between `earlier` and `self`.
    pub fn since(&self, earlier: &IoSnapshot) -> IoSnapshot {
        let mut by_cause = [CauseCounts::default(); IoCause::COUNT];
        for (i, out) in by_cause.iter_mut().enumerate() {
            *out = self.by_cause[i].since(&earlier.by_cause[i]);
        }
        IoSnapshot { by_cause }
    }

    pub fn total(&self) -> CauseCounts {
        let mut sum = CauseCounts::default();
        for c in &self.by_cause {
            sum.add(c);
        }
        sum
    }

    /// Causes with any activity, in discriminant order.
    pub fn nonzero(&self) -> Vec<(IoCause, CauseCounts)> {
        IoCause::ALL
            .iter()
            .map(|&c| (c, self.cause(c)))
            .filter(|(_, counts)| *counts != CauseCounts::default())
            .collect()
    }
}

impl Serialize for IoSnapshot {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let nonzero = self.nonzero();
        let mut map = serializer.serialize_map(Some(nonzero.len()))?;
        for (cause, counts) in nonzero {
            map.serialize_entry(cause.name(), &counts)?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_cause_and_subtracts() {
        let counters = IoCounters::new();
        counters.count_write(IoCause::Wal, 512);
        let before = counters.snapshot();
        counters.count_write(IoCause::Wal, 4096);
        counters.count_read(IoCause::Table, 8192);
        counters.count_flush(IoCause::Wal);
        counters.count_discard(IoCause::Gc, 2 << 20);
        let delta = counters.snapshot().since(&before);
        assert_eq!(delta.cause(IoCause::Wal).write_bytes, 4096);
        assert_eq!(delta.cause(IoCause::Wal).write_ops, 1);
        assert_eq!(delta.cause(IoCause::Wal).flush_ops, 1);
        assert_eq!(delta.cause(IoCause::Table).read_bytes, 8192);
        assert_eq!(delta.cause(IoCause::Gc).discard_bytes, 2 << 20);
        assert_eq!(delta.total().write_bytes, 4096);
        assert_eq!(delta.nonzero().len(), 3);
    }

    #[test]
    fn cause_discriminants_match_all() {
        for (i, c) in IoCause::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i);
        }
    }
}
