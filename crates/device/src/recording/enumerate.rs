//! Crash-state enumeration: which [`CrashState`]s of a [`Recording`] a crash test checks,
//! chosen by a [`CrashPolicy`] (docs/TESTING.md "Crash images").
//!
//! Invariants:
//! - The result is a pure function of the log and the policy (seeded [`Rng`]s only).
//! - States are distinct (canonical form, deduplicated by hash) and sorted.
//! - At most `states_max` states are returned; `candidates_count - skipped_count` of them.
//! - The state right after each successful flush (and the initial state) is kept before
//!   any other when the cap bites.

use super::{CrashState, Epoch, Recording, TornWrite, WriteId};
use platform::Rng;
use std::collections::hash_map::DefaultHasher;
use std::collections::HashSet;
use std::hash::{Hash, Hasher};

/// Largest `exhaustive_writes_max` / `torn_exhaustive_blocks_max`: 2^16 subsets of one
/// window is already more states than a crash test can check.
pub const EXHAUSTIVE_LIMIT: usize = 16;

impl Recording {
    /// The crash states `policy` asks for, deduplicated, in [`CrashState`] order, at most
    /// `policy.states_max` of them:
    /// - (a) the state right after each successful flush, and the initial state;
    /// - (b) per epoch: every subset of its unflushed writes if there are at most
    ///   `exhaustive_writes_max`, else every in-order prefix, every single omission and
    ///   `random_subsets_count` random subsets;
    /// - (c) per unflushed write spanning several 4 KiB blocks: torn versions (block
    ///   prefixes and block subsets, see [`CrashPolicy`]), with the epoch's other writes
    ///   all landed and all not landed.
    ///
    /// Beyond the cap, the (a) states are kept first, and the rest is a seeded uniform
    /// sample (reservoir) of the others.
    pub fn crash_states(&self, policy: &CrashPolicy) -> CrashStates {
        policy.check();
        let epochs = self.epochs();
        let mut seen = HashSet::new();
        let mut candidates_count = 0u64;
        // Each use of randomness gets its own stream, so changing one (say, the number of
        // random subsets) does not reshuffle the others.
        let mut boundary = Reservoir::new(policy.states_max, policy.seed ^ 0xB0B0_B0B0);
        for epoch in &epochs {
            let state = CrashState::durable_prefix(epoch.durable_writes);
            if seen.insert(state_hash(&state)) {
                candidates_count += 1;
                boundary.offer(state);
            }
        }
        let rest_capacity = policy.states_max - boundary.kept.len();
        let mut rest = Reservoir::new(rest_capacity, policy.seed ^ 0x5EED_5EED);
        for (index, epoch) in epochs.iter().enumerate() {
            let epoch_seed = policy.seed ^ (index as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let mut rng = Rng::from_seed(epoch_seed);
            self.epoch_states(epoch, policy, &mut rng, &mut |state| {
                if seen.insert(state_hash(&state)) {
                    candidates_count += 1;
                    rest.offer(state);
                }
            });
        }
        let mut states = boundary.kept;
        states.append(&mut rest.kept);
        states.sort();
        assert!(states.len() <= policy.states_max);
        let skipped_count = candidates_count - states.len() as u64;
        CrashStates {
            states,
            candidates_count,
            skipped_count,
        }
    }

    /// Emits the (b) and (c) states of one epoch.
    fn epoch_states(
        &self,
        epoch: &Epoch,
        policy: &CrashPolicy,
        rng: &mut Rng,
        emit: &mut dyn FnMut(CrashState),
    ) {
        let (first, end) = (epoch.durable_writes, epoch.end_writes);
        let count = end - first;
        if count as usize <= policy.exhaustive_writes_max {
            for mask in 0..1u64 << count {
                emit(CrashState::from_selection(
                    first,
                    end,
                    |id| mask >> (id - first) & 1 == 1,
                    Vec::new(),
                ));
            }
        } else {
            for landed in 0..=count {
                emit(CrashState::durable_prefix(first + landed));
            }
            for omitted in first..end {
                emit(CrashState::from_selection(
                    omitted,
                    end,
                    |id| id != omitted,
                    Vec::new(),
                ));
            }
            for _ in 0..policy.random_subsets_count {
                let bits = random_bits(rng, count);
                emit(CrashState::from_selection(
                    first,
                    end,
                    |id| bits[(id - first) as usize],
                    Vec::new(),
                ));
            }
        }
        if !policy.torn_writes {
            return;
        }
        for id in first..end {
            for blocks in policy.torn_selections(self.write(WriteId(id)).block_count(), rng) {
                let torn = TornWrite::new(WriteId(id), blocks);
                emit(CrashState::from_selection(
                    first,
                    first,
                    |_| false,
                    vec![torn.clone()],
                ));
                emit(CrashState::from_selection(
                    id,
                    end,
                    |other| other != id,
                    vec![torn],
                ));
            }
        }
    }
}

fn state_hash(state: &CrashState) -> u64 {
    // Deduplication by 64-bit hash: two distinct states colliding (odds about n²/2^65)
    // would drop the later one, never add a wrong one.
    let mut hasher = DefaultHasher::new();
    state.hash(&mut hasher);
    hasher.finish()
}

fn random_bits(rng: &mut Rng, count: u64) -> Vec<bool> {
    let mut bits = Vec::with_capacity(count as usize);
    let mut word = 0u64;
    for i in 0..count {
        if i % 64 == 0 {
            word = rng.next_u64();
        }
        bits.push(word >> (i % 64) & 1 == 1);
    }
    bits
}

/// Keeps a seeded uniform sample of at most `capacity` offered states (algorithm R).
struct Reservoir {
    capacity: usize,
    offered: u64,
    kept: Vec<CrashState>,
    rng: Rng,
}

impl Reservoir {
    fn new(capacity: usize, seed: u64) -> Reservoir {
        Reservoir {
            capacity,
            offered: 0,
            kept: Vec::new(),
            rng: Rng::from_seed(seed),
        }
    }

