//! Sorted tables: immutable sorted runs of versioned entries, each in one 2 MiB segment
//! (docs/FORMAT.md §5.3).
//!
//! Layout pieces ([`layout`]: footer, limits, varints, checksums), data blocks ([`block`]),
//! the block index ([`index`]) and the bloom filter ([`bloom`]) each have a module.
//! A table is written once by [`builder::TableBuilder`] (memtable flush or compaction) and
//! read by [`reader::Table`]: a block index and a bloom filter kept in memory, data blocks
//! read through the [`cache::BlockCache`].
//!
//! Invariants:
//! - Entries are in internal-key order; every block and the footer carry a CRC-32C.
//! - A table fits in one segment (`format::constants::SEGMENT_SIZE_BYTES`).

pub mod block;
pub mod bloom;
pub mod builder;
pub mod cache;
pub mod index;
pub mod layout;
pub mod reader;

use crate::types::InternalKey;
use format::SegmentNo;

/// Identifies a table for the life of the database (never reused).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TableId(pub u64);

/// What the manifest records about a table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableMeta {
    pub id: TableId,
    pub segment: SegmentNo,
    /// Bytes of the table (a multiple of 4096, at most one segment).
    pub len_bytes: u32,
    pub entries: u64,
    /// First and last internal keys.
    pub smallest: InternalKey,
    pub largest: InternalKey,
}
