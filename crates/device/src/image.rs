//! Image files: creating them allocated in full, and writing them out once.
//!
//! A file system such as ext4 or xfs keeps an `fallocate`d range as *unwritten* extents:
//! the space is reserved, but the first write into each extent converts it, and the
//! `fdatasync` after that write commits the host's journal for the conversion. A
//! log-structured image writes every block into space it has not written before, so on
//! an image that was only allocated nearly every augefs fsync paid that commit: about
//! twice the latency of an fsync on a written-out image (docs/BENCHMARKS.md §2.4).
//! [`write_holes`] writes zeros over every range the host reports as a hole (`SEEK_HOLE`
//! reports unwritten extents as holes on ext4, xfs and btrfs), once, at mkfs; image files
//! are never discarded afterwards (crate::file), so they stay written.
//!
//! Invariants:
//! - [`create_image`] leaves every byte allocated (`fallocate`, or zeros written where the
//!   host cannot allocate), so the host cannot run out of room under a mounted image.
//! - [`write_holes`] changes no byte a reader sees (a hole reads as zeros) and writes
//!   nothing when the file has no holes, so it can run on any image, even a formatted one.

use crate::buf::AlignedBuf;
use crate::error::DeviceError;
use crate::file::{open, OpenOptions};
use crate::request::IoRequest;
use platform::IoCause;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

/// Zero-fill writes are at most this large, several in flight.
const FILL_CHUNK_BYTES: u64 = 1 << 20;
const FILL_CHUNKS_IN_FLIGHT: usize = 8;

/// Creates `path` if needed and makes it exactly `size_bytes` long, every byte allocated
/// (`fallocate`; where the host file system cannot, [`write_holes`]). Shrinks a longer
/// file. Allocated is not written: mkfs also calls [`write_holes`] unless told not to.
pub fn create_image(path: &Path, size_bytes: u64) -> Result<(), DeviceError> {
    let open_error = |source: io::Error| DeviceError::Open {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(open_error)?;
    if !file.metadata().map_err(open_error)?.is_file() {
        return Err(DeviceError::NotADevice {
            path: path.to_path_buf(),
        });
    }
    file.set_len(size_bytes)
        .map_err(|e| io_error("set_len", 0, e))?;
    let allocated = size_bytes == 0 || allocate(&file, size_bytes)?;
    file.sync_all().map_err(|e| io_error("fsync", 0, e))?;
    drop(file);
    if !allocated {
        write_holes(path, &mut |_, _| {})?;
    }
    Ok(())
}

/// Writes zeros over every hole of the image file at `path` (holes include the unwritten
/// extents of an `fallocate`), through the device layer with direct IO, several writes in
/// flight, then flushes. `progress(done, total)` hears of the start and of each batch
/// written. Returns the bytes written (0 for a file without holes). Takes the image's
/// exclusive lock.
pub fn write_holes(path: &Path, progress: &mut dyn FnMut(u64, u64)) -> Result<u64, DeviceError> {
    let holes = holes_of(path)?;
    let total: u64 = holes.iter().map(|(start, end)| end - start).sum();
    if total == 0 {
        return Ok(0);
    }
    let dev = open(path, &OpenOptions::default())?;
    let block = dev.info().logical_block_bytes as u64;
    let mut chunks = holes.iter().flat_map(|&(start, end)| {
        // Holes are the host's blocks, so aligned; the last may end at an odd file size,
        // whose tail the device does not expose.
        let end = end - end % block;
        assert_eq!(start % block, 0, "a hole at {start} is not block aligned");
        (start..end)
            .step_by(FILL_CHUNK_BYTES as usize)
            .map(move |at| (at, FILL_CHUNK_BYTES.min(end - at)))
    });
    let mut done = 0u64;
    progress(done, total);
    loop {
        let batch: Vec<(u64, u64)> = chunks.by_ref().take(FILL_CHUNKS_IN_FLIGHT).collect();
        if batch.is_empty() {
            break;
        }
        let bytes: u64 = batch.iter().map(|&(_, len)| len).sum();
        let requests = batch
            .into_iter()
            .map(|(at, len)| IoRequest::write(at, AlignedBuf::zeroed(len as usize), IoCause::Tool))
            .collect();
        dev.run(requests)?;
        done += bytes;
        progress(done, total);
    }
    dev.flush(IoCause::Tool)?;
    Ok(done)
}

/// The bytes of the image file at `path` that the host reports as holes (unwritten
/// extents included): what [`write_holes`] would write.
pub fn unwritten_bytes(path: &Path) -> Result<u64, DeviceError> {
    Ok(holes_of(path)?.iter().map(|(start, end)| end - start).sum())
}

/// The holes of the image file at `path` ([`holes`]).
fn holes_of(path: &Path) -> Result<Vec<(u64, u64)>, DeviceError> {
    let file = File::open(path).map_err(|source| DeviceError::Open {
        path: path.to_path_buf(),
        source,
    })?;
    let size_bytes = file.metadata().map_err(|e| io_error("stat", 0, e))?.len();
    holes(&file, size_bytes)
}

/// `fallocate` mode 0 over the whole file. False where the file system cannot allocate
/// (EOPNOTSUPP).
fn allocate(file: &File, size_bytes: u64) -> Result<bool, DeviceError> {
    let fd = file.as_raw_fd();
    loop {
        // SAFETY: fallocate takes only integers.
        let r = unsafe { libc::fallocate(fd, 0, 0, size_bytes as libc::off_t) };
        if r == 0 {
            return Ok(true);
        }
        let error = io::Error::last_os_error();
        match error.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EOPNOTSUPP) => return Ok(false),
            _ => return Err(io_error("fallocate", 0, error)),
        }
    }
}

/// The file's holes below `size_bytes`, as `[start, end)` ranges in order (`SEEK_HOLE`
/// and `SEEK_DATA`; a file system without them reports no holes).
fn holes(file: &File, size_bytes: u64) -> Result<Vec<(u64, u64)>, DeviceError> {
    let fd = file.as_raw_fd();
    let seek = |from: u64, whence: libc::c_int| -> Result<u64, DeviceError> {
        // SAFETY: lseek takes only integers.
        let r = unsafe { libc::lseek(fd, from as libc::off_t, whence) };
        if r >= 0 {
            return Ok(r as u64);
        }
        let error = io::Error::last_os_error();
        match error.raw_os_error() {
            // SEEK_DATA past the last data: the rest is a hole.
            Some(libc::ENXIO) => Ok(size_bytes),
            _ => Err(io_error("lseek", from, error)),
        }
    };
    let mut holes = Vec::new();
    let mut at = 0;
    while at < size_bytes {
        let hole = seek(at, libc::SEEK_HOLE)?.min(size_bytes);
        if hole >= size_bytes {
            break;
        }
        let data = seek(hole, libc::SEEK_DATA)?.min(size_bytes);
        assert!(data > hole, "SEEK_DATA from a hole at {hole} went back");
        holes.push((hole, data));
        at = data;
    }
    Ok(holes)
}

fn io_error(op: &'static str, offset: u64, source: io::Error) -> DeviceError {
    DeviceError::Io { op, offset, source }
}
