//! docs/FORMAT.md and the code must agree: every marked table in the document is parsed
//! and compared with the field tables, constants, magics and geometry in `format`.

use format::constants::*;
use format::geometry::Geometry;
use format::layout::all_layouts;
use format::layout::doc::{assert_layouts_match, markers, table_after};
use std::collections::BTreeMap;

fn doc() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/FORMAT.md");
    std::fs::read_to_string(path).expect("docs/FORMAT.md is readable")
}

#[test]
fn field_tables_match_code() {
    assert_layouts_match(&doc(), "layout", &all_layouts());
}

#[test]
fn constants_match_code() {
    let code: BTreeMap<&str, u64> = [
        ("FORMAT_VERSION", FORMAT_VERSION as u64),
        ("BLOCK_SIZE_BYTES", BLOCK_SIZE_BYTES),
        ("SECTOR_SIZE_BYTES", SECTOR_SIZE_BYTES),
        ("SEGMENT_SIZE_BYTES", SEGMENT_SIZE_BYTES),
        ("BLOCKS_PER_SEGMENT", BLOCKS_PER_SEGMENT),
        ("SUPERBLOCK_BYTES", SUPERBLOCK_BYTES as u64),
        ("CHECKPOINT_SLOT_BYTES", CHECKPOINT_SLOT_BYTES),
        (
            "CHECKPOINT_REGION_START_BLOCK",
            CHECKPOINT_REGION_START_BLOCK,
        ),
        ("MANIFEST_REGION_BYTES", MANIFEST_REGION_BYTES),
        ("WAL_REGION_BYTES_MIN", WAL_REGION_BYTES_MIN),
        ("WAL_REGION_BYTES_MAX", WAL_REGION_BYTES_MAX),
        ("WAL_REGION_DEVICE_FRACTION", WAL_REGION_DEVICE_FRACTION),
        ("SUMMARY_BLOCKS_PER_SEGMENT", SUMMARY_BLOCKS_PER_SEGMENT),
        ("DEVICE_SIZE_MIN_BYTES", DEVICE_SIZE_MIN_BYTES),
        ("DOMAIN_COUNT_MAX", DOMAIN_COUNT_MAX as u64),
        ("DOMAIN_COUNT_DEFAULT", DOMAIN_COUNT_DEFAULT as u64),
        ("SEGMENTS_PER_DOMAIN_MIN", SEGMENTS_PER_DOMAIN_MIN),
        ("PMR_SIZE_MIN_BYTES", PMR_SIZE_MIN_BYTES),
        ("PMR_SIZE_DEFAULT_BYTES", PMR_SIZE_DEFAULT_BYTES),
        ("PMR_HEADER_BYTES", PMR_HEADER_BYTES),
        ("PMR_SLOT_AREA_BYTES", PMR_SLOT_AREA_BYTES),
        ("PMR_LINE_BYTES", PMR_LINE_BYTES),
        ("PMR_CPU_COUNT_MAX", PMR_CPU_COUNT_MAX),
    ]
    .into_iter()
    .collect();
    let rows = table_after(&doc(), "<!-- constants -->");
    let documented: BTreeMap<&str, u64> = rows
        .iter()
        .map(|r| (r[0].as_str(), r[1].parse::<u64>().expect("numeric value")))
        .collect();
    assert_eq!(documented, code);
}

#[test]
fn magics_match_code() {
    let code: BTreeMap<&str, [u8; 8]> = [
        ("superblock", format::superblock::MAGIC),
        ("checkpoint slot header", format::checkpoint::HEADER_MAGIC),
        ("checkpoint slot trailer", format::checkpoint::TRAILER_MAGIC),
        ("segment summary", format::summary::MAGIC),
        ("PMR header", format::pmr::MAGIC),
    ]
    .into_iter()
    .collect();
    let rows = table_after(&doc(), "<!-- magics -->");
    assert_eq!(rows.len(), code.len());
    for r in rows {
        let mut padded = [0u8; 8];
        padded[..r[1].len()].copy_from_slice(r[1].as_bytes());
        assert_eq!(code.get(r[0].as_str()), Some(&padded), "magic of {}", r[0]);
    }
}

#[test]
fn worked_geometry_examples_match_code() {
    let doc = doc();
    let examples = markers(&doc, "geometry");
    assert!(!examples.is_empty());
    for example in examples {
        let mut parts = example
            .split_whitespace()
            .map(|p| p.parse::<u64>().expect("number"));
        let (size, domains) = (parts.next().expect("size"), parts.next().expect("domains"));
        let g = Geometry::compute(size, domains as u32).expect("example geometry is valid");
        let regions = [
            ("superblocks", g.superblocks),
            ("checkpoints", g.checkpoints),
            ("manifest", g.manifest),
            ("wal", g.wal),
            ("summaries", g.summaries),
            ("segments", g.segments),
        ];
        let rows = table_after(&doc, &format!("<!-- geometry: {example} -->"));
        assert_eq!(rows.len(), regions.len(), "example {example}");
        for (row, (name, region)) in rows.iter().zip(regions) {
            assert_eq!(row[0], name);
            assert_eq!(
                row[1].parse::<u64>().expect("start"),
                region.start_block,
                "{example} {name} start"
            );
            assert_eq!(
                row[2].parse::<u64>().expect("count"),
                region.block_count,
                "{example} {name} count"
            );
        }
    }
}

/// The first byte of every key in FORMAT.md's record tables of §6.2 and §6.4 (rows whose
/// key column opens with a backquoted tag).
fn doc_key_tags(doc: &str) -> BTreeMap<u8, String> {
    let mut tags = BTreeMap::new();
    let mut in_records = false;
    for line in doc.lines() {
        if line.starts_with("### ") || line.starts_with("## ") {
            in_records = line.starts_with("### 6.2 ") || line.starts_with("### 6.4 ");
        }
        let Some(key) = line.strip_prefix("| `").filter(|_| in_records) else {
            continue;
        };
        let tag = key.as_bytes()[0];
        let previous = tags.insert(tag, line.to_string());
        assert!(
            previous.is_none(),
            "tag {:?} twice:\n{previous:?}\n{line}",
            tag as char
        );
    }
    tags
}

#[test]
fn key_tags_match_code_and_never_collide() {
    let doc = doc_key_tags(&doc());
    let code: Vec<u8> = format::keys::ALL.iter().map(|(tag, _)| *tag).collect();
    assert_eq!(
        doc.keys().copied().collect::<Vec<u8>>(),
        {
            let mut sorted = code.clone();
            sorted.sort_unstable();
            sorted
        },
        "FORMAT.md §6.2 and §6.4 list exactly format::keys::ALL"
    );
    assert_eq!(format::keys::first_collision(&format::keys::ALL), None);
}
