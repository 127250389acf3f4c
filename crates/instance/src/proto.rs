//! Requests an attached client sends the instance, and the payloads of the replies
//! (docs/DESIGN.md §12.5). A request frame is an op code and its fields ([`crate::wire`]);
//! a reply frame is a status (0 or an errno) and, on success, the op's payload.
//!
//! Invariants:
//! - [`Request::decode`] accepts exactly what [`Request::encode`] writes, and answers
//!   anything else with an errno (EPROTO, ENAMETOOLONG, E2BIG, EINVAL), never a panic:
//!   it is fuzzed (crates/fuzzing).
//! - Names are at most NAME_MAX bytes, paths PATH_MAX, xattr values 64 KiB, data
//!   [`crate::IO_BYTES_MAX`]; counts are bounded before anything is allocated.

use crate::wire::{Reader, Writer};
use crate::IO_BYTES_MAX;
use format::InodeNo;
use posix::backend::LockSpace;
use posix::{Errno, Result};
use vfs::locks::LockKind;
use vfs::{AttrChanges, Kind, Metadata, RenameMode, TimeChange, XattrMode};

/// The protocol's version: moved by every change of a request or a reply.
pub const VERSION: u32 = 7;

const NAME_MAX: usize = 255;
const PATH_MAX: usize = 4096;
const XATTR_VALUE_MAX: usize = 64 * 1024;
/// Entries one readdir request may ask for.
pub const READDIR_MAX: u32 = 1024;
/// Most bytes an open's reply carries of the file it opened (a larger ask is EINVAL).
pub const PREFETCH_MAX: u32 = 64 * 1024;

