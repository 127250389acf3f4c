//! The engine's records in MetaDB (docs/FORMAT.md §6.2): the block index, its reverse
//! map, the segment information table and each domain's write state. Keys are big-endian
//! so that MetaDB's byte order is numeric order (a file's blocks are adjacent, a domain's
//! segments are adjacent); values are little-endian field tables like every other
//! on-disk structure.
//!
//! | key | bytes | value |
//! |---|---|---|
//! | `x` ino block | 17 | [`Mapping`]: where a file block lives, its data CRC, its write |
//! | `e` ino last | 17 | [`Extent`]: where a run of file blocks lives, one CRC per block |
//! | `r` segment block | 7 | [`Reverse`]: which file block a device block was written for |
//! | `q` segment block | 7 | [`ReverseExtent`]: which file blocks a device run was written for |
//! | `s` domain segment | 7 | one segment information entry (FORMAT.md §6.1) |
//! | `d` domain | 3 | [`DomainRecord`]: the domain's durable-data watermark |
//!
//! Invariants:
//! - A file block is mapped by its `x` record if it has one, else by the `e` record
//!   covering it, else it is a hole: an `x` record *shadows* an extent (a small overwrite
//!   inside an extent costs one `x` record, not a rewrite of the extent's CRCs). The
//!   extents of a file never overlap; the extent's claim on a shadowed block is stale
//!   and names an address that may since belong to someone else.
//! - Reverse records (`r`, `q`) are hints: the device block's owner is the candidate whose
//!   forward mapping names the address (stale ones from an earlier life of the segment
//!   remain until overwritten).
//! - Decoding never panics on bad bytes: a wrong length or field is typed corruption.
//! - Every data CRC is seeded with the file block's identity (inode, block), so stale
//!   contents at an address (a reused segment, a lost write) never verify as the block.

use crate::error::EngineError;
use format::checksum::{crc32c, crc32c_append};
use format::layout::{Field, StructLayout};
use format::{BlockAddr, Corruption, DomainId, InodeNo, SegmentNo};

pub const MAPPING_TAG: u8 = b'x';
pub const REVERSE_TAG: u8 = b'r';
pub const EXTENT_TAG: u8 = b'e';
pub const REVERSE_EXTENT_TAG: u8 = b'q';

/// The fewest blocks a write maps by one extent (fewer get `x` records): two blocks
/// already cost less as an extent, but a short extent overwritten in part leaves a stale
/// claim behind, so runs start at 32 KiB.
pub const EXTENT_MIN_BLOCKS: u64 = 8;
/// The most blocks of one extent (1 MiB; its value is then at most 4,116 bytes).
pub const EXTENT_MAX_BLOCKS: u64 = 256;
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

/// The key of the extent of `ino` whose last block is `last` (keyed by the last block, so
/// the extent covering block `b`, if any, is the first at or after `extent_key(ino, b)`).
pub fn extent_key(ino: InodeNo, last: FileBlock) -> [u8; 17] {
    let mut k = mapping_key(ino, last);
    k[0] = EXTENT_TAG;
    k
}

/// The prefix of every extent key of `ino`.
pub fn extent_prefix(ino: InodeNo) -> [u8; 9] {
    let mut k = mapping_prefix(ino);
    k[0] = EXTENT_TAG;
    k
}

/// (inode, last block) of an extent key.
pub fn parse_extent_key(key: &[u8]) -> Result<(InodeNo, FileBlock), EngineError> {
    if key.len() != 17 || key[0] != EXTENT_TAG {
        return Err(bad("extent key", "17 bytes starting with e", key.len()));
    }
    let mut k = [0u8; 17];
    k.copy_from_slice(key);
    k[0] = MAPPING_TAG;
    parse_mapping_key(&k)
}

/// The inode whose block index `key` belongs to, if it is an `x` or `e` key.
pub fn index_key_inode(key: &[u8]) -> Option<InodeNo> {
    match key.first() {
        Some(&MAPPING_TAG) | Some(&EXTENT_TAG) if key.len() == 17 => Some(InodeNo(
            u64::from_be_bytes(key[1..9].try_into().expect("8 bytes")),
        )),
        _ => None,
    }
}

pub fn reverse_extent_key(segment: SegmentNo, block: u16) -> [u8; 7] {
    let mut k = reverse_key(segment, block);
    k[0] = REVERSE_EXTENT_TAG;
    k
}

pub fn reverse_extent_prefix(segment: SegmentNo) -> [u8; 5] {
    let mut k = reverse_prefix(segment);
    k[0] = REVERSE_EXTENT_TAG;
    k
}

pub fn parse_reverse_extent_key(key: &[u8]) -> Result<(SegmentNo, u16), EngineError> {
    if key.len() != 7 || key[0] != REVERSE_EXTENT_TAG {
        return Err(bad(
            "reverse-extent key",
            "7 bytes starting with q",
            key.len(),
        ));
    }
    let mut k = [0u8; 7];
    k.copy_from_slice(key);
    k[0] = REVERSE_TAG;
    parse_reverse_key(&k)
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

/// Where a run of file blocks lives: blocks `first..first + crcs.len()` of a file at
/// consecutive device addresses from `addr`, all written by one write (or GC move).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extent {
    pub first: FileBlock,
    pub addr: BlockAddr,
    pub write_seq: u64,
    /// [`block_crc`] of each block, in file order.
    pub crcs: Vec<u32>,
}

