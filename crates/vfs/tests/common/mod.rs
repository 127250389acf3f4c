//! What the VFS integration tests share beside testsupport's images and mounts: the
//! orphan records and the mapped blocks MetaDB holds.
#![allow(dead_code)]

use vfs::FileSystem;

/// Orphan records (nameless open inodes) in MetaDB.
pub fn orphan_records(fs: &FileSystem) -> usize {
    fs.engine()
        .metadb()
        .prefix(&[vfs::records::ORPHAN_TAG], None)
        .unwrap()
        .count()
}

/// Blocks mapped for inode `ino`.
pub fn mapped_blocks(fs: &FileSystem, ino: u64) -> usize {
    mapped_block_list(fs, ino).len()
}

/// The mapped blocks of inode `ino` (`x` records and extents), ascending.
pub fn mapped_block_list(fs: &FileSystem, ino: u64) -> Vec<u64> {
    use engine::log::keys;
    let db = fs.engine().metadb();
    let ino = format::InodeNo(ino);
    let mut blocks = std::collections::BTreeSet::new();
    for item in db.prefix(&keys::mapping_prefix(ino), None).unwrap() {
        blocks.insert(keys::parse_mapping_key(&item.unwrap().0).unwrap().1);
    }
    for item in db.prefix(&keys::extent_prefix(ino), None).unwrap() {
        let (key, value) = item.unwrap();
        let last = keys::parse_extent_key(&key).unwrap().1;
        let e = keys::Extent::decode(last, &value).unwrap();
        blocks.extend((e.first.0..=last.0).map(keys::FileBlock));
    }
    blocks.into_iter().map(|b| b.0).collect()
}
