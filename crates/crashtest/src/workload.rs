//! The crash-workload text format (docs/TESTING.md §2a "Crash workloads"): one operation
//! per line, `#` starts a comment, blank lines are ignored.
//!
//! ```text
//! domains 1          # optional header: domain count of the image (default 1)
//! mkdir /d           # setup: not recorded, made durable by a sync before `begin`
//! create /d/f 600
//! begin              # optional: everything after it is recorded and crashed
//! write /d/f 0 8192  # OFFSET LEN: a deterministic pattern (at most 1 MiB per write)
//! open h /d/f        # a descriptor, used as @h
//! unlink /d/f
//! write @h 0 4096 sync
//! rmdir /d expect ENOTEMPTY
//! ```
//!
//! Invariants:
//! - Parsing never panics; an error names the line and what was expected.
//! - `Display` prints a workload back in this format, so a generated workload that fails
//!   can be saved and replayed with `augefs crashtest FILE`.
//! - A descriptor is used only between its `open` and its `close` (checked at parse).

mod parse;

pub use parse::ParseError;
use std::fmt;

/// Largest write: one atomic batch (docs/SEMANTICS.md §1).
pub const WRITE_MAX_BYTES: u64 = 1 << 20;
/// Largest domain count a workload may ask for.
pub const DOMAINS_MAX: u32 = 8;
/// Permission bits of `create` and `mknod` without a mode.
pub const FILE_MODE_DEFAULT: u32 = 0o644;
/// Permission bits of `mkdir` without a mode.
pub const DIR_MODE_DEFAULT: u32 = 0o755;

/// What a file operation acts on: a path (resolved at the step, following symbolic
/// links), or a descriptor opened by an earlier `open` (`@NAME`), which still reaches
/// the file after its name is gone.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    Path(String),
    Fd(String),
}

/// How a write is issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WriteMode {
    /// A plain buffered write.
    Buffered,
    /// O_SYNC: the write, then an fsync of the file before it returns (what the kernel
    /// does for a FUSE file, `generic_write_sync`): a persistence point.
    Sync,
    /// O_DSYNC: the write, then an fdatasync.
    Dsync,
    /// O_DIRECT. augefs has no direct IO below its front ends (docs/SEMANTICS.md §5): the
    /// write goes through the vfs's page cache like a buffered one, and Linux promises no
    /// durability for O_DIRECT without O_SYNC or an fsync either, so it is not a
    /// persistence point.
    Direct,
}

/// The file type of a `mknod`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodeKind {
    Regular,
    Fifo,
    Char,
    Block,
    Socket,
}

/// One operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// `create PATH [MODE]`: an empty regular file (open with O_CREAT|O_EXCL).
    Create(String, u32),
    /// `mkdir PATH [MODE]`.
    Mkdir(String, u32),
    /// `mknod PATH reg|fifo|chr|blk|sock [MODE] [MAJOR:MINOR]`: a regular file is a
    /// create; the others are special files (the device number, a `dev_t`, is kept for
    /// `chr` and `blk` and ignored for the rest, as mknod(2) does).
    Mknod(String, NodeKind, u32, u64),
    /// `write TARGET OFFSET LEN [sync|dsync|direct]`: LEN bytes of a pattern that depends
    /// on the offset and the step, so misplaced or stale blocks never compare equal.
    Write(Target, u64, u64, WriteMode),
    /// `append TARGET LEN [sync|dsync|direct]`: a write at the current end.
    Append(Target, u64, WriteMode),
    Truncate(Target, u64),
    /// `punch TARGET OFFSET LEN` (fallocate PUNCH_HOLE | KEEP_SIZE).
    Punch(Target, u64, u64),
    /// `falloc TARGET OFFSET LEN [keep]` (fallocate mode 0, or KEEP_SIZE).
    Falloc(Target, u64, u64, bool),
    /// `zero TARGET OFFSET LEN [keep]` (fallocate ZERO_RANGE, with KEEP_SIZE or not).
    Zero(Target, u64, u64, bool),
    Unlink(String),
    Rmdir(String),
    /// `rename FROM TO [noreplace|exchange]`.
    Rename(String, String, vfs::RenameMode),
    Link(String, String),
    /// `symlink TARGET PATH`.
    Symlink(String, String),
    /// `setxattr TARGET NAME VALUE`.
    SetXattr(Target, String, String),
    RemoveXattr(Target, String),
    /// `chmod TARGET OCTAL`.
    Chmod(Target, u32),
    /// `open NAME PATH`: a descriptor of an existing file, `@NAME` until `close NAME`.
    /// The harness closes those still open after the last step.
    Open(String, String),
    Close(String),
    Fsync(Target),
    Fdatasync(Target),
    Sync,
}

