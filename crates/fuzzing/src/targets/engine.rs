//! Targets for the engine's and the VFS's records in MetaDB (docs/FORMAT.md §6.1-§6.4):
//! keys and values of the block index, reverse maps, segment information, domain
//! records, inodes, directory entries and orphan records.

use crate::driver::{Outcome, Target, CI_CASES};
use engine::log::keys::{self, DomainRecord, Extent, FileBlock, Mapping, Reverse, ReverseExtent};
use engine::space::seginfo::SegInfo;
use format::checksum::crc32c_skipping;
use format::summary::SegmentKind;
use format::{BlockAddr, DomainId, InodeNo, SegmentNo};
use platform::clock::ManualClock;
use std::sync::Arc;
use vfs::records::{self, Dentry, Inode, Kind};

fn outcome<T, E>(r: &Result<T, E>) -> Outcome {
    if r.is_ok() {
        Outcome::Decoded
    } else {
        Outcome::Rejected
    }
}

fn no_reseal(_: &mut [u8]) {}

// ---- Keys of the block index, reverse maps and segment information ----

fn key_seeds() -> Vec<Vec<u8>> {
    vec![
        keys::mapping_key(InodeNo(77), FileBlock(5)).to_vec(),
        keys::extent_key(InodeNo(u64::MAX), FileBlock(u64::MAX)).to_vec(),
        keys::reverse_key(SegmentNo(9), 511).to_vec(),
        keys::reverse_extent_key(SegmentNo(u32::MAX), 0).to_vec(),
        keys::seginfo_key(DomainId(3), SegmentNo(40)).to_vec(),
        keys::domain_key(DomainId(15)).to_vec(),
        records::orphan_key(InodeNo(12)).to_vec(),
    ]
}

fn key_check(key: &[u8]) -> Outcome {
    let _ = keys::index_key_inode(key);
    let decoded = match key.first().copied() {
        Some(keys::MAPPING_TAG) => keys::parse_mapping_key(key)
            .map(|(ino, b)| assert_eq!(keys::mapping_key(ino, b)[..], *key, "round trip"))
            .is_ok(),
        Some(keys::EXTENT_TAG) => keys::parse_extent_key(key)
            .map(|(ino, b)| assert_eq!(keys::extent_key(ino, b)[..], *key, "round trip"))
            .is_ok(),
        Some(keys::REVERSE_TAG) => keys::parse_reverse_key(key)
            .map(|(s, b)| assert_eq!(keys::reverse_key(s, b)[..], *key, "round trip"))
            .is_ok(),
        Some(keys::REVERSE_EXTENT_TAG) => keys::parse_reverse_extent_key(key)
            .map(|(s, b)| assert_eq!(keys::reverse_extent_key(s, b)[..], *key, "round trip"))
            .is_ok(),
        Some(keys::SEGINFO_TAG) => fsck::open::parse_seginfo_key(key)
            .map(|(d, s)| assert_eq!(keys::seginfo_key(d, s)[..], *key, "round trip"))
            .is_some(),
        Some(records::ORPHAN_TAG) => records::parse_orphan_key(key)
            .map(|ino| assert_eq!(records::orphan_key(ino)[..], *key, "round trip"))
            .is_ok(),
        _ => false,
    };
    if decoded || key.first() == Some(&keys::DOMAIN_TAG) && key.len() == 3 {
        Outcome::Decoded
    } else {
        Outcome::Rejected
    }
}

// ---- Values of the block index and reverse maps ----

fn mapping_seeds() -> Vec<Vec<u8>> {
    vec![Mapping {
        addr: BlockAddr(4096 + 77),
        crc: 0xdead_beef,
        write_seq: 12,
    }
    .encode()
    .to_vec()]
}

fn mapping_check(v: &[u8]) -> Outcome {
    let r = Mapping::decode(v);
    if let Ok(m) = &r {
        assert_eq!(m.encode()[..], *v, "round trip");
    }
    outcome(&r)
}

/// An extent's value with the key's last block in front (the decoder takes both).
fn extent_seeds() -> Vec<Vec<u8>> {
    [
        (FileBlock(300), 256usize),
        (FileBlock(0), 1),
        (FileBlock(u64::MAX), 8),
    ]
    .iter()
    .map(|&(last, count)| {
        let e = Extent {
            first: FileBlock(last.0 - (count as u64 - 1)),
            addr: BlockAddr(8192),
            write_seq: 3,
            crcs: (0..count as u32)
                .map(|i| i.wrapping_mul(0x9e37_79b9))
                .collect(),
        };
        let mut v = last.0.to_le_bytes().to_vec();
        v.extend_from_slice(&e.encode());
        v
    })
    .collect()
}

