//! The manifest's byte layouts (docs/FORMAT.md §5.4): half headers, record frames,
//! edits and their parts.

use crate::batch::KEY_BYTES_MAX;
use format::layout::{Field, StructLayout};

// ---- Byte layouts (docs/FORMAT.md §5.4) ----

pub const MAGIC: [u8; 8] = *b"AUGEMNF\0";
/// The half header occupies the first 64 bytes of the half's first 4 KiB block.
pub const HEADER_BLOCK_BYTES: u64 = 4096;
/// Smallest half: the header block and one block of records.
pub const HALF_BYTES_MIN: u64 = 2 * HEADER_BLOCK_BYTES;

pub const H_MAGIC: Field = Field::at("magic", 0, 8);
pub const H_FORMAT_VERSION: Field = Field::after(H_MAGIC, "format_version", 4);
pub const H_HALF: Field = Field::after(H_FORMAT_VERSION, "half", 4);
pub const H_EPOCH: Field = Field::after(H_HALF, "epoch", 8);
pub const H_HALF_BYTES: Field = Field::after(H_EPOCH, "half_bytes", 8);
pub const H_SNAPSHOT_LEN: Field = Field::after(H_HALF_BYTES, "snapshot_len", 4);
pub const H_SNAPSHOT_CRC: Field = Field::after(H_SNAPSHOT_LEN, "snapshot_crc", 4);
pub const H_RESERVED: Field = Field::after(H_SNAPSHOT_CRC, "reserved", 20);
pub const H_CHECKSUM: Field = Field::after(H_RESERVED, "header_crc", 4);
pub const HEADER_BYTES: usize = 64;
pub const HEADER_LAYOUT: StructLayout = StructLayout {
    name: "Manifest half header",
    size: HEADER_BYTES,
    fields: &[
        H_MAGIC,
        H_FORMAT_VERSION,
        H_HALF,
        H_EPOCH,
        H_HALF_BYTES,
        H_SNAPSHOT_LEN,
        H_SNAPSHOT_CRC,
        H_RESERVED,
        H_CHECKSUM,
    ],
};

pub const R_PAYLOAD_LEN: Field = Field::at("payload_len", 0, 4);
pub const R_CRC: Field = Field::after(R_PAYLOAD_LEN, "crc", 4);
pub const R_EPOCH: Field = Field::after(R_CRC, "epoch", 8);
pub const R_INDEX: Field = Field::after(R_EPOCH, "index", 4);
pub const R_PREV_CRC: Field = Field::after(R_INDEX, "prev_crc", 4);
pub const R_KIND: Field = Field::after(R_PREV_CRC, "kind", 1);
pub const R_RESERVED: Field = Field::after(R_KIND, "reserved", 7);
pub const FRAME_BYTES: usize = 32;
pub const FRAME_LAYOUT: StructLayout = StructLayout {
    name: "Manifest record frame",
    size: FRAME_BYTES,
    fields: &[
        R_PAYLOAD_LEN,
        R_CRC,
        R_EPOCH,
        R_INDEX,
        R_PREV_CRC,
        R_KIND,
        R_RESERVED,
    ],
};
pub const KIND_SNAPSHOT: u8 = 1;
pub const KIND_EDIT: u8 = 2;

pub const E_FLAGS: Field = Field::at("flags", 0, 4);
pub const E_REMOVED_COUNT: Field = Field::after(E_FLAGS, "removed_count", 4);
pub const E_ADDED_COUNT: Field = Field::after(E_REMOVED_COUNT, "added_count", 4);
pub const E_CURSOR_COUNT: Field = Field::after(E_ADDED_COUNT, "cursor_count", 4);
pub const E_FLUSHED_GENERATION: Field = Field::after(E_CURSOR_COUNT, "flushed_generation", 8);
pub const E_LAST_SEQ: Field = Field::after(E_FLUSHED_GENERATION, "last_seq", 8);
pub const E_NEXT_TABLE_ID: Field = Field::after(E_LAST_SEQ, "next_table_id", 8);
pub const EDIT_HEADER_BYTES: usize = 40;
pub const EDIT_HEADER_LAYOUT: StructLayout = StructLayout {
    name: "Manifest edit header",
    size: EDIT_HEADER_BYTES,
    fields: &[
        E_FLAGS,
        E_REMOVED_COUNT,
        E_ADDED_COUNT,
        E_CURSOR_COUNT,
        E_FLUSHED_GENERATION,
        E_LAST_SEQ,
        E_NEXT_TABLE_ID,
    ],
};
pub const FLAG_FLUSHED_GENERATION: u32 = 1;
pub const FLAG_LAST_SEQ: u32 = 2;
pub const FLAG_NEXT_TABLE_ID: u32 = 4;
pub(super) const FLAGS_ALL: u32 = FLAG_FLUSHED_GENERATION | FLAG_LAST_SEQ | FLAG_NEXT_TABLE_ID;

