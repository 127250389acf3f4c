#![no_main]
//! cargo-fuzz target for the `reverse_extent_value` decoder (crates/fuzzing/src/targets).

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzzing::fuzz_one("reverse_extent_value", data));
