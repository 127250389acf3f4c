//! Targets for the fixed structures of the device and the PMR (crates/format;
//! docs/FORMAT.md §2-§4, §6, §7), and the engine's reading of checkpoint payloads.

use crate::driver::{Outcome, Target, CI_CASES};
use engine::image::{OwnerCheckpoint, SlotState};
use engine::log::keys::DomainRecord;
use format::checkpoint::{CheckpointSlot, HEADER_BYTES as CKPT_HEADER_BYTES, PAYLOAD_BYTES_MAX};
use format::checksum::{crc32c, crc32c_skipping};
use format::constants::SUMMARY_BYTES;
use format::constants::{BLOCK_SIZE_BYTES, CHECKPOINT_SLOT_BYTES, MIB, SUPERBLOCK_BYTES};
use format::geometry::CheckpointOwner;
use format::pmr::{PmrHeader, PmrLayout};
use format::summary::{SegmentKind, SegmentSummary, SummaryEntry};
use format::superblock::{self, Superblock};
use format::{DomainId, Geometry, InodeNo, SegmentNo};

/// `data` as a buffer of exactly `len` bytes: callers always hand decoders whole blocks
/// or slots (a shorter buffer is a caller bug they assert), so the input is cut or
/// zero-padded to the size read from the device.
fn sized(data: &[u8], len: usize) -> Vec<u8> {
    let mut buf = data[..data.len().min(len)].to_vec();
    buf.resize(len, 0);
    buf
}

fn put_u32(buf: &mut [u8], at: usize, v: u32) {
    if at + 4 <= buf.len() {
        buf[at..at + 4].copy_from_slice(&v.to_le_bytes());
    }
}

fn outcome(decoded: bool) -> Outcome {
    if decoded {
        Outcome::Decoded
    } else {
        Outcome::Rejected
    }
}

// ---- Superblock ----

fn superblock_seeds() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for (size, domains, pmr) in [
        (64 * MIB, 1, 0),
        (1024 * MIB, 16, 0),
        (256 * MIB, 4, 64 * MIB),
    ] {
        let g = Geometry::compute(size, domains).expect("valid geometry");
        let sb = Superblock::new(g, [5; 16], 1_700_000_000_000_000_000, pmr);
        out.push(sb.encode(out.len() as u32 % 2));
    }
    out
}

fn superblock_reseal(buf: &mut [u8]) {
    if buf.len() >= SUPERBLOCK_BYTES {
        let crc = crc32c(&buf[..SUPERBLOCK_BYTES - 4]);
        put_u32(buf, SUPERBLOCK_BYTES - 4, crc);
    }
}

fn superblock_check(data: &[u8]) -> Outcome {
    let block = sized(data, BLOCK_SIZE_BYTES as usize);
    let mut decoded = false;
    for copy in 0..2 {
        if let Ok(sb) = Superblock::decode(&block, copy) {
            sb.geometry.assert_valid();
            assert_eq!(
                Superblock::decode(&sb.encode(copy), copy),
                Ok(sb),
                "round trip"
            );
            decoded = true;
        }
    }
    let _ = superblock::choose(&block, &block);
    outcome(decoded)
}

// ---- Geometry from a superblock's size and domain count ----

fn geometry_seeds() -> Vec<Vec<u8>> {
    [(64 * MIB, 1u32), (3 << 30, 16), (1 << 40, 256)]
        .iter()
        .map(|&(size, domains)| {
            let mut v = size.to_le_bytes().to_vec();
            v.extend_from_slice(&domains.to_le_bytes());
            v
        })
        .collect()
}

fn geometry_check(data: &[u8]) -> Outcome {
    let buf = sized(data, 12);
    let size = u64::from_le_bytes(buf[..8].try_into().expect("8 bytes"));
    let domains = u32::from_le_bytes(buf[8..].try_into().expect("4 bytes"));
    match Geometry::compute(size, domains) {
        Ok(g) => {
            g.assert_valid();
            assert!(g.device_size_bytes <= size);
            Outcome::Decoded
        }
        Err(_) => Outcome::Rejected,
    }
}

// ---- Checkpoint slots, and the payload the engine reads from them ----

fn checkpoint_seeds() -> Vec<Vec<u8>> {
    let record = DomainRecord {
        durable_seq: 40,
        issued_seq: 44,
        elapsed_ns: 9_000_000_000,
    };
    vec![
        CheckpointSlot {
            owner: CheckpointOwner::Domain(DomainId(3)),
            payload_version: 1,
            sequence: 7,
            payload: record.encode().to_vec(),
        }
        .encode(),
        CheckpointSlot {
            owner: CheckpointOwner::Global,
            payload_version: 0,
            sequence: 1,
            payload: Vec::new(),
        }
        .encode(),
        CheckpointSlot {
            owner: CheckpointOwner::Domain(DomainId(0)),
            payload_version: 1,
            sequence: u64::MAX,
            payload: vec![0xa5; PAYLOAD_BYTES_MAX],
        }
        .encode(),
        vec![0u8; CHECKPOINT_SLOT_BYTES as usize],
    ]
}

/// Header fields at their FORMAT.md §4 offsets.
const CKPT_PAYLOAD_LEN_AT: usize = 24;
const CKPT_PAYLOAD_CRC_AT: usize = 28;
const CKPT_TRAILER_PAYLOAD_CRC_AT: usize = 16;

