//! Targets for MetaDB's bytes (docs/FORMAT.md §5): the WAL's batch records, region
//! header, chunks and records (ssd lanes), entries and slots (PMR); tables (footer,
//! index, bloom filter and data blocks, opened and read as a mount reads them); the
//! manifest region (half headers, framed records, edits, replayed as recovery does).

use crate::driver::{Outcome, Target, CI_CASES};
use device::memory::MemoryBackend;
use device::{AlignedBuf, Device, IoCause};
use format::checksum::crc32c_skipping;
use format::{Region, SegmentNo};
use metadb::iter::InternalIterator;
use metadb::manifest::{self, Manifest, VersionEdit, FRAME_BYTES, HEADER_BLOCK_BYTES};
use metadb::table::builder::{TableBuilder, TableOptions};
use metadb::table::cache::BlockCache;
use metadb::table::layout::{block_crc, FOOTER_BYTES};
use metadb::table::reader::Table;
use metadb::table::{TableId, TableMeta};
use metadb::types::{InternalKey, ValueKind, WalPos};
use metadb::wal::fuzz as wal;
use metadb::WriteBatch;
use std::sync::Arc;

fn outcome(decoded: bool) -> Outcome {
    if decoded {
        Outcome::Decoded
    } else {
        Outcome::Rejected
    }
}

fn get_u32(buf: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(buf[at..at + 4].try_into().expect("4 bytes"))
}

