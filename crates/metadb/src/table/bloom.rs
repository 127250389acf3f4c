//! The table's bloom filter over user keys (docs/FORMAT.md §5.3 Tables, "Bloom block"):
//! lets a lookup skip a table that cannot hold the key without reading a data block.
//!
//! One filter per table. A key's 64-bit hash is XXH64 (seed 0) of the user key; its low
//! and high 32 bits are h1 and h2, and probe i (0 <= i < k) sets bit
//! `((h1 + i * h2) mod 2^32) * m >> 32` of the m-bit array (double hashing, with a
//! multiply-shift instead of a modulo).
//!
//! Invariants:
//! - No false negatives: every user key added answers "may contain".
//! - m = max(64, ceil(n * bits_per_key / 8) * 8) for n distinct user keys; k =
//!   round(bits_per_key * ln 2) clamped to 1..=30 (10 bits/key: k = 7, about 0.8% false
//!   positives).
//! - The block carries a table-bound CRC-32C like every table block.

use crate::error::MetaDbError;
use crate::table::layout::{corrupt, seal, unseal, BLOOM_TRAILER_BYTES};
use crate::table::TableId;

/// `hash_kind` 1: XXH64 seed 0, double hashing as above. Values are forever.
pub const BLOOM_HASH_XXH64: u8 = 1;
pub const BLOOM_PROBES_MAX: u32 = 30;
/// Smallest bit array, in bytes.
pub const BLOOM_BYTES_MIN: usize = 8;

const P1: u64 = 0x9E37_79B1_85EB_CA87;
const P2: u64 = 0xC2B2_AE3D_27D4_EB4F;
const P3: u64 = 0x1656_67B1_9E37_79F9;
const P4: u64 = 0x85EB_CA77_C2B2_AE63;
const P5: u64 = 0x27D4_EB2F_1656_67C5;

#[inline]
fn read_u64(b: &[u8]) -> u64 {
    u64::from_le_bytes(b[..8].try_into().expect("8 bytes"))
}

#[inline]
fn xxh_round(acc: u64, input: u64) -> u64 {
    acc.wrapping_add(input.wrapping_mul(P2))
        .rotate_left(31)
        .wrapping_mul(P1)
}

#[inline]
fn xxh_merge(acc: u64, v: u64) -> u64 {
    (acc ^ xxh_round(0, v)).wrapping_mul(P1).wrapping_add(P4)
}

