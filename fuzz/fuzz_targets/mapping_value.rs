#![no_main]
//! cargo-fuzz target for the `mapping_value` decoder (crates/fuzzing/src/targets).

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzzing::fuzz_one("mapping_value", data));
