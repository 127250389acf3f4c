#![no_main]
//! cargo-fuzz target for the `seginfo_table` decoder (crates/fuzzing/src/targets).

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzzing::fuzz_one("seginfo_table", data));