/// A request, borrowing its strings and data from the frame.
#[derive(Debug, Clone, PartialEq)]
pub enum Request<'a> {
    /// First request on a connection: join session `token` (0: start a new one).
    Hello {
        token: u64,
        /// [`VERSION`]: a client and an instance of different builds refuse each other
        /// at once (EPROTO) instead of misreading a reply.
        version: u32,
    },
    /// Reply (as ResolveParent's, Lookup's, Readdir's and Access's): the change count before
    /// looking, if quiet (the client may keep the answer while the count stays:
    /// `crate::namecache`), then the answer.
    Resolve {
        start: InodeNo,
        follow: bool,
        path: &'a [u8],
    },
    ResolveParent {
        start: InodeNo,
        path: &'a [u8],
    },
    Lookup {
        dir: InodeNo,
        name: &'a [u8],
    },
    Stat {
        ino: InodeNo,
    },
    /// First request of a connection that carries the session's posted requests
    /// (docs/DESIGN.md §12.5 "Posted requests"): answered once, then never again; its
    /// frames (Write, SetAttr and CloseQuiet only) run in order and report failures at
    /// the file's next fsync. `sent`: posted requests the session sent before, on
    /// earlier such connections. `ring`: the client asks for a posting ring
    /// (`crate::postring`), sent with the reply if made; its posts then go there, and
    /// the socket carries only rings of the bell (empty frames).
    Posts {
        token: u64,
        version: u32,
        sent: u64,
        ring: bool,
    },
    /// No reply: the connection's next request runs only once the session's first
    /// `count` posted requests have run (or its posting connection is gone).
    Barrier {
        count: u64,
    },
    /// Close, with no reply: the client goes on at once (a close has nothing to
    /// report; the next request on the connection runs after it).
    CloseQuiet {
        handle: u64,
    },
    /// The shared change page and this identity's attribute table ([`crate::table`]),
    /// sent as descriptors with the reply.
    Tables,
    /// Create, Remove and Rename with their names given as paths from a start
    /// directory: the instance resolves the parents, so the call is one request.
    CreateAt {
        start: InodeNo,
        kind: Kind,
        perm: u32,
        path: &'a [u8],
        target: Option<&'a [u8]>,
    },
    RemoveAt {
        start: InodeNo,
        dir: bool,
        path: &'a [u8],
    },
    RenameAt {
        from: InodeNo,
        from_path: &'a [u8],
        to: InodeNo,
        to_path: &'a [u8],
        mode: RenameMode,
    },
    /// A mailbox for this connection (`crate::mailbox`), sent as a descriptor with the
    /// reply; messages that fit go through it from then on. Not `writable`: sealed so
    /// the client can only map it read-only, and only replies go through it.
    Mailbox {
        writable: bool,
    },
    /// Resolve and stat in one.
    StatAt {
        start: InodeNo,
        follow: bool,
        path: &'a [u8],
    },
    Access {
        ino: InodeNo,
        mask: u32,
    },
    /// Reply: the inode, its kind, then the handle (0: none), read and write, then the
    /// lease's budget in bytes (0: none; writes and attribute changes of this handle
    /// may then be posted, up to that many bytes written) and the file's owner; last,
    /// the file's data count (if quiet) followed by all its bytes, when the open is for
    /// reading only and the file has at most `prefetch` of them (else none: its first
    /// read asks, as every read of a file the client keeps no pages of).
    Open {
        start: InodeNo,
        flags: i32,
        mode: u32,
        prefetch: u32,
        path: &'a [u8],
    },
    Close {
        handle: u64,
    },
    Create {
        parent: InodeNo,
        kind: Kind,
        perm: u32,
        name: &'a [u8],
        target: Option<&'a [u8]>,
    },
    Mknod {
        parent: InodeNo,
        kind: Kind,
        perm: u32,
        dev: u64,
        name: &'a [u8],
    },
    Remove {
        parent: InodeNo,
        dir: bool,
        name: &'a [u8],
    },
    Rename {
        from: InodeNo,
        from_name: &'a [u8],
        to: InodeNo,
        to_name: &'a [u8],
        mode: RenameMode,
    },
    Link {
        ino: InodeNo,
        parent: InodeNo,
        name: &'a [u8],
    },
    Readlink {
        ino: InodeNo,
    },
    SetAttr {
        ino: InodeNo,
        changes: AttrChanges,
    },
    TruncateIno {
        ino: InodeNo,
        size: u64,
    },
    SetXattr {
        ino: InodeNo,
        mode: XattrMode,
        name: &'a [u8],
        value: &'a [u8],
    },
    GetXattr {
        ino: InodeNo,
        name: &'a [u8],
    },
    ListXattr {
        ino: InodeNo,
    },
    RemoveXattr {
        ino: InodeNo,
        name: &'a [u8],
    },
    Readdir {
        dir: InodeNo,
        max: u32,
        after: Option<&'a [u8]>,
    },
    Statfs,
    /// Reply: the file's data count before the read if it was quiet (the client may
    /// keep the bytes while the count stays: [`crate::table::ChangePage::data_same`]),
    /// then the bytes.
    Read {
        handle: u64,
        offset: u64,
        len: u32,
    },
    Write {
        handle: u64,
        offset: u64,
        data: &'a [u8],
    },
    Append {
        handle: u64,
        data: &'a [u8],
    },
    Truncate {
        handle: u64,
        size: u64,
    },
    Fallocate {
        handle: u64,
        mode: i32,
        offset: u64,
        len: u64,
    },
    SeekData {
        handle: u64,
        offset: u64,
    },
    SeekHole {
        handle: u64,
        offset: u64,
    },
    Fsync {
        handle: u64,
        data_only: bool,
    },
    Sync,
    /// `description`: the lock owner is the handle's description, else the process.
    LockSet {
        handle: u64,
        space: LockSpace,
        start: u64,
        end: Option<u64>,
        kind: Option<LockKind>,
        description: bool,
        wait: bool,
    },
    LockGet {
        handle: u64,
        space: LockSpace,
        start: u64,
        end: Option<u64>,
        kind: LockKind,
        description: bool,
    },
    /// The process's own locks on `ino` go (a close of one of its descriptors).
    LockRelease {
        ino: InodeNo,
        space: LockSpace,
    },
}

