//! The kernel file systems the benchmarks compare augefs with (ext2, ext4, xfs, btrfs):
//! how each is made on a device, how it is mounted, whether this process may do so at
//! all, and the host-wide steps around them (dropping the kernel's caches, statfs).
//! Used by `amplify` and `bench fs`; the loop device under them is `loopdev`.
//!
//! Invariants:
//! - mkfs never leaves background work that would write while a run is counted (ext4's
//!   lazy inode-table and journal initialisation are off).
//! - Mounts are `noatime`, as in the IO amplification study's runs (§2.1): a read never
//!   turns into an inode write.

use super::loopdev::{command, have_program, path_str};
use std::path::Path;

/// The kernel file systems the benchmarks know how to make.
pub const KERNEL_FS: [&str; 4] = ["ext2", "ext4", "xfs", "btrfs"];

/// The mount options of every kernel file system measured.
pub const MOUNT_OPTIONS: &str = "noatime";

/// `mkfs.<fs_type>`'s arguments before the device: quiet, force, no discard of the
/// whole device (xfs and btrfs: it only costs time here), and for ext4 no background
/// initialisation that would write while a run is counted.
fn mkfs_args(fs_type: &str) -> &'static [&'static str] {
    match fs_type {
        "ext2" => &["-q", "-F"],
        "ext4" => &["-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0"],
        "xfs" | "btrfs" => &["-q", "-f", "-K"],
        _ => unreachable!("checked against KERNEL_FS"),
    }
}

pub fn mkfs_program(fs_type: &str) -> String {
    format!("mkfs.{fs_type}")
}

/// Bytes per inode of ext2/ext4 made by [`mkfs`] with `many_inodes`: one per block, so
/// that a run of creates fills the space before the inode table (mke2fs's default,
/// 16 KiB, runs out of inodes a quarter of the way).
pub const EXT_INODE_BYTES: u64 = 4096;

/// Makes a fresh `fs_type` (one of [`KERNEL_FS`]) on `device`; `many_inodes`: ext2 and
/// ext4 get an inode per [`EXT_INODE_BYTES`] (xfs and btrfs allocate inodes as needed).
pub fn mkfs(fs_type: &str, device: &str, many_inodes: bool) -> Result<(), String> {
    assert!(KERNEL_FS.contains(&fs_type), "a known kernel file system");
    let mut args = mkfs_args(fs_type).to_vec();
    let inode_bytes = EXT_INODE_BYTES.to_string();
    if many_inodes && fs_type.starts_with("ext") {
        args.extend(["-i", &inode_bytes]);
    }
    args.push(device);
    command(&mkfs_program(fs_type), &args).map(|_| ())
}

/// Why no kernel file system can be measured at all, if none can: loop devices, mkfs
/// and mount need root and their programs.
pub fn obstacle() -> Option<String> {
    if !is_root() {
        return Some("skipped: needs root (loop device, mkfs, mount)".to_string());
    }
    ["losetup", "mount", "umount"]
        .into_iter()
        .find(|p| !have_program(p))
        .map(|p| format!("skipped: {p} not found"))
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Writes back and drops the kernel's page, dentry and inode caches (root only).
pub fn drop_caches() -> Result<(), String> {
    // SAFETY: sync has no preconditions; it returns once write-back was started on
    // every file system (Linux waits for it), so the dropped pages are clean.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3")
        .map_err(|e| format!("dropping the kernel's caches: {e}"))
}

/// Bytes in use on the file system holding `dir` (statvfs).
// statvfs's field types differ between targets (u64 here).
#[allow(clippy::unnecessary_cast)]
pub fn used_bytes(dir: &Path) -> Result<u64, String> {
    let st = statvfs(dir)?;
    Ok((st.f_blocks - st.f_bfree) as u64 * st.f_frsize as u64)
}

/// The size of the file system holding `dir`, and the bytes an unprivileged writer may
/// still take (statvfs's `f_blocks` and `f_bavail`).
// statvfs's field types differ between targets (u64 here).
#[allow(clippy::unnecessary_cast)]
pub fn space(dir: &Path) -> Result<(u64, u64), String> {
    let st = statvfs(dir)?;
    let unit = st.f_frsize as u64;
    Ok((st.f_blocks as u64 * unit, st.f_bavail as u64 * unit))
}

fn statvfs(dir: &Path) -> Result<libc::statvfs, String> {
    let path = std::ffi::CString::new(path_str(dir)?).map_err(|e| e.to_string())?;
    // SAFETY: struct statvfs is plain integers, for which all zeros is valid.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is a NUL-terminated string and `st` a struct statvfs to fill;
    // both outlive the call.
    let rc = unsafe { libc::statvfs(path.as_ptr(), &mut st) };
    if rc != 0 {
        return Err(format!(
            "{}: {}",
            dir.display(),
            std::io::Error::last_os_error()
        ));
    }
    Ok(st)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_fs_has_mkfs_arguments() {
        for fs in KERNEL_FS {
            assert!(mkfs_args(fs).contains(&"-q"), "{fs} is made quietly");
            assert_eq!(mkfs_program(fs), format!("mkfs.{fs}"));
        }
        assert!(used_bytes(Path::new("/")).unwrap() > 0);
    }
}
