//! MetaDB errors.

use device::DeviceError;
use pmr::PmrError;
use thiserror::Error;

#[derive(Debug, Error)]
#[non_exhaustive]
pub enum MetaDbError {
    #[error(transparent)]
    Device(#[from] DeviceError),
    #[error(transparent)]
    Pmr(#[from] PmrError),
    #[error("corrupted {what}: {detail}")]
    Corruption { what: String, detail: String },
    /// Damage a crash cannot explain: bytes that were durable no longer check out
    /// (docs/FORMAT.md §5.2 and §5.4, "what proves damage"). Recovery refuses it instead
    /// of taking it for a torn tail.
    #[error("damaged {0}")]
    Damaged(format::Corruption),
    #[error("no space left for MetaDB tables")]
    NoSpace,
    #[error("the WAL is full: every WAL region byte holds records not yet in tables")]
    WalFull,
    #[error("write batch of {bytes} bytes exceeds the {max}-byte limit of one WAL record")]
    BatchTooLarge { bytes: usize, max: usize },
    #[error("MetaDB is read-only: {0}")]
    ReadOnly(String),
}

impl MetaDbError {
    pub fn corruption(what: impl Into<String>, detail: impl Into<String>) -> MetaDbError {
        MetaDbError::Corruption {
            what: what.into(),
            detail: detail.into(),
        }
    }

    pub fn damaged(
        what: impl Into<String>,
        location: impl Into<String>,
        expected: impl std::fmt::Display,
        got: impl std::fmt::Display,
    ) -> MetaDbError {
        MetaDbError::Damaged(format::Corruption::new(what, location, expected, got))
    }

    pub fn errno(&self) -> i32 {
        match self {
            MetaDbError::Device(e) => e.errno(),
            MetaDbError::Pmr(e) => e.errno(),
            MetaDbError::Corruption { .. } | MetaDbError::Damaged(_) => 117, // EUCLEAN
            MetaDbError::NoSpace | MetaDbError::WalFull => libc::ENOSPC,
            MetaDbError::ReadOnly(_) => libc::EROFS,
            MetaDbError::BatchTooLarge { .. } => libc::E2BIG,
        }
    }
}
