//! Finding an image by its label or uuid (`augefs mount LABEL=NAME DIR`, `UUID=U`, and
//! fstab lines of that form), as mount(8) finds a kernel file system.
//!
//! The candidates are the block devices in /proc/partitions (loop devices included)
//! and the regular files in the directories of env AUGEFS_IMAGE_PATH (colon-separated:
//! an image file has no registry to find it by). Each is read for its superblock pair
//! (the first 8 KiB) without a lock; one that cannot be read is skipped.
//!
//! Invariants:
//! - Two candidates with the label (or uuid) are refused, both named: a mount never
//!   picks one at random.

use std::io::Read;
use std::path::{Path, PathBuf};

/// `spec` itself, or the one image whose label or uuid it names (`LABEL=`, `UUID=`).
pub fn resolve(spec: &Path) -> Result<PathBuf, String> {
    let text = spec.to_string_lossy();
    let (want_label, want_uuid) = if let Some(l) = text.strip_prefix("LABEL=") {
        (Some(l.to_string()), None)
    } else if let Some(u) = text.strip_prefix("UUID=") {
        (None, Some(engine::inspect::parse_uuid(u)?))
    } else {
        return Ok(spec.to_path_buf());
    };
    let found: Vec<PathBuf> = candidates()
        .into_iter()
        .filter(|p| match identity(p) {
            Some((label, uuid)) => {
                want_label.as_ref().is_some_and(|w| *w == label) || want_uuid == Some(uuid)
            }
            None => false,
        })
        .collect();
    match found.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(format!(
            "{text}: no augefs image has it among the block devices and the files in \
             AUGEFS_IMAGE_PATH (set it to the directories that hold your images)"
        )),
        many => Err(format!(
            "{text}: {} images have it ({}); name the image instead",
            many.len(),
            many.iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

fn candidates() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_to_string("/proc/partitions")
        .unwrap_or_default()
        .lines()
        .skip(2)
        .filter_map(|l| l.split_whitespace().nth(3))
        .map(|name| Path::new("/dev").join(name))
        .collect();
    if let Some(dirs) = std::env::var_os("AUGEFS_IMAGE_PATH") {
        for dir in std::env::split_paths(&dirs) {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            let mut files: Vec<PathBuf> = entries
                .filter_map(|e| e.ok())
                .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
                .map(|e| e.path())
                .collect();
            files.sort();
            out.extend(files);
        }
    }
    out
}

/// The label and uuid of the augefs image at `path`, if it is one.
fn identity(path: &Path) -> Option<(String, [u8; 16])> {
    let block = format::constants::BLOCK_SIZE_BYTES as usize;
    let mut head = vec![0u8; 2 * block];
    std::fs::File::open(path).ok()?.read_exact(&mut head).ok()?;
    let choice = format::superblock::choose(&head[..block], &head[block..]).ok()?;
    Some((choice.superblock.label, choice.superblock.fs_uuid))
}