pub const D_LEVEL: Field = Field::at("level", 0, 4);
pub const D_TABLE_ID: Field = Field::after(D_LEVEL, "table_id", 8);
pub const REMOVED_BYTES: usize = 12;
pub const REMOVED_LAYOUT: StructLayout = StructLayout {
    name: "Manifest removed table",
    size: REMOVED_BYTES,
    fields: &[D_LEVEL, D_TABLE_ID],
};

pub const T_TABLE_ID: Field = Field::at("table_id", 0, 8);
pub const T_ENTRIES: Field = Field::after(T_TABLE_ID, "entries", 8);
pub const T_SMALLEST_SEQ: Field = Field::after(T_ENTRIES, "smallest_seq", 8);
pub const T_LARGEST_SEQ: Field = Field::after(T_SMALLEST_SEQ, "largest_seq", 8);
pub const T_LEVEL: Field = Field::after(T_LARGEST_SEQ, "level", 4);
pub const T_SEGMENT: Field = Field::after(T_LEVEL, "segment", 4);
pub const T_LEN_BYTES: Field = Field::after(T_SEGMENT, "len_bytes", 4);
pub const T_SMALLEST_KEY_LEN: Field = Field::after(T_LEN_BYTES, "smallest_key_len", 2);
pub const T_LARGEST_KEY_LEN: Field = Field::after(T_SMALLEST_KEY_LEN, "largest_key_len", 2);
pub const T_SMALLEST_KIND: Field = Field::after(T_LARGEST_KEY_LEN, "smallest_kind", 1);
pub const T_LARGEST_KIND: Field = Field::after(T_SMALLEST_KIND, "largest_kind", 1);
pub const T_RESERVED: Field = Field::after(T_LARGEST_KIND, "reserved", 2);
pub const TABLE_BYTES: usize = 52;
pub const TABLE_LAYOUT: StructLayout = StructLayout {
    name: "Manifest added table",
    size: TABLE_BYTES,
    fields: &[
        T_TABLE_ID,
        T_ENTRIES,
        T_SMALLEST_SEQ,
        T_LARGEST_SEQ,
        T_LEVEL,
        T_SEGMENT,
        T_LEN_BYTES,
        T_SMALLEST_KEY_LEN,
        T_LARGEST_KEY_LEN,
        T_SMALLEST_KIND,
        T_LARGEST_KIND,
        T_RESERVED,
    ],
};

pub const C_LEVEL: Field = Field::at("level", 0, 4);
pub const C_KEY_LEN: Field = Field::after(C_LEVEL, "key_len", 2);
pub const C_RESERVED: Field = Field::after(C_KEY_LEN, "reserved", 2);
pub const CURSOR_BYTES: usize = 8;
pub const CURSOR_LAYOUT: StructLayout = StructLayout {
    name: "Manifest compaction cursor",
    size: CURSOR_BYTES,
    fields: &[C_LEVEL, C_KEY_LEN, C_RESERVED],
};

const _: () = assert!(H_CHECKSUM.end() == HEADER_BYTES);
const _: () = assert!(R_RESERVED.end() == FRAME_BYTES);
const _: () = assert!(E_NEXT_TABLE_ID.end() == EDIT_HEADER_BYTES);
const _: () = assert!(D_TABLE_ID.end() == REMOVED_BYTES);
const _: () = assert!(T_RESERVED.end() == TABLE_BYTES);
const _: () = assert!(C_RESERVED.end() == CURSOR_BYTES);
const _: () = assert!(
    KEY_BYTES_MAX <= u16::MAX as usize,
    "key lengths are stored in 2 bytes"
);
const _: () = assert!(HEADER_BYTES as u64 <= HEADER_BLOCK_BYTES);

/// Every fixed-size structure of the manifest, as its table in docs/FORMAT.md §5.4.
pub fn layouts() -> Vec<StructLayout> {
    vec![
        HEADER_LAYOUT,
        FRAME_LAYOUT,
        EDIT_HEADER_LAYOUT,
        REMOVED_LAYOUT,
        TABLE_LAYOUT,
        CURSOR_LAYOUT,
    ]
}
