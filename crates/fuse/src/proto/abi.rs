//! The kernel ABI of FUSE, as include/uapi/linux/fuse.h defines it for protocol 7.38 (the
//! minor version this server negotiates; newer kernels speak down to it). Every struct
//! is `#[repr(C)]`, made of fixed-size integers only, and padded to 8 bytes, so any byte
//! pattern is a valid value ([`Pod`]) and its size is checked against the header's.
//!
//! Invariants:
//! - Struct sizes equal the header's (the `const` assertions below); a change of the
//!   negotiated minor version must be checked against the compat sizes the kernel uses
//!   for older servers.
//! - Only [`Pod`] types are read from or written to the wire.

#![allow(missing_docs)]

/// The major version of the protocol (the kernel refuses any other).
pub const KERNEL_VERSION: u32 = 7;
/// The minor version this server speaks (the kernel uses the lower of its own and this).
pub const KERNEL_MINOR_VERSION: u32 = 38;
/// The root's node id.
pub const ROOT_ID: u64 = 1;
/// The kernel refuses reads of /dev/fuse into smaller buffers.
pub const MIN_READ_BUFFER: usize = 8192;
/// The kernel's upper bound of `max_pages` unless the fs.fuse.max_pages_limit sysctl
/// (Linux 6.13+) raises it.
pub const MAX_PAGES_DEFAULT: u32 = 256;

/// Plain data: `#[repr(C)]`, only integer fields, no padding the compiler adds, so every
/// byte pattern of its size is a value and its bytes may be sent as they are.
///
/// # Safety
/// Implement only for types that satisfy the above.
pub unsafe trait Pod: Copy + Default + 'static {}

macro_rules! pod {
    ($($t:ident = $size:expr),* $(,)?) => {
        $(
            // SAFETY: each type below is repr(C) with only u16/u32/u64 fields laid out
            // without gaps (its size, asserted here, is the sum of its fields').
            unsafe impl Pod for $t {}
            const _: () = assert!(std::mem::size_of::<$t>() == $size);
        )*
    };
}

pub mod opcode {
    pub const LOOKUP: u32 = 1;
    pub const FORGET: u32 = 2;
    pub const GETATTR: u32 = 3;
    pub const SETATTR: u32 = 4;
    pub const READLINK: u32 = 5;
    pub const SYMLINK: u32 = 6;
    pub const MKNOD: u32 = 8;
    pub const MKDIR: u32 = 9;
    pub const UNLINK: u32 = 10;
    pub const RMDIR: u32 = 11;
    pub const RENAME: u32 = 12;
    pub const LINK: u32 = 13;
    pub const OPEN: u32 = 14;
    pub const READ: u32 = 15;
    pub const WRITE: u32 = 16;
    pub const STATFS: u32 = 17;
    pub const RELEASE: u32 = 18;
    pub const FSYNC: u32 = 20;
    pub const SETXATTR: u32 = 21;
    pub const GETXATTR: u32 = 22;
    pub const LISTXATTR: u32 = 23;
    pub const REMOVEXATTR: u32 = 24;
    pub const FLUSH: u32 = 25;
    pub const INIT: u32 = 26;
    pub const OPENDIR: u32 = 27;
    pub const READDIR: u32 = 28;
    pub const RELEASEDIR: u32 = 29;
    pub const FSYNCDIR: u32 = 30;
    pub const GETLK: u32 = 31;
    pub const SETLK: u32 = 32;
    pub const SETLKW: u32 = 33;
    pub const ACCESS: u32 = 34;
    pub const CREATE: u32 = 35;
    pub const INTERRUPT: u32 = 36;
    pub const BMAP: u32 = 37;
    pub const DESTROY: u32 = 38;
    pub const IOCTL: u32 = 39;
    pub const POLL: u32 = 40;
    pub const BATCH_FORGET: u32 = 42;
    pub const FALLOCATE: u32 = 43;
    pub const READDIRPLUS: u32 = 44;
    pub const RENAME2: u32 = 45;
    pub const LSEEK: u32 = 46;
    pub const COPY_FILE_RANGE: u32 = 47;
    pub const SYNCFS: u32 = 50;
    pub const TMPFILE: u32 = 51;
}

