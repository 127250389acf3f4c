//! The pread/pwrite backend, and the system calls every file-backed backend shares.
//!
//! [`PreadBackend`] serves a device with one blocking system call per request (`pread`,
//! `pwrite`, `fdatasync`, and a hole punch or `BLKDISCARD` for discard), executed in push
//! order at `submit` through [`SyncQueue`]. It is what `file::open` falls back to when
//! io_uring cannot be set up (containers often forbid it), and what
//! `BackendChoice::Pread` asks for.
//!
//! Invariants:
//! - A read or write transfers the whole buffer or fails: short transfers are continued
//!   and `EINTR` is retried, each a bounded number of times.
//! - Every failure is a [`DeviceError::Io`] carrying the errno of the call that failed and
//!   the byte offset it failed at.
//! - Flush is `fdatasync`: it covers writes that completed before it was submitted, which
//!   with one call at a time is every earlier write (docs/DESIGN.md §4.1, lib.rs invariants).

use crate::backend::{Backend, BackendKind, BackendQueue, DeviceInfo};
use crate::error::DeviceError;
use crate::memory::SyncQueue;
use crate::request::{IoOp, IoRequest};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};

/// Retries of one call interrupted by a signal, or continued after a short transfer,
/// before the request fails. A healthy device needs 0 or 1; the bound only stops a
/// livelock from hiding.
pub(crate) const RETRIES_MAX: u32 = 1024;

/// `_IOR(0x12, 114, size_t)`: size of a block device in bytes. Linux's generic ioctl
/// encoding (x86-64, arm64, riscv64), the architectures augefs supports.
pub(crate) const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;
/// `_IO(0x12, 119)`: discard a byte range `[u64 start, u64 len]` of a block device.
pub(crate) const BLKDISCARD: libc::c_ulong = 0x1277;
/// `_IO(0x12, 104)`: logical sector size of a block device, as an `int`.
pub(crate) const BLKSSZGET: libc::c_ulong = 0x1268;

/// Blocking pread/pwrite/fdatasync on an `O_DIRECT` file descriptor.
#[derive(Debug)]
pub struct PreadBackend {
    file: File,
    info: DeviceInfo,
    queue_depth: usize,
}

impl PreadBackend {
    /// Serves `file` (opened by `file::open`, which filled `info`). Queues accept up to
    /// `queue_depth` requests between pops, although they run one at a time.
    pub fn new(file: File, mut info: DeviceInfo, queue_depth: u32) -> PreadBackend {
        assert!(queue_depth > 0, "queue depth must be positive");
        info.backend = BackendKind::Pread;
        PreadBackend {
            file,
            info,
            queue_depth: queue_depth as usize,
        }
    }

    fn execute(&self, request: &mut IoRequest) -> Result<(), DeviceError> {
        let fd = self.file.as_raw_fd();
        let op = request.op.name();
        match &mut request.op {
            IoOp::Read { offset, buf } => pread_all(fd, buf, *offset),
            IoOp::Write { offset, buf } => pwrite_all(fd, buf, *offset),
            IoOp::Flush => fdatasync(fd).map_err(|source| DeviceError::Io {
                op,
                offset: 0,
                source,
            }),
            IoOp::Discard { offset, len } => discard(fd, self.info.is_block_device, *offset, *len)
                .map_err(|source| DeviceError::Io {
                    op,
                    offset: *offset,
                    source,
                }),
        }
    }
}

impl Backend for PreadBackend {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn queue(&self) -> Result<Box<dyn BackendQueue + '_>, DeviceError> {
        let execute = move |r: &mut IoRequest| self.execute(r);
        Ok(Box::new(SyncQueue::new(self.queue_depth, execute)))
    }
}

/// Fills `buf` from `offset`, continuing short reads and retrying `EINTR`.
pub(crate) fn pread_all(fd: RawFd, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
    let mut done = 0usize;
    let mut retries = 0u32;
    while done < buf.len() {
        let at = offset + done as u64;
        let rest = &mut buf[done..];
        // SAFETY: `rest` is a valid, exclusively borrowed buffer of `rest.len()` bytes.
        let n = unsafe { libc::pread(fd, rest.as_mut_ptr().cast(), rest.len(), at as libc::off_t) };
        match transferred(n, &mut retries, io::ErrorKind::UnexpectedEof) {
            Ok(n) => done += n,
            Err(source) => {
                return Err(DeviceError::Io {
                    op: "read",
                    offset: at,
                    source,
                })
            }
        }
    }
    Ok(())
}