pub const E_ADDR: Field = Field::at("addr", 0, 8);
pub const E_SEQ: Field = Field::after(E_ADDR, "write_seq", 8);
pub const E_COUNT: Field = Field::after(E_SEQ, "count", 4);
pub const EXTENT_HEADER_BYTES: usize = 20;
pub const EXTENT_LAYOUT: StructLayout = StructLayout {
    name: "Extent value",
    size: EXTENT_HEADER_BYTES,
    fields: &[E_ADDR, E_SEQ, E_COUNT],
};

impl Extent {
    pub fn count(&self) -> u64 {
        self.crcs.len() as u64
    }

    /// The last file block (the key's block).
    pub fn last(&self) -> FileBlock {
        FileBlock(self.first.0 + (self.count() - 1))
    }

    pub fn contains(&self, block: FileBlock) -> bool {
        block >= self.first && block <= self.last()
    }

    /// The mapping the extent gives `block` (which it must contain).
    pub fn mapping(&self, block: FileBlock) -> Mapping {
        assert!(self.contains(block), "block {block:?} outside {self:?}");
        let k = block.0 - self.first.0;
        Mapping {
            addr: BlockAddr(self.addr.0 + k),
            crc: self.crcs[k as usize],
            write_seq: self.write_seq,
        }
    }

    /// The part of the extent inside blocks `from..to`, if any.
    pub fn slice(&self, from: FileBlock, to: FileBlock) -> Option<Extent> {
        let lo = from.max(self.first).0;
        // An inclusive end: the last block may be u64::MAX, which has no successor.
        let hi = to.0.checked_sub(1)?.min(self.last().0);
        (lo <= hi).then(|| {
            let k = (lo - self.first.0) as usize;
            Extent {
                first: FileBlock(lo),
                addr: BlockAddr(self.addr.0 + k as u64),
                write_seq: self.write_seq,
                crcs: self.crcs[k..=k + (hi - lo) as usize].to_vec(),
            }
        })
    }

    pub fn key(&self, ino: InodeNo) -> [u8; 17] {
        extent_key(ino, self.last())
    }

    pub fn encode(&self) -> Vec<u8> {
        assert!(
            (1..=EXTENT_MAX_BLOCKS).contains(&self.count()),
            "extent of {} blocks",
            self.count()
        );
        let mut v = vec![0u8; EXTENT_HEADER_BYTES + 4 * self.crcs.len()];
        E_ADDR.put_u64(&mut v, self.addr.0);
        E_SEQ.put_u64(&mut v, self.write_seq);
        E_COUNT.put_u32(&mut v, self.crcs.len() as u32);
        for (i, crc) in self.crcs.iter().enumerate() {
            let at = EXTENT_HEADER_BYTES + 4 * i;
            v[at..at + 4].copy_from_slice(&crc.to_le_bytes());
        }
        v
    }

    /// Decodes the value of the extent whose key names `last`.
    pub fn decode(last: FileBlock, v: &[u8]) -> Result<Extent, EngineError> {
        if v.len() < EXTENT_HEADER_BYTES {
            return Err(bad("extent value length", "at least 20", v.len()));
        }
        let count = u64::from(E_COUNT.get_u32(v));
        // `count - 1 > last` rather than `count > last + 1`: `last` comes from the key's
        // bytes and may be u64::MAX.
        if !(1..=EXTENT_MAX_BLOCKS).contains(&count) || count - 1 > last.0 {
            return Err(bad(
                "extent count",
                format!("1..={EXTENT_MAX_BLOCKS}, at most last block + 1"),
                count,
            ));
        }
        let want = EXTENT_HEADER_BYTES + 4 * count as usize;
        if v.len() != want {
            return Err(bad("extent value length", want, v.len()));
        }
        // Every block of the run has an address (`mapping` and `slice` add to it).
        let addr = E_ADDR.get_u64(v);
        if addr.checked_add(count - 1).is_none() {
            return Err(bad(
                "extent address",
                format!("at most {}", u64::MAX - (count - 1)),
                addr,
            ));
        }
        Ok(Extent {
            first: FileBlock(last.0 - (count - 1)),
            addr: BlockAddr(E_ADDR.get_u64(v)),
            write_seq: E_SEQ.get_u64(v),
            crcs: v[EXTENT_HEADER_BYTES..]
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
                .collect(),
        })
    }
}

/// Which file blocks a run of device blocks was written for: blocks `block..block +
/// count` of the key's segment hold file blocks `file_block..` of `ino`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReverseExtent {
    pub ino: InodeNo,
    pub file_block: FileBlock,
    pub count: u32,
}

