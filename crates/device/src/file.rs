//! Opening image files and block devices for direct IO, and creating image files.
//!
//! [`open`] turns a path into a [`Device`]: it opens with `O_DIRECT`, locks, measures
//! (size, logical block size, discard support) and picks the backend (docs/DESIGN.md §4.1, §4.2).
//!
//! Invariants:
//! - The descriptor is `O_DIRECT` (and `O_RDWR` unless read-only); a file system that
//!   refuses direct IO is an open error, never a silent fall back to the page cache.
//! - Every open holds an `flock` (exclusive or shared, never waiting) for as long as the
//!   device lives, so two augefs instances never drive one image unknowingly; a
//!   conflicting lock is [`DeviceError::InUse`]. Exclusive opens of block devices also
//!   use `O_EXCL`, which the kernel refuses while the device is mounted.
//! - The reported size is a multiple of the logical block size, which is a power of two
//!   no larger than [`BUF_ALIGN_BYTES`].
//! - With [`BackendChoice::Auto`], a missing io_uring is a one-line notice (kept in
//!   [`DeviceInfo::notice`], printed once per process), not a failure.

use crate::backend::{Backend, BackendKind, DeviceInfo};
use crate::buf::{AlignedBuf, BUF_ALIGN_BYTES};
use crate::device::Device;
use crate::error::DeviceError;
use crate::sync::{PreadBackend, BLKGETSIZE64, BLKSSZGET};
use crate::uring::{UringBackend, QUEUE_DEPTH_MAX};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Once;

/// Which backend serves an opened device. With the `clap` feature it is also the
/// `--backend` argument of the commands, by the names of [`BackendChoice::name`]; the
/// variants' first doc lines are then its help, so they speak to users.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum BackendChoice {
    /// io_uring when it can be set up, else pread with a notice.
    #[default]
    Auto,
    /// io_uring, or an error where it cannot be set up.
    ///
    /// The error is [`DeviceError::UringUnavailable`].
    #[cfg_attr(feature = "clap", value(name = "io_uring"))]
    IoUring,
    /// pread/pwrite/fdatasync.
    Pread,
}

impl BackendChoice {
    /// Its name on a command line (`--backend`).
    pub fn name(self) -> &'static str {
        match self {
            BackendChoice::Auto => "auto",
            BackendChoice::IoUring => "io_uring",
            BackendChoice::Pread => "pread",
        }
    }
}

/// The lock an open takes on the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LockMode {
    /// No other open, shared or exclusive, may coexist (mount, fsck repair, mkfs).
    #[default]
    Exclusive,
    /// Other shared opens may coexist (inspect, read-only fsck).
    Shared,
    /// No lock at all, beside any holder: only read-only, for reading what a mounted
    /// image has made durable (inspect of a mounted image, as dumpe2fs reads one).
    Unlocked,
}

/// How to open a device.
#[derive(Debug, Clone)]
pub struct OpenOptions {
    pub backend: BackendChoice,
    pub read_only: bool,
    pub lock: LockMode,
    /// Requests one queue may have pushed and not popped (io_uring ring entries).
    pub queue_depth: u32,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            backend: BackendChoice::Auto,
            read_only: false,
            lock: LockMode::Exclusive,
            queue_depth: 128,
        }
    }
}

/// Opens `path` (a regular file or a block device) for direct IO.
pub fn open(path: &Path, opts: &OpenOptions) -> Result<Device, DeviceError> {
    assert!(
        opts.queue_depth > 0 && opts.queue_depth <= QUEUE_DEPTH_MAX,
        "queue depth {} outside 1..={QUEUE_DEPTH_MAX}",
        opts.queue_depth
    );
    let open_error = |source: io::Error| DeviceError::Open {
        path: path.to_path_buf(),
        source,
    };
    let (file, meta) = open_locked(path, opts)?;
    let is_block_device = meta.file_type().is_block_device();
    let fd = file.as_raw_fd();
    let logical_block_bytes = logical_block_bytes(fd, is_block_device).map_err(open_error)?;
    let size_bytes = if is_block_device {
        block_device_size(fd).map_err(open_error)?
    } else {
        meta.len()
    };
    let info = DeviceInfo {
        backend: BackendKind::Pread,
        path: Some(path.to_path_buf()),
        size_bytes: size_bytes - size_bytes % logical_block_bytes as u64,
        logical_block_bytes,
        is_block_device,
        discard_supported: !opts.read_only && discard_supported(is_block_device, meta.rdev()),
        notice: None,
    };
    Ok(Device::new(choose_backend(path, file, info, opts)?))
}