mod op {
    pub const HELLO: u8 = 1;
    pub const RESOLVE: u8 = 2;
    pub const RESOLVE_PARENT: u8 = 3;
    pub const LOOKUP: u8 = 4;
    pub const STAT: u8 = 5;
    pub const ACCESS: u8 = 6;
    pub const OPEN: u8 = 7;
    pub const CLOSE: u8 = 8;
    pub const CREATE: u8 = 9;
    pub const MKNOD: u8 = 10;
    pub const REMOVE: u8 = 11;
    pub const RENAME: u8 = 12;
    pub const LINK: u8 = 13;
    pub const READLINK: u8 = 14;
    pub const SET_ATTR: u8 = 15;
    pub const TRUNCATE_INO: u8 = 16;
    pub const SET_XATTR: u8 = 17;
    pub const GET_XATTR: u8 = 18;
    pub const LIST_XATTR: u8 = 19;
    pub const REMOVE_XATTR: u8 = 20;
    pub const READDIR: u8 = 21;
    pub const STATFS: u8 = 22;
    pub const READ: u8 = 23;
    pub const WRITE: u8 = 24;
    pub const APPEND: u8 = 25;
    pub const TRUNCATE: u8 = 26;
    pub const FALLOCATE: u8 = 27;
    pub const SEEK_DATA: u8 = 28;
    pub const SEEK_HOLE: u8 = 29;
    pub const FSYNC: u8 = 30;
    pub const SYNC: u8 = 31;
    pub const LOCK_SET: u8 = 32;
    pub const LOCK_GET: u8 = 33;
    pub const LOCK_RELEASE: u8 = 34;
    pub const STAT_AT: u8 = 35;
    pub const TABLES: u8 = 36;
    pub const CLOSE_QUIET: u8 = 37;
    pub const MAILBOX: u8 = 38;
    pub const CREATE_AT: u8 = 39;
    pub const REMOVE_AT: u8 = 40;
    pub const RENAME_AT: u8 = 41;
    pub const POSTS: u8 = 42;
    pub const BARRIER: u8 = 43;
}

/// The names of the request opcodes, by code.
const OP_NAMES: [&str; 44] = [
    "",
    "HELLO",
    "RESOLVE",
    "RESOLVE_PARENT",
    "LOOKUP",
    "STAT",
    "ACCESS",
    "OPEN",
    "CLOSE",
    "CREATE",
    "MKNOD",
    "REMOVE",
    "RENAME",
    "LINK",
    "READLINK",
    "SET_ATTR",
    "TRUNCATE_INO",
    "SET_XATTR",
    "GET_XATTR",
    "LIST_XATTR",
    "REMOVE_XATTR",
    "READDIR",
    "STATFS",
    "READ",
    "WRITE",
    "APPEND",
    "TRUNCATE",
    "FALLOCATE",
    "SEEK_DATA",
    "SEEK_HOLE",
    "FSYNC",
    "SYNC",
    "LOCK_SET",
    "LOCK_GET",
    "LOCK_RELEASE",
    "STAT_AT",
    "TABLES",
    "CLOSE_QUIET",
    "MAILBOX",
    "CREATE_AT",
    "REMOVE_AT",
    "RENAME_AT",
    "POSTS",
    "BARRIER",
];

/// The name of request opcode `op` (the first byte of a request's body), for the
/// instance's figures (`augefs mount -o stats`).
pub fn op_name(op: u32) -> String {
    match OP_NAMES.get(op as usize) {
        Some(n) if !n.is_empty() => (*n).to_string(),
        _ => format!("opcode {op}"),
    }
}

fn inval() -> Errno {
    Errno(libc::EINVAL)
}

/// The wire codes of an enum: `$code` encodes, `$of` decodes (EINVAL for a code that
/// names nothing). Codes are forever, like on-disk numbers.
macro_rules! codes {
    ($vis:vis $code:ident, $of:ident, $t:ty { $($v:expr => $n:literal),+ $(,)? }) => {
        $vis fn $code(v: $t) -> u8 {
            $(if v == $v {
                return $n;
            })+
            unreachable!("every value has a code")
        }

        $vis fn $of(c: u8) -> Result<$t> {
            $(if c == $n {
                return Ok($v);
            })+
            Err(inval())
        }
    };
}

codes!(kind_code, kind_of, Kind {
    Kind::File => 1,
    Kind::Dir => 2,
    Kind::Symlink => 3,
    Kind::Fifo => 4,
    Kind::Socket => 5,
    Kind::CharDev => 6,
    Kind::BlockDev => 7,
});
codes!(space_code, space_of, LockSpace {
    LockSpace::Record => 0,
    LockSpace::Flock => 1,
});
codes!(pub(crate) lock_code, lock_of, Option<LockKind> {
    None => 0,
    Some(LockKind::Read) => 1,
    Some(LockKind::Write) => 2,
});
codes!(rename_code, rename_of, RenameMode {
    RenameMode::Replace => 0,
    RenameMode::NoReplace => 1,
    RenameMode::Exchange => 2,
});
codes!(xattr_code, xattr_of, XattrMode {
    XattrMode::Either => 0,
    XattrMode::Create => 1,
    XattrMode::Replace => 2,
});

