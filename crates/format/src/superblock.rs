//! The superblock: identity, format version and geometry (docs/FORMAT.md §3).
//!
//! Two copies, in blocks 0 and 1. Each copy is one 512-byte sector (so a write of it is
//! atomic on any device this format supports) followed by zeros to the end of its block.
//! mkfs writes copy 1, flushes, then copy 0, and flushes again; a reader takes the valid
//! copy with the highest `sequence`, and reports a bad copy.
//!
//! Invariants:
//! - `regions` always equal `Geometry::compute(device_size_bytes, domain_count)`.
//! - `checksum` is the CRC-32C of bytes 0..508.

use crate::checksum::crc32c;
use crate::constants::*;
use crate::error::FormatError;
use crate::geometry::{Geometry, Region, GROWS_MAX};
use crate::layout::{Field, StructLayout};
use serde::Serialize;

/// "AUGEFS" followed by two zero bytes.
pub const MAGIC: [u8; 8] = *b"AUGEFS\0\0";

/// Feature flag: MetaDB's WAL lives on a PMR whose header carries this file system's uuid.
pub const FEATURE_PMR: u32 = 1 << 0;
/// Feature flag: the block index may hold extents (docs/FORMAT.md §6.2, `e` and `q`
/// records), which code older than them would read as holes. Set by every mkfs since;
/// the engine writes extents only into images that carry it.
pub const FEATURE_EXTENTS: u32 = 1 << 1;
/// Feature flag: MetaDB's WAL records carry `lane_durable` (docs/FORMAT.md §5.2, magic
/// `WD` and `WTXD`), which code older than them would take for an empty or torn log.
/// Set by every mkfs since, and by the first read-write open of an older image, before
/// it writes a record of the new form.
pub const FEATURE_LANE_DURABLE: u32 = 1 << 2;
/// Feature flag: the file system grew by added areas (docs/FORMAT.md §2 "Grown
/// areas"): `layout_size_bytes` and `grown_sizes` hold what its layout is computed
/// from. Code older than them would compute the layout from the device size alone.
pub const FEATURE_GROWN: u32 = 1 << 3;
/// The longest label, in bytes of UTF-8 (NUL-padded in the superblock; bytes that were
/// `reserved` and zero before labels, so an older image has none and older code
/// ignores one).
pub const LABEL_BYTES_MAX: usize = 64;

/// Every feature flag this build understands; others make the image unreadable here.
pub const FEATURES_KNOWN: u32 =
    FEATURE_PMR | FEATURE_EXTENTS | FEATURE_LANE_DURABLE | FEATURE_GROWN;

pub const F_MAGIC: Field = Field::at("magic", 0, 8);
pub const F_FORMAT_VERSION: Field = Field::after(F_MAGIC, "format_version", 4);
pub const F_COPY_INDEX: Field = Field::after(F_FORMAT_VERSION, "copy_index", 4);
pub const F_SEQUENCE: Field = Field::after(F_COPY_INDEX, "sequence", 8);
pub const F_FS_UUID: Field = Field::after(F_SEQUENCE, "fs_uuid", 16);
pub const F_CREATED_UNIX_NS: Field = Field::after(F_FS_UUID, "created_unix_ns", 8);
pub const F_BLOCK_SIZE: Field = Field::after(F_CREATED_UNIX_NS, "block_size_bytes", 4);
pub const F_SEGMENT_SIZE: Field = Field::after(F_BLOCK_SIZE, "segment_size_bytes", 4);
pub const F_DEVICE_SIZE: Field = Field::after(F_SEGMENT_SIZE, "device_size_bytes", 8);
pub const F_DOMAIN_COUNT: Field = Field::after(F_DEVICE_SIZE, "domain_count", 4);
pub const F_FEATURES: Field = Field::after(F_DOMAIN_COUNT, "feature_flags", 4);
pub const F_PMR_SIZE: Field = Field::after(F_FEATURES, "pmr_size_bytes", 8);
pub const F_CHECKPOINT_START: Field = Field::after(F_PMR_SIZE, "checkpoint_start_block", 8);
pub const F_CHECKPOINT_COUNT: Field = Field::after(F_CHECKPOINT_START, "checkpoint_block_count", 8);
pub const F_MANIFEST_START: Field = Field::after(F_CHECKPOINT_COUNT, "manifest_start_block", 8);
pub const F_MANIFEST_COUNT: Field = Field::after(F_MANIFEST_START, "manifest_block_count", 8);
pub const F_WAL_START: Field = Field::after(F_MANIFEST_COUNT, "wal_start_block", 8);
pub const F_WAL_COUNT: Field = Field::after(F_WAL_START, "wal_block_count", 8);
pub const F_SUMMARY_START: Field = Field::after(F_WAL_COUNT, "summary_start_block", 8);
pub const F_SUMMARY_COUNT: Field = Field::after(F_SUMMARY_START, "summary_block_count", 8);
pub const F_SEGMENT_START: Field = Field::after(F_SUMMARY_COUNT, "segment_area_start_block", 8);
pub const F_SEGMENT_COUNT: Field = Field::after(F_SEGMENT_START, "segment_count", 8);
pub const F_LABEL: Field = Field::after(F_SEGMENT_COUNT, "label", LABEL_BYTES_MAX);
pub const F_LAYOUT_SIZE: Field = Field::after(F_LABEL, "layout_size_bytes", 8);
pub const F_GROWN_SIZES: Field = Field::after(F_LAYOUT_SIZE, "grown_sizes", 8 * GROWS_MAX);
pub const F_RESERVED: Field = Field::after(F_GROWN_SIZES, "reserved", 508 - F_GROWN_SIZES.end());
pub const F_CHECKSUM: Field = Field::after(F_RESERVED, "checksum", 4);