    fn offer(&mut self, state: CrashState) {
        self.offered += 1;
        if self.kept.len() < self.capacity {
            self.kept.push(state);
            return;
        }
        let slot = self.rng.below(self.offered);
        if slot < self.capacity as u64 {
            self.kept[slot as usize] = state;
        }
    }
}

/// Which crash states [`Recording::crash_states`] enumerates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrashPolicy {
    /// Seeds every random choice; the same seed and log give the same states.
    pub seed: u64,
    /// Epochs with at most this many unflushed writes get every subset (2^n states).
    pub exhaustive_writes_max: usize,
    /// Random subsets per larger epoch (each write in with probability 1/2).
    pub random_subsets_count: usize,
    /// Whether to add torn versions of writes spanning several 4 KiB blocks.
    pub torn_writes: bool,
    /// Writes of at most this many blocks get every non-empty proper block subset.
    pub torn_exhaustive_blocks_max: usize,
    /// Block prefixes per torn write (all of them if fewer, else evenly spaced).
    pub torn_prefixes_max: usize,
    /// Random block subsets per write of more than `torn_exhaustive_blocks_max` blocks.
    pub torn_random_subsets_count: usize,
    /// At most this many states are returned; the rest are counted as skipped.
    pub states_max: usize,
}

impl Default for CrashPolicy {
    fn default() -> Self {
        CrashPolicy {
            seed: 0,
            exhaustive_writes_max: 6,
            random_subsets_count: 16,
            torn_writes: true,
            torn_exhaustive_blocks_max: 4,
            torn_prefixes_max: 8,
            torn_random_subsets_count: 4,
            states_max: 4096,
        }
    }
}

impl CrashPolicy {
    pub fn with_seed(seed: u64) -> CrashPolicy {
        CrashPolicy {
            seed,
            ..CrashPolicy::default()
        }
    }

