//! Typed errors for decoding and geometry. Corruption is structured: what, where,
//! expected, got.

use std::fmt;
use thiserror::Error;

/// Where a reader met bytes it cannot trust.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Corruption {
    /// The structure, e.g. "superblock copy 0".
    pub what: String,
    /// Where it was read, e.g. "byte 4096".
    pub location: String,
    pub expected: String,
    pub got: String,
}

impl Corruption {
    pub fn new(
        what: impl Into<String>,
        location: impl Into<String>,
        expected: impl fmt::Display,
        got: impl fmt::Display,
    ) -> Corruption {
        Corruption {
            what: what.into(),
            location: location.into(),
            expected: expected.to_string(),
            got: got.to_string(),
        }
    }
}

impl fmt::Display for Corruption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} at {}: expected {}, got {}",
            self.what, self.location, self.expected, self.got
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum GeometryError {
    #[error("device too small: {size_bytes} bytes; augefs needs at least {min_bytes} bytes ({} MiB)", min_bytes >> 20)]
    DeviceTooSmall { size_bytes: u64, min_bytes: u64 },
    #[error(
        "domain count {count} out of range: 1 to {max} (this device has room for at most {fit})"
    )]
    DomainCount { count: u32, max: u32, fit: u32 },
    #[error("PMR too small: {size_bytes} bytes; augefs needs at least {min_bytes} bytes ({} MiB)", min_bytes >> 20)]
    PmrTooSmall { size_bytes: u64, min_bytes: u64 },
    #[error("PMR size {size_bytes} is not a multiple of 4096 bytes")]
    PmrMisaligned { size_bytes: u64 },
    #[error(
        "growing from {from_bytes} to {to_bytes} bytes adds no whole segment (an added area \
         needs {min_bytes} bytes more, at least, for a segment and its summary)"
    )]
    GrowTooSmall {
        from_bytes: u64,
        to_bytes: u64,
        min_bytes: u64,
    },
    #[error("the file system has grown {max} times already, the most its superblock records")]
    TooManyGrows { max: usize },
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum FormatError {
    #[error("not an augefs {what}: no augefs magic found")]
    NotAugefs { what: &'static str },
    #[error("unsupported format version {found}; this augefs reads version {supported}")]
    UnsupportedVersion { found: u32, supported: u32 },
    #[error("corrupted {0}")]
    Corruption(Corruption),
    #[error(transparent)]
    Geometry(#[from] GeometryError),
}

impl FormatError {
    pub fn corruption(
        what: impl Into<String>,
        location: impl Into<String>,
        expected: impl fmt::Display,
        got: impl fmt::Display,
    ) -> Self {
        FormatError::Corruption(Corruption::new(what, location, expected, got))
    }
}