pub const LAYOUT: StructLayout = StructLayout {
    name: "Superblock",
    size: SUPERBLOCK_BYTES,
    fields: &[
        F_MAGIC,
        F_FORMAT_VERSION,
        F_COPY_INDEX,
        F_SEQUENCE,
        F_FS_UUID,
        F_CREATED_UNIX_NS,
        F_BLOCK_SIZE,
        F_SEGMENT_SIZE,
        F_DEVICE_SIZE,
        F_DOMAIN_COUNT,
        F_FEATURES,
        F_PMR_SIZE,
        F_CHECKPOINT_START,
        F_CHECKPOINT_COUNT,
        F_MANIFEST_START,
        F_MANIFEST_COUNT,
        F_WAL_START,
        F_WAL_COUNT,
        F_SUMMARY_START,
        F_SUMMARY_COUNT,
        F_SEGMENT_START,
        F_SEGMENT_COUNT,
        F_LABEL,
        F_LAYOUT_SIZE,
        F_GROWN_SIZES,
        F_RESERVED,
        F_CHECKSUM,
    ],
};

const _: () = assert!(F_CHECKSUM.end() == SUPERBLOCK_BYTES);

/// A decoded superblock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Superblock {
    pub format_version: u32,
    pub sequence: u64,
    pub fs_uuid: [u8; 16],
    pub created_unix_ns: u64,
    pub feature_flags: u32,
    /// Size of the attached PMR, 0 when the file system runs in ssd mode.
    pub pmr_size_bytes: u64,
    pub geometry: Geometry,
    /// The file system's name (`mkfs -L`, `augefs tune -L`), empty for none.
    pub label: String,
}

impl Superblock {
    pub fn new(
        geometry: Geometry,
        fs_uuid: [u8; 16],
        created_unix_ns: u64,
        pmr_size_bytes: u64,
    ) -> Self {
        let feature_flags = FEATURE_EXTENTS
            | FEATURE_LANE_DURABLE
            | if pmr_size_bytes > 0 { FEATURE_PMR } else { 0 };
        Superblock {
            format_version: FORMAT_VERSION,
            sequence: 1,
            fs_uuid,
            created_unix_ns,
            feature_flags,
            pmr_size_bytes,
            geometry,
            label: String::new(),
        }
    }

    /// Whether `label` can be stored: at most [`LABEL_BYTES_MAX`] bytes, no NUL, no
    /// `/` or whitespace (so `LABEL=NAME` is one word on a command line and in fstab).
    pub fn check_label(label: &str) -> Result<(), String> {
        if label.len() > LABEL_BYTES_MAX {
            return Err(format!(
                "label {label:?} is {} bytes; at most {LABEL_BYTES_MAX}",
                label.len()
            ));
        }
        if let Some(c) = label
            .chars()
            .find(|c| *c == '\0' || *c == '/' || c.is_whitespace() || c.is_control())
        {
            return Err(format!(
                "label {label:?} has {c:?}: no NUL, '/', space or control characters"
            ));
        }
        Ok(())
    }

