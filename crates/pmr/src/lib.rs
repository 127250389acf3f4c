//! The PMR layer: a small byte-addressable persistent memory region with explicit
//! persistence points (docs/DESIGN.md §5; layout in docs/FORMAT.md §7).
//!
//! MetaDB keeps its fine-grained parallel WAL in the PMR (augefs.txt §V-B: 8-byte WAL
//! file slots in a metadata area, 64-byte-aligned log entries in a data area) and the
//! engine keeps its per-CPU write versions at the region's end (§VI-B). This crate
//! provides the region, not those structures:
//! - [`Pmr`]: a mapped file (DAX with `clwb`/`clflushopt`/`clflush` + `sfence`, or an
//!   emulated PMR persisted with `msync`) or an in-memory region with a crash model;
//!   byte and 8-byte-atomic access from many threads; `persist` by 64-byte line;
//!   per-cause accounting; optional injected per-line latency.
//! - [`format_region`] / [`read_header`]: the region's header.
//!
//! Invariants:
//! - The persistence unit is the 64-byte line: a crash keeps or loses each unpersisted
//!   line whole, and keeps every persisted line.
//! - Nothing is durable until `persist` returns `Ok`.
//! - Concurrent writers write disjoint byte ranges (the WAL reserves ranges with a CAS
//!   on its tail); the region itself takes no locks on the store path.
// Library code says why it cannot fail (`expect`) or returns an error; tests may unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

mod crash_model;
pub mod error;
pub mod header;
mod mapping;
pub mod persist_mode;
pub mod region;

pub use error::{PmrError, Uuid};
pub use header::{check_fs_uuid, format_region, read_header, read_header_for};
pub use persist_mode::{FlushInstruction, PersistMode};
pub use platform::IoCause;
pub use region::{Pmr, PmrOptions, LINE_BYTES};