    fn check(&self) {
        assert!(
            self.exhaustive_writes_max <= EXHAUSTIVE_LIMIT,
            "exhaustive_writes_max above {EXHAUSTIVE_LIMIT}"
        );
        assert!(
            self.torn_exhaustive_blocks_max <= EXHAUSTIVE_LIMIT,
            "torn_exhaustive_blocks_max above {EXHAUSTIVE_LIMIT}"
        );
        assert!(self.states_max >= 1, "states_max must allow a state");
    }

    /// The torn block selections of a write of `block_count` blocks: non-empty, proper.
    fn torn_selections(&self, block_count: u32, rng: &mut Rng) -> Vec<Vec<u32>> {
        let mut selections = Vec::new();
        if block_count < 2 {
            return selections;
        }
        let longest = u64::from(block_count - 1);
        let prefixes = longest.min(self.torn_prefixes_max as u64);
        for i in 0..prefixes {
            // Lengths 1..=longest, evenly spaced, both ends included.
            let len = if prefixes == 1 {
                1
            } else {
                1 + i * (longest - 1) / (prefixes - 1)
            };
            selections.push((0..len as u32).collect());
        }
        if block_count as usize <= self.torn_exhaustive_blocks_max {
            for mask in 1..(1u32 << block_count) - 1 {
                selections.push((0..block_count).filter(|b| mask >> b & 1 == 1).collect());
            }
            return selections;
        }
        for _ in 0..self.torn_random_subsets_count {
            let mut bits = random_bits(rng, u64::from(block_count));
            // Force a proper, non-empty subset by flipping one random block if needed.
            if bits.iter().all(|&b| b) || bits.iter().all(|&b| !b) {
                let flip = rng.below(u64::from(block_count)) as usize;
                bits[flip] = !bits[flip];
            }
            selections.push((0..block_count).filter(|&b| bits[b as usize]).collect());
        }
        selections
    }
}

/// The result of an enumeration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrashStates {
    pub states: Vec<CrashState>,
    /// Distinct states the policy asked for.
    pub candidates_count: u64,
    /// Candidates left out by the `states_max` cap.
    pub skipped_count: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torn_prefixes_are_evenly_spaced_and_include_both_ends() {
        let policy = CrashPolicy {
            torn_prefixes_max: 3,
            torn_random_subsets_count: 0,
            ..CrashPolicy::default()
        };
        let mut rng = Rng::from_seed(1);
        let lengths: Vec<usize> = policy
            .torn_selections(10, &mut rng)
            .iter()
            .map(Vec::len)
            .collect();
        assert_eq!(lengths, [1, 5, 9]);
        assert!(
            policy.torn_selections(1, &mut rng).is_empty(),
            "a one-block write cannot tear"
        );
        let all = CrashPolicy {
            torn_prefixes_max: 8,
            ..policy
        };
        assert_eq!(
            all.torn_selections(3, &mut rng).len(),
            2 + 6,
            "2 prefixes, 6 subsets"
        );
    }

    #[test]
    fn random_torn_subsets_are_proper_and_non_empty() {
        let policy = CrashPolicy {
            torn_exhaustive_blocks_max: 0,
            torn_prefixes_max: 0,
            torn_random_subsets_count: 200,
            ..CrashPolicy::default()
        };
        let mut rng = Rng::from_seed(2);
        let selections = policy.torn_selections(2, &mut rng);
        assert_eq!(selections.len(), 200);
        assert!(selections.iter().all(|s| s.len() == 1));
        assert!(selections.contains(&vec![0]) && selections.contains(&vec![1]));
    }

    #[test]
    fn reservoir_keeps_everything_under_capacity_and_samples_beyond() {
        let mut small = Reservoir::new(10, 3);
        let mut large = Reservoir::new(10, 3);
        for d in 0..5 {
            small.offer(CrashState::durable_prefix(d));
        }
        for d in 0..1000 {
            large.offer(CrashState::durable_prefix(d));
        }
        assert_eq!(small.kept.len(), 5);
        assert_eq!(large.kept.len(), 10);
        // A uniform sample of 0..1000 is not the first ten.
        assert!(large.kept.iter().any(|s| s.durable_writes() >= 10));
    }
}
