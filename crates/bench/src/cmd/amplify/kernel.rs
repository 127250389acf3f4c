//! A kernel file system (ext2, ext4, xfs, btrfs) as a [`Subject`] of `augefs amplify`:
//! made fresh on a loop device over an image file beside augefs's, mounted `noatime` (as
//! in the paper), driven through std::fs and counted by the loop device's block-layer
//! counters (`crate::loopdev`).
//!
//! Invariants:
//! - Every run makes the file system again on the same loop device.
//! - A cold remount unmounts, drops the kernel's caches (`/proc/sys/vm/drop_caches`)
//!   and mounts again.
//! - The mount is undone by `Drop` (and the loop device by its owner), also on errors.

use super::workload::{Io, Subject};
use crate::kernelfs::{self, KERNEL_FS, MOUNT_OPTIONS};
use crate::loopdev::{KernelMount, LoopDevice};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

pub struct Kernel<'a> {
    fs_type: &'static str,
    device: &'a LoopDevice,
    dir: PathBuf,
    mount: Option<KernelMount>,
    file: Option<File>,
}

impl<'a> Kernel<'a> {
    /// `fs_type` on `device`, mounted on `dir` (created if missing).
    pub fn new(fs_type: &'static str, device: &'a LoopDevice, dir: &Path) -> Result<Self, String> {
        assert!(KERNEL_FS.contains(&fs_type), "a known kernel file system");
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        Ok(Kernel {
            fs_type,
            device,
            dir: dir.to_path_buf(),
            mount: None,
            file: None,
        })
    }

    fn mount(&mut self) -> Result<(), String> {
        let mount = KernelMount::mount(self.fs_type, self.device.path(), &self.dir, MOUNT_OPTIONS)?;
        self.mount = Some(mount);
        Ok(())
    }

    fn at(&self, path: &str) -> PathBuf {
        self.dir.join(path)
    }

    fn fsync_dir(&self, dir: &str) -> Result<(), String> {
        let path = self.at(dir);
        File::open(&path)
            .and_then(|d| d.sync_all())
            .map_err(|e| format!("fsync {}: {e}", path.display()))
    }
}

fn io_err(path: &Path, e: std::io::Error) -> String {
    format!("{}: {e}", path.display())
}

impl Subject for Kernel<'_> {
    fn make(&mut self) -> Result<(), String> {
        self.unmount()?;
        kernelfs::mkfs(self.fs_type, self.device.path(), false)?;
        self.mount()
    }

    fn io(&self) -> Result<Io, String> {
        let stat = self.device.stat()?;
        Ok(Io {
            read_bytes: stat.read_bytes,
            write_bytes: stat.write_bytes,
            write_requests: stat.write_requests,
            flushes: stat.flushes,
            written_by_cause: None,
        })
    }

    fn used_bytes(&self) -> Result<u64, String> {
        kernelfs::used_bytes(&self.dir)
    }

    fn sync(&mut self) -> Result<(), String> {
        self.mount.as_ref().expect("mounted").sync()
    }

    fn unmount(&mut self) -> Result<(), String> {
        self.file = None;
        match self.mount.take() {
            Some(mount) => mount.unmount(),
            None => Ok(()),
        }
    }

    fn remount_cold(&mut self) -> Result<(), String> {
        self.unmount()?;
        kernelfs::drop_caches()?;
        self.mount()
    }

    fn mkdir(&mut self, path: &str) -> Result<(), String> {
        let path = self.at(path);
        std::fs::create_dir(&path).map_err(|e| io_err(&path, e))
    }

    fn write_file(&mut self, path: &str, bytes: u64) -> Result<(), String> {
        let path = self.at(path);
        let file = File::create(&path).map_err(|e| io_err(&path, e))?;
        let chunk = vec![0x5a_u8; 1 << 20];
        let mut done = 0;
        while done < bytes {
            let n = (bytes - done).min(chunk.len() as u64) as usize;
            file.write_all_at(&chunk[..n], done)
                .map_err(|e| io_err(&path, e))?;
            done += n as u64;
        }
        Ok(())
    }

    fn open(&mut self, path: &str) -> Result<(), String> {
        let path = self.at(path);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| io_err(&path, e))?;
        self.file = Some(file);
        Ok(())
    }

    fn pwrite(&mut self, buf: &[u8], offset: u64) -> Result<(), String> {
        let file = self.file.as_ref().expect("opened");
        file.write_all_at(buf, offset)
            .map_err(|e| format!("write: {e}"))
    }

    fn pread(&mut self, buf: &mut [u8], offset: u64) -> Result<(), String> {
        let file = self.file.as_ref().expect("opened");
        file.read_exact_at(buf, offset)
            .map_err(|e| format!("read: {e}"))
    }

    fn fsync(&mut self) -> Result<(), String> {
        let file = self.file.as_ref().expect("opened");
        file.sync_all().map_err(|e| format!("fsync: {e}"))
    }

    fn close(&mut self) {
        self.file = None;
    }

    fn create_fsync(&mut self, dir: &str, path: &str) -> Result<(), String> {
        let path = self.at(path);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| io_err(&path, e))?;
        self.fsync_dir(dir)
    }

    fn mkdir_fsync(&mut self, dir: &str, path: &str) -> Result<(), String> {
        self.mkdir(path)?;
        self.fsync_dir(dir)
    }

    fn rename_fsync(&mut self, dir: &str, from: &str, to: &str) -> Result<(), String> {
        let (from, to) = (self.at(from), self.at(to));
        std::fs::rename(&from, &to).map_err(|e| io_err(&from, e))?;
        self.fsync_dir(dir)
    }
}

impl Drop for Kernel<'_> {
    fn drop(&mut self) {
        self.file = None;
        // KernelMount's own Drop unmounts (and reports) if still mounted.
        drop(self.mount.take());
        crate::scratch::remove_mount_point(&self.dir);
    }
}
