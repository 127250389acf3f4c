//! The persistent memory region's layout (docs/FORMAT.md §7).
//!
//! ```text
//! 0              4 KiB          8 KiB                          size - 16 KiB     size
//! | header       | WAL slots    | WAL data area ...            | write versions  |
//! ```
//!
//! Invariants:
//! - The PMR size is a multiple of 4 KiB and at least `PMR_SIZE_MIN_BYTES`.
//! - The header names the file system (fs_uuid) it belongs to; mount refuses a PMR of
//!   another file system.
//! - The WAL data area starts and ends on 64-byte lines.

use crate::checksum::crc32c;
use crate::constants::*;
use crate::error::{FormatError, GeometryError};
use crate::layout::{Field, StructLayout};
use serde::Serialize;

pub const MAGIC: [u8; 8] = *b"AUGEPMR\0";

pub const F_MAGIC: Field = Field::at("magic", 0, 8);
pub const F_FORMAT_VERSION: Field = Field::after(F_MAGIC, "format_version", 4);
pub const F_PAD: Field = Field::after(F_FORMAT_VERSION, "pad", 4);
pub const F_PMR_SIZE: Field = Field::after(F_PAD, "pmr_size_bytes", 8);
pub const F_FS_UUID: Field = Field::after(F_PMR_SIZE, "fs_uuid", 16);
pub const F_SLOT_OFFSET: Field = Field::after(F_FS_UUID, "slot_area_offset", 8);
pub const F_SLOT_BYTES: Field = Field::after(F_SLOT_OFFSET, "slot_area_bytes", 8);
pub const F_WAL_OFFSET: Field = Field::after(F_SLOT_BYTES, "wal_area_offset", 8);
pub const F_WAL_BYTES: Field = Field::after(F_WAL_OFFSET, "wal_area_bytes", 8);
pub const F_WRITE_VER_OFFSET: Field = Field::after(F_WAL_BYTES, "write_ver_offset", 8);
pub const F_WRITE_VER_BYTES: Field = Field::after(F_WRITE_VER_OFFSET, "write_ver_bytes", 8);
pub const F_RESERVED: Field = Field::after(F_WRITE_VER_BYTES, "reserved", 36);
pub const F_CHECKSUM: Field = Field::after(F_RESERVED, "checksum", 4);
pub const HEADER_BYTES: usize = 128;

pub const HEADER_LAYOUT: StructLayout = StructLayout {
    name: "PMR header",
    size: HEADER_BYTES,
    fields: &[
        F_MAGIC,
        F_FORMAT_VERSION,
        F_PAD,
        F_PMR_SIZE,
        F_FS_UUID,
        F_SLOT_OFFSET,
        F_SLOT_BYTES,
        F_WAL_OFFSET,
        F_WAL_BYTES,
        F_WRITE_VER_OFFSET,
        F_WRITE_VER_BYTES,
        F_RESERVED,
        F_CHECKSUM,
    ],
};

const _: () = assert!(F_CHECKSUM.end() == HEADER_BYTES);

/// Byte ranges inside the PMR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PmrLayout {
    pub size_bytes: u64,
    pub slot_area_offset: u64,
    pub slot_area_bytes: u64,
    pub wal_area_offset: u64,
    pub wal_area_bytes: u64,
    pub write_ver_offset: u64,
    pub write_ver_bytes: u64,
}

impl PmrLayout {
    pub fn compute(size_bytes: u64) -> Result<PmrLayout, GeometryError> {
        if size_bytes < PMR_SIZE_MIN_BYTES {
            return Err(GeometryError::PmrTooSmall {
                size_bytes,
                min_bytes: PMR_SIZE_MIN_BYTES,
            });
        }
        if size_bytes % BLOCK_SIZE_BYTES != 0 {
            return Err(GeometryError::PmrMisaligned { size_bytes });
        }
        let slot_area_offset = PMR_HEADER_BYTES;
        let wal_area_offset = slot_area_offset + PMR_SLOT_AREA_BYTES;
        let write_ver_offset = size_bytes - PMR_WRITE_VER_AREA_BYTES;
        let layout = PmrLayout {
            size_bytes,
            slot_area_offset,
            slot_area_bytes: PMR_SLOT_AREA_BYTES,
            wal_area_offset,
            wal_area_bytes: write_ver_offset - wal_area_offset,
            write_ver_offset,
            write_ver_bytes: PMR_WRITE_VER_AREA_BYTES,
        };
        assert_eq!(layout.wal_area_offset % PMR_LINE_BYTES, 0);
        assert_eq!(layout.wal_area_bytes % PMR_LINE_BYTES, 0);
        Ok(layout)
    }

