//! Segment summaries (docs/FORMAT.md §6): the reverse map from a segment's blocks to their
//! owners, which garbage collection needs to re-point moved blocks.
//!
//! One summary of 8 KiB per segment, in the summary region. The engine (issue 4) writes a
//! segment's summary when the segment is sealed and at checkpoints; the active segments'
//! summaries also travel in their domain's checkpoint.
//!
//! Invariants:
//! - `checksum` covers bytes 0..60 and 64..8192.
//! - Entry i describes block i of the segment; `owner_ino == 0` marks an unused block.

use crate::checksum::crc32c_skipping;
use crate::constants::{BLOCKS_PER_SEGMENT, SUMMARY_BYTES};
use crate::error::FormatError;
use crate::ids::{DomainId, InodeNo, SegmentNo};
use crate::layout::{Field, StructLayout};

pub const MAGIC: [u8; 8] = *b"AUGESSA\0";

/// What a segment holds. Stored in `kind`; values are forever.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum SegmentKind {
    Free = 0,
    Data = 1,
    Node = 2,
    Table = 3,
}

impl SegmentKind {
    pub fn from_u8(v: u8) -> Option<SegmentKind> {
        match v {
            0 => Some(SegmentKind::Free),
            1 => Some(SegmentKind::Data),
            2 => Some(SegmentKind::Node),
            3 => Some(SegmentKind::Table),
            _ => None,
        }
    }
}

pub const H_MAGIC: Field = Field::at("magic", 0, 8);
pub const H_SEGMENT: Field = Field::after(H_MAGIC, "segment_no", 4);
pub const H_DOMAIN: Field = Field::after(H_SEGMENT, "domain", 2);
pub const H_KIND: Field = Field::after(H_DOMAIN, "kind", 1);
pub const H_PAD: Field = Field::after(H_KIND, "pad", 1);
pub const H_SEQUENCE: Field = Field::after(H_PAD, "checkpoint_sequence", 8);
pub const H_ENTRY_COUNT: Field = Field::after(H_SEQUENCE, "entry_count", 4);
pub const H_RESERVED: Field = Field::after(H_ENTRY_COUNT, "reserved", 32);
pub const H_CHECKSUM: Field = Field::after(H_RESERVED, "checksum", 4);
pub const HEADER_BYTES: usize = 64;

pub const HEADER_LAYOUT: StructLayout = StructLayout {
    name: "Segment summary header",
    size: HEADER_BYTES,
    fields: &[
        H_MAGIC,
        H_SEGMENT,
        H_DOMAIN,
        H_KIND,
        H_PAD,
        H_SEQUENCE,
        H_ENTRY_COUNT,
        H_RESERVED,
        H_CHECKSUM,
    ],
};

pub const E_OWNER_INO: Field = Field::at("owner_ino", 0, 8);
pub const E_INDEX: Field = Field::after(E_OWNER_INO, "index", 4);
pub const ENTRY_BYTES: usize = 12;

pub const ENTRY_LAYOUT: StructLayout = StructLayout {
    name: "Segment summary entry",
    size: ENTRY_BYTES,
    fields: &[E_OWNER_INO, E_INDEX],
};

const _: () = assert!(H_CHECKSUM.end() == HEADER_BYTES);
const _: () = assert!(E_INDEX.end() == ENTRY_BYTES);
const _: () = assert!(HEADER_BYTES + BLOCKS_PER_SEGMENT as usize * ENTRY_BYTES <= SUMMARY_BYTES);

/// Who owns one block: for data, (inode, file block index); for a node block, (inode,
/// node index); for a table block, (0, table id) is not used: table segments are
/// tracked by MetaDB's manifest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SummaryEntry {
    pub owner_ino: InodeNo,
    pub index: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentSummary {
    pub segment: SegmentNo,
    pub domain: DomainId,
    pub kind: SegmentKind,
    pub checkpoint_sequence: u64,
    pub entries: Vec<SummaryEntry>,
}

