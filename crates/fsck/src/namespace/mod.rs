//! The VFS's side of the image (docs/FORMAT.md §6.4): the directory tree, link counts,
//! sizes against mappings, symlink targets, xattrs, orphan records and the inode-number
//! high-water mark.
//!
//! What must hold, and is checked here:
//! - the root (inode 1) is a directory whose parent is itself;
//! - every entry has a valid name, sits in a live directory and names a live inode
//!   (never the root) of the kind it records;
//! - every directory has exactly one entry (its parent's), and its `parent` field names
//!   that directory; every inode is reachable from the root, except an inode with no
//!   links that an orphan record keeps (it is open; the VFS mount reclaims it);
//! - `nlink` is the number of entries naming a non-directory, and 2 plus the number of
//!   subdirectories of a directory;
//! - mappings belong to live regular files, whose `blocks` field counts them (blocks
//!   past the size are tolerated: images of augefs before it stopped mapping zeros for
//!   `fallocate` with KEEP_SIZE have them);
//! - symlinks have a target of 1-4096 bytes; targets, xattrs and orphan records belong
//!   to live inodes; every inode number is below `c:next-ino`;
//! - special files (FIFOs, sockets, devices) have size 0; only devices have an `rdev`.
//!
//! Repairs: counts and parent fields are recomputed from the entries; entries naming
//! nothing are dropped; a directory with two names keeps the one its parent field
//! names; a disconnected inode (or subtree) is linked into `/lost+found` as `#ino`; an
//! unreachable inode with no links and no orphan record (a deletion cut short) is freed.
//!
//! This module walks the tree (root, entries, directory names, link counts);
//! [`unreachable`] handles what the walk misses, [`attached`] what hangs off inodes
//! (orphan records, xattrs, mappings, the inode counter).

use crate::blocks::BlockState;
use crate::problem::{Class, Kind, Objects};
use crate::scan::{DentryRec, Records};
use crate::{Fsck, FsckError};
use format::InodeNo;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use vfs::records::{self, Dentry, Inode, NAME_MAX, ROOT};
use vfs::Kind as K;

mod attached;
mod unreachable;

/// Longest symlink target, in bytes (FORMAT.md §6.4).
const SYMLINK_TARGET_BYTES_MAX: usize = 4096;
/// Largest xattr value, in bytes (FORMAT.md §6.4).
const XATTR_VALUE_BYTES_MAX: usize = 64 << 10;
const LOST_FOUND: &[u8] = b"lost+found";

fn name_ok(name: &[u8]) -> bool {
    !name.is_empty()
        && name.len() <= NAME_MAX
        && name != b"."
        && name != b".."
        && !name.iter().any(|&c| c == b'/' || c == 0)
}

fn show(name: &[u8]) -> String {
    String::from_utf8_lossy(name).into_owned()
}

/// The namespace as the checks rebuild it.
#[derive(Default)]
struct Tree {
    /// Dentries (indexes into `Records::dentries`) that take part in the tree.
    included: Vec<bool>,
    children: BTreeMap<InodeNo, Vec<usize>>,
    incoming: HashMap<InodeNo, Vec<usize>>,
    visited: BTreeSet<InodeNo>,
    paths: HashMap<InodeNo, String>,
    /// Every name of each non-directory reached (hard links), for reports.
    all_paths: HashMap<InodeNo, Vec<String>>,
    /// Entries naming each non-directory; subdirectories of each directory.
    links: HashMap<InodeNo, u32>,
    subdirs: HashMap<InodeNo, u32>,
    /// Inodes whose link count is not checked (an unattached top left as it is, or an
    /// orphan).
    skip_count: BTreeSet<InodeNo>,
    /// Inodes whose record a repair rewrites.
    dirty: BTreeSet<InodeNo>,
    lost_found: Option<InodeNo>,
}

