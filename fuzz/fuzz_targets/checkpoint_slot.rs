#![no_main]
//! cargo-fuzz target for the `checkpoint_slot` decoder (crates/fuzzing/src/targets).

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzzing::fuzz_one("checkpoint_slot", data));
