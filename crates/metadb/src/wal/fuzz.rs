//! Entry points for fuzzing the WAL's decoders (docs/FORMAT.md §5.2), compiled with the
//! `fuzz` feature only: the decoders are private to the WAL, and the fuzz targets
//! (crates/fuzzing, fuzz/) reach them through these. Each target has valid encodings to
//! start from, a reseal that recomputes the checksums of mutated bytes (so a mutation
//! reaches the fields behind them), and a check that runs the decoder exactly as
//! recovery runs it and asserts that what decodes re-encodes to the same bytes.
//! A check returns whether the input decoded.

use super::chunk::parse_chunk;
use super::pmr::scan::scan_bytes;
use super::record::{
    decode_record, encode_entry, encode_record, entry_txb, ChunkHeader, ChunkKind, RecordId,
    RegionHeader, Slot, CHUNK_DATA_OFFSET, CHUNK_HEADER_BYTES, ENTRY_ALIGN_BYTES,
    ENTRY_TRAILER_BYTES, PAYLOAD_BYTES_MAX, RECORD_HEADER_BYTES, REGION_HEADER_BYTES,
    SLOT_OFFSET_LIMIT,
};
use super::recovery::Collector;

fn put_u32(buf: &mut [u8], at: usize, v: u32) {
    buf[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn get_u32(buf: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(buf[at..at + 4].try_into().expect("4 bytes"))
}

// ---- WAL region header ----

pub fn region_header_seeds() -> Vec<Vec<u8>> {
    [(0, 1, 1536, 2048), (1, u64::MAX, 9728, 8192)]
        .iter()
        .map(|&(copy_index, incarnation, start, count)| {
            let mut buf = vec![0u8; REGION_HEADER_BYTES];
            RegionHeader {
                copy_index,
                incarnation,
                region_start_block: start,
                region_block_count: count,
            }
            .encode(&mut buf);
            buf
        })
        .collect()
}

pub fn region_header_reseal(buf: &mut [u8]) {
    if buf.len() >= REGION_HEADER_BYTES {
        let crc = crc32c::crc32c(&buf[..REGION_HEADER_BYTES - 4]);
        put_u32(buf, REGION_HEADER_BYTES - 4, crc);
    }
}

pub fn region_header_check(buf: &[u8]) -> bool {
    let Some(h) = RegionHeader::decode(buf) else {
        return false;
    };
    let mut again = vec![0u8; REGION_HEADER_BYTES];
    h.encode(&mut again);
    assert_eq!(RegionHeader::decode(&again), Some(h), "round trip");
    true
}

// ---- Chunks of the device WAL: header sector, then records ----

fn chunk_seed(kind: ChunkKind, payloads: &[&[u8]]) -> Vec<u8> {
    let header = ChunkHeader {
        incarnation: 2,
        generation: 5,
        lane: 3,
        kind,
        unit_index: 1,
        unit_count: 1,
    };
    let mut buf = vec![0u8; CHUNK_DATA_OFFSET];
    let crc = header.encode(&mut buf);
    for (i, payload) in payloads.iter().enumerate() {
        let at = buf.len();
        buf.resize(at + RECORD_HEADER_BYTES + payload.len(), 0);
        let id = RecordId {
            generation: 5,
            lane: 3,
            lane_seq: i as u64,
            durable: i as u64,
        };
        encode_record(&mut buf[at..], id, crc, payload);
    }
    buf.resize(buf.len() + 64, 0);
    buf
}

pub fn chunk_seeds() -> Vec<Vec<u8>> {
    vec![
        chunk_seed(ChunkKind::Lane, &[b"", b"one record", &[7u8; 300], b"x"]),
        chunk_seed(ChunkKind::Migrated, &[&[1u8; 1000]]),
        chunk_seed(ChunkKind::Lane, &[]),
    ]
}

/// Recomputes the chunk header's CRC, then walks the records as recovery does, giving
/// each the header's CRC and a correct record CRC.
pub fn chunk_reseal(buf: &mut [u8]) {
    if buf.len() < CHUNK_HEADER_BYTES {
        return;
    }
    let crc = crc32c::crc32c(&buf[..CHUNK_HEADER_BYTES - 4]);
    put_u32(buf, CHUNK_HEADER_BYTES - 4, crc);
    let mut at = CHUNK_DATA_OFFSET;
    while at + RECORD_HEADER_BYTES <= buf.len() {
        let payload_len = get_u32(buf, at + 8) as usize;
        let end = at + RECORD_HEADER_BYTES + payload_len;
        if payload_len > PAYLOAD_BYTES_MAX || end > buf.len() {
            break;
        }
        put_u32(buf, at + 12, crc);
        let record_crc = crc32c::crc32c(&buf[at + 4..end]);
        put_u32(buf, at, record_crc);
        at = end;
    }
}

/// A chunk buffer as recovery reads it: whole units, so at least the header sector.
pub fn chunk_check(data: &[u8]) -> bool {
    let mut buf = data.to_vec();
    if buf.len() < CHUNK_DATA_OFFSET {
        buf.resize(CHUNK_DATA_OFFSET, 0);
    }
    let Some((header, crc)) = ChunkHeader::decode(&buf) else {
        return false;
    };
    // Padding and reserved bytes are ignored on read (FORMAT.md §1): the round trip is
    // of the decoded value.
    let mut again = vec![0u8; CHUNK_HEADER_BYTES];
    header.encode(&mut again);
    assert_eq!(
        ChunkHeader::decode(&again).map(|(h, _)| h),
        Some(header),
        "header round trip"
    );
    let mut collector = Collector::new(0);
    let _ = parse_chunk(&buf, &header, crc, &mut collector);
    // Every record that decodes re-encodes to its own bytes.
    let mut at = CHUNK_DATA_OFFSET;
    while let Some((id, payload, len)) = decode_record(&buf[at..], &header, crc) {
        let mut out = vec![0u8; len];
        encode_record(
            &mut out,
            id,
            crc,
            &buf[at + payload.start..at + payload.end],
        );
        assert_eq!(out[..], buf[at..at + len], "record round trip");
        at += len;
    }
    let _ = collector.finish();
    true
}

// ---- PMR entries: a range of the PMR's WAL data area ----

pub fn pmr_entries_seeds() -> Vec<Vec<u8>> {
    let mut range = Vec::new();
    let mut entry = Vec::new();
    for (i, payload) in [&b""[..], b"payload", &[9u8; 200], &[3u8; 57]]
        .iter()
        .enumerate()
    {
        let id = RecordId {
            generation: 4,
            lane: i as u16,
            lane_seq: i as u64,
            durable: i as u64,
        };
        encode_entry(&mut entry, id, payload);
        range.extend_from_slice(&entry);
        if i == 1 {
            // A torn line between entries: the scan steps over it.
            range.extend_from_slice(&[0u8; ENTRY_ALIGN_BYTES]);
        }
    }
    vec![range, vec![0u8; 4 * ENTRY_ALIGN_BYTES]]
}

/// Gives every TxB that announces a plausible length a correct TxE and CRC.
pub fn pmr_entries_reseal(buf: &mut [u8]) {
    let mut at = 0;
    while at + ENTRY_ALIGN_BYTES <= buf.len() {
        match entry_txb(&buf[at..]) {
            Some(total) if at + total <= buf.len() => {
                let body = at + total - ENTRY_TRAILER_BYTES;
                let crc = crc32c::crc32c(&buf[at..body]);
                put_u32(buf, body, crc);
                put_u32(buf, body + 4, u32::from_le_bytes(*b"WTXE"));
                at += total;
            }
            _ => at += ENTRY_ALIGN_BYTES,
        }
    }
}

/// Scans the bytes as recovery scans a slot's range; every entry found re-encodes to
/// the bytes it was found in. Decoded means at least one entry was found, or the range
/// is all zero (a valid empty range).
pub fn pmr_entries_check(data: &[u8]) -> bool {
    // Scanned ranges are whole 64-byte lines.
    let mut data = data.to_vec();
    data.resize(data.len().next_multiple_of(ENTRY_ALIGN_BYTES), 0);
    let data = &data[..];
    let scan = scan_bytes(data, 8192);
    assert!(scan.written_end >= 8192 && scan.written_end <= 8192 + data.len() as u64);
    // Padding and the reserved field are covered by the CRC but not interpreted: the
    // round trip is of the decoded entry.
    let mut entry = Vec::new();
    for (id, payload) in &scan.entries {
        encode_entry(&mut entry, *id, payload);
        let again = scan_bytes(&entry, 0).entries;
        assert_eq!(again, vec![(*id, payload.clone())], "entry round trip");
    }
    !scan.entries.is_empty() || data.iter().all(|&b| b == 0)
}

// ---- PMR slots: one 8-byte word each ----

pub fn pmr_slot_seeds() -> Vec<Vec<u8>> {
    [
        Slot {
            start: 8192,
            end: Some(9000),
        },
        Slot {
            start: 64,
            end: None,
        },
        Slot {
            start: SLOT_OFFSET_LIMIT - 1,
            end: Some(SLOT_OFFSET_LIMIT - 1),
        },
    ]
    .iter()
    .map(|s| s.encode().to_le_bytes().to_vec())
    .collect()
}

pub fn pmr_slot_check(data: &[u8]) -> bool {
    let mut word = [0u8; 8];
    let n = data.len().min(8);
    word[..n].copy_from_slice(&data[..n]);
    let word = u64::from_le_bytes(word);
    let Some(slot) = Slot::decode(word) else {
        return false;
    };
    assert!(slot.start < SLOT_OFFSET_LIMIT);
    assert!(slot.end.is_none_or(|e| e < SLOT_OFFSET_LIMIT));
    // Only slots the writer could have made re-encode; the rest are for the caller's
    // validation (read_slots) to refuse.
    let writable = slot.start > 0 && slot.end.is_none_or(|e| e >= slot.start);
    if writable {
        assert_eq!(Slot::decode(slot.encode()), Some(slot), "round trip");
    }
    true
}
