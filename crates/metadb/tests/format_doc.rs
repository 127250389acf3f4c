//! docs/FORMAT.md §5 and MetaDB's code must agree: every `metadb-layout` table equals the
//! code's field table.

use format::layout::doc::assert_layouts_match;

#[test]
fn metadb_layout_tables_match_code() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/FORMAT.md"))
        .expect("docs/FORMAT.md is readable");
    let mut layouts = metadb::wal::format_layouts();
    layouts.push(metadb::table::layout::FOOTER_LAYOUT);
    layouts.extend(metadb::manifest::layouts());
    assert_layouts_match(&doc, "metadb-layout", &layouts);
}
