//! The augefs side of `augefs bench engine`: the engine (docs/DESIGN.md §9) on a freshly
//! formatted image, and its device's IO counters.
//!
//! Invariants:
//! - Every measurement formats the image again (`mkfs --force` semantics), so runs start
//!   from an empty file system; the image file itself was written in full once before
//!   (`crate::image`).
//! - At most one engine is open on the image at a time (the device layer locks it).

use crate::image;
use device::{BackendChoice, Device};
use engine::log::{Engine, EngineConfig, EngineEnv, FsyncPath};
use engine::mkfs::{self, MkfsOptions};
use engine::progress::NoProgress;
use format::Geometry;
use platform::{Clock, IoSnapshot};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The benchmark's images carry a fixed uuid: they never outlive the run.
const BENCH_FS_UUID: [u8; 16] = *b"augefs-bench-eng";

/// How long a crashed process's image may stay locked after the process was reaped:
/// its io_uring requests still in flight hold the open file (and so its `flock`) until
/// the kernel has cancelled or finished them, which it does asynchronously.
const RELEASE_WAIT: Duration = Duration::from_secs(10);

/// The image and how to open it.
#[derive(Debug, Clone)]
pub struct Setup {
    pub image: PathBuf,
    pub image_bytes: u64,
    pub backend: BackendChoice,
    pub clock: Arc<dyn Clock>,
}

/// The engine mounted on the image, with the device it uses.
#[derive(Debug)]
pub struct Mounted {
    pub engine: Engine,
    pub device: Arc<Device>,
}

impl Mounted {
    pub fn io(&self) -> IoSnapshot {
        self.device.counters().snapshot()
    }

    pub fn geometry(&self) -> &Geometry {
        self.engine.geometry()
    }

    /// Syncs and closes the engine; releases the image.
    pub fn close(self) -> Result<(), String> {
        self.engine
            .close()
            .map_err(|e| format!("closing the engine: {e}"))
    }
}

fn config(path: FsyncPath) -> EngineConfig {
    EngineConfig {
        fsync_path: path,
        ..EngineConfig::default()
    }
}

impl Setup {
    /// The domain count mkfs picks for the image's size.
    pub fn default_domains(&self) -> Result<u32, String> {
        Geometry::default_domain_count(self.image_bytes).map_err(|e| e.to_string())
    }

    /// Creates the image file and writes it once in full.
    pub fn prepare_image(&self) -> Result<(), String> {
        image::prepare(&self.image, self.image_bytes, self.backend)
    }

    fn format(&self, device: &Device, domains: Option<u32>) -> Result<(), String> {
        let opts = MkfsOptions {
            domain_count: domains,
            fs_uuid: BENCH_FS_UUID,
            created_unix_ns: self.clock.wall_ns(),
            force: true,
            label: String::new(),
        };
        mkfs::format(device, None, &opts, &NoProgress)
            .map(|_| ())
            .map_err(|e| format!("formatting {}: {e}", self.image.display()))
    }

    fn env(&self, device: &Arc<Device>) -> EngineEnv {
        EngineEnv {
            device: device.clone(),
            pmr: None,
            clock: self.clock.clone(),
        }
    }

    /// Formats the image with `domains` (`None`: the default for its size) and mounts
    /// the empty file system with `path`.
    pub fn create(&self, domains: Option<u32>, path: FsyncPath) -> Result<Mounted, String> {
        let device = image::open_device(&self.image, self.backend)?;
        self.format(&device, domains)?;
        let engine = Engine::open(self.env(&device), config(path))
            .map_err(|e| format!("mounting {}: {e}", self.image.display()))?;
        Ok(Mounted { engine, device })
    }

    /// Formats the image (default domains) and releases it, for another process.
    pub fn format_only(&self) -> Result<(), String> {
        let device = image::open_device(&self.image, self.backend)?;
        self.format(&device, None)
    }

    /// Mounts the image as after a crash of another process; returns the engine, how
    /// long `Engine::open` (recovery) took in nanoseconds, and the device's counters
    /// just before it.
    pub fn recover(&self) -> Result<(Mounted, u64, IoSnapshot), String> {
        let device = image::open_device_released(&self.image, self.backend, RELEASE_WAIT)?;
        let before = device.counters().snapshot();
        let started = Instant::now();
        let engine = Engine::open(self.env(&device), config(FsyncPath::Async))
            .map_err(|e| format!("recovering {}: {e}", self.image.display()))?;
        let open_ns = started.elapsed().as_nanos() as u64;
        Ok((Mounted { engine, device }, open_ns, before))
    }
}