    pub fn has_pmr(&self) -> bool {
        self.feature_flags & FEATURE_PMR != 0
    }

    pub fn has_extents(&self) -> bool {
        self.feature_flags & FEATURE_EXTENTS != 0
    }

    /// Encodes copy `copy_index` (0 or 1) into one full block.
    pub fn encode(&self, copy_index: u32) -> Vec<u8> {
        assert!(copy_index < SUPERBLOCK_COPIES as u32);
        let g = &self.geometry;
        let mut buf = vec![0u8; BLOCK_SIZE_BYTES as usize];
        F_MAGIC.put_bytes(&mut buf, &MAGIC);
        F_FORMAT_VERSION.put_u32(&mut buf, self.format_version);
        F_COPY_INDEX.put_u32(&mut buf, copy_index);
        F_SEQUENCE.put_u64(&mut buf, self.sequence);
        F_FS_UUID.put_bytes(&mut buf, &self.fs_uuid);
        F_CREATED_UNIX_NS.put_u64(&mut buf, self.created_unix_ns);
        F_BLOCK_SIZE.put_u32(&mut buf, BLOCK_SIZE_BYTES as u32);
        F_SEGMENT_SIZE.put_u32(&mut buf, SEGMENT_SIZE_BYTES as u32);
        F_DEVICE_SIZE.put_u64(&mut buf, g.device_size_bytes);
        F_DOMAIN_COUNT.put_u32(&mut buf, g.domain_count);
        let grown = g.grown_count > 0;
        F_FEATURES.put_u32(
            &mut buf,
            self.feature_flags & !FEATURE_GROWN | if grown { FEATURE_GROWN } else { 0 },
        );
        if grown {
            F_LAYOUT_SIZE.put_u64(&mut buf, g.layout_size_bytes);
            for (i, size) in g.grown_sizes().into_iter().enumerate() {
                let at = F_GROWN_SIZES.offset + 8 * i;
                buf[at..at + 8].copy_from_slice(&size.to_le_bytes());
            }
        }
        F_PMR_SIZE.put_u64(&mut buf, self.pmr_size_bytes);
        let regions = [
            (F_CHECKPOINT_START, F_CHECKPOINT_COUNT, g.checkpoints),
            (F_MANIFEST_START, F_MANIFEST_COUNT, g.manifest),
            (F_WAL_START, F_WAL_COUNT, g.wal),
            (F_SUMMARY_START, F_SUMMARY_COUNT, g.summaries),
        ];
        for (start, count, region) in regions {
            start.put_u64(&mut buf, region.start_block);
            count.put_u64(&mut buf, region.block_count);
        }
        F_SEGMENT_START.put_u64(&mut buf, g.segments.start_block);
        F_SEGMENT_COUNT.put_u64(&mut buf, g.segment_count as u64);
        assert!(
            Superblock::check_label(&self.label).is_ok(),
            "a valid label"
        );
        buf[F_LABEL.offset..F_LABEL.offset + self.label.len()]
            .copy_from_slice(self.label.as_bytes());
        let crc = crc32c(&buf[..F_CHECKSUM.offset]);
        F_CHECKSUM.put_u32(&mut buf, crc);
        buf
    }

