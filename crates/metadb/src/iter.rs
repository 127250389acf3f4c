//! Internal iterators over versioned entries, and the merging iterator that combines the
//! memtables and tables into one sorted stream.
//!
//! Invariants:
//! - An internal iterator yields entries in internal-key order (user key ascending,
//!   sequence number descending); all versions are yielded, tombstones included.
//! - Errors (IO, corruption) are returned from `seek`/`next`, never hidden.

use crate::error::MetaDbError;
use crate::types::{InternalKey, Seq, ValueKind};

/// A cursor over versioned entries in internal-key order.
pub trait InternalIterator {
    /// Positions at the first entry `>= target` (in internal-key order).
    fn seek(&mut self, target: &InternalKey) -> Result<(), MetaDbError>;
    fn seek_to_first(&mut self) -> Result<(), MetaDbError>;
    fn valid(&self) -> bool;
    /// The current entry's user key. Requires `valid()`.
    fn user_key(&self) -> &[u8];
    fn seq(&self) -> Seq;
    fn kind(&self) -> ValueKind;
    fn value(&self) -> &[u8];
    fn next(&mut self) -> Result<(), MetaDbError>;
}
