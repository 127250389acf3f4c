//! augefs as a [`Subject`] of `augefs amplify`: the vfs Rust API on an image file opened
//! like `augefs mount` opens it (O_DIRECT, io_uring where available), counted by the
//! device layer's IO accounting (every byte by cause).
//!
//! Invariants:
//! - One device is opened on the image for the whole command; every run formats it
//!   again (so runs start empty) and mounts it; the device's counters outlive mounts, so
//!   the work an unmount does is counted too.
//! - A remount drops every cache of the file system (page cache, MetaDB's, the
//!   engine's): the image is opened with O_DIRECT, so the host caches nothing either.

use super::workload::{Io, Subject};
use crate::augefs::{self as bench_augefs, err};
use device::{BackendChoice, Device};
use platform::{Clock, IoCause, SystemClock};
use std::path::Path;
use std::sync::Arc;
use vfs::{FileSystem, OpenOptions, RenameMode};

/// The amplification images carry a fixed uuid: they never outlive the command.
const AMPLIFY_FS_UUID: [u8; 16] = *b"augefs-amplify01";

/// Data written by `write_file` per call of the API.
const FILL_CHUNK_BYTES: usize = 1 << 20;

pub struct Augefs {
    device: Arc<Device>,
    clock: Arc<dyn Clock>,
    fs: Option<Arc<FileSystem>>,
    file: Option<vfs::File>,
}

fn abs(path: &str) -> String {
    format!("/{path}")
}

impl Augefs {
    /// Opens the image (written in full before) for direct IO.
    pub fn open(image: &Path, backend: BackendChoice) -> Result<Augefs, String> {
        Ok(Augefs {
            device: crate::image::open_device(image, backend)?,
            clock: Arc::new(SystemClock::new()),
            fs: None,
            file: None,
        })
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    fn fs(&self) -> &Arc<FileSystem> {
        self.fs.as_ref().expect("mounted by make")
    }

    fn mount(&mut self) -> Result<(), String> {
        self.fs = Some(bench_augefs::mount(&self.device, None, &self.clock)?);
        Ok(())
    }

    fn fsync_dir(&self, dir: &str) -> Result<(), String> {
        bench_augefs::fsync_dir(self.fs(), &abs(dir))
    }
}

impl Subject for Augefs {
    fn make(&mut self) -> Result<(), String> {
        self.unmount()?;
        bench_augefs::format(&self.device, None, self.clock.as_ref(), AMPLIFY_FS_UUID)?;
        self.mount()
    }

    fn io(&self) -> Result<Io, String> {
        let io = self.device.counters().snapshot();
        let total = io.total();
        Ok(Io {
            read_bytes: total.read_bytes,
            write_bytes: total.write_bytes,
            write_requests: total.write_ops,
            flushes: Some(total.flush_ops),
            written_by_cause: Some(IoCause::ALL.map(|c| io.cause(c).write_bytes)),
        })
    }

    fn used_bytes(&self) -> Result<u64, String> {
        // The live data blocks (statfs's used space also counts the log's reserves),
        // once the files unlinked last are freed.
        self.fs().wait_for_frees();
        let live = self.fs().engine().space_report().live_blocks;
        Ok(live * format::constants::BLOCK_SIZE_BYTES)
    }

    fn sync(&mut self) -> Result<(), String> {
        self.fs().sync().map_err(|e| err("sync", e))
    }

    fn unmount(&mut self) -> Result<(), String> {
        self.file = None;
        match self.fs.take() {
            Some(fs) => bench_augefs::unmount(fs),
            None => Ok(()),
        }
    }

    fn remount_cold(&mut self) -> Result<(), String> {
        self.unmount()?;
        self.mount()
    }

    fn mkdir(&mut self, path: &str) -> Result<(), String> {
        self.fs()
            .create_dir(&abs(path), 0o755)
            .map_err(|e| err(path, e))
    }

    fn write_file(&mut self, path: &str, bytes: u64) -> Result<(), String> {
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(self.fs(), &abs(path))
            .map_err(|e| err(path, e))?;
        let chunk = vec![0x5a_u8; FILL_CHUNK_BYTES];
        let mut done = 0;
        while done < bytes {
            let n = (bytes - done).min(FILL_CHUNK_BYTES as u64) as usize;
            let wrote = file.write_at(&chunk[..n], done).map_err(|e| err(path, e))?;
            assert!(wrote > 0, "a write makes progress");
            done += wrote as u64;
        }
        Ok(())
    }

    fn open(&mut self, path: &str) -> Result<(), String> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .open(self.fs(), &abs(path))
            .map_err(|e| err(path, e))?;
        self.file = Some(file);
        Ok(())
    }

    fn pwrite(&mut self, buf: &[u8], offset: u64) -> Result<(), String> {
        let file = self.file.as_ref().expect("opened");
        let wrote = file.write_at(buf, offset).map_err(|e| err("write", e))?;
        assert_eq!(wrote, buf.len(), "a block is written whole");
        Ok(())
    }

    fn pread(&mut self, buf: &mut [u8], offset: u64) -> Result<(), String> {
        let file = self.file.as_ref().expect("opened");
        let read = file.read_at(buf, offset).map_err(|e| err("read", e))?;
        assert_eq!(read, buf.len(), "reads stay inside the file");
        Ok(())
    }

    fn fsync(&mut self) -> Result<(), String> {
        let file = self.file.as_ref().expect("opened");
        file.sync_all().map_err(|e| err("fsync", e))
    }

    fn close(&mut self) {
        self.file = None;
    }

    fn create_fsync(&mut self, dir: &str, path: &str) -> Result<(), String> {
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(self.fs(), &abs(path))
            .map_err(|e| err(path, e))?;
        self.fsync_dir(dir)
    }

    fn mkdir_fsync(&mut self, dir: &str, path: &str) -> Result<(), String> {
        self.mkdir(path)?;
        self.fsync_dir(dir)
    }

    fn rename_fsync(&mut self, dir: &str, from: &str, to: &str) -> Result<(), String> {
        self.fs()
            .rename_path(&abs(from), &abs(to), RenameMode::Replace)
            .map_err(|e| err(from, e))?;
        self.fsync_dir(dir)
    }
}

impl Drop for Augefs {
    fn drop(&mut self) {
        if let Err(e) = self.unmount() {
            eprintln!("augefs: {e}");
        }
    }
}
