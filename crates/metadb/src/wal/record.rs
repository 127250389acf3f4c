//! Byte layouts of the WAL's structures on the device and on the PMR (docs/FORMAT.md §5,
//! "WAL"): the WAL region header, chunk headers and records (device), entries and slots
//! (PMR). Pure encoders and decoders; no IO.
//!
//! Invariants:
//! - Integers are little-endian; every structure carries a CRC-32C, and a decoder returns
//!   `None` for anything that does not check out, so garbage, torn bytes and stale data
//!   from an earlier use of the space are never mistaken for a structure.
//! - A record names the CRC of the chunk header it lives under (`chunk_crc`): a record left
//!   in a chunk by an earlier use of the space (another incarnation, generation or lane)
//!   does not check out under the chunk's new header.
//! - A record's or entry's `lane_durable` never exceeds its `lane_seq`; the first forms
//!   (`WR` records, `WTXB` entries, without it) are still decoded, as carrying none.
//! - A PMR entry is 64-byte aligned and a multiple of 64 bytes: TxB in its first 8 bytes,
//!   TxE (CRC + magic) in its last 8, so it is complete only if both ends and everything
//!   between landed.

use format::constants::{KIB, PMR_LINE_BYTES, SECTOR_SIZE_BYTES};
use format::layout::{Field, StructLayout};

/// Largest payload `append` accepts: a bigger batch is a caller bug (MetaDB splits or
/// refuses it). Chosen so that an entry fits in half the data area of the smallest PMR.
pub const PAYLOAD_BYTES_MAX: usize = 512 * KIB as usize;

/// Allocation unit of the device WAL region; a chunk is one or more units.
pub(super) const UNIT_BYTES: u64 = 64 * KIB;
/// Records of a chunk start after its header sector.
pub(super) const CHUNK_DATA_OFFSET: usize = SECTOR_SIZE_BYTES as usize;
/// Region header copy `c` starts at byte `c * REGION_HEADER_COPY_STRIDE` of unit 0, so
/// writing one copy (even as a 4 KiB logical block) never touches the other.
pub(super) const REGION_HEADER_COPY_STRIDE: u64 = 4 * KIB;

/// Every WAL structure with a byte table in docs/FORMAT.md, for a doc test.
pub fn layouts() -> Vec<StructLayout> {
    vec![
        REGION_HEADER_LAYOUT,
        CHUNK_HEADER_LAYOUT,
        RECORD_HEADER_LAYOUT,
        ENTRY_HEADER_LAYOUT,
        ENTRY_TRAILER_LAYOUT,
    ]
}

// ---------------------------------------------------------------------------------------
// WAL region header: unit 0 of the region holds two copies.

pub(super) const REGION_MAGIC: [u8; 8] = *b"AUGEWALH";
const RH_MAGIC: Field = Field::at("magic", 0, 8);
const RH_COPY_INDEX: Field = Field::after(RH_MAGIC, "copy_index", 4);
const RH_UNIT_BYTES: Field = Field::after(RH_COPY_INDEX, "unit_bytes", 4);
const RH_INCARNATION: Field = Field::after(RH_UNIT_BYTES, "incarnation", 8);
const RH_START_BLOCK: Field = Field::after(RH_INCARNATION, "region_start_block", 8);
const RH_BLOCK_COUNT: Field = Field::after(RH_START_BLOCK, "region_block_count", 8);
const RH_RESERVED: Field = Field::after(RH_BLOCK_COUNT, "reserved", 20);
const RH_CRC: Field = Field::after(RH_RESERVED, "crc", 4);
pub(super) const REGION_HEADER_BYTES: usize = 64;
pub const REGION_HEADER_LAYOUT: StructLayout = StructLayout {
    name: "WAL region header",
    size: REGION_HEADER_BYTES,
    fields: &[
        RH_MAGIC,
        RH_COPY_INDEX,
        RH_UNIT_BYTES,
        RH_INCARNATION,
        RH_START_BLOCK,
        RH_BLOCK_COUNT,
        RH_RESERVED,
        RH_CRC,
    ],
};
const _: () = assert!(RH_CRC.end() == REGION_HEADER_BYTES);