    /// Decodes and validates one copy read from block `copy_index`.
    pub fn decode(buf: &[u8], copy_index: u32) -> Result<Superblock, FormatError> {
        assert!(buf.len() >= SUPERBLOCK_BYTES);
        let what = format!("superblock copy {copy_index}");
        let location = format!("byte {}", copy_index as u64 * BLOCK_SIZE_BYTES);
        if F_MAGIC.bytes(buf) != MAGIC {
            return Err(FormatError::NotAugefs { what: "image" });
        }
        let stored = F_CHECKSUM.get_u32(buf);
        let computed = crc32c(&buf[..F_CHECKSUM.offset]);
        if stored != computed {
            return Err(FormatError::corruption(
                what,
                location,
                format!("checksum {computed:#010x}"),
                format!("{stored:#010x}"),
            ));
        }
        let format_version = F_FORMAT_VERSION.get_u32(buf);
        if format_version != FORMAT_VERSION {
            return Err(FormatError::UnsupportedVersion {
                found: format_version,
                supported: FORMAT_VERSION,
            });
        }
        let fields = FieldCheck { what, location };
        let corrupt =
            |field: &str, expected: String, got: String| fields.corrupt(field, expected, got);
        let check = |field: Field, expected: u64, got: u64| fields.check(field, expected, got);
        check(
            F_COPY_INDEX,
            copy_index as u64,
            F_COPY_INDEX.get_u32(buf) as u64,
        )?;
        check(
            F_BLOCK_SIZE,
            BLOCK_SIZE_BYTES,
            F_BLOCK_SIZE.get_u32(buf) as u64,
        )?;
        check(
            F_SEGMENT_SIZE,
            SEGMENT_SIZE_BYTES,
            F_SEGMENT_SIZE.get_u32(buf) as u64,
        )?;
        let feature_flags = F_FEATURES.get_u32(buf);
        if feature_flags & !FEATURES_KNOWN != 0 {
            return Err(corrupt(
                F_FEATURES.name,
                format!("flags within {FEATURES_KNOWN:#x}"),
                format!("{feature_flags:#x}"),
            ));
        }
        let device_size_bytes = F_DEVICE_SIZE.get_u64(buf);
        let domain_count = F_DOMAIN_COUNT.get_u32(buf);
        let geometry = if feature_flags & FEATURE_GROWN != 0 {
            let sizes = grown_sizes(buf);
            if sizes.last() != Some(&device_size_bytes) {
                return Err(corrupt(
                    F_GROWN_SIZES.name,
                    format!("ascending sizes, the last {device_size_bytes}"),
                    format!("{sizes:?}"),
                ));
            }
            Geometry::compute_grown(F_LAYOUT_SIZE.get_u64(buf), domain_count, &sizes)
        } else {
            Geometry::compute(device_size_bytes, domain_count)
        }
        .map_err(|e| {
            corrupt(
                "device_size_bytes/domain_count",
                "a valid geometry".into(),
                e.to_string(),
            )
        })?;
        fields.check_regions(buf, &geometry)?;
        let pmr_size_bytes = F_PMR_SIZE.get_u64(buf);
        if (feature_flags & FEATURE_PMR != 0) != (pmr_size_bytes != 0) {
            return Err(corrupt(
                F_PMR_SIZE.name,
                "non-zero exactly when the PMR flag is set".into(),
                pmr_size_bytes.to_string(),
            ));
        }
        let label = decode_label(F_LABEL.bytes(buf))
            .map_err(|e| corrupt(F_LABEL.name, "a valid label".into(), e))?;
        Ok(Superblock {
            format_version,
            sequence: F_SEQUENCE.get_u64(buf),
            fs_uuid: F_FS_UUID.bytes(buf).try_into().expect("16 bytes"),
            created_unix_ns: F_CREATED_UNIX_NS.get_u64(buf),
            feature_flags,
            pmr_size_bytes,
            geometry,
            label,
        })
    }
}

