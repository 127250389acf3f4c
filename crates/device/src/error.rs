//! Device errors. Each keeps the errno a front end will report.

use std::path::PathBuf;
use thiserror::Error;

#[derive(Debug, Error)]
#[non_exhaustive]
pub enum DeviceError {
    #[error("{op} at byte {offset} failed: {source}")]
    Io {
        op: &'static str,
        offset: u64,
        source: std::io::Error,
    },
    #[error("cannot open {}: {source}", path.display())]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Another open holds the image's lock (augefs never opens an image twice);
    /// `holder` is what could be learnt of who (crate::holder).
    #[error("{} is {}; augefs never opens an image twice", path.display(), match holder {
        Some(h) => h.to_string(),
        None => "in use by another process or mount (it is locked)".to_string(),
    })]
    InUse {
        path: PathBuf,
        holder: Option<crate::holder::Holder>,
    },
    #[error("{} is neither a regular file nor a block device", path.display())]
    NotADevice { path: PathBuf },
    #[error("io_uring unavailable: {reason}")]
    UringUnavailable { reason: String },
    #[error("injected failure of {op} number {nth}")]
    Injected { op: &'static str, nth: u64 },
}

impl DeviceError {
    /// The errno a front end reports for this error.
    pub fn errno(&self) -> i32 {
        match self {
            DeviceError::Io { source, .. } | DeviceError::Open { source, .. } => {
                source.raw_os_error().unwrap_or(libc::EIO)
            }
            DeviceError::InUse { .. } => libc::EBUSY,
            DeviceError::NotADevice { .. } => libc::ENODEV,
            DeviceError::UringUnavailable { .. } => libc::ENOSYS,
            DeviceError::Injected { .. } => libc::EIO,
        }
    }
}
