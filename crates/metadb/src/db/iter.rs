//! [`DbIterator`]: user-visible iteration over a key range at a snapshot.
//!
//! Merges the memtables and the tables overlapping the range, and yields for each user
//! key its newest version visible at the snapshot, skipping deleted keys.
//!
//! Invariants:
//! - Keys come out strictly increasing, each at most once.
//! - The iterator holds its `SuperVersion` (and so its tables) and its snapshot for its
//!   whole life: compaction can neither reuse the tables' segments nor drop versions it
//!   needs.

use super::{Snapshot, SuperVersion};
use crate::error::MetaDbError;
use crate::iter::{InternalIterator, MergingIterator};
use crate::table::reader::ReadOptions;
use crate::types::{InternalKey, ValueKind};
use std::sync::Arc;

/// One key and its value.
pub type KeyValue = (Vec<u8>, Vec<u8>);

#[derive(Debug)]
pub struct DbIterator {
    merged: MergingIterator,
    end: Option<Vec<u8>>,
    snapshot: Snapshot,
    /// The last user key yielded or skipped (all its older versions are skipped).
    last_key: Option<Vec<u8>>,
    started: bool,
    start: Vec<u8>,
    _sv: Arc<SuperVersion>,
}

impl DbIterator {
    pub(super) fn new(
        sv: Arc<SuperVersion>,
        start: Vec<u8>,
        end: Option<Vec<u8>>,
        snapshot: Snapshot,
    ) -> Result<DbIterator, MetaDbError> {
        let mut children: Vec<Box<dyn InternalIterator + Send>> = Vec::new();
        for mem in sv.memtables() {
            children.push(Box::new(mem.iter()));
        }
        let v = &sv.version;
        for level in 0..v.level_count() as u32 {
            for meta in v.level(level) {
                let below_end = end
                    .as_deref()
                    .is_none_or(|e| meta.smallest.user_key.as_slice() < e);
                if below_end && meta.largest.user_key.as_slice() >= start.as_slice() {
                    children.push(Box::new(
                        sv.table(meta.id).table.iter_with(ReadOptions::LOOKUP),
                    ));
                }
            }
        }
        Ok(DbIterator {
            merged: MergingIterator::new(children),
            end,
            snapshot,
            last_key: None,
            started: false,
            start,
            _sv: sv,
        })
    }

    fn advance(&mut self) -> Result<Option<KeyValue>, MetaDbError> {
        if !self.started {
            self.started = true;
            self.merged
                .seek(&InternalKey::seek_key(&self.start, self.snapshot.seq()))?;
        }
        while self.merged.valid() {
            let key = self.merged.user_key();
            if self.end.as_deref().is_some_and(|e| key >= e) {
                return Ok(None);
            }
            let visible = self.merged.seq() <= self.snapshot.seq();
            let seen = self.last_key.as_deref() == Some(key);
            if visible && !seen {
                let key = key.to_vec();
                let kind = self.merged.kind();
                let value = self.merged.value().to_vec();
                self.last_key = Some(key.clone());
                self.merged.next()?;
                if kind == ValueKind::Put {
                    return Ok(Some((key, value)));
                }
                continue;
            }
            self.merged.next()?;
        }
        Ok(None)
    }
}

impl Iterator for DbIterator {
    type Item = Result<KeyValue, MetaDbError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.advance().transpose()
    }
}
