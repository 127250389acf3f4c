//! The PMR WAL's tail: one 64-bit word in DRAM that appenders advance with a CAS
//! (augefs.txt §V-B "Enabling Parallel Logging").
//!
//! ```text
//! bits 63..34 serial | bit 33 half | bit 32 sealed | bits 31..0 offset (PMR byte)
//! ```
//!
//! Invariants:
//! - `serial` changes whenever the tail moves to a new segment (rotation or half switch);
//!   a CAS that reserved space therefore reserved it in the segment its serial names.
//! - While `sealed` is set no reservation succeeds, so the segment's end is fixed.
//! - The offset never passes its half's end.

const OFFSET_MASK: u64 = (1 << 32) - 1;
const SEALED: u64 = 1 << 32;
const HALF: u64 = 1 << 33;
const SERIAL_SHIFT: u32 = 34;
const SERIAL_MASK: u64 = (1 << (64 - SERIAL_SHIFT)) - 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Tail {
    /// Segment serial, modulo 2^30.
    pub serial: u64,
    pub half: usize,
    pub sealed: bool,
    /// Next free PMR byte of the half.
    pub offset: u64,
}

impl Tail {
    pub fn pack(self) -> u64 {
        assert!(self.offset <= OFFSET_MASK && self.half < 2);
        (self.serial & SERIAL_MASK) << SERIAL_SHIFT
            | if self.half == 1 { HALF } else { 0 }
            | if self.sealed { SEALED } else { 0 }
            | self.offset
    }

    pub fn unpack(word: u64) -> Tail {
        Tail {
            serial: word >> SERIAL_SHIFT,
            half: usize::from(word & HALF != 0),
            sealed: word & SEALED != 0,
            offset: word & OFFSET_MASK,
        }
    }

    /// The serial of the segment after this one.
    pub fn next_serial(self) -> u64 {
        (self.serial + 1) & SERIAL_MASK
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_serial_wraps() {
        let t = Tail {
            serial: 12345,
            half: 1,
            sealed: true,
            offset: 0xFFFF_FFC0,
        };
        assert_eq!(Tail::unpack(t.pack()), t);
        let last = Tail {
            serial: SERIAL_MASK,
            half: 0,
            sealed: false,
            offset: 64,
        };
        assert_eq!(Tail::unpack(last.pack()), last);
        assert_eq!(last.next_serial(), 0);
    }
}
