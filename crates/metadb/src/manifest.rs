//! The manifest: the durable list of live tables and how far the WAL has been flushed
//! (docs/FORMAT.md §5.4). (Being written.)

use crate::table::{TableId, TableMeta};
use crate::types::Seq;

/// One atomic change to the database's durable state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VersionEdit {
    /// Tables added, with their level.
    pub added: Vec<(u32, TableMeta)>,
    /// Tables removed (by id), with the level they were in.
    pub removed: Vec<(u32, TableId)>,
    /// Every WAL generation up to and including this one is in tables.
    pub flushed_generation: Option<u64>,
    /// The highest sequence number any table holds.
    pub last_seq: Option<Seq>,
    /// The next table id to assign.
    pub next_table_id: Option<u64>,
}
