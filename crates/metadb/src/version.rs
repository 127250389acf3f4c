//! [`Version`]: an immutable snapshot of which tables are live, level by level
//! (docs/DESIGN.md §6.6; the durable form is the manifest, docs/FORMAT.md §5.4).
//!
//! A version is replaced, never changed: [`Version::apply`] builds the next one from a
//! [`VersionEdit`], and readers keep the `Arc<Version>` they started with. Tables are held
//! as `Arc<TableMeta>`; the database keeps its open readers in a map by [`TableId`]
//! beside the version, so this module stays pure and testable without a device.
//!
//! Invariants (checked by every constructor; a violation in `apply` is a bug and panics):
//! - There are exactly [`LEVEL_COUNT`] levels.
//! - Level 0 is ordered newest first: by [`TableId`] descending (the database assigns
//!   level-0 ids in memtable order). Its tables may overlap.
//! - Levels 1 and up are ordered by smallest key and do not overlap *by user key*: a
//!   table's largest user key is below the next table's smallest user key. Compaction
//!   therefore never splits the versions of one user key across two output tables.
//! - A table id appears at most once in the version, and so does a segment.
//! - Every table's smallest internal key is at most its largest.

use crate::manifest::VersionEdit;
use crate::table::{TableId, TableMeta};
use format::SegmentNo;
use std::collections::HashMap;
use std::sync::Arc;
use thiserror::Error;

/// Levels of the tree: level 0 (flushed memtables) and six sorted levels. With a 8 MiB
/// level 1 and a factor of 10 per level, level 6 targets 8 TiB: more than any device.
pub const LEVEL_COUNT: usize = 7;

/// Why a set of tables is not a valid version.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum VersionError {
    #[error("level {level} out of range (levels are 0 to {})", LEVEL_COUNT - 1)]
    LevelOutOfRange { level: u32 },
    #[error("table {id:?} appears twice")]
    DuplicateTable { id: TableId },
    #[error("table {id:?} is not in level {level}")]
    MissingTable { level: u32, id: TableId },
    #[error("segment {segment} holds tables {first:?} and {second:?}")]
    DuplicateSegment {
        segment: SegmentNo,
        first: TableId,
        second: TableId,
    },
    #[error("tables {first:?} and {second:?} overlap in level {level}")]
    Overlap {
        level: u32,
        first: TableId,
        second: TableId,
    },
    #[error("table {id:?} has its smallest key above its largest")]
    InvertedRange { id: TableId },
}

/// An immutable set of live tables, per level.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    levels: Vec<Vec<Arc<TableMeta>>>,
}

impl Default for Version {
    fn default() -> Self {
        Version::empty()
    }
}

impl Version {
    pub fn empty() -> Version {
        Version {
            levels: vec![Vec::new(); LEVEL_COUNT],
        }
    }

    /// A version holding `tables` (level, table), in any order. Used at recovery, where a
    /// violation means the manifest is corrupt.
    pub fn from_tables(
        tables: impl IntoIterator<Item = (u32, TableMeta)>,
    ) -> Result<Version, VersionError> {
        let mut version = Version::empty();
        for (level, table) in tables {
            version
                .levels
                .get_mut(level as usize)
                .ok_or(VersionError::LevelOutOfRange { level })?
                .push(Arc::new(table));
        }
        version.sort_and_check(&[true; LEVEL_COUNT])?;
        Ok(version)
    }

    /// The version after `edit`. Panics if the edit breaks an invariant: edits are built
    /// by the database from this very version, so that is a bug.
    pub fn apply(&self, edit: &VersionEdit) -> Version {
        match self.try_apply(edit) {
            Ok(version) => version,
            Err(e) => panic!("version edit breaks an invariant: {e}"),
        }
    }

    /// The version after `edit`, or why the edit is invalid here. Removals happen before
    /// additions, so an edit may move a table to another level (remove, then add).
    pub fn try_apply(&self, edit: &VersionEdit) -> Result<Version, VersionError> {
        let mut next = self.clone();
        let mut touched = [false; LEVEL_COUNT];
        for &(level, id) in &edit.removed {
            let tables = next
                .levels
                .get_mut(level as usize)
                .ok_or(VersionError::LevelOutOfRange { level })?;
            let at = tables
                .iter()
                .position(|t| t.id == id)
                .ok_or(VersionError::MissingTable { level, id })?;
            tables.remove(at);
        }
        for (level, table) in &edit.added {
            let tables = next
                .levels
                .get_mut(*level as usize)
                .ok_or(VersionError::LevelOutOfRange { level: *level })?;
            tables.push(Arc::new(table.clone()));
            touched[*level as usize] = true;
        }
        next.sort_and_check(&touched)?;
        debug_assert_eq!(
            next.table_count() + edit.removed.len(),
            self.table_count() + edit.added.len()
        );
        Ok(next)
    }