fn checkpoint_reseal(buf: &mut [u8]) {
    let slot = CHECKPOINT_SLOT_BYTES as usize;
    if buf.len() != slot {
        return;
    }
    let len = u32::from_le_bytes(
        buf[CKPT_PAYLOAD_LEN_AT..CKPT_PAYLOAD_LEN_AT + 4]
            .try_into()
            .expect("4 bytes"),
    ) as usize;
    let trailer = slot - 64;
    if len <= PAYLOAD_BYTES_MAX {
        let crc = crc32c(&buf[CKPT_HEADER_BYTES..CKPT_HEADER_BYTES + len]);
        put_u32(buf, CKPT_PAYLOAD_CRC_AT, crc);
        put_u32(buf, trailer + CKPT_TRAILER_PAYLOAD_CRC_AT, crc);
    }
    let crc = crc32c(&buf[..60]);
    put_u32(buf, 60, crc);
    let crc = crc32c_skipping(&buf[trailer..], 60);
    put_u32(buf, trailer + 60, crc);
}

fn checkpoint_check(data: &[u8]) -> Outcome {
    let buf = sized(data, CHECKPOINT_SLOT_BYTES as usize);
    let cp = match CheckpointSlot::decode(&buf, "fuzz slot") {
        Ok(Some(cp)) => cp,
        Ok(None) => return Outcome::Decoded,
        Err(_) => return Outcome::Rejected,
    };
    assert_eq!(
        CheckpointSlot::decode(&cp.encode(), "again"),
        Ok(Some(cp.clone())),
        "round trip"
    );
    // The engine reads the domain's watermark from the payload, as a mount does.
    let domain_count = match cp.owner {
        CheckpointOwner::Domain(d) => u32::from(d.0) + 1,
        CheckpointOwner::Global => 1,
    };
    let owner = OwnerCheckpoint {
        owner: cp.owner,
        slots: [SlotState::Empty, SlotState::Empty],
        current_slot: Some(0),
        current: Some(cp),
    };
    let _ = engine::log::checkpoint_watermarks(&[owner], domain_count);
    Outcome::Decoded
}

// ---- Segment summaries ----

const SUMMARY_SEGMENT: SegmentNo = SegmentNo(5);

fn summary_seeds() -> Vec<Vec<u8>> {
    let entries = (0..512u32)
        .map(|i| SummaryEntry {
            owner_ino: InodeNo(u64::from(i % 7)),
            index: i * 3,
        })
        .collect();
    vec![
        SegmentSummary {
            segment: SUMMARY_SEGMENT,
            domain: DomainId(2),
            kind: SegmentKind::Data,
            checkpoint_sequence: 9,
            entries,
        }
        .encode(),
        SegmentSummary {
            segment: SUMMARY_SEGMENT,
            domain: DomainId(0),
            kind: SegmentKind::Table,
            checkpoint_sequence: 1,
            entries: Vec::new(),
        }
        .encode(),
    ]
}

fn summary_reseal(buf: &mut [u8]) {
    if buf.len() == SUMMARY_BYTES {
        let crc = crc32c_skipping(buf, 60);
        put_u32(buf, 60, crc);
    }
}

fn summary_check(data: &[u8]) -> Outcome {
    let buf = sized(data, SUMMARY_BYTES);
    match SegmentSummary::decode(&buf, SUMMARY_SEGMENT) {
        Ok(s) => {
            assert_eq!(
                SegmentSummary::decode(&s.encode(), SUMMARY_SEGMENT),
                Ok(s),
                "round trip"
            );
            Outcome::Decoded
        }
        Err(_) => Outcome::Rejected,
    }
}

// ---- PMR header ----

fn pmr_header_seeds() -> Vec<Vec<u8>> {
    [2 * MIB, 64 * MIB, 1 << 30]
        .iter()
        .map(|&size| {
            PmrHeader {
                fs_uuid: [9; 16],
                layout: PmrLayout::compute(size).expect("valid PMR size"),
            }
            .encode()
        })
        .collect()
}

fn pmr_header_reseal(buf: &mut [u8]) {
    if buf.len() >= 128 {
        let crc = crc32c(&buf[..124]);
        put_u32(buf, 124, crc);
    }
}

fn pmr_header_check(data: &[u8]) -> Outcome {
    let buf = sized(data, 4096);
    match PmrHeader::decode(&buf) {
        Ok(h) => {
            assert_eq!(PmrHeader::decode(&h.encode()), Ok(h), "round trip");
            Outcome::Decoded
        }
        Err(_) => Outcome::Rejected,
    }
}

fn no_reseal(_: &mut [u8]) {}

pub fn targets() -> Vec<Target> {
    vec![
        Target {
            name: "superblock",
            seeds: superblock_seeds,
            reseal: superblock_reseal,
            check: superblock_check,
            len_max: BLOCK_SIZE_BYTES as usize,
            ci_cases: CI_CASES,
        },
        Target {
            name: "geometry",
            seeds: geometry_seeds,
            reseal: no_reseal,
            check: geometry_check,
            len_max: 12,
            ci_cases: CI_CASES,
        },
        Target {
            name: "checkpoint_slot",
            seeds: checkpoint_seeds,
            reseal: checkpoint_reseal,
            check: checkpoint_check,
            len_max: CHECKPOINT_SLOT_BYTES as usize,
            ci_cases: CI_CASES,
        },
        Target {
            name: "segment_summary",
            seeds: summary_seeds,
            reseal: summary_reseal,
            check: summary_check,
            len_max: SUMMARY_BYTES,
            ci_cases: CI_CASES,
        },
        Target {
            name: "pmr_header",
            seeds: pmr_header_seeds,
            reseal: pmr_header_reseal,
            check: pmr_header_check,
            len_max: 4096,
            ci_cases: CI_CASES,
        },
    ]
}
