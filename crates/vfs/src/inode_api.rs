//! Inode-level calls for front ends that hold inode numbers instead of paths (the FUSE
//! adapter, later the C ABI): name lookup and open references that keep an unlinked
//! file's data alive. (Attribute changes are `FileSystem::set_attr`.)
//!
//! Invariants:
//! - Data calls on an [`OpenInode`] (`read_open`, `write_open`, `append_open`) use the
//!   handle it holds: a front end that holds one never looks the inode up again.
//! - An [`OpenInode`] counts as one open handle of its inode (as a [`crate::File`]
//!   does) from [`FileSystem::open_ino`] until [`FileSystem::close_ino`] consumes it;
//!   an inode whose last name is removed meanwhile keeps its blocks until then.

use crate::creds::{Creds, MAY_EXEC};
use crate::error::VfsError;
use crate::fs::FileSystem;
use crate::handle::{live, Handle};
use crate::namespace::show;
use crate::records::{Kind, NAME_MAX};
use format::InodeNo;
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

    /// The handle, still counted as open (a `File` made from it closes it).
    pub(crate) fn into_handle(self) -> Arc<Handle> {
        self.handle
    }
}

impl FileSystem {
    /// The inode named `name` in directory `dir` (`.` is `dir`, `..` its parent); `cx`
    /// needs search permission on `dir`.
    pub fn lookup_ino(&self, cx: &Creds, dir: InodeNo, name: &[u8]) -> Result<InodeNo, VfsError> {
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
        cx.check(inode, MAY_EXEC, || show(name))?;
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

    /// Reads from an open file at `offset` (as [`FileSystem::read_at`], without
    /// looking the inode up again).
    pub fn read_open(
        &self,
        open: &OpenInode,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<usize, VfsError> {
        self.read_data(&open.handle, offset, buf)
    }

    /// Reads an open file at `offset` without a copy (as [`FileSystem::read_view_at`]).
    pub fn read_view_open(
        &self,
        open: &OpenInode,
        offset: u64,
        len: usize,
    ) -> Result<crate::ReadView, VfsError> {
        self.read_view(&open.handle, offset, len)
    }

    /// Writes to an open file at `offset` (as [`FileSystem::write_at`]).
    pub fn write_open(
        &self,
        open: &OpenInode,
        offset: u64,
        data: &[u8],
    ) -> Result<usize, VfsError> {
        Ok(self
            .write_data(&open.handle, crate::data::At::Offset(offset), data)?
            .1)
    }

    /// Writes at an open file's end (as [`FileSystem::append_ino`]).
    pub fn append_open(&self, open: &OpenInode, data: &[u8]) -> Result<(u64, usize), VfsError> {
        self.write_data(&open.handle, crate::data::At::End, data)
    }

    /// Closes an [`OpenInode`]: the last close of an unlinked inode frees its blocks.
    pub fn close_ino(&self, open: OpenInode) -> Result<(), VfsError> {
        self.release(&open.handle)
    }
}
