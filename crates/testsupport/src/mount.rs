//! The file system mounted on a test image: on a device, or on an image file through
//! the front door every front end uses (`vfs::image::open_image`).

use device::Device;
use engine::log::{EngineConfig, EngineEnv};
use platform::{Clock, ManualClock};
use std::path::Path;
use std::sync::Arc;
use vfs::image::{open_image, ImageOptions};
use vfs::{CacheConfig, FileSystem, VfsError};

/// The manual clock tests mount with: it starts at 1 ms and moves only when told.
pub fn manual_clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(1_000_000))
}

/// The engine without background jobs (a deterministic device write order) and with
/// small memtables (MetaDB flushes often).
pub fn foreground_config() -> EngineConfig {
    let mut config = EngineConfig::default();
    config.metadb.background = false;
    config.metadb.memtable_bytes = 256 << 10;
    config
}

/// Mounts `dev` with `config`, page-cache settings `cache` and `clock`.
pub fn try_mount(
    dev: &Arc<Device>,
    config: EngineConfig,
    cache: CacheConfig,
    clock: Arc<dyn Clock>,
) -> Result<FileSystem, VfsError> {
    let env = EngineEnv {
        device: dev.clone(),
        pmr: None,
        clock,
    };
    FileSystem::mount_with(env, config, cache)
}

/// [`try_mount`], which must succeed.
pub fn mount_cached(
    dev: &Arc<Device>,
    config: EngineConfig,
    cache: CacheConfig,
    clock: Arc<dyn Clock>,
) -> Arc<FileSystem> {
    Arc::new(try_mount(dev, config, cache, clock).expect("mount"))
}

/// `dev` mounted with `config` and the manual clock.
pub fn mount_with(dev: &Arc<Device>, config: EngineConfig) -> Arc<FileSystem> {
    mount_cached(dev, config, CacheConfig::default(), manual_clock())
}

/// `dev` mounted with the default configuration and the manual clock.
pub fn mount(dev: &Arc<Device>) -> Arc<FileSystem> {
    mount_with(dev, EngineConfig::default())
}

/// A fresh memory image of `bytes` with `domains` domains, mounted.
pub fn mounted(bytes: u64, domains: u32) -> Arc<FileSystem> {
    mount(&crate::image::memory_image(bytes, domains))
}

/// The image file at `path` opened (locked) and mounted with `config` and the manual
/// clock, as a front end opens it.
pub fn open_file(path: &Path, config: EngineConfig) -> Arc<FileSystem> {
    let opts = ImageOptions {
        engine: config,
        clock: manual_clock(),
        ..ImageOptions::default()
    };
    let fs = open_image(path, &opts, &mut |_| {})
        .unwrap_or_else(|e| panic!("{}: open: {e}", path.display()));
    Arc::new(fs)
}

/// Unmounts `fs`, of which the caller holds the last reference.
pub fn unmount(fs: Arc<FileSystem>) {
    Arc::try_unwrap(fs)
        .unwrap_or_else(|_| panic!("unmount: the file system is still shared"))
        .unmount()
        .expect("unmount");
}

/// The errno of a failed call, 0 for success.
pub fn errno<T>(r: Result<T, VfsError>) -> i32 {
    r.map_or_else(|e| e.errno(), |_| 0)
}
