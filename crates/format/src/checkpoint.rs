//! Checkpoint slots (docs/FORMAT.md §4).
//!
//! Each owner (the global checkpoint, and each domain) has two 16 KiB slots. A slot is
//! written whole, in one IO, always over the older slot, then flushed. The header at the
//! start and the trailer at the end carry the same sequence number and payload checksum,
//! so a torn write leaves the slot invalid and the other slot stands.
//!
//! Invariants:
//! - A slot is valid iff header and trailer checksums hold, magics match, header and
//!   trailer agree on `sequence` and `payload_crc`, and the payload's CRC matches.
//! - The newest valid slot (highest sequence) is the checkpoint.
//! - A payload of length 0 means "freshly formatted: nothing allocated".

use crate::checksum::{crc32c, crc32c_skipping};
use crate::constants::CHECKPOINT_SLOT_BYTES;
use crate::error::FormatError;
use crate::geometry::CheckpointOwner;
use crate::ids::DomainId;
use crate::layout::{Field, StructLayout};
use serde::Serialize;

pub const HEADER_MAGIC: [u8; 8] = *b"AUGECKPT";
pub const TRAILER_MAGIC: [u8; 8] = *b"AUGECKTL";

/// Owner kinds stored in `owner_kind`.
pub const OWNER_GLOBAL: u16 = 1;
pub const OWNER_DOMAIN: u16 = 2;

pub const H_MAGIC: Field = Field::at("magic", 0, 8);
pub const H_OWNER_KIND: Field = Field::after(H_MAGIC, "owner_kind", 2);
pub const H_DOMAIN: Field = Field::after(H_OWNER_KIND, "domain", 2);
pub const H_PAYLOAD_VERSION: Field = Field::after(H_DOMAIN, "payload_version", 4);
pub const H_SEQUENCE: Field = Field::after(H_PAYLOAD_VERSION, "sequence", 8);
pub const H_PAYLOAD_LEN: Field = Field::after(H_SEQUENCE, "payload_len", 4);
pub const H_PAYLOAD_CRC: Field = Field::after(H_PAYLOAD_LEN, "payload_crc", 4);
pub const H_RESERVED: Field = Field::after(H_PAYLOAD_CRC, "reserved", 28);
pub const H_CHECKSUM: Field = Field::after(H_RESERVED, "header_crc", 4);
pub const HEADER_BYTES: usize = 64;

pub const HEADER_LAYOUT: StructLayout = StructLayout {
    name: "Checkpoint slot header",
    size: HEADER_BYTES,
    fields: &[
        H_MAGIC,
        H_OWNER_KIND,
        H_DOMAIN,
        H_PAYLOAD_VERSION,
        H_SEQUENCE,
        H_PAYLOAD_LEN,
        H_PAYLOAD_CRC,
        H_RESERVED,
        H_CHECKSUM,
    ],
};

pub const T_MAGIC: Field = Field::at("magic", 0, 8);
pub const T_SEQUENCE: Field = Field::after(T_MAGIC, "sequence", 8);
pub const T_PAYLOAD_CRC: Field = Field::after(T_SEQUENCE, "payload_crc", 4);
pub const T_RESERVED: Field = Field::after(T_PAYLOAD_CRC, "reserved", 40);
pub const T_CHECKSUM: Field = Field::after(T_RESERVED, "trailer_crc", 4);
pub const TRAILER_BYTES: usize = 64;

pub const TRAILER_LAYOUT: StructLayout = StructLayout {
    name: "Checkpoint slot trailer",
    size: TRAILER_BYTES,
    fields: &[T_MAGIC, T_SEQUENCE, T_PAYLOAD_CRC, T_RESERVED, T_CHECKSUM],
};

const SLOT: usize = CHECKPOINT_SLOT_BYTES as usize;
/// The largest payload a slot holds.
pub const PAYLOAD_BYTES_MAX: usize = SLOT - HEADER_BYTES - TRAILER_BYTES;

const _: () = assert!(H_CHECKSUM.end() == HEADER_BYTES);
const _: () = assert!(T_CHECKSUM.end() == TRAILER_BYTES);

/// A decoded, validated checkpoint slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CheckpointSlot {
    pub owner: CheckpointOwner,
    pub payload_version: u32,
    pub sequence: u64,
    pub payload: Vec<u8>,
}

impl CheckpointSlot {
    pub fn encode(&self) -> Vec<u8> {
        assert!(
            self.payload.len() <= PAYLOAD_BYTES_MAX,
            "checkpoint payload too large"
        );
        let mut slot = vec![0u8; SLOT];
        let payload_crc = crc32c(&self.payload);
        let (kind, domain) = match self.owner {
            CheckpointOwner::Global => (OWNER_GLOBAL, 0),
            CheckpointOwner::Domain(d) => (OWNER_DOMAIN, d.0),
        };
        {
            let h = &mut slot[..HEADER_BYTES];
            H_MAGIC.put_bytes(h, &HEADER_MAGIC);
            H_OWNER_KIND.put_u16(h, kind);
            H_DOMAIN.put_u16(h, domain);
            H_PAYLOAD_VERSION.put_u32(h, self.payload_version);
            H_SEQUENCE.put_u64(h, self.sequence);
            H_PAYLOAD_LEN.put_u32(h, self.payload.len() as u32);
            H_PAYLOAD_CRC.put_u32(h, payload_crc);
            let crc = crc32c(&h[..H_CHECKSUM.offset]);
            H_CHECKSUM.put_u32(h, crc);
        }
        slot[HEADER_BYTES..HEADER_BYTES + self.payload.len()].copy_from_slice(&self.payload);
        {
            let t = &mut slot[SLOT - TRAILER_BYTES..];
            T_MAGIC.put_bytes(t, &TRAILER_MAGIC);
            T_SEQUENCE.put_u64(t, self.sequence);
            T_PAYLOAD_CRC.put_u32(t, payload_crc);
            let crc = crc32c_skipping(t, T_CHECKSUM.offset);
            T_CHECKSUM.put_u32(t, crc);
        }
        slot
    }