pub const Q_INO: Field = Field::at("ino", 0, 8);
pub const Q_BLOCK: Field = Field::after(Q_INO, "file_block", 8);
pub const Q_COUNT: Field = Field::after(Q_BLOCK, "count", 4);
pub const REVERSE_EXTENT_BYTES: usize = 20;
pub const REVERSE_EXTENT_LAYOUT: StructLayout = StructLayout {
    name: "Reverse extent value",
    size: REVERSE_EXTENT_BYTES,
    fields: &[Q_INO, Q_BLOCK, Q_COUNT],
};

impl ReverseExtent {
    pub fn encode(&self) -> [u8; REVERSE_EXTENT_BYTES] {
        let mut v = [0u8; REVERSE_EXTENT_BYTES];
        Q_INO.put_u64(&mut v, self.ino.0);
        Q_BLOCK.put_u64(&mut v, self.file_block.0);
        Q_COUNT.put_u32(&mut v, self.count);
        v
    }

    pub fn decode(v: &[u8]) -> Result<ReverseExtent, EngineError> {
        if v.len() != REVERSE_EXTENT_BYTES {
            return Err(bad(
                "reverse-extent value length",
                REVERSE_EXTENT_BYTES,
                v.len(),
            ));
        }
        let r = ReverseExtent {
            ino: InodeNo(Q_INO.get_u64(v)),
            file_block: FileBlock(Q_BLOCK.get_u64(v)),
            count: Q_COUNT.get_u32(v),
        };
        if r.count == 0 || u64::from(r.count) > EXTENT_MAX_BLOCKS {
            return Err(bad("reverse-extent count", "1..=256", r.count));
        }
        // The run's last file block must exist: `owner_of` adds up to count - 1.
        if r.file_block.0.checked_add(u64::from(r.count) - 1).is_none() {
            return Err(bad(
                "reverse-extent file block",
                format!("at most {}", u64::MAX - (u64::from(r.count) - 1)),
                r.file_block.0,
            ));
        }
        Ok(r)
    }

    /// The file block device block `block` (of the key's segment, starting at `start`)
    /// was written for, if the run covers it.
    pub fn owner_of(&self, start: u16, block: u16) -> Option<Reverse> {
        let k = u32::from(block.checked_sub(start)?);
        (k < self.count).then(|| Reverse {
            ino: self.ino,
            block: FileBlock(self.file_block.0 + u64::from(k)),
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
    vec![
        MAPPING_LAYOUT,
        EXTENT_LAYOUT,
        REVERSE_LAYOUT,
        REVERSE_EXTENT_LAYOUT,
        DOMAIN_RECORD_LAYOUT,
        super::global::GLOBAL_HEADER_LAYOUT,
        super::global::WAL_EXTENT_LAYOUT,
    ]
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
    fn extents_round_trip_slice_and_reject_bad_bytes() {
        let e = Extent {
            first: FileBlock(10),
            addr: BlockAddr(1000),
            write_seq: 7,
            crcs: (0..8).collect(),
        };
        assert_eq!(e.last(), FileBlock(17));
        let key = e.key(InodeNo(3));
        assert!(key.starts_with(&extent_prefix(InodeNo(3))));
        assert_eq!(parse_extent_key(&key).unwrap(), (InodeNo(3), FileBlock(17)));
        assert_eq!(Extent::decode(e.last(), &e.encode()).unwrap(), e);
        assert_eq!(
            e.mapping(FileBlock(12)),
            Mapping {
                addr: BlockAddr(1002),
                crc: 2,
                write_seq: 7
            }
        );
        let mid = e.slice(FileBlock(12), FileBlock(14)).unwrap();
        assert_eq!(
            (mid.first, mid.addr, mid.crcs.clone()),
            (FileBlock(12), BlockAddr(1002), vec![2, 3])
        );
        assert!(e.slice(FileBlock(18), FileBlock(30)).is_none());
        assert_eq!(e.slice(FileBlock(0), FileBlock(99)).unwrap(), e);
        // A count reaching below block 0, a wrong length, a zero count.
        assert!(Extent::decode(FileBlock(3), &e.encode()).is_err());
        assert!(Extent::decode(e.last(), &e.encode()[..30]).is_err());
        let mut zero = e.encode();
        E_COUNT.put_u32(&mut zero, 0);
        assert!(Extent::decode(e.last(), &zero[..20]).is_err());
        let q = ReverseExtent {
            ino: InodeNo(3),
            file_block: FileBlock(10),
            count: 8,
        };
        assert_eq!(ReverseExtent::decode(&q.encode()).unwrap(), q);
        assert_eq!(q.owner_of(4, 6).unwrap().block, FileBlock(12));
        assert!(q.owner_of(4, 12).is_none() && q.owner_of(4, 3).is_none());
        let rk = reverse_extent_key(SegmentNo(5), 4);
        assert!(rk.starts_with(&reverse_extent_prefix(SegmentNo(5))));
        assert_eq!(parse_reverse_extent_key(&rk).unwrap(), (SegmentNo(5), 4));
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
