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
    /// Anything else, said in words (the path included).
    Failed(String),
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
        Err(e) => Err(MountError::Failed(match e {
            vfs::image::ImageError::Mount { .. } => e.to_string(),
            _ => format!("{}: {e}", image.display()),
        })),
    }
}