/// XXH64 of `bytes` with seed 0 (the reference algorithm, written out so the on-disk hash
/// cannot change with a dependency).
pub fn xxh64(bytes: &[u8]) -> u64 {
    let len = bytes.len();
    let mut rest = bytes;
    let mut h = if len >= 32 {
        let mut v = [P1.wrapping_add(P2), P2, 0, 0u64.wrapping_sub(P1)];
        while rest.len() >= 32 {
            for (i, lane) in v.iter_mut().enumerate() {
                *lane = xxh_round(*lane, read_u64(&rest[i * 8..]));
            }
            rest = &rest[32..];
        }
        let mut h = v[0]
            .rotate_left(1)
            .wrapping_add(v[1].rotate_left(7))
            .wrapping_add(v[2].rotate_left(12))
            .wrapping_add(v[3].rotate_left(18));
        for lane in v {
            h = xxh_merge(h, lane);
        }
        h
    } else {
        P5
    };
    h = h.wrapping_add(len as u64);
    while rest.len() >= 8 {
        h ^= xxh_round(0, read_u64(rest));
        h = h.rotate_left(27).wrapping_mul(P1).wrapping_add(P4);
        rest = &rest[8..];
    }
    if rest.len() >= 4 {
        let w = u32::from_le_bytes(rest[..4].try_into().expect("4 bytes")) as u64;
        h ^= w.wrapping_mul(P1);
        h = h.rotate_left(23).wrapping_mul(P2).wrapping_add(P3);
        rest = &rest[4..];
    }
    for &b in rest {
        h ^= (b as u64).wrapping_mul(P5);
        h = h.rotate_left(11).wrapping_mul(P1);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(P2);
    h ^= h >> 29;
    h = h.wrapping_mul(P3);
    h ^ (h >> 32)
}

/// The hash a filter stores for `user_key`. Compute once per lookup and pass it to every
/// table's [`Bloom::may_contain_hash`].
pub fn key_hash(user_key: &[u8]) -> u64 {
    xxh64(user_key)
}

/// Number of probes for `bits_per_key`.
pub fn probe_count(bits_per_key: u32) -> u32 {
    // k = bits_per_key * ln 2, rounded; integer form of 0.693 to stay exact across builds.
    ((bits_per_key as u64 * 693 + 500) / 1000).clamp(1, BLOOM_PROBES_MAX as u64) as u32
}

/// Bytes of the bit array for `keys` distinct user keys.
pub fn bit_bytes(keys: usize, bits_per_key: u32) -> usize {
    (keys * bits_per_key as usize)
        .div_ceil(8)
        .max(BLOOM_BYTES_MIN)
}

/// Bytes of the whole bloom block (bits and trailer) for `keys` distinct user keys.
pub fn block_len(keys: usize, bits_per_key: u32) -> usize {
    bit_bytes(keys, bits_per_key) + BLOOM_TRAILER_BYTES
}

#[inline]
fn probes(hash: u64, k: u32, bit_count: u64) -> impl Iterator<Item = u64> {
    let h1 = hash as u32;
    let h2 = (hash >> 32) as u32;
    (0..k).map(move |i| (h1.wrapping_add(i.wrapping_mul(h2)) as u64 * bit_count) >> 32)
}

/// Collects key hashes while a table is built.
#[derive(Debug)]
pub struct BloomBuilder {
    bits_per_key: u32,
    hashes: Vec<u64>,
}

impl BloomBuilder {
    pub fn new(bits_per_key: u32) -> BloomBuilder {
        assert!(
            (1..=64).contains(&bits_per_key),
            "bits per key {bits_per_key} out of range"
        );
        BloomBuilder {
            bits_per_key,
            hashes: Vec::new(),
        }
    }

    /// Adds a distinct user key (the caller skips repeats of the previous key).
    pub fn add_key(&mut self, user_key: &[u8]) {
        self.hashes.push(key_hash(user_key));
    }

    pub fn key_count(&self) -> usize {
        self.hashes.len()
    }

    pub fn bits_per_key(&self) -> u32 {
        self.bits_per_key
    }

    /// The sealed bloom block, to be written at `offset` of `table`.
    pub fn finish(&self, table: TableId, offset: u32) -> Vec<u8> {
        let bytes = bit_bytes(self.hashes.len(), self.bits_per_key);
        let k = probe_count(self.bits_per_key);
        let mut out = vec![0u8; bytes];
        let bit_count = bytes as u64 * 8;
        for &h in &self.hashes {
            for bit in probes(h, k, bit_count) {
                out[(bit / 8) as usize] |= 1 << (bit % 8);
            }
        }
        out.push(k as u8);
        out.push(BLOOM_HASH_XXH64);
        out.extend_from_slice(&[0, 0]);
        seal(table, offset, &mut out);
        assert_eq!(out.len(), block_len(self.hashes.len(), self.bits_per_key));
        out
    }
}

/// A decoded, verified filter.
#[derive(Debug)]
pub struct Bloom {
    bits: Box<[u8]>,
    probes: u32,
}

impl Bloom {
    /// Verifies and decodes the sealed bloom block at `offset` of table `table`.
    pub fn decode(sealed: &[u8], table: TableId, offset: u32) -> Result<Bloom, MetaDbError> {
        let body = unseal(table, offset, sealed, &|| "bloom block".to_string())?;
        let bad = |detail: String| corrupt(table, "bloom block", detail);
        if body.len() < BLOOM_BYTES_MIN + BLOOM_TRAILER_BYTES - 4 {
            return Err(bad(format!("{} bytes is too short", sealed.len())));
        }
        let (bits, trailer) = body.split_at(body.len() - (BLOOM_TRAILER_BYTES - 4));
        let (k, hash_kind) = (trailer[0] as u32, trailer[1]);
        if !(1..=BLOOM_PROBES_MAX).contains(&k) {
            return Err(bad(format!("probe count {k} out of range")));
        }
        if hash_kind != BLOOM_HASH_XXH64 {
            return Err(bad(format!("unknown hash kind {hash_kind}")));
        }
        Ok(Bloom {
            bits: bits.into(),
            probes: k,
        })
    }

    /// False only if no key with this hash was added.
    #[inline]
    pub fn may_contain_hash(&self, hash: u64) -> bool {
        let bit_count = self.bits.len() as u64 * 8;
        probes(hash, self.probes, bit_count)
            .all(|bit| self.bits[(bit / 8) as usize] & (1 << (bit % 8)) != 0)
    }

    pub fn may_contain(&self, user_key: &[u8]) -> bool {
        self.may_contain_hash(key_hash(user_key))
    }

    pub fn bit_count(&self) -> usize {
        self.bits.len() * 8
    }

    pub fn probe_count(&self) -> u32 {
        self.probes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xxh64_matches_reference_vectors() {
        assert_eq!(xxh64(b""), 0xEF46_DB37_51D8_E999);
        assert_eq!(xxh64(b"a"), 0xD24E_C4F1_A98C_6E5B);
        assert_eq!(xxh64(b"abc"), 0x44BC_2CF5_AD77_0999);
    }

    #[test]
    fn probe_counts() {
        assert_eq!(probe_count(10), 7);
        assert_eq!(probe_count(1), 1);
        assert_eq!(probe_count(64), BLOOM_PROBES_MAX);
        assert_eq!(bit_bytes(0, 10), BLOOM_BYTES_MIN);
        assert_eq!(bit_bytes(1000, 10), 1250);
    }

    fn key(i: u64) -> Vec<u8> {
        format!("m:{i}:file-{}", i.wrapping_mul(0x9E37_79B9)).into_bytes()
    }

    #[test]
    fn no_false_negatives_and_few_false_positives() {
        let n = 20_000u64;
        let mut b = BloomBuilder::new(10);
        (0..n).for_each(|i| b.add_key(&key(i)));
        let bloom = Bloom::decode(&b.finish(TableId(3), 64), TableId(3), 64).unwrap();
        assert!((0..n).all(|i| bloom.may_contain(&key(i))));
        let absent = 100_000u64;
        let fp = (n..n + absent)
            .filter(|&i| bloom.may_contain(&key(i)))
            .count();
        // Theory for 10 bits/key and k = 7: 0.82%.
        assert!(
            (fp as f64) < absent as f64 * 0.02,
            "{fp} false positives in {absent}"
        );
        assert!(fp > 0, "a 10 bit/key filter has some false positives");
    }

    #[test]
    fn bad_blocks_are_corruption() {
        let mut b = BloomBuilder::new(10);
        b.add_key(b"x");
        let good = b.finish(TableId(3), 64);
        assert!(
            Bloom::decode(&good, TableId(4), 64).is_err()
                && Bloom::decode(&good, TableId(3), 65).is_err(),
            "bound to its table"
        );
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 4;
            let err = Bloom::decode(&bad, TableId(3), 64).unwrap_err();
            assert!(err.to_string().contains("table 3 bloom block"), "{err}");
        }
    }
}