fn put_u32(buf: &mut [u8], at: usize, v: u32) {
    buf[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn no_reseal(_: &mut [u8]) {}

fn memory_device(image: Vec<u8>) -> Arc<Device> {
    Arc::new(Device::new(Box::new(MemoryBackend::from_image(image, 512))))
}

// ---- WAL batch record (the payload of every WAL record and PMR entry) ----

fn batch_seeds() -> Vec<Vec<u8>> {
    let mut plain = WriteBatch::new();
    plain.put(&b"key"[..], &b"value"[..]).delete(&b"gone"[..]);
    plain.put(vec![0xffu8; 1024], vec![7u8; 3000]);
    let mut required = WriteBatch::new();
    required.put(&b"i\x00\x00\x00\x00\x00\x00\x00\x05"[..], vec![1u8; 80]);
    for lane in [2u16, 9] {
        required.require(WalPos {
            lane,
            generation: 3,
            lane_seq: 11,
        });
    }
    [(plain, 1), (required, u64::MAX - 5), (WriteBatch::new(), 0)]
        .iter()
        .map(|(batch, seq)| {
            let mut out = Vec::new();
            batch.encode_into(*seq, |_| true, &mut out);
            out
        })
        .collect()
}

fn batch_check(data: &[u8]) -> Outcome {
    let Ok((seq, batch)) = WriteBatch::decode(data) else {
        return Outcome::Rejected;
    };
    let mut again = Vec::new();
    batch.encode_into(seq, |_| true, &mut again);
    assert_eq!(again, data, "round trip");
    Outcome::Decoded
}

// ---- Tables ----

/// Every seed table ends with this key, which the manifest entry names as `largest`.
const TABLE_LAST_KEY: &[u8] = b"zz-last";
const TABLE_ID: TableId = TableId(7);

fn table_seeds() -> Vec<Vec<u8>> {
    let small_blocks = TableOptions {
        block_bytes_target: 256,
        restart_interval: 4,
        ..TableOptions::default()
    };
    [(40usize, small_blocks), (3, TableOptions::default())]
        .iter()
        .map(|&(keys, options)| {
            let mut b = TableBuilder::new(TABLE_ID, options);
            for i in 0..keys {
                let key = format!("key-{i:05}");
                let kind = if i % 5 == 4 {
                    ValueKind::Delete
                } else {
                    ValueKind::Put
                };
                let value = if kind == ValueKind::Put {
                    vec![i as u8; i % 50]
                } else {
                    vec![]
                };
                assert!(b.add(key.as_bytes(), 100 + i as u64, kind, &value));
            }
            assert!(b.add(TABLE_LAST_KEY, 1, ValueKind::Put, b"last"));
            let (buf, built) = b.finish();
            buf[..built.len_bytes as usize].to_vec()
        })
        .collect()
}

/// Recomputes the footer's checksum, then the checksum of every block it and the
/// index name (each bound to the table and its offset).
fn table_reseal(buf: &mut [u8]) {
    if buf.len() < FOOTER_BYTES || buf.len() % 4096 != 0 {
        return;
    }
    let footer = buf.len() - FOOTER_BYTES;
    let crc = format::checksum::crc32c(&buf[footer..footer + 60]);
    put_u32(buf, footer + 60, crc);
    let mut handles = Vec::new();
    for at in [32usize, 40] {
        handles.push((get_u32(buf, footer + at), get_u32(buf, footer + at + 4)));
    }
    let seal = |buf: &mut [u8], offset: u32, len: u32| {
        let (start, end) = (offset as usize, offset as usize + len as usize);
        if len >= 4 && end <= footer {
            let crc = block_crc(TABLE_ID, offset, &buf[start..end - 4]);
            put_u32(buf, end - 4, crc);
        }
    };
    for &(offset, len) in &handles {
        seal(buf, offset, len);
    }
    // Data blocks: the index is entries of (key_len, seq, kind, offset, len, key).
    let (offset, len) = handles[0];
    let (start, end) = (offset as usize, offset as usize + len as usize);
    if len < 8 || end > footer {
        return;
    }
    let index = buf[start..end - 8].to_vec();
    let mut p = 0;
    while p < index.len() {
        let Some(key_len) = metadb::table::layout::get_varint(&index, &mut p) else {
            break;
        };
        if metadb::table::layout::get_varint(&index, &mut p).is_none() || p + 9 > index.len() {
            break;
        }
        let (off, blen) = (get_u32(&index, p + 1), get_u32(&index, p + 5));
        seal(buf, off, blen);
        p = p.saturating_add(9).saturating_add(key_len as usize);
    }
}

fn table_check(data: &[u8]) -> Outcome {
    let len = data.len().div_ceil(4096).clamp(1, 512) * 4096;
    let mut image = data[..data.len().min(len)].to_vec();
    image.resize(len, 0);
    // The manifest entry agrees with the footer's entry count (as after a clean flush),
    // so that mutations reach the index, bloom and data blocks behind it.
    let entries = u64::from_le_bytes(image[len - 40..len - 32].try_into().expect("8 bytes"));
    let meta = TableMeta {
        id: TABLE_ID,
        segment: SegmentNo(0),
        len_bytes: len as u32,
        entries,
        smallest: InternalKey::new(&b"key-00000"[..], 100, ValueKind::Put),
        largest: InternalKey::new(TABLE_LAST_KEY, 1, ValueKind::Put),
    };
    let device = memory_device(image);
    let cache = Arc::new(BlockCache::new(1 << 20));
    let Ok(table) = Table::open(device, 0, meta, cache) else {
        return Outcome::Rejected;
    };
    let table = Arc::new(table);
    let mut it = table.iter();
    let mut result = it.seek_to_first();
    let mut seen = 0u64;
    while result.is_ok() && it.valid() {
        let key = it.user_key().to_vec();
        let _ = table.get(&key, u64::MAX);
        seen += 1;
        result = it.next();
    }
    let _ = table.get(b"key-00007", u64::MAX);
    let _ = table.get(b"absent", 5);
    outcome(result.is_ok() && seen == entries)
}

// ---- Manifest region ----

/// A small region (two 16 KiB halves) at block 2 of a 64 KiB image: small enough that
/// the seeds hold switched halves, and a case costs little.
const MANIFEST_REGION: Region = Region {
    start_block: 2,
    block_count: 8,
};
const MANIFEST_IMAGE_BYTES: usize = 64 << 10;

fn manifest_table(id: u64, level: u32) -> (u32, TableMeta) {
    let table = TableMeta {
        id: TableId(id),
        segment: SegmentNo(id as u32 + 3),
        len_bytes: 8192,
        entries: 12,
        smallest: InternalKey::new(format!("a{id:03}").into_bytes(), id, ValueKind::Put),
        largest: InternalKey::new(format!("a{id:03}z").into_bytes(), id + 1, ValueKind::Delete),
    };
    (level, table)
}

fn manifest_seeds() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for edits in [3usize, 60] {
        let device = memory_device(vec![0u8; MANIFEST_IMAGE_BYTES]);
        let (m, _) = Manifest::open(device.clone(), MANIFEST_REGION).expect("manifest opens");
        for i in 0..edits as u64 {
            let edit = VersionEdit {
                flushed_generation: Some(i + 1),
                last_seq: Some(100 * i),
                next_table_id: Some(i + 2),
                added: vec![manifest_table(i + 1, (i % 3) as u32)],
                removed: if i >= 4 {
                    vec![(((i - 4) % 3) as u32, TableId(i - 3))]
                } else {
                    Vec::new()
                },
                compaction_cursors: vec![((i % 2) as u32, format!("c{i}").into_bytes())],
            };
            m.apply(&edit).expect("edit applies");
        }
        let start = MANIFEST_REGION.start_byte() as usize;
        let len = MANIFEST_REGION.size_bytes() as usize;
        let region = device
            .read(start as u64, AlignedBuf::zeroed(len), IoCause::Tool)
            .expect("memory read");
        out.push(region.to_vec());
    }
    out
}

/// Reseals both halves: header CRC, then each record's CRC and `prev_crc` chain from
/// the snapshot on, and the header's snapshot length and CRC.
fn manifest_reseal(buf: &mut [u8]) {
    let half_bytes = MANIFEST_REGION.size_bytes() as usize / 2;
    if buf.len() != 2 * half_bytes {
        return;
    }
    for half in 0..2 {
        let h = half * half_bytes;
        let mut at = h + HEADER_BLOCK_BYTES as usize;
        let mut prev = 0u32;
        let mut first = true;
        while at + FRAME_BYTES <= h + half_bytes {
            let len = get_u32(buf, at) as usize;
            let end = at + FRAME_BYTES + len;
            if end > h + half_bytes
                || (len == 0 && buf[at..at + FRAME_BYTES].iter().all(|&b| b == 0))
            {
                break;
            }
            put_u32(buf, at + 20, prev);
            let crc = crc32c_skipping(&buf[at..end], 4);
            put_u32(buf, at + 4, crc);
            if first {
                put_u32(buf, h + 32, len as u32);
                put_u32(buf, h + 36, crc);
                first = false;
            }
            prev = crc;
            at = end;
        }
        let crc = format::checksum::crc32c(&buf[h..h + 60]);
        put_u32(buf, h + 60, crc);
    }
}

fn manifest_check(data: &[u8]) -> Outcome {
    let region_bytes = MANIFEST_REGION.size_bytes() as usize;
    let mut image = vec![0u8; MANIFEST_IMAGE_BYTES];
    let start = MANIFEST_REGION.start_byte() as usize;
    let n = data.len().min(region_bytes);
    image[start..start + n].copy_from_slice(&data[..n]);
    let Ok((m, state)) = Manifest::open(memory_device(image), MANIFEST_REGION) else {
        return Outcome::Rejected;
    };
    assert_eq!(m.state(), state);
    let _ = state.version();
    // What was recovered accepts the next edit where it is consistent.
    let edit = VersionEdit {
        last_seq: Some(state.last_seq().saturating_add(1)),
        ..VersionEdit::default()
    };
    if state.check(&edit).is_ok() {
        let _ = m.apply(&edit);
    }
    Outcome::Decoded
}

fn edit_seeds() -> Vec<Vec<u8>> {
    let edit = VersionEdit {
        flushed_generation: Some(4),
        last_seq: None,
        next_table_id: Some(9),
        added: vec![manifest_table(3, 1), manifest_table(4, 0)],
        removed: vec![(2, TableId(1))],
        compaction_cursors: vec![(1, vec![0xee; 300])],
    };
    [edit, VersionEdit::default()]
        .iter()
        .map(|e| {
            let mut out = Vec::new();
            manifest::encode_edit(e, &mut out);
            out
        })
        .collect()
}

fn edit_check(data: &[u8]) -> Outcome {
    let Ok(edit) = manifest::decode_edit(data) else {
        return Outcome::Rejected;
    };
    let mut again = Vec::new();
    manifest::encode_edit(&edit, &mut again);
    assert_eq!(manifest::decode_edit(&again), Ok(edit), "round trip");
    Outcome::Decoded
}

fn wal_region_header_check(d: &[u8]) -> Outcome {
    outcome(wal::region_header_check(d))
}

fn wal_chunk_check(d: &[u8]) -> Outcome {
    outcome(wal::chunk_check(d))
}

fn pmr_entries_check(d: &[u8]) -> Outcome {
    outcome(wal::pmr_entries_check(d))
}

fn pmr_slot_check(d: &[u8]) -> Outcome {
    outcome(wal::pmr_slot_check(d))
}

pub fn targets() -> Vec<Target> {
    vec![
        Target {
            name: "wal_batch",
            seeds: batch_seeds,
            reseal: no_reseal,
            check: batch_check,
            len_max: 8192,
            ci_cases: CI_CASES,
        },
        Target {
            name: "wal_region_header",
            seeds: wal::region_header_seeds,
            reseal: wal::region_header_reseal,
            check: wal_region_header_check,
            len_max: 128,
            ci_cases: CI_CASES,
        },
        Target {
            name: "wal_chunk",
            seeds: wal::chunk_seeds,
            reseal: wal::chunk_reseal,
            check: wal_chunk_check,
            len_max: 4096,
            ci_cases: CI_CASES,
        },
        Target {
            name: "pmr_wal_entries",
            seeds: wal::pmr_entries_seeds,
            reseal: wal::pmr_entries_reseal,
            check: pmr_entries_check,
            len_max: 2048,
            ci_cases: CI_CASES,
        },
        Target {
            name: "pmr_wal_slot",
            seeds: wal::pmr_slot_seeds,
            reseal: no_reseal,
            check: pmr_slot_check,
            len_max: 8,
            ci_cases: CI_CASES,
        },
        Target {
            name: "table",
            seeds: table_seeds,
            reseal: table_reseal,
            check: table_check,
            len_max: 16384,
            ci_cases: CI_CASES,
        },
        Target {
            name: "manifest_region",
            seeds: manifest_seeds,
            reseal: manifest_reseal,
            check: manifest_check,
            len_max: MANIFEST_REGION.size_bytes() as usize,
            ci_cases: CI_CASES,
        },
        Target {
            name: "manifest_edit",
            seeds: edit_seeds,
            reseal: no_reseal,
            check: edit_check,
            len_max: 4096,
            ci_cases: CI_CASES,
        },
    ]
}
