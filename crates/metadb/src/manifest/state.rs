//! [`ManifestState`]: the result of folding every edit, in order, into the empty state.

use super::edit::{encoded_edit_len, EditError, VersionEdit};
use super::layout::FRAME_BYTES;
use crate::batch::KEY_BYTES_MAX;
use crate::error::MetaDbError;
use crate::table::{TableId, TableMeta};
use crate::types::Seq;
use crate::version::{Version, LEVEL_COUNT};
use format::constants::SEGMENT_SIZE_BYTES;
use format::SegmentNo;
use std::collections::BTreeMap;

/// What the manifest records: the result of folding every edit, in order, into the
/// empty state.
///
/// Invariants: every table id and every segment is live at most once; the three
/// counters never decrease; `next_table_id` is above every table id ever added.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestState {
    /// Per level (exactly `LEVEL_COUNT`), live tables by id.
    levels: Vec<BTreeMap<TableId, TableMeta>>,
    /// Index: which live table holds each segment.
    segments: BTreeMap<SegmentNo, TableId>,
    flushed_generation: u64,
    last_seq: Seq,
    next_table_id: u64,
    compaction_cursors: BTreeMap<u32, Vec<u8>>,
}

impl Default for ManifestState {
    fn default() -> Self {
        ManifestState {
            levels: vec![BTreeMap::new(); LEVEL_COUNT],
            segments: BTreeMap::new(),
            flushed_generation: 0,
            last_seq: 0,
            // Table id 0 is never assigned, so it can mean "none".
            next_table_id: 1,
            compaction_cursors: BTreeMap::new(),
        }
    }
}

impl ManifestState {
    /// Every WAL generation up to and including this one is in tables (0: none yet).
    pub fn flushed_generation(&self) -> u64 {
        self.flushed_generation
    }

    pub fn last_seq(&self) -> Seq {
        self.last_seq
    }

    pub fn next_table_id(&self) -> u64 {
        self.next_table_id
    }

    pub fn compaction_cursors(&self) -> &BTreeMap<u32, Vec<u8>> {
        &self.compaction_cursors
    }

    /// Live tables with their level, by level then id.
    pub fn tables(&self) -> impl Iterator<Item = (u32, &TableMeta)> {
        self.levels
            .iter()
            .enumerate()
            .flat_map(|(l, tables)| tables.values().map(move |t| (l as u32, t)))
    }

    /// Live tables per level (level -> tables by id).
    pub fn tables_by_level(&self) -> Vec<Vec<TableMeta>> {
        self.levels
            .iter()
            .map(|tables| tables.values().cloned().collect())
            .collect()
    }

    pub fn table_count(&self) -> usize {
        self.segments.len()
    }

