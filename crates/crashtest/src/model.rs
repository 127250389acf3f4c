//! A namespace model for the generated workloads: which names exist and what they are,
//! so each generated step carries the outcome POSIX (and docs/SEMANTICS.md §3) gives it
//! (`expect ERRNO`), independently of the file system under test.
//!
//! Invariants:
//! - Only names, kinds, link counts, extended attribute names and descriptors are
//!   modelled: enough for every errno the generated operations can meet, nothing else.
//! - The order of checks follows Linux's (the parent's walk, then the name, then the
//!   kinds), which is the order the vfs checks in.

use crate::workload::{Op, Target};
use std::collections::{BTreeMap, BTreeSet};
use vfs::{Kind, RenameMode};

type Errno = i32;

#[derive(Debug, Clone)]
struct Node {
    kind: Kind,
    nlink: u32,
    /// A directory's entries.
    entries: BTreeMap<String, u64>,
    /// A symbolic link's target.
    target: String,
    xattrs: BTreeSet<String>,
}

impl Node {
    fn new(kind: Kind) -> Node {
        Node {
            kind,
            nlink: 1,
            entries: BTreeMap::new(),
            target: String::new(),
            xattrs: BTreeSet::new(),
        }
    }
}

/// The model of a tree (starting empty but for the root).
#[derive(Debug, Clone)]
pub struct Model {
    nodes: BTreeMap<u64, Node>,
    next: u64,
    fds: BTreeMap<String, u64>,
}

const ROOT: u64 = 1;
/// Symbolic links followed in one walk before ELOOP (as Linux).
const LINKS_MAX: u32 = 40;

impl Default for Model {
    fn default() -> Self {
        Model {
            nodes: BTreeMap::from([(ROOT, Node::new(Kind::Dir))]),
            next: ROOT + 1,
            fds: BTreeMap::new(),
        }
    }
}

impl Model {
    /// Applies `op` and returns its outcome (the model changes only on success).
    pub fn apply(&mut self, op: &Op) -> Result<(), Errno> {
        match op {
            Op::Create(p, _) => self.add(p, Kind::File, "").map(drop),
            Op::Mknod(p, kind, ..) => self.add(p, kind.kind(), "").map(drop),
            Op::Mkdir(p, _) => self.add(p, Kind::Dir, "").map(drop),
            Op::Symlink(t, p) => self.add(p, Kind::Symlink, t).map(drop),
            Op::Write(t, ..)
            | Op::Append(t, ..)
            | Op::Truncate(t, _)
            | Op::Punch(t, ..)
            | Op::Falloc(t, ..)
            | Op::Zero(t, ..) => match self.node(self.target(t)?).kind {
                Kind::File => Ok(()),
                Kind::Dir => Err(libc::EISDIR),
                // A symbolic link (dangling: others are followed) or a special file.
                _ => Err(libc::EINVAL),
            },
            Op::Fsync(t) | Op::Fdatasync(t) | Op::Chmod(t, _) => self.target(t).map(drop),
            Op::SetXattr(t, name, _) => {
                let ino = self.xattr_holder(t, name)?;
                self.node_mut(ino).xattrs.insert(name.clone());
                Ok(())
            }
            Op::RemoveXattr(t, name) => {
                let ino = self.xattr_holder(t, name)?;
                match self.node_mut(ino).xattrs.remove(name) {
                    true => Ok(()),
                    false => Err(libc::ENODATA),
                }
            }
            Op::Unlink(p) => self.remove(p, false),
            Op::Rmdir(p) => self.remove(p, true),
            Op::Link(a, b) => self.link(a, b),
            Op::Rename(a, b, mode) => self.rename(a, b, *mode),
            Op::Open(name, p) => {
                if self.fds.contains_key(name) {
                    return Err(libc::EBADF);
                }
                let ino = self.resolve(p, true)?;
                self.fds.insert(name.clone(), ino);
                Ok(())
            }
            Op::Close(name) => match self.fds.remove(name) {
                Some(ino) => {
                    self.release(ino);
                    Ok(())
                }
                None => Err(libc::EBADF),
            },
            Op::Sync => Ok(()),
        }
    }

    /// The inode `t` names, if it may hold attribute `name`: `user.` ones only on files
    /// and directories (EPERM for a special file, as Linux); `trusted.` ones (root's) on
    /// any inode.
    fn xattr_holder(&self, t: &Target, name: &str) -> Result<u64, Errno> {
        let ino = self.target(t)?;
        match self.node(ino).kind {
            Kind::File | Kind::Dir => Ok(ino),
            _ if name.starts_with("user.") => Err(libc::EPERM),
            _ => Ok(ino),
        }
    }

