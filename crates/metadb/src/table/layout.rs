//! The byte-level pieces every table structure shares (docs/FORMAT.md §5.3 Tables): size
//! limits, the 64-byte footer, block handles, LEB128 varints and table-bound checksums.
//!
//! A table is, in order: data blocks, the index block, the bloom block, zero padding, and
//! the footer in the last 64 bytes of its length (a multiple of 4096).
//!
//! Invariants:
//! - Every data, index and bloom block ends with a CRC-32C of the table id (8 bytes LE),
//!   the block's offset in the table (4 bytes LE), then the block's other bytes: a block
//!   left in a reused segment by an older table, or read from the wrong offset, never
//!   verifies.
//! - The footer's `checksum` is the CRC-32C of footer bytes 0..60; the footer names its
//!   table id, length and entry count, which must equal what the manifest recorded.
//! - Offsets inside a table fit in `u32` (a table is at most one 2 MiB segment).

use crate::error::MetaDbError;
use crate::table::TableId;
use format::constants::{BLOCK_SIZE_BYTES, SEGMENT_SIZE_BYTES};
use format::layout::{Field, StructLayout};

/// Version of the table format; stored in every footer.
pub const TABLE_FORMAT_VERSION: u32 = 1;
/// "AUGETBL" and a zero byte.
pub const TABLE_MAGIC: [u8; 8] = *b"AUGETBL\0";
/// A table's length is a multiple of this.
pub const TABLE_ALIGN_BYTES: usize = BLOCK_SIZE_BYTES as usize;
/// A table never exceeds one segment.
pub const TABLE_BYTES_MAX: usize = SEGMENT_SIZE_BYTES as usize;
pub const FOOTER_BYTES: usize = 64;

/// Longest user key a table accepts; callers reject longer keys before they reach MetaDB.
pub const USER_KEY_BYTES_MAX: usize = 4096;
/// Longest value a table accepts (a single entry must always fit in an empty table).
pub const VALUE_BYTES_MAX: usize = 1 << 20;

/// Data block trailer: `restart_count` (u32) then `crc` (u32).
pub const BLOCK_TRAILER_BYTES: usize = 8;
/// One restart offset (u32).
pub const RESTART_BYTES: usize = 4;
/// Index block trailer: `entry_count` (u32) then `crc` (u32).
pub const INDEX_TRAILER_BYTES: usize = 8;
/// Bloom block trailer: `probe_count` (u8), `hash_kind` (u8), reserved (2), `crc` (u32).
pub const BLOOM_TRAILER_BYTES: usize = 8;
/// Longest entry header: three varint32 (5 bytes each), a varint64 (10) and the kind byte.
pub const ENTRY_HEADER_BYTES_MAX: usize = 5 + 5 + 5 + 10 + 1;

pub const BLOCK_BYTES_TARGET_DEFAULT: usize = 4096;
pub const RESTART_INTERVAL_DEFAULT: usize = 16;
pub const BLOOM_BITS_PER_KEY_DEFAULT: u32 = 10;

// The largest entry, alone in a table with its index entry, bloom and footer, fits.
const _: () = assert!(
    ENTRY_HEADER_BYTES_MAX
        + USER_KEY_BYTES_MAX
        + VALUE_BYTES_MAX
        + RESTART_BYTES
        + BLOCK_TRAILER_BYTES
        + (USER_KEY_BYTES_MAX + 32)
        + INDEX_TRAILER_BYTES
        + 64
        + BLOOM_TRAILER_BYTES
        + FOOTER_BYTES
        + TABLE_ALIGN_BYTES
        <= TABLE_BYTES_MAX
);
const _: () = assert!(TABLE_BYTES_MAX % TABLE_ALIGN_BYTES == 0);
const _: () = assert!(TABLE_BYTES_MAX <= u32::MAX as usize, "offsets are u32");