    /// The 64-byte line holding the write version of `cpu`.
    pub fn write_ver_line(&self, cpu: u32) -> u64 {
        assert!((cpu as u64) < PMR_CPU_COUNT_MAX);
        self.write_ver_offset + cpu as u64 * PMR_LINE_BYTES
    }
}

/// A decoded PMR header.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PmrHeader {
    pub fs_uuid: [u8; 16],
    pub layout: PmrLayout,
}

impl PmrHeader {
    pub fn encode(&self) -> Vec<u8> {
        let l = &self.layout;
        let mut buf = vec![0u8; PMR_HEADER_BYTES as usize];
        F_MAGIC.put_bytes(&mut buf, &MAGIC);
        F_FORMAT_VERSION.put_u32(&mut buf, FORMAT_VERSION);
        F_PMR_SIZE.put_u64(&mut buf, l.size_bytes);
        F_FS_UUID.put_bytes(&mut buf, &self.fs_uuid);
        F_SLOT_OFFSET.put_u64(&mut buf, l.slot_area_offset);
        F_SLOT_BYTES.put_u64(&mut buf, l.slot_area_bytes);
        F_WAL_OFFSET.put_u64(&mut buf, l.wal_area_offset);
        F_WAL_BYTES.put_u64(&mut buf, l.wal_area_bytes);
        F_WRITE_VER_OFFSET.put_u64(&mut buf, l.write_ver_offset);
        F_WRITE_VER_BYTES.put_u64(&mut buf, l.write_ver_bytes);
        let crc = crc32c(&buf[..F_CHECKSUM.offset]);
        F_CHECKSUM.put_u32(&mut buf, crc);
        buf
    }

    pub fn decode(buf: &[u8]) -> Result<PmrHeader, FormatError> {
        assert!(buf.len() >= HEADER_BYTES);
        if F_MAGIC.bytes(buf) != MAGIC {
            return Err(FormatError::NotAugefs { what: "PMR" });
        }
        let crc = crc32c(&buf[..F_CHECKSUM.offset]);
        if crc != F_CHECKSUM.get_u32(buf) {
            return Err(FormatError::corruption(
                "PMR header",
                "PMR byte 0",
                format!("crc {crc:#010x}"),
                format!("{:#010x}", F_CHECKSUM.get_u32(buf)),
            ));
        }
        let version = F_FORMAT_VERSION.get_u32(buf);
        if version != FORMAT_VERSION {
            return Err(FormatError::UnsupportedVersion {
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        let size = F_PMR_SIZE.get_u64(buf);
        let layout = PmrLayout::compute(size)?;
        let stored = PmrLayout {
            size_bytes: size,
            slot_area_offset: F_SLOT_OFFSET.get_u64(buf),
            slot_area_bytes: F_SLOT_BYTES.get_u64(buf),
            wal_area_offset: F_WAL_OFFSET.get_u64(buf),
            wal_area_bytes: F_WAL_BYTES.get_u64(buf),
            write_ver_offset: F_WRITE_VER_OFFSET.get_u64(buf),
            write_ver_bytes: F_WRITE_VER_BYTES.get_u64(buf),
        };
        if stored != layout {
            return Err(FormatError::corruption(
                "PMR header layout",
                "PMR byte 0",
                format!("{layout:?}"),
                format!("{stored:?}"),
            ));
        }
        Ok(PmrHeader {
            fs_uuid: F_FS_UUID.bytes(buf).try_into().expect("16 bytes"),
            layout,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_of_minimum_pmr() {
        let l = PmrLayout::compute(PMR_SIZE_MIN_BYTES).unwrap();
        assert_eq!(l.slot_area_offset, 4096);
        assert_eq!(l.wal_area_offset, 8192);
        assert_eq!(l.write_ver_offset + l.write_ver_bytes, PMR_SIZE_MIN_BYTES);
        assert_eq!(l.write_ver_line(1), l.write_ver_offset + 64);
        assert!(matches!(
            PmrLayout::compute(MIB),
            Err(GeometryError::PmrTooSmall { .. })
        ));
        assert!(matches!(
            PmrLayout::compute(4 * MIB + 1),
            Err(GeometryError::PmrMisaligned { .. })
        ));
    }

    #[test]
    fn header_round_trip() {
        let h = PmrHeader {
            fs_uuid: [3; 16],
            layout: PmrLayout::compute(8 * MIB).unwrap(),
        };
        let buf = h.encode();
        assert_eq!(PmrHeader::decode(&buf).unwrap(), h);
        let mut bad = buf.clone();
        bad[30] ^= 1;
        assert!(matches!(
            PmrHeader::decode(&bad),
            Err(FormatError::Corruption(_))
        ));
        assert!(matches!(
            PmrHeader::decode(&[0u8; 4096]),
            Err(FormatError::NotAugefs { .. })
        ));
    }
}
