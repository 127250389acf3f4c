//! The baseline of `augefs bench engine`: ext4 on a loop device over an image file in
//! the same directory as augefs's image, so both sit on the same disk and host file
//! system.
//!
//! - The image is written in full once, like augefs's, then `mkfs.ext4 -q -F` with
//!   `lazy_itable_init=0,lazy_journal_init=0`: no background initialisation thread
//!   writes while a run is measured.
//! - The loop device is attached with direct IO where the kernel allows it (the host's
//!   page cache then sits under neither side; augefs uses `O_DIRECT`); the header says
//!   which.
//! - It is mounted with the defaults (`data=ordered`, barriers on). An append with
//!   `fdatasync` commits the file size in the journal, as augefs commits the block's
//!   mapping record.
//! - Bytes written and flushes are the loop device's own counters
//!   (`/sys/block/<loop>/stat`), journal included.
//!
//! Invariant: whatever was set up is undone by `Drop` (unmount, detach, remove), also
//! after an error or a panic; a failing step of the teardown is reported on stderr and
//! the rest still runs.

use super::report::PerOp;
use super::workload;
use crate::image;
use crate::loopdev::{command, path_str, BlockStat, KernelMount, LoopDevice};
use crate::scratch::{remove_dir, remove_file, Scratch};
use crate::threads::{Limit, Run};
use device::BackendChoice;
use std::path::PathBuf;

/// ext4 mounted on a loop device.
#[derive(Debug)]
pub struct Ext4 {
    image: PathBuf,
    mount_dir: PathBuf,
    loop_device: Option<LoopDevice>,
    mount: Option<KernelMount>,
    pub image_bytes: u64,
    /// Whether the loop device does direct IO to the image, if the kernel says.
    pub direct_io: Option<bool>,
}

impl Ext4 {
    /// Makes, attaches and mounts an ext4 image of `bytes` in the scratch directory. An
    /// error says which step failed (the caller skips the baseline with it).
    pub fn setup(scratch: &Scratch, bytes: u64, backend: BackendChoice) -> Result<Ext4, String> {
        let mut ext4 = Ext4 {
            image: scratch.named("ext4", ".img"),
            mount_dir: scratch.named("ext4", ".mnt"),
            loop_device: None,
            mount: None,
            image_bytes: bytes,
            direct_io: None,
        };
        image::prepare(&ext4.image, bytes, backend)?;
        let image = path_str(&ext4.image)?.to_string();
        let lazy = "lazy_itable_init=0,lazy_journal_init=0";
        command("mkfs.ext4", &["-q", "-F", "-E", lazy, &image])?;
        let loop_device = LoopDevice::attach(&ext4.image)?;
        ext4.direct_io = loop_device.direct_io;
        let device = loop_device.path().to_string();
        ext4.loop_device = Some(loop_device);
        std::fs::create_dir(&ext4.mount_dir)
            .map_err(|e| format!("{}: {e}", ext4.mount_dir.display()))?;
        ext4.mount = Some(KernelMount::mount("ext4", &device, &ext4.mount_dir, "")?);
        Ok(ext4)
    }

    pub fn loop_device(&self) -> &str {
        self.loop_device.as_ref().map_or("?", LoopDevice::path)
    }

    /// Bytes written and flushes so far.
    fn written_and_flushes(&self) -> Option<(u64, u64)> {
        let stat: BlockStat = self.loop_device.as_ref()?.stat().ok()?;
        Some((stat.write_bytes, stat.flushes?))
    }

    /// Writes everything out (`sync -f`, untimed), so a run does not pay for the one
    /// before it.
    fn settle(&self) -> Result<(), String> {
        command("sync", &["-f", path_str(&self.mount_dir)?]).map(|_| ())
    }

    /// One run of `threads` threads appending 4 KiB with `fdatasync`, each to a new file
    /// of its own; the files are removed afterwards.
    pub fn appends(&self, threads: usize, limit: Limit) -> Result<(Run, Option<PerOp>), String> {
        let dir = self.mount_dir.join("run");
        std::fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        self.settle()?;
        let before = self.written_and_flushes();
        let run = workload::file_appends(&dir, threads, limit);
        let after = self.written_and_flushes();
        let removed = remove_dir(&dir);
        let run = run?;
        removed?;
        self.settle()?;
        let per_op = before.zip(after).map(|((b, bf), (a, af))| PerOp {
            total: (a - b) as f64 / run.ops.max(1) as f64,
            flushes: (af - bf) as f64 / run.ops.max(1) as f64,
            by_cause: None,
        });
        Ok((run, per_op))
    }

    fn teardown(&mut self) -> Vec<String> {
        let mut failures = Vec::new();
        // Unmount, then detach (each says on stderr what failed), then remove.
        drop(self.mount.take());
        drop(self.loop_device.take());
        match std::fs::remove_dir(&self.mount_dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                failures.push(format!("removing {}: {e}", self.mount_dir.display()))
            }
            _ => {}
        }
        if let Err(e) = remove_file(&self.image) {
            failures.push(e);
        }
        failures
    }
}

impl Drop for Ext4 {
    fn drop(&mut self) {
        for failure in self.teardown() {
            eprintln!("augefs: cleaning up the ext4 baseline: {failure}");
        }
    }
}
