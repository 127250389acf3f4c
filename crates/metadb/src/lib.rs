//! MetaDB: the LSM-tree key-value store that holds augefs's metadata (augefs.txt §V).
//!
//! File-system metadata becomes key-value operations: `m:<parent-ino>:<name>` -> inode,
//! segment information, superblock fields. MetaDB is built so threads update and persist
//! independently:
//! - **Parallel request processing** (§V-A): a concurrent skiplist memtable; each write
//!   takes sequence numbers with one atomic add, logs to its own WAL lane and inserts on
//!   its own; the only barrier is the per-memtable in-flight counter at memtable switch.
//! - **Fine-grained parallel WAL** (§V-B): on a PMR, or in ssd mode on the device, a write
//!   persists only its own lane's records ([`wal`]).
//! - Sorted tables in 2 MiB segments lent by the layer above ([`table_store`]), with bloom
//!   filters and a block cache; background flush and leveled compaction; a manifest.
//! - For the engine, which stores block mappings that name its own data writes: pinned
//!   WAL lanes (`MetaDb::write_pinned`), one device flush for WAL and data
//!   (`MetaDb::persist_covering`), a barrier before memtable flushes and a replay filter
//!   at recovery ([`hooks`]).
//!
//! Invariants:
//! - A write acknowledged with `Durability::Sync` survives any crash.
//! - Recovery yields, per WAL lane, a prefix of that lane's writes (all acknowledged sync
//!   writes included) on top of the durable tables.
//! - MetaDB does not order concurrent writes to the same key: callers that need an order
//!   hold their own lock (the file system's inode locks); see docs/DESIGN.md §6.2.
// Library code says why it cannot fail (`expect`) or returns an error; tests may unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod batch;
pub mod compaction;
pub mod db;
pub mod error;
pub mod gate;
pub mod hooks;
pub mod iter;
pub mod manifest;
pub mod memtable;
pub mod sync;
pub mod table;
pub mod table_store;
pub mod types;
pub mod version;
pub mod wal;

pub use batch::WriteBatch;
pub use db::{DbIterator, MetaDb, MetaDbConfig, MetaDbEnv, MetaDbStats, Salvaged, Snapshot};
pub use error::MetaDbError;
pub use hooks::{NoHooks, ReplayRecord, WriteHooks};
pub use table_store::{SegmentPool, TableStore};
pub use types::{CallerWrites, Durability, Receipt, Seq, ValueKind, WalPos};
