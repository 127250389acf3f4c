//! The augefs engine: the log-structured data layout (segments, domains, the block index
//! in MetaDB, garbage collection, checkpoints, recovery) over the device layer.
//!
//! - [`log`]: the mounted engine: per-domain logs, asynchronous fsync, GC, checkpoints,
//!   recovery (docs/DESIGN.md §9).
//!
//! The format-time work every later layer relies on:
//! - [`mkfs`]: lays out a device (docs/FORMAT.md §2) and writes the initial state;
//! - [`image`]: reads and validates superblocks and checkpoint slots;
//! - [`inspect`]: a structured report of an image for `augefs inspect`.
//!
//! and the space-management layer the log will run on:
//! - [`space`]: the shared segment pool (also MetaDB's table store), per-domain segment
//!   information, and the GC victim policy.
//!
//! Invariants:
//! - A device is formatted only through [`mkfs::format`], which invalidates old
//!   superblocks first and writes the new ones last, so an interrupted mkfs never leaves
//!   an image that opens.
//! - All IO names its cause (superblock, checkpoint, WAL, manifest, tool).
// Library code says why it cannot fail (`expect`) or returns an error; tests may unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod error;
pub mod image;
pub mod inspect;
pub mod log;
pub mod mkfs;
pub mod progress;
pub mod resize;
pub mod space;

pub use error::EngineError;
