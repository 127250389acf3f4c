//! One simulated thread: random operations on its own names (a private directory, and
//! names in the shared directory that carry its number), each checked exactly against
//! its model; readdir of the shared directory while the others churn it. Operations on
//! names and attributes are here, those on file data and open handles in `files`.
//!
//! Invariants:
//! - An actor changes only its own names, so every result it sees on them is the one its
//!   model predicts, whatever the other actors do meanwhile.
//! - The operations an actor chooses depend only on its seed and its own model, so a
//!   seed replays the same operations per actor (the interleaving may differ).

use crate::model::{join, parent, Id, Model, Node, Object};
use platform::Rng;
use std::sync::Arc;
use vfs::{Creds, File, FileSystem, Kind, Metadata, OpenOptions, RenameMode};
use vfs::{VfsError, XattrMode};

mod files;

/// Names in private directories; names in the shared directory are `s{actor}_{k}`.
const NAMES: [&str; 5] = ["a", "b", "c", "dd", "e"];
const SHARED_NAMES: u64 = 4;
pub const SHARED: &str = "/shared";
const XATTRS: [&[u8]; 3] = [b"user.a", b"user.b", b"trusted.c"];
/// Slashes in the path of a directory where new names go (`/t0/a/b`: two levels below
/// the actor's roots; about 150 names per root at most).
const DEPTH_MAX: usize = 3;
/// Names an actor has at most (beyond, operations pick existing names only, so creates
/// fail and removals shrink the tree): keeps each operation's cost bounded.
const NAMES_MAX: usize = 300;
/// Open handles an actor keeps at most.
const HELD_MAX: usize = 3;

pub fn private_dir(actor: usize) -> String {
    format!("/t{actor}")
}

/// An open file the actor keeps across operations (its names may go away meanwhile).
struct Held {
    file: File,
    id: Id,
    read: bool,
    write: bool,
    append: bool,
}

pub struct Actor {
    pub index: usize,
    seed: u64,
    rng: Rng,
    pub model: Model,
    /// Operations done so far.
    pub ops: u64,
    held: Vec<Held>,
    trace: bool,
}

fn errno<T>(r: Result<T, VfsError>) -> Result<T, i32> {
    r.map_err(|e| e.errno())
}

impl Actor {
    pub fn new(seed: u64, index: usize) -> Actor {
        Actor {
            index,
            seed,
            rng: Rng::from_seed(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ index as u64),
            model: Model::new(vec![private_dir(index), SHARED.into()], index as u64 + 1),
            ops: 0,
            held: Vec::new(),
            trace: std::env::var_os("SIM_TRACE").is_some(),
        }
    }

    /// Where a failure happened, for messages.
    fn at(&self) -> String {
        format!("seed {} actor {} op {}", self.seed, self.index, self.ops)
    }

    /// `n` operations, then every held file closed unless `keep_open` (then
    /// [`Actor::close_all`] closes them).
    pub fn run(&mut self, fs: &Arc<FileSystem>, n: u64, keep_open: bool) {
        for _ in 0..n {
            self.step(fs);
            self.ops += 1;
        }
        if !keep_open {
            self.close_all();
        }
    }

