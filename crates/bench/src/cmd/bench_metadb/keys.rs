//! Keys and values of `augefs bench metadb`: dentry-shaped keys `m:<parent>:<name>` (the
//! file system's directory-entry keys, crates/metadb/src/lib.rs) and incompressible
//! 100-byte values.
//!
//! Invariants:
//! - `key(i)` is unique per `i`: the name embeds `i` in decimal.
//! - The parent is a hash of `i`, so writing indexes in order inserts keys in random
//!   order (about 150 entries per directory at 10M keys), the hard case for an LSM tree.
//! - Values are pseudo-random bytes, so a store that compresses (fjall uses LZ4) gains
//!   nothing from them and bytes per put compare like for like.

use std::io::Write;

/// Value size of every put (the 100 bytes).
pub const VALUE_BYTES: usize = 100;
/// Directories the keys spread over.
const PARENTS: u64 = 1 << 16;
/// Index space of one writer thread: thread `t` writes indexes from `t * THREAD_STRIDE`.
pub const THREAD_STRIDE: u64 = 100_000_000_000;
/// The aged-put figure's runs write indexes from multiples of this (above any load:
/// `--keys` is checked to stay below it).
pub const AGED_FIRST_INDEX: u64 = 1_000_000_000;

/// The splitmix64 finaliser: a cheap bijective mix of 64 bits.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Writes key `index` into `out` (cleared first): 24 bytes while `index < 10^12`.
pub fn key_into(index: u64, out: &mut Vec<u8>) {
    out.clear();
    let parent = mix(index) % PARENTS;
    write!(out, "m:{parent:08x}:f{index:012}").expect("writing to a Vec cannot fail");
}

/// Fills `out` with value `index`.
pub fn value_into(index: u64, out: &mut [u8; VALUE_BYTES]) {
    let mut state = mix(index ^ 0x5641_4c55_4553_2121);
    for chunk in out.chunks_mut(8) {
        state = mix(state);
        chunk.copy_from_slice(&state.to_le_bytes()[..chunk.len()]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_unique_and_shaped_like_dentries() {
        let mut a = Vec::new();
        let mut b = Vec::new();
        key_into(0, &mut a);
        key_into(1, &mut b);
        assert_ne!(a, b);
        assert_eq!(a.len(), 24);
        assert!(
            a.starts_with(b"m:") && a[10] == b':',
            "{}",
            String::from_utf8_lossy(&a)
        );
        key_into(7 * THREAD_STRIDE + 5, &mut a);
        assert!(
            a.ends_with(b":f700000000005"),
            "{}",
            String::from_utf8_lossy(&a)
        );
    }

    #[test]
    fn values_differ_and_are_deterministic() {
        let (mut x, mut y, mut z) = ([0u8; VALUE_BYTES], [0u8; VALUE_BYTES], [0u8; VALUE_BYTES]);
        value_into(3, &mut x);
        value_into(4, &mut y);
        value_into(3, &mut z);
        assert_ne!(x, y);
        assert_eq!(x, z);
        assert!(
            x.iter().filter(|&&b| b == 0).count() < 10,
            "values look random"
        );
    }
}
