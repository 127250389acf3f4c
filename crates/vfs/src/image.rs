//! Opening an image: the one way a front end turns an image path (and its PMR file, if
//! it was formatted with one) into a mounted [`FileSystem`]. It opens the device with
//! direct IO and its lock, the PMR, and mounts (recovering).
//!
//! - Read-write: the device is locked exclusively.
//! - Read-only ([`ImageOptions::read_only`], `mount -o ro`): the device is opened
//!   read-only with a shared lock (beside `inspect` and `fsck -n`, never beside a
//!   read-write mount) behind a copy-on-write overlay (`device::cow`), and the PMR is
//!   read into memory, so recovery runs in full and shows the state a read-write mount
//!   would, while nothing reaches the image or the PMR; then every write fails with
//!   EROFS.
//! - A holder that is finishing (a daemon making its unmount durable, see
//!   `device::holder`) is waited for up to [`ImageOptions::wait_for_holder`]; a holder
//!   that serves the image is an error at once that says where it is mounted. The
//!   opened instance holds the serving mark itself until `FileSystem::stop_serving`.
//!
//! Invariants:
//! - A read-only open never writes the image or the PMR file.

use crate::error::VfsError;
use crate::fs::FileSystem;
use crate::pagecache::CacheConfig;
use device::holder::Holder;
use device::{BackendChoice, Device, DeviceError, LockMode};
use engine::log::{EngineConfig, EngineEnv};
use platform::{Clock, SystemClock};
use pmr::{Pmr, PmrError, PmrOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;

/// What a read-only mount says when asked to write.
pub const READ_ONLY_REASON: &str = "mounted read-only";

/// How to open an image.
#[derive(Debug, Clone)]
pub struct ImageOptions {
    /// The PMR file the image was formatted with.
    pub pmr: Option<PathBuf>,
    pub read_only: bool,
    pub backend: BackendChoice,
    /// How long to wait for a holder that no longer serves the image.
    pub wait_for_holder: Duration,
    pub engine: EngineConfig,
    pub cache: CacheConfig,
    pub clock: Arc<dyn Clock>,
}

impl Default for ImageOptions {
    fn default() -> Self {
        ImageOptions {
            pmr: None,
            read_only: false,
            backend: BackendChoice::Auto,
            wait_for_holder: Duration::ZERO,
            engine: EngineConfig::default(),
            cache: CacheConfig::default(),
            clock: Arc::new(SystemClock::new()),
        }
    }
}

/// Why an image could not be opened.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ImageError {
    /// The device could not be opened; `InUse` says who holds it where known.
    #[error(transparent)]
    Device(#[from] DeviceError),
    #[error(transparent)]
    Pmr(#[from] PmrError),
    #[error("{}: cannot mount: {source}", image.display())]
    Mount {
        image: PathBuf,
        source: Box<VfsError>,
    },
}

impl ImageError {
    /// Another process holds the image.
    pub fn in_use(&self) -> bool {
        matches!(self, ImageError::Device(DeviceError::InUse { .. }))
    }

    /// The errno a front end reports.
    pub fn errno(&self) -> i32 {
        match self {
            ImageError::Device(e) => e.errno(),
            ImageError::Pmr(e) => e.errno(),
            ImageError::Mount { source, .. } => source.errno(),
        }
    }
}

/// Mounts the image on `dev`, already open, read-only behind a copy-on-write overlay
/// (recovery's writes go to memory): for a reader such as `augefs inspect` that may
/// look at an image another instance serves, as dumpe2fs reads a mounted ext4. It
/// sees what that instance has made durable.
pub fn mount_snapshot(dev: Device, pmr: Option<&Path>) -> Result<FileSystem, ImageError> {
    let pmr = match pmr {
        None => None,
        Some(p) => Some(Arc::new(Pmr::open_copy(p, PmrOptions::default())?)),
    };
    let env = EngineEnv {
        device: Arc::new(device::cow::overlay(dev)),
        pmr,
        clock: ImageOptions::default().clock,
    };
    let mut engine = ImageOptions::default().engine;
    engine.metadb.background = false;
    let cache = CacheConfig {
        flush_interval: None,
        ..CacheConfig::default()
    };
    let fs = FileSystem::mount_with(env, engine, cache).map_err(|source| ImageError::Mount {
        image: PathBuf::from("(snapshot)"),
        source: Box::new(source),
    })?;
    fs.set_read_only(READ_ONLY_REASON);
    Ok(fs)
}

/// Opens and mounts `image`; `on_wait` is called once if the open waits for a finishing
/// holder (to say so in one line).
pub fn open_image(
    image: &Path,
    opts: &ImageOptions,
    on_wait: &mut dyn FnMut(&Holder),
) -> Result<FileSystem, ImageError> {
    let device_opts = device::OpenOptions {
        backend: opts.backend,
        read_only: opts.read_only,
        lock: if opts.read_only {
            LockMode::Shared
        } else {
            LockMode::Exclusive
        },
        ..device::OpenOptions::default()
    };
    let dev = device::holder::open_waiting(image, &device_opts, opts.wait_for_holder, on_wait)?;
    let dev = if opts.read_only {
        device::cow::overlay(dev)
    } else {
        dev
    };
    let pmr = match &opts.pmr {
        None => None,
        Some(p) if opts.read_only => Some(Arc::new(Pmr::open_copy(p, PmrOptions::default())?)),
        Some(p) => Some(Arc::new(Pmr::open(p, PmrOptions::default())?)),
    };
    let env = EngineEnv {
        device: Arc::new(dev),
        pmr,
        clock: opts.clock.clone(),
    };
    let mut engine = opts.engine.clone();
    let mut cache = opts.cache;
    if opts.read_only {
        // Nothing will be written: no background jobs to run on the overlay.
        engine.metadb.background = false;
        cache.flush_interval = None;
    }
    let mount_error = |source| ImageError::Mount {
        image: image.to_path_buf(),
        source: Box::new(source),
    };
    let fs = FileSystem::mount_with(env, engine, cache).map_err(mount_error)?;
    if opts.read_only {
        fs.set_read_only(READ_ONLY_REASON);
    }
    // Best effort: without the mark, others are told "in use" but not where.
    if let Ok(mark) = device::holder::Mark::serving(image) {
        fs.hold_serving_mark(mark);
    }
    Ok(fs)
}
