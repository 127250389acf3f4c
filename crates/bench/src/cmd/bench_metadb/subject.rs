//! The augefs side of `augefs bench metadb`: MetaDB on a freshly formatted image, with its
//! WAL on an emulated PMR (pmr mode) or in the image's WAL region (ssd mode), and the IO
//! it causes (docs/DESIGN.md §4.1 "Accounting", §5, §6).
//!
//! Invariants:
//! - Every run formats the image again (`mkfs --force` semantics), so runs start from an
//!   empty MetaDB; the image file itself is written in full once beforehand, so no run
//!   writes into unwritten extents (whose conversion would add file-system journal
//!   commits to device flushes).
//! - Reopening goes the way a mount does: superblock, then the PMR checked against the
//!   superblock's file-system uuid, then `MetaDb::open`, which alone is timed.
//! - At most one `Augefs` is alive at a time: the image and PMR are locked while open.

use super::workload::Store;
use crate::image;
use crate::pmr::EmulatedPmr;
use device::{BackendChoice, Device, IoCause};
use engine::mkfs::{self, MkfsOptions};
use engine::progress::NoProgress;
use format::Geometry;
use metadb::{Durability, MetaDb, MetaDbConfig, MetaDbEnv, SegmentPool};
use platform::{Clock, IoSnapshot};
use pmr::Pmr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

/// The benchmark's images carry a fixed uuid: they never outlive the run.
const BENCH_FS_UUID: [u8; 16] = *b"augefs-bench-mdb";

/// Where the WAL lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WalMode {
    /// On the PMR file (emulated: see [`Setup::pmr`]).
    Pmr,
    /// In the image's WAL region.
    Ssd,
}

/// Paths and sizes shared by every augefs run.
#[derive(Debug, Clone)]
pub struct Setup {
    pub image: PathBuf,
    pub image_bytes: u64,
    /// The region of pmr mode (`crate::pmr`: the paper's emulation).
    pub pmr: EmulatedPmr,
    pub backend: BackendChoice,
    pub clock: Arc<dyn Clock>,
}

/// MetaDB open on the image, with the device and PMR it uses.
#[derive(Debug)]
pub struct Augefs {
    pub db: MetaDb,
    pub device: Arc<Device>,
    pub pmr: Option<Arc<Pmr>>,
    pub geometry: Geometry,
}

/// Bytes written by the device and the PMR between two [`IoTotals`].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct WrittenBytes {
    pub total: u64,
    /// WAL on the device and on the PMR (including PMR-to-device migration).
    pub wal: u64,
    /// Tables: flush, compaction and the manifest.
    pub tables: u64,
    /// Persisted to the PMR (all causes; part of `total`).
    pub pmr: u64,
    /// Device flushes (`fdatasync`-equivalents) and PMR persists.
    pub flushes: u64,
}

/// Device and PMR counters at one moment.
#[derive(Debug, Clone)]
pub struct IoTotals {
    device: IoSnapshot,
    pmr: Option<IoSnapshot>,
}

/// Either store's IO counters at one moment, for the JSON details.
#[derive(Debug, Clone)]
pub enum IoMark {
    /// MetaDB: the device's and PMR's counters.
    Counted(Box<IoTotals>),
    /// fjall: the process's `/proc/self/io` write_bytes, if readable.
    Process(Option<u64>),
}

impl IoMark {
    /// What happened between `earlier` and this mark, by cause where known.
    pub fn since(&self, earlier: &IoMark) -> serde_json::Value {
        match (self, earlier) {
            (IoMark::Counted(now), IoMark::Counted(then)) => serde_json::json!({
                "device": now.device.since(&then.device),
                "pmr": now.pmr.as_ref().zip(then.pmr.as_ref()).map(|(n, t)| n.since(t)),
            }),
            (IoMark::Process(Some(now)), IoMark::Process(Some(then))) => {
                serde_json::json!({ "process_write_bytes": now.saturating_sub(*then) })
            }
            _ => serde_json::Value::Null,
        }
    }
}

impl IoTotals {
    pub fn written_since(&self, earlier: &IoTotals) -> WrittenBytes {
        let device = self.device.since(&earlier.device);
        let pmr = match (&self.pmr, &earlier.pmr) {
            (Some(now), Some(then)) => Some(now.since(then)),
            _ => None,
        };
        let mut w = WrittenBytes {
            total: device.total().write_bytes,
            wal: device.cause(IoCause::Wal).write_bytes,
            tables: [IoCause::Table, IoCause::Compaction, IoCause::Manifest]
                .iter()
                .map(|&c| device.cause(c).write_bytes)
                .sum(),
            flushes: device.total().flush_ops,
            pmr: 0,
        };
        if let Some(p) = pmr {
            w.pmr = p.total().write_bytes;
            w.total += p.total().write_bytes;
            w.wal += p.cause(IoCause::Wal).write_bytes;
            w.flushes += p.total().flush_ops;
        }
        w
    }
}

