//! PMR errors: expected failures of opening, mapping, persisting and reading the header
//! of a persistent memory region (docs/DESIGN.md §5, docs/FORMAT.md §7).
//!
//! Invariants:
//! - Misuse (out-of-range offsets, misaligned atomics, crash images of a file-backed
//!   region) is a bug and panics; only conditions a correct program can meet are here.
//! - Each variant keeps the errno a front end reports ([`PmrError::errno`]).

use format::FormatError;
use std::fmt;
use std::path::PathBuf;
use thiserror::Error;

#[derive(Debug, Error)]
#[non_exhaustive]
pub enum PmrError {
    #[error("cannot open PMR {}: {source}", path.display())]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("PMR {} is in use by another process or mount (it is locked); augefs never opens a PMR twice", path.display())]
    InUse { path: PathBuf },
    #[error("PMR too small: {size} bytes; augefs needs at least {min} bytes ({} MiB)", min >> 20)]
    TooSmall { size: u64, min: u64 },
    #[error("PMR size {size} is not a multiple of 4096 bytes")]
    Misaligned { size: u64 },
    #[error("PMR header: {0}")]
    Format(#[from] FormatError),
    #[error("cannot map PMR: {source}")]
    Map { source: std::io::Error },
    /// msync failed: the bytes may not be durable. The caller must stop trusting the
    /// region (the file system turns read-only) rather than retry.
    #[error("persisting PMR bytes {offset}..{end} failed: {source}", end = offset + len)]
    Persist {
        offset: u64,
        len: u64,
        source: std::io::Error,
    },
    /// The header names another file system: this PMR was formatted with a different
    /// device.
    #[error("PMR belongs to file system {found}, not to {expected}")]
    ForeignFileSystem { expected: Uuid, found: Uuid },
}

impl PmrError {
    /// The errno a front end reports for this error.
    pub fn errno(&self) -> i32 {
        match self {
            PmrError::Open { source, .. }
            | PmrError::Map { source }
            | PmrError::Persist { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            PmrError::InUse { .. } => libc::EBUSY,
            PmrError::TooSmall { .. } | PmrError::Misaligned { .. } => libc::EINVAL,
            PmrError::Format(_) => libc::EUCLEAN,
            PmrError::ForeignFileSystem { .. } => libc::EINVAL,
        }
    }
}

/// A file-system UUID, printed as 32 hex digits in 8-4-4-4-12 groups.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Uuid(pub [u8; 16]);

impl fmt::Display for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, b) in self.0.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                f.write_str("-")?;
            }
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_prints_in_groups() {
        let u = Uuid([
            0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab,
            0xcd, 0xef,
        ]);
        assert_eq!(u.to_string(), "01234567-89ab-cdef-0123-456789abcdef");
    }

    #[test]
    fn errnos() {
        assert_eq!(PmrError::InUse { path: "x".into() }.errno(), libc::EBUSY);
        assert_eq!(PmrError::TooSmall { size: 1, min: 2 }.errno(), libc::EINVAL);
        let e = PmrError::Open {
            path: "x".into(),
            source: std::io::Error::from_raw_os_error(2),
        };
        assert_eq!(e.errno(), libc::ENOENT);
        assert!(e.to_string().contains("cannot open PMR x"));
    }
}
