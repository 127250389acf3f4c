//! augefs on-disk and on-PMR format: pure types, encoders, decoders and geometry.
//!
//! This crate does no IO. Every structure that reaches a device or a PMR is described
//! here as a table of [`layout::Field`]s, and `docs/FORMAT.md` carries the same tables;
//! `tests/format_doc.rs` fails if the two disagree.
//!
//! Invariants:
//! - Integers are little-endian.
//! - Every structure a reader could meet as garbage carries a CRC-32C ([`checksum`]).
//! - On-disk numbers (magics, tags, versions) are forever: retired values stay as
//!   comments where they were defined.
// Library code says why it cannot fail (`expect`) or returns an error; tests may unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod checkpoint;
pub mod checksum;
pub mod constants;
pub mod error;
pub mod geometry;
pub mod ids;
pub mod keys;
pub mod layout;
pub mod pmr;
pub mod summary;
pub mod superblock;

pub use error::{Corruption, FormatError, GeometryError};
pub use geometry::{Geometry, Region};
pub use ids::{BlockAddr, DomainId, InodeNo, SegmentNo, SeqNo};
pub use superblock::Superblock;
