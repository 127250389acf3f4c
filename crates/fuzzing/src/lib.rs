//! Fuzzing of every augefs decoder of bytes read from a device or a PMR (STYLE.md: "a
//! fuzz target per decoder"; docs/TESTING.md §1b).
//!
//! - [`targets`]: one [`driver::Target`] per decoder: valid encodings to start from, a
//!   reseal that recomputes checksums after a mutation, and a check that runs the
//!   decoder as the code that reads the device runs it and asserts the round trip of
//!   whatever decodes. A panic on any input is a bug: bad bytes must come back as a
//!   typed corruption error.
//! - [`mutate`]: seeded, structure-blind mutations; [`driver`]: the loop, budgets
//!   (`FUZZ_CASES`, `FUZZ_SECONDS`, `FUZZ_SEED`) and reports.
//!
//! Invariants:
//! - Runs are deterministic for a seed and a case count, so a failure replays.
//! - Nothing here is shipped: no other crate depends on this one.
// Library code says why it cannot fail (`expect`) or returns an error; tests may unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod driver;
pub mod mutate;
pub mod targets;

/// Runs target `name` on one input (the cargo-fuzz targets' entry point): the first
/// byte chooses whether the rest is resealed first (odd: checksums recomputed, so
/// libFuzzer's mutations reach the fields behind them), the rest is the input. Panics
/// if there is no such target.
pub fn fuzz_one(name: &str, data: &[u8]) {
    let target = targets::by_name(name).unwrap_or_else(|| panic!("no fuzz target {name}"));
    let Some((&flag, rest)) = data.split_first() else {
        return;
    };
    let mut input = rest.to_vec();
    input.truncate(target.len_max);
    if flag & 1 == 1 {
        (target.reseal)(&mut input);
    }
    let _ = (target.check)(&input);
}

/// Writes each target's seeds as a cargo-fuzz corpus, `dir/<target>/seed-<i>`, in
/// [`fuzz_one`]'s form (a leading 1: reseal).
pub fn write_corpus(dir: &std::path::Path) -> std::io::Result<()> {
    for t in targets::all() {
        let d = dir.join(t.name);
        std::fs::create_dir_all(&d)?;
        for (i, seed) in (t.seeds)().iter().enumerate() {
            let mut bytes = vec![1u8];
            bytes.extend_from_slice(seed);
            std::fs::write(d.join(format!("seed-{i}")), bytes)?;
        }
    }
    Ok(())
}
