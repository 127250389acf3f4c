//! Path resolution and the path-level operations (shaped like `std::fs`).
//!
//! Invariants:
//! - Paths are absolute inside the file system (`/` is its root); `.` and `..` are
//!   handled here (`..` of the root is the root), never stored as entries.
//! - At most [`SYMLINK_MAX`] symbolic links are followed per resolution (ELOOP beyond).
//! - Every directory a resolution passes through needs search permission for the caller.
//! - Resolution takes no lock across components: each lookup reads MetaDB's newest
//!   state, so a concurrent rename is seen wholly before or wholly after.

use crate::attr::{AttrChanges, Metadata, TimeChange};
use crate::creds::{Creds, MAY_EXEC};
use crate::error::VfsError;
use crate::fs::FileSystem;
use crate::namespace::show;
use crate::namespace::DirEntry;
use crate::records::{Inode, Kind, ROOT};
use crate::rename::RenameMode;
use format::InodeNo;

/// Symbolic links followed in one resolution (Linux's MAXSYMLINKS).
pub const SYMLINK_MAX: u32 = 40;

/// The names of `path`, in order (no allocation: a walk is on every stat and open).
fn components(path: &[u8]) -> impl Iterator<Item = &[u8]> {
    path.split(|&b| b == b'/').filter(|c| !c.is_empty())
}

impl FileSystem {
    /// The inode `path` names; the last component's symlink is followed if `follow`.
    /// Acts as the path-level identity ([`FileSystem::set_creds`]).
    pub fn resolve(&self, path: &str, follow: bool) -> Result<InodeNo, VfsError> {
        self.resolve_as(&self.creds(), path, follow)
    }

    /// [`FileSystem::resolve`] as `cx`: every directory passed through needs search
    /// permission.
    pub fn resolve_as(&self, cx: &Creds, path: &str, follow: bool) -> Result<InodeNo, VfsError> {
        let mut links = 0;
        self.walk(cx, ROOT, path.as_bytes(), follow, &mut links)
    }

    pub(crate) fn walk(
        &self,
        cx: &Creds,
        start: InodeNo,
        path: &[u8],
        follow: bool,
        links: &mut u32,
    ) -> Result<InodeNo, VfsError> {
        let mut at = if path.first() == Some(&b'/') {
            ROOT
        } else {
            start
        };
        // Whether `at` is known to be a directory without its inode: the root, or the
        // kind in the entry that led to it (an inode's kind never changes). Root may
        // search every directory, so its walk reads no directory's inode but for "..":
        // no lock or reference count of the directories passed is touched, and walks
        // of many threads through "/" share no written cache line. A directory removed
        // meanwhile has no names left: the lookup in it fails as reading its inode
        // would have (ENOENT).
        let mut known_dir = at == ROOT;
        let mut parts = components(path).peekable();
        while let Some(part) = parts.next() {
            let last = parts.peek().is_none();
            if !(known_dir && cx.is_root() && part != b"..") {
                let inode = self.inode_of(at)?;
                if inode.kind != Kind::Dir {
                    return Err(VfsError::NotDir(show(path)));
                }
                cx.check(&inode, MAY_EXEC, || show(path))?;
                if part == b".." {
                    at = InodeNo(inode.parent);
                    known_dir = true;
                    continue;
                }
            }
            if part == b"." {
                continue;
            }
            let entry = self
                .lookup(at, part)?
                .ok_or_else(|| VfsError::NotFound(show(path)))?;
            if entry.kind == Kind::Symlink && (!last || follow) {
                *links += 1;
                if *links > SYMLINK_MAX {
                    return Err(VfsError::Loop(show(path)));
                }
                let target = self.readlink_ino(entry.ino)?;
                at = self.walk(cx, at, &target, true, links)?;
                known_dir = false;
            } else {
                at = entry.ino;
                known_dir = entry.kind == Kind::Dir;
            }
        }
        Ok(at)
    }

    pub(crate) fn inode_of(&self, ino: InodeNo) -> Result<Inode, VfsError> {
        if let Some(root) = self.root().filter(|_| ino == ROOT) {
            return Ok(*crate::handle::live(&root.read(), ino)?);
        }
        let h = self.handle(ino)?;
        let st = h.read();
        Ok(*crate::handle::live(&st, ino)?)
    }