fn extent_check(data: &[u8]) -> Outcome {
    let mut last = [0u8; 8];
    let n = data.len().min(8);
    last[..n].copy_from_slice(&data[..n]);
    let last = FileBlock(u64::from_le_bytes(last));
    let r = Extent::decode(last, &data[n..]);
    if let Ok(e) = &r {
        assert_eq!(e.last(), last);
        assert_eq!(e.encode()[..], data[n..], "round trip");
        assert!(e.contains(e.first) && e.contains(last));
        let _ = e.mapping(last);
        let _ = e.key(InodeNo(5));
        let _ = e.slice(FileBlock(e.first.0.saturating_add(1)), FileBlock(u64::MAX));
    }
    outcome(&r)
}

fn reverse_seeds() -> Vec<Vec<u8>> {
    vec![Reverse {
        ino: InodeNo(9),
        block: FileBlock(1 << 40),
    }
    .encode()
    .to_vec()]
}

fn reverse_check(v: &[u8]) -> Outcome {
    let r = Reverse::decode(v);
    if let Ok(x) = &r {
        assert_eq!(x.encode()[..], *v, "round trip");
    }
    outcome(&r)
}

fn reverse_extent_seeds() -> Vec<Vec<u8>> {
    vec![ReverseExtent {
        ino: InodeNo(9),
        file_block: FileBlock(100),
        count: 256,
    }
    .encode()
    .to_vec()]
}

fn reverse_extent_check(v: &[u8]) -> Outcome {
    let r = ReverseExtent::decode(v);
    if let Ok(x) = &r {
        assert_eq!(x.encode()[..], *v, "round trip");
        for block in [0u16, 1, 255, 511, u16::MAX] {
            let _ = x.owner_of(0, block);
            let _ = x.owner_of(block, 511);
        }
    }
    outcome(&r)
}

fn domain_record_seeds() -> Vec<Vec<u8>> {
    vec![DomainRecord {
        durable_seq: 5,
        issued_seq: 9,
        elapsed_ns: 1 << 50,
    }
    .encode()
    .to_vec()]
}

fn domain_record_check(v: &[u8]) -> Outcome {
    let r = DomainRecord::decode(v);
    if let Ok(x) = &r {
        assert_eq!(x.encode()[..], *v, "round trip");
    }
    outcome(&r)
}

// ---- Segment information: the table of a checkpoint, and `s` entries one by one ----

const SEGINFO_DOMAIN: DomainId = DomainId(2);
const SEGMENT_COUNT: u32 = 600;

fn seginfo_sample() -> SegInfo {
    let clock = Arc::new(ManualClock::new(1_000));
    let mut info = SegInfo::new(SEGINFO_DOMAIN, clock.clone());
    for (segment, kind) in [
        (3u32, SegmentKind::Data),
        (40, SegmentKind::Node),
        (599, SegmentKind::Data),
    ] {
        info.add(SegmentNo(segment), kind);
        for block in (0..512).step_by(segment as usize % 7 + 1) {
            info.mark_valid(SegmentNo(segment), block);
        }
        clock.advance_ns(77);
    }
    info
}

fn seginfo_table_seeds() -> Vec<Vec<u8>> {
    let info = seginfo_sample();
    let empty = SegInfo::new(SEGINFO_DOMAIN, Arc::new(ManualClock::new(0)));
    vec![info.encode(), empty.encode()]
}

fn seginfo_table_reseal(buf: &mut [u8]) {
    if buf.len() >= 24 {
        let crc = crc32c_skipping(buf, 20);
        buf[20..24].copy_from_slice(&crc.to_le_bytes());
    }
}

fn seginfo_table_check(buf: &[u8]) -> Outcome {
    let clock = Arc::new(ManualClock::new(0));
    let r = SegInfo::decode(buf, SEGINFO_DOMAIN, SEGMENT_COUNT, clock);
    if let Ok(info) = &r {
        // Reserved bytes are ignored on read: the round trip is of the decoded table.
        let encoded = info.encode();
        let clock = Arc::new(ManualClock::new(0));
        let again = SegInfo::decode(&encoded, SEGINFO_DOMAIN, SEGMENT_COUNT, clock);
        assert_eq!(again.map(|i| i.encode()).ok(), Some(encoded), "round trip");
    }
    outcome(&r)
}

