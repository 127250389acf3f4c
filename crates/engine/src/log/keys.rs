//! The engine's records in MetaDB (docs/FORMAT.md §6.2): the block index, its reverse
//! map, the segment information table and each domain's write state. Keys are big-endian
//! so that MetaDB's byte order is numeric order (a file's blocks are adjacent, a domain's
//! segments are adjacent); values are little-endian field tables like every other
//! on-disk structure.
//!
//! | key | bytes | value |
//! |---|---|---|
//! | `x` ino block | 17 | [`Mapping`]: where a file block lives, its data CRC, its write |
//! | `r` segment block | 7 | [`Reverse`]: which file block a device block was written for |
//! | `s` domain segment | 7 | one segment information entry (FORMAT.md §6.1) |
//! | `d` domain | 3 | [`DomainRecord`]: the domain's durable-data watermark |
//!
//! Invariants:
//! - Decoding never panics on bad bytes: a wrong length or field is typed corruption.
//! - Every data CRC is seeded with the file block's identity (inode, block), so stale
//!   contents at an address (a reused segment, a lost write) never verify as the block.

use crate::error::EngineError;
use format::checksum::{crc32c, crc32c_append};
use format::layout::{Field, StructLayout};
use format::{BlockAddr, Corruption, DomainId, InodeNo, SegmentNo};

pub const MAPPING_TAG: u8 = b'x';
pub const REVERSE_TAG: u8 = b'r';
pub const SEGINFO_TAG: u8 = b's';
pub const DOMAIN_TAG: u8 = b'd';

/// A file block number (block index inside a file, 4 KiB units).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FileBlock(pub u64);

pub fn mapping_key(ino: InodeNo, block: FileBlock) -> [u8; 17] {
    let mut k = [0u8; 17];
    k[0] = MAPPING_TAG;
    k[1..9].copy_from_slice(&ino.0.to_be_bytes());
    k[9..17].copy_from_slice(&block.0.to_be_bytes());
    k
}

/// The prefix of every mapping key of `ino`.
pub fn mapping_prefix(ino: InodeNo) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[0] = MAPPING_TAG;
    k[1..9].copy_from_slice(&ino.0.to_be_bytes());
    k
}

pub fn parse_mapping_key(key: &[u8]) -> Result<(InodeNo, FileBlock), EngineError> {
    if key.len() != 17 || key[0] != MAPPING_TAG {
        return Err(bad("mapping key", "17 bytes starting with x", key.len()));
    }
    Ok((
        InodeNo(u64::from_be_bytes(key[1..9].try_into().expect("8 bytes"))),
        FileBlock(u64::from_be_bytes(key[9..17].try_into().expect("8 bytes"))),
    ))
}

pub fn reverse_key(segment: SegmentNo, block: u16) -> [u8; 7] {
    let mut k = [0u8; 7];
    k[0] = REVERSE_TAG;
    k[1..5].copy_from_slice(&segment.0.to_be_bytes());
    k[5..7].copy_from_slice(&block.to_be_bytes());
    k
}

pub fn reverse_prefix(segment: SegmentNo) -> [u8; 5] {
    let mut k = [0u8; 5];
    k[0] = REVERSE_TAG;
    k[1..5].copy_from_slice(&segment.0.to_be_bytes());
    k
}

pub fn parse_reverse_key(key: &[u8]) -> Result<(SegmentNo, u16), EngineError> {
    if key.len() != 7 || key[0] != REVERSE_TAG {
        return Err(bad("reverse-map key", "7 bytes starting with r", key.len()));
    }
    Ok((
        SegmentNo(u32::from_be_bytes(key[1..5].try_into().expect("4 bytes"))),
        u16::from_be_bytes(key[5..7].try_into().expect("2 bytes")),
    ))
}

pub fn seginfo_key(domain: DomainId, segment: SegmentNo) -> [u8; 7] {
    let mut k = [0u8; 7];
    k[0] = SEGINFO_TAG;
    k[1..3].copy_from_slice(&domain.0.to_be_bytes());
    k[3..7].copy_from_slice(&segment.0.to_be_bytes());
    k
}

pub fn seginfo_prefix(domain: DomainId) -> [u8; 3] {
    let mut k = [0u8; 3];
    k[0] = SEGINFO_TAG;
    k[1..3].copy_from_slice(&domain.0.to_be_bytes());
    k
}