/// Opens `path` with `O_DIRECT` (and `O_EXCL` for an exclusive block device) and takes
/// the lock. Returns the file and what it is.
fn open_locked(path: &Path, opts: &OpenOptions) -> Result<(File, std::fs::Metadata), DeviceError> {
    let open_error = |source: io::Error| DeviceError::Open {
        path: path.to_path_buf(),
        source,
    };
    let not_a_device = || DeviceError::NotADevice {
        path: path.to_path_buf(),
    };
    let in_use = || DeviceError::InUse {
        path: path.to_path_buf(),
        holder: None,
    };
    let kind = std::fs::metadata(path).map_err(open_error)?.file_type();
    let is_block_device = kind.is_block_device();
    if !kind.is_file() && !is_block_device {
        return Err(not_a_device());
    }
    assert!(
        opts.lock != LockMode::Unlocked || opts.read_only,
        "an unlocked open is read-only"
    );
    let exclusive = opts.lock == LockMode::Exclusive;
    let mut flags = libc::O_DIRECT;
    if is_block_device && exclusive {
        flags |= libc::O_EXCL;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(!opts.read_only)
        .custom_flags(flags)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::EBUSY) if is_block_device && exclusive => in_use(),
            _ => open_error(e),
        })?;
    // The path may have been replaced between stat and open: judge the descriptor.
    let meta = file.metadata().map_err(open_error)?;
    if meta.file_type().is_block_device() != is_block_device || !(meta.is_file() || is_block_device)
    {
        return Err(not_a_device());
    }
    lock(&file, opts.lock).map_err(|e| match e.raw_os_error() {
        Some(libc::EWOULDBLOCK) => in_use(),
        _ => open_error(e),
    })?;
    Ok((file, meta))
}

fn choose_backend(
    path: &Path,
    file: File,
    mut info: DeviceInfo,
    opts: &OpenOptions,
) -> Result<Box<dyn Backend>, DeviceError> {
    let depth = opts.queue_depth;
    match opts.backend {
        BackendChoice::Pread => Ok(Box::new(PreadBackend::new(file, info, depth))),
        BackendChoice::IoUring => Ok(Box::new(UringBackend::new(file, info, depth)?)),
        BackendChoice::Auto => {
            // A duplicate shares the open file description, and with it the lock.
            let dup = file.try_clone().map_err(|source| DeviceError::Open {
                path: path.to_path_buf(),
                source,
            })?;
            match UringBackend::new(dup, info.clone(), depth) {
                Ok(uring) => Ok(Box::new(uring)),
                Err(DeviceError::UringUnavailable { reason }) => {
                    let notice = format!("io_uring unavailable ({reason}); using pread/pwrite");
                    static PRINTED: Once = Once::new();
                    PRINTED.call_once(|| eprintln!("augefs: {notice}"));
                    info.notice = Some(notice);
                    Ok(Box::new(PreadBackend::new(file, info, depth)))
                }
                Err(other) => Err(other),
            }
        }
    }
}

