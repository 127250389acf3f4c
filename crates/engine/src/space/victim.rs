//! Which segment a domain's garbage collection cleans next: a pure function of a summary
//! of candidate segments (docs/DESIGN.md §8; F2FS
//! `get_victim_by_default`, LFS cost-benefit cleaning).
//!
//! Rules:
//! 1. Only sealed segments are candidates: a domain's active (log head) segments are
//!    still being written, and pending segments are already free as far as GC goes.
//!    A segment with every block valid is never chosen (cleaning it frees nothing).
//! 2. A segment with no valid block wins under either policy: it costs no copying.
//! 3. Greedy: the fewest valid blocks. Cost-benefit: the highest
//!    `(1 - u) * age / (1 + u)` with `u = valid / 512` and `age = now - modified`
//!    (LFS: benefit is the space freed times how long it is likely to stay free; cost is
//!    reading the segment and writing its live part), computed exactly in integers as
//!    `(512 - valid) * age / (512 + valid)`.
//! 4. Ties go to fewer valid blocks, then the older segment, then the lower number, so the
//!    choice is deterministic.
//!
//! The caller bounds the work by how many candidates it summarises (F2FS scans a window
//! of `max_victim_search` segments per call, for the same reason).

use format::constants::BLOCKS_PER_SEGMENT;
use format::SegmentNo;
use std::cmp::Reverse;

const BLOCKS: u64 = BLOCKS_PER_SEGMENT;

/// The two victim policies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Fewest valid blocks: cheapest to clean now (foreground GC, when space is short).
    Greedy,
    /// LFS cost-benefit: prefers old, mostly-invalid segments (background GC).
    CostBenefit,
}

/// What the policy may do with a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentUse {
    /// Written whole and closed: may be cleaned.
    Sealed,
    /// A log head still taking writes.
    Active,
    /// Released, waiting for a checkpoint: nothing left to clean.
    Pending,
}

/// The policy's view of one segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    pub segment: SegmentNo,
    pub valid_blocks: u32,
    /// Last time a block was written to the segment (file-system time, ns).
    pub modified_ns: u64,
    pub state: SegmentUse,
}

/// The chosen victim and its score (valid blocks for greedy, benefit over cost for
/// cost-benefit; `u128::MAX` for a segment with nothing valid).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Victim {
    pub segment: SegmentNo,
    pub valid_blocks: u32,
    pub score: u128,
}

/// The segment to clean among `candidates` at file-system time `now_ns`, or `None` when
/// no sealed segment has an invalid block.
pub fn pick(candidates: &[Candidate], policy: Policy, now_ns: u64) -> Option<Victim> {
    candidates
        .iter()
        .filter(|c| c.state == SegmentUse::Sealed && u64::from(c.valid_blocks) < BLOCKS)
        .map(|c| (c, score(c, policy, now_ns)))
        .max_by(|(a, sa), (b, sb)| sa.cmp(sb).then_with(|| tie_break(a).cmp(&tie_break(b))))
        .map(|(c, score)| Victim {
            segment: c.segment,
            valid_blocks: c.valid_blocks,
            score,
        })
}

/// Higher is a better victim.
fn score(c: &Candidate, policy: Policy, now_ns: u64) -> u128 {
    let valid = u64::from(c.valid_blocks);
    assert!(valid < BLOCKS, "full segments are filtered out");
    if valid == 0 {
        return u128::MAX;
    }
    match policy {
        // Greedy ranks by valid blocks alone; the score is the invalid count.
        Policy::Greedy => u128::from(BLOCKS - valid),
        Policy::CostBenefit => {
            let age = u128::from(now_ns.saturating_sub(c.modified_ns));
            // At most 511 * 2^64 / 513: no overflow in u128.
            u128::from(BLOCKS - valid) * age / u128::from(BLOCKS + valid)
        }
    }
}