fn put_time(w: &mut Writer, t: Option<TimeChange>) {
    match t {
        None => w.u8(0),
        Some(TimeChange::Now) => w.u8(1),
        Some(TimeChange::At(ns)) => w.u8(2).i64(ns),
    };
}

fn get_time(r: &mut Reader<'_>) -> Result<Option<TimeChange>> {
    Ok(match r.u8()? {
        0 => None,
        1 => Some(TimeChange::Now),
        2 => Some(TimeChange::At(r.i64()?)),
        _ => return Err(inval()),
    })
}

fn put_opt_u32(w: &mut Writer, v: Option<u32>) {
    w.opt_u64(v.map(u64::from));
}

fn get_opt_u32(r: &mut Reader<'_>) -> Result<Option<u32>> {
    r.opt_u64()?
        .map(|v| u32::try_from(v).map_err(|_| inval()))
        .transpose()
}

fn name<'a>(r: &mut Reader<'a>) -> Result<&'a [u8]> {
    r.bytes(NAME_MAX, libc::ENAMETOOLONG)
}

fn path<'a>(r: &mut Reader<'a>) -> Result<&'a [u8]> {
    r.bytes(PATH_MAX, libc::ENAMETOOLONG)
}

fn ino(r: &mut Reader<'_>) -> Result<InodeNo> {
    Ok(InodeNo(r.u64()?))
}

