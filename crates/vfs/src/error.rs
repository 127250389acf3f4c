//! VFS errors: each names its errno, which front ends (FUSE, the C ABI) return as is.

use engine::EngineError;
use format::Corruption;
use metadb::MetaDbError;
use thiserror::Error;

#[derive(Debug, Error)]
#[non_exhaustive]
pub enum VfsError {
    #[error("{0}: no such file or directory")]
    NotFound(String),
    #[error("{0}: file exists")]
    Exists(String),
    #[error("{0}: not a directory")]
    NotDir(String),
    #[error("{0}: is a directory")]
    IsDir(String),
    #[error("{0}: directory not empty")]
    NotEmpty(String),
    #[error("{0}: file name too long (more than 255 bytes)")]
    NameTooLong(String),
    #[error("{0}: too many levels of symbolic links")]
    Loop(String),
    #[error("{0}: permission denied")]
    Access(String),
    #[error("operation not permitted: {0}")]
    NotPermitted(String),
    #[error("invalid argument: {0}")]
    Invalid(String),
    #[error("{0}: bad file descriptor (not open for this access)")]
    BadAccess(String),
    #[error("{0}: no such attribute")]
    NoAttribute(String),
    #[error("{0}: attribute namespace not supported (user. and trusted. are)")]
    AttributeNamespace(String),
    #[error("attribute too large: {0}")]
    AttributeTooLarge(String),
    #[error("{0}: resource temporarily unavailable")]
    WouldBlock(String),
    #[error("{0}: resource deadlock avoided")]
    Deadlock(String),
    /// A wait was cancelled (a FUSE request the kernel interrupted).
    #[error("{0}: interrupted")]
    Interrupted(String),
    #[error("{0}: no data or hole at or after this offset")]
    NoSuchOffset(String),
    #[error("operation not supported: {0}")]
    Unsupported(String),
    #[error("file too large: {0}")]
    TooLarge(String),
    #[error("{0}: too many links")]
    TooManyLinks(String),
    /// An open of a FIFO, socket or device node: the vfs holds the node, not the pipe,
    /// socket or device (a kernel front end provides those; docs/SEMANTICS.md §4).
    #[error("{0}: a special file (FIFO, socket or device) opens through a kernel mount only")]
    SpecialFile(String),
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    MetaDb(#[from] MetaDbError),
    #[error("corrupted {0}")]
    Corruption(Corruption),
}

impl VfsError {
    pub(crate) fn corrupt(
        what: impl Into<String>,
        field: &str,
        expected: impl std::fmt::Display,
        got: impl std::fmt::Display,
    ) -> VfsError {
        VfsError::Corruption(Corruption::new(
            format!("{} {field}", what.into()),
            "VFS records in MetaDB",
            expected,
            got,
        ))
    }

    /// The errno a front end reports.
    pub fn errno(&self) -> i32 {
        match self {
            VfsError::NotFound(_) => libc::ENOENT,
            VfsError::Exists(_) => libc::EEXIST,
            VfsError::NotDir(_) => libc::ENOTDIR,
            VfsError::IsDir(_) => libc::EISDIR,
            VfsError::NotEmpty(_) => libc::ENOTEMPTY,
            VfsError::NameTooLong(_) => libc::ENAMETOOLONG,
            VfsError::Loop(_) => libc::ELOOP,
            VfsError::Access(_) => libc::EACCES,
            VfsError::NotPermitted(_) => libc::EPERM,
            VfsError::Invalid(_) => libc::EINVAL,
            VfsError::BadAccess(_) => libc::EBADF,
            VfsError::TooLarge(_) => libc::EFBIG,
            VfsError::TooManyLinks(_) => libc::EMLINK,
            VfsError::SpecialFile(_) => libc::ENXIO,
            VfsError::NoSuchOffset(_) => libc::ENXIO,
            VfsError::WouldBlock(_) => libc::EAGAIN,
            VfsError::Deadlock(_) => libc::EDEADLK,
            VfsError::Interrupted(_) => libc::EINTR,
            VfsError::Unsupported(_) => libc::EOPNOTSUPP,
            VfsError::NoAttribute(_) => libc::ENODATA,
            VfsError::AttributeNamespace(_) => libc::EOPNOTSUPP,
            VfsError::AttributeTooLarge(_) => libc::E2BIG,
            VfsError::Engine(e) => e.errno(),
            VfsError::MetaDb(e) => e.errno(),
            VfsError::Corruption(_) => libc::EUCLEAN,
        }
    }
}

impl VfsError {
    /// ENOSPC: the device's room (`free_blocks` beyond its live data) cannot hold what
    /// was asked.
    pub(crate) fn no_space(free_blocks: u64) -> VfsError {
        EngineError::from(engine::space::SpaceError::NoSpace {
            free: (free_blocks / format::constants::BLOCKS_PER_SEGMENT) as u32,
            reserve: 0,
            pending: 0,
        })
        .into()
    }
}