impl Op {
    /// Whether the operation asks for durability (fsync, fdatasync, sync, an O_SYNC or
    /// O_DSYNC write).
    pub fn is_persistence_point(&self) -> bool {
        match self {
            Op::Fsync(_) | Op::Fdatasync(_) | Op::Sync => true,
            Op::Write(_, _, _, mode) | Op::Append(_, _, mode) => {
                matches!(mode, WriteMode::Sync | WriteMode::Dsync)
            }
            _ => false,
        }
    }

    /// The file the operation acts on through a [`Target`], if it takes one.
    pub fn target(&self) -> Option<&Target> {
        match self {
            Op::Write(t, ..)
            | Op::Append(t, ..)
            | Op::Truncate(t, _)
            | Op::Punch(t, ..)
            | Op::Falloc(t, ..)
            | Op::Zero(t, ..)
            | Op::SetXattr(t, ..)
            | Op::RemoveXattr(t, _)
            | Op::Chmod(t, _)
            | Op::Fsync(t)
            | Op::Fdatasync(t) => Some(t),
            _ => None,
        }
    }

    /// The most bytes of new blocks the operation may take from the free space (a log
    /// writes every block anew): what an image must have free for it.
    pub fn room_bytes(&self) -> u64 {
        const BLOCK: u64 = format::constants::BLOCK_SIZE_BYTES;
        let touched =
            |offset: u64, len: u64| ((offset + len).div_ceil(BLOCK) - offset / BLOCK) * BLOCK;
        match self {
            Op::Write(_, offset, len, _) => touched(*offset, *len),
            // The offset is known only when it runs; a misaligned end adds a block.
            Op::Append(_, len, _) => len.div_ceil(BLOCK) * BLOCK + BLOCK,
            Op::Falloc(_, offset, len, _) => touched(*offset, *len),
            // Partial blocks at either end are written zeroed.
            Op::Zero(..) | Op::Punch(..) => 2 * BLOCK,
            Op::Truncate(..) => BLOCK,
            _ => 0,
        }
    }
}

/// One line of a workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// 1-based line in the source (0 for generated steps).
    pub line: usize,
    pub op: Op,
    /// `expect ERRNO` at the end of the line: the step must fail with it. Without, it
    /// must succeed.
    pub expect: Option<i32>,
}

impl Step {
    /// A step that must succeed.
    pub fn ok(op: Op) -> Step {
        Step {
            line: 0,
            op,
            expect: None,
        }
    }
}

/// A parsed workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workload {
    pub name: String,
    pub domains: u32,
    /// Run, then made durable by a sync, before recording starts.
    pub setup: Vec<Step>,
    /// Recorded: every crash state of these is checked.
    pub steps: Vec<Step>,
}

impl Workload {
    /// Free bytes the image must have after the setup for every step to find room.
    pub fn room_bytes(&self) -> u64 {
        self.steps.iter().map(|s| s.op.room_bytes()).sum()
    }

    /// The same workload on an image of `domains` domains (named so).
    pub fn with_domains(&self, domains: u32) -> Workload {
        assert!((1..=DOMAINS_MAX).contains(&domains));
        Workload {
            name: format!("{}@d{domains}", self.name),
            domains,
            ..self.clone()
        }
    }
}

/// The errno names a workload may `expect` (those augefs returns, docs/SEMANTICS.md §3).
const ERRNOS: [(&str, i32); 21] = [
    ("EPERM", libc::EPERM),
    ("ENOENT", libc::ENOENT),
    ("EIO", libc::EIO),
    ("ENXIO", libc::ENXIO),
    ("E2BIG", libc::E2BIG),
    ("EBADF", libc::EBADF),
    ("EACCES", libc::EACCES),
    ("EEXIST", libc::EEXIST),
    ("EXDEV", libc::EXDEV),
    ("ENOTDIR", libc::ENOTDIR),
    ("EISDIR", libc::EISDIR),
    ("EINVAL", libc::EINVAL),
    ("EFBIG", libc::EFBIG),
    ("ENOSPC", libc::ENOSPC),
    ("EROFS", libc::EROFS),
    ("ENAMETOOLONG", libc::ENAMETOOLONG),
    ("ENOTEMPTY", libc::ENOTEMPTY),
    ("ELOOP", libc::ELOOP),
    ("ENODATA", libc::ENODATA),
    ("EOPNOTSUPP", libc::EOPNOTSUPP),
    ("EUCLEAN", libc::EUCLEAN),
];

/// `ENOENT` for 2; the number for one without a name here.
pub fn errno_name(errno: i32) -> String {
    ERRNOS
        .iter()
        .find(|e| e.1 == errno)
        .map_or_else(|| errno.to_string(), |e| e.0.to_string())
}