/// `s` values as MetaDB holds them (one 80-byte entry each), after the domain record's
/// elapsed time they are checked against.
fn seginfo_entries_seeds() -> Vec<Vec<u8>> {
    let info = seginfo_sample();
    let mut v = info.now_ns().to_le_bytes().to_vec();
    for segment in [3u32, 40, 599] {
        v.extend_from_slice(&info.encode_entry(SegmentNo(segment)));
    }
    vec![v]
}

fn seginfo_entries_check(data: &[u8]) -> Outcome {
    if data.len() < 8 {
        return Outcome::Rejected;
    }
    let elapsed = u64::from_le_bytes(data[..8].try_into().expect("8 bytes"));
    let entries: Vec<&[u8]> = data[8..].chunks(80).collect();
    let clock = Arc::new(ManualClock::new(0));
    let r = SegInfo::from_entries(
        SEGINFO_DOMAIN,
        SEGMENT_COUNT,
        elapsed,
        entries.iter().copied(),
        clock,
    );
    if let Ok(info) = &r {
        // The pad byte is ignored on read: the round trip is of the decoded entries.
        let again: Vec<[u8; 80]> = entries
            .iter()
            .map(|e| {
                info.encode_entry(SegmentNo(u32::from_le_bytes(
                    e[..4].try_into().expect("4 bytes"),
                )))
            })
            .collect();
        let clock = Arc::new(ManualClock::new(0));
        let decoded = SegInfo::from_entries(
            SEGINFO_DOMAIN,
            SEGMENT_COUNT,
            elapsed,
            again.iter().map(|e| &e[..]),
            clock,
        );
        assert_eq!(
            decoded.map(|i| i.encode()).ok(),
            Some(info.encode()),
            "round trip"
        );
    }
    outcome(&r)
}

// ---- VFS records ----

fn inode_seeds() -> Vec<Vec<u8>> {
    let mut dir = Inode::new(Kind::Dir, 0o1777, 0, 0, InodeNo(1), -5);
    dir.nlink = 7;
    let mut file = Inode::new(Kind::File, 0o644, 1000, 1000, InodeNo(0), i64::MAX);
    file.size = u64::MAX;
    file.blocks = 1 << 40;
    vec![dir.encode().to_vec(), file.encode().to_vec()]
}

fn inode_check(v: &[u8]) -> Outcome {
    let r = Inode::decode(InodeNo(42), v);
    if let Ok(i) = &r {
        // Padding and reserved bytes are ignored on read.
        assert_eq!(
            Inode::decode(InodeNo(42), &i.encode()).ok(),
            Some(*i),
            "round trip"
        );
        let _ = i.mode();
    }
    outcome(&r)
}

fn dentry_seeds() -> Vec<Vec<u8>> {
    [Kind::File, Kind::Dir, Kind::Symlink]
        .iter()
        .map(|&kind| {
            Dentry {
                ino: InodeNo(1 << 33),
                kind,
            }
            .encode()
            .to_vec()
        })
        .collect()
}

fn dentry_check(v: &[u8]) -> Outcome {
    let r = Dentry::decode(v);
    if let Ok(d) = &r {
        assert_eq!(d.encode()[..], *v, "round trip");
    }
    outcome(&r)
}

pub fn targets() -> Vec<Target> {
    let t = |name, seeds, reseal, check, len_max| Target {
        name,
        seeds,
        reseal,
        check,
        len_max,
        ci_cases: CI_CASES,
    };
    vec![
        t("engine_keys", key_seeds, no_reseal, key_check, 32),
        t("mapping_value", mapping_seeds, no_reseal, mapping_check, 32),
        t("extent_value", extent_seeds, no_reseal, extent_check, 1200),
        t("reverse_value", reverse_seeds, no_reseal, reverse_check, 32),
        t(
            "reverse_extent_value",
            reverse_extent_seeds,
            no_reseal,
            reverse_extent_check,
            32,
        ),
        t(
            "domain_record",
            domain_record_seeds,
            no_reseal,
            domain_record_check,
            32,
        ),
        t(
            "seginfo_table",
            seginfo_table_seeds,
            seginfo_table_reseal,
            seginfo_table_check,
            512,
        ),
        t(
            "seginfo_entries",
            seginfo_entries_seeds,
            no_reseal,
            seginfo_entries_check,
            400,
        ),
        t("vfs_inode", inode_seeds, no_reseal, inode_check, 128),
        t("vfs_dentry", dentry_seeds, no_reseal, dentry_check, 16),
    ]
}
