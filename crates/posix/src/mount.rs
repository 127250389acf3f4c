//! Mounting an image for a process's own use (the interposer's owner, the C ABI),
//! through the one front door (`vfs::image::open_image`).

use std::path::Path;
use std::sync::Arc;
use vfs::image::{open_image, ImageOptions};
use vfs::FileSystem;

/// Why an image could not be mounted.
#[derive(Debug)]
#[non_exhaustive]
pub enum MountError {
    /// Another process holds the image.
    InUse,
    /// Anything else, said in words (the path included), with the errno the layer that
    /// refused it gives (EUCLEAN for a damaged or truncated image, for instance).
    Failed { message: String, errno: i32 },
}

impl MountError {
    /// The errno a front end reports.
    pub fn errno(&self) -> i32 {
        match self {
            MountError::InUse => libc::EBUSY,
            MountError::Failed { errno, .. } => *errno,
        }
    }
}

impl std::fmt::Display for MountError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MountError::InUse => write!(f, "the image is in use by another process"),
            MountError::Failed { message, .. } => write!(f, "{message}"),
        }
    }
}

/// Mounts `image` (with the PMR file `pmr`, if it was formatted with one), waiting up
/// to `wait` for a holder that no longer serves it (device::holder).
pub fn mount_image(
    image: &Path,
    pmr: Option<&Path>,
    wait: std::time::Duration,
) -> Result<Arc<FileSystem>, MountError> {
    let opts = ImageOptions {
        pmr: pmr.map(Path::to_path_buf),
        wait_for_holder: wait,
        ..ImageOptions::default()
    };
    match open_image(image, &opts, &mut |_| {}) {
        Ok(fs) => {
            // What the program writes is durable within the interval even if it never
            // syncs (docs/SEMANTICS.md §2), as on a FUSE mount.
            fs.set_commit_interval(Some(vfs::commit::COMMIT_INTERVAL_DEFAULT));
            Ok(Arc::new(fs))
        }
        Err(e) if e.in_use() => Err(MountError::InUse),
        Err(e) => Err(MountError::Failed {
            errno: e.errno(),
            message: match e {
                vfs::image::ImageError::Mount { .. } => e.to_string(),
                _ => format!("{}: {e}", image.display()),
            },
        }),
    }
}
