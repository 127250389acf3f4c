#![no_main]
//! cargo-fuzz target for the `pmr_header` decoder (crates/fuzzing/src/targets).

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzzing::fuzz_one("pmr_header", data));
