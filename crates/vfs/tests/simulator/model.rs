//! The reference model of one actor's part of the tree: paths to nodes, and the objects
//! (inodes) they name with everything an operation can observe of them.
//!
//! Invariants:
//! - Every path's parent is a root or a `Dir` in `tree`.
//! - Hard links share one object id; object ids are unique across actors (the actor's
//!   number is in the high bits), so the models of all actors merge by union.
//! - `mapped` is exactly the set of blocks the file system maps for a file (the model of
//!   `st_blocks`, SEEK_DATA and SEEK_HOLE), following the rules of `vfs::sparse` and
//!   `FileSystem::truncate`.

use std::collections::{BTreeMap, BTreeSet, HashMap};

pub const BLOCK: u64 = 4096;

pub type Id = u64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Node {
    File(Id),
    Dir(Id),
    Symlink(Id),
    /// A FIFO, socket or device node (its number is the object's `rdev`).
    Special(Id, vfs::Kind),
}

impl Node {
    pub fn id(self) -> Id {
        match self {
            Node::File(i) | Node::Dir(i) | Node::Symlink(i) | Node::Special(i, _) => i,
        }
    }

    pub fn kind(self) -> vfs::Kind {
        match self {
            Node::File(_) => vfs::Kind::File,
            Node::Dir(_) => vfs::Kind::Dir,
            Node::Symlink(_) => vfs::Kind::Symlink,
            Node::Special(_, k) => k,
        }
    }
}

/// An inode as the model knows it.
#[derive(Debug, Clone, Default)]
pub struct Object {
    /// A file's contents (its length is the size).
    pub data: Vec<u8>,
    /// A file's mapped blocks.
    pub mapped: BTreeSet<u64>,
    /// A symlink's target.
    pub target: String,
    pub perm: u32,
    pub uid: u32,
    pub gid: u32,
    /// (atime, mtime) as a utimens set them; None once an operation may have changed them.
    pub times: Option<(i64, i64)>,
    pub xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
    /// A device node's number (`st_rdev`); 0 for every other kind.
    pub rdev: u64,
}

impl Object {
    pub fn new(perm: u32) -> Object {
        Object {
            perm,
            ..Object::default()
        }
    }

    /// Sets the size as a truncate does: blocks from the new end on are unmapped, growth
    /// leaves a hole (zeros).
    pub fn set_size(&mut self, size: u64) {
        if size < self.data.len() as u64 {
            let keep = size.div_ceil(BLOCK);
            self.mapped.retain(|&b| b < keep);
        }
        self.data.resize(size as usize, 0);
        self.times = None;
    }

    pub fn write(&mut self, offset: u64, bytes: &[u8]) {
        let end = offset as usize + bytes.len();
        if self.data.len() < end {
            self.data.resize(end, 0);
        }
        self.data[offset as usize..end].copy_from_slice(bytes);
        self.mapped
            .extend(offset / BLOCK..=(end as u64 - 1) / BLOCK);
        self.times = None;
    }

    /// PUNCH_HOLE and ZERO_RANGE: the bytes read as zeros, whole blocks are unmapped.
    pub fn zero(&mut self, offset: u64, end: u64) {
        let size = self.data.len() as u64;
        if offset < size {
            self.data[offset as usize..end.min(size) as usize].fill(0);
        }
        let (first_whole, end_whole) = (offset.div_ceil(BLOCK), end / BLOCK);
        self.mapped.retain(|&b| b < first_whole || b >= end_whole);
        self.times = None;
    }

    /// `lseek(SEEK_DATA)` (Err is ENXIO).
    pub fn seek_data(&self, offset: u64) -> Result<u64, i32> {
        let size = self.data.len() as u64;
        if offset >= size {
            return Err(libc::ENXIO);
        }
        match self.mapped.range(offset / BLOCK..).next() {
            Some(&b) if b * BLOCK < size => Ok(offset.max(b * BLOCK)),
            _ => Err(libc::ENXIO),
        }
    }

    /// `lseek(SEEK_HOLE)`.
    pub fn seek_hole(&self, offset: u64) -> Result<u64, i32> {
        let size = self.data.len() as u64;
        if offset >= size {
            return Err(libc::ENXIO);
        }
        let mut b = offset / BLOCK;
        while self.mapped.contains(&b) {
            b += 1;
        }
        Ok(offset.max(b * BLOCK).min(size))
    }
}

/// One actor's tree below its roots (directories that exist throughout and that the
/// model does not hold as nodes).
#[derive(Debug, Clone)]
pub struct Model {
    pub roots: Vec<String>,
    pub tree: BTreeMap<String, Node>,
    pub objects: HashMap<Id, Object>,
    next_id: Id,
}

pub fn parent(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}