/// The device sizes after each grow by an added area: the non-zero prefix of the
/// field (a layout check refuses any that do not grow).
fn grown_sizes(buf: &[u8]) -> Vec<u64> {
    F_GROWN_SIZES
        .bytes(buf)
        .chunks(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .take_while(|&size| size != 0)
        .collect()
}

/// The label in `bytes` (up to the first NUL), or why it is not one. Only a damaged
/// copy whose checksum still matched could hold one that is not valid, and that copy
/// is refused like any other field out of bounds: what decodes always encodes again.
fn decode_label(bytes: &[u8]) -> Result<String, String> {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    let label = std::str::from_utf8(&bytes[..end])
        .map_err(|_| format!("{end} bytes that are not UTF-8"))?;
    Superblock::check_label(label)?;
    Ok(label.to_string())
}

/// Reports a superblock field that is not what the rest of the superblock implies.
struct FieldCheck {
    /// Which copy ("superblock copy N").
    what: String,
    /// Where it was read.
    location: String,
}

impl FieldCheck {
    fn corrupt(&self, field: &str, expected: String, got: String) -> FormatError {
        FormatError::corruption(
            format!("{} field {field}", self.what),
            self.location.clone(),
            expected,
            got,
        )
    }

    fn check(&self, field: Field, expected: u64, got: u64) -> Result<(), FormatError> {
        if expected == got {
            Ok(())
        } else {
            Err(self.corrupt(field.name, expected.to_string(), got.to_string()))
        }
    }

    /// The stored regions are the ones `geometry` computes from the device size and
    /// the domain count.
    fn check_regions(&self, buf: &[u8], geometry: &Geometry) -> Result<(), FormatError> {
        let stored_regions = [
            (F_CHECKPOINT_START, F_CHECKPOINT_COUNT, geometry.checkpoints),
            (F_MANIFEST_START, F_MANIFEST_COUNT, geometry.manifest),
            (F_WAL_START, F_WAL_COUNT, geometry.wal),
            (F_SUMMARY_START, F_SUMMARY_COUNT, geometry.summaries),
            (
                F_SEGMENT_START,
                F_SEGMENT_COUNT,
                Region {
                    start_block: geometry.segments.start_block,
                    block_count: geometry.segment_count as u64,
                },
            ),
        ];
        for (start, count, region) in stored_regions {
            self.check(start, region.start_block, start.get_u64(buf))?;
            self.check(count, region.block_count, count.get_u64(buf))?;
        }
        Ok(())
    }
}

/// The outcome of reading both copies.
#[derive(Debug, Clone)]
pub struct SuperblockChoice {
    pub superblock: Superblock,
    /// Which copy was chosen.
    pub copy_index: u32,
    /// Per copy: `None` if valid, or why it was rejected.
    pub copy_errors: [Option<FormatError>; 2],
}

/// Picks the valid copy with the highest sequence from the first two blocks of a device.
/// If neither is valid, returns the most telling error: an unsupported version or
/// corruption beats "not augefs", so that a damaged image is not called foreign.
pub fn choose(block0: &[u8], block1: &[u8]) -> Result<SuperblockChoice, FormatError> {
    let results = [Superblock::decode(block0, 0), Superblock::decode(block1, 1)];
    let best = results
        .iter()
        .enumerate()
        .filter_map(|(i, r)| r.as_ref().ok().map(|sb| (i, sb)))
        .max_by_key(|(i, sb)| (sb.sequence, std::cmp::Reverse(*i)));
    match best {
        Some((i, sb)) => Ok(SuperblockChoice {
            superblock: sb.clone(),
            copy_index: i as u32,
            copy_errors: [results[0].clone().err(), results[1].clone().err()],
        }),
        None => {
            let rank = |e: &FormatError| match e {
                FormatError::UnsupportedVersion { .. } => 0,
                FormatError::Corruption(_) => 1,
                _ => 2,
            };
            let errors = results.map(|r| r.expect_err("no valid copy"));
            Err(errors.into_iter().min_by_key(rank).expect("two copies"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Superblock {
        Superblock::new(
            Geometry::compute(256 * MIB, 4).unwrap(),
            [7; 16],
            1_700_000_000_000_000_000,
            0,
        )
    }

    #[test]
    fn round_trip_both_copies() {
        let sb = sample();
        for copy in 0..2 {
            let buf = sb.encode(copy);
            assert_eq!(buf.len(), BLOCK_SIZE_BYTES as usize);
            assert!(buf[SUPERBLOCK_BYTES..].iter().all(|&b| b == 0));
            assert_eq!(Superblock::decode(&buf, copy).unwrap(), sb);
        }
    }

    #[test]
    fn labels_round_trip_and_an_older_image_has_none() {
        let mut sb = sample();
        let old = sb.encode(0);
        assert!(
            F_LABEL.bytes(&old).iter().all(|&b| b == 0),
            "was reserved, zero"
        );
        assert_eq!(Superblock::decode(&old, 0).unwrap().label, "");
        for label in ["data", "é-64", &"x".repeat(LABEL_BYTES_MAX)] {
            sb.label = label.to_string();
            assert_eq!(Superblock::decode(&sb.encode(1), 1).unwrap().label, label);
        }
        for bad in ["a b", "a/b", "a\0b", &"x".repeat(LABEL_BYTES_MAX + 1)] {
            assert!(Superblock::check_label(bad).is_err(), "{bad:?}");
        }
        // A copy whose label bytes are not a label (the checksum resealed over them) is
        // refused, as any field out of bounds: what decodes must encode again.
        for bad in [&b"a/b"[..], b"\xff\xfe", b"a b"] {
            let mut buf = sb.encode(0);
            buf[F_LABEL.offset..F_LABEL.offset + LABEL_BYTES_MAX].fill(0);
            buf[F_LABEL.offset..F_LABEL.offset + bad.len()].copy_from_slice(bad);
            let crc = crc32c(&buf[..F_CHECKSUM.offset]);
            F_CHECKSUM.put_u32(&mut buf, crc);
            assert!(Superblock::decode(&buf, 0).is_err(), "{bad:?}");
        }
    }

    /// Reseals `buf`'s checksum (a copy damaged where the checksum still matches).
    fn reseal(buf: &mut [u8]) {
        let crc = crc32c(&buf[..F_CHECKSUM.offset]);
        F_CHECKSUM.put_u32(buf, crc);
    }

    #[test]
    fn a_grown_layout_round_trips_and_a_wrong_one_is_refused() {
        let mut sb = sample();
        let plain = sb.encode(0);
        assert!(F_LAYOUT_SIZE.bytes(&plain).iter().all(|&b| b == 0));
        assert!(F_GROWN_SIZES.bytes(&plain).iter().all(|&b| b == 0));
        sb.geometry = sb
            .geometry
            .with_area(GIB)
            .unwrap()
            .with_area(2 * GIB)
            .unwrap();
        sb.feature_flags |= FEATURE_GROWN;
        let buf = sb.encode(1);
        assert_eq!(F_FEATURES.get_u32(&buf) & FEATURE_GROWN, FEATURE_GROWN);
        assert_eq!(Superblock::decode(&buf, 1).unwrap(), sb);
        let at = |i: usize| F_GROWN_SIZES.offset + 8 * i;
        type Damage<'a> = &'a dyn Fn(&mut Vec<u8>);
        let damaged: [Damage; 5] = [
            // Not ascending, the last not the device size, one size too many, another
            // layout size, no flag.
            &|b| b[at(0)..at(1)].copy_from_slice(&(3 * GIB).to_le_bytes()),
            &|b| b[at(1)..at(2)].copy_from_slice(&(GIB + GIB / 2).to_le_bytes()),
            &|b| b[at(2)..at(3)].copy_from_slice(&(4 * GIB).to_le_bytes()),
            &|b| F_LAYOUT_SIZE.put_u64(b, 512 * MIB),
            &|b| {
                let flags = F_FEATURES.get_u32(b);
                F_FEATURES.put_u32(b, flags & !FEATURE_GROWN);
            },
        ];
        for (i, damage) in damaged.iter().enumerate() {
            let mut b = buf.clone();
            damage(&mut b);
            reseal(&mut b);
            assert!(
                matches!(Superblock::decode(&b, 1), Err(FormatError::Corruption(_))),
                "damage {i}"
            );
        }
    }

    #[test]
    fn detects_foreign_corrupt_and_future_images() {
        let sb = sample();
        assert!(matches!(
            Superblock::decode(&[0u8; 4096], 0),
            Err(FormatError::NotAugefs { .. })
        ));
        let mut flipped = sb.encode(0);
        flipped[F_DEVICE_SIZE.offset] ^= 1;
        assert!(matches!(
            Superblock::decode(&flipped, 0),
            Err(FormatError::Corruption(_))
        ));
        let mut future = sb.encode(0);
        F_FORMAT_VERSION.put_u32(&mut future, 9);
        let crc = crc32c(&future[..F_CHECKSUM.offset]);
        F_CHECKSUM.put_u32(&mut future, crc);
        assert_eq!(
            Superblock::decode(&future, 0),
            Err(FormatError::UnsupportedVersion {
                found: 9,
                supported: FORMAT_VERSION
            })
        );
        // A copy read from the wrong block is rejected (misdirected write).
        assert!(matches!(
            Superblock::decode(&sb.encode(0), 1),
            Err(FormatError::Corruption(_))
        ));
    }

    #[test]
    fn choose_prefers_valid_and_newest() {
        let mut sb = sample();
        let old0 = sb.encode(0);
        sb.sequence = 2;
        let new1 = sb.encode(1);
        let choice = choose(&old0, &new1).unwrap();
        assert_eq!(choice.copy_index, 1);
        assert_eq!(choice.superblock.sequence, 2);

        let mut bad0 = old0.clone();
        bad0[100] ^= 0xff;
        let choice = choose(&bad0, &new1).unwrap();
        assert_eq!(choice.copy_index, 1);
        assert!(matches!(
            choice.copy_errors[0],
            Some(FormatError::Corruption(_))
        ));

        let mut bad1 = new1.clone();
        bad1[100] ^= 0xff;
        assert!(matches!(
            choose(&bad0, &bad1),
            Err(FormatError::Corruption(_))
        ));
        assert!(matches!(
            choose(&[0; 4096], &[0; 4096]),
            Err(FormatError::NotAugefs { .. })
        ));
    }
}
