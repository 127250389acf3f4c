//! docs/FORMAT.md §6.4 and the VFS's code must agree: every `vfs-layout` table equals the
//! code's field table.

use format::layout::doc::assert_layouts_match;

#[test]
fn vfs_layout_tables_match_code() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/FORMAT.md"))
        .expect("docs/FORMAT.md is readable");
    assert_layouts_match(&doc, "vfs-layout", &vfs::records::layouts());
}