/// The WAL region header: which incarnation (open of the WAL) wrote last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RegionHeader {
    pub copy_index: u32,
    pub incarnation: u64,
    pub region_start_block: u64,
    pub region_block_count: u64,
}

impl RegionHeader {
    pub fn encode(&self, out: &mut [u8]) {
        let buf = &mut out[..REGION_HEADER_BYTES];
        buf.fill(0);
        RH_MAGIC.put_bytes(buf, &REGION_MAGIC);
        RH_COPY_INDEX.put_u32(buf, self.copy_index);
        RH_UNIT_BYTES.put_u32(buf, UNIT_BYTES as u32);
        RH_INCARNATION.put_u64(buf, self.incarnation);
        RH_START_BLOCK.put_u64(buf, self.region_start_block);
        RH_BLOCK_COUNT.put_u64(buf, self.region_block_count);
        RH_CRC.put_u32(buf, crc32c::crc32c(&buf[..RH_CRC.offset]));
    }

    /// The header in `buf`, if it is one (magic, CRC and unit size check out).
    pub fn decode(buf: &[u8]) -> Option<RegionHeader> {
        let buf = buf.get(..REGION_HEADER_BYTES)?;
        if RH_MAGIC.bytes(buf) != REGION_MAGIC
            || RH_CRC.get_u32(buf) != crc32c::crc32c(&buf[..RH_CRC.offset])
            || u64::from(RH_UNIT_BYTES.get_u32(buf)) != UNIT_BYTES
        {
            return None;
        }
        Some(RegionHeader {
            copy_index: RH_COPY_INDEX.get_u32(buf),
            incarnation: RH_INCARNATION.get_u64(buf),
            region_start_block: RH_START_BLOCK.get_u64(buf),
            region_block_count: RH_BLOCK_COUNT.get_u64(buf),
        })
    }
}

// ---------------------------------------------------------------------------------------
// Chunk header: the first 64 bytes of a chunk's first sector (the rest of it is zero).

pub(super) const CHUNK_MAGIC: [u8; 8] = *b"AUGEWALC";
const CH_MAGIC: Field = Field::at("magic", 0, 8);
const CH_INCARNATION: Field = Field::after(CH_MAGIC, "incarnation", 8);
const CH_GENERATION: Field = Field::after(CH_INCARNATION, "generation", 8);
const CH_LANE: Field = Field::after(CH_GENERATION, "lane", 2);
const CH_KIND: Field = Field::after(CH_LANE, "kind", 1);
const CH_PAD: Field = Field::after(CH_KIND, "pad", 1);
const CH_UNIT_INDEX: Field = Field::after(CH_PAD, "unit_index", 4);
const CH_UNIT_COUNT: Field = Field::after(CH_UNIT_INDEX, "unit_count", 4);
const CH_RESERVED: Field = Field::after(CH_UNIT_COUNT, "reserved", 24);
const CH_CRC: Field = Field::after(CH_RESERVED, "crc", 4);
pub(super) const CHUNK_HEADER_BYTES: usize = 64;
pub const CHUNK_HEADER_LAYOUT: StructLayout = StructLayout {
    name: "WAL chunk header",
    size: CHUNK_HEADER_BYTES,
    fields: &[
        CH_MAGIC,
        CH_INCARNATION,
        CH_GENERATION,
        CH_LANE,
        CH_KIND,
        CH_PAD,
        CH_UNIT_INDEX,
        CH_UNIT_COUNT,
        CH_RESERVED,
        CH_CRC,
    ],
};
const _: () = assert!(CH_CRC.end() == CHUNK_HEADER_BYTES);
const _: () = assert!(CHUNK_HEADER_BYTES <= CHUNK_DATA_OFFSET);

/// Who wrote a chunk. On-disk values: forever.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum ChunkKind {
    /// A lane's log in ssd mode.
    Lane = 1,
    /// Entries migrated from a full PMR half (PMR mode).
    Migrated = 2,
}