    /// The directory holding `path`'s last component, and that component.
    pub fn resolve_parent<'p>(&self, path: &'p str) -> Result<(InodeNo, &'p [u8]), VfsError> {
        self.resolve_parent_as(&self.creds(), path)
    }

    pub fn resolve_parent_as<'p>(
        &self,
        cx: &Creds,
        path: &'p str,
    ) -> Result<(InodeNo, &'p [u8]), VfsError> {
        let bytes = path.as_bytes();
        let trimmed = bytes.strip_suffix(b"/").unwrap_or(bytes);
        let cut = trimmed.iter().rposition(|&b| b == b'/');
        let (dir, name) = match cut {
            Some(i) => (&trimmed[..i], &trimmed[i + 1..]),
            None => (&b""[..], trimmed),
        };
        if name.is_empty() || name == b"." || name == b".." {
            return Err(VfsError::Invalid(format!("{path:?} names no entry")));
        }
        let mut links = 0;
        let parent = self.walk(cx, ROOT, dir, true, &mut links)?;
        Ok((parent, name))
    }

    pub fn create_dir(&self, path: &str, perm: u32) -> Result<(), VfsError> {
        let cx = self.creds();
        let (parent, name) = self.resolve_parent_as(&cx, path)?;
        self.create(&cx, parent, name, Kind::Dir, perm, None)
            .map(|_| ())
    }

    /// `mknod(path, mode, dev)`: a regular file, FIFO, socket or device node of the
    /// `S_IFMT` bits of `mode` ([`FileSystem::mknod`]); EINVAL for other types.
    pub fn make_node(&self, path: &str, mode: u32, dev: u64) -> Result<(), VfsError> {
        let kind = Kind::from_mode(mode)
            .ok_or_else(|| VfsError::Invalid(format!("{path}: mknod of mode {mode:o}")))?;
        let cx = self.creds();
        let (parent, name) = self.resolve_parent_as(&cx, path)?;
        self.mknod(&cx, parent, name, kind, mode & 0o7777, dev)
            .map(|_| ())
    }

    pub fn symlink(&self, target: &str, path: &str) -> Result<(), VfsError> {
        if target.is_empty() || target.len() > 4096 {
            return Err(VfsError::Invalid(format!(
                "symlink target of {} bytes",
                target.len()
            )));
        }
        let cx = self.creds();
        let (parent, name) = self.resolve_parent_as(&cx, path)?;
        self.create(
            &cx,
            parent,
            name,
            Kind::Symlink,
            0o777,
            Some(target.as_bytes()),
        )
        .map(|_| ())
    }

    pub fn read_link(&self, path: &str) -> Result<Vec<u8>, VfsError> {
        self.readlink_ino(self.resolve(path, false)?)
    }

    pub fn remove_file(&self, path: &str) -> Result<(), VfsError> {
        let cx = self.creds();
        let (parent, name) = self.resolve_parent_as(&cx, path)?;
        self.remove(&cx, parent, name, false)
    }

    pub fn remove_dir(&self, path: &str) -> Result<(), VfsError> {
        let cx = self.creds();
        let (parent, name) = self.resolve_parent_as(&cx, path)?;
        self.remove(&cx, parent, name, true)
    }

    pub fn rename_path(&self, from: &str, to: &str, mode: RenameMode) -> Result<(), VfsError> {
        let cx = self.creds();
        let (sp, sname) = self.resolve_parent_as(&cx, from)?;
        let (dp, dname) = self.resolve_parent_as(&cx, to)?;
        self.rename(&cx, sp, sname, dp, dname, mode)
    }

    pub fn hard_link(&self, existing: &str, new: &str) -> Result<(), VfsError> {
        let cx = self.creds();
        let ino = self.resolve_as(&cx, existing, false)?;
        let (parent, name) = self.resolve_parent_as(&cx, new)?;
        self.link(&cx, ino, parent, name)
    }

    /// `stat` (follows a final symlink).
    pub fn metadata(&self, path: &str) -> Result<Metadata, VfsError> {
        self.stat_ino(self.resolve(path, true)?)
    }

    /// `lstat`.
    pub fn symlink_metadata(&self, path: &str) -> Result<Metadata, VfsError> {
        self.stat_ino(self.resolve(path, false)?)
    }

    /// Every entry of the directory `path`, by name.
    pub fn read_dir(&self, path: &str) -> Result<Vec<DirEntry>, VfsError> {
        let cx = self.creds();
        let dir = self.resolve_as(&cx, path, true)?;
        let mut out: Vec<DirEntry> = Vec::new();
        loop {
            let after = out.last().map(|e| e.name.clone());
            let page = self.readdir(&cx, dir, after.as_deref(), 1024)?;
            if page.is_empty() {
                return Ok(out);
            }
            out.extend(page);
        }
    }

    /// `access(2)` (follows a final symlink).
    pub fn access_path(&self, path: &str, mask: u32) -> Result<(), VfsError> {
        let cx = self.creds();
        let ino = self.resolve_as(&cx, path, true)?;
        self.access(&cx, ino, mask)
    }

    /// `chmod`.
    pub fn set_permissions(&self, path: &str, perm: u32) -> Result<(), VfsError> {
        self.set_attr_path(
            path,
            &AttrChanges {
                perm: Some(perm),
                ..AttrChanges::default()
            },
        )
    }

    /// `chown`.
    pub fn chown(&self, path: &str, uid: u32, gid: u32) -> Result<(), VfsError> {
        self.set_attr_path(
            path,
            &AttrChanges {
                uid: Some(uid),
                gid: Some(gid),
                ..AttrChanges::default()
            },
        )
    }

    /// Sets access and modification times (nanoseconds since the epoch).
    pub fn set_times(&self, path: &str, atime_ns: i64, mtime_ns: i64) -> Result<(), VfsError> {
        self.set_attr_path(
            path,
            &AttrChanges {
                atime: Some(TimeChange::At(atime_ns)),
                mtime: Some(TimeChange::At(mtime_ns)),
                ..AttrChanges::default()
            },
        )
    }

    /// Any attribute change (follows a final symlink).
    pub fn set_attr_path(&self, path: &str, changes: &AttrChanges) -> Result<(), VfsError> {
        let cx = self.creds();
        let ino = self.resolve_as(&cx, path, true)?;
        self.set_attr(&cx, ino, changes)
    }
}
