//! The instance's reader of posting rings (crates/instance/src/postring.rs, docs/DESIGN.md
//! §12.5): shared memory an attached process writes, which the instance trusts no more
//! than the device. An input is a head and a tail (8 bytes each, little-endian), then
//! the bytes of the record area from the head on.

use crate::driver::{Outcome, Target, CI_CASES};
use instance::postring::{read_image, BODY_MAX, CLOSED, RING_BYTES, SKIP};

/// A ring image: `head`, `tail` and the records' bytes.
fn image(head: u64, tail: u64, area: &[u8]) -> Vec<u8> {
    let mut v = head.to_le_bytes().to_vec();
    v.extend_from_slice(&tail.to_le_bytes());
    v.extend_from_slice(area);
    v
}

/// A record of `body` (its length word, the bytes, padding to 8).
fn record(body: &[u8]) -> Vec<u8> {
    let mut r = (body.len() as u32).to_le_bytes().to_vec();
    r.extend_from_slice(body);
    while r.len() % 8 != 0 {
        r.push(0);
    }
    r
}

fn seeds() -> Vec<Vec<u8>> {
    let two = [record(b"a posted write's frame"), record(&[7; 40])].concat();
    let near_end = RING_BYTES as u64 - 8;
    // A skip word at the ring's last 8 bytes, then a record at its start.
    let mut wrapped = SKIP.to_le_bytes().to_vec();
    wrapped.extend_from_slice(&[0; 4]);
    wrapped.extend_from_slice(&record(b"after the wrap"));
    vec![
        image(0, two.len() as u64, &two),
        image(64, (64 + two.len() as u64) | CLOSED, &two),
        image(near_end, near_end + wrapped.len() as u64, &wrapped),
        image(0, 0, &[]),
    ]
}

/// Reads the image; every body read must be one a ring can hold.
fn check(data: &[u8]) -> Outcome {
    if data.len() < 16 {
        return Outcome::Rejected;
    }
    let head = u64::from_le_bytes(data[..8].try_into().expect("8 bytes"));
    let tail = u64::from_le_bytes(data[8..16].try_into().expect("8 bytes"));
    let (bodies, end) = read_image(head, tail, &data[16..]);
    let mut total = 0u64;
    for b in &bodies {
        assert!(
            !b.is_empty() && b.len() <= BODY_MAX,
            "a body of {} bytes",
            b.len()
        );
        total += b.len() as u64;
    }
    assert!(total <= RING_BYTES as u64, "more read than a ring holds");
    match end {
        Ok(()) => Outcome::Decoded,
        Err(_) => Outcome::Rejected,
    }
}

pub fn targets() -> Vec<Target> {
    vec![Target {
        name: "instance_post_ring",
        seeds,
        reseal: |_| {},
        check,
        len_max: 1024,
        ci_cases: CI_CASES,
    }]
}
