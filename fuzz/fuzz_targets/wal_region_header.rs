#![no_main]
//! cargo-fuzz target for the `wal_region_header` decoder (crates/fuzzing/src/targets).

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzzing::fuzz_one("wal_region_header", data));