impl<'a> Request<'a> {
    /// Decodes one frame's body.
    pub fn decode(body: &'a [u8]) -> Result<Request<'a>> {
        let mut r = Reader::new(body);
        let req = Self::fields(&mut r)?;
        r.end()?;
        Ok(req)
    }

    fn fields(r: &mut Reader<'a>) -> Result<Request<'a>> {
        let op = r.u8()?;
        if let Some(req) = Self::connection_fields(op, r)? {
            return Ok(req);
        }
        Ok(match op {
            op::RESOLVE => Request::Resolve {
                start: ino(r)?,
                follow: r.bool()?,
                path: path(r)?,
            },
            op::RESOLVE_PARENT => Request::ResolveParent {
                start: ino(r)?,
                path: path(r)?,
            },
            op::LOOKUP => Request::Lookup {
                dir: ino(r)?,
                name: name(r)?,
            },
            op::STAT => Request::Stat { ino: ino(r)? },
            op::STAT_AT => Request::StatAt {
                start: ino(r)?,
                follow: r.bool()?,
                path: path(r)?,
            },
            op::ACCESS => Request::Access {
                ino: ino(r)?,
                mask: r.u32()?,
            },
            op::OPEN => Request::Open {
                start: ino(r)?,
                flags: r.i32()?,
                mode: r.u32()?,
                prefetch: match r.u32()? {
                    n if n <= PREFETCH_MAX => n,
                    _ => return Err(inval()),
                },
                path: path(r)?,
            },
            op::CLOSE => Request::Close { handle: r.u64()? },
            op::CREATE => Request::Create {
                parent: ino(r)?,
                kind: kind_of(r.u8()?)?,
                perm: r.u32()?,
                name: name(r)?,
                target: r.opt_bytes(PATH_MAX, libc::ENAMETOOLONG)?,
            },
            op::MKNOD => Request::Mknod {
                parent: ino(r)?,
                kind: kind_of(r.u8()?)?,
                perm: r.u32()?,
                dev: r.u64()?,
                name: name(r)?,
            },
            op::CREATE_AT => Request::CreateAt {
                start: ino(r)?,
                kind: kind_of(r.u8()?)?,
                perm: r.u32()?,
                path: path(r)?,
                target: r.opt_bytes(PATH_MAX, libc::ENAMETOOLONG)?,
            },
            op::REMOVE_AT => Request::RemoveAt {
                start: ino(r)?,
                dir: r.bool()?,
                path: path(r)?,
            },
            op::RENAME_AT => Request::RenameAt {
                from: ino(r)?,
                from_path: path(r)?,
                to: ino(r)?,
                to_path: path(r)?,
                mode: rename_of(r.u8()?)?,
            },
            op::REMOVE => Request::Remove {
                parent: ino(r)?,
                dir: r.bool()?,
                name: name(r)?,
            },
            op::RENAME => Request::Rename {
                from: ino(r)?,
                from_name: name(r)?,
                to: ino(r)?,
                to_name: name(r)?,
                mode: rename_of(r.u8()?)?,
            },
            op::LINK => Request::Link {
                ino: ino(r)?,
                parent: ino(r)?,
                name: name(r)?,
            },
            op => return Self::attr_fields(op, r),
        })
    }

    /// The requests about the connection and the session rather than files: None for
    /// any other `op`.
    fn connection_fields(op: u8, r: &mut Reader<'a>) -> Result<Option<Request<'a>>> {
        Ok(Some(match op {
            op::HELLO => Request::Hello {
                token: r.u64()?,
                version: r.u32()?,
            },
            op::TABLES => Request::Tables,
            op::MAILBOX => Request::Mailbox {
                writable: r.bool()?,
            },
            op::CLOSE_QUIET => Request::CloseQuiet { handle: r.u64()? },
            op::POSTS => Request::Posts {
                token: r.u64()?,
                version: r.u32()?,
                sent: r.u64()?,
                ring: r.bool()?,
            },
            op::BARRIER => Request::Barrier { count: r.u64()? },
            _ => return Ok(None),
        }))
    }

    /// Attributes, symbolic links' targets, extended attributes, directories and
    /// statfs.
    fn attr_fields(op: u8, r: &mut Reader<'a>) -> Result<Request<'a>> {
        Ok(match op {
            op::READLINK => Request::Readlink { ino: ino(r)? },
            op::SET_ATTR => Request::SetAttr {
                ino: ino(r)?,
                changes: AttrChanges {
                    perm: get_opt_u32(r)?,
                    uid: get_opt_u32(r)?,
                    gid: get_opt_u32(r)?,
                    atime: get_time(r)?,
                    mtime: get_time(r)?,
                },
            },
            op::TRUNCATE_INO => Request::TruncateIno {
                ino: ino(r)?,
                size: r.u64()?,
            },
            op::SET_XATTR => Request::SetXattr {
                ino: ino(r)?,
                mode: xattr_of(r.u8()?)?,
                name: name(r)?,
                value: r.bytes(XATTR_VALUE_MAX, libc::E2BIG)?,
            },
            op::GET_XATTR => Request::GetXattr {
                ino: ino(r)?,
                name: name(r)?,
            },
            op::LIST_XATTR => Request::ListXattr { ino: ino(r)? },
            op::REMOVE_XATTR => Request::RemoveXattr {
                ino: ino(r)?,
                name: name(r)?,
            },
            op::READDIR => {
                let dir = ino(r)?;
                let max = r.u32()?;
                if max == 0 || max > READDIR_MAX {
                    return Err(inval());
                }
                Request::Readdir {
                    dir,
                    max,
                    after: r.opt_bytes(NAME_MAX, libc::ENAMETOOLONG)?,
                }
            }
            op::STATFS => Request::Statfs,
            op => return Self::data_fields(op, r),
        })
    }

    /// The calls that name a handle (and Sync).
    fn data_fields(op: u8, r: &mut Reader<'a>) -> Result<Request<'a>> {
        Ok(match op {
            op::READ => {
                let (handle, offset, len) = (r.u64()?, r.u64()?, r.u32()?);
                if len as usize > IO_BYTES_MAX {
                    return Err(inval());
                }
                Request::Read {
                    handle,
                    offset,
                    len,
                }
            }
            op::WRITE => {
                let (handle, offset) = (r.u64()?, r.u64()?);
                Request::Write {
                    handle,
                    offset,
                    data: data(r)?,
                }
            }
            op::APPEND => {
                let handle = r.u64()?;
                Request::Append {
                    handle,
                    data: data(r)?,
                }
            }
            op::TRUNCATE => Request::Truncate {
                handle: r.u64()?,
                size: r.u64()?,
            },
            op::FALLOCATE => Request::Fallocate {
                handle: r.u64()?,
                mode: r.i32()?,
                offset: r.u64()?,
                len: r.u64()?,
            },
            op::SEEK_DATA => Request::SeekData {
                handle: r.u64()?,
                offset: r.u64()?,
            },
            op::SEEK_HOLE => Request::SeekHole {
                handle: r.u64()?,
                offset: r.u64()?,
            },
            op::FSYNC => Request::Fsync {
                handle: r.u64()?,
                data_only: r.bool()?,
            },
            op::SYNC => Request::Sync,
            op::LOCK_SET => Request::LockSet {
                handle: r.u64()?,
                space: space_of(r.u8()?)?,
                start: r.u64()?,
                end: r.opt_u64()?,
                kind: lock_of(r.u8()?)?,
                description: r.bool()?,
                wait: r.bool()?,
            },
            op::LOCK_GET => Request::LockGet {
                handle: r.u64()?,
                space: space_of(r.u8()?)?,
                start: r.u64()?,
                end: r.opt_u64()?,
                kind: lock_of(r.u8()?)?.ok_or_else(inval)?,
                description: r.bool()?,
            },
            op::LOCK_RELEASE => Request::LockRelease {
                ino: ino(r)?,
                space: space_of(r.u8()?)?,
            },
            _ => return Err(Errno(libc::ENOSYS)),
        })
    }

    /// Whether the request may change what a stat, lookup or read shows (the table's
    /// change count moves around it; `crate::table`). Opening without creating or
    /// truncating, closing, syncing and locking change nothing of that.
    pub fn changes(&self) -> bool {
        match *self {
            Request::Open { flags, .. } => flags & (libc::O_CREAT | libc::O_TRUNC) != 0,
            Request::Create { .. }
            | Request::CreateAt { .. }
            | Request::RemoveAt { .. }
            | Request::RenameAt { .. }
            | Request::Mknod { .. }
            | Request::Remove { .. }
            | Request::Rename { .. }
            | Request::Link { .. }
            | Request::SetAttr { .. }
            | Request::TruncateIno { .. }
            | Request::SetXattr { .. }
            | Request::RemoveXattr { .. }
            | Request::Write { .. }
            | Request::Append { .. }
            | Request::Truncate { .. }
            | Request::Fallocate { .. } => true,
            _ => false,
        }
    }

    /// The data that follows the frame's fields (a write's).
    pub fn data(&self) -> &'a [u8] {
        match *self {
            Request::Write { data, .. } | Request::Append { data, .. } => data,
            _ => &[],
        }
    }
}

fn data_len(d: &[u8]) -> u32 {
    assert!(d.len() <= IO_BYTES_MAX, "the client splits larger writes");
    d.len() as u32
}

/// A write's data: its length, then exactly that many bytes to the frame's end.
fn data<'a>(r: &mut Reader<'a>) -> Result<&'a [u8]> {
    let len = r.u32()? as usize;
    if len > IO_BYTES_MAX {
        return Err(inval());
    }
    let rest = r.rest();
    if rest.len() != len {
        return Err(Errno(libc::EPROTO));
    }
    Ok(rest)
}

/// Attributes in a reply.
pub fn put_metadata(w: &mut Writer, m: &Metadata) {
    w.u64(m.ino)
        .u8(kind_code(m.kind))
        .u32(m.mode)
        .u32(m.nlink)
        .u32(m.uid)
        .u32(m.gid)
        .u64(m.size)
        .u64(m.blocks)
        .i64(m.atime_ns)
        .i64(m.mtime_ns)
        .i64(m.ctime_ns)
        .i64(m.btime_ns)
        .u32(m.blksize)
        .u64(m.rdev);
}

pub fn get_metadata(r: &mut Reader<'_>) -> Result<Metadata> {
    Ok(Metadata {
        ino: r.u64()?,
        kind: kind_of(r.u8()?)?,
        mode: r.u32()?,
        nlink: r.u32()?,
        uid: r.u32()?,
        gid: r.u32()?,
        size: r.u64()?,
        blocks: r.u64()?,
        atime_ns: r.i64()?,
        mtime_ns: r.i64()?,
        ctime_ns: r.i64()?,
        btime_ns: r.i64()?,
        blksize: r.u32()?,
        rdev: r.u64()?,
    })
}

pub fn put_kind(w: &mut Writer, k: Kind) {
    w.u8(kind_code(k));
}

pub fn get_kind(r: &mut Reader<'_>) -> Result<Kind> {
    kind_of(r.u8()?)
}

mod encode;
#[cfg(test)]
mod tests;
