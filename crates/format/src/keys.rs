//! The first byte of every MetaDB key the file system writes: one table for the engine's
//! records (docs/FORMAT.md §6.2) and the VFS's (§6.4), so that no two kinds of record
//! can share a tag. A shared tag would mix two kinds under one prefix: a scan of one
//! (fsck, recovery, orphan cleanup) would meet the other's keys as corruption or, worse,
//! decode them.
//!
//! Invariants:
//! - Every tag in [`ALL`] is distinct (checked at compile time below).
//! - Tags are on-disk numbers: a retired tag stays here as a comment and is not reused.

/// `x` ino block: a file block's mapping (engine, §6.2).
pub const MAPPING: u8 = b'x';
/// `e` ino last: the mapping of a run of file blocks (engine, §6.2).
pub const EXTENT: u8 = b'e';
/// `r` segment block: which file block a device block was written for (engine, §6.2).
pub const REVERSE: u8 = b'r';
/// `q` segment block: which file blocks a device run was written for (engine, §6.2).
pub const REVERSE_EXTENT: u8 = b'q';
/// `s` domain segment: a segment information entry (engine, §6.2).
pub const SEGINFO: u8 = b's';
/// `d` domain: a domain's durable-data watermark (engine, §6.2).
pub const DOMAIN: u8 = b'd';
/// `i` ino: an inode (VFS, §6.4).
pub const INODE: u8 = b'i';
/// `m` parent name: a directory entry (VFS, §6.4).
pub const DENTRY: u8 = b'm';
/// `l` ino: a symbolic link's target (VFS, §6.4).
pub const SYMLINK: u8 = b'l';
/// `a` ino name: an extended attribute (VFS, §6.4).
pub const XATTR: u8 = b'a';
/// `o` ino: an inode with no name left that was still open (VFS, §6.4).
pub const ORPHAN: u8 = b'o';
/// `c`: counters, such as `c:next-ino`, the inode-number high-water mark (VFS, §6.4).
pub const COUNTER: u8 = b'c';

/// Every tag with the name FORMAT.md's tables use for its record.
pub const ALL: [(u8, &str); 12] = [
    (MAPPING, "block mapping"),
    (EXTENT, "extent"),
    (REVERSE, "reverse map"),
    (REVERSE_EXTENT, "reverse extent"),
    (SEGINFO, "segment information"),
    (DOMAIN, "domain record"),
    (INODE, "inode"),
    (DENTRY, "directory entry"),
    (SYMLINK, "symbolic link"),
    (XATTR, "extended attribute"),
    (ORPHAN, "orphan"),
    (COUNTER, "counter"),
];

/// The first pair of equal tags in `tags`, as indexes.
pub const fn first_collision(tags: &[(u8, &str)]) -> Option<(usize, usize)> {
    let mut i = 0;
    while i < tags.len() {
        let mut j = i + 1;
        while j < tags.len() {
            if tags[i].0 == tags[j].0 {
                return Some((i, j));
            }
            j += 1;
        }
        i += 1;
    }
    None
}

const _: () = assert!(
    first_collision(&ALL).is_none(),
    "two MetaDB key tags collide"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_two_tags_collide() {
        assert_eq!(first_collision(&ALL), None);
        let mut seen = std::collections::BTreeSet::new();
        for (tag, what) in ALL {
            assert!(seen.insert(tag), "{what}: tag {:?} used twice", tag as char);
            assert!(
                tag.is_ascii_lowercase(),
                "{what}: tags are lowercase letters"
            );
        }
    }

    #[test]
    fn a_collision_is_found() {
        let tags = [(b'x', "one"), (b'y', "two"), (b'x', "three")];
        assert_eq!(first_collision(&tags), Some((0, 2)));
        assert_eq!(first_collision(&tags[..2]), None);
    }
}