/// Takes the flock without waiting.
fn lock(file: &File, mode: LockMode) -> io::Result<()> {
    let operation = match mode {
        LockMode::Exclusive => libc::LOCK_EX,
        LockMode::Shared => libc::LOCK_SH,
        LockMode::Unlocked => return Ok(()),
    } | libc::LOCK_NB;
    loop {
        // SAFETY: flock takes only integers.
        if unsafe { libc::flock(file.as_raw_fd(), operation) } == 0 {
            return Ok(());
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

/// The direct-IO offset and length granularity: statx `STATX_DIOALIGN` for files (Linux
/// 6.1+), `BLKSSZGET` for block devices, else a probing read.
fn logical_block_bytes(fd: RawFd, is_block_device: bool) -> io::Result<u32> {
    let found = if is_block_device {
        block_device_sector_bytes(fd)?
    } else {
        statx_dio_offset_align(fd)
    };
    let bytes = match found {
        Some(bytes) => bytes,
        None => probe_block_bytes(fd)?,
    };
    if !bytes.is_power_of_two() || bytes as usize > BUF_ALIGN_BYTES {
        let message =
            format!("direct IO granularity {bytes} is not a power of two up to {BUF_ALIGN_BYTES}");
        return Err(io::Error::new(io::ErrorKind::Unsupported, message));
    }
    Ok(bytes)
}

fn statx_dio_offset_align(fd: RawFd) -> Option<u32> {
    // SAFETY: statx is plain old data; all-zero is a valid value.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    let empty = c"";
    // SAFETY: the path is a valid C string and `stx` a valid, writable statx buffer.
    let r = unsafe {
        libc::statx(
            fd,
            empty.as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN,
            &mut stx,
        )
    };
    let known = r == 0 && stx.stx_mask & libc::STATX_DIOALIGN != 0 && stx.stx_dio_offset_align != 0;
    known.then_some(stx.stx_dio_offset_align)
}

fn block_device_sector_bytes(fd: RawFd) -> io::Result<Option<u32>> {
    let mut bytes: libc::c_int = 0;
    // SAFETY: BLKSSZGET writes one int through the pointer, which points at `bytes`.
    let r = unsafe { libc::ioctl(fd, BLKSSZGET as _, &mut bytes) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((bytes > 0).then_some(bytes as u32))
}

/// A 512-byte direct read at offset 0: accepted means 512, `EINVAL` means 4096.
fn probe_block_bytes(fd: RawFd) -> io::Result<u32> {
    let mut buf = AlignedBuf::zeroed(512);
    loop {
        // SAFETY: `buf` is a valid, exclusively owned buffer of 512 bytes.
        let r = unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), 512, 0) };
        if r >= 0 {
            return Ok(512);
        }
        let error = io::Error::last_os_error();
        match error.raw_os_error() {
            Some(libc::EINVAL) => return Ok(BUF_ALIGN_BYTES as u32),
            Some(libc::EINTR) => continue,
            _ => return Err(error),
        }
    }
}

fn block_device_size(fd: RawFd) -> io::Result<u64> {
    let mut bytes: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one u64 through the pointer, which points at `bytes`.
    let r = unsafe { libc::ioctl(fd, BLKGETSIZE64 as _, &mut bytes) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(bytes)
}

/// Block devices: the queue's `discard_max_bytes` in sysfs (a partition's queue is its
/// disk's). Image files never: a discard would punch a hole, and the first write into it
/// would make the host file system allocate again, with a journal commit at the next
/// flush (an image is written in full once for that reason, crate::image).
fn discard_supported(is_block_device: bool, rdev: u64) -> bool {
    if !is_block_device {
        return false;
    }
    let dev = format!("/sys/dev/block/{}:{}", libc::major(rdev), libc::minor(rdev));
    [
        format!("{dev}/queue/discard_max_bytes"),
        format!("{dev}/../queue/discard_max_bytes"),
    ]
    .iter()
    .find_map(|p| std::fs::read_to_string(p).ok())
    .and_then(|s| s.trim().parse::<u64>().ok())
    .is_some_and(|max| max > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_documented_ones() {
        let o = OpenOptions::default();
        assert_eq!(o.backend, BackendChoice::Auto);
        assert!(!o.read_only);
        assert_eq!(o.lock, LockMode::Exclusive);
        assert_eq!(o.queue_depth, 128);
    }

    /// `name` is what `--backend` takes back (`augefs mount` hands it to its daemon).
    #[cfg(feature = "clap")]
    #[test]
    fn names_are_the_argument_values() {
        use clap::ValueEnum;
        for &b in BackendChoice::value_variants() {
            assert_eq!(BackendChoice::from_str(b.name(), false), Ok(b));
        }
    }

    #[test]
    fn a_directory_is_not_a_device() {
        let err = open(
            Path::new(env!("CARGO_MANIFEST_DIR")),
            &OpenOptions::default(),
        )
        .unwrap_err();
        assert!(matches!(err, DeviceError::NotADevice { .. }), "{err}");
    }
}
