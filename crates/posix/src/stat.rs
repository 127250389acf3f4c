//! vfs attributes as the kernel's structures: `libc::stat` (the same layout as
//! `stat64` on 64-bit Linux), `libc::statx` and `libc::statfs`.

use vfs::{Metadata, StatFs};

/// `st_dev` of every augefs inode: a number no block device uses (major 0 is the
/// kernel's anonymous devices; 0xa06e5 stays clear of the low ones it hands out).
pub const DEV: u64 = 0xa06e5;
/// `f_type` of `statfs`: "AUGE" in ASCII.
pub const FS_MAGIC: i64 = 0x4155_4745;
/// Preferred IO size: one block.
pub const BLKSIZE: i64 = 4096;

fn split(ns: i64) -> (i64, i64) {
    (ns.div_euclid(1_000_000_000), ns.rem_euclid(1_000_000_000))
}

/// `m` as `struct stat`.
pub fn to_stat(m: &Metadata) -> libc::stat {
    // SAFETY: `libc::stat` is plain old data; all zero bytes is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    st.st_dev = DEV;
    st.st_ino = m.ino;
    st.st_mode = m.mode;
    st.st_nlink = u64::from(m.nlink);
    st.st_uid = m.uid;
    st.st_gid = m.gid;
    st.st_rdev = m.rdev;
    st.st_size = m.size as i64;
    st.st_blksize = BLKSIZE;
    st.st_blocks = m.blocks as i64;
    (st.st_atime, st.st_atime_nsec) = split(m.atime_ns);
    (st.st_mtime, st.st_mtime_nsec) = split(m.mtime_ns);
    (st.st_ctime, st.st_ctime_nsec) = split(m.ctime_ns);
    st
}

fn stamp(ns: i64) -> libc::statx_timestamp {
    let (s, n) = split(ns);
    // SAFETY: plain old data; zero is valid (the padding field included).
    let mut t: libc::statx_timestamp = unsafe { std::mem::zeroed() };
    t.tv_sec = s;
    t.tv_nsec = n as u32;
    t
}

/// `m` as `struct statx` (every basic field and the birth time).
pub fn to_statx(m: &Metadata) -> libc::statx {
    // SAFETY: plain old data; zero is valid.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    st.stx_mask = libc::STATX_BASIC_STATS | libc::STATX_BTIME;
    st.stx_blksize = BLKSIZE as u32;
    st.stx_nlink = m.nlink;
    st.stx_uid = m.uid;
    st.stx_gid = m.gid;
    st.stx_mode = m.mode as u16;
    st.stx_ino = m.ino;
    st.stx_size = m.size;
    st.stx_blocks = m.blocks;
    st.stx_atime = stamp(m.atime_ns);
    st.stx_btime = stamp(m.btime_ns);
    st.stx_ctime = stamp(m.ctime_ns);
    st.stx_mtime = stamp(m.mtime_ns);
    st.stx_rdev_major = libc::major(m.rdev);
    st.stx_rdev_minor = libc::minor(m.rdev);
    st.stx_dev_major = (DEV >> 8) as u32;
    st.stx_dev_minor = (DEV & 0xff) as u32;
    st
}

/// `s` as `struct statfs`.
pub fn to_statfs(s: &StatFs) -> libc::statfs {
    // SAFETY: plain old data; zero is valid.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    st.f_type = FS_MAGIC;
    st.f_bsize = i64::from(s.block_size);
    st.f_frsize = i64::from(s.block_size);
    st.f_blocks = s.blocks;
    st.f_bfree = s.blocks_free;
    st.f_bavail = s.blocks_free;
    st.f_files = s.files;
    st.f_ffree = s.files_free;
    st.f_namelen = i64::from(s.name_max);
    st
}
