//! Migration of a PMR half about to be reused (augefs.txt §V-B "PMR Size"): its
//! unreleased entries are copied to the device backing region as chunks (one or more per
//! (generation, lane), at most `MIGRATION_CHUNK_UNITS_MAX` units each) and flushed.
//!
//! Invariants:
//! - Everything is allocated before anything is written; if the region cannot hold it
//!   all, the allocations are given back and the switch fails with `WalFull`, leaving the
//!   half as it was.
//! - The flush returns before the caller clears the half's slots, so each entry is
//!   durable in at least one place at every moment (recovery deduplicates copies).

use super::scan::scan_range;
use super::{PmrWal, Segment};
use crate::error::MetaDbError;
use crate::wal::chunk::{ChunkStore, NewChunk};
use crate::wal::record::{encode_record, record_bytes, ChunkKind, RecordId, CHUNK_DATA_OFFSET};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

/// Largest chunk a migration writes (longer lanes take several chunks).
const MIGRATION_CHUNK_UNITS_MAX: u32 = 16;

impl PmrWal {
    /// Copies the unreleased entries of `live` (closed segments of the half about to be
    /// reused) to the device as chunks, and flushes them.
    pub(super) fn migrate(&self, live: &[Segment]) -> Result<(), MetaDbError> {
        let released = self.released_through.load(Ordering::SeqCst);
        let mut lanes: BTreeMap<(u64, u16), BTreeMap<u64, Vec<u8>>> = BTreeMap::new();
        for segment in live {
            let end = segment.end.expect("a closed segment");
            for (id, payload) in scan_range(&self.pmr, segment.start, end).entries {
                if id.generation > released {
                    lanes
                        .entry((id.generation, id.lane))
                        .or_default()
                        .insert(id.lane_seq, payload);
                }
            }
        }
        let mut chunks: Vec<(NewChunk, usize)> = Vec::new();
        let mut failed = None;
        'lanes: for ((generation, lane), records) in &lanes {
            let mut records = records.iter().peekable();
            while records.peek().is_some() {
                // Fill a chunk of up to MIGRATION_CHUNK_UNITS_MAX units (or one record).
                let mut data = 0usize;
                let mut batch = Vec::new();
                while let Some((&lane_seq, payload)) = records.peek() {
                    let len = record_bytes(payload.len());
                    let fits = ChunkStore::units_for(data + len) <= MIGRATION_CHUNK_UNITS_MAX;
                    if !batch.is_empty() && !fits {
                        break;
                    }
                    batch.push((lane_seq, *payload));
                    data += len;
                    records.next();
                }
                let mut chunk = match self.store.new_chunk(
                    *generation,
                    *lane,
                    ChunkKind::Migrated,
                    ChunkStore::units_for(data),
                ) {
                    Ok(chunk) => chunk,
                    Err(e) => {
                        failed = Some(e);
                        break 'lanes;
                    }
                };
                let mut at = CHUNK_DATA_OFFSET;
                for (lane_seq, payload) in batch {
                    let id = RecordId {
                        generation: *generation,
                        lane: *lane,
                        lane_seq,
                        // The PMR entry's evidence is not carried over (less evidence,
                        // never wrong evidence).
                        durable: 0,
                    };
                    encode_record(&mut chunk.buf[at..], id, chunk.crc, payload);
                    at += record_bytes(payload.len());
                }
                chunks.push((chunk, at));
            }
        }
        if let Some(error) = failed {
            for (chunk, _) in &chunks {
                self.store.discard_chunk(chunk);
            }
            return Err(error);
        }
        let writes = chunks
            .iter()
            .map(|(c, filled)| self.store.chunk_write(c.offset, &c.buf, 0, *filled))
            .collect();
        self.store.run(writes)?;
        self.crash_point("switch:migration_written");
        self.store.flush()
    }
}