/// Writes all of `buf` at `offset`, continuing short writes and retrying `EINTR`.
pub(crate) fn pwrite_all(fd: RawFd, buf: &[u8], offset: u64) -> Result<(), DeviceError> {
    let mut done = 0usize;
    let mut retries = 0u32;
    while done < buf.len() {
        let at = offset + done as u64;
        let rest = &buf[done..];
        // SAFETY: `rest` is a valid buffer of `rest.len()` bytes, only read by the kernel.
        let n = unsafe { libc::pwrite(fd, rest.as_ptr().cast(), rest.len(), at as libc::off_t) };
        match transferred(n, &mut retries, io::ErrorKind::WriteZero) {
            Ok(n) => done += n,
            Err(source) => {
                return Err(DeviceError::Io {
                    op: "write",
                    offset: at,
                    source,
                })
            }
        }
    }
    Ok(())
}

/// Interprets one pread/pwrite return value: bytes moved (0 on a retried `EINTR`), or the
/// error. A zero-byte transfer with bytes left means the file ended (`zero_kind`).
fn transferred(n: isize, retries: &mut u32, zero_kind: io::ErrorKind) -> io::Result<usize> {
    if n > 0 {
        return Ok(n as usize);
    }
    let error = if n == 0 {
        io::Error::from(zero_kind)
    } else {
        io::Error::last_os_error()
    };
    let again = error.kind() == io::ErrorKind::Interrupted;
    if !again || *retries >= RETRIES_MAX {
        return Err(error);
    }
    *retries += 1;
    Ok(0)
}

/// `fdatasync`, retrying `EINTR`. A failure is final: the caller must not assume that a
/// retried sync covers the writes the failed one was meant to (STYLE.md "Errors").
pub(crate) fn fdatasync(fd: RawFd) -> io::Result<()> {
    for _ in 0..RETRIES_MAX {
        // SAFETY: fdatasync only reads the descriptor number.
        if unsafe { libc::fdatasync(fd) } == 0 {
            return Ok(());
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
    Err(io::Error::from_raw_os_error(libc::EINTR))
}

/// Lets the device reclaim `[offset, offset + len)`: `BLKDISCARD` on a block device (the
/// range then reads back unspecified), a hole punch on a file (it reads back as zeros).
pub(crate) fn discard(fd: RawFd, is_block_device: bool, offset: u64, len: u64) -> io::Result<()> {
    if is_block_device {
        let range: [u64; 2] = [offset, len];
        // SAFETY: BLKDISCARD reads two u64 from the pointer, which points at `range`.
        let r = unsafe { libc::ioctl(fd, BLKDISCARD as _, range.as_ptr()) };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    } else {
        punch_hole(fd, offset, len)
    }
}

/// `fallocate(PUNCH_HOLE | KEEP_SIZE)`, retrying `EINTR`.
fn punch_hole(fd: RawFd, offset: u64, len: u64) -> io::Result<()> {
    let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
    for _ in 0..RETRIES_MAX {
        // SAFETY: fallocate takes only integers.
        let r = unsafe { libc::fallocate(fd, mode, offset as libc::off_t, len as libc::off_t) };
        if r == 0 {
            return Ok(());
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
    Err(io::Error::from_raw_os_error(libc::EINTR))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_transfer_is_end_of_file_and_eintr_is_bounded() {
        let mut retries = 0;
        let e = transferred(0, &mut retries, io::ErrorKind::UnexpectedEof).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        assert_eq!(
            transferred(4096, &mut retries, io::ErrorKind::WriteZero).unwrap(),
            4096
        );
        assert_eq!(retries, 0);
    }

    #[test]
    fn ioctl_numbers_match_the_generic_encoding() {
        // _IOC(dir, type, nr, size) = dir << 30 | size << 16 | type << 8 | nr.
        let ioc = |dir: u64, nr: u64, size: u64| {
            (dir << 30 | size << 16 | 0x12 << 8 | nr) as libc::c_ulong
        };
        assert_eq!(BLKGETSIZE64, ioc(2, 114, 8));
        assert_eq!(BLKDISCARD, ioc(0, 119, 0));
        assert_eq!(BLKSSZGET, ioc(0, 104, 0));
        assert_eq!(BLKSSZGET, libc::BLKSSZGET as libc::c_ulong);
    }
}