    /// Closes every held file; the model forgets what no name refers to.
    pub fn close_all(&mut self) {
        self.held.clear();
        self.model.forget_unreferenced(&[]);
    }

    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[self.rng.below(from.len() as u64) as usize]
    }

    /// The actor's directories (roots first) up to two levels below the roots, where
    /// new names go: this bounds the tree (renames can still move names deeper).
    fn dirs(&self) -> Vec<String> {
        let mut dirs = self.model.roots.clone();
        dirs.extend(
            self.model
                .tree
                .iter()
                .filter(|(p, n)| matches!(n, Node::Dir(_)) && p.matches('/').count() <= DEPTH_MAX)
                .map(|(p, _)| p.clone()),
        );
        dirs
    }

    /// A path whose parent is one of the actor's directories (or the shared one): an
    /// existing name at any depth a quarter of the time (so names a rename moved deep
    /// still go away) and always once the actor has `NAMES_MAX` names, else a name, new
    /// or not, in a directory at most `DEPTH_MAX` deep.
    fn random_path(&mut self) -> String {
        let full = self.model.tree.len() >= NAMES_MAX;
        if full || (!self.model.tree.is_empty() && self.rng.chance(1, 4)) {
            let i = self.rng.below(self.model.tree.len() as u64) as usize;
            return self.model.tree.keys().nth(i).expect("in range").clone();
        }
        let dirs = self.dirs();
        let dir = dirs[self.rng.below(dirs.len() as u64) as usize].clone();
        if dir == SHARED {
            let k = self.rng.below(SHARED_NAMES);
            join(&dir, &format!("s{}_{k}", self.index))
        } else {
            let name = self.pick(&NAMES);
            join(&dir, name)
        }
    }

    fn random_bytes(&mut self, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.rng.fill(&mut v);
        v
    }

    fn step(&mut self, fs: &Arc<FileSystem>) {
        let path = self.random_path();
        let node = self.model.tree.get(&path).copied();
        let op = self.rng.below(100);
        if self.trace {
            eprintln!("{}: op {op} on {path} ({node:?})", self.at());
        }
        match op {
            0..=5 => self.create_new(fs, path, node),
            6..=8 => self.open_flags(fs, path, node),
            9..=17 => self.pwrite(fs, &path, node),
            18..=24 => self.held_op(),
            25..=30 => self.read(fs, &path, node),
            31..=33 => self.truncate(fs, &path, node),
            34..=37 => self.fallocate(fs, &path, node),
            38..=40 => self.seek(fs, &path, node),
            41..=44 => self.mkdir(fs, path, node),
            45..=47 => self.rmdir(fs, &path, node),
            48..=52 => self.unlink(fs, &path, node),
            53..=60 => self.rename(fs, &path),
            61..=63 => self.link(fs, &path, node),
            64..=65 => self.symlink(fs, path, node),
            66..=70 => self.stat(fs, &path, node),
            71..=74 => self.set_attr(fs, &path, node),
            75..=79 => self.xattr(fs, &path, node),
            80..=84 => self.readdir(fs),
            85..=89 => self.hold(fs, &path, node),
            90..=91 => self.fsync(fs, &path, node),
            92 => self.statfs(fs),
            93 if self.rng.chance(1, 8) => fs.sync().unwrap(),
            94 => self.mknod(fs, path, node),
            _ => self.pwrite(fs, &path, node),
        }
    }

    /// The errno every operation on a path that must name a regular file (following a
    /// final symlink) fails with, or None for a file.
    fn not_a_file(node: Option<Node>, dir_errno: i32) -> Option<i32> {
        match node {
            Some(Node::File(_)) => None,
            Some(Node::Dir(_)) => Some(dir_errno),
            // Symlink targets never exist (see `symlink`).
            Some(Node::Symlink(_)) | None => Some(libc::ENOENT),
            // The vfs opens no FIFO, socket or device.
            Some(Node::Special(..)) => Some(libc::ENXIO),
        }
    }

    fn create_new(&mut self, fs: &Arc<FileSystem>, path: String, node: Option<Node>) {
        let mode = self.pick(&[0o600, 0o644, 0o755]);
        let r = errno(
            OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(mode)
                .open(fs, &path),
        );
        match node {
            Some(_) => assert_eq!(
                r.err(),
                Some(libc::EEXIST),
                "{}: create_new {path}",
                self.at()
            ),
            None => {
                r.unwrap_or_else(|e| panic!("{}: create_new {path}: errno {e}", self.at()));
                self.model.add(path, Node::File, Object::new(mode));
            }
        }
    }

    /// open(2) with random flags; a file opened may be kept open.
    fn open_flags(&mut self, fs: &Arc<FileSystem>, path: String, node: Option<Node>) {
        let [read, write, append, trunc, create, excl] = [0; 6].map(|_| self.rng.chance(1, 2));
        let writes = write || append;
        let mode = self.pick(&[0o600, 0o644]);
        let r = errno(
            OpenOptions::new()
                .read(read)
                .write(write)
                .append(append)
                .truncate(trunc)
                .create(create)
                .create_new(excl)
                .mode(mode)
                .open(fs, &path),
        );
        // Neither reading nor writing, or creating or truncating without writing.
        let want: Result<Option<Node>, i32> = if !writes && (!read || trunc || create || excl) {
            Err(libc::EINVAL)
        } else {
            match node {
                Some(_) if excl => Err(libc::EEXIST),
                None if create || excl => Ok(None),
                None | Some(Node::Symlink(_)) => Err(libc::ENOENT),
                Some(Node::Special(..)) => Err(libc::ENXIO),
                Some(Node::Dir(_)) if writes => Err(libc::EISDIR),
                Some(n) => Ok(Some(n)),
            }
        };
        let what = format!(
            "{}: open {path} r{read} w{write} a{append} t{trunc} c{create} x{excl}",
            self.at()
        );
        match (r, want) {
            (Err(got), Err(want)) => assert_eq!(got, want, "{what}"),
            (Ok(file), Ok(n)) => {
                let n = n.unwrap_or_else(|| self.model.add(path, Node::File, Object::new(mode)));
                if let Node::File(id) = n {
                    let obj = self.model.object_mut(n);
                    if trunc && !obj.data.is_empty() {
                        obj.set_size(0);
                    }
                    if self.held.len() < HELD_MAX && self.rng.chance(1, 2) {
                        self.held.push(Held {
                            file,
                            id,
                            read,
                            write: writes,
                            append,
                        });
                    }
                }
            }
            (r, want) => panic!("{what}: got {:?}, want {want:?}", r.map(|_| ())),
        }
    }

    fn mkdir(&mut self, fs: &Arc<FileSystem>, path: String, node: Option<Node>) {
        let perm = self.pick(&[0o700, 0o755, 0o711]);
        let r = errno(fs.create_dir(&path, perm));
        match node {
            Some(_) => assert_eq!(r.err(), Some(libc::EEXIST), "{}: mkdir {path}", self.at()),
            None => {
                assert_eq!(r, Ok(()), "{}: mkdir {path}", self.at());
                self.model.add(path, Node::Dir, Object::new(perm));
            }
        }
    }

    fn rmdir(&mut self, fs: &Arc<FileSystem>, path: &str, node: Option<Node>) {
        let r = errno(fs.remove_dir(path));
        let want = match node {
            Some(Node::Dir(_)) if self.model.children(path).is_empty() => Ok(()),
            Some(Node::Dir(_)) => Err(libc::ENOTEMPTY),
            Some(_) => Err(libc::ENOTDIR),
            None => Err(libc::ENOENT),
        };
        assert_eq!(r, want, "{}: rmdir {path}", self.at());
        if r.is_ok() {
            self.model.tree.remove(path);
        }
    }

    fn unlink(&mut self, fs: &Arc<FileSystem>, path: &str, node: Option<Node>) {
        let r = errno(fs.remove_file(path));
        let want = match node {
            Some(Node::Dir(_)) => Err(libc::EISDIR),
            Some(_) => Ok(()),
            None => Err(libc::ENOENT),
        };
        assert_eq!(r, want, "{}: unlink {path}", self.at());
        if r.is_ok() {
            self.model.tree.remove(path);
        }
    }

    fn rename(&mut self, fs: &Arc<FileSystem>, from: &str) {
        let to = self.random_path();
        let mode = match self.rng.below(6) {
            0 => RenameMode::NoReplace,
            1 => RenameMode::Exchange,
            _ => RenameMode::Replace,
        };
        let r = errno(fs.rename_path(from, &to, mode));
        let want = self.model.rename(from, &to, mode);
        let what = format!("{}: rename {from} -> {to} {mode:?}", self.at());
        match want {
            Ok(next) => {
                assert_eq!(r, Ok(()), "{what}");
                self.model.tree = next;
            }
            Err(e) => assert_eq!(r, Err(e), "{what}"),
        }
    }

    fn link(&mut self, fs: &Arc<FileSystem>, path: &str, node: Option<Node>) {
        let to = self.random_path();
        let r = errno(fs.hard_link(path, &to));
        let want = match (node, self.model.tree.get(&to)) {
            (None, _) => Err(libc::ENOENT),
            (Some(Node::Dir(_)), _) => Err(libc::EPERM),
            (Some(_), Some(_)) => Err(libc::EEXIST),
            (Some(_), None) => Ok(()),
        };
        assert_eq!(r, want, "{}: link {path} -> {to}", self.at());
        if r.is_ok() {
            self.model.tree.insert(to, node.unwrap());
        }
    }

    /// A FIFO, socket or device node (a random number for a device).
    fn mknod(&mut self, fs: &Arc<FileSystem>, path: String, node: Option<Node>) {
        let kind = self.pick(&[Kind::Fifo, Kind::Socket, Kind::CharDev, Kind::BlockDev]);
        let perm = self.pick(&[0o600, 0o644, 0o666]);
        let dev = match kind.is_device() {
            true => libc::makedev(self.rng.below(4096) as u32, self.rng.below(1 << 20) as u32),
            false => 0,
        };
        let r = errno(fs.make_node(&path, kind.mode_bits() | perm, dev));
        match node {
            Some(_) => assert_eq!(r.err(), Some(libc::EEXIST), "{}: mknod {path}", self.at()),
            None => {
                assert_eq!(r, Ok(()), "{}: mknod {path} {kind:?}", self.at());
                let obj = Object {
                    rdev: dev,
                    ..Object::new(perm)
                };
                self.model.add(path, |id| Node::Special(id, kind), obj);
            }
        }
    }

    fn symlink(&mut self, fs: &Arc<FileSystem>, path: String, node: Option<Node>) {
        // Targets never exist, so every call that follows a symlink meets ENOENT.
        let target = format!("/nonexistent/x{}", self.rng.below(4));
        let r = errno(fs.symlink(&target, &path));
        match node {
            Some(_) => assert_eq!(r.err(), Some(libc::EEXIST), "{}: symlink {path}", self.at()),
            None => {
                assert_eq!(r, Ok(()), "{}: symlink {path}", self.at());
                let obj = Object {
                    target,
                    ..Object::new(0o777)
                };
                self.model.add(path, Node::Symlink, obj);
            }
        }
    }

    fn stat(&mut self, fs: &Arc<FileSystem>, path: &str, node: Option<Node>) {
        let r = errno(fs.symlink_metadata(path));
        match node {
            None => assert_eq!(r.err(), Some(libc::ENOENT), "{}: lstat {path}", self.at()),
            Some(n) => {
                let meta = r.unwrap_or_else(|e| panic!("{}: lstat {path}: errno {e}", self.at()));
                let nlink = self.model.nlink(path, n);
                if let Err(e) = check_meta(&self.model, n, nlink, &meta) {
                    panic!("{}: lstat {path}: {e}", self.at());
                }
                if let Node::Symlink(_) = n {
                    let t = fs.read_link(path).unwrap();
                    assert!(t == self.model.object(n).target.as_bytes(), "{}", self.at());
                    let followed = errno(fs.metadata(path));
                    assert_eq!(
                        followed.err(),
                        Some(libc::ENOENT),
                        "{}: stat {path}",
                        self.at()
                    );
                }
            }
        }
    }

    /// chmod, chown or utimens (all follow a final symlink).
    fn set_attr(&mut self, fs: &Arc<FileSystem>, path: &str, node: Option<Node>) {
        let which = self.rng.below(3);
        let r = match which {
            0 => {
                let perm = match node {
                    Some(Node::Dir(_)) => self.pick(&[0o700, 0o755, 0o711]),
                    _ => self.pick(&[0o600, 0o640, 0o644, 0o700, 0o755]),
                };
                errno(fs.set_permissions(path, perm)).map(|()| (Some(perm), None, None))
            }
            1 => {
                let uid = self.pick(&[0, 1000, 1001]);
                let gid = self.pick(&[0, 1000, 1001]);
                errno(fs.chown(path, uid, gid)).map(|()| (None, Some((uid, gid)), None))
            }
            _ => {
                let a = self.rng.below(1 << 40) as i64;
                let m = self.rng.below(1 << 40) as i64;
                errno(fs.set_times(path, a, m)).map(|()| (None, None, Some((a, m))))
            }
        };
        match node {
            Some(Node::File(_) | Node::Dir(_) | Node::Special(..)) => {
                let (perm, owner, times) =
                    r.unwrap_or_else(|e| panic!("{}: setattr {path}: errno {e}", self.at()));
                let obj = self.model.object_mut(node.unwrap());
                if let Some(p) = perm {
                    obj.perm = p;
                }
                if let Some((u, g)) = owner {
                    (obj.uid, obj.gid) = (u, g);
                }
                if times.is_some() {
                    obj.times = times;
                }
            }
            _ => assert_eq!(r.err(), Some(libc::ENOENT), "{}: setattr {path}", self.at()),
        }
    }

    fn xattr(&mut self, fs: &Arc<FileSystem>, path: &str, node: Option<Node>) {
        let name = self.pick(&XATTRS);
        if let Some(Node::Special(..)) = node {
            if name.starts_with(b"user.") {
                // No user attributes on special files (Linux); root's trusted ones are.
                let set = errno(fs.set_xattr(path, name, b"v", XattrMode::Either));
                assert_eq!(
                    set.err(),
                    Some(libc::EPERM),
                    "{}: setxattr {path}",
                    self.at()
                );
                let get = errno(fs.get_xattr(path, name));
                assert_eq!(
                    get.err(),
                    Some(libc::ENODATA),
                    "{}: getxattr {path}",
                    self.at()
                );
                return;
            }
        }
        let Some(n @ (Node::File(_) | Node::Dir(_) | Node::Special(..))) = node else {
            let r = errno(fs.get_xattr(path, name));
            assert_eq!(
                r.err(),
                Some(libc::ENOENT),
                "{}: getxattr {path}",
                self.at()
            );
            return;
        };
        let what = format!(
            "{}: xattr {} of {path}",
            self.at(),
            String::from_utf8_lossy(name)
        );
        let have = self.model.object(n).xattrs.get(name).cloned();
        match self.rng.below(4) {
            0 => {
                let mode = self.pick(&[XattrMode::Either, XattrMode::Create, XattrMode::Replace]);
                let len = if self.rng.chance(1, 20) { 3000 } else { 100 };
                let len = self.rng.below(len) as usize;
                let value = self.random_bytes(len);
                let r = errno(fs.set_xattr(path, name, &value, mode));
                let want = match (mode, &have) {
                    (XattrMode::Create, Some(_)) => Err(libc::EEXIST),
                    (XattrMode::Replace, None) => Err(libc::ENODATA),
                    _ => Ok(()),
                };
                assert_eq!(r, want, "{what}: set {mode:?}");
                if r.is_ok() {
                    self.model.object_mut(n).xattrs.insert(name.to_vec(), value);
                }
            }
            1 => {
                let r = errno(fs.get_xattr(path, name));
                assert_eq!(r, have.ok_or(libc::ENODATA), "{what}: get");
            }
            2 => {
                let mut got = fs.list_xattr(path).unwrap();
                got.sort();
                let want: Vec<Vec<u8>> = self.model.object(n).xattrs.keys().cloned().collect();
                assert_eq!(got, want, "{what}: list");
            }
            _ => {
                let r = errno(fs.remove_xattr(path, name));
                assert_eq!(r, have.map(|_| ()).ok_or(libc::ENODATA), "{what}: remove");
                self.model.object_mut(n).xattrs.remove(name);
            }
        }
    }

    /// Lists one of the actor's directories (exactly its model) or the shared one (names
    /// strictly increasing, so no entry twice; each an actor's; this actor's exactly its
    /// model), in batches of 1-4 entries resumed by name.
    fn readdir(&mut self, fs: &Arc<FileSystem>) {
        let dirs = self.dirs();
        let dir = dirs[self.rng.below(dirs.len() as u64) as usize].clone();
        let ino = fs.resolve(&dir, false).unwrap();
        let cx = Creds::root();
        let mut got: Vec<(String, Kind)> = Vec::new();
        loop {
            let max = 1 + self.rng.below(4) as usize;
            let after = got.last().map(|(n, _)| n.as_bytes().to_vec());
            let page = fs.readdir(&cx, ino, after.as_deref(), max).unwrap();
            assert!(
                page.len() <= max,
                "{}: readdir {dir}: page too long",
                self.at()
            );
            if page.is_empty() {
                break;
            }
            for e in page {
                let name = String::from_utf8(e.name).expect("names are UTF-8");
                if let Some((last, _)) = got.last() {
                    assert!(
                        *last < name,
                        "{}: readdir {dir}: {name} after {last}",
                        self.at()
                    );
                }
                got.push((name, e.kind));
            }
        }
        let own_prefix = format!("s{}_", self.index);
        if dir == SHARED {
            for (name, _) in &got {
                let valid = name
                    .strip_prefix('s')
                    .and_then(|r| r.split_once('_'))
                    .is_some();
                assert!(valid, "{}: readdir {dir}: a torn name {name:?}", self.at());
            }
            got.retain(|(n, _)| n.starts_with(&own_prefix));
        }
        let want: Vec<(String, Kind)> = self
            .model
            .children(&dir)
            .into_iter()
            .map(|(p, n)| (p[dir.len() + 1..].to_string(), n.kind()))
            .collect();
        assert_eq!(got, want, "{}: readdir {dir}", self.at());
    }

    /// fsync of a directory, or of a file through a fresh handle.
    fn fsync(&mut self, fs: &Arc<FileSystem>, path: &str, node: Option<Node>) {
        let dir = parent(path);
        if self.rng.chance(1, 2) {
            let ino = fs.resolve(dir, false).unwrap();
            fs.fsync_ino(ino, false).unwrap();
        } else if let Some(Node::File(_)) = node {
            let f = OpenOptions::new().read(true).open(fs, path).unwrap();
            f.sync_all().unwrap();
        }
    }

    fn statfs(&mut self, fs: &Arc<FileSystem>) {
        let s = fs.statfs();
        assert_eq!((s.block_size, s.name_max), (4096, 255), "{}", self.at());
        assert!(
            s.blocks_free <= s.blocks && s.blocks > 0,
            "{}: {s:?}",
            self.at()
        );
    }
}