    fn node(&self, ino: u64) -> &Node {
        &self.nodes[&ino]
    }

    fn node_mut(&mut self, ino: u64) -> &mut Node {
        self.nodes.get_mut(&ino).expect("a live node")
    }

    fn target(&self, t: &Target) -> Result<u64, Errno> {
        match t {
            Target::Path(p) => self.resolve(p, true),
            Target::Fd(name) => self.fds.get(name).copied().ok_or(libc::EBADF),
        }
    }

    /// The inode `path` names (following a final symbolic link with `follow`).
    fn resolve(&self, path: &str, follow: bool) -> Result<u64, Errno> {
        let mut links = 0;
        self.walk(ROOT, path, follow, &mut links)
    }

    fn walk(&self, start: u64, path: &str, follow: bool, links: &mut u32) -> Result<u64, Errno> {
        let mut at = if path.starts_with('/') { ROOT } else { start };
        let names: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
        for (i, name) in names.iter().enumerate() {
            let dir = self.node(at);
            if dir.kind != Kind::Dir {
                return Err(libc::ENOTDIR);
            }
            let child = *dir.entries.get(*name).ok_or(libc::ENOENT)?;
            let last = i + 1 == names.len();
            at = match &self.node(child).kind {
                Kind::Symlink if !last || follow => {
                    *links += 1;
                    if *links > LINKS_MAX {
                        return Err(libc::ELOOP);
                    }
                    let target = self.node(child).target.clone();
                    self.walk(at, &target, true, links)?
                }
                _ => child,
            };
        }
        Ok(at)
    }

