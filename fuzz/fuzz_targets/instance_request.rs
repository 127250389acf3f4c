#![no_main]
//! cargo-fuzz target for the `instance_request` decoder (crates/fuzzing/src/targets).

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzzing::fuzz_one("instance_request", data));
