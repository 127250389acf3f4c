//! `augefs fsck`: an offline check of a whole image, and the repair of what can be
//! repaired safely (docs/DESIGN.md §4e).
//!
//! - [`open`]: fsck's own recovery of MetaDB (replay through the engine's filter,
//!   lenient about the engine's records, which are what it checks).
//! - [`scan`]: every MetaDB record, decoded leniently.
//! - [`blocks`]: the engine's side: segment information, ownership, block index, reverse
//!   map, data checksums.
//! - [`namespace`]: the VFS's side: tree, link counts, sizes, symlinks, xattrs, orphans.
//! - [`problem`]: what is reported.
//!
//! Invariants:
//! - With [`Mode::Check`] fsck writes nothing to MetaDB beyond what recovery itself
//!   writes (and the CLI runs it on an overlay, so not even that reaches the image).
//! - Repairs are collected while checking and written at the end, in MetaDB batches,
//!   then flushed to tables; a problem is `fixed` only if its repair is among them.
//! - Corrupted input never panics: every decode is checked, every index is bounded.

pub mod blocks;
pub mod error;
pub mod namespace;
pub mod open;
pub mod problem;
pub mod scan;

pub use error::FsckError;
pub use problem::{Class, Kind, Objects, Problem};

use device::{Device, LockMode, OpenOptions};
use engine::progress::Progress;
use metadb::{MetaDb, WriteBatch};
use pmr::Pmr;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

/// What fsck may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Report only (`-n`, and the default).
    Check,
    /// Apply the repairs that lose nothing a reader could see (`-p`).
    Preen,
    /// Apply every repair fsck knows (`-y`).
    Repair,
}

#[derive(Debug, Clone)]
pub struct Options {
    pub mode: Mode,
    /// Read every mapped block and check its CRC.
    pub verify_data: bool,
    /// Wall-clock time for the inodes a repair creates (/lost+found), ns since the epoch.
    pub now_ns: i64,
}

/// Counts of what was checked.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Stats {
    pub records: u64,
    pub inodes: u64,
    pub directories: u64,
    pub files: u64,
    pub symlinks: u64,
    pub mappings: u64,
    pub domain_segments: u64,
    pub table_segments: u64,
    pub blocks_verified: u64,
    pub replay_dropped: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub mode: Mode,
    pub verify_data: bool,
    pub stats: Stats,
    pub problems: Vec<Problem>,
}

impl Report {
    /// e2fsck's exit code: 0 clean, 1 every problem fixed, 4 problems left.
    pub fn exit_code(&self) -> i32 {
        if self.problems.is_empty() {
            0
        } else if self.problems.iter().all(|p| p.fixed) {
            1
        } else {
            4
        }
    }
}

/// Opens the image at `path`: read-only behind a copy-on-write overlay (shared lock)
/// when `writable` is false, else read-write with an exclusive lock.
pub fn open_image(path: &Path, writable: bool) -> Result<Arc<Device>, FsckError> {
    open_image_waiting(path, writable, std::time::Duration::ZERO, &mut |_| {})
}

/// [`open_image`], waiting up to `wait` for a holder that no longer serves the image
/// (device::holder), `on_wait` told once.
pub fn open_image_waiting(
    path: &Path,
    writable: bool,
    wait: std::time::Duration,
    on_wait: &mut dyn FnMut(&device::holder::Holder),
) -> Result<Arc<Device>, FsckError> {
    let opts = OpenOptions {
        read_only: !writable,
        lock: if writable {
            LockMode::Exclusive
        } else {
            LockMode::Shared
        },
        ..OpenOptions::default()
    };
    let dev = device::holder::open_waiting(path, &opts, wait, on_wait)?;
    Ok(Arc::new(if writable {
        dev
    } else {
        device::cow::overlay(dev)
    }))
}

/// The state of one run: the recovered MetaDB, the problems so far and the repairs to
/// write (key -> new value, `None` deletes; the last decision for a key wins).
pub(crate) struct Fsck<'a> {
    pub(crate) db: &'a MetaDb,
    pub(crate) device: &'a Device,
    pub(crate) geometry: format::Geometry,
    pub(crate) options: &'a Options,
    pub(crate) progress: &'a dyn Progress,
    pub(crate) problems: Vec<Problem>,
    pub(crate) writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    pub(crate) stats: Stats,
}

impl Fsck<'_> {
    /// Records a problem; returns whether its repair is to be applied (the mode allows
    /// the class and there is a repair).
    pub(crate) fn report(
        &mut self,
        kind: Kind,
        class: Class,
        objects: Objects,
        message: String,
        repair: Option<&str>,
    ) -> bool {
        let fix = repair.is_some()
            && match (self.options.mode, class) {
                (_, Class::None) | (Mode::Check, _) => false,
                (Mode::Preen, Class::Safe) | (Mode::Repair, _) => true,
                (Mode::Preen, Class::Destructive) => false,
            };
        self.problems.push(Problem {
            kind,
            objects,
            message,
            repair: repair.map(str::to_string),
            fixed: fix,
        });
        fix
    }

    pub(crate) fn put(&mut self, key: &[u8], value: &[u8]) {
        self.writes.insert(key.to_vec(), Some(value.to_vec()));
    }

    pub(crate) fn delete(&mut self, key: &[u8]) {
        self.writes.insert(key.to_vec(), None);
    }

    /// Writes the repairs (bounded batches, each durable), then flushes them to tables.
    fn write_repairs(&mut self) -> Result<(), FsckError> {
        const OPS_PER_BATCH_MAX: usize = 1024;
        let writes = std::mem::take(&mut self.writes);
        let mut batch = WriteBatch::new();
        for (key, value) in writes {
            match value {
                Some(v) => batch.put(key, v),
                None => batch.delete(key),
            };
            if batch.len() >= OPS_PER_BATCH_MAX {
                self.db.write(&batch, metadb::Durability::Sync)?;
                batch = WriteBatch::new();
            }
        }
        if !batch.is_empty() {
            self.db.write(&batch, metadb::Durability::Sync)?;
        }
        self.db.flush()?;
        Ok(())
    }
}

/// Checks (and in the repairing modes repairs) the image on `device`.
pub fn check(
    device: Arc<Device>,
    pmr: Option<Arc<Pmr>>,
    options: &Options,
    progress: &dyn Progress,
) -> Result<Report, FsckError> {
    progress.step("recovering MetaDB", 0);
    let recovered = open::recover(device.clone(), pmr)?;
    let mut fsck = Fsck {
        db: &recovered.db,
        device: &device,
        geometry: recovered.geometry,
        options,
        progress,
        problems: Vec::new(),
        writes: BTreeMap::new(),
        stats: Stats {
            replay_dropped: recovered.replay_dropped,
            ..Stats::default()
        },
    };
    let mut records = fsck.scan()?;
    let mut blocks = fsck.check_blocks(&mut records, &recovered)?;
    if options.verify_data {
        fsck.verify_data(&records, &mut blocks)?;
    }
    fsck.check_namespace(&mut records, &mut blocks)?;
    fsck.reconcile_seginfo(&records, &blocks);
    fsck.count(&records, &blocks, &recovered);
    if options.mode != Mode::Check && !fsck.writes.is_empty() {
        progress.step("writing repairs", 0);
        fsck.write_repairs()?;
    }
    progress.finish();
    let report = Report {
        mode: options.mode,
        verify_data: options.verify_data,
        stats: fsck.stats,
        problems: fsck.problems,
    };
    recovered.db.close()?;
    Ok(report)
}