    /// Sorts the `touched` levels and checks every invariant (the order and overlap of
    /// untouched levels cannot have changed: removing a table keeps both).
    fn sort_and_check(&mut self, touched: &[bool; LEVEL_COUNT]) -> Result<(), VersionError> {
        assert_eq!(self.levels.len(), LEVEL_COUNT);
        let mut ids: HashMap<TableId, ()> = HashMap::with_capacity(self.table_count());
        let mut segments: HashMap<SegmentNo, TableId> = HashMap::with_capacity(self.table_count());
        for (level, tables) in self.levels.iter_mut().enumerate() {
            if touched[level] {
                if level == 0 {
                    tables.sort_by_key(|t| std::cmp::Reverse(t.id));
                } else {
                    tables.sort_by(|a, b| {
                        a.smallest
                            .user_key
                            .cmp(&b.smallest.user_key)
                            .then(a.id.cmp(&b.id))
                    });
                }
            }
            for table in tables.iter() {
                if table.smallest > table.largest {
                    return Err(VersionError::InvertedRange { id: table.id });
                }
                if ids.insert(table.id, ()).is_some() {
                    return Err(VersionError::DuplicateTable { id: table.id });
                }
                if let Some(first) = segments.insert(table.segment, table.id) {
                    return Err(VersionError::DuplicateSegment {
                        segment: table.segment,
                        first,
                        second: table.id,
                    });
                }
            }
            if level > 0 {
                for pair in tables.windows(2) {
                    if pair[0].largest.user_key >= pair[1].smallest.user_key {
                        let level = level as u32;
                        return Err(VersionError::Overlap {
                            level,
                            first: pair[0].id,
                            second: pair[1].id,
                        });
                    }
                }
            }
        }
        Ok(())
    }

    pub fn level_count(&self) -> usize {
        self.levels.len()
    }

    /// The tables of `level`: level 0 newest first, others by smallest key.
    pub fn level(&self, level: u32) -> &[Arc<TableMeta>] {
        &self.levels[level as usize]
    }

    /// Every live table with its level, level by level in level order.
    pub fn tables(&self) -> impl Iterator<Item = (u32, &Arc<TableMeta>)> {
        self.levels
            .iter()
            .enumerate()
            .flat_map(|(l, tables)| tables.iter().map(move |t| (l as u32, t)))
    }

    pub fn table_count(&self) -> usize {
        self.levels.iter().map(Vec::len).sum()
    }

    /// The table with `id` and its level.
    pub fn find(&self, id: TableId) -> Option<(u32, &Arc<TableMeta>)> {
        self.tables().find(|(_, t)| t.id == id)
    }

    /// The tables of `level` whose user-key range meets `[smallest, largest]` (both
    /// inclusive), in the level's order: a filter in level 0, a binary search above.
    pub fn overlapping(&self, level: u32, smallest: &[u8], largest: &[u8]) -> Vec<Arc<TableMeta>> {
        assert!(smallest <= largest, "inverted key range");
        let tables = self.level(level);
        let meets = |t: &Arc<TableMeta>| {
            t.smallest.user_key.as_slice() <= largest && t.largest.user_key.as_slice() >= smallest
        };
        if level == 0 {
            return tables.iter().filter(|t| meets(t)).cloned().collect();
        }
        // Sorted and disjoint: the overlapping tables are one contiguous run.
        let first = tables.partition_point(|t| t.largest.user_key.as_slice() < smallest);
        let end = tables
            .partition_point(|t| t.smallest.user_key.as_slice() <= largest)
            .max(first);
        debug_assert!(tables[first..end].iter().all(meets));
        tables[first..end].to_vec()
    }

    /// Bytes of the tables of `level`.
    pub fn level_bytes(&self, level: u32) -> u64 {
        self.level(level)
            .iter()
            .map(|t| u64::from(t.len_bytes))
            .sum()
    }

    /// Bytes per level, level 0 first.
    pub fn level_sizes_bytes(&self) -> Vec<u64> {
        (0..self.levels.len() as u32)
            .map(|l| self.level_bytes(l))
            .collect()
    }

