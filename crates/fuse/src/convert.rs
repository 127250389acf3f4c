//! Conversions between vfs types and FUSE's: attributes, kinds, times, errors.

use fuser::{Errno, FileAttr, FileType, INodeNo};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use vfs::{Kind, Metadata, VfsError};

pub fn errno(e: &VfsError) -> Errno {
    let code = e.errno();
    if matches!(code, libc::EIO | libc::EUCLEAN | libc::EROFS) {
        // A device or corruption error: say what it was, the caller only sees the errno.
        eprintln!("augefs: {e}");
    }
    Errno::from_i32(code)
}

pub fn file_type(kind: Kind) -> FileType {
    match kind {
        Kind::File => FileType::RegularFile,
        Kind::Dir => FileType::Directory,
        Kind::Symlink => FileType::Symlink,
    }
}

/// Nanoseconds since the epoch (negative: before it) as a `SystemTime`.
pub fn system_time(ns: i64) -> SystemTime {
    let d = Duration::from_nanos(ns.unsigned_abs());
    if ns >= 0 {
        UNIX_EPOCH + d
    } else {
        UNIX_EPOCH - d
    }
}

/// A `SystemTime` as nanoseconds since the epoch (saturating past ~2262).
pub fn nanos(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        Err(e) => i64::try_from(e.duration().as_nanos()).map_or(i64::MIN, |n| -n),
    }
}

pub fn attr(m: &Metadata) -> FileAttr {
    FileAttr {
        ino: INodeNo(m.ino),
        size: m.size,
        blocks: m.blocks,
        atime: system_time(m.atime_ns),
        mtime: system_time(m.mtime_ns),
        ctime: system_time(m.ctime_ns),
        crtime: system_time(m.btime_ns),
        kind: file_type(m.kind),
        perm: (m.mode & 0o7777) as u16,
        nlink: m.nlink,
        uid: m.uid,
        gid: m.gid,
        rdev: m.rdev as u32,
        blksize: m.blksize,
        flags: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_trip_on_both_sides_of_the_epoch() {
        for ns in [0, 1, -1, 1_700_000_000_123_456_789, -86_400_000_000_007] {
            assert_eq!(nanos(system_time(ns)), ns);
        }
    }
}