/// Compares `stat` of `node` with the model; `nlink` is what the model expects.
pub fn check_meta(model: &Model, node: Node, nlink: u32, meta: &Metadata) -> Result<(), String> {
    let obj = model.object(node);
    let size = match node {
        Node::File(_) => obj.data.len() as u64,
        Node::Symlink(_) => obj.target.len() as u64,
        Node::Dir(_) => meta.size,
        Node::Special(..) => 0,
    };
    let got = (
        meta.kind,
        meta.nlink,
        meta.mode & 0o7777,
        meta.uid,
        meta.gid,
        meta.size,
        meta.rdev,
    );
    let want = (
        node.kind(),
        nlink,
        obj.perm,
        obj.uid,
        obj.gid,
        size,
        obj.rdev,
    );
    if got != want {
        return Err(format!(
            "(kind, nlink, perm, uid, gid, size, rdev) is {got:?}, the model has {want:?}"
        ));
    }
    let blocks = 8 * obj.mapped.len() as u64;
    if meta.blocks != blocks {
        return Err(format!(
            "st_blocks {} for mapped blocks {:?} (size {size})",
            meta.blocks, obj.mapped
        ));
    }
    if let (Node::File(_), Some((a, m))) = (node, obj.times) {
        if (meta.atime_ns, meta.mtime_ns) != (a, m) {
            return Err(format!(
                "times ({}, {}), set to ({a}, {m})",
                meta.atime_ns, meta.mtime_ns
            ));
        }
    }
    Ok(())
}
