#![no_main]
//! cargo-fuzz target for the `pmr_wal_slot` decoder (crates/fuzzing/src/targets).

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzzing::fuzz_one("pmr_wal_slot", data));
