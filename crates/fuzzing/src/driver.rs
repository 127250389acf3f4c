//! The fuzz loop: mutated valid encodings and random bytes fed to one decoder, every
//! case under `catch_unwind`, so a panic is reported with the input that caused it.
//!
//! Invariants:
//! - A run is a pure function of (target, seed, case count): the same run replays
//!   exactly (`FUZZ_SEED`, `FUZZ_CASES`). A time budget only decides where it stops.
//! - Every seed input decodes (a valid encoding is accepted: the round trip is the
//!   target's own assertion), checked before any mutation.
//! - Inputs that decode are kept (at most [`POOL_MAX`]) and mutated further: the cheap
//!   stand-in for coverage feedback that carries mutations past checksums and into the
//!   fields behind them.

use crate::mutate::havoc;
use platform::Rng;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

/// What a decoder made of an input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Decoded (and, where the target can tell, re-encoded to the same value).
    Decoded,
    /// Refused with a typed error.
    Rejected,
}

/// One decoder under test.
#[derive(Debug, Clone, Copy)]
pub struct Target {
    pub name: &'static str,
    /// Valid encodings, the corpus mutations start from.
    pub seeds: fn() -> Vec<Vec<u8>>,
    /// Recomputes the checksums of a mutated input, so that a mutation reaches the
    /// fields behind them instead of stopping at the CRC; identity where there is none.
    pub reseal: fn(&mut [u8]),
    /// Decodes the input. Must not panic; asserts the round trip of what it decodes.
    pub check: fn(&[u8]) -> Outcome,
    /// Largest input the mutator produces.
    pub len_max: usize,
    /// Cases CI runs (tests/decoders.rs): [`CI_CASES`] unless a case is slow.
    pub ci_cases: u64,
}

/// CI's budget per target: at most a few seconds each in the test profile on two
/// loaded cores (most decoders run 200,000-2,000,000 cases a second there).
pub const CI_CASES: u64 = 100_000;

/// How much to run: a number of cases, a time, or both (whichever ends first).
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    pub cases: Option<u64>,
    pub time: Option<Duration>,
    pub seed: u64,
}

/// The seed runs use unless `FUZZ_SEED` says otherwise.
pub const DEFAULT_SEED: u64 = 0x0a0e_f5f0_22ed;
/// Decoded inputs kept for further mutation.
pub const POOL_MAX: usize = 512;

impl Budget {
    /// `FUZZ_CASES`, `FUZZ_SECONDS` and `FUZZ_SEED` from the environment; without
    /// either limit, `default_cases` cases (CI's fixed budget).
    pub fn from_env(default_cases: u64) -> Budget {
        let num = |name: &str| {
            std::env::var(name).ok().map(|v| {
                let v = v.trim();
                let parsed = match v.strip_prefix("0x") {
                    Some(hex) => u64::from_str_radix(hex, 16),
                    None => v.parse(),
                };
                parsed.unwrap_or_else(|_| panic!("{name}={v} is not a number"))
            })
        };
        let cases = num("FUZZ_CASES");
        let time = num("FUZZ_SECONDS").map(Duration::from_secs);
        Budget {
            cases: if cases.is_none() && time.is_none() {
                Some(default_cases)
            } else {
                cases
            },
            time,
            seed: num("FUZZ_SEED").unwrap_or(DEFAULT_SEED),
        }
    }
}

/// What a run did.
#[derive(Debug, Clone, Copy, Default)]
pub struct Report {
    pub cases: u64,
    pub decoded: u64,
    pub elapsed: Duration,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let secs = self.elapsed.as_secs_f64();
        write!(
            f,
            "{} cases ({} decoded, {:.1}%) in {:.1} s, {:.0}/s",
            self.cases,
            self.decoded,
            100.0 * self.decoded as f64 / self.cases.max(1) as f64,
            secs,
            self.cases as f64 / secs.max(1e-9)
        )
    }
}

fn hex(data: &[u8]) -> String {
    data.iter().map(|b| format!("{b:02x}")).collect()
}

/// Runs `input` through the target; a panic is reported with everything needed to
/// replay it, then propagated.
pub fn check_one(target: &Target, input: &[u8], replay: &str) -> Outcome {
    match catch_unwind(AssertUnwindSafe(|| (target.check)(input))) {
        Ok(outcome) => outcome,
        Err(panic) => {
            eprintln!(
                "fuzz target {} panicked on a {}-byte input; replay: {replay}\ninput (hex): {}",
                target.name,
                input.len(),
                hex(input)
            );
            std::panic::resume_unwind(panic)
        }
    }
}

/// Checks that every seed decodes, then runs the budget of mutated and random cases.
pub fn run(target: &Target, budget: Budget) -> Report {
    let started = Instant::now();
    let seeds = (target.seeds)();
    assert!(!seeds.is_empty(), "target {} has no seeds", target.name);
    for (i, seed) in seeds.iter().enumerate() {
        let outcome = check_one(target, seed, &format!("seed input {i}"));
        assert_eq!(
            outcome,
            Outcome::Decoded,
            "target {}: valid encoding {i} was not accepted",
            target.name
        );
    }
    let replay = format!(
        "FUZZ_SEED={:#x} FUZZ_CASES=<case + 1> cargo test -p fuzzing --test decoders {}",
        budget.seed, target.name
    );
    let mut rng = Rng::from_seed(budget.seed ^ fnv(target.name));
    let mut pool: Vec<Vec<u8>> = seeds.clone();
    let mut report = Report::default();
    let mut input = Vec::new();
    loop {
        if budget.cases.is_some_and(|n| report.cases >= n) {
            break;
        }
        // The clock is read every 64 cases: cheap, and a long run overshoots by little.
        if report.cases % 64 == 0 && budget.time.is_some_and(|t| started.elapsed() >= t) {
            break;
        }
        make_input(target, &mut rng, &pool, &mut input);
        let outcome = check_one(target, &input, &format!("{replay} (case {})", report.cases));
        report.cases += 1;
        if outcome == Outcome::Decoded {
            report.decoded += 1;
            if pool.len() < POOL_MAX {
                pool.push(input.clone());
            } else {
                let slot = seeds.len() + rng.below((POOL_MAX - seeds.len()) as u64) as usize;
                pool[slot].clone_from(&input);
            }
        }
    }
    report.elapsed = started.elapsed();
    report
}

/// One case: random bytes (1 in 16), or a pool input mutated and (3 times in 4) resealed.
fn make_input(target: &Target, rng: &mut Rng, pool: &[Vec<u8>], input: &mut Vec<u8>) {
    input.clear();
    if rng.chance(1, 16) {
        let len = if rng.chance(1, 2) {
            pool[rng.below(pool.len() as u64) as usize].len()
        } else {
            rng.below(target.len_max as u64 + 1) as usize
        };
        input.resize(len, 0);
        rng.fill(input);
        return;
    }
    input.extend_from_slice(&pool[rng.below(pool.len() as u64) as usize]);
    let other = &pool[rng.below(pool.len() as u64) as usize];
    havoc(rng, input, other, target.len_max);
    if rng.chance(3, 4) {
        (target.reseal)(input);
    }
}

/// FNV-1a of the target's name: each target draws its own stream from one seed.
fn fnv(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}
