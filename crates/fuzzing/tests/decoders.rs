//! Every decoder fed a fixed budget of mutated valid encodings and random bytes:
//! no panic, and every valid encoding round-trips (docs/TESTING.md §1b). Deterministic
//! for `FUZZ_SEED`; `FUZZ_CASES=N` or `FUZZ_SECONDS=S` runs longer (per target).

use fuzzing::driver::{run, Budget};
use fuzzing::targets;

fn fuzz(name: &str) {
    let target = targets::by_name(name).expect("target exists");
    let report = run(&target, Budget::from_env(target.ci_cases));
    println!("{name}: {report}");
    assert!(report.cases > 0);
}

macro_rules! fuzz_tests {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                fuzz(stringify!($name));
            }
        )*

        #[test]
        fn every_target_has_a_test() {
            let tested = [$(stringify!($name)),*];
            for t in targets::all() {
                assert!(tested.contains(&t.name), "no test runs fuzz target {}", t.name);
            }
        }
    };
}

fuzz_tests!(
    superblock,
    geometry,
    checkpoint_slot,
    segment_summary,
    pmr_header,
    wal_batch,
    wal_region_header,
    wal_chunk,
    pmr_wal_entries,
    pmr_wal_slot,
    table,
    manifest_region,
    manifest_edit,
    wal_ssd_region,
    wal_pmr,
    engine_keys,
    mapping_value,
    extent_value,
    reverse_value,
    reverse_extent_value,
    domain_record,
    seginfo_table,
    seginfo_entries,
    vfs_inode,
    vfs_dentry,
    instance_request,
    instance_post_ring,
);