pub fn domain_key(domain: DomainId) -> [u8; 3] {
    let mut k = [0u8; 3];
    k[0] = DOMAIN_TAG;
    k[1..3].copy_from_slice(&domain.0.to_be_bytes());
    k
}

/// Where a file block lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mapping {
    pub addr: BlockAddr,
    /// [`block_crc`] of the block's contents.
    pub crc: u32,
    /// The domain's data-write sequence number of the write that put it there.
    pub write_seq: u64,
}

pub const M_ADDR: Field = Field::at("addr", 0, 8);
pub const M_CRC: Field = Field::after(M_ADDR, "data_crc", 4);
pub const M_SEQ: Field = Field::after(M_CRC, "write_seq", 8);
pub const MAPPING_BYTES: usize = 20;
pub const MAPPING_LAYOUT: StructLayout = StructLayout {
    name: "Block mapping value",
    size: MAPPING_BYTES,
    fields: &[M_ADDR, M_CRC, M_SEQ],
};

impl Mapping {
    pub fn encode(&self) -> [u8; MAPPING_BYTES] {
        let mut v = [0u8; MAPPING_BYTES];
        M_ADDR.put_u64(&mut v, self.addr.0);
        M_CRC.put_u32(&mut v, self.crc);
        M_SEQ.put_u64(&mut v, self.write_seq);
        v
    }

    pub fn decode(v: &[u8]) -> Result<Mapping, EngineError> {
        if v.len() != MAPPING_BYTES {
            return Err(bad("mapping value length", MAPPING_BYTES, v.len()));
        }
        Ok(Mapping {
            addr: BlockAddr(M_ADDR.get_u64(v)),
            crc: M_CRC.get_u32(v),
            write_seq: M_SEQ.get_u64(v),
        })
    }
}

/// Which file block a device block was written for (F2FS's segment summary entry).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reverse {
    pub ino: InodeNo,
    pub block: FileBlock,
}

pub const R_INO: Field = Field::at("ino", 0, 8);
pub const R_BLOCK: Field = Field::after(R_INO, "file_block", 8);
pub const REVERSE_BYTES: usize = 16;
pub const REVERSE_LAYOUT: StructLayout = StructLayout {
    name: "Reverse map value",
    size: REVERSE_BYTES,
    fields: &[R_INO, R_BLOCK],
};

impl Reverse {
    pub fn encode(&self) -> [u8; REVERSE_BYTES] {
        let mut v = [0u8; REVERSE_BYTES];
        R_INO.put_u64(&mut v, self.ino.0);
        R_BLOCK.put_u64(&mut v, self.block.0);
        v
    }

    pub fn decode(v: &[u8]) -> Result<Reverse, EngineError> {
        if v.len() != REVERSE_BYTES {
            return Err(bad("reverse-map value length", REVERSE_BYTES, v.len()));
        }
        Ok(Reverse {
            ino: InodeNo(R_INO.get_u64(v)),
            block: FileBlock(R_BLOCK.get_u64(v)),
        })
    }
}

/// A domain's write state, rewritten by every batch of the domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DomainRecord {
    /// Every data write of the domain with a sequence number up to this one is durable.
    pub durable_seq: u64,
    /// The highest data-write sequence number issued when the batch was made.
    pub issued_seq: u64,
    /// File-system time (FORMAT.md §6.1) when the batch was made.
    pub elapsed_ns: u64,
}

pub const D_DURABLE: Field = Field::at("durable_seq", 0, 8);
pub const D_ISSUED: Field = Field::after(D_DURABLE, "issued_seq", 8);
pub const D_ELAPSED: Field = Field::after(D_ISSUED, "elapsed_ns", 8);
pub const DOMAIN_RECORD_BYTES: usize = 24;
pub const DOMAIN_RECORD_LAYOUT: StructLayout = StructLayout {
    name: "Domain record value",
    size: DOMAIN_RECORD_BYTES,
    fields: &[D_DURABLE, D_ISSUED, D_ELAPSED],
};

