//! Random damage to MetaDB records (deleted records, flipped bytes, truncated values) on
//! a workload image, several seeds: fsck never panics, `-n` never writes, `-y` leaves
//! only problems it says it cannot repair, and an image fsck calls clean mounts and
//! reads. A failing seed is replayed with `FSCK_DAMAGE_SEED=<seed>`;
//! `FSCK_DAMAGE_SEEDS=<n>` runs more seeds and `FSCK_DAMAGES=<n>` does more damage per
//! seed (a long mode).

mod common;

use common::*;
use fsck::{Kind, Mode};
use platform::Rng;
use testsupport::mount::unmount;
use testsupport::scratch;

const SEEDS: u64 = 6;
const DAMAGES_PER_SEED: u64 = 4;

/// Kinds fsck reports without a repair; an image may keep them after `-y`.
const UNREPAIRABLE: [Kind; 3] = [
    Kind::RootNotDirectory,
    Kind::UnknownRecord,
    Kind::SegmentOwnerConflict,
];

fn damage(seed: u64) {
    let dir = scratch!();
    let path = workload_image(dir.path());
    let fs = mount(&path);
    let mut rng = Rng::from_seed(seed);
    let all: Vec<(Vec<u8>, Vec<u8>)> = fs
        .engine()
        .metadb()
        .range(&[], None, None)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let mut what = Vec::new();
    let damages =
        std::env::var("FSCK_DAMAGES").map_or(DAMAGES_PER_SEED, |n| n.parse().expect("a count"));
    for _ in 0..damages {
        // Half the damage goes to the namespace (few records beside the block index).
        let pool: Vec<&(Vec<u8>, Vec<u8>)> = if rng.chance(1, 2) {
            all.iter()
                .filter(|(k, _)| !matches!(k[0], b'x' | b'e' | b'r' | b'q'))
                .collect()
        } else {
            all.iter().collect()
        };
        let (key, value) = pool[rng.below(pool.len() as u64) as usize];
        match rng.below(3) {
            0 => {
                delete(&fs, key);
                what.push(format!("delete {key:02x?}"));
            }
            1 if !value.is_empty() => {
                let mut v = value.clone();
                let at = rng.below(v.len() as u64) as usize;
                v[at] ^= 1 << rng.below(8);
                put(&fs, key, &v);
                what.push(format!("flip byte {at} of {key:02x?}"));
            }
            _ => {
                let v = &value[..rng.below(value.len() as u64 + 1) as usize];
                put(&fs, key, v);
                what.push(format!("truncate {key:02x?} to {}", v.len()));
            }
        }
    }
    unmount(fs);
    let context = format!("seed {seed} (replay: FSCK_DAMAGE_SEED={seed}): {what:#?}");
    let before = hash(&path);
    let found = run(&path, Mode::Check, true);
    eprintln!("seed {seed}: found {:?}", kinds(&found));
    assert!(matches!(found.exit_code(), 0 | 4), "{context}");
    assert_eq!(hash(&path), before, "-n wrote: {context}");
    let fixed = run(&path, Mode::Repair, true);
    let again = run(&path, Mode::Check, true);
    let left: Vec<_> = again
        .problems
        .iter()
        .filter(|p| !UNREPAIRABLE.contains(&p.kind))
        .collect();
    assert!(
        left.is_empty(),
        "{context}\nrepair: {:#?}\nleft: {left:#?}",
        fixed.problems
    );
    if again.problems.is_empty() {
        walk_all(&path);
    }
}

#[test]
fn random_damage_is_found_and_repaired() {
    match std::env::var("FSCK_DAMAGE_SEED") {
        Ok(s) => damage(s.parse().expect("a seed")),
        Err(_) => {
            let seeds =
                std::env::var("FSCK_DAMAGE_SEEDS").map_or(SEEDS, |n| n.parse().expect("a count"));
            (0..seeds).for_each(damage)
        }
    }
}