    /// Validates a slot read from `location` (for error messages). `Ok(None)` means the
    /// slot was never written (all zero header), which is not corruption.
    pub fn decode(slot: &[u8], location: &str) -> Result<Option<CheckpointSlot>, FormatError> {
        assert_eq!(slot.len(), SLOT);
        let h = &slot[..HEADER_BYTES];
        let t = &slot[SLOT - TRAILER_BYTES..];
        if h.iter().all(|&b| b == 0) && t.iter().all(|&b| b == 0) {
            return Ok(None);
        }
        let bad = |what: &str, expected: String, got: String| {
            FormatError::corruption(format!("checkpoint slot {what}"), location, expected, got)
        };
        if H_MAGIC.bytes(h) != HEADER_MAGIC {
            return Err(bad(
                "header magic",
                "AUGECKPT".into(),
                format!("{:?}", H_MAGIC.bytes(h)),
            ));
        }
        let header_crc = crc32c(&h[..H_CHECKSUM.offset]);
        if header_crc != H_CHECKSUM.get_u32(h) {
            return Err(bad(
                "header",
                format!("crc {header_crc:#010x}"),
                format!("{:#010x}", H_CHECKSUM.get_u32(h)),
            ));
        }
        if T_MAGIC.bytes(t) != TRAILER_MAGIC {
            return Err(bad(
                "trailer magic",
                "AUGECKTL".into(),
                format!("{:?}", T_MAGIC.bytes(t)),
            ));
        }
        let trailer_crc = crc32c_skipping(t, T_CHECKSUM.offset);
        if trailer_crc != T_CHECKSUM.get_u32(t) {
            return Err(bad(
                "trailer",
                format!("crc {trailer_crc:#010x}"),
                format!("{:#010x}", T_CHECKSUM.get_u32(t)),
            ));
        }
        let sequence = H_SEQUENCE.get_u64(h);
        if T_SEQUENCE.get_u64(t) != sequence {
            return Err(bad(
                "trailer sequence (torn write)",
                sequence.to_string(),
                T_SEQUENCE.get_u64(t).to_string(),
            ));
        }
        let payload_crc = H_PAYLOAD_CRC.get_u32(h);
        if T_PAYLOAD_CRC.get_u32(t) != payload_crc {
            return Err(bad(
                "trailer payload crc (torn write)",
                payload_crc.to_string(),
                T_PAYLOAD_CRC.get_u32(t).to_string(),
            ));
        }
        let len = H_PAYLOAD_LEN.get_u32(h) as usize;
        if len > PAYLOAD_BYTES_MAX {
            return Err(bad(
                "payload length",
                format!("at most {PAYLOAD_BYTES_MAX}"),
                len.to_string(),
            ));
        }
        let payload = &slot[HEADER_BYTES..HEADER_BYTES + len];
        if crc32c(payload) != payload_crc {
            return Err(bad(
                "payload",
                format!("crc {payload_crc:#010x}"),
                format!("{:#010x}", crc32c(payload)),
            ));
        }
        let owner = match H_OWNER_KIND.get_u16(h) {
            OWNER_GLOBAL => CheckpointOwner::Global,
            OWNER_DOMAIN => CheckpointOwner::Domain(DomainId(H_DOMAIN.get_u16(h))),
            other => return Err(bad("owner kind", "1 or 2".into(), other.to_string())),
        };
        Ok(Some(CheckpointSlot {
            owner,
            payload_version: H_PAYLOAD_VERSION.get_u32(h),
            sequence,
            payload: payload.to_vec(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> CheckpointSlot {
        CheckpointSlot {
            owner: CheckpointOwner::Domain(DomainId(3)),
            payload_version: 1,
            sequence: 42,
            payload: (0..1000u32).map(|i| i as u8).collect(),
        }
    }

    #[test]
    fn round_trip_and_empty_slot() {
        let slot = sample();
        assert_eq!(
            CheckpointSlot::decode(&slot.encode(), "t").unwrap(),
            Some(slot)
        );
        assert_eq!(CheckpointSlot::decode(&vec![0; SLOT], "t").unwrap(), None);
    }

    #[test]
    fn every_torn_version_is_rejected() {
        // A slot half-written over an older one, at every 4 KiB boundary.
        let old = CheckpointSlot {
            sequence: 41,
            payload: vec![9; 3000],
            ..sample()
        }
        .encode();
        let new = sample().encode();
        for blocks_written in 1..SLOT / 4096 {
            let mut torn = old.clone();
            torn[..blocks_written * 4096].copy_from_slice(&new[..blocks_written * 4096]);
            assert!(
                CheckpointSlot::decode(&torn, "t").is_err(),
                "torn at block {blocks_written}"
            );
            let mut torn_tail = new.clone();
            torn_tail[..blocks_written * 4096].copy_from_slice(&old[..blocks_written * 4096]);
            assert!(
                CheckpointSlot::decode(&torn_tail, "t").is_err(),
                "torn tail at {blocks_written}"
            );
        }
    }

    #[test]
    fn payload_bit_flip_is_rejected() {
        let mut bytes = sample().encode();
        bytes[HEADER_BYTES + 10] ^= 4;
        assert!(matches!(
            CheckpointSlot::decode(&bytes, "t"),
            Err(FormatError::Corruption(_))
        ));
    }
}
