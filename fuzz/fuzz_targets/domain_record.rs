#![no_main]
//! cargo-fuzz target for the `domain_record` decoder (crates/fuzzing/src/targets).

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzzing::fuzz_one("domain_record", data));
