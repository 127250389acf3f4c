//! Space management: which 2 MiB segment belongs to whom, which of its blocks are live,
//! and which segment garbage collection should clean next (docs/DESIGN.md
//! §8; augefs.txt §VI-A; F2FS's free-segment map, SIT and victim selection).
//!
//! - [`pool`]: the one free-segment pool shared by every domain and by MetaDB's tables,
//!   with a reserve kept for GC and the rule that a freed segment is reused only after a
//!   checkpoint made its freeing durable. [`pool::MetaDbSpace`] lends it to MetaDB as a
//!   `metadb::TableStore`.
//! - [`seginfo`]: one domain's segment information (valid-block counts, validity bitmaps,
//!   kind, last-modified time) and its checkpoint encoding (docs/FORMAT.md §6.1).
//! - [`victim`]: the GC victim policy, a pure function (greedy and cost-benefit).
//!
//! Invariants:
//! - A segment is free, owned by exactly one owner (a domain or MetaDB), pending (released
//!   by a domain, its freeing not yet durable), or being discarded; never two at once.
//! - These modules do no IO: the caller writes checkpoints and issues discards.
//! - Time comes from an injected `platform::Clock`, never the system clock.

pub mod pool;
pub mod seginfo;
pub mod victim;

use format::{Corruption, DomainId};
use thiserror::Error;

/// Who owns a segment of the segment area.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Owner {
    /// A domain's data or node log.
    Domain(DomainId),
    /// MetaDB's sorted tables.
    MetaDb,
}

/// Errors of space management: running out of space, and bytes that cannot be trusted.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum SpaceError {
    /// An allocation stops while `free <= reserve`, `reserve` being what that kind of
    /// allocation keeps back (ordinary: GC reserve + MetaDB headroom; MetaDB: half the GC
    /// reserve; GC: nothing).
    /// `pending` segments become free after the next checkpoint of their domain (or, when
    /// discards are in use, once their discard is done).
    #[error("no space left: {free} free segments, {reserve} kept back (GC reserve and MetaDB headroom), {pending} waiting for a checkpoint or discard")]
    NoSpace {
        free: u32,
        reserve: u32,
        pending: u32,
    },
    #[error("corrupted {0}")]
    Corruption(Corruption),
}

impl SpaceError {
    pub(crate) fn corruption(
        what: impl Into<String>,
        location: impl Into<String>,
        expected: impl std::fmt::Display,
        got: impl std::fmt::Display,
    ) -> SpaceError {
        SpaceError::Corruption(Corruption::new(what, location, expected, got))
    }

    /// The errno a front end reports.
    pub fn errno(&self) -> i32 {
        match self {
            SpaceError::NoSpace { .. } => 28, // ENOSPC
            SpaceError::Corruption(_) => 117, // EUCLEAN: structure needs cleaning
        }
    }
}
