//! docs/FORMAT.md and the engine's code must agree: every `engine-layout` table (§6.1)
//! equals the code's field table.

use format::layout::doc::assert_layouts_match;

#[test]
fn engine_layout_tables_match_code() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/FORMAT.md"))
        .expect("docs/FORMAT.md is readable");
    let mut layouts = engine::space::seginfo::layouts();
    layouts.extend(engine::log::keys::layouts());
    assert_layouts_match(&doc, "engine-layout", &layouts);
}

#[test]
fn documented_numbers_match_code() {
    use engine::space::seginfo::{
        ENTRIES_PER_CHECKPOINT_SLOT_MAX, ENTRY_BYTES, HEADER_BYTES, MAGIC,
    };
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/FORMAT.md"))
        .expect("docs/FORMAT.md is readable");
    assert_eq!(&MAGIC, b"SEGI");
    assert!(doc.contains("`magic` is `SEGI`"));
    assert!(doc.contains(&format!(
        "exactly {HEADER_BYTES} + {ENTRY_BYTES} x `entry_count` bytes"
    )));
    assert!(doc.contains(&format!(
        "holds at most {ENTRIES_PER_CHECKPOINT_SLOT_MAX} entries"
    )));
}