impl SegmentSummary {
    pub fn encode(&self) -> Vec<u8> {
        assert!(self.entries.len() <= BLOCKS_PER_SEGMENT as usize);
        let mut buf = vec![0u8; SUMMARY_BYTES];
        H_MAGIC.put_bytes(&mut buf, &MAGIC);
        H_SEGMENT.put_u32(&mut buf, self.segment.0);
        H_DOMAIN.put_u16(&mut buf, self.domain.0);
        H_KIND.put_u8(&mut buf, self.kind as u8);
        H_SEQUENCE.put_u64(&mut buf, self.checkpoint_sequence);
        H_ENTRY_COUNT.put_u32(&mut buf, self.entries.len() as u32);
        for (i, e) in self.entries.iter().enumerate() {
            let at = HEADER_BYTES + i * ENTRY_BYTES;
            let slot = &mut buf[at..at + ENTRY_BYTES];
            E_OWNER_INO.put_u64(slot, e.owner_ino.0);
            E_INDEX.put_u32(slot, e.index);
        }
        let crc = crc32c_skipping(&buf, H_CHECKSUM.offset);
        H_CHECKSUM.put_u32(&mut buf, crc);
        buf
    }

    pub fn decode(buf: &[u8], expected_segment: SegmentNo) -> Result<SegmentSummary, FormatError> {
        assert_eq!(buf.len(), SUMMARY_BYTES);
        let location = format!("summary of segment {expected_segment}");
        let bad = |what: &str, expected: String, got: String| {
            FormatError::corruption(
                format!("segment summary {what}"),
                location.clone(),
                expected,
                got,
            )
        };
        if H_MAGIC.bytes(buf) != MAGIC {
            return Err(bad(
                "magic",
                "AUGESSA".into(),
                format!("{:?}", H_MAGIC.bytes(buf)),
            ));
        }
        let crc = crc32c_skipping(buf, H_CHECKSUM.offset);
        if crc != H_CHECKSUM.get_u32(buf) {
            return Err(bad(
                "checksum",
                format!("{crc:#010x}"),
                format!("{:#010x}", H_CHECKSUM.get_u32(buf)),
            ));
        }
        let segment = SegmentNo(H_SEGMENT.get_u32(buf));
        if segment != expected_segment {
            return Err(bad(
                "segment number (misdirected write)",
                expected_segment.to_string(),
                segment.to_string(),
            ));
        }
        let kind = SegmentKind::from_u8(H_KIND.get_u8(buf))
            .ok_or_else(|| bad("kind", "0..=3".into(), H_KIND.get_u8(buf).to_string()))?;
        let count = H_ENTRY_COUNT.get_u32(buf) as usize;
        if count > BLOCKS_PER_SEGMENT as usize {
            return Err(bad(
                "entry count",
                format!("at most {BLOCKS_PER_SEGMENT}"),
                count.to_string(),
            ));
        }
        let entries = (0..count)
            .map(|i| {
                let at = HEADER_BYTES + i * ENTRY_BYTES;
                let slot = &buf[at..at + ENTRY_BYTES];
                SummaryEntry {
                    owner_ino: InodeNo(E_OWNER_INO.get_u64(slot)),
                    index: E_INDEX.get_u32(slot),
                }
            })
            .collect();
        Ok(SegmentSummary {
            segment,
            domain: DomainId(H_DOMAIN.get_u16(buf)),
            kind,
            checkpoint_sequence: H_SEQUENCE.get_u64(buf),
            entries,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_misdirection() {
        let s = SegmentSummary {
            segment: SegmentNo(9),
            domain: DomainId(2),
            kind: SegmentKind::Data,
            checkpoint_sequence: 5,
            entries: (0..512)
                .map(|i| SummaryEntry {
                    owner_ino: InodeNo(i + 1),
                    index: i as u32 * 3,
                })
                .collect(),
        };
        let buf = s.encode();
        assert_eq!(SegmentSummary::decode(&buf, SegmentNo(9)).unwrap(), s);
        assert!(SegmentSummary::decode(&buf, SegmentNo(10)).is_err());
        let mut flipped = buf.clone();
        flipped[5000] ^= 1;
        assert!(SegmentSummary::decode(&flipped, SegmentNo(9)).is_err());
    }
}
