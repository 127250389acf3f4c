//! Inodes the walk from the root does not reach: open orphans are accepted, deletions
//! cut short are freed, everything else (a file, a subtree, a directory cycle) is linked
//! into `/lost+found` as `#ino` (docs/DESIGN.md §13.2).
//!
//! Invariants:
//! - Every round visits or frees at least one inode, so the loop ends within
//!   (inodes + entries) rounds.
//! - `/lost+found` is created at most once, with a fresh inode number above every
//!   inode and the counter, which is raised past it.

use super::LOST_FOUND;
use super::{Tree, K};
use crate::blocks::BlockState;
use crate::problem::{Class, Kind, Objects};
use crate::scan::Records;
use crate::Fsck;
use format::InodeNo;
use vfs::records::{self, Dentry, ROOT};

impl Fsck<'_> {
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
    pub(super) fn check_unreachable(&mut self, r: &mut Records, b: &mut BlockState, t: &mut Tree) {
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
}
