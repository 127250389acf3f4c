//! Which compaction to run next: a pure function of a [`VersionSummary`] and a
//! [`CompactionConfig`] (docs/DESIGN.md §6.6; leveled compaction as in LevelDB).
//!
//! Rules, in order:
//! 1. Every level gets a score in thousandths: level 0 its table count over
//!    `level0_file_trigger`, levels 1 to `levels_max - 2` their bytes over their target
//!    bytes. The highest score wins if it is at least 1000; ties go to the lower level.
//!    (Level 0 does not simply go first: when it did, a level 1 far over its target was
//!    rewritten whole by every level-0 job, and write amplification ran away.)
//! 2. Level 0 wins: compact the oldest level-0 tables (all of them unless the job bound
//!    bites) with the level-1 tables they overlap.
//! 3. Another level wins: compact one of its tables, chosen round-robin after the
//!    level's compaction cursor, with the next-level tables it overlaps.
//!
//! Invariants:
//! - Level-0 inputs are always the *oldest* k tables, so no level-0 table left behind is
//!   older than the output pushed below it.
//! - Next-level inputs are every next-level table overlapping the inputs' user-key range:
//!   the output never overlaps a next-level table it did not read.
//! - Work is bounded by `job_input_bytes_max` where a choice exists: level 0 takes the
//!   longest oldest-first run that fits (at least one table); a level takes the first
//!   table in cursor order whose job fits, else the smallest job.
//! - The last level (`levels_max - 1`) is never compacted out of.
//!
//! The policy assumes one compaction at a time: it does not know which tables a running
//! job holds.

use crate::table::TableId;
use crate::version::{Version, LEVEL_COUNT};
use std::collections::BTreeMap;

/// Tuning of the leveled compaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactionConfig {
    /// Level-0 tables that trigger a level-0 compaction.
    pub level0_file_trigger: usize,
    /// Target size of level 1.
    pub level_base_bytes: u64,
    /// Each level's target is this many times the previous one's.
    pub level_size_multiplier: u64,
    /// Levels in use (at most `version::LEVEL_COUNT`); the last is the bottom.
    pub levels_max: usize,
    /// Bound on the input bytes of one job where the policy has a choice (64 MiB: all of
    /// level 0 at its trigger with the level-1 tables below, or one table and ten times
    /// that below it, with headroom).
    pub job_input_bytes_max: u64,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        CompactionConfig {
            level0_file_trigger: 8,
            level_base_bytes: 16 << 20,
            level_size_multiplier: 10,
            levels_max: LEVEL_COUNT,
            job_input_bytes_max: 64 << 20,
        }
    }
}

impl CompactionConfig {
    fn check(&self) {
        assert!(
            self.level0_file_trigger >= 1,
            "level0_file_trigger must be at least 1"
        );
        assert!(
            self.level_base_bytes > 0 && self.level_size_multiplier >= 1,
            "level targets must grow from > 0"
        );
        assert!(
            (2..=LEVEL_COUNT).contains(&self.levels_max),
            "levels_max {} outside 2..={LEVEL_COUNT}",
            self.levels_max
        );
        assert!(
            self.job_input_bytes_max > 0,
            "job_input_bytes_max must be positive"
        );
    }

    /// Target bytes of `level`: `None` for level 0 (triggered by count) and the last.
    pub fn level_target_bytes(&self, level: usize) -> Option<u64> {
        if level == 0 || level + 1 >= self.levels_max {
            return None;
        }
        let growth = self.level_size_multiplier.saturating_pow(level as u32 - 1);
        Some(self.level_base_bytes.saturating_mul(growth))
    }
}

/// What the policy knows of a table: id, size and user-key range (inclusive).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSummary {
    pub id: TableId,
    pub len_bytes: u64,
    pub smallest: Vec<u8>,
    pub largest: Vec<u8>,
}