impl DomainRecord {
    pub fn encode(&self) -> [u8; DOMAIN_RECORD_BYTES] {
        let mut v = [0u8; DOMAIN_RECORD_BYTES];
        D_DURABLE.put_u64(&mut v, self.durable_seq);
        D_ISSUED.put_u64(&mut v, self.issued_seq);
        D_ELAPSED.put_u64(&mut v, self.elapsed_ns);
        v
    }

    pub fn decode(v: &[u8]) -> Result<DomainRecord, EngineError> {
        if v.len() != DOMAIN_RECORD_BYTES {
            return Err(bad(
                "domain record value length",
                DOMAIN_RECORD_BYTES,
                v.len(),
            ));
        }
        let r = DomainRecord {
            durable_seq: D_DURABLE.get_u64(v),
            issued_seq: D_ISSUED.get_u64(v),
            elapsed_ns: D_ELAPSED.get_u64(v),
        };
        if r.durable_seq > r.issued_seq {
            return Err(bad(
                "domain record durable_seq",
                format!("at most issued_seq {}", r.issued_seq),
                r.durable_seq,
            ));
        }
        Ok(r)
    }
}

/// The structures of this module whose tables appear in docs/FORMAT.md §6.2.
pub fn layouts() -> Vec<StructLayout> {
    vec![MAPPING_LAYOUT, REVERSE_LAYOUT, DOMAIN_RECORD_LAYOUT]
}

/// CRC-32C of one 4 KiB block, seeded with the file block it belongs to.
pub fn block_crc(ino: InodeNo, block: FileBlock, data: &[u8]) -> u32 {
    let mut seed = [0u8; 16];
    seed[..8].copy_from_slice(&ino.0.to_le_bytes());
    seed[8..].copy_from_slice(&block.0.to_le_bytes());
    crc32c_append(crc32c(&seed), data)
}

fn bad(what: &str, expected: impl std::fmt::Display, got: impl std::fmt::Display) -> EngineError {
    EngineError::Corruption(Corruption::new(
        what,
        "engine records in MetaDB",
        expected,
        got,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_numerically_and_round_trip() {
        let a = mapping_key(InodeNo(1), FileBlock(255));
        let b = mapping_key(InodeNo(1), FileBlock(256));
        let c = mapping_key(InodeNo(2), FileBlock(0));
        assert!(a < b && b < c);
        assert!(a.starts_with(&mapping_prefix(InodeNo(1))));
        assert_eq!(parse_mapping_key(&b).unwrap(), (InodeNo(1), FileBlock(256)));
        let r = reverse_key(SegmentNo(7), 511);
        assert!(r.starts_with(&reverse_prefix(SegmentNo(7))));
        assert_eq!(parse_reverse_key(&r).unwrap(), (SegmentNo(7), 511));
        assert!(seginfo_key(DomainId(2), SegmentNo(1)).starts_with(&seginfo_prefix(DomainId(2))));
    }

    #[test]
    fn values_round_trip_and_bad_bytes_are_corruption() {
        let m = Mapping {
            addr: BlockAddr(123_456),
            crc: 0xdead_beef,
            write_seq: 42,
        };
        assert_eq!(Mapping::decode(&m.encode()).unwrap(), m);
        assert!(Mapping::decode(&[0; 3]).is_err());
        let r = Reverse {
            ino: InodeNo(9),
            block: FileBlock(10),
        };
        assert_eq!(Reverse::decode(&r.encode()).unwrap(), r);
        let d = DomainRecord {
            durable_seq: 5,
            issued_seq: 8,
            elapsed_ns: 1,
        };
        assert_eq!(DomainRecord::decode(&d.encode()).unwrap(), d);
        let backwards = DomainRecord {
            durable_seq: 9,
            ..d
        };
        assert!(DomainRecord::decode(&backwards.encode()).is_err());
        for l in layouts() {
            l.check_contiguous().unwrap();
        }
    }

    #[test]
    fn block_crc_names_the_block() {
        let data = vec![7u8; 4096];
        let a = block_crc(InodeNo(1), FileBlock(0), &data);
        assert_ne!(a, block_crc(InodeNo(1), FileBlock(1), &data));
        assert_ne!(a, block_crc(InodeNo(2), FileBlock(0), &data));
        assert_eq!(a, block_crc(InodeNo(1), FileBlock(0), &data));
    }
}
