#![no_main]
//! cargo-fuzz target for the `segment_summary` decoder (crates/fuzzing/src/targets).

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzzing::fuzz_one("segment_summary", data));
