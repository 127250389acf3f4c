#![no_main]
//! cargo-fuzz target for the `instance_post_ring` reader (crates/fuzzing/src/targets).

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzzing::fuzz_one("instance_post_ring", data));