impl Fsck<'_> {
    pub(crate) fn check_namespace(
        &mut self,
        r: &mut Records,
        b: &mut BlockState,
    ) -> Result<HashMap<InodeNo, Vec<String>>, FsckError> {
        self.progress
            .step("checking the namespace", r.inodes.len() as u64);
        let fresh = r.inodes.is_empty() && r.bad_inodes.is_empty() && r.dentries.is_empty();
        let mut t = Tree {
            included: vec![false; r.dentries.len()],
            ..Tree::default()
        };
        if !fresh && self.check_root(r, &mut t) {
            self.check_symlinks(r, b, &mut t);
            self.check_dentries(r, &mut t);
            self.check_directory_links(r, &mut t);
            self.walk(r, &mut t, ROOT, "/".into());
            self.check_unreachable(r, b, &mut t);
            self.check_link_counts(r, &mut t);
        }
        self.check_orphans(r);
        self.check_xattrs(r);
        self.check_special_files(r);
        self.check_file_mappings(r, b);
        if !fresh {
            self.check_counter(r);
        }
        for ino in std::mem::take(&mut t.dirty) {
            if let Some(i) = r.inodes.get(&ino) {
                self.put(&records::inode_key(ino), &i.encode());
            }
        }
        for (ino, path) in &t.paths {
            let names = t.all_paths.entry(*ino).or_default();
            if !names.contains(path) {
                names.insert(0, path.clone());
            }
        }
        Ok(t.all_paths)
    }

    fn path(t: &Tree, ino: InodeNo) -> Option<&String> {
        t.paths.get(&ino)
    }

    fn new_dir(&self, parent: InodeNo, perm: u32) -> Inode {
        Inode::new(K::Dir, perm, 0, 0, parent, self.options.now_ns)
    }

    /// Whether the tree can be checked (the root is, or now is, a directory).
    fn check_root(&mut self, r: &mut Records, t: &mut Tree) -> bool {
        if r.bad_inodes.contains(&ROOT) {
            return false;
        }
        match r.inodes.get(&ROOT).copied() {
            None => {
                if self.report(
                    Kind::RootMissing,
                    Class::Safe,
                    Objects::ino(ROOT),
                    "the root directory (inode 1) does not exist".into(),
                    Some("create it"),
                ) {
                    r.inodes.insert(ROOT, self.new_dir(ROOT, 0o755));
                    t.dirty.insert(ROOT);
                    true
                } else {
                    false
                }
            }
            Some(i) if i.kind != K::Dir => {
                self.report(
                    Kind::RootNotDirectory,
                    Class::None,
                    Objects::ino(ROOT),
                    format!("the root (inode 1) is a {:?}, not a directory", i.kind),
                    None,
                );
                false
            }
            Some(i) => {
                if i.parent != ROOT.0
                    && self.report(
                        Kind::WrongParent,
                        Class::Safe,
                        Objects::ino(ROOT),
                        format!("the root's parent field is {}, not 1", i.parent),
                        Some("set it to 1"),
                    )
                {
                    r.inodes.get_mut(&ROOT).expect("present").parent = ROOT.0;
                    t.dirty.insert(ROOT);
                }
                true
            }
        }
    }

    /// Frees inode `ino` (an applied repair): its record, target, xattrs, orphan record
    /// and mappings.
    fn free_inode(&mut self, r: &mut Records, b: &mut BlockState, ino: InodeNo) {
        r.inodes.remove(&ino);
        self.delete(&records::inode_key(ino));
        if r.symlinks.remove(&ino).is_some() {
            self.delete(&records::symlink_key(ino));
        }
        let names: Vec<Vec<u8>> = r
            .xattrs
            .iter()
            .filter(|(i, _, _)| *i == ino)
            .map(|(_, n, _)| n.clone())
            .collect();
        for n in names {
            self.delete(&records::xattr_key(ino, &n));
        }
        r.xattrs.retain(|(i, _, _)| *i != ino);
        if r.orphans.remove(&ino) {
            self.delete(&records::orphan_key(ino));
        }
        for i in 0..r.mappings.len() {
            if r.mappings[i].ino == ino && b.kept[i] {
                self.drop_mapping(r, b, i);
            }
        }
    }

    /// Removes dentry `j` (an applied repair).
    fn drop_dentry(&mut self, r: &Records, t: &mut Tree, j: usize) {
        let d = &r.dentries[j];
        self.delete(&records::dentry_key(d.parent, &d.name));
        t.included[j] = false;
    }

    /// Symlinks without a usable target are removed with their names; targets of
    /// anything else are stray.
    fn check_symlinks(&mut self, r: &mut Records, b: &mut BlockState, t: &mut Tree) {
        let links: Vec<InodeNo> = r
            .inodes
            .iter()
            .filter(|(_, i)| i.kind == K::Symlink)
            .map(|(n, _)| *n)
            .collect();
        for ino in links {
            let len = r.symlinks.get(&ino).map(Vec::len);
            if matches!(len, Some(1..=SYMLINK_TARGET_BYTES_MAX)) {
                continue;
            }
            let what = match len {
                None => "has no target".to_string(),
                Some(n) => format!("has a target of {n} bytes"),
            };
            if self.report(
                Kind::SymlinkWithoutTarget,
                Class::Destructive,
                Objects::ino(ino),
                format!("symlink {ino} {what}"),
                Some("remove the symlink and its names"),
            ) {
                for j in 0..r.dentries.len() {
                    if r.dentries[j].d.ino == ino {
                        self.drop_dentry(r, t, j);
                    }
                }
                self.free_inode(r, b, ino);
            }
        }
        let stray: Vec<InodeNo> = r
            .symlinks
            .keys()
            .filter(|n| {
                !r.bad_inodes.contains(n) && r.inodes.get(n).is_none_or(|i| i.kind != K::Symlink)
            })
            .copied()
            .collect();
        for ino in stray {
            if self.report(
                Kind::StraySymlinkTarget,
                Class::Safe,
                Objects::ino(ino),
                format!("a symlink target is stored for inode {ino}, which is not a symlink"),
                Some("delete it"),
            ) {
                r.symlinks.remove(&ino);
                self.delete(&records::symlink_key(ino));
            }
        }
    }

    /// Each entry on its own: name, parent, target, kind. Marks the usable ones.
    fn check_dentries(&mut self, r: &Records, t: &mut Tree) {
        let dropped_silently: BTreeSet<Vec<u8>> = self
            .writes
            .iter()
            .filter(|(k, v)| v.is_none() && k.first() == Some(&records::DENTRY_TAG))
            .map(|(k, _)| k.clone())
            .collect();
        for (j, DentryRec { parent, name, d }) in r.dentries.iter().enumerate() {
            let (parent, d) = (*parent, *d);
            if dropped_silently.contains(&records::dentry_key(parent, name)) {
                continue;
            }
            let obj = Objects::entry(parent, name);
            let drop = "drop the entry";
            let problem = if !name_ok(name) {
                Some((
                    Kind::BadDentryName,
                    format!(
                        "entry {:?} in directory {parent} has an invalid name",
                        show(name)
                    ),
                ))
            } else if r.bad_inodes.contains(&parent) || r.bad_inodes.contains(&d.ino) {
                continue;
            } else if r.inodes.get(&parent).is_none_or(|p| p.kind != K::Dir) {
                let what = if r.inodes.contains_key(&parent) {
                    "is not a directory"
                } else {
                    "does not exist"
                };
                Some((
                    Kind::DentryInNonDirectory,
                    format!("entry {:?} is in inode {parent}, which {what}", show(name)),
                ))
            } else if d.ino == ROOT {
                Some((
                    Kind::DentryNamesRoot,
                    format!(
                        "entry {:?} in directory {parent} names the root",
                        show(name)
                    ),
                ))
            } else if !r.inodes.contains_key(&d.ino) {
                Some((
                    Kind::DanglingDentry,
                    format!(
                        "entry {:?} in directory {parent} names inode {}, which does not exist",
                        show(name),
                        d.ino
                    ),
                ))
            } else {
                None
            };
            if let Some((kind, message)) = problem {
                if self.report(kind, Class::Destructive, obj, message, Some(drop)) {
                    self.delete(&records::dentry_key(parent, name));
                }
                continue;
            }
            let kind = r.inodes[&d.ino].kind;
            if kind != d.kind
                && self.report(
                    Kind::DentryKindMismatch,
                    Class::Safe,
                    obj,
                    format!(
                        "entry {:?} in directory {parent} says {:?}; inode {} is a {kind:?}",
                        show(name),
                        d.kind,
                        d.ino
                    ),
                    Some("set the entry's kind from the inode"),
                )
            {
                let fixed = Dentry { ino: d.ino, kind };
                self.put(&records::dentry_key(parent, name), &fixed.encode());
            }
            t.included[j] = true;
        }
    }

    /// A directory keeps one name: the entry in the directory its parent field names,
    /// else the first.
    fn check_directory_links(&mut self, r: &Records, t: &mut Tree) {
        let mut by_dir: BTreeMap<InodeNo, Vec<usize>> = BTreeMap::new();
        for (j, d) in r.dentries.iter().enumerate() {
            if t.included[j] && r.inodes[&d.d.ino].kind == K::Dir {
                by_dir.entry(d.d.ino).or_default().push(j);
            }
        }
        for (dir, names) in by_dir.into_iter().filter(|(_, n)| n.len() > 1) {
            let parent = r.inodes[&dir].parent;
            let keep = names
                .iter()
                .copied()
                .find(|&j| r.dentries[j].parent.0 == parent)
                .unwrap_or(names[0]);
            for j in names.into_iter().filter(|&j| j != keep) {
                let d = &r.dentries[j];
                let kept = &r.dentries[keep];
                if self.report(
                    Kind::DirectoryMultipleLinks,
                    Class::Destructive,
                    Objects::entry(d.parent, &d.name),
                    format!(
                        "directory {dir} is named {:?} in directory {} and {:?} in directory {}",
                        show(&d.name),
                        d.parent,
                        show(&kept.name),
                        kept.parent
                    ),
                    Some("drop this name"),
                ) {
                    self.drop_dentry(r, t, j);
                } else {
                    // Kept out of the walk either way: a directory has one place.
                    t.included[j] = false;
                }
            }
        }
        for (j, d) in r.dentries.iter().enumerate() {
            if t.included[j] {
                t.children.entry(d.parent).or_default().push(j);
                t.incoming.entry(d.d.ino).or_default().push(j);
            }
        }
    }

    /// Visits everything below `top` (breadth first), counting links and fixing parent
    /// fields.
    fn walk(&mut self, r: &mut Records, t: &mut Tree, top: InodeNo, top_path: String) {
        if !t.visited.insert(top) {
            return;
        }
        t.paths.insert(top, top_path);
        let mut queue = VecDeque::from([top]);
        while let Some(dir) = queue.pop_front() {
            self.progress.advance(1);
            let children = t.children.get(&dir).cloned().unwrap_or_default();
            for j in children {
                let DentryRec { name, d, .. } = &r.dentries[j];
                let child = d.ino;
                let Some(inode) = r.inodes.get(&child).copied() else {
                    continue;
                };
                let base = t.paths.get(&dir).cloned().unwrap_or_default();
                let path = format!("{}/{}", base.trim_end_matches('/'), show(name));
                if inode.kind == K::Dir {
                    *t.subdirs.entry(dir).or_insert(0) += 1;
                    if inode.parent != dir.0
                        && self.report(
                            Kind::WrongParent,
                            Class::Safe,
                            Objects::ino(child).with_path(Some(&path)),
                            format!("directory {child} ({path}) has parent field {}, but its entry is in directory {dir}", inode.parent),
                            Some("set the parent field"),
                        )
                    {
                        r.inodes.get_mut(&child).expect("present").parent = dir.0;
                        t.dirty.insert(child);
                    }
                } else {
                    *t.links.entry(child).or_insert(0) += 1;
                    t.all_paths.entry(child).or_default().push(path.clone());
                }
                if t.visited.insert(child) {
                    t.paths.insert(child, path);
                    if inode.kind == K::Dir {
                        queue.push_back(child);
                    }
                }
            }
        }
    }

    fn check_link_counts(&mut self, r: &mut Records, t: &mut Tree) {
        let inos: Vec<InodeNo> = r.inodes.keys().copied().collect();
        for ino in inos {
            if t.skip_count.contains(&ino) || !t.visited.contains(&ino) {
                continue;
            }
            let i = r.inodes[&ino];
            let want = match i.kind {
                K::Dir => 2 + t.subdirs.get(&ino).copied().unwrap_or(0),
                _ => t.links.get(&ino).copied().unwrap_or(0),
            };
            if i.nlink != want
                && self.report(
                    Kind::WrongLinkCount,
                    Class::Safe,
                    Objects::ino(ino).with_path(Self::path(t, ino)),
                    format!("inode {ino} has link count {}; {want} counted", i.nlink),
                    Some("set the link count"),
                )
            {
                r.inodes.get_mut(&ino).expect("present").nlink = want;
                t.dirty.insert(ino);
            }
        }
    }
}
