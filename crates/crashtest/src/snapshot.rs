//! What a mounted file system holds, as the checker compares it: every directory entry
//! reachable from the root and every object (file, directory, symlink, special file) it
//! names, by inode number.
//!
//! Invariants:
//! - Taken through the VFS's inode-level API as root, so permissions never hide anything.
//! - Deterministic: maps are ordered, so equal file systems give equal snapshots.

use format::InodeNo;
use std::collections::BTreeMap;
use vfs::{Creds, FileSystem, Kind, VfsError};

/// An object's observable state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object {
    pub kind: Kind,
    /// Permission bits.
    pub perm: u32,
    /// File contents (the whole file) or a symlink's target; empty for a directory.
    pub data: Vec<u8>,
    pub xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
    pub nlink: u32,
    /// A device's number (`st_rdev`), 0 for every other kind.
    pub rdev: u64,
}

/// An object's kind, permissions, device number, extended attributes and link count.
pub type Attributes<'a> = (Kind, u32, u64, &'a BTreeMap<Vec<u8>, Vec<u8>>, u32);

impl Object {
    /// What the judge compares besides the data.
    pub fn attributes(&self) -> Attributes<'_> {
        (self.kind, self.perm, self.rdev, &self.xattrs, self.nlink)
    }
}

/// The whole reachable tree.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Snapshot {
    /// (directory inode, name) -> inode.
    pub entries: BTreeMap<(u64, Vec<u8>), u64>,
    pub objects: BTreeMap<u64, Object>,
}

/// Largest file the snapshot reads whole (workload files are small).
const FILE_BYTES_MAX: u64 = 64 << 20;

impl Snapshot {
    pub fn take(fs: &FileSystem) -> Result<Snapshot, VfsError> {
        let root = Creds::root();
        let mut snap = Snapshot::default();
        let mut dirs = vec![1u64];
        while let Some(dir) = dirs.pop() {
            if snap.objects.contains_key(&dir) {
                // A second path to a directory: the tree is not a tree. Recorded once; the
                // checker's fsck reports the cycle.
                continue;
            }
            snap.objects.insert(dir, object(fs, &root, dir)?);
            let mut after: Option<Vec<u8>> = None;
            loop {
                let page = fs.readdir(&root, InodeNo(dir), after.as_deref(), 512)?;
                let Some(last) = page.last() else { break };
                after = Some(last.name.clone());
                for e in page {
                    snap.entries.insert((dir, e.name.clone()), e.ino);
                    if e.kind == Kind::Dir {
                        dirs.push(e.ino);
                    } else if let std::collections::btree_map::Entry::Vacant(v) =
                        snap.objects.entry(e.ino)
                    {
                        v.insert(object(fs, &root, e.ino)?);
                    }
                }
            }
        }
        Ok(snap)
    }

    /// A short description of how `self` differs from `other` (for failure messages).
    pub fn diff(&self, other: &Snapshot) -> String {
        let mut out = Vec::new();
        for (k, v) in &self.entries {
            match other.entries.get(k) {
                None => out.push(format!("entry {}/{} only here", k.0, show(&k.1))),
                Some(w) if w != v => out.push(format!(
                    "entry {}/{}: inode {v} here, {w} there",
                    k.0,
                    show(&k.1)
                )),
                _ => {}
            }
        }
        for k in other.entries.keys() {
            if !self.entries.contains_key(k) {
                out.push(format!("entry {}/{} only there", k.0, show(&k.1)));
            }
        }
        for (ino, o) in &self.objects {
            if let Some(p) = other.objects.get(ino) {
                if o != p {
                    out.push(format!(
                        "inode {ino}: {} here, {} there",
                        o.describe(),
                        p.describe()
                    ));
                }
            }
        }
        if out.is_empty() {
            "equal".into()
        } else {
            out.join("; ")
        }
    }
}

impl Object {
    pub fn describe(&self) -> String {
        format!(
            "{:?} mode {:o} rdev {:#x} nlink {} {} bytes (crc {:08x}) {} xattrs",
            self.kind,
            self.perm,
            self.rdev,
            self.nlink,
            self.data.len(),
            format::checksum::crc32c(&self.data),
            self.xattrs.len()
        )
    }
}

fn object(fs: &FileSystem, root: &Creds, ino: u64) -> Result<Object, VfsError> {
    let ino_no = InodeNo(ino);
    let meta = fs.stat_ino(ino_no)?;
    let data = match meta.kind {
        Kind::File => {
            let len = meta.size.min(FILE_BYTES_MAX) as usize;
            let mut buf = vec![0u8; len];
            let n = fs.read_at(ino_no, 0, &mut buf)?;
            buf.truncate(n);
            buf
        }
        Kind::Symlink => fs.readlink_ino(ino_no)?,
        // A directory's contents are its entries; a special file holds none.
        _ => Vec::new(),
    };
    let mut xattrs = BTreeMap::new();
    if meta.kind != Kind::Symlink {
        for name in fs.list_xattr_ino(root, ino_no)? {
            let value = fs.get_xattr_ino(root, ino_no, &name)?;
            xattrs.insert(name, value);
        }
    }
    Ok(Object {
        kind: meta.kind,
        perm: meta.mode & 0o7777,
        data,
        xattrs,
        nlink: meta.nlink,
        rdev: meta.rdev,
    })
}

pub(crate) fn show(name: &[u8]) -> String {
    String::from_utf8_lossy(name).into_owned()
}