/// Among equal scores: fewer valid blocks, then older, then lower segment number.
fn tie_break(c: &Candidate) -> (Reverse<u32>, Reverse<u64>, Reverse<SegmentNo>) {
    (
        Reverse(c.valid_blocks),
        Reverse(c.modified_ns),
        Reverse(c.segment),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use SegmentUse::*;

    /// (segment, valid blocks, modified_ns, state)
    type Spec = (u32, u32, u64, SegmentUse);

    fn candidates(specs: &[Spec]) -> Vec<Candidate> {
        specs
            .iter()
            .map(|&(segment, valid_blocks, modified_ns, state)| Candidate {
                segment: SegmentNo(segment),
                valid_blocks,
                modified_ns,
                state,
            })
            .collect()
    }

    struct Case {
        name: &'static str,
        candidates: Vec<Spec>,
        now_ns: u64,
        /// Expected victim under greedy and under cost-benefit.
        greedy: Option<u32>,
        cost_benefit: Option<u32>,
    }

    fn cases() -> Vec<Case> {
        vec![
            Case {
                name: "no candidates",
                candidates: vec![],
                now_ns: 100,
                greedy: None,
                cost_benefit: None,
            },
            Case {
                name: "full segments free nothing",
                candidates: vec![(1, 512, 0, Sealed), (2, 512, 5, Sealed)],
                now_ns: 100,
                greedy: None,
                cost_benefit: None,
            },
            Case {
                name: "active and pending segments are never chosen",
                candidates: vec![(1, 0, 0, Active), (2, 0, 0, Pending), (3, 400, 0, Sealed)],
                now_ns: 100,
                greedy: Some(3),
                cost_benefit: Some(3),
            },
            Case {
                name: "only active and pending: nothing to clean",
                candidates: vec![(1, 10, 0, Active), (2, 0, 0, Pending)],
                now_ns: 100,
                greedy: None,
                cost_benefit: None,
            },
            Case {
                name: "an empty segment wins even when young",
                candidates: vec![(1, 1, 0, Sealed), (2, 0, 99, Sealed)],
                now_ns: 100,
                greedy: Some(2),
                cost_benefit: Some(2),
            },
            Case {
                // cost-benefit: 1: (512-100)*10/612 = 6; 2: (512-300)*1000/812 = 261.
                name: "greedy takes the emptiest, cost-benefit the old cold one",
                candidates: vec![(1, 100, 990, Sealed), (2, 300, 0, Sealed)],
                now_ns: 1000,
                greedy: Some(1),
                cost_benefit: Some(2),
            },
            Case {
                // 1: 412*1000/612 = 673; 2: 212*1000/812 = 261.
                name: "at equal age cost-benefit also prefers fewer valid blocks",
                candidates: vec![(2, 300, 0, Sealed), (1, 100, 0, Sealed)],
                now_ns: 1000,
                greedy: Some(1),
                cost_benefit: Some(1),
            },
            Case {
                name: "ties go to the older segment, then the lower number",
                candidates: vec![
                    (7, 50, 20, Sealed),
                    (5, 50, 10, Sealed),
                    (4, 50, 10, Sealed),
                    (9, 60, 0, Sealed),
                ],
                now_ns: 10,
                greedy: Some(4),
                // age 0 for all but segment 9 (clock at 10): 9 scores 452*10/572 = 7.
                cost_benefit: Some(9),
            },
            Case {
                name: "a segment modified in the future (clock skew) has age 0",
                candidates: vec![(1, 10, 500, Sealed), (2, 400, 0, Sealed)],
                now_ns: 100,
                greedy: Some(1),
                cost_benefit: Some(2),
            },
            Case {
                name: "ages near the top of u64 do not overflow",
                candidates: vec![(1, 1, 0, Sealed), (2, 2, 0, Sealed)],
                now_ns: u64::MAX,
                greedy: Some(1),
                cost_benefit: Some(1),
            },
        ]
    }

    #[test]
    fn picks_match_the_table_of_cases() {
        for c in cases() {
            let list = candidates(&c.candidates);
            for (policy, expect) in [
                (Policy::Greedy, c.greedy),
                (Policy::CostBenefit, c.cost_benefit),
            ] {
                let got = pick(&list, policy, c.now_ns).map(|v| v.segment.0);
                assert_eq!(got, expect, "case {:?} under {policy:?}", c.name);
            }
        }
    }

    #[test]
    fn the_choice_does_not_depend_on_candidate_order() {
        for c in cases() {
            let mut list = candidates(&c.candidates);
            for policy in [Policy::Greedy, Policy::CostBenefit] {
                let forward = pick(&list, policy, c.now_ns);
                list.reverse();
                assert_eq!(pick(&list, policy, c.now_ns), forward, "case {:?}", c.name);
                list.reverse();
            }
        }
    }

    #[test]
    fn scores_are_reported() {
        let list = candidates(&[(3, 100, 0, Sealed)]);
        let v = pick(&list, Policy::CostBenefit, 1000).unwrap();
        assert_eq!(
            (v.segment, v.valid_blocks, v.score),
            (SegmentNo(3), 100, 673)
        );
        let v = pick(&list, Policy::Greedy, 1000).unwrap();
        assert_eq!(v.score, 412);
    }
}