pub fn join(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

/// `b` is `a` or inside it.
fn inside(a: &str, b: &str) -> bool {
    b == a || (b.starts_with(a) && b.as_bytes().get(a.len()) == Some(&b'/'))
}

impl Model {
    pub fn new(roots: Vec<String>, actor: u64) -> Model {
        Model {
            roots,
            tree: BTreeMap::new(),
            objects: HashMap::new(),
            next_id: actor << 40,
        }
    }

    /// The entries directly in `dir`, by path.
    pub fn children(&self, dir: &str) -> Vec<(&str, Node)> {
        let prefix = if dir == "/" {
            "/".to_string()
        } else {
            format!("{dir}/")
        };
        self.tree
            .range(prefix.clone()..)
            .take_while(|(p, _)| p.starts_with(&prefix))
            .filter(|(p, _)| !p[prefix.len()..].contains('/'))
            .map(|(p, n)| (p.as_str(), *n))
            .collect()
    }

    /// `st_nlink` of a node: names of a non-directory, 2 plus subdirectories of a directory.
    pub fn nlink(&self, path: &str, node: Node) -> u32 {
        match node {
            Node::Dir(_) => {
                2 + self
                    .children(path)
                    .iter()
                    .filter(|(_, n)| matches!(n, Node::Dir(_)))
                    .count() as u32
            }
            n => self.tree.values().filter(|&&m| m == n).count() as u32,
        }
    }

    /// Adds a new object with no name (O_TMPFILE).
    pub fn add_nameless(&mut self, object: Object) -> Id {
        let id = self.next_id;
        self.next_id += 1;
        self.objects.insert(id, object);
        id
    }

    /// Adds a new object named `path`.
    pub fn add(&mut self, path: String, make: impl FnOnce(Id) -> Node, object: Object) -> Node {
        let node = make(self.add_nameless(object));
        self.tree.insert(path, node);
        node
    }

    pub fn object(&self, node: Node) -> &Object {
        &self.objects[&node.id()]
    }

    pub fn object_mut(&mut self, node: Node) -> &mut Object {
        self.objects.get_mut(&node.id()).expect("a node's object")
    }

    /// Forgets objects no name and none of `open` refers to.
    pub fn forget_unreferenced(&mut self, open: &[Id]) {
        let live: BTreeSet<Id> = self
            .tree
            .values()
            .map(|n| n.id())
            .chain(open.iter().copied())
            .collect();
        self.objects.retain(|id, _| live.contains(id));
    }

    /// What a rename does to the tree, or the errno it must fail with.
    pub fn rename(
        &self,
        from: &str,
        to: &str,
        mode: vfs::RenameMode,
    ) -> Result<BTreeMap<String, Node>, i32> {
        use vfs::RenameMode;
        let src = *self.tree.get(from).ok_or(libc::ENOENT)?;
        let dst = self.tree.get(to).copied();
        let is_dir = |n: Node| matches!(n, Node::Dir(_));
        if from == to {
            return match (mode, dst) {
                (RenameMode::NoReplace, Some(_)) => Err(libc::EEXIST),
                _ => Ok(self.tree.clone()),
            };
        }
        let moved = |tree: &BTreeMap<String, Node>, a: &str, b: &str| -> Vec<(String, Node)> {
            tree.iter()
                .filter(|(p, _)| inside(a, p))
                .map(|(p, n)| (format!("{b}{}", &p[a.len()..]), *n))
                .collect()
        };
        match mode {
            RenameMode::NoReplace if dst.is_some() => return Err(libc::EEXIST),
            RenameMode::Exchange => {
                let d = dst.ok_or(libc::ENOENT)?;
                if (is_dir(src) && inside(from, to)) || (is_dir(d) && inside(to, from)) {
                    return Err(libc::EINVAL);
                }
                let (a, b) = (moved(&self.tree, from, to), moved(&self.tree, to, from));
                let mut next = self.tree.clone();
                next.retain(|p, _| !inside(from, p) && !inside(to, p));
                next.extend(a);
                next.extend(b);
                return Ok(next);
            }
            _ => {}
        }
        if is_dir(src) && inside(from, to) {
            return Err(libc::EINVAL);
        }
        let mut next = self.tree.clone();
        if let Some(d) = dst {
            if src == d && !is_dir(src) {
                return Ok(next); // two links of one inode: nothing happens
            }
            match (is_dir(src), is_dir(d)) {
                (false, true) => return Err(libc::EISDIR),
                (true, false) => return Err(libc::ENOTDIR),
                (true, true) if !self.children(to).is_empty() => return Err(libc::ENOTEMPTY),
                _ => {}
            }
            next.remove(to);
        }
        let a = moved(&next, from, to);
        next.retain(|p, _| !inside(from, p));
        next.extend(a);
        Ok(next)
    }
}
