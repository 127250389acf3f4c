//! Structure-blind mutations of a byte string, driven by the seeded [`platform::Rng`].
//!
//! The mutations are the ones coverage-guided fuzzers find most productive on binary
//! formats (AFL's havoc stage, libFuzzer's mutators): bit flips, byte and word sets to
//! "interesting" values (0, 1, the limits of each width, lengths of the input), small
//! additions, truncation, extension, removal, insertion and duplication of runs, and
//! splicing two inputs. Integers are written little-endian, as the format stores them.
//!
//! Invariants:
//! - The output depends only on the input bytes, the other input (for splicing) and the
//!   generator's state: a case replays from its seed.
//! - The output is at most `len_max` bytes, so a long run cannot grow inputs without bound.

use platform::Rng;

/// Values that cross the boundaries decoders test: zero, one, sign bits, all ones.
const INTERESTING_U64: [u64; 12] = [
    0,
    1,
    2,
    0x7f,
    0x80,
    0xff,
    0x7fff,
    0xffff,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_ffff,
    u64::MAX,
];

/// Applies 1 to 8 stacked mutations (havoc) to `data`, splicing with `other` sometimes.
pub fn havoc(rng: &mut Rng, data: &mut Vec<u8>, other: &[u8], len_max: usize) {
    let rounds = 1 + rng.below(8);
    for _ in 0..rounds {
        mutate_once(rng, data, other);
    }
    data.truncate(len_max);
}

fn pos(rng: &mut Rng, len: usize) -> usize {
    rng.below(len as u64) as usize
}

fn interesting(rng: &mut Rng, len: usize) -> u64 {
    match rng.below(4) {
        // A length or an offset near the input's own size: what length fields hold.
        0 => (len as u64).wrapping_add(rng.below(9)).wrapping_sub(4),
        1 => rng.next_u64() >> rng.below(64),
        _ => INTERESTING_U64[rng.below(INTERESTING_U64.len() as u64) as usize],
    }
}

fn put_word(data: &mut [u8], at: usize, width: usize, value: u64) {
    let bytes = value.to_le_bytes();
    let n = width.min(data.len() - at);
    data[at..at + n].copy_from_slice(&bytes[..n]);
}

fn mutate_once(rng: &mut Rng, data: &mut Vec<u8>, other: &[u8]) {
    if data.is_empty() {
        let n = 1 + rng.below(64) as usize;
        data.resize(n, 0);
        rng.fill(data);
        return;
    }
    let len = data.len();
    match rng.below(13) {
        0 => {
            let bit = rng.below(len as u64 * 8);
            data[(bit / 8) as usize] ^= 1 << (bit % 8);
        }
        1 => {
            let at = pos(rng, len);
            data[at] = rng.next_u64() as u8;
        }
        2 | 3 => {
            let at = pos(rng, len);
            let width = [1usize, 2, 4, 8][rng.below(4) as usize];
            let value = interesting(rng, len);
            put_word(data, at, width, value);
        }
        4 => {
            // Add or subtract a little from a word: counts and lengths one off.
            let at = pos(rng, len);
            let width = [1usize, 2, 4, 8][rng.below(4) as usize].min(len - at);
            let mut word = [0u8; 8];
            word[..width].copy_from_slice(&data[at..at + width]);
            let delta = 1 + rng.below(16);
            let v = u64::from_le_bytes(word);
            let v = if rng.chance(1, 2) {
                v.wrapping_add(delta)
            } else {
                v.wrapping_sub(delta)
            };
            put_word(data, at, width, v);
        }
        5 => data.truncate(pos(rng, len)),
        6 => {
            let n = 1 + rng.below(64) as usize;
            let zeros = rng.chance(1, 2);
            let start = data.len();
            data.resize(start + n, 0);
            if !zeros {
                rng.fill(&mut data[start..]);
            }
        }
        7 => {
            let at = pos(rng, len);
            let n = (1 + rng.below(32) as usize).min(len - at);
            data.drain(at..at + n);
        }
        8 => {
            let at = pos(rng, len + 1);
            let mut run = vec![0u8; 1 + rng.below(32) as usize];
            rng.fill(&mut run);
            data.splice(at..at, run);
        }
        9 => {
            // Copy a run over another place of the input (repeated structures).
            let from = pos(rng, len);
            let to = pos(rng, len);
            let n = (1 + rng.below(64) as usize).min(len - from).min(len - to);
            data.copy_within(from..from + n, to);
        }
        10 => {
            let at = pos(rng, len);
            let n = (1 + rng.below(64) as usize).min(len - at);
            let fill = if rng.chance(1, 2) { 0 } else { 0xff };
            data[at..at + n].fill(fill);
        }
        11 if !other.is_empty() => {
            // Splice: our prefix, the other input's suffix.
            let cut = pos(rng, len);
            let from = pos(rng, other.len());
            data.truncate(cut);
            data.extend_from_slice(&other[from..]);
        }
        _ => {
            let at = pos(rng, len);
            let n = (1 + rng.below(16) as usize).min(len - at);
            rng.fill(&mut data[at..at + n]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutations_replay_from_the_seed_and_respect_the_bound() {
        let base: Vec<u8> = (0..200u8).collect();
        let run = |seed| {
            let mut rng = Rng::from_seed(seed);
            let mut out = Vec::new();
            for _ in 0..500 {
                let mut d = base.clone();
                havoc(&mut rng, &mut d, &base[..50], 300);
                assert!(d.len() <= 300);
                out.push(d);
            }
            out
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
        // Most cases change the input.
        assert!(run(9).iter().filter(|d| **d != base).count() > 450);
    }
}