impl TableSummary {
    fn overlaps(&self, smallest: &[u8], largest: &[u8]) -> bool {
        self.smallest.as_slice() <= largest && self.largest.as_slice() >= smallest
    }
}

/// One level: tables in the version's order (level 0 newest first, others by smallest
/// key) and the compaction cursor (the largest user key last compacted out of it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LevelSummary {
    pub tables: Vec<TableSummary>,
    pub cursor: Option<Vec<u8>>,
}

impl LevelSummary {
    pub fn bytes(&self) -> u64 {
        self.tables.iter().map(|t| t.len_bytes).sum()
    }
}

/// The policy's view of a version. Levels beyond `levels` are empty.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VersionSummary {
    pub levels: Vec<LevelSummary>,
}

impl VersionSummary {
    /// The summary of `version` with the given cursors (from `ManifestState`).
    pub fn of(version: &Version, cursors: &BTreeMap<u32, Vec<u8>>) -> VersionSummary {
        let levels = (0..version.level_count() as u32)
            .map(|l| LevelSummary {
                tables: version
                    .level(l)
                    .iter()
                    .map(|t| TableSummary {
                        id: t.id,
                        len_bytes: u64::from(t.len_bytes),
                        smallest: t.smallest.user_key.clone(),
                        largest: t.largest.user_key.clone(),
                    })
                    .collect(),
                cursor: cursors.get(&l).cloned(),
            })
            .collect();
        VersionSummary { levels }
    }

    fn level(&self, level: usize) -> &[TableSummary] {
        self.levels.get(level).map_or(&[], |l| l.tables.as_slice())
    }

    /// Tables of `level` overlapping `[smallest, largest]`, in the level's order.
    fn overlapping(&self, level: usize, smallest: &[u8], largest: &[u8]) -> Vec<&TableSummary> {
        self.level(level)
            .iter()
            .filter(|t| t.overlaps(smallest, largest))
            .collect()
    }
}

/// Why a compaction was picked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PickReason {
    Level0Files { count: usize, trigger: usize },
    LevelBytes { bytes: u64, target_bytes: u64 },
}

/// A compaction to run: merge `inputs` (of `level`) with `next_level_inputs` (of
/// `output_level`) into new tables of `output_level`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactionPick {
    pub level: u32,
    /// In the level's order (level 0: newest first).
    pub inputs: Vec<TableId>,
    pub output_level: u32,
    /// In key order.
    pub next_level_inputs: Vec<TableId>,
    pub reason: PickReason,
    /// Level-0 count / trigger or level bytes / target, in thousandths.
    pub score_permille: u64,
    pub input_bytes: u64,
    /// The level's new compaction cursor, to record in the manifest edit (levels 1 and
    /// up: the largest user key of the inputs).
    pub cursor: Option<Vec<u8>>,
}

impl CompactionPick {
    /// One input and nothing to merge with: the table can move down by a manifest edit
    /// alone, without rewriting it.
    pub fn is_trivial_move(&self) -> bool {
        self.inputs.len() == 1 && self.next_level_inputs.is_empty()
    }
}

/// Smallest and largest user key over `tables` (non-empty).
fn key_range<'a>(tables: impl IntoIterator<Item = &'a TableSummary>) -> (&'a [u8], &'a [u8]) {
    let mut tables = tables.into_iter();
    let first = tables.next().expect("a key range of at least one table");
    let init = (first.smallest.as_slice(), first.largest.as_slice());
    tables.fold(init, |(lo, hi), t| {
        (lo.min(t.smallest.as_slice()), hi.max(t.largest.as_slice()))
    })
}

fn permille(numerator: u64, denominator: u64) -> u64 {
    assert!(denominator > 0);
    u64::try_from(u128::from(numerator) * 1000 / u128::from(denominator)).unwrap_or(u64::MAX)
}

