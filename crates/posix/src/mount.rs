//! Mounting an image for a process's own use (the interposer's owner, the C ABI): the
//! device opened with its exclusive lock, an optional PMR, the vfs mounted.

use std::path::Path;
use std::sync::Arc;
use vfs::FileSystem;

/// Why an image could not be mounted.
#[derive(Debug)]
#[non_exhaustive]
pub enum MountError {
    /// Another process holds the image.
    InUse,
    /// Anything else, said in words (the path included).
    Failed(String),
}

/// Mounts `image` (with the PMR file `pmr`, if it was formatted with one).
pub fn mount_image(image: &Path, pmr: Option<&Path>) -> Result<Arc<FileSystem>, MountError> {
    let dev = match device::open(image, &device::OpenOptions::default()) {
        Ok(d) => d,
        Err(device::DeviceError::InUse { .. }) => return Err(MountError::InUse),
        Err(e) => return Err(MountError::Failed(format!("{}: {e}", image.display()))),
    };
    let pmr = match pmr {
        Some(p) => Some(Arc::new(
            pmr::Pmr::open(p, pmr::PmrOptions::default())
                .map_err(|e| MountError::Failed(format!("{}: {e}", p.display())))?,
        )),
        None => None,
    };
    let env = engine::log::EngineEnv {
        device: Arc::new(dev),
        pmr,
        clock: Arc::new(platform::SystemClock::new()),
    };
    let fs = FileSystem::mount(env, engine::log::EngineConfig::default())
        .map_err(|e| MountError::Failed(format!("{}: cannot mount: {e}", image.display())))?;
    // What the program writes is durable within the interval even if it never syncs
    // (docs/SEMANTICS.md §2), as on a FUSE mount.
    fs.set_commit_interval(Some(vfs::commit::COMMIT_INTERVAL_DEFAULT));
    Ok(Arc::new(fs))
}