pub const F_MAGIC: Field = Field::at("magic", 0, 8);
pub const F_FORMAT_VERSION: Field = Field::after(F_MAGIC, "format_version", 4);
pub const F_BLOCK_COUNT: Field = Field::after(F_FORMAT_VERSION, "block_count", 4);
pub const F_TABLE_ID: Field = Field::after(F_BLOCK_COUNT, "table_id", 8);
pub const F_ENTRY_COUNT: Field = Field::after(F_TABLE_ID, "entry_count", 8);
pub const F_INDEX_OFFSET: Field = Field::after(F_ENTRY_COUNT, "index_offset", 4);
pub const F_INDEX_LEN: Field = Field::after(F_INDEX_OFFSET, "index_len", 4);
pub const F_BLOOM_OFFSET: Field = Field::after(F_INDEX_LEN, "bloom_offset", 4);
pub const F_BLOOM_LEN: Field = Field::after(F_BLOOM_OFFSET, "bloom_len", 4);
pub const F_TABLE_LEN: Field = Field::after(F_BLOOM_LEN, "table_len", 4);
pub const F_RESERVED: Field = Field::after(F_TABLE_LEN, "reserved", 8);
pub const F_CHECKSUM: Field = Field::after(F_RESERVED, "checksum", 4);

/// The footer's field table (docs/FORMAT.md §5.3, "Table footer").
pub const FOOTER_LAYOUT: StructLayout = StructLayout {
    name: "Table footer",
    size: FOOTER_BYTES,
    fields: &[
        F_MAGIC,
        F_FORMAT_VERSION,
        F_BLOCK_COUNT,
        F_TABLE_ID,
        F_ENTRY_COUNT,
        F_INDEX_OFFSET,
        F_INDEX_LEN,
        F_BLOOM_OFFSET,
        F_BLOOM_LEN,
        F_TABLE_LEN,
        F_RESERVED,
        F_CHECKSUM,
    ],
};
const _: () = assert!(F_CHECKSUM.offset + F_CHECKSUM.size == FOOTER_BYTES);

/// Where a block lies inside its table: byte offset from the table's start and length
/// (trailer and checksum included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockHandle {
    pub offset: u32,
    pub len: u32,
}

impl BlockHandle {
    pub fn end(self) -> u64 {
        self.offset as u64 + self.len as u64
    }
}

/// The decoded footer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footer {
    pub table_id: TableId,
    pub block_count: u32,
    pub entry_count: u64,
    pub index: BlockHandle,
    pub bloom: BlockHandle,
    pub table_len: u32,
}

impl Footer {
    pub fn encode(&self) -> [u8; FOOTER_BYTES] {
        assert!(
            self.index.end() <= self.bloom.offset as u64,
            "index precedes bloom"
        );
        assert!(
            self.bloom.end() + FOOTER_BYTES as u64 <= self.table_len as u64,
            "footer last"
        );
        let mut b = [0u8; FOOTER_BYTES];
        F_MAGIC.put_bytes(&mut b, &TABLE_MAGIC);
        F_FORMAT_VERSION.put_u32(&mut b, TABLE_FORMAT_VERSION);
        F_BLOCK_COUNT.put_u32(&mut b, self.block_count);
        F_TABLE_ID.put_u64(&mut b, self.table_id.0);
        F_ENTRY_COUNT.put_u64(&mut b, self.entry_count);
        F_INDEX_OFFSET.put_u32(&mut b, self.index.offset);
        F_INDEX_LEN.put_u32(&mut b, self.index.len);
        F_BLOOM_OFFSET.put_u32(&mut b, self.bloom.offset);
        F_BLOOM_LEN.put_u32(&mut b, self.bloom.len);
        F_TABLE_LEN.put_u32(&mut b, self.table_len);
        let crc = crc32c::crc32c(&b[..F_CHECKSUM.offset]);
        F_CHECKSUM.put_u32(&mut b, crc);
        b
    }