    /// Segments holding live tables, ascending.
    pub fn segments(&self) -> impl Iterator<Item = SegmentNo> + '_ {
        self.segments.keys().copied()
    }

    /// The live tables as a [`Version`]; a broken version invariant (say, overlapping
    /// tables in level 1) is corruption of the manifest.
    pub fn version(&self) -> Result<Version, MetaDbError> {
        Version::from_tables(self.tables().map(|(l, t)| (l, t.clone())))
            .map_err(|e| MetaDbError::corruption("manifest state", e.to_string()))
    }

    fn level_of(&self, id: TableId) -> Option<u32> {
        self.levels
            .iter()
            .position(|tables| tables.contains_key(&id))
            .map(|l| l as u32)
    }

    /// Whether `edit` applies: removed tables are live at the level given, added ones
    /// are not live (or removed by the same edit) and well formed, counters do not go
    /// back. Removals happen before additions, so an edit may move a table.
    pub fn check(&self, edit: &VersionEdit) -> Result<(), EditError> {
        let mut removed: BTreeMap<TableId, SegmentNo> = BTreeMap::new();
        for &(level, id) in &edit.removed {
            let tables = self
                .levels
                .get(level as usize)
                .ok_or(EditError::LevelOutOfRange { level })?;
            let table = tables
                .get(&id)
                .ok_or(EditError::MissingTable { level, id })?;
            if removed.insert(id, table.segment).is_some() {
                return Err(EditError::MissingTable { level, id });
            }
        }
        let mut added_ids = BTreeMap::new();
        let mut added_segments = BTreeMap::new();
        for (level, t) in &edit.added {
            if *level as usize >= LEVEL_COUNT {
                return Err(EditError::LevelOutOfRange { level: *level });
            }
            check_table(t)?;
            let live = self.level_of(t.id).is_some() && !removed.contains_key(&t.id);
            if live || added_ids.insert(t.id, ()).is_some() {
                return Err(EditError::DuplicateTable { id: t.id });
            }
            let segment_live = self
                .segments
                .get(&t.segment)
                .is_some_and(|holder| removed.get(holder) != Some(&t.segment));
            if segment_live || added_segments.insert(t.segment, ()).is_some() {
                return Err(EditError::DuplicateSegment {
                    segment: t.segment,
                    id: t.id,
                });
            }
        }
        let counters = [
            (
                "flushed_generation",
                self.flushed_generation,
                edit.flushed_generation,
            ),
            ("last_seq", self.last_seq, edit.last_seq),
            ("next_table_id", self.next_table_id, edit.next_table_id),
        ];
        for (field, from, to) in counters {
            if let Some(to) = to.filter(|&to| to < from) {
                return Err(EditError::Regressed { field, from, to });
            }
        }
        for (level, key) in &edit.compaction_cursors {
            if *level as usize >= LEVEL_COUNT {
                return Err(EditError::LevelOutOfRange { level: *level });
            }
            if key.len() > KEY_BYTES_MAX {
                return Err(EditError::CursorTooLong { bytes: key.len() });
            }
        }
        Ok(())
    }

    /// Folds `edit` in, or changes nothing and says why it does not apply.
    pub fn apply(&mut self, edit: &VersionEdit) -> Result<(), EditError> {
        self.check(edit)?;
        for &(level, id) in &edit.removed {
            let table = self.levels[level as usize]
                .remove(&id)
                .expect("checked: the table is live");
            self.segments.remove(&table.segment);
        }
        for (level, t) in &edit.added {
            self.segments.insert(t.segment, t.id);
            self.levels[*level as usize].insert(t.id, t.clone());
            self.next_table_id = self.next_table_id.max(t.id.0 + 1);
        }
        self.flushed_generation = edit.flushed_generation.unwrap_or(self.flushed_generation);
        self.last_seq = edit.last_seq.unwrap_or(self.last_seq);
        self.next_table_id = self.next_table_id.max(edit.next_table_id.unwrap_or(0));
        for (level, key) in &edit.compaction_cursors {
            self.compaction_cursors.insert(*level, key.clone());
        }
        debug_assert_eq!(
            self.segments.len(),
            self.levels.iter().map(BTreeMap::len).sum::<usize>()
        );
        Ok(())
    }

    /// The whole state as one edit: applied to the empty state it gives this state.
    pub fn to_snapshot_edit(&self) -> VersionEdit {
        VersionEdit {
            added: self.tables().map(|(l, t)| (l, t.clone())).collect(),
            removed: Vec::new(),
            flushed_generation: Some(self.flushed_generation),
            last_seq: Some(self.last_seq),
            next_table_id: Some(self.next_table_id),
            compaction_cursors: self
                .compaction_cursors
                .iter()
                .map(|(l, k)| (*l, k.clone()))
                .collect(),
        }
    }

    /// Bytes of this state's snapshot record (frame included).
    pub fn snapshot_record_bytes(&self) -> usize {
        FRAME_BYTES + encoded_edit_len(&self.to_snapshot_edit())
    }
}

fn check_table(t: &TableMeta) -> Result<(), EditError> {
    let bad = |reason| Err(EditError::BadTable { id: t.id, reason });
    if t.id.0 == 0 {
        return bad("table id 0 is never assigned");
    }
    if t.len_bytes == 0 || u64::from(t.len_bytes) > SEGMENT_SIZE_BYTES {
        return bad("length outside one segment");
    }
    if t.smallest.user_key.len() > KEY_BYTES_MAX || t.largest.user_key.len() > KEY_BYTES_MAX {
        return bad("key longer than KEY_BYTES_MAX");
    }
    if t.smallest > t.largest {
        return bad("smallest key above largest");
    }
    Ok(())
}
