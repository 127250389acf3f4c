//! Engine errors: typed, with corruption kept structured (it comes from `format`).

use crate::space::SpaceError;
use device::DeviceError;
use format::{BlockAddr, Corruption, FormatError, InodeNo};
use metadb::MetaDbError;
use pmr::PmrError;
use thiserror::Error;

#[derive(Debug, Error)]
#[non_exhaustive]
pub enum EngineError {
    #[error(transparent)]
    Device(#[from] DeviceError),
    #[error(transparent)]
    Format(#[from] FormatError),
    #[error(transparent)]
    Pmr(#[from] PmrError),
    #[error(transparent)]
    Space(#[from] SpaceError),
    #[error("the device already holds {what}; refusing to format it without --force")]
    ExistingFileSystem { what: String },
    /// The device (an image cut short, or a smaller device than the one formatted) ends
    /// before the file system its superblock describes.
    #[error(
        "the device is shorter than its file system: it has {device_size_bytes} bytes, \
         the superblock says {fs_size_bytes} (truncated image or wrong device)"
    )]
    DeviceTooShort {
        device_size_bytes: u64,
        fs_size_bytes: u64,
    },
    #[error(
        "the PMR belongs to another file system (PMR names {pmr_uuid}, image is {image_uuid})"
    )]
    PmrMismatch {
        pmr_uuid: String,
        image_uuid: String,
    },
    #[error("the image was formatted with a PMR of {expected} bytes; the PMR given has {got}")]
    PmrSizeMismatch { expected: u64, got: u64 },
    #[error("the image was formatted with a PMR; give it with --pmr")]
    PmrRequired,
    #[error("the image was formatted without a PMR, but one was given")]
    PmrUnexpected,
    #[error(transparent)]
    MetaDb(#[from] MetaDbError),
    #[error("corrupted {0}")]
    Corruption(Corruption),
    #[error("data checksum mismatch: inode {ino} block {block} at device block {addr}")]
    DataChecksum {
        ino: InodeNo,
        block: u64,
        addr: BlockAddr,
    },
    #[error("the file system is read-only: {0}")]
    ReadOnly(String),
    /// A label or uuid that cannot be stored (docs/FORMAT.md §3).
    #[error("{0}")]
    BadIdentity(String),
    /// A resize that cannot be done (engine::resize).
    #[error("cannot resize: {0}")]
    BadResize(String),
}

impl EngineError {
    pub(crate) fn corruption(
        what: impl Into<String>,
        location: impl Into<String>,
        expected: impl std::fmt::Display,
        got: impl std::fmt::Display,
    ) -> EngineError {
        EngineError::Corruption(Corruption::new(what, location, expected, got))
    }

    /// The errno a front end reports.
    pub fn errno(&self) -> i32 {
        match self {
            EngineError::Device(e) => e.errno(),
            EngineError::Format(FormatError::NotAugefs { .. }) => 22, // EINVAL
            EngineError::Format(_) => 117, // EUCLEAN: structure needs cleaning
            EngineError::Pmr(_) => 5,
            EngineError::Space(e) => e.errno(),
            EngineError::ExistingFileSystem { .. } => 17, // EEXIST
            EngineError::BadIdentity(_) | EngineError::BadResize(_) => 22, // EINVAL
            EngineError::DeviceTooShort { .. } => 117,    // EUCLEAN
            EngineError::PmrMismatch { .. }
            | EngineError::PmrSizeMismatch { .. }
            | EngineError::PmrRequired
            | EngineError::PmrUnexpected => 22,
            EngineError::MetaDb(e) => e.errno(),
            EngineError::Corruption(_) => 117,
            EngineError::DataChecksum { .. } => 5, // EIO
            EngineError::ReadOnly(_) => 30,        // EROFS
        }
    }
}
