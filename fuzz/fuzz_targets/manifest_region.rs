#![no_main]
//! cargo-fuzz target for the `manifest_region` decoder (crates/fuzzing/src/targets).

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzzing::fuzz_one("manifest_region", data));
