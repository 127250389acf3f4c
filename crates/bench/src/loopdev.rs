//! Kernel file systems under the benchmarks: an image file attached to a loop device
//! (direct IO where the kernel allows it), a file system made on it and mounted, and the
//! block layer's counters of the device (`/sys/block/<loop>/stat`).
//!
//! Invariants:
//! - A [`LoopDevice`] is detached and a [`KernelMount`] unmounted by `Drop` too, after
//!   an error or a panic, and by [`crate::interrupt`] after SIGINT, SIGTERM or
//!   SIGHUP; a failing step is reported on stderr and the rest still runs.
//! - Counters are the device's own, journal and metadata included; the host's page
//!   cache sits under neither side when the loop device does direct IO.

use crate::interrupt::{on_interrupt, Registered, Undo};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs `program` with `args`; its stdout, or a message with its stderr.
pub fn command(program: &str, args: &[&str]) -> Result<String, String> {
    let output = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("{program}: {e}"))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(format!(
            "{program} {}: {} ({})",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim(),
            output.status
        ))
    }
}

pub fn path_str(path: &Path) -> Result<&str, String> {
    path.to_str()
        .ok_or_else(|| format!("{} is not UTF-8", path.display()))
}

/// Whether `program` is on the PATH (or in /sbin, /usr/sbin, where mkfs tools live).
pub fn have_program(program: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/sbin", "/usr/sbin"].map(PathBuf::from))
        .any(|dir| dir.join(program).is_file())
}

/// The block layer's counters of a device since it appeared.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlockStat {
    pub read_requests: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub write_requests: u64,
    /// Flush requests; `None` on kernels whose stat file has no such field.
    pub flushes: Option<u64>,
}

impl BlockStat {
    /// Parses `/sys/block/<dev>/stat`: fields 3 and 7 are sectors read and written
    /// (512 B each), fields 1 and 5 read and write requests, field 16 flush requests
    /// (Linux 5.5+).
    pub fn parse(stat: &str) -> Option<BlockStat> {
        let fields: Vec<u64> = stat
            .split_whitespace()
            .map(|f| f.parse().ok())
            .collect::<Option<_>>()?;
        Some(BlockStat {
            read_requests: *fields.first()?,
            read_bytes: *fields.get(2)? * 512,
            write_bytes: *fields.get(6)? * 512,
            write_requests: *fields.get(4)?,
            flushes: fields.get(15).copied(),
        })
    }
}

/// The block-layer counters of the device holding `path`'s file system
/// (`/sys/dev/block/MAJOR:MINOR/stat`, a partition's own); `None` for a file system
/// with no block device (tmpfs, overlay, FUSE). They count every process's IO to the
/// device, not only this one's.
pub fn device_stat_of(path: &Path) -> Option<BlockStat> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(path).ok()?.dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    if major == 0 {
        return None;
    }
    let stat = std::fs::read_to_string(format!("/sys/dev/block/{major}:{minor}/stat")).ok()?;
    BlockStat::parse(&stat)
}

/// An image file attached to a loop device.
#[derive(Debug)]
pub struct LoopDevice {
    /// `/dev/loopN`.
    device: String,
    /// Whether the loop device does direct IO to the image, if the kernel says.
    pub direct_io: Option<bool>,
    /// Detaches it if a signal interrupts the process.
    _on_interrupt: Registered,
}

impl LoopDevice {
    /// Attaches `image` to a free loop device, with direct IO where possible.
    pub fn attach(image: &Path) -> Result<LoopDevice, String> {
        let image = path_str(image)?;
        let attached = command("losetup", &["--find", "--show", "--direct-io=on", image])?;
        let device = attached.trim().to_string();
        if !device.starts_with("/dev/") {
            return Err(format!("losetup printed {attached:?}, not a device"));
        }
        let mut dev = LoopDevice {
            _on_interrupt: on_interrupt(Undo::Detach(device.clone())),
            device,
            direct_io: None,
        };
        dev.direct_io = dev.sys_block("loop/dio").map(|text| text.trim() == "1");
        Ok(dev)
    }

    pub fn path(&self) -> &str {
        &self.device
    }

    /// A file of the device's `/sys/block/<name>/` directory.
    fn sys_block(&self, file: &str) -> Option<String> {
        let name = self.device.strip_prefix("/dev/")?;
        std::fs::read_to_string(format!("/sys/block/{name}/{file}")).ok()
    }

    /// The device's counters now.
    pub fn stat(&self) -> Result<BlockStat, String> {
        self.sys_block("stat")
            .as_deref()
            .and_then(BlockStat::parse)
            .ok_or_else(|| format!("cannot read the counters of {}", self.device))
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        if let Err(e) = command("losetup", &["-d", &self.device]) {
            eprintln!("augefs: detaching {}: {e}", self.device);
        }
    }
}

/// A kernel file system of `fs_type` mounted from a device on a directory.
#[derive(Debug)]
pub struct KernelMount {
    dir: PathBuf,
    mounted: bool,
    /// Unmounts it (lazily) if a signal interrupts the process.
    _on_interrupt: Registered,
}

impl KernelMount {
    /// `mount -t fs_type [-o options] device dir`.
    pub fn mount(
        fs_type: &str,
        device: &str,
        dir: &Path,
        options: &str,
    ) -> Result<KernelMount, String> {
        let target = path_str(dir)?;
        let mut args = vec!["-t", fs_type];
        if !options.is_empty() {
            args.extend(["-o", options]);
        }
        args.extend([device, target]);
        let undo = on_interrupt(Undo::Unmount(dir.to_path_buf()));
        command("mount", &args)?;
        Ok(KernelMount {
            dir: dir.to_path_buf(),
            mounted: true,
            _on_interrupt: undo,
        })
    }

    /// Writes everything of this file system out (`sync -f`).
    pub fn sync(&self) -> Result<(), String> {
        command("sync", &["-f", path_str(&self.dir)?]).map(|_| ())
    }

    /// Unmounts (which writes everything out first).
    pub fn unmount(mut self) -> Result<(), String> {
        self.mounted = false;
        command("umount", &[path_str(&self.dir)?]).map(|_| ())
    }
}

impl Drop for KernelMount {
    fn drop(&mut self) {
        if !self.mounted {
            return;
        }
        let dir = self.dir.to_string_lossy().into_owned();
        if let Err(e) = command("umount", &[&dir]) {
            eprintln!("augefs: unmounting {dir}: {e}");
            // Lazily, so that the loop device can go at least once nothing uses it.
            if let Err(e) = command("umount", &["-l", &dir]) {
                eprintln!("augefs: unmounting {dir} lazily: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_read_by_position() {
        let line = "  10 0 24 5   7 0 64 9 0 1 2   0 0 0 0   3 4\n";
        let stat = BlockStat::parse(line).unwrap();
        assert_eq!(stat.read_bytes, 24 * 512);
        assert_eq!(stat.write_bytes, 64 * 512);
        assert_eq!(stat.write_requests, 7);
        assert_eq!(stat.flushes, Some(3));
        let old = BlockStat::parse("1 0 8 0 2 0 16 0 0 0 0").unwrap();
        assert_eq!(old.flushes, None);
        assert!(BlockStat::parse("1 2").is_none());
    }
}
