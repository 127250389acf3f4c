//! The product's programs this binary drives, found next to it: `augefs` (the `fuse`
//! target mounts with `augefs mount -f`, the `interposer` target runs its workers under
//! `augefs run`) and the interposer library `augefs run` loads. A cargo build puts the
//! three in one directory; a build of this binary alone can leave the others missing
//! or older, which is said by name rather than measured.

use std::path::PathBuf;

/// The `augefs` command's file name.
pub const AUGEFS: &str = "augefs";
/// The interposer library `augefs run` preloads (crates/preload).
pub const PRELOAD_LIB: &str = "libaugefs_preload.so";

/// This executable.
pub fn this_exe() -> Result<PathBuf, String> {
    std::env::current_exe().map_err(|e| format!("cannot find my executable: {e}"))
}

/// `augefs` next to this executable.
pub fn augefs() -> Result<PathBuf, String> {
    beside(AUGEFS, "augefs-cli")
}

/// The interposer library next to this executable (where `augefs run` looks for it).
pub fn preload_lib() -> Result<PathBuf, String> {
    beside(PRELOAD_LIB, "augefs-preload")
}

fn beside(name: &str, package: &str) -> Result<PathBuf, String> {
    let exe = this_exe()?;
    let path = exe.with_file_name(name);
    if path.exists() {
        return Ok(path);
    }
    Err(format!(
        "{name} not found next to {} (build it: cargo build -p {package}, with the same \
         profile as augefs-bench)",
        exe.display()
    ))
}
