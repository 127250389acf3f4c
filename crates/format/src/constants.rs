//! Format constants. Units are last in every name. See docs/FORMAT.md §1.

/// Version of the on-disk format this build reads and writes.
pub const FORMAT_VERSION: u32 = 1;

pub const KIB: u64 = 1024;
pub const MIB: u64 = 1024 * KIB;
pub const GIB: u64 = 1024 * MIB;

/// The file-system block: unit of data, node and summary addressing.
pub const BLOCK_SIZE_BYTES: u64 = 4 * KIB;
/// The smallest write the format ever issues (superblock body, small WAL records).
pub const SECTOR_SIZE_BYTES: u64 = 512;
/// The unit of space allocation to domains and to MetaDB tables.
pub const SEGMENT_SIZE_BYTES: u64 = 2 * MIB;
pub const BLOCKS_PER_SEGMENT: u64 = SEGMENT_SIZE_BYTES / BLOCK_SIZE_BYTES;

/// Superblock copies live in blocks 0 and 1.
pub const SUPERBLOCK_COPIES: u64 = 2;
/// Bytes of a superblock copy that carry data (the rest of its block is zero).
pub const SUPERBLOCK_BYTES: usize = 512;

/// A checkpoint slot: header + payload + trailer, written in one IO.
pub const CHECKPOINT_SLOT_BYTES: u64 = 16 * KIB;
pub const CHECKPOINT_SLOT_BLOCKS: u64 = CHECKPOINT_SLOT_BYTES / BLOCK_SIZE_BYTES;
/// Two slots per checkpoint owner (the global checkpoint and each domain).
pub const CHECKPOINT_SLOTS_PER_OWNER: u64 = 2;
/// The checkpoint region starts at block 4 so that slots are 16 KiB aligned.
pub const CHECKPOINT_REGION_START_BLOCK: u64 = 4;

/// MetaDB manifest region (two halves used in turn).
pub const MANIFEST_REGION_BYTES: u64 = 4 * MIB;
pub const MANIFEST_REGION_ALIGN_BYTES: u64 = MIB;

/// MetaDB WAL backing region: the ssd-mode WAL, and where a small PMR's full half migrates.
/// Sized as device / 32, clamped to these bounds, a multiple of a segment.
pub const WAL_REGION_BYTES_MIN: u64 = 8 * MIB;
pub const WAL_REGION_BYTES_MAX: u64 = 256 * MIB;
pub const WAL_REGION_DEVICE_FRACTION: u64 = 32;

/// Segment summary: 2 blocks per segment.
pub const SUMMARY_BLOCKS_PER_SEGMENT: u64 = 2;
pub const SUMMARY_BYTES: usize = (SUMMARY_BLOCKS_PER_SEGMENT * BLOCK_SIZE_BYTES) as usize;

pub const DEVICE_SIZE_MIN_BYTES: u64 = 64 * MIB;
pub const DOMAIN_COUNT_MAX: u32 = 256;
pub const DOMAIN_COUNT_DEFAULT: u32 = 16;
/// A domain needs room for its active data and node segments plus GC headroom.
pub const SEGMENTS_PER_DOMAIN_MIN: u64 = 4;

/// PMR: header block, WAL slot block, WAL data area, write-version area at the end.
pub const PMR_SIZE_MIN_BYTES: u64 = 2 * MIB;
pub const PMR_SIZE_DEFAULT_BYTES: u64 = 64 * MIB;
pub const PMR_HEADER_BYTES: u64 = 4 * KIB;
pub const PMR_SLOT_AREA_BYTES: u64 = 4 * KIB;
pub const PMR_LINE_BYTES: u64 = 64;
pub const PMR_CPU_COUNT_MAX: u64 = 256;
pub const PMR_WRITE_VER_AREA_BYTES: u64 = PMR_CPU_COUNT_MAX * PMR_LINE_BYTES;

const _: () = assert!(SEGMENT_SIZE_BYTES % BLOCK_SIZE_BYTES == 0);
const _: () = assert!(BLOCKS_PER_SEGMENT == 512);
const _: () = assert!(BLOCK_SIZE_BYTES % SECTOR_SIZE_BYTES == 0);
const _: () = assert!(SUPERBLOCK_BYTES as u64 == SECTOR_SIZE_BYTES);
const _: () = assert!(CHECKPOINT_SLOT_BYTES % BLOCK_SIZE_BYTES == 0);
const _: () = assert!(WAL_REGION_BYTES_MIN % SEGMENT_SIZE_BYTES == 0);
const _: () = assert!(WAL_REGION_BYTES_MAX % SEGMENT_SIZE_BYTES == 0);
const _: () =
    assert!(PMR_SIZE_MIN_BYTES > PMR_HEADER_BYTES + PMR_SLOT_AREA_BYTES + PMR_WRITE_VER_AREA_BYTES);
const _: () = assert!(
    PMR_SLOT_AREA_BYTES / 8 >= 64,
    "room for at least 64 WAL file slots"
);