impl ChunkKind {
    fn from_u8(v: u8) -> Option<ChunkKind> {
        match v {
            1 => Some(ChunkKind::Lane),
            2 => Some(ChunkKind::Migrated),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ChunkHeader {
    pub incarnation: u64,
    pub generation: u64,
    pub lane: u16,
    pub kind: ChunkKind,
    /// The chunk's first unit (unit 0 is the region header): catches misdirected writes.
    pub unit_index: u32,
    pub unit_count: u32,
}

impl ChunkHeader {
    /// Writes the header into `out[..64]` and returns its CRC (which records name).
    pub fn encode(&self, out: &mut [u8]) -> u32 {
        let buf = &mut out[..CHUNK_HEADER_BYTES];
        buf.fill(0);
        CH_MAGIC.put_bytes(buf, &CHUNK_MAGIC);
        CH_INCARNATION.put_u64(buf, self.incarnation);
        CH_GENERATION.put_u64(buf, self.generation);
        CH_LANE.put_u16(buf, self.lane);
        CH_KIND.put_u8(buf, self.kind as u8);
        CH_UNIT_INDEX.put_u32(buf, self.unit_index);
        CH_UNIT_COUNT.put_u32(buf, self.unit_count);
        let crc = crc32c::crc32c(&buf[..CH_CRC.offset]);
        CH_CRC.put_u32(buf, crc);
        crc
    }

    /// The header in `buf` and its CRC, if it is one.
    pub fn decode(buf: &[u8]) -> Option<(ChunkHeader, u32)> {
        let buf = buf.get(..CHUNK_HEADER_BYTES)?;
        let crc = CH_CRC.get_u32(buf);
        if CH_MAGIC.bytes(buf) != CHUNK_MAGIC || crc != crc32c::crc32c(&buf[..CH_CRC.offset]) {
            return None;
        }
        let header = ChunkHeader {
            incarnation: CH_INCARNATION.get_u64(buf),
            generation: CH_GENERATION.get_u64(buf),
            lane: CH_LANE.get_u16(buf),
            kind: ChunkKind::from_u8(CH_KIND.get_u8(buf))?,
            unit_index: CH_UNIT_INDEX.get_u32(buf),
            unit_count: CH_UNIT_COUNT.get_u32(buf),
        };
        Some((header, crc))
    }
}

// ---------------------------------------------------------------------------------------
// Record: packed byte-contiguously after a chunk's header sector.

/// The first form of a record: a 32-byte header without `lane_durable` (still read).
pub(super) const RECORD_MAGIC_V1: u16 = 0x5257; // "WR"
/// A record whose header carries `lane_durable` (40 bytes): the form written now.
pub(super) const RECORD_MAGIC: u16 = 0x4457; // "WD"
const R_CRC: Field = Field::at("crc", 0, 4);
const R_MAGIC: Field = Field::after(R_CRC, "magic", 2);
const R_LANE: Field = Field::after(R_MAGIC, "lane", 2);
const R_PAYLOAD_LEN: Field = Field::after(R_LANE, "payload_len", 4);
const R_CHUNK_CRC: Field = Field::after(R_PAYLOAD_LEN, "chunk_crc", 4);
const R_GENERATION: Field = Field::after(R_CHUNK_CRC, "generation", 8);
const R_LANE_SEQ: Field = Field::after(R_GENERATION, "lane_seq", 8);
const R_LANE_DURABLE: Field = Field::after(R_LANE_SEQ, "lane_durable", 8);
/// Header of a first-form (`WR`) record.
const RECORD_HEADER_BYTES_V1: usize = 32;
pub(super) const RECORD_HEADER_BYTES: usize = 40;
pub const RECORD_HEADER_LAYOUT: StructLayout = StructLayout {
    name: "WAL record header",
    size: RECORD_HEADER_BYTES,
    fields: &[
        R_CRC,
        R_MAGIC,
        R_LANE,
        R_PAYLOAD_LEN,
        R_CHUNK_CRC,
        R_GENERATION,
        R_LANE_SEQ,
        R_LANE_DURABLE,
    ],
};
const _: () = assert!(R_LANE_SEQ.end() == RECORD_HEADER_BYTES_V1);
const _: () = assert!(R_LANE_DURABLE.end() == RECORD_HEADER_BYTES);

/// Identity of a record: where it belongs, and what its lane had made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RecordId {
    pub generation: u64,
    pub lane: u16,
    pub lane_seq: u64,
    /// Records `0..durable` of (generation, lane) were durable (covered by a completed
    /// device flush or PMR persist) when this one was appended: if any of them is
    /// missing while this one is intact, the log is damaged (docs/FORMAT.md §5.2).
    /// 0 for records of the first form.
    pub durable: u64,
}

/// Bytes a record with a payload of `payload_len` bytes takes in a chunk.
pub(super) fn record_bytes(payload_len: usize) -> usize {
    RECORD_HEADER_BYTES + payload_len
}

/// Appends the record to `out` (a chunk buffer, at its fill point).
pub(super) fn encode_record(out: &mut [u8], id: RecordId, chunk_crc: u32, payload: &[u8]) {
    assert!(payload.len() <= PAYLOAD_BYTES_MAX);
    let total = record_bytes(payload.len());
    let buf = &mut out[..total];
    R_MAGIC.put_u16(buf, RECORD_MAGIC);
    R_LANE.put_u16(buf, id.lane);
    R_PAYLOAD_LEN.put_u32(buf, payload.len() as u32);
    R_CHUNK_CRC.put_u32(buf, chunk_crc);
    R_GENERATION.put_u64(buf, id.generation);
    R_LANE_SEQ.put_u64(buf, id.lane_seq);
    assert!(
        id.durable <= id.lane_seq,
        "a record cannot be durable before it is written"
    );
    R_LANE_DURABLE.put_u64(buf, id.durable);
    buf[RECORD_HEADER_BYTES..].copy_from_slice(payload);
    let crc = crc32c::crc32c(&buf[R_CRC.end()..]);
    R_CRC.put_u32(buf, crc);
}

/// The record at the start of `buf` if it is a complete record of the chunk whose header
/// is `chunk` with CRC `chunk_crc`: (identity, payload range in `buf`, bytes taken).
pub(super) fn decode_record(
    buf: &[u8],
    chunk: &ChunkHeader,
    chunk_crc: u32,
) -> Option<(RecordId, std::ops::Range<usize>, usize)> {
    let head = buf.get(..RECORD_HEADER_BYTES_V1)?;
    let header_bytes = match R_MAGIC.get_u16(head) {
        RECORD_MAGIC => RECORD_HEADER_BYTES,
        RECORD_MAGIC_V1 => RECORD_HEADER_BYTES_V1,
        _ => return None,
    };
    if R_CHUNK_CRC.get_u32(head) != chunk_crc {
        return None;
    }
    let payload_len = R_PAYLOAD_LEN.get_u32(head) as usize;
    if payload_len > PAYLOAD_BYTES_MAX {
        return None;
    }
    let total = header_bytes + payload_len;
    let whole = buf.get(..total)?;
    if R_CRC.get_u32(whole) != crc32c::crc32c(&whole[R_CRC.end()..]) {
        return None;
    }
    let id = RecordId {
        generation: R_GENERATION.get_u64(head),
        lane: R_LANE.get_u16(head),
        lane_seq: R_LANE_SEQ.get_u64(head),
        durable: if header_bytes == RECORD_HEADER_BYTES {
            R_LANE_DURABLE.get_u64(whole)
        } else {
            0
        },
    };
    if id.generation != chunk.generation || id.lane != chunk.lane || id.durable > id.lane_seq {
        return None;
    }
    Some((id, header_bytes..total, total))
}

// ---------------------------------------------------------------------------------------
// PMR entry: TxB | content | padding | TxE, 64-byte aligned (augefs.txt §V-B).

/// An entry of the first form: a 32-byte header without `lane_durable` (still read).
pub(super) const TXB_MAGIC_V1: u32 = u32::from_le_bytes(*b"WTXB");
/// An entry whose header carries `lane_durable` (40 bytes): the form written now.
pub(super) const TXB_MAGIC: u32 = u32::from_le_bytes(*b"WTXD");
pub(super) const TXE_MAGIC: u32 = u32::from_le_bytes(*b"WTXE");
const E_TXB_MAGIC: Field = Field::at("txb_magic", 0, 4);
const E_ENTRY_BYTES: Field = Field::after(E_TXB_MAGIC, "entry_bytes", 4);
const E_GENERATION: Field = Field::after(E_ENTRY_BYTES, "generation", 8);
const E_LANE_SEQ: Field = Field::after(E_GENERATION, "lane_seq", 8);
const E_LANE: Field = Field::after(E_LANE_SEQ, "lane", 2);
const E_RESERVED: Field = Field::after(E_LANE, "reserved", 2);
const E_PAYLOAD_LEN: Field = Field::after(E_RESERVED, "payload_len", 4);
const E_LANE_DURABLE: Field = Field::after(E_PAYLOAD_LEN, "lane_durable", 8);
const ENTRY_HEADER_BYTES_V1: usize = 32;
pub(super) const ENTRY_HEADER_BYTES: usize = 40;
/// TxE: the entry's last 8 bytes.
const T_CRC: Field = Field::at("crc", 0, 4);
const T_TXE_MAGIC: Field = Field::after(T_CRC, "txe_magic", 4);
pub(super) const ENTRY_TRAILER_BYTES: usize = 8;
pub const ENTRY_HEADER_LAYOUT: StructLayout = StructLayout {
    name: "PMR WAL entry header",
    size: ENTRY_HEADER_BYTES,
    fields: &[
        E_TXB_MAGIC,
        E_ENTRY_BYTES,
        E_GENERATION,
        E_LANE_SEQ,
        E_LANE,
        E_RESERVED,
        E_PAYLOAD_LEN,
        E_LANE_DURABLE,
    ],
};
pub const ENTRY_TRAILER_LAYOUT: StructLayout = StructLayout {
    name: "PMR WAL entry trailer",
    size: ENTRY_TRAILER_BYTES,
    fields: &[T_CRC, T_TXE_MAGIC],
};
const _: () = assert!(E_PAYLOAD_LEN.end() == ENTRY_HEADER_BYTES_V1);
const _: () = assert!(E_LANE_DURABLE.end() == ENTRY_HEADER_BYTES);
const _: () = assert!(T_TXE_MAGIC.end() == ENTRY_TRAILER_BYTES);
pub(super) const ENTRY_ALIGN_BYTES: usize = PMR_LINE_BYTES as usize;

/// Bytes an entry with `payload_len` bytes of payload takes (a multiple of 64).
pub(super) fn entry_bytes(payload_len: usize) -> usize {
    (ENTRY_HEADER_BYTES + payload_len + ENTRY_TRAILER_BYTES).div_ceil(ENTRY_ALIGN_BYTES)
        * ENTRY_ALIGN_BYTES
}

/// Encodes an entry into `out` (cleared first; `entry_bytes(payload.len())` long after).
pub(super) fn encode_entry(out: &mut Vec<u8>, id: RecordId, payload: &[u8]) {
    assert!(payload.len() <= PAYLOAD_BYTES_MAX);
    let total = entry_bytes(payload.len());
    out.clear();
    out.resize(total, 0);
    E_TXB_MAGIC.put_u32(out, TXB_MAGIC);
    E_ENTRY_BYTES.put_u32(out, total as u32);
    E_GENERATION.put_u64(out, id.generation);
    E_LANE_SEQ.put_u64(out, id.lane_seq);
    E_LANE.put_u16(out, id.lane);
    E_PAYLOAD_LEN.put_u32(out, payload.len() as u32);
    assert!(
        id.durable <= id.lane_seq,
        "an entry cannot be durable before it is written"
    );
    E_LANE_DURABLE.put_u64(out, id.durable);
    out[ENTRY_HEADER_BYTES..ENTRY_HEADER_BYTES + payload.len()].copy_from_slice(payload);
    let body = total - ENTRY_TRAILER_BYTES;
    let crc = crc32c::crc32c(&out[..body]);
    T_CRC.put_u32(&mut out[body..], crc);
    T_TXE_MAGIC.put_u32(&mut out[body..], TXE_MAGIC);
}

/// The length an entry's TxB at the start of `buf` announces, if it looks like a TxB.
pub(super) fn entry_txb(buf: &[u8]) -> Option<usize> {
    let head = buf.get(..8)?;
    if !matches!(E_TXB_MAGIC.get_u32(head), TXB_MAGIC | TXB_MAGIC_V1) {
        return None;
    }
    let total = E_ENTRY_BYTES.get_u32(head) as usize;
    let plausible = total >= ENTRY_ALIGN_BYTES
        && total % ENTRY_ALIGN_BYTES == 0
        && total <= entry_bytes(PAYLOAD_BYTES_MAX);
    plausible.then_some(total)
}

/// The complete entry at the start of `buf` (TxB, TxE and CRC check out): its identity
/// and payload range.
pub(super) fn decode_entry(buf: &[u8]) -> Option<(RecordId, std::ops::Range<usize>)> {
    let total = entry_txb(buf)?;
    let whole = buf.get(..total)?;
    let body = total - ENTRY_TRAILER_BYTES;
    let trailer = &whole[body..];
    if T_TXE_MAGIC.get_u32(trailer) != TXE_MAGIC
        || T_CRC.get_u32(trailer) != crc32c::crc32c(&whole[..body])
    {
        return None;
    }
    let header_bytes = if E_TXB_MAGIC.get_u32(whole) == TXB_MAGIC {
        ENTRY_HEADER_BYTES
    } else {
        ENTRY_HEADER_BYTES_V1
    };
    let payload_len = E_PAYLOAD_LEN.get_u32(whole) as usize;
    if header_bytes + payload_len > body {
        return None;
    }
    let id = RecordId {
        generation: E_GENERATION.get_u64(whole),
        lane: E_LANE.get_u16(whole),
        lane_seq: E_LANE_SEQ.get_u64(whole),
        durable: if header_bytes == ENTRY_HEADER_BYTES {
            E_LANE_DURABLE.get_u64(whole)
        } else {
            0
        },
    };
    if id.durable > id.lane_seq {
        return None;
    }
    Some((id, header_bytes..header_bytes + payload_len))
}

// ---------------------------------------------------------------------------------------
// PMR slot: one 8-byte word per WAL "file" segment (docs/FORMAT.md §7).

const SLOT_VALID: u64 = 1 << 63;
const SLOT_ACTIVE: u64 = 1 << 31;
const SLOT_OFFSET_MASK: u64 = (1 << 31) - 1;
/// PMR byte offsets in a slot have 31 bits.
pub(super) const SLOT_OFFSET_LIMIT: u64 = 1 << 31;

/// A decoded valid slot: the byte range `[start, end)` of the PMR one segment of one
/// generation occupies; an active slot's end is not recorded (0 on the PMR).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Slot {
    pub start: u64,
    pub end: Option<u64>,
}

impl Slot {
    pub fn encode(&self) -> u64 {
        assert!(self.start < SLOT_OFFSET_LIMIT && self.start > 0);
        let end = match self.end {
            Some(end) => {
                assert!(end >= self.start && end < SLOT_OFFSET_LIMIT);
                end
            }
            None => 0,
        };
        SLOT_VALID | self.start << 32 | if self.end.is_none() { SLOT_ACTIVE } else { 0 } | end
    }

