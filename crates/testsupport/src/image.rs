//! Formatted images: memory devices, image files, and crash copies of a device.

use device::memory::MemoryBackend;
use device::{AlignedBuf, Device, IoCause};
use engine::mkfs::{format, MkfsOptions};
use engine::progress::NoProgress;
use pmr::Pmr;
use std::path::Path;
use std::sync::Arc;

/// The logical block size of memory devices.
pub const SECTOR_BYTES: u32 = 512;

/// How test images are formatted: `domains` domains, a fixed UUID and creation time.
pub fn mkfs_options(domains: u32) -> MkfsOptions {
    MkfsOptions {
        domain_count: Some(domains),
        fs_uuid: [7; 16],
        created_unix_ns: 1,
        force: false,
        label: String::new(),
    }
}

/// `dev`, formatted with `domains` domains (and `pmr`).
pub fn formatted(dev: Device, domains: u32, pmr: Option<&Pmr>) -> Arc<Device> {
    format(&dev, pmr, &mkfs_options(domains), &NoProgress).expect("mkfs");
    Arc::new(dev)
}

/// An unformatted memory device of `bytes`, zeroed.
pub fn memory_device(bytes: u64) -> Device {
    Device::new(Box::new(MemoryBackend::new(bytes, SECTOR_BYTES)))
}

/// A memory device of `bytes` formatted with `domains` domains.
pub fn memory_image(bytes: u64, domains: u32) -> Arc<Device> {
    formatted(memory_device(bytes), domains, None)
}

/// A memory device holding `image`.
pub fn from_bytes(image: Vec<u8>) -> Arc<Device> {
    Arc::new(Device::new(Box::new(MemoryBackend::from_image(
        image,
        SECTOR_BYTES,
    ))))
}

/// Every byte of `dev`, read 4 MiB at a time into one reused buffer (one copy of the
/// image, where a whole-device buffer would cost three).
pub fn image_bytes(dev: &Device) -> Vec<u8> {
    const PIECE: u64 = 4 << 20;
    let size = dev.size_bytes();
    let mut image = Vec::with_capacity(size as usize);
    let mut buf = AlignedBuf::scratch(PIECE.min(size) as usize);
    let mut at = 0;
    while at < size {
        let len = PIECE.min(size - at) as usize;
        buf.reuse_len(len);
        buf = dev
            .read(at, buf, IoCause::Tool)
            .expect("read the whole device");
        image.extend_from_slice(&buf);
        at += len as u64;
    }
    image
}

/// The device's bytes now, as a new memory device: what a crash at this instant leaves
/// (the memory backend has no volatile cache, so everything written so far survives).
pub fn crash_copy(dev: &Device) -> Arc<Device> {
    from_bytes(image_bytes(dev))
}

/// An image file of `bytes` at `path`, formatted with `domains` domains (and closed).
pub fn mkfs_file(path: &Path, bytes: u64, domains: u32) {
    device::create_image(path, bytes).expect("create the image file");
    let dev = device::open(path, &device::OpenOptions::default()).expect("open the image");
    format(&dev, None, &mkfs_options(domains), &NoProgress).expect("mkfs");
}