/// INIT flags (`fuse_init_in.flags`, `fuse_init_out.flags`; bits 32-63 go in `flags2`).
pub mod init {
    pub const ASYNC_READ: u64 = 1 << 0;
    pub const POSIX_LOCKS: u64 = 1 << 1;
    pub const ATOMIC_O_TRUNC: u64 = 1 << 3;
    /// The server answers LOOKUPs of `.` and `..` (open_by_handle_at, NFS export).
    pub const EXPORT_SUPPORT: u64 = 1 << 4;
    pub const BIG_WRITES: u64 = 1 << 5;
    pub const FLOCK_LOCKS: u64 = 1 << 10;
    pub const AUTO_INVAL_DATA: u64 = 1 << 12;
    /// READDIRPLUS: a directory listing carries each entry's attributes.
    pub const DO_READDIRPLUS: u64 = 1 << 13;
    /// The kernel uses READDIRPLUS only while lookups of the listed names follow.
    pub const READDIRPLUS_AUTO: u64 = 1 << 14;
    pub const ASYNC_DIO: u64 = 1 << 15;
    pub const WRITEBACK_CACHE: u64 = 1 << 16;
    pub const PARALLEL_DIROPS: u64 = 1 << 18;
    pub const MAX_PAGES: u64 = 1 << 22;
    /// The kernel caches symbolic links' targets in its page cache.
    pub const CACHE_SYMLINKS: u64 = 1 << 23;
    pub const INIT_EXT: u64 = 1 << 30;
    /// The server drops set-id bits on writes, truncates and opens with O_TRUNC by an
    /// unprivileged caller, told by the flags below (protocol 7.33).
    pub const HANDLE_KILLPRIV_V2: u64 = 1 << 28;
    /// Shared mappings of files opened with FOPEN_DIRECT_IO (flags2 bit 4, Linux 6.6):
    /// without it such an mmap is ENODEV. The kernel then caches the mapped pages
    /// (and only those) and writes them back with WRITE requests.
    pub const DIRECT_IO_ALLOW_MMAP: u64 = 1 << 36;
    /// FUSE over io_uring (protocol 7.42): requests come through ring entries.
    pub const OVER_IO_URING: u64 = 1 << 41;
}

/// `fuse_write_in.write_flags`: the writer lacks CAP_FSETID (HANDLE_KILLPRIV_V2).
pub const WRITE_KILL_SUIDGID: u32 = 1 << 2;
/// `fuse_open_in.open_flags`: an O_TRUNC open by a caller lacking CAP_FSETID.
pub const OPEN_KILL_SUIDGID: u32 = 1 << 0;

/// `fuse_open_out.open_flags`.
pub mod fopen {
    pub const DIRECT_IO: u32 = 1 << 0;
    pub const KEEP_CACHE: u32 = 1 << 1;
    pub const NOFLUSH: u32 = 1 << 5;
}

/// `fuse_setattr_in.valid`.
pub mod fattr {
    pub const MODE: u32 = 1 << 0;
    pub const UID: u32 = 1 << 1;
    pub const GID: u32 = 1 << 2;
    pub const SIZE: u32 = 1 << 3;
    pub const ATIME: u32 = 1 << 4;
    pub const MTIME: u32 = 1 << 5;
    pub const ATIME_NOW: u32 = 1 << 7;
    pub const MTIME_NOW: u32 = 1 << 8;
    /// With SIZE: the truncating caller lacks CAP_FSETID (HANDLE_KILLPRIV_V2).
    pub const KILL_SUIDGID: u32 = 1 << 11;
}

pub const RELEASE_FLOCK_UNLOCK: u32 = 1 << 1;
pub const LK_FLOCK: u32 = 1 << 0;
pub const FSYNC_FDATASYNC: u32 = 1 << 0;
/// `_IOR(229, 0, uint32_t)`: attach a new /dev/fuse descriptor to a session.
pub const DEV_IOC_CLONE: u64 = 0x8004_e500;

/// FUSE over io_uring (protocol 7.42): an entry's header area is the request's or
/// reply's header (`in_out`, 128 bytes), the opcode's argument struct (`op_in`, 128
/// bytes) and the entry's own fields ([`UringEntInOut`]); the rest of a request's
/// arguments and all of a reply's go in the entry's payload buffer.
pub const URING_IN_OUT_HEADER_BYTES: usize = 128;
pub const URING_OP_IN_OUT_BYTES: usize = 128;
/// The size of `fuse_uring_req_header`.
pub const URING_REQ_HEADER_BYTES: usize =
    URING_IN_OUT_HEADER_BYTES + URING_OP_IN_OUT_BYTES + std::mem::size_of::<UringEntInOut>();

/// `enum fuse_uring_cmd`: the `cmd_op` of an IORING_OP_URING_CMD on /dev/fuse.
pub mod uring_cmd {
    /// Register an entry's buffers and wait for a request.
    pub const REGISTER: u32 = 1;
    /// Send the entry's reply and wait for the next request.
    pub const COMMIT_AND_FETCH: u32 = 2;
}

