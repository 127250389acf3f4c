//! The global checkpoint's payload (docs/FORMAT.md §6.3, version 2): the domain-record
//! fields, then the WAL lanes `sync` found durable, so that recovery can tell damage to
//! the WAL from a torn tail (FORMAT.md §5.2, "What proves damage").
//!
//! Invariants:
//! - Every extent names records that were durable (covered by a completed device flush
//!   or PMR persist) before the slot was written: a later recovery that finds fewer is
//!   looking at damage.
//! - The encoding fits one checkpoint slot's payload; extents beyond
//!   [`WAL_EXTENTS_MAX`] are left out (less evidence, never wrong evidence).

use super::keys::{DomainRecord, DOMAIN_RECORD_BYTES};
use crate::error::EngineError;
use format::constants::CHECKPOINT_SLOT_BYTES;
use format::layout::{Field, StructLayout};
use format::Corruption;
use metadb::wal::WalExtent;

/// Payload version of a global slot that carries WAL extents (version 1: the domain
/// record alone, as domain slots).
pub const GLOBAL_PAYLOAD_VERSION: u32 = 2;

const G_EXTENT_COUNT: Field = Field::at("extent_count", DOMAIN_RECORD_BYTES, 4);
const G_RESERVED: Field = Field::after(G_EXTENT_COUNT, "reserved", 4);
const GLOBAL_HEADER_BYTES: usize = 32;
pub const GLOBAL_HEADER_LAYOUT: StructLayout = StructLayout {
    name: "Global checkpoint payload header",
    size: GLOBAL_HEADER_BYTES,
    fields: &[
        super::keys::D_DURABLE,
        super::keys::D_ISSUED,
        super::keys::D_ELAPSED,
        G_EXTENT_COUNT,
        G_RESERVED,
    ],
};
const _: () = assert!(G_RESERVED.end() == GLOBAL_HEADER_BYTES);

const X_GENERATION: Field = Field::at("generation", 0, 8);
const X_LANE: Field = Field::after(X_GENERATION, "lane", 2);
const X_RESERVED: Field = Field::after(X_LANE, "reserved", 6);
const X_COUNT: Field = Field::after(X_RESERVED, "count", 8);
const EXTENT_BYTES: usize = 24;
pub const WAL_EXTENT_LAYOUT: StructLayout = StructLayout {
    name: "Global checkpoint WAL extent",
    size: EXTENT_BYTES,
    fields: &[X_GENERATION, X_LANE, X_RESERVED, X_COUNT],
};
const _: () = assert!(X_COUNT.end() == EXTENT_BYTES);

/// Extents one slot holds: (16384 - 128 - 32) / 24.
pub const WAL_EXTENTS_MAX: usize =
    (CHECKPOINT_SLOT_BYTES as usize - 128 - GLOBAL_HEADER_BYTES) / EXTENT_BYTES;

pub fn encode(record: &DomainRecord, extents: &[WalExtent]) -> Vec<u8> {
    let extents = &extents[..extents.len().min(WAL_EXTENTS_MAX)];
    let mut out = vec![0u8; GLOBAL_HEADER_BYTES + extents.len() * EXTENT_BYTES];
    out[..DOMAIN_RECORD_BYTES].copy_from_slice(&record.encode());
    G_EXTENT_COUNT.put_u32(&mut out, extents.len() as u32);
    for (i, e) in extents.iter().enumerate() {
        let at = GLOBAL_HEADER_BYTES + i * EXTENT_BYTES;
        let buf = &mut out[at..at + EXTENT_BYTES];
        X_GENERATION.put_u64(buf, e.generation);
        X_LANE.put_u16(buf, e.lane);
        X_COUNT.put_u64(buf, e.count);
    }
    out
}

pub fn decode(payload: &[u8]) -> Result<(DomainRecord, Vec<WalExtent>), EngineError> {
    let bad = |expected: String, got: usize| {
        EngineError::Corruption(Corruption::new(
            "global checkpoint payload",
            "the global checkpoint slot",
            expected,
            got,
        ))
    };
    if payload.len() < GLOBAL_HEADER_BYTES {
        return Err(bad(
            format!("at least {GLOBAL_HEADER_BYTES} bytes"),
            payload.len(),
        ));
    }
    let record = DomainRecord::decode(&payload[..DOMAIN_RECORD_BYTES])?;
    let count = G_EXTENT_COUNT.get_u32(payload) as usize;
    let len = GLOBAL_HEADER_BYTES + count.min(WAL_EXTENTS_MAX + 1) * EXTENT_BYTES;
    if count > WAL_EXTENTS_MAX || payload.len() != len {
        return Err(bad(
            format!("{len} bytes for {count} WAL extents"),
            payload.len(),
        ));
    }
    let extents = payload[GLOBAL_HEADER_BYTES..]
        .chunks_exact(EXTENT_BYTES)
        .map(|buf| WalExtent {
            generation: X_GENERATION.get_u64(buf),
            lane: X_LANE.get_u16(buf),
            count: X_COUNT.get_u64(buf),
        })
        .collect();
    Ok((record, extents))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_bounds() {
        let record = DomainRecord {
            durable_seq: 3,
            issued_seq: 5,
            elapsed_ns: 7,
        };
        let extents: Vec<WalExtent> = (0..3)
            .map(|i| WalExtent {
                generation: 9,
                lane: i,
                count: u64::from(i) + 1,
            })
            .collect();
        let bytes = encode(&record, &extents);
        assert_eq!(bytes.len(), 32 + 3 * 24);
        assert_eq!(decode(&bytes).unwrap(), (record, extents.clone()));
        assert!(decode(&bytes[..bytes.len() - 1]).is_err());
        assert!(decode(&bytes[..20]).is_err());
        let many = vec![extents[0]; WAL_EXTENTS_MAX + 5];
        let bytes = encode(&record, &many);
        assert!(bytes.len() <= CHECKPOINT_SLOT_BYTES as usize - 128);
        assert_eq!(decode(&bytes).unwrap().1.len(), WAL_EXTENTS_MAX);
        for layout in [GLOBAL_HEADER_LAYOUT, WAL_EXTENT_LAYOUT] {
            layout.check_contiguous().unwrap();
        }
    }
}
