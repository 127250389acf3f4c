//! Engine errors: typed, with corruption kept structured (it comes from `format`).

use crate::space::SpaceError;
use device::DeviceError;
use format::FormatError;
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
}

impl EngineError {
    /// The errno a front end reports.
    pub fn errno(&self) -> i32 {
        match self {
            EngineError::Device(e) => e.errno(),
            EngineError::Format(FormatError::NotAugefs { .. }) => 22, // EINVAL
            EngineError::Format(_) => 117, // EUCLEAN: structure needs cleaning
            EngineError::Pmr(_) => 5,
            EngineError::Space(e) => e.errno(),
            EngineError::ExistingFileSystem { .. } => 17, // EEXIST
            EngineError::PmrMismatch { .. }
            | EngineError::PmrSizeMismatch { .. }
            | EngineError::PmrRequired
            | EngineError::PmrUnexpected => 22,
        }
    }
}