/// The compaction to run next, if any is due.
pub fn pick(summary: &VersionSummary, config: &CompactionConfig) -> Option<CompactionPick> {
    config.check();
    assert!(
        summary
            .levels
            .iter()
            .skip(config.levels_max)
            .all(|l| l.tables.is_empty()),
        "tables below levels_max {}",
        config.levels_max
    );
    let level0 = summary.level(0).len();
    let level0_score = permille(level0 as u64, config.level0_file_trigger as u64);
    let mut best: Option<(usize, u64, u64, u64)> = None;
    for level in 1..config.levels_max {
        let Some(target) = config.level_target_bytes(level) else {
            continue;
        };
        let bytes = summary.levels.get(level).map_or(0, LevelSummary::bytes);
        let score = permille(bytes, target);
        if best.is_none_or(|(_, best_score, _, _)| score > best_score) {
            best = Some((level, score, bytes, target));
        }
    }
    let best = best.filter(|&(_, score, _, _)| score >= 1000);
    if level0_score >= 1000 && best.is_none_or(|(_, score, _, _)| level0_score >= score) {
        return Some(pick_level0(summary, config));
    }
    let (level, score, bytes, target_bytes) = best?;
    let mut pick = pick_in_level(summary, config, level);
    pick.score_permille = score;
    pick.reason = PickReason::LevelBytes {
        bytes,
        target_bytes,
    };
    Some(pick)
}

/// The oldest level-0 tables (as many as fit the bound, at least one) and the level-1
/// tables they overlap.
fn pick_level0(summary: &VersionSummary, config: &CompactionConfig) -> CompactionPick {
    let level0 = summary.level(0);
    assert!(!level0.is_empty());
    let mut chosen: Option<(usize, Vec<&TableSummary>, u64)> = None;
    for k in 1..=level0.len() {
        let oldest = &level0[level0.len() - k..];
        let (lo, hi) = key_range(oldest);
        let next = summary.overlapping(1, lo, hi);
        let bytes = oldest
            .iter()
            .chain(next.iter().copied())
            .map(|t| t.len_bytes)
            .sum();
        if k > 1 && bytes > config.job_input_bytes_max {
            break;
        }
        chosen = Some((k, next, bytes));
    }
    let (k, next, input_bytes) = chosen.expect("one table always fits");
    CompactionPick {
        level: 0,
        inputs: level0[level0.len() - k..].iter().map(|t| t.id).collect(),
        output_level: 1,
        next_level_inputs: next.iter().map(|t| t.id).collect(),
        reason: PickReason::Level0Files {
            count: level0.len(),
            trigger: config.level0_file_trigger,
        },
        score_permille: permille(level0.len() as u64, config.level0_file_trigger as u64),
        input_bytes,
        cursor: None,
    }
}

/// One table of `level`, round-robin after the cursor, with the next-level tables it
/// overlaps: the first in cursor order whose job fits the bound, else the smallest job.
fn pick_in_level(
    summary: &VersionSummary,
    config: &CompactionConfig,
    level: usize,
) -> CompactionPick {
    let tables = summary.level(level);
    assert!(!tables.is_empty(), "a level over its target has tables");
    debug_assert!(
        tables.windows(2).all(|w| w[0].smallest <= w[1].smallest),
        "level {level} sorted"
    );
    let cursor = summary.levels[level].cursor.as_deref();
    let start = cursor.map_or(0, |c| {
        tables.partition_point(|t| t.smallest.as_slice() <= c) % tables.len()
    });
    let mut smallest_job: Option<(&TableSummary, Vec<&TableSummary>, u64)> = None;
    let mut chosen = None;
    for i in 0..tables.len() {
        let table = &tables[(start + i) % tables.len()];
        let next = summary.overlapping(level + 1, &table.smallest, &table.largest);
        let bytes = table.len_bytes + next.iter().map(|t| t.len_bytes).sum::<u64>();
        if bytes <= config.job_input_bytes_max {
            chosen = Some((table, next, bytes));
            break;
        }
        if smallest_job.as_ref().is_none_or(|(_, _, b)| bytes < *b) {
            smallest_job = Some((table, next, bytes));
        }
    }
    let (table, next, input_bytes) = chosen.or(smallest_job).expect("at least one candidate");
    CompactionPick {
        level: level as u32,
        inputs: vec![table.id],
        output_level: level as u32 + 1,
        next_level_inputs: next.iter().map(|t| t.id).collect(),
        reason: PickReason::LevelBytes {
            bytes: 0,
            target_bytes: 0,
        },
        score_permille: 0,
        input_bytes,
        cursor: Some(table.largest.clone()),
    }
}

