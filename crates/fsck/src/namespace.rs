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
//! - mappings belong to live regular files and lie below `ceil(size / 4 KiB)`;
//! - symlinks have a target of 1-4096 bytes; targets, xattrs and orphan records belong
//!   to live inodes; every inode number is below `c:next-ino`.
//!
//! Repairs: counts and parent fields are recomputed from the entries; entries naming
//! nothing are dropped; a directory with two names keeps the one its parent field
//! names; a disconnected inode (or subtree) is linked into `/lost+found` as `#ino`; an
//! unreachable inode with no links and no orphan record (a deletion cut short) is freed.

use crate::blocks::BlockState;
use crate::problem::{Class, Kind, Objects};
use crate::scan::{DentryRec, Records, ORPHAN_TAG};
use crate::{Fsck, FsckError};
use format::constants::BLOCK_SIZE_BYTES;
use format::InodeNo;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use vfs::records::{self, Dentry, Inode, NAME_MAX, ROOT};
use vfs::Kind as K;

/// Longest symlink target, in bytes (FORMAT.md §6.4).
const SYMLINK_TARGET_BYTES_MAX: usize = 4096;
/// Largest xattr value, in bytes (FORMAT.md §6.4).
const XATTR_VALUE_BYTES_MAX: usize = 64 << 10;
const LOST_FOUND: &[u8] = b"lost+found";

