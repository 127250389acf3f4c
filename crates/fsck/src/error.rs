//! Operational errors of fsck: what stops it from checking at all (e2fsck's exit code 8).
//! Problems *found* in an image are not errors; they are [`crate::Problem`]s in the report.

use thiserror::Error;

#[derive(Debug, Error)]
#[non_exhaustive]
pub enum FsckError {
    #[error(transparent)]
    Device(#[from] device::DeviceError),
    #[error(transparent)]
    Engine(#[from] engine::EngineError),
    #[error(transparent)]
    MetaDb(#[from] metadb::MetaDbError),
    #[error(transparent)]
    Pmr(#[from] pmr::PmrError),
    /// MetaDB could not be recovered: the records fsck checks cannot be read.
    #[error("MetaDB cannot be recovered: {0}")]
    Unrecoverable(String),
}

impl FsckError {
    /// The damage recovery refused or a read met, if this error is one: fsck reports it
    /// as a problem (exit 4) rather than failing (exit 8).
    pub fn damage(&self) -> Option<String> {
        match self {
            FsckError::MetaDb(e @ metadb::MetaDbError::Damaged(_))
            | FsckError::MetaDb(e @ metadb::MetaDbError::Corruption { .. }) => Some(e.to_string()),
            FsckError::Engine(engine::EngineError::MetaDb(
                e @ (metadb::MetaDbError::Damaged(_) | metadb::MetaDbError::Corruption { .. }),
            )) => Some(e.to_string()),
            _ => None,
        }
    }

    /// Whether the device does not hold an augefs image at all (as opposed to an image
    /// fsck could not read or recover).
    pub fn is_not_augefs(&self) -> bool {
        matches!(
            self,
            FsckError::Engine(engine::EngineError::Format(
                format::FormatError::NotAugefs { .. }
            ))
        )
    }
}
