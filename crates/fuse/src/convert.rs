//! Conversions between vfs types and the FUSE ABI's: attributes, kinds, times, errors.

use crate::proto::abi;
use std::time::Duration;
use vfs::{Kind, Metadata, VfsError};

/// The errno of `e`; device and corruption errors are also printed (the caller only
/// sees the errno).
pub fn errno(e: &VfsError) -> i32 {
    let code = e.errno();
    if matches!(code, libc::EIO | libc::EUCLEAN | libc::EROFS) {
        eprintln!("augefs: {e}");
    }
    code
}

/// The `S_IFMT` bits of `kind`.
pub fn file_type(kind: Kind) -> u32 {
    kind.mode_bits()
}

/// The readdir type (`DT_*`) of `kind`.
pub fn dirent_type(kind: Kind) -> u32 {
    u32::from(kind.dirent_type())
}

/// Nanoseconds since the epoch as FUSE's (seconds, nanoseconds), the nanoseconds in
/// 0..1e9 also before the epoch.
pub fn split_ns(ns: i64) -> (u64, u32) {
    (
        ns.div_euclid(1_000_000_000) as u64,
        ns.rem_euclid(1_000_000_000) as u32,
    )
}

/// FUSE's (seconds, nanoseconds) as nanoseconds since the epoch (saturating).
pub fn join_ns(secs: u64, nsec: u32) -> i64 {
    (secs as i64)
        .saturating_mul(1_000_000_000)
        .saturating_add(i64::from(nsec))
}

pub fn attr(m: &Metadata) -> abi::Attr {
    let (atime, atimensec) = split_ns(m.atime_ns);
    let (mtime, mtimensec) = split_ns(m.mtime_ns);
    let (ctime, ctimensec) = split_ns(m.ctime_ns);
    abi::Attr {
        ino: m.ino,
        size: m.size,
        blocks: m.blocks,
        atime,
        mtime,
        ctime,
        atimensec,
        mtimensec,
        ctimensec,
        mode: file_type(m.kind) | (m.mode & 0o7777),
        nlink: m.nlink,
        uid: m.uid,
        gid: m.gid,
        // The kernel's 32-bit encoding, as the inode holds it (st_rdev is the kernel's
        // decoding of it): what the kernel's own device and FIFO code then uses.
        rdev: vfs::records::rdev_of(m.rdev).expect("an inode's device number fits 32 bits"),
        blksize: m.blksize,
        flags: 0,
    }
}

/// A cache timeout as FUSE's (seconds, nanoseconds).
pub fn timeout(d: Duration) -> (u64, u32) {
    (d.as_secs(), d.subsec_nanos())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_trip_on_both_sides_of_the_epoch() {
        for ns in [0, 1, -1, 1_700_000_000_123_456_789, -86_400_000_000_007] {
            let (s, n) = split_ns(ns);
            assert!(n < 1_000_000_000);
            assert_eq!(join_ns(s, n), ns);
        }
        assert_eq!(dirent_type(Kind::Dir), libc::DT_DIR as u32);
        assert_eq!(dirent_type(Kind::Symlink), libc::DT_LNK as u32);
        assert_eq!(dirent_type(Kind::Fifo), libc::DT_FIFO as u32);
        assert_eq!(file_type(Kind::CharDev), libc::S_IFCHR);
    }
}
