//! augefs under the benchmarks through its Rust API: an image formatted afresh and
//! mounted as `augefs mount` mounts it (the engine's default configuration; with a PMR
//! for MetaDB's WAL where one is given), and the calls the workloads need that the
//! path-level API spells differently. Used by `amplify` and `bench fs`.
//!
//! Invariants:
//! - A format starts the file system empty on the same device: the device's IO
//!   counters run on, so a benchmark reads them before and after what it measures.
//! - Unmounting takes the last reference: a file a run left open is a bug of the run.

use device::Device;
use engine::log::{EngineConfig, EngineEnv};
use engine::mkfs::{self, MkfsOptions};
use engine::progress::NoProgress;
use platform::Clock;
use pmr::Pmr;
use std::sync::Arc;
use vfs::FileSystem;

/// An error of augefs's API as the benchmarks report it.
pub fn err(what: &str, e: impl std::fmt::Display) -> String {
    format!("augefs: {what}: {e}")
}

/// Formats `device` (forcing over an earlier benchmark's file system), and `pmr` for
/// pmr mode; `fs_uuid` names the benchmark, the images never outlive it.
pub fn format(
    device: &Device,
    pmr: Option<&Pmr>,
    clock: &dyn Clock,
    fs_uuid: [u8; 16],
) -> Result<(), String> {
    let opts = MkfsOptions {
        domain_count: None,
        fs_uuid,
        created_unix_ns: clock.wall_ns(),
        force: true,
        label: String::new(),
    };
    mkfs::format(device, pmr, &opts, &NoProgress)
        .map(|_| ())
        .map_err(|e| err("mkfs", e))
}

/// Mounts the file system on `device` (with the `pmr` it was formatted with).
pub fn mount(
    device: &Arc<Device>,
    pmr: Option<&Arc<Pmr>>,
    clock: &Arc<dyn Clock>,
) -> Result<Arc<FileSystem>, String> {
    let env = EngineEnv {
        device: device.clone(),
        pmr: pmr.cloned(),
        clock: clock.clone(),
    };
    let fs = FileSystem::mount(env, EngineConfig::default()).map_err(|e| err("mount", e))?;
    Ok(Arc::new(fs))
}

/// Makes everything durable and unmounts.
pub fn unmount(fs: Arc<FileSystem>) -> Result<(), String> {
    let fs = Arc::into_inner(fs).expect("no file of the run is still open");
    fs.unmount().map_err(|e| err("unmount", e))
}

/// fsync of the directory at the absolute `path` (its entries made durable).
pub fn fsync_dir(fs: &FileSystem, path: &str) -> Result<(), String> {
    let ino = fs.resolve(path, true).map_err(|e| err(path, e))?;
    fs.fsync_ino(ino, false).map_err(|e| err("fsync", e))
}