/// The errno a name (or a number) stands for.
pub fn parse_errno(s: &str) -> Option<i32> {
    ERRNOS
        .iter()
        .find(|e| e.0 == s)
        .map(|e| e.1)
        .or_else(|| s.parse().ok().filter(|&n| n > 0))
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Path(p) => write!(f, "{p}"),
            Target::Fd(name) => write!(f, "@{name}"),
        }
    }
}

impl fmt::Display for WriteMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WriteMode::Buffered => "",
            WriteMode::Sync => " sync",
            WriteMode::Dsync => " dsync",
            WriteMode::Direct => " direct",
        })
    }
}

impl NodeKind {
    /// The vfs kind a `mknod` of this type makes.
    pub fn kind(self) -> vfs::Kind {
        match self {
            NodeKind::Regular => vfs::Kind::File,
            NodeKind::Fifo => vfs::Kind::Fifo,
            NodeKind::Char => vfs::Kind::CharDev,
            NodeKind::Block => vfs::Kind::BlockDev,
            NodeKind::Socket => vfs::Kind::Socket,
        }
    }

    pub(crate) const NAMES: [(&'static str, NodeKind); 5] = [
        ("reg", NodeKind::Regular),
        ("fifo", NodeKind::Fifo),
        ("chr", NodeKind::Char),
        ("blk", NodeKind::Block),
        ("sock", NodeKind::Socket),
    ];

    fn name(self) -> &'static str {
        NodeKind::NAMES
            .iter()
            .find(|n| n.1 == self)
            .expect("every kind is named")
            .0
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keep = |k: &bool| if *k { " keep" } else { "" };
        match self {
            Op::Create(p, FILE_MODE_DEFAULT) => write!(f, "create {p}"),
            Op::Create(p, m) => write!(f, "create {p} {m:o}"),
            Op::Mkdir(p, DIR_MODE_DEFAULT) => write!(f, "mkdir {p}"),
            Op::Mkdir(p, m) => write!(f, "mkdir {p} {m:o}"),
            Op::Mknod(p, k, m, 0) => write!(f, "mknod {p} {} {m:o}", k.name()),
            Op::Mknod(p, k, m, dev) => write!(
                f,
                "mknod {p} {} {m:o} {}:{}",
                k.name(),
                libc::major(*dev),
                libc::minor(*dev)
            ),
            Op::Write(t, o, l, mode) => write!(f, "write {t} {o} {l}{mode}"),
            Op::Append(t, l, mode) => write!(f, "append {t} {l}{mode}"),
            Op::Truncate(t, s) => write!(f, "truncate {t} {s}"),
            Op::Punch(t, o, l) => write!(f, "punch {t} {o} {l}"),
            Op::Falloc(t, o, l, k) => write!(f, "falloc {t} {o} {l}{}", keep(k)),
            Op::Zero(t, o, l, k) => write!(f, "zero {t} {o} {l}{}", keep(k)),
            Op::Unlink(p) => write!(f, "unlink {p}"),
            Op::Rmdir(p) => write!(f, "rmdir {p}"),
            Op::Rename(a, b, mode) => write!(
                f,
                "rename {a} {b}{}",
                match mode {
                    vfs::RenameMode::Replace => "",
                    vfs::RenameMode::NoReplace => " noreplace",
                    vfs::RenameMode::Exchange => " exchange",
                }
            ),
            Op::Link(a, b) => write!(f, "link {a} {b}"),
            Op::Symlink(t, p) => write!(f, "symlink {t} {p}"),
            Op::SetXattr(t, n, v) => write!(f, "setxattr {t} {n} {v}"),
            Op::RemoveXattr(t, n) => write!(f, "removexattr {t} {n}"),
            Op::Chmod(t, m) => write!(f, "chmod {t} {m:o}"),
            Op::Open(name, p) => write!(f, "open {name} {p}"),
            Op::Close(name) => write!(f, "close {name}"),
            Op::Fsync(t) => write!(f, "fsync {t}"),
            Op::Fdatasync(t) => write!(f, "fdatasync {t}"),
            Op::Sync => write!(f, "sync"),
        }
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.op)?;
        if let Some(errno) = self.expect {
            write!(f, " expect {}", errno_name(errno))?;
        }
        Ok(())
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "# {}", self.name)?;
        writeln!(f, "domains {}", self.domains)?;
        for s in &self.setup {
            writeln!(f, "{s}")?;
        }
        if !self.setup.is_empty() {
            writeln!(f, "begin")?;
        }
        for s in &self.steps {
            writeln!(f, "{s}")?;
        }
        Ok(())
    }
}
