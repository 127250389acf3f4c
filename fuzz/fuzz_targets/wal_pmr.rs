#![no_main]
//! cargo-fuzz target for the `wal_pmr` decoder (crates/fuzzing/src/targets).

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzzing::fuzz_one("wal_pmr", data));