    /// Every segment a live table occupies, ascending.
    pub fn segments(&self) -> Vec<SegmentNo> {
        let mut segments: Vec<SegmentNo> = self.tables().map(|(_, t)| t.segment).collect();
        segments.sort_unstable();
        segments
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{InternalKey, ValueKind};

    fn meta(id: u64, smallest: &str, largest: &str) -> TableMeta {
        TableMeta {
            id: TableId(id),
            segment: SegmentNo(id as u32),
            len_bytes: 4096 * id as u32,
            entries: 10,
            smallest: InternalKey::new(smallest.as_bytes(), 9, ValueKind::Put),
            largest: InternalKey::new(largest.as_bytes(), 1, ValueKind::Put),
        }
    }

    fn add(tables: &[(u32, TableMeta)]) -> VersionEdit {
        VersionEdit {
            added: tables.to_vec(),
            ..VersionEdit::default()
        }
    }

    fn ids(tables: &[Arc<TableMeta>]) -> Vec<u64> {
        tables.iter().map(|t| t.id.0).collect()
    }

    #[test]
    fn orders_levels_and_answers_overlap_queries() {
        let v = Version::empty().apply(&add(&[
            (0, meta(1, "a", "z")),
            (0, meta(3, "c", "d")),
            (0, meta(2, "m", "n")),
            (1, meta(5, "k", "m")),
            (1, meta(4, "a", "c")),
            (1, meta(6, "p", "t")),
        ]));
        assert_eq!(ids(v.level(0)), [3, 2, 1], "level 0 newest first");
        assert_eq!(ids(v.level(1)), [4, 5, 6], "level 1 by smallest key");
        assert_eq!(ids(&v.overlapping(1, b"c", b"k")), [4, 5]);
        assert_eq!(
            ids(&v.overlapping(1, b"d", b"j")),
            Vec::<u64>::new(),
            "gap between tables"
        );
        assert_eq!(ids(&v.overlapping(1, b"u", b"z")), Vec::<u64>::new());
        assert_eq!(ids(&v.overlapping(1, b"0", b"z")), [4, 5, 6]);
        assert_eq!(ids(&v.overlapping(0, b"e", b"l")), [1]);
        assert_eq!(v.level_bytes(1), 4096 * 15);
        assert_eq!(v.level_sizes_bytes()[0], 4096 * 6);
        assert_eq!(v.segments(), (1..=6).map(SegmentNo).collect::<Vec<_>>());
        assert_eq!(
            v.find(TableId(5)).map(|(l, t)| (l, t.id)),
            Some((1, TableId(5)))
        );
    }

    #[test]
    fn moves_and_removes_tables() {
        let v = Version::empty().apply(&add(&[(1, meta(1, "a", "b")), (1, meta(2, "c", "d"))]));
        let moved = v.apply(&VersionEdit {
            removed: vec![(1, TableId(2))],
            added: vec![(2, meta(2, "c", "d"))],
            ..VersionEdit::default()
        });
        assert_eq!(ids(moved.level(1)), [1]);
        assert_eq!(ids(moved.level(2)), [2]);
        assert_eq!(ids(v.level(1)), [1, 2], "the old version is unchanged");
    }

    #[test]
    fn rejects_broken_invariants() {
        let v = Version::empty().apply(&add(&[(1, meta(1, "a", "c"))]));
        let cases: Vec<(VersionEdit, VersionError)> = vec![
            (
                add(&[(1, meta(2, "c", "d"))]),
                VersionError::Overlap {
                    level: 1,
                    first: TableId(1),
                    second: TableId(2),
                },
            ),
            (
                add(&[(2, meta(1, "x", "y"))]),
                VersionError::DuplicateTable { id: TableId(1) },
            ),
            (
                VersionEdit {
                    removed: vec![(2, TableId(1))],
                    ..VersionEdit::default()
                },
                VersionError::MissingTable {
                    level: 2,
                    id: TableId(1),
                },
            ),
            (
                add(&[(7, meta(3, "a", "b"))]),
                VersionError::LevelOutOfRange { level: 7 },
            ),
            (
                add(&[(0, meta(4, "b", "a"))]),
                VersionError::InvertedRange { id: TableId(4) },
            ),
            (
                add(&[(
                    0,
                    TableMeta {
                        segment: SegmentNo(1),
                        ..meta(5, "a", "b")
                    },
                )]),
                // Levels are checked from 0: the level-0 table is met first.
                VersionError::DuplicateSegment {
                    segment: SegmentNo(1),
                    first: TableId(5),
                    second: TableId(1),
                },
            ),
        ];
        for (edit, expected) in cases {
            assert_eq!(v.try_apply(&edit), Err(expected.clone()), "{expected}");
        }
        // Level 0 may overlap.
        assert!(v
            .try_apply(&add(&[(0, meta(6, "a", "z")), (0, meta(7, "a", "z"))]))
            .is_ok());
    }

    #[test]
    #[should_panic(expected = "overlap")]
    fn apply_panics_on_a_broken_invariant() {
        let v = Version::empty().apply(&add(&[(1, meta(1, "a", "c"))]));
        let _ = v.apply(&add(&[(1, meta(2, "b", "d"))]));
    }

    #[test]
    fn from_tables_checks_like_apply() {
        let ok = Version::from_tables([(1, meta(2, "c", "d")), (1, meta(1, "a", "b"))]).unwrap();
        assert_eq!(ids(ok.level(1)), [1, 2]);
        let bad = Version::from_tables([(1, meta(2, "a", "d")), (1, meta(1, "a", "b"))]);
        assert!(matches!(bad, Err(VersionError::Overlap { level: 1, .. })));
    }
}