/// Whether no level below `output_level` holds a table overlapping `[smallest,
/// largest]`: a compaction writing that range into `output_level` may then drop
/// tombstones (and versions no snapshot needs), since nothing older lies beneath.
pub fn is_bottommost(
    summary: &VersionSummary,
    output_level: u32,
    smallest: &[u8],
    largest: &[u8],
) -> bool {
    assert!(smallest <= largest, "inverted key range");
    (output_level as usize + 1..summary.levels.len())
        .all(|l| summary.overlapping(l, smallest, largest).is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    /// The configuration the cases were written for (LevelDB's shape: trigger 4, level
    /// 1 of 8 MiB, 32 MiB jobs), independent of the tuned defaults.
    fn classic() -> CompactionConfig {
        CompactionConfig {
            level0_file_trigger: 4,
            level_base_bytes: 8 << 20,
            level_size_multiplier: 10,
            levels_max: LEVEL_COUNT,
            job_input_bytes_max: 32 << 20,
        }
    }

    /// (level, id, MiB, smallest, largest); level 0 listed newest first.
    type Spec = (u32, u64, u64, &'static str, &'static str);

    fn summary(tables: &[Spec], cursors: &[(u32, &str)]) -> VersionSummary {
        let mut s = VersionSummary {
            levels: vec![LevelSummary::default(); LEVEL_COUNT],
        };
        for &(level, id, mib, lo, hi) in tables {
            s.levels[level as usize].tables.push(TableSummary {
                id: TableId(id),
                len_bytes: mib * MIB,
                smallest: lo.as_bytes().to_vec(),
                largest: hi.as_bytes().to_vec(),
            });
        }
        for level in s.levels.iter_mut().skip(1) {
            level.tables.sort_by(|a, b| a.smallest.cmp(&b.smallest));
        }
        for &(level, key) in cursors {
            s.levels[level as usize].cursor = Some(key.as_bytes().to_vec());
        }
        s
    }

    fn ids(ids: &[u64]) -> Vec<TableId> {
        ids.iter().copied().map(TableId).collect()
    }

    struct Case {
        name: &'static str,
        tables: Vec<Spec>,
        cursors: Vec<(u32, &'static str)>,
        config: CompactionConfig,
        /// (level, inputs, next-level inputs, score in thousandths)
        expect: Option<(u32, Vec<u64>, Vec<u64>, u64)>,
    }

    fn case(
        name: &'static str,
        tables: Vec<Spec>,
        expect: Option<(u32, Vec<u64>, Vec<u64>, u64)>,
    ) -> Case {
        Case {
            name,
            tables,
            cursors: Vec::new(),
            config: classic(),
            expect,
        }
    }

    /// Level 1 of five 2 MiB tables (10 MiB, 1250 of an 8 MiB target) and level 2 below.
    fn level1_over_target() -> Vec<Spec> {
        vec![
            (1, 10, 2, "a", "b"),
            (1, 11, 2, "c", "d"),
            (1, 12, 2, "e", "f"),
            (1, 13, 2, "g", "h"),
            (1, 14, 2, "i", "j"),
            (2, 20, 2, "a", "a"),
            (2, 21, 2, "b", "c"),
            (2, 22, 2, "e", "e"),
            (2, 23, 2, "h", "i"),
        ]
    }

    fn cases() -> Vec<Case> {
        let l0_disjoint: Vec<Spec> = (1..=20u64).rev().map(|i| (0, i, 2, "k", "k")).collect();
        vec![
            case("empty", vec![], None),
            case(
                "three level-0 tables stay below the trigger",
                vec![
                    (0, 3, 1, "a", "b"),
                    (0, 2, 1, "a", "b"),
                    (0, 1, 1, "a", "b"),
                ],
                None,
            ),
            case(
                "level 0 at the trigger takes every table and the level-1 tables in their range",
                vec![
                    (0, 4, 1, "b", "c"),
                    (0, 3, 1, "c", "d"),
                    (0, 2, 1, "m", "n"),
                    (0, 1, 1, "e", "f"),
                    (1, 10, 2, "a", "b"),
                    (1, 11, 2, "g", "h"),
                    (1, 12, 2, "o", "p"),
                ],
                Some((0, vec![4, 3, 2, 1], vec![10, 11], 1000)),
            ),
            case(
                "a level with a higher score goes before level 0",
                vec![
                    (0, 4, 1, "a", "a"),
                    (0, 3, 1, "a", "a"),
                    (0, 2, 1, "a", "a"),
                    (0, 1, 1, "a", "a"),
                    (1, 10, 80, "x", "y"),
                ],
                Some((1, vec![10], vec![], 10000)),
            ),
            case(
                "level 0 with a higher score goes before a level over its target",
                vec![
                    (0, 8, 1, "a", "a"),
                    (0, 7, 1, "a", "a"),
                    (0, 6, 1, "a", "a"),
                    (0, 5, 1, "a", "a"),
                    (0, 4, 1, "a", "a"),
                    (0, 3, 1, "a", "a"),
                    (0, 2, 1, "a", "a"),
                    (0, 1, 1, "a", "a"),
                    (1, 10, 10, "x", "y"),
                ],
                Some((0, (1..=8).rev().collect(), vec![], 2000)),
            ),
            case(
                "level 0 wins a tie",
                vec![
                    (0, 4, 1, "a", "a"),
                    (0, 3, 1, "a", "a"),
                    (0, 2, 1, "a", "a"),
                    (0, 1, 1, "a", "a"),
                    (1, 10, 8, "x", "y"),
                ],
                Some((0, vec![4, 3, 2, 1], vec![], 1000)),
            ),
            case(
                "level 0 beyond the bound takes the oldest tables that fit",
                l0_disjoint,
                Some((0, (1..=16).rev().collect(), vec![], 5000)),
            ),
            case(
                "level-1 overlap counts toward the level-0 bound",
                vec![
                    (0, 4, 13, "a", "b"),
                    (0, 3, 13, "c", "d"),
                    (0, 2, 13, "e", "f"),
                    (0, 1, 13, "g", "h"),
                    (1, 20, 7, "g", "h"),
                ],
                Some((0, vec![1], vec![20], 1000)),
            ),
            case(
                "one level-0 table over the bound is still taken",
                vec![
                    (0, 4, 40, "a", "b"),
                    (0, 3, 40, "a", "b"),
                    (0, 2, 40, "a", "b"),
                    (0, 1, 40, "a", "b"),
                ],
                Some((0, vec![1], vec![], 1000)),
            ),
            case(
                "a level over its target starts at its first table without a cursor",
                level1_over_target(),
                Some((1, vec![10], vec![20, 21], 1250)),
            ),
            Case {
                cursors: vec![(1, "d")],
                ..case(
                    "the cursor resumes after the last compacted key",
                    level1_over_target(),
                    Some((1, vec![12], vec![22], 1250)),
                )
            },
            Case {
                cursors: vec![(1, "j")],
                ..case(
                    "a cursor past the last table wraps around",
                    level1_over_target(),
                    Some((1, vec![10], vec![20, 21], 1250)),
                )
            },
            Case {
                cursors: vec![(1, "f2")],
                ..case(
                    "a cursor between tables takes the next one",
                    level1_over_target(),
                    Some((1, vec![13], vec![23], 1250)),
                )
            },
            case(
                "the highest score wins",
                vec![(1, 10, 9, "a", "b"), (2, 20, 100, "a", "z")],
                Some((2, vec![20], vec![], 1250)),
            ),
            case(
                "equal scores go to the lower level",
                vec![(1, 10, 16, "a", "b"), (2, 20, 160, "a", "z")],
                Some((1, vec![10], vec![20], 2000)),
            ),
            case(
                "a level exactly at its target is compacted",
                vec![(1, 10, 8, "a", "b")],
                Some((1, vec![10], vec![], 1000)),
            ),
            case(
                "a level under its target is not",
                vec![(1, 10, 7, "a", "b"), (2, 20, 79, "a", "b")],
                None,
            ),
            Case {
                config: CompactionConfig {
                    levels_max: 3,
                    ..classic()
                },
                ..case(
                    "the last level is never compacted out of",
                    vec![(2, 20, 1000, "a", "z")],
                    None,
                )
            },
            case(
                "a job over the bound is skipped for the next table in cursor order",
                vec![
                    (1, 10, 2, "a", "b"),
                    (1, 11, 2, "c", "d"),
                    (1, 12, 2, "e", "f"),
                    (1, 13, 3, "g", "h"),
                    (2, 20, 40, "a", "b"),
                    (2, 21, 4, "c", "c"),
                ],
                Some((1, vec![11], vec![21], 1125)),
            ),
            case(
                "when every job is over the bound the smallest is taken",
                vec![
                    (1, 10, 10, "a", "b"),
                    (1, 11, 10, "c", "d"),
                    (1, 12, 10, "e", "f"),
                    (2, 20, 30, "a", "b"),
                    (2, 21, 23, "c", "d"),
                    (2, 22, 25, "e", "f"),
                ],
                Some((1, vec![11], vec![21], 3750)),
            ),
            Case {
                config: CompactionConfig {
                    level0_file_trigger: 2,
                    ..classic()
                },
                ..case(
                    "the trigger is configurable",
                    vec![(0, 2, 1, "a", "b"), (0, 1, 1, "c", "d")],
                    Some((0, vec![2, 1], vec![], 1000)),
                )
            },
        ]
    }

    #[test]
    fn picks_match_the_table_of_cases() {
        for c in cases() {
            let s = summary(&c.tables, &c.cursors);
            let got = pick(&s, &c.config);
            let got_short = got.as_ref().map(|p| {
                (
                    p.level,
                    p.inputs.clone(),
                    p.next_level_inputs.clone(),
                    p.score_permille,
                )
            });
            let expect = c
                .expect
                .as_ref()
                .map(|(l, i, n, score)| (*l, ids(i), ids(n), *score));
            assert_eq!(got_short, expect, "case: {}", c.name);
            if let Some(p) = got {
                assert_eq!(p.output_level, p.level + 1, "case: {}", c.name);
                let all_ids: Vec<TableId> = p
                    .inputs
                    .iter()
                    .chain(&p.next_level_inputs)
                    .copied()
                    .collect();
                let bytes: u64 = s
                    .levels
                    .iter()
                    .flat_map(|l| &l.tables)
                    .filter(|t| all_ids.contains(&t.id))
                    .map(|t| t.len_bytes)
                    .sum();
                assert_eq!(p.input_bytes, bytes, "case: {}", c.name);
            }
        }
    }

    #[test]
    fn reasons_cursors_and_trivial_moves() {
        let s = summary(&level1_over_target(), &[(1, "h")]);
        let p = pick(&s, &classic()).unwrap();
        assert_eq!(
            p.reason,
            PickReason::LevelBytes {
                bytes: 10 * MIB,
                target_bytes: 8 * MIB
            }
        );
        assert_eq!(
            p.cursor.as_deref(),
            Some(&b"j"[..]),
            "cursor moves to the input's largest key"
        );
        assert!(!p.is_trivial_move());
        let alone = summary(&[(1, 10, 9, "a", "b"), (2, 20, 1, "c", "d")], &[]);
        let p = pick(&alone, &classic()).unwrap();
        assert!(p.is_trivial_move());
        let l0 = summary(
            &[
                (0, 4, 1, "a", "b"),
                (0, 3, 1, "a", "b"),
                (0, 2, 1, "a", "b"),
                (0, 1, 1, "a", "b"),
            ],
            &[],
        );
        let p = pick(&l0, &classic()).unwrap();
        assert_eq!(
            p.reason,
            PickReason::Level0Files {
                count: 4,
                trigger: 4
            }
        );
        assert_eq!(p.cursor, None);
    }

    #[test]
    fn level_targets_grow_by_the_multiplier() {
        let c = classic();
        let targets: Vec<Option<u64>> = (0..LEVEL_COUNT).map(|l| c.level_target_bytes(l)).collect();
        assert_eq!(
            targets,
            [
                None,
                Some(8 * MIB),
                Some(80 * MIB),
                Some(800 * MIB),
                Some(8000 * MIB),
                Some(80000 * MIB),
                None
            ]
        );
    }

    #[test]
    fn bottommost_means_nothing_overlaps_below() {
        let s = summary(
            &[
                (1, 10, 1, "a", "c"),
                (3, 30, 1, "m", "p"),
                (0, 1, 1, "a", "z"),
            ],
            &[],
        );
        let cases: [(u32, &str, &str, bool); 6] = [
            (1, "a", "c", true),
            (1, "n", "z", false),
            (1, "p", "p", false),
            (1, "q", "z", true),
            (2, "m", "m", false),
            (3, "a", "z", true),
        ];
        for (level, lo, hi, expected) in cases {
            assert_eq!(
                is_bottommost(&s, level, lo.as_bytes(), hi.as_bytes()),
                expected,
                "level {level} [{lo}, {hi}]"
            );
        }
    }

    #[test]
    fn summary_of_a_version_keeps_order_sizes_and_cursors() {
        use crate::manifest::VersionEdit;
        use crate::table::TableMeta;
        use crate::types::{InternalKey, ValueKind};
        let meta = |id: u64, lo: &str, hi: &str| TableMeta {
            id: TableId(id),
            segment: format::SegmentNo(id as u32),
            len_bytes: 4096,
            entries: 1,
            smallest: InternalKey::new(lo.as_bytes(), 5, ValueKind::Put),
            largest: InternalKey::new(hi.as_bytes(), 5, ValueKind::Put),
        };
        let edit = VersionEdit {
            added: vec![
                (0, meta(1, "a", "b")),
                (0, meta(2, "a", "b")),
                (1, meta(4, "x", "y")),
                (1, meta(3, "c", "d")),
            ],
            ..VersionEdit::default()
        };
        let v = Version::empty().apply(&edit);
        let s = VersionSummary::of(&v, &BTreeMap::from([(1, b"c".to_vec())]));
        assert_eq!(s.levels.len(), LEVEL_COUNT);
        assert_eq!(
            s.levels[0]
                .tables
                .iter()
                .map(|t| t.id.0)
                .collect::<Vec<_>>(),
            [2, 1]
        );
        assert_eq!(
            s.levels[1]
                .tables
                .iter()
                .map(|t| t.id.0)
                .collect::<Vec<_>>(),
            [3, 4]
        );
        assert_eq!(s.levels[1].cursor.as_deref(), Some(&b"c"[..]));
        assert_eq!(s.levels[1].bytes(), 8192);
    }
}