    /// Decodes and checks a footer read from the end of table `id`, whose manifest entry
    /// says it is `table_len` bytes long. Every field is checked before any is trusted.
    pub fn decode(bytes: &[u8], id: TableId, table_len: u32) -> Result<Footer, MetaDbError> {
        assert_eq!(bytes.len(), FOOTER_BYTES);
        let bad = |detail: String| corrupt(id, "footer", detail);
        let magic = F_MAGIC.bytes(bytes);
        if magic != TABLE_MAGIC {
            return Err(bad(format!(
                "magic expected {TABLE_MAGIC:?}, got {magic:?}"
            )));
        }
        let stored = F_CHECKSUM.get_u32(bytes);
        let computed = crc32c::crc32c(&bytes[..F_CHECKSUM.offset]);
        if stored != computed {
            return Err(bad(format!(
                "checksum expected {computed:#010x}, got {stored:#010x}"
            )));
        }
        let version = F_FORMAT_VERSION.get_u32(bytes);
        if version != TABLE_FORMAT_VERSION {
            return Err(bad(format!(
                "format version expected {TABLE_FORMAT_VERSION}, got {version}"
            )));
        }
        let footer = Footer {
            table_id: TableId(F_TABLE_ID.get_u64(bytes)),
            block_count: F_BLOCK_COUNT.get_u32(bytes),
            entry_count: F_ENTRY_COUNT.get_u64(bytes),
            index: BlockHandle {
                offset: F_INDEX_OFFSET.get_u32(bytes),
                len: F_INDEX_LEN.get_u32(bytes),
            },
            bloom: BlockHandle {
                offset: F_BLOOM_OFFSET.get_u32(bytes),
                len: F_BLOOM_LEN.get_u32(bytes),
            },
            table_len: F_TABLE_LEN.get_u32(bytes),
        };
        if footer.table_id != id {
            return Err(bad(format!(
                "table id expected {}, got {}",
                id.0, footer.table_id.0
            )));
        }
        if footer.table_len != table_len {
            return Err(bad(format!(
                "table length expected {table_len}, got {}",
                footer.table_len
            )));
        }
        let index_ok = footer.index.len as usize >= INDEX_TRAILER_BYTES
            && footer.index.end() <= footer.bloom.offset as u64;
        let bloom_ok = footer.bloom.len as usize > BLOOM_TRAILER_BYTES
            && footer.bloom.end() + FOOTER_BYTES as u64 <= table_len as u64;
        if !index_ok || !bloom_ok || footer.block_count == 0 || footer.index.offset == 0 {
            return Err(bad(format!(
                "impossible layout {footer:?} for a table of {table_len} bytes"
            )));
        }
        Ok(footer)
    }
}

/// A corruption error naming the table and the structure that failed.
pub fn corrupt(id: TableId, what: &str, detail: impl Into<String>) -> MetaDbError {
    MetaDbError::corruption(format!("table {} {what}", id.0), detail)
}

/// CRC-32C of `id` (8 bytes LE), `offset` (4 bytes LE), then `bytes`.
pub fn block_crc(id: TableId, offset: u32, bytes: &[u8]) -> u32 {
    let mut place = [0u8; 12];
    place[..8].copy_from_slice(&id.0.to_le_bytes());
    place[8..].copy_from_slice(&offset.to_le_bytes());
    crc32c::crc32c_append(crc32c::crc32c(&place), bytes)
}

/// Appends the checksum of `buf`, bound to its table and offset, to it.
pub fn seal(id: TableId, offset: u32, buf: &mut Vec<u8>) {
    let crc = block_crc(id, offset, buf);
    buf.extend_from_slice(&crc.to_le_bytes());
}

/// Checks the checksum in the last 4 bytes of `sealed`, a block read at `offset` of table
/// `id`, and returns the bytes before it.
pub fn unseal<'a>(
    id: TableId,
    offset: u32,
    sealed: &'a [u8],
    what: &dyn Fn() -> String,
) -> Result<&'a [u8], MetaDbError> {
    if sealed.len() < 4 {
        return Err(corrupt(
            id,
            &what(),
            format!("{} bytes is too short for a checksum", sealed.len()),
        ));
    }
    let (body, tail) = sealed.split_at(sealed.len() - 4);
    let stored = u32::from_le_bytes(tail.try_into().expect("4 bytes"));
    let computed = block_crc(id, offset, body);
    if stored != computed {
        return Err(corrupt(
            id,
            &what(),
            format!("checksum expected {computed:#010x}, got {stored:#010x}"),
        ));
    }
    Ok(body)
}

