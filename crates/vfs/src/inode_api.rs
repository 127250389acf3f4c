//! Inode-level calls for front ends that hold inode numbers instead of paths (the FUSE
//! adapter, later the C ABI): name lookup, open references that keep an unlinked file's
//! data alive, and attribute changes with per-field times.
//!
//! Invariants:
//! - An [`OpenInode`] counts as one open handle of its inode (as a [`crate::File`]
//!   does) from [`FileSystem::open_ino`] until [`FileSystem::close_ino`] consumes it;
//!   an inode whose last name is removed meanwhile keeps its blocks until then.
//! - [`FileSystem::set_attr_ino`] is one MetaDB batch under the inode's write lock, like
//!   every attribute change (docs/SEMANTICS.md §1).

use crate::error::VfsError;
use crate::fs::{live, show, FileSystem, Handle};
use crate::records::{self, Kind, NAME_MAX};
use engine::log::Durability;
use format::InodeNo;
use metadb::WriteBatch;
use std::sync::Arc;

/// One open reference to an inode, held by a front end (for example per FUSE file
/// handle). Give it back with [`FileSystem::close_ino`]; dropping it instead leaves the
/// inode counted as open until unmount (an unlinked file then stays an orphan).
#[derive(Debug)]
pub struct OpenInode {
    handle: Arc<Handle>,
}

impl OpenInode {
    pub fn ino(&self) -> InodeNo {
        self.handle.ino
    }
}

/// A new time for [`FileSystem::set_attr_ino`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetTime {
    /// The file system's clock now (UTIME_NOW).
    Now,
    /// Nanoseconds since the Unix epoch.
    At(i64),
}

/// Attribute changes of [`FileSystem::set_attr_ino`]; `None` leaves a field as it is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SetAttr {
    /// Permission bits (the low 12 bits are kept).
    pub perm: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub atime: Option<SetTime>,
    pub mtime: Option<SetTime>,
}

impl FileSystem {
    /// The inode named `name` in directory `dir` (`.` is `dir`, `..` its parent).
    pub fn lookup_ino(&self, dir: InodeNo, name: &[u8]) -> Result<InodeNo, VfsError> {
        if name.len() > NAME_MAX {
            return Err(VfsError::NameTooLong(show(name)));
        }
        let h = self.handle(dir)?;
        let st = h.read();
        let inode = live(&st, dir)?;
        if inode.kind != Kind::Dir {
            return Err(VfsError::NotDir(format!(
                "inode {dir} (looking for {})",
                show(name)
            )));
        }
        match name {
            b"." => return Ok(dir),
            b".." => return Ok(InodeNo(inode.parent)),
            _ => {}
        }
        self.lookup(dir, name)?
            .map(|d| d.ino)
            .ok_or_else(|| VfsError::NotFound(show(name)))
    }

    /// Opens `ino` (any kind): counts one handle until [`FileSystem::close_ino`].
    pub fn open_ino(&self, ino: InodeNo) -> Result<OpenInode, VfsError> {
        let handle = self.handle(ino)?;
        self.opened(&handle)?;
        Ok(OpenInode { handle })
    }

    /// Closes an [`OpenInode`]: the last close of an unlinked inode frees its blocks.
    pub fn close_ino(&self, open: OpenInode) -> Result<(), VfsError> {
        self.release(&open.handle)
    }

    /// Changes attributes of `ino` (chmod, chown, utimensat); ctime becomes now.
    pub fn set_attr_ino(&self, ino: InodeNo, attr: &SetAttr) -> Result<(), VfsError> {
        let h = self.handle(ino)?;
        let mut st = h.write();
        let mut inode = *live(&st, ino)?;
        let now = self.now();
        let time = |t: SetTime| match t {
            SetTime::Now => now,
            SetTime::At(ns) => ns,
        };
        if let Some(p) = attr.perm {
            inode.perm = p & 0o7777;
        }
        if let Some(uid) = attr.uid {
            inode.uid = uid;
        }
        if let Some(gid) = attr.gid {
            inode.gid = gid;
        }
        if let Some(t) = attr.atime {
            inode.atime_ns = time(t);
        }
        if let Some(t) = attr.mtime {
            inode.mtime_ns = time(t);
        }
        inode.ctime_ns = now;
        let mut batch = WriteBatch::new();
        batch.put(records::inode_key(ino).to_vec(), inode.encode().to_vec());
        self.engine
            .put_metadata(ino, &batch, Durability::Buffered)?;
        st.inode = Some(inode);
        Ok(())
    }
}