    /// The directory `path`'s parent names, and its last name.
    fn parent<'p>(&self, path: &'p str) -> Result<(u64, &'p str), Errno> {
        let (dir, name) = path.rsplit_once('/').expect("absolute paths");
        let ino = self.resolve(if dir.is_empty() { "/" } else { dir }, true)?;
        if self.node(ino).kind != Kind::Dir {
            return Err(libc::ENOTDIR);
        }
        Ok((ino, name))
    }

    fn add(&mut self, path: &str, kind: Kind, target: &str) -> Result<u64, Errno> {
        let (dir, name) = self.parent(path)?;
        if self.node(dir).entries.contains_key(name) {
            return Err(libc::EEXIST);
        }
        let ino = self.next;
        self.next += 1;
        let mut node = Node::new(kind);
        node.target = target.to_string();
        self.nodes.insert(ino, node);
        self.node_mut(dir).entries.insert(name.to_string(), ino);
        Ok(ino)
    }

    fn remove(&mut self, path: &str, dir_wanted: bool) -> Result<(), Errno> {
        let (dir, name) = self.parent(path)?;
        let ino = *self.node(dir).entries.get(name).ok_or(libc::ENOENT)?;
        let node = self.node(ino);
        match (dir_wanted, node.kind == Kind::Dir) {
            (false, true) => return Err(libc::EISDIR),
            (true, false) => return Err(libc::ENOTDIR),
            (true, true) if !node.entries.is_empty() => return Err(libc::ENOTEMPTY),
            _ => {}
        }
        self.node_mut(dir).entries.remove(name);
        self.unlinked(ino);
        Ok(())
    }

    /// One name of `ino` is gone.
    fn unlinked(&mut self, ino: u64) {
        let node = self.node_mut(ino);
        node.nlink = if node.kind == Kind::Dir {
            0
        } else {
            node.nlink - 1
        };
        if node.nlink == 0 {
            self.release(ino);
        }
    }

    /// Forgets `ino` if it has no name and no descriptor.
    fn release(&mut self, ino: u64) {
        if self.node(ino).nlink == 0 && !self.fds.values().any(|&f| f == ino) {
            self.nodes.remove(&ino);
        }
    }

    fn link(&mut self, existing: &str, new: &str) -> Result<(), Errno> {
        let ino = self.resolve(existing, false)?;
        let (dir, name) = self.parent(new)?;
        if self.node(ino).kind == Kind::Dir {
            return Err(libc::EPERM);
        }
        if self.node(dir).entries.contains_key(name) {
            return Err(libc::EEXIST);
        }
        self.node_mut(dir).entries.insert(name.to_string(), ino);
        self.node_mut(ino).nlink += 1;
        Ok(())
    }

    /// Whether directory `a` is `b` or an ancestor of it.
    fn is_ancestor(&self, a: u64, b: u64) -> bool {
        if a == b {
            return true;
        }
        self.node(a)
            .entries
            .values()
            .any(|&c| self.node(c).kind == Kind::Dir && self.is_ancestor(c, b))
    }

    fn rename(&mut self, from: &str, to: &str, mode: RenameMode) -> Result<(), Errno> {
        let (sp, sname) = self.parent(from)?;
        let (dp, dname) = self.parent(to)?;
        let src = *self.node(sp).entries.get(sname).ok_or(libc::ENOENT)?;
        let dst = self.node(dp).entries.get(dname).copied();
        if sp == dp && sname == dname {
            return match mode {
                RenameMode::NoReplace => Err(libc::EEXIST),
                _ => Ok(()),
            };
        }
        let into = |m: &Model, dir: u64, dest: u64| {
            m.node(dir).kind == Kind::Dir && sp != dp && m.is_ancestor(dir, dest)
        };
        match (mode, dst) {
            (RenameMode::NoReplace, Some(_)) => Err(libc::EEXIST),
            (RenameMode::Exchange, None) => Err(libc::ENOENT),
            (RenameMode::Exchange, Some(d)) => {
                if into(self, src, dp) || into(self, d, sp) {
                    return Err(libc::EINVAL);
                }
                self.node_mut(dp).entries.insert(dname.to_string(), src);
                self.node_mut(sp).entries.insert(sname.to_string(), d);
                Ok(())
            }
            (_, target) => {
                if into(self, src, dp) {
                    return Err(libc::EINVAL);
                }
                if let Some(t) = target {
                    if t == src {
                        return Ok(());
                    }
                    let (s_dir, t_node) = (self.node(src).kind == Kind::Dir, self.node(t));
                    match (s_dir, t_node.kind == Kind::Dir) {
                        (false, true) => return Err(libc::EISDIR),
                        (true, false) => return Err(libc::ENOTDIR),
                        (true, true) if !t_node.entries.is_empty() => return Err(libc::ENOTEMPTY),
                        _ => {}
                    }
                    self.unlinked(t);
                }
                self.node_mut(sp).entries.remove(sname);
                self.node_mut(dp).entries.insert(dname.to_string(), src);
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{Workload, WriteMode};

    fn run(text: &str) -> Vec<Result<(), Errno>> {
        let w = Workload::parse("t", text).unwrap();
        let mut m = Model::default();
        w.steps.iter().map(|s| m.apply(&s.op)).collect()
    }

    #[test]
    fn outcomes_follow_posix() {
        let text = "mkdir /d\ncreate /d/f\ncreate /d/f\nrmdir /d\nunlink /d\nrename /d /d/e\n\
                    link /d /l\nlink /d/f /l\nunlink /d/f\nwrite /d/f 0 1\nwrite /l 0 1\n\
                    symlink /l /s\nwrite /s 0 1\nunlink /l\nwrite /s 0 1\nremovexattr /s u\n\
                    rename /d /x exchange\nmknod /p fifo\nopen h /d\nclose h\n\
                    mkdir /d/e\nrename /d /d/e/f\nrmdir /d/e\nrmdir /d/e\n\
                    mknod /q chr 600 1:3\nwrite /q 0 1\nsetxattr /q user.a v\nmknod /q sock\n\
                    setxattr /q trusted.a v\nunlink /q\n";
        use libc::*;
        let want = [
            Ok(()),
            Ok(()),
            Err(EEXIST),
            Err(ENOTEMPTY),
            Err(EISDIR),
            Err(EINVAL),
            Err(EPERM),
            Ok(()),
            Ok(()),
            Err(ENOENT),
            Ok(()),
            Ok(()),
            Ok(()),
            Ok(()),
            Err(ENOENT),
            Err(ENOENT),
            Err(ENOENT),
            Ok(()), // mknod /p fifo
            Ok(()),
            Ok(()),
            Ok(()),
            Err(EINVAL),
            Ok(()),
            Err(ENOENT),
            Ok(()),
            Err(EINVAL),
            Err(EPERM),
            Err(EEXIST),
            Ok(()),
            Ok(()),
        ];
        assert_eq!(run(text), want);
    }

    #[test]
    fn a_descriptor_keeps_its_file_after_the_name_goes() {
        let mut m = Model::default();
        let t = Target::Fd("h".into());
        for op in [
            Op::Create("/a".into(), 0o644),
            Op::Open("h".into(), "/a".into()),
            Op::Unlink("/a".into()),
        ] {
            m.apply(&op).unwrap();
        }
        assert_eq!(
            m.apply(&Op::Write(t.clone(), 0, 1, WriteMode::Sync)),
            Ok(())
        );
        assert_eq!(m.apply(&Op::Close("h".into())), Ok(()));
        assert_eq!(
            m.apply(&Op::Write(t, 0, 1, WriteMode::Buffered)),
            Err(libc::EBADF)
        );
        assert_eq!(m.nodes.len(), 1, "only the root is left");
    }
}