/// `fuse_uring_ent_in_out`: the request's `commit_id` (its unique) and how many payload
/// bytes the request, or the reply, holds.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct UringEntInOut {
    pub flags: u64,
    pub commit_id: u64,
    pub payload_sz: u32,
    pub padding: u32,
    pub reserved: u64,
}

/// `fuse_uring_cmd_req`, in the 80-byte command area of a 128-byte SQE.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct UringCmdReq {
    pub flags: u64,
    pub commit_id: u64,
    pub qid: u16,
    pub padding: [u16; 3],
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct InHeader {
    pub len: u32,
    pub opcode: u32,
    pub unique: u64,
    pub nodeid: u64,
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
    pub total_extlen: u16,
    pub padding: u16,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct OutHeader {
    pub len: u32,
    pub error: i32,
    pub unique: u64,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Attr {
    pub ino: u64,
    pub size: u64,
    pub blocks: u64,
    pub atime: u64,
    pub mtime: u64,
    pub ctime: u64,
    pub atimensec: u32,
    pub mtimensec: u32,
    pub ctimensec: u32,
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u32,
    pub blksize: u32,
    pub flags: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct EntryOut {
    pub nodeid: u64,
    pub generation: u64,
    pub entry_valid: u64,
    pub attr_valid: u64,
    pub entry_valid_nsec: u32,
    pub attr_valid_nsec: u32,
    pub attr: Attr,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct AttrOut {
    pub attr_valid: u64,
    pub attr_valid_nsec: u32,
    pub dummy: u32,
    pub attr: Attr,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Kstatfs {
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub bsize: u32,
    pub namelen: u32,
    pub frsize: u32,
    pub padding: u32,
    pub spare: [u32; 6],
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct FileLock {
    pub start: u64,
    /// Inclusive; `i64::MAX` (OFFSET_MAX) means to the end of any file.
    pub end: u64,
    pub typ: u32,
    /// The holder's thread group id, in the server's pid namespace.
    pub pid: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ForgetIn {
    pub nlookup: u64,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ForgetOne {
    pub nodeid: u64,
    pub nlookup: u64,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct BatchForgetIn {
    pub count: u32,
    pub dummy: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct GetattrIn {
    pub getattr_flags: u32,
    pub dummy: u32,
    pub fh: u64,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct MknodIn {
    pub mode: u32,
    pub rdev: u32,
    pub umask: u32,
    pub padding: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct MkdirIn {
    pub mode: u32,
    pub umask: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct RenameIn {
    pub newdir: u64,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Rename2In {
    pub newdir: u64,
    pub flags: u32,
    pub padding: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct LinkIn {
    pub oldnodeid: u64,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct SetattrIn {
    pub valid: u32,
    pub padding: u32,
    pub fh: u64,
    pub size: u64,
    pub lock_owner: u64,
    pub atime: u64,
    pub mtime: u64,
    pub ctime: u64,
    pub atimensec: u32,
    pub mtimensec: u32,
    pub ctimensec: u32,
    pub mode: u32,
    pub unused4: u32,
    pub uid: u32,
    pub gid: u32,
    pub unused5: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenIn {
    pub flags: u32,
    pub open_flags: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CreateIn {
    pub flags: u32,
    pub mode: u32,
    pub umask: u32,
    pub open_flags: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenOut {
    pub fh: u64,
    pub open_flags: u32,
    pub padding: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ReleaseIn {
    pub fh: u64,
    pub flags: u32,
    pub release_flags: u32,
    pub lock_owner: u64,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct FlushIn {
    pub fh: u64,
    pub unused: u32,
    pub padding: u32,
    pub lock_owner: u64,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadIn {
    pub fh: u64,
    pub offset: u64,
    pub size: u32,
    pub read_flags: u32,
    pub lock_owner: u64,
    pub flags: u32,
    pub padding: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteIn {
    pub fh: u64,
    pub offset: u64,
    pub size: u32,
    pub write_flags: u32,
    pub lock_owner: u64,
    pub flags: u32,
    pub padding: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteOut {
    pub size: u32,
    pub padding: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct StatfsOut {
    pub st: Kstatfs,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct FsyncIn {
    pub fh: u64,
    pub fsync_flags: u32,
    pub padding: u32,
}

/// Without FUSE_SETXATTR_EXT (not negotiated) the kernel sends this 8-byte form.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct SetxattrIn {
    pub size: u32,
    pub flags: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct GetxattrIn {
    pub size: u32,
    pub padding: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct GetxattrOut {
    pub size: u32,
    pub padding: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct LkIn {
    pub fh: u64,
    pub owner: u64,
    pub lk: FileLock,
    pub lk_flags: u32,
    pub padding: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct LkOut {
    pub lk: FileLock,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct AccessIn {
    pub mask: u32,
    pub padding: u32,
}

/// The kernel sends all 64 bytes from 7.36 on (FUSE_INIT_EXT); older kernels send the
/// first 16, which [`crate::proto::request`] accepts.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct InitIn {
    pub major: u32,
    pub minor: u32,
    pub max_readahead: u32,
    pub flags: u32,
    pub flags2: u32,
    pub unused: [u32; 11],
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct InitOut {
    pub major: u32,
    pub minor: u32,
    pub max_readahead: u32,
    pub flags: u32,
    pub max_background: u16,
    pub congestion_threshold: u16,
    pub max_write: u32,
    pub time_gran: u32,
    pub max_pages: u16,
    pub map_alignment: u16,
    pub flags2: u32,
    pub unused: [u32; 7],
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct InterruptIn {
    pub unique: u64,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct FallocateIn {
    pub fh: u64,
    pub offset: u64,
    pub length: u64,
    pub mode: u32,
    pub padding: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct LseekIn {
    pub fh: u64,
    pub offset: u64,
    pub whence: u32,
    pub padding: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct LseekOut {
    pub offset: u64,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct SyncfsIn {
    pub padding: u64,
}

/// A directory entry's fixed part; the name follows, the record padded to 8 bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Dirent {
    pub ino: u64,
    pub off: u64,
    pub namelen: u32,
    pub typ: u32,
}

/// `fuse_notify_inval_inode_out`: forget cached attributes of `ino` and, from `off`
/// (negative: none), `len` bytes of its pages (0: to the end).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct NotifyInvalInodeOut {
    pub ino: u64,
    pub off: i64,
    pub len: i64,
}

/// `fuse_notify_inval_entry_out`: forget the name (`namelen` bytes and a NUL follow)
/// in directory `parent`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct NotifyInvalEntryOut {
    pub parent: u64,
    pub namelen: u32,
    pub flags: u32,
}

/// `fuse_notify_delete_out`: the name (`namelen` bytes and a NUL follow) in `parent`
/// that named `child` is gone.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct NotifyDeleteOut {
    pub parent: u64,
    pub child: u64,
    pub namelen: u32,
    pub padding: u32,
}

/// A READDIRPLUS entry's fixed part: the entry (nodeid 0: no attributes, no lookup
/// counted) and the directory entry; the name follows, padded to 8 bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct DirentPlus {
    pub entry_out: EntryOut,
    pub dirent: Dirent,
}

/// Notification codes, sent in `OutHeader::error` with `unique` 0.
pub mod notify {
    pub const INVAL_INODE: i32 = 2;
    pub const INVAL_ENTRY: i32 = 3;
    pub const DELETE: i32 = 6;
}

pod! {
    UringEntInOut = 32, UringCmdReq = 24,
    NotifyInvalInodeOut = 24, NotifyInvalEntryOut = 16, NotifyDeleteOut = 24,
    DirentPlus = 152,
    InHeader = 40, OutHeader = 16, Attr = 88, EntryOut = 128, AttrOut = 104,
    Kstatfs = 80, FileLock = 24, ForgetIn = 8, ForgetOne = 16, BatchForgetIn = 8,
    GetattrIn = 16, MknodIn = 16, MkdirIn = 8, RenameIn = 8, Rename2In = 16, LinkIn = 8,
    SetattrIn = 88, OpenIn = 8, CreateIn = 16, OpenOut = 16, ReleaseIn = 24, FlushIn = 24,
    ReadIn = 40, WriteIn = 40, WriteOut = 8, StatfsOut = 80, FsyncIn = 16, SetxattrIn = 8,
    GetxattrIn = 8, GetxattrOut = 8, LkIn = 48, LkOut = 24, AccessIn = 8, InitIn = 64,
    InitOut = 64, InterruptIn = 8, FallocateIn = 32, LseekIn = 24, LseekOut = 8,
    SyncfsIn = 8, Dirent = 24,
}

/// The bytes of `v`, as the kernel reads them.
pub fn bytes_of<T: Pod>(v: &T) -> &[u8] {
    // SAFETY: T is Pod: every byte of it is initialized (no padding), and the slice
    // borrows `v` for its lifetime.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), std::mem::size_of::<T>()) }
}

/// A `T` from the first `size_of::<T>()` bytes of `b`, if there are that many.
pub fn read<T: Pod>(b: &[u8]) -> Option<T> {
    if b.len() < std::mem::size_of::<T>() {
        return None;
    }
    // SAFETY: the length was checked; T is Pod, so any bytes are a value; the read is
    // unaligned because request buffers are only 8-byte aligned by convention.
    Some(unsafe { std::ptr::read_unaligned(b.as_ptr().cast::<T>()) })
}
