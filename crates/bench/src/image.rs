//! Image files of the benchmarks: created preallocated and then written in full once
//! (zeros), so that no measured run writes into unwritten extents, whose conversion
//! would add the host file system's journal commits to the device flushes measured.

use super::scratch::Scratch;
use device::{BackendChoice, Device, DeviceError, OpenOptions};
use platform::units::human;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the device layer said about the image, noted when it is first opened.
#[derive(Debug, Default)]
pub struct DeviceFacts {
    pub backend: Option<String>,
    /// Why a fallback backend was chosen, if one was.
    pub notice: Option<String>,
    pub logical_block_bytes: Option<u32>,
}

impl DeviceFacts {
    pub fn note(&mut self, device: &Device) {
        let info = device.info();
        self.backend
            .get_or_insert_with(|| info.backend.name().to_string());
        if self.notice.is_none() {
            self.notice.clone_from(&info.notice);
        }
        self.logical_block_bytes
            .get_or_insert(info.logical_block_bytes);
    }

    /// "4.0 GiB image in DIR (ext4), io_uring backend, 512 B blocks", for a header.
    pub fn describe(&self, image_bytes: u64, scratch: &Scratch) -> String {
        let unknown = || "?".to_string();
        format!(
            "{} image in {} ({}), {} backend, {} B blocks",
            human(image_bytes),
            scratch.dir.display(),
            scratch.dir_fs.clone().unwrap_or_else(unknown),
            self.backend.clone().unwrap_or_else(unknown),
            self.logical_block_bytes
                .map_or_else(unknown, |b| b.to_string()),
        )
    }
}

/// Opens `path` for direct IO through the device layer.
pub fn open_device(path: &Path, backend: BackendChoice) -> Result<Arc<Device>, String> {
    open_device_released(path, backend, Duration::ZERO)
}

/// [`open_device`], waiting up to `wait` while another process still holds the image
/// (an image a killed process held stays locked until the kernel has torn its IO down).
pub fn open_device_released(
    path: &Path,
    backend: BackendChoice,
    wait: Duration,
) -> Result<Arc<Device>, String> {
    let opts = OpenOptions {
        backend,
        ..OpenOptions::default()
    };
    let started = Instant::now();
    loop {
        match device::open(path, &opts) {
            Err(DeviceError::InUse { .. }) if started.elapsed() < wait => {
                std::thread::sleep(Duration::from_millis(2));
            }
            opened => {
                return opened
                    .map(Arc::new)
                    .map_err(|e| format!("{}: {e}", path.display()))
            }
        }
    }
}

/// Creates the image file of `bytes` (a multiple of 1 MiB), allocated, and writes zeros
/// over what was never written (device::write_holes: a new image in full, an image of an
/// earlier run not at all). Says so on stderr: a large image takes a while.
pub fn prepare(path: &Path, bytes: u64, backend: BackendChoice) -> Result<(), String> {
    assert_eq!(bytes % (1 << 20), 0, "image size checked by the caller");
    device::create_image(path, bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut said = false;
    device::write_holes(path, &mut |_, total| {
        if !said {
            eprintln!(
                "augefs: writing {} of the image {} once",
                human(total),
                path.display()
            );
            said = true;
        }
    })
    .map_err(|e| format!("writing {}: {e}", path.display()))?;
    let device = open_device(path, backend)?;
    assert_eq!(
        device.size_bytes(),
        bytes,
        "the image has the size asked for"
    );
    Ok(())
}