    /// `None` for an invalid (free) slot.
    pub fn decode(word: u64) -> Option<Slot> {
        if word & SLOT_VALID == 0 {
            return None;
        }
        let start = word >> 32 & SLOT_OFFSET_MASK;
        let end = if word & SLOT_ACTIVE != 0 {
            None
        } else {
            Some(word & SLOT_OFFSET_MASK)
        };
        Some(Slot { start, end })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_are_contiguous() {
        for layout in layouts() {
            layout.check_contiguous().unwrap();
        }
    }

    fn chunk() -> (ChunkHeader, u32, Vec<u8>) {
        let header = ChunkHeader {
            incarnation: 3,
            generation: 7,
            lane: 2,
            kind: ChunkKind::Lane,
            unit_index: 5,
            unit_count: 1,
        };
        let mut buf = vec![0u8; UNIT_BYTES as usize];
        let crc = header.encode(&mut buf);
        (header, crc, buf)
    }

    #[test]
    fn region_header_round_trip_and_rejects_damage() {
        let h = RegionHeader {
            copy_index: 1,
            incarnation: 9,
            region_start_block: 1536,
            region_block_count: 2048,
        };
        let mut buf = [0u8; 512];
        h.encode(&mut buf);
        assert_eq!(RegionHeader::decode(&buf), Some(h));
        for i in 0..REGION_HEADER_BYTES {
            let mut bad = buf;
            bad[i] ^= 0x10;
            assert_eq!(RegionHeader::decode(&bad), None, "byte {i}");
        }
        assert_eq!(RegionHeader::decode(&[0u8; 512]), None);
    }

    #[test]
    fn chunk_header_round_trip() {
        let (header, crc, buf) = chunk();
        assert_eq!(ChunkHeader::decode(&buf), Some((header, crc)));
        let mut bad = buf.clone();
        bad[20] ^= 1;
        assert_eq!(ChunkHeader::decode(&bad), None);
        assert_eq!(ChunkHeader::decode(&[0u8; 64]), None);
    }

    #[test]
    fn record_round_trip_and_binding_to_its_chunk() {
        let (header, crc, mut buf) = chunk();
        let id = RecordId {
            generation: 7,
            lane: 2,
            lane_seq: 11,
            durable: 9,
        };
        let payload = b"hello wal";
        let at = CHUNK_DATA_OFFSET;
        encode_record(&mut buf[at..], id, crc, payload);
        let (got, range, len) = decode_record(&buf[at..], &header, crc).unwrap();
        assert_eq!(got, id);
        assert_eq!(&buf[at + range.start..at + range.end], payload);
        assert_eq!(len, record_bytes(payload.len()));
        // Under another chunk header (another incarnation), the record is stale.
        let other = ChunkHeader {
            incarnation: 4,
            ..header
        };
        let other_crc = other.encode(&mut [0u8; 64]);
        assert!(decode_record(&buf[at..], &other, other_crc).is_none());
        // Every truncation or flipped byte is rejected.
        for cut in 0..len {
            assert!(
                decode_record(&buf[at..at + cut], &header, crc).is_none(),
                "cut {cut}"
            );
        }
        for i in 0..len {
            let mut bad = buf.clone();
            bad[at + i] ^= 0x40;
            assert!(
                decode_record(&bad[at..], &header, crc).is_none(),
                "byte {i}"
            );
        }
        assert!(decode_record(&[0u8; 64], &header, crc).is_none());
    }

    #[test]
    fn entry_round_trip_sizes_and_torn_entries() {
        assert_eq!(entry_bytes(0), 64);
        assert_eq!(entry_bytes(16), 64);
        assert_eq!(entry_bytes(17), 128);
        let id = RecordId {
            generation: 4,
            lane: 1,
            lane_seq: 0,
            durable: 0,
        };
        let payload: Vec<u8> = (0..200u8).collect();
        let mut out = Vec::new();
        encode_entry(&mut out, id, &payload);
        assert_eq!(out.len(), entry_bytes(200));
        assert_eq!(entry_txb(&out), Some(out.len()));
        let (got, range) = decode_entry(&out).unwrap();
        assert_eq!(got, id);
        assert_eq!(&out[range], &payload[..]);
        // A line that did not land (zero) anywhere in the entry makes it incomplete.
        for line in 0..out.len() / 64 {
            let mut torn = out.clone();
            torn[line * 64..line * 64 + 64].fill(0);
            assert!(decode_entry(&torn).is_none(), "line {line}");
        }
        assert!(decode_entry(&out[..out.len() - 1]).is_none());
        assert!(entry_txb(&[0u8; 64]).is_none());
    }

    #[test]
    fn slot_encoding_matches_format_md() {
        let active = Slot {
            start: 8192,
            end: None,
        };
        let w = active.encode();
        assert_eq!(w, 1 << 63 | 8192 << 32 | 1 << 31);
        assert_eq!(Slot::decode(w), Some(active));
        let closed = Slot {
            start: 8192,
            end: Some(12288),
        };
        assert_eq!(closed.encode(), 1 << 63 | 8192 << 32 | 12288);
        assert_eq!(Slot::decode(closed.encode()), Some(closed));
        assert_eq!(Slot::decode(0), None);
    }
}
