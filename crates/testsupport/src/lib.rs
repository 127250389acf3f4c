//! What the workspace's integration tests share, written once: formatted images (memory
//! devices and image files), the file system mounted on them, fsck of an image,
//! deterministic bytes, running the built binaries, and FUSE mounts behind a guard that
//! unmounts even when a test fails.
//!
//! A dev-dependency of the crates whose tests use it, never a dependency of a product
//! crate. A crate's own `tests/common` keeps only what is that crate's alone.

pub mod bytes;
pub mod check;
pub mod fuse;
pub mod image;
pub mod mount;
pub mod process;

/// A fresh directory on the target directory's file system, removed when dropped: files
/// opened with `O_DIRECT` go there, since `/tmp` may be tmpfs. A macro, because the
/// directory (`CARGO_TARGET_TMPDIR`) is known only to the test being compiled.
#[macro_export]
macro_rules! scratch {
    () => {
        $crate::scratch_in(env!("CARGO_TARGET_TMPDIR"))
    };
}

/// A fresh directory under `dir`, removed when dropped ([`scratch!`]).
pub fn scratch_in(dir: &str) -> tempfile::TempDir {
    tempfile::tempdir_in(dir).expect("scratch dir")
}