fn orphan_key(ino: InodeNo) -> [u8; 9] {
    let mut k = records::inode_key(ino);
    k[0] = ORPHAN_TAG;
    k
}

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
    ) -> Result<(), FsckError> {
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
        self.check_file_mappings(r, b);
        if !fresh {
            self.check_counter(r);
        }
        for ino in std::mem::take(&mut t.dirty) {
            if let Some(i) = r.inodes.get(&ino) {
                self.put(&records::inode_key(ino), &i.encode());
            }
        }
        Ok(())
    }

    fn path(t: &Tree, ino: InodeNo) -> Option<&String> {
        t.paths.get(&ino)
    }

    fn new_dir(&self, parent: InodeNo, perm: u32) -> Inode {
        let now = self.options.now_ns;
        Inode {
            kind: K::Dir,
            perm,
            uid: 0,
            gid: 0,
            nlink: 2,
            parent: parent.0,
            size: 0,
            atime_ns: now,
            mtime_ns: now,
            ctime_ns: now,
            btime_ns: now,
        }
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
            self.delete(&orphan_key(ino));
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

    /// The directory disconnected inodes are linked into, created if need be; `None` if
    /// the root holds a `lost+found` that is not a directory.
    fn lost_found(&mut self, r: &mut Records, t: &mut Tree) -> Option<InodeNo> {
        if let Some(lf) = t.lost_found {
            return Some(lf);
        }
        let existing = t.children.get(&ROOT).and_then(|c| {
            c.iter()
                .map(|&j| &r.dentries[j])
                .find(|d| d.name == LOST_FOUND)
                .map(|d| d.d.ino)
        });
        let lf = match existing {
            Some(ino) if r.inodes.get(&ino).is_some_and(|i| i.kind == K::Dir) => ino,
            Some(_) => return None,
            None => {
                let ino = self.allocate_ino(r);
                r.inodes.insert(ino, self.new_dir(ROOT, 0o700));
                t.dirty.insert(ino);
                self.put(
                    &records::dentry_key(ROOT, LOST_FOUND),
                    &Dentry { ino, kind: K::Dir }.encode(),
                );
                *t.subdirs.entry(ROOT).or_insert(0) += 1;
                // The root gains a subdirectory: part of this repair, not a new problem.
                if let Some(root) = r.inodes.get_mut(&ROOT) {
                    root.nlink = root.nlink.saturating_add(1);
                    t.dirty.insert(ROOT);
                }
                t.visited.insert(ino);
                t.paths.insert(ino, "/lost+found".into());
                ino
            }
        };
        t.lost_found = Some(lf);
        Some(lf)
    }

    /// A fresh inode number: at or above `c:next-ino` and above every inode; the
    /// counter is raised past it.
    fn allocate_ino(&mut self, r: &mut Records) -> InodeNo {
        let above = r
            .inodes
            .keys()
            .chain(r.bad_inodes.iter())
            .map(|i| i.0.saturating_add(1))
            .max()
            .unwrap_or(ROOT.0 + 1);
        let ino = r.counter.unwrap_or(0).max(above);
        let next = ino.saturating_add(1);
        r.counter = Some(next);
        self.put(records::COUNTER_KEY, &next.to_le_bytes());
        InodeNo(ino)
    }

    /// Links `ino` into /lost+found as `#ino` (an applied repair).
    fn attach(&mut self, r: &mut Records, t: &mut Tree, lf: InodeNo, ino: InodeNo) {
        let inode = r.inodes[&ino];
        let name = format!("#{}", ino.0).into_bytes();
        self.put(
            &records::dentry_key(lf, &name),
            &Dentry {
                ino,
                kind: inode.kind,
            }
            .encode(),
        );
        let path = format!("/lost+found/#{}", ino.0);
        if inode.kind == K::Dir {
            *t.subdirs.entry(lf).or_insert(0) += 1;
            if inode.parent != lf.0 {
                r.inodes.get_mut(&ino).expect("present").parent = lf.0;
                t.dirty.insert(ino);
            }
        } else {
            *t.links.entry(ino).or_insert(0) += 1;
        }
        self.walk(r, t, ino, path);
    }

    /// Inodes the walk from the root did not reach.
    fn check_unreachable(&mut self, r: &mut Records, b: &mut BlockState, t: &mut Tree) {
        let unreached = |r: &Records, t: &Tree| -> Vec<InodeNo> {
            r.inodes
                .keys()
                .filter(|i| !t.visited.contains(i))
                .copied()
                .collect()
        };
        // Open unlinked inodes that an orphan record keeps are fine.
        for ino in unreached(r, t) {
            let i = r.inodes[&ino];
            if i.nlink == 0 && r.orphans.contains(&ino) && !t.incoming.contains_key(&ino) {
                t.visited.insert(ino);
                t.skip_count.insert(ino);
            }
        }
        // Tops of disconnected pieces first, then what is left (directory cycles).
        let mut rounds = 0;
        loop {
            let left = unreached(r, t);
            let Some(&first) = left.first() else { break };
            rounds += 1;
            assert!(rounds <= r.dentries.len() + r.inodes.len() + 1, "bounded");
            let tops: Vec<InodeNo> = left
                .iter()
                .copied()
                .filter(|i| !t.incoming.contains_key(i))
                .collect();
            let tops = if tops.is_empty() { vec![first] } else { tops };
            for ino in tops {
                if t.visited.contains(&ino) {
                    continue;
                }
                self.unattached(r, b, t, ino);
            }
        }
    }

    /// One disconnected inode (the top of a piece, or a member of a cycle).
    fn unattached(&mut self, r: &mut Records, b: &mut BlockState, t: &mut Tree, ino: InodeNo) {
        let i = r.inodes[&ino];
        let empty = t.children.get(&ino).is_none_or(Vec::is_empty);
        let named = t.incoming.get(&ino).cloned().unwrap_or_default();
        if i.nlink == 0 && empty && named.is_empty() {
            if self.report(
                Kind::UnlinkedInode,
                Class::Destructive,
                Objects::ino(ino),
                format!("inode {ino} ({:?}) has no links, no name and no orphan record (a deletion cut short)", i.kind),
                Some("free it"),
            ) {
                self.free_inode(r, b, ino);
            } else {
                t.visited.insert(ino);
                t.skip_count.insert(ino);
            }
            return;
        }
        let how = if named.is_empty() {
            "no entry names it".to_string()
        } else {
            "its only names are inside a directory cycle cut off from the root".to_string()
        };
        let can = t.lost_found.is_some() || self.lost_found_possible(r, t);
        let fix = self.report(
            Kind::UnreachableInode,
            Class::Destructive,
            Objects::ino(ino),
            format!(
                "inode {ino} ({:?}, {} links) is not reachable from the root: {how}",
                i.kind, i.nlink
            ),
            can.then_some("link it into /lost+found"),
        );
        match fix.then(|| self.lost_found(r, t)).flatten() {
            Some(lf) => {
                for j in named {
                    self.drop_dentry(r, t, j);
                    let p = r.dentries[j].parent;
                    if let Some(c) = t.children.get_mut(&p) {
                        c.retain(|&x| x != j);
                    }
                }
                t.incoming.remove(&ino);
                self.attach(r, t, lf, ino);
            }
            None => {
                t.skip_count.insert(ino);
                self.walk(r, t, ino, format!("(unattached inode {ino})"));
            }
        }
    }

    fn lost_found_possible(&self, r: &Records, t: &Tree) -> bool {
        let existing = t.children.get(&ROOT).and_then(|c| {
            c.iter()
                .map(|&j| &r.dentries[j])
                .find(|d| d.name == LOST_FOUND)
                .map(|d| d.d.ino)
        });
        match existing {
            None => r.inodes.get(&ROOT).is_some_and(|i| i.kind == K::Dir),
            Some(ino) => r.inodes.get(&ino).is_some_and(|i| i.kind == K::Dir),
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

    fn check_orphans(&mut self, r: &mut Records) {
        let orphans: Vec<InodeNo> = r.orphans.iter().copied().collect();
        for ino in orphans {
            if r.bad_inodes.contains(&ino) {
                continue;
            }
            let problem = match r.inodes.get(&ino) {
                None => Some((
                    Kind::OrphanWithoutInode,
                    format!("an orphan record names inode {ino}, which does not exist"),
                )),
                Some(i) if i.nlink > 0 => Some((
                    Kind::OrphanOfLinkedInode,
                    format!(
                        "an orphan record names inode {ino}, which has {} links",
                        i.nlink
                    ),
                )),
                Some(_) => None,
            };
            if let Some((kind, message)) = problem {
                if self.report(
                    kind,
                    Class::Safe,
                    Objects::ino(ino),
                    message,
                    Some("delete the orphan record"),
                ) {
                    r.orphans.remove(&ino);
                    self.delete(&orphan_key(ino));
                }
            }
        }
    }

    fn check_xattrs(&mut self, r: &mut Records) {
        let xattrs = std::mem::take(&mut r.xattrs);
        for (ino, name, len) in &xattrs {
            let (ino, len) = (*ino, *len);
            if r.bad_inodes.contains(&ino) {
                continue;
            }
            let mut obj = Objects::ino(ino);
            obj.name = Some(show(name));
            let problem = if !r.inodes.contains_key(&ino) {
                Some((
                    Kind::StrayXattr,
                    Class::Safe,
                    format!(
                        "xattr {:?} belongs to inode {ino}, which does not exist",
                        show(name)
                    ),
                ))
            } else if ![&b"user."[..], b"trusted."]
                .iter()
                .any(|ns| name.len() > ns.len() && name.starts_with(ns))
                || name.len() > NAME_MAX
                || len > XATTR_VALUE_BYTES_MAX
            {
                Some((Kind::BadXattr, Class::Destructive, format!("xattr {:?} of inode {ino} ({len} bytes) has a name or size the VFS never writes", show(name))))
            } else {
                None
            };
            if let Some((kind, class, message)) = problem {
                if self.report(kind, class, obj, message, Some("delete the xattr")) {
                    self.delete(&records::xattr_key(ino, name));
                }
            }
        }
        r.xattrs = xattrs;
    }

    /// Kept mappings against their inodes: live, a regular file, below its size.
    fn check_file_mappings(&mut self, r: &Records, b: &mut BlockState) {
        for i in 0..r.mappings.len() {
            if !b.kept[i] {
                continue;
            }
            let m = r.mappings[i];
            if r.bad_inodes.contains(&m.ino) {
                continue;
            }
            let obj = Objects::block(m.ino, m.block.0, m.m.addr);
            let problem = match r.inodes.get(&m.ino) {
                None => Some((
                    Kind::MappingWithoutInode,
                    Class::Safe,
                    format!(
                        "block {} of inode {} is mapped, but the inode does not exist",
                        m.block.0, m.ino
                    ),
                )),
                Some(inode) if inode.kind != K::File => Some((
                    Kind::MappingForNonFile,
                    Class::Destructive,
                    format!(
                        "block {} of inode {} is mapped, but the inode is a {:?}",
                        m.block.0, m.ino, inode.kind
                    ),
                )),
                Some(inode) if m.block.0 >= inode.size.div_ceil(BLOCK_SIZE_BYTES) => Some((
                    Kind::MappingBeyondSize,
                    Class::Safe,
                    format!(
                        "block {} of inode {} is mapped beyond its size of {} bytes",
                        m.block.0, m.ino, inode.size
                    ),
                )),
                Some(_) => None,
            };
            if let Some((kind, class, message)) = problem {
                if self.report(kind, class, obj, message, Some("drop the mapping")) {
                    self.drop_mapping(r, b, i);
                }
            }
        }
    }

    fn check_counter(&mut self, r: &mut Records) {
        let above = r
            .inodes
            .keys()
            .chain(r.bad_inodes.iter())
            .chain(r.orphans.iter())
            .map(|i| i.0.saturating_add(1))
            .max()
            .unwrap_or(ROOT.0 + 1);
        let counter = r.counter.unwrap_or(ROOT.0 + 1);
        if counter < above
            && self.report(
                Kind::InodeCounterLow,
                Class::Safe,
                Objects::default(),
                format!(
                    "the inode counter is {counter}, but inode {} exists (numbers would be reused)",
                    above - 1
                ),
                Some("raise the counter"),
            )
        {
            r.counter = Some(above);
            self.put(records::COUNTER_KEY, &above.to_le_bytes());
        }
    }
}