/// Bytes the LEB128 encoding of `v` takes (1 to 10).
pub fn varint_len(v: u64) -> usize {
    let bits = 64 - (v | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// Appends `v` in LEB128 (7 bits per byte, low group first, high bit = more follows).
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Decodes a LEB128 value at `*pos` in `buf`, advancing `*pos`. `None` if the encoding
/// runs past the buffer or past 10 bytes.
#[inline]
pub fn get_varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v: u64 = 0;
    for i in 0..10 {
        let byte = *buf.get(*pos + i)?;
        v |= ((byte & 0x7f) as u64) << (7 * i);
        if byte < 0x80 {
            *pos += i + 1;
            return Some(v);
        }
    }
    None
}

/// Decodes a varint that must fit in `u32`.
#[inline]
pub fn get_varint32(buf: &[u8], pos: &mut usize) -> Option<u32> {
    get_varint(buf, pos).and_then(|v| u32::try_from(v).ok())
}

/// Rounds `len` up to the table alignment.
pub fn align_table_len(len: usize) -> usize {
    len.div_ceil(TABLE_ALIGN_BYTES) * TABLE_ALIGN_BYTES
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn footer_layout_is_contiguous_and_64_bytes() {
        FOOTER_LAYOUT.check_contiguous().unwrap();
        assert_eq!(F_TABLE_ID.offset, 16);
        assert_eq!(F_CHECKSUM.offset, 60);
    }

    fn footer() -> Footer {
        Footer {
            table_id: TableId(42),
            block_count: 3,
            entry_count: 77,
            index: BlockHandle {
                offset: 9000,
                len: 100,
            },
            bloom: BlockHandle {
                offset: 9100,
                len: 40,
            },
            table_len: 12288,
        }
    }

    #[test]
    fn footer_round_trips_and_checks_identity() {
        let f = footer();
        let b = f.encode();
        assert_eq!(&b[..8], b"AUGETBL\0");
        assert_eq!(Footer::decode(&b, TableId(42), 12288).unwrap(), f);
        assert!(matches!(
            Footer::decode(&b, TableId(43), 12288),
            Err(MetaDbError::Corruption { .. })
        ));
        assert!(matches!(
            Footer::decode(&b, TableId(42), 8192),
            Err(MetaDbError::Corruption { .. })
        ));
        for i in 0..FOOTER_BYTES {
            let mut c = b;
            c[i] ^= 0x10;
            assert!(
                Footer::decode(&c, TableId(42), 12288).is_err(),
                "flip at byte {i} detected"
            );
        }
    }

    #[test]
    fn footer_rejects_impossible_layouts_even_with_a_good_checksum() {
        let mut b = footer().encode();
        // The bloom block would overlap the footer.
        F_BLOOM_OFFSET.put_u32(&mut b, 12288 - 64 - 40 + 1);
        let crc = crc32c::crc32c(&b[..F_CHECKSUM.offset]);
        F_CHECKSUM.put_u32(&mut b, crc);
        let err = Footer::decode(&b, TableId(42), 12288).unwrap_err();
        assert!(err.to_string().contains("impossible layout"), "{err}");
    }

    #[test]
    fn varints_round_trip() {
        let values = [
            0u64,
            1,
            127,
            128,
            300,
            16383,
            16384,
            u32::MAX as u64,
            u64::MAX >> 1,
            u64::MAX,
        ];
        let mut buf = Vec::new();
        for &v in &values {
            let before = buf.len();
            put_varint(&mut buf, v);
            assert_eq!(buf.len() - before, varint_len(v), "length of {v}");
        }
        let mut pos = 0;
        for &v in &values {
            assert_eq!(get_varint(&buf, &mut pos), Some(v));
        }
        assert_eq!(pos, buf.len());
        assert_eq!(get_varint(&[0x80, 0x80], &mut 0), None, "truncated");
        assert_eq!(
            get_varint32(&[0xff, 0xff, 0xff, 0xff, 0x7f], &mut 0),
            None,
            "beyond u32"
        );
    }

    #[test]
    fn seal_and_unseal_bind_the_table_id() {
        let mut b = b"hello".to_vec();
        seal(TableId(1), 4096, &mut b);
        assert_eq!(
            unseal(TableId(1), 4096, &b, &|| "x".into()).unwrap(),
            b"hello"
        );
        assert!(
            unseal(TableId(2), 4096, &b, &|| "x".into()).is_err(),
            "other table"
        );
        assert!(
            unseal(TableId(1), 0, &b, &|| "x".into()).is_err(),
            "other offset"
        );
        b[0] ^= 1;
        assert!(unseal(TableId(1), 4096, &b, &|| "x".into()).is_err());
    }
}