impl Augefs {
    pub fn io(&self) -> IoTotals {
        IoTotals {
            device: self.device.counters().snapshot(),
            pmr: self.pmr.as_ref().map(|p| p.counters().snapshot()),
        }
    }

    /// Stops background work and makes every write durable; releases the image.
    pub fn close(self) -> Result<(), String> {
        self.db.close().map_err(|e| format!("closing MetaDB: {e}"))
    }

    /// Simulates a crash: drops MetaDB without `close` (its background thread stops,
    /// nothing more is persisted) and releases the image and PMR as they are.
    pub fn crash(self) {
        drop(self.db);
    }
}

impl Store for Augefs {
    fn put(&self, key: &[u8], value: &[u8], sync: bool) -> Result<(), String> {
        let durability = if sync {
            Durability::Sync
        } else {
            Durability::Buffered
        };
        self.db
            .put(key, value, durability)
            .map(|_| ())
            .map_err(|e| format!("MetaDB put: {e}"))
    }

    fn settle(&self) -> Result<(), String> {
        self.db.flush().map_err(|e| format!("MetaDB flush: {e}"))?;
        self.db
            .compact()
            .map_err(|e| format!("MetaDB compact: {e}"))
    }
}

impl Setup {
    /// Creates the image file and writes it once in full (zeros), then flushes.
    pub fn prepare_image(&self) -> Result<(), String> {
        image::prepare(&self.image, self.image_bytes, self.backend)
    }

    fn open_device(&self) -> Result<Arc<Device>, String> {
        image::open_device(&self.image, self.backend)
    }

    /// Formats the image (and a new PMR in pmr mode) and opens an empty MetaDB on it.
    pub fn create(&self, mode: WalMode, config: MetaDbConfig) -> Result<Augefs, String> {
        let device = self.open_device()?;
        let pmr = match mode {
            WalMode::Pmr => Some(self.pmr.create()?),
            WalMode::Ssd => None,
        };
        let opts = MkfsOptions {
            domain_count: None,
            fs_uuid: BENCH_FS_UUID,
            created_unix_ns: self.clock.wall_ns(),
            force: true,
            label: String::new(),
        };
        let superblock = mkfs::format(&device, pmr.as_deref(), &opts, &NoProgress)
            .map_err(|e| format!("formatting {}: {e}", self.image.display()))?;
        let geometry = superblock.geometry;
        let db = MetaDb::open(env(&device, &pmr, geometry), config)
            .map_err(|e| format!("opening MetaDB: {e}"))?;
        Ok(Augefs {
            db,
            device,
            pmr,
            geometry,
        })
    }

    /// Opens the image (and PMR) as a mount would after a crash; returns MetaDB, how long
    /// `MetaDb::open` (recovery) took in nanoseconds, and the counters just before it.
    pub fn reopen(
        &self,
        mode: WalMode,
        config: MetaDbConfig,
    ) -> Result<(Augefs, u64, IoTotals), String> {
        let device = self.open_device()?;
        let choice = engine::image::read_superblock(&device).map_err(|e| e.to_string())?;
        let superblock = choice.superblock;
        let pmr = match mode {
            WalMode::Pmr => Some(self.pmr.open(superblock.fs_uuid)?),
            WalMode::Ssd => None,
        };
        let geometry = superblock.geometry;
        let env = env(&device, &pmr, geometry);
        let before = IoTotals {
            device: device.counters().snapshot(),
            pmr: pmr.as_ref().map(|p| p.counters().snapshot()),
        };
        let started = Instant::now();
        let db = MetaDb::open(env, config).map_err(|e| format!("recovering MetaDB: {e}"))?;
        let open_ns = started.elapsed().as_nanos() as u64;
        let augefs = Augefs {
            db,
            device,
            pmr,
            geometry,
        };
        Ok((augefs, open_ns, before))
    }
}

fn env(device: &Arc<Device>, pmr: &Option<Arc<Pmr>>, geometry: Geometry) -> MetaDbEnv {
    MetaDbEnv {
        device: device.clone(),
        pmr: pmr.clone(),
        geometry,
        table_store: Arc::new(SegmentPool::whole(geometry)),
        hooks: None,
    }
}
