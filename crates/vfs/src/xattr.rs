//! Extended attributes (`user.` and `trusted.` namespaces): one MetaDB record per
//! attribute (`a` ino name -> value, docs/FORMAT.md §6.4), changed in the inode's domain
//! lane with the inode's ctime, removed with the inode.
//!
//! Invariants:
//! - Names are 1-255 bytes in a supported namespace; values at most 64 KiB (Linux's
//!   XATTR_SIZE_MAX).
//! - A set or remove is one batch with the inode's new ctime, under the inode's lock;
//!   of a file with dirty pages, it waits in the inode's state for their write-back
//!   and goes in its batch (gets and lists see it at once).

use crate::creds::{Creds, MAY_READ, MAY_WRITE, S_ISVTX};
use crate::error::VfsError;
use crate::fs::FileSystem;
use crate::handle::{live, Handle, InodeState};
use crate::namespace::show;
use crate::records::{self, Inode, Kind};
use format::InodeNo;
use metadb::WriteBatch;

/// Largest attribute value (Linux's XATTR_SIZE_MAX).
pub const XATTR_VALUE_MAX: usize = 64 << 10;
const NAMESPACES: [&[u8]; 2] = [b"user.", b"trusted."];

/// How `set_xattr` treats an existing attribute (XATTR_CREATE, XATTR_REPLACE).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum XattrMode {
    #[default]
    Either,
    /// Fail with EEXIST if it exists.
    Create,
    /// Fail with ENODATA if it does not.
    Replace,
}

fn check_name(name: &[u8]) -> Result<(), VfsError> {
    if name.is_empty() || name.len() > 255 {
        return Err(VfsError::Invalid(format!(
            "attribute name of {} bytes",
            name.len()
        )));
    }
    if !NAMESPACES
        .iter()
        .any(|ns| name.len() > ns.len() && name.starts_with(ns))
    {
        return Err(VfsError::AttributeNamespace(show(name)));
    }
    Ok(())
}

/// Linux's rules for who may touch an attribute: `trusted.` is root's alone (EPERM);
/// `user.` lives on regular files and directories only, and needs read permission to get
/// and write permission to set or remove (and, in a sticky directory, ownership).
fn may_access(cx: &Creds, inode: &Inode, name: &[u8], write: bool) -> Result<(), VfsError> {
    if name.starts_with(b"trusted.") {
        if !cx.is_root() {
            return Err(VfsError::NotPermitted(format!(
                "{}: trusted attributes are root's",
                show(name)
            )));
        }
        return Ok(());
    }
    if !matches!(inode.kind, Kind::File | Kind::Dir) {
        return Err(if write {
            VfsError::NotPermitted(format!(
                "{}: user attributes on a symbolic link",
                show(name)
            ))
        } else {
            VfsError::NoAttribute(show(name))
        });
    }
    if write && inode.kind == Kind::Dir && inode.perm & S_ISVTX != 0 && !cx.owns(inode) {
        return Err(VfsError::NotPermitted(format!(
            "{}: sticky directory owned by someone else",
            show(name)
        )));
    }
    let mask = if write { MAY_WRITE } else { MAY_READ };
    cx.check(inode, mask, || show(name))
}

impl FileSystem {
    pub fn set_xattr(
        &self,
        path: &str,
        name: &[u8],
        value: &[u8],
        mode: XattrMode,
    ) -> Result<(), VfsError> {
        let cx = self.creds();
        let ino = self.resolve_as(&cx, path, true)?;
        self.set_xattr_ino(&cx, ino, name, value, mode)
    }

    pub fn set_xattr_ino(
        &self,
        cx: &Creds,
        ino: InodeNo,
        name: &[u8],
        value: &[u8],
        mode: XattrMode,
    ) -> Result<(), VfsError> {
        check_name(name)?;
        if value.len() > XATTR_VALUE_MAX {
            return Err(VfsError::AttributeTooLarge(format!(
                "{} bytes",
                value.len()
            )));
        }
        let h = self.handle(ino)?;
        let mut st = h.write();
        let mut inode = *live(&st, ino)?;
        may_access(cx, &inode, name, true)?;
        let exists = self.xattr_now(&h, &st, name)?.is_some();
        match (mode, exists) {
            (XattrMode::Create, true) => return Err(VfsError::Exists(show(name))),
            (XattrMode::Replace, false) => return Err(VfsError::NoAttribute(show(name))),
            _ => {}
        }
        inode.ctime_ns = self.now();
        self.change_xattr(&h, &mut st, inode, name, Some(value))
    }

    /// Logs `name`'s new value (`None`: removed) with `inode`, the file's new record,
    /// or, while the file has dirty pages, keeps both for their write-back (as
    /// attribute changes are: docs/DESIGN.md §10.7), so the log never holds the
    /// attribute ahead of the data written before it. The caller holds the write lock.
    fn change_xattr(
        &self,
        h: &Handle,
        st: &mut InodeState,
        inode: Inode,
        name: &[u8],
        value: Option<&[u8]>,
    ) -> Result<(), VfsError> {
        // Stable while the write lock is held: no page is installed and no write-back
        // is in flight.
        if h.pages().dirty_count() > 0 {
            let mut pending = h.xattrs.lock().expect("xattrs lock");
            if !st.xattrs_pending {
                pending.clear();
                st.xattrs_pending = true;
            }
            pending.insert(name.to_vec(), value.map(<[u8]>::to_vec));
            st.inode = Some(inode);
            return Ok(());
        }
        let key = records::xattr_key(h.ino, name);
        let mut batch = WriteBatch::new();
        match value {
            Some(v) => batch.put(key, v.to_vec()),
            None => batch.delete(key),
        };
        self.put_inode(h.ino, &inode, batch)?;
        st.inode = Some(inode);
        Ok(())
    }

    /// `name`'s value as the file has it now: a change waiting for a write-back, else
    /// the stored one.
    fn xattr_now(
        &self,
        h: &Handle,
        st: &InodeState,
        name: &[u8],
    ) -> Result<Option<Vec<u8>>, VfsError> {
        if st.xattrs_pending {
            if let Some(v) = h.xattrs.lock().expect("xattrs lock").get(name) {
                return Ok(v.clone());
            }
        }
        self.core.store().xattr(h.ino, name)
    }

    pub fn get_xattr(&self, path: &str, name: &[u8]) -> Result<Vec<u8>, VfsError> {
        let cx = self.creds();
        let ino = self.resolve_as(&cx, path, true)?;
        self.get_xattr_ino(&cx, ino, name)
    }

    pub fn get_xattr_ino(
        &self,
        cx: &Creds,
        ino: InodeNo,
        name: &[u8],
    ) -> Result<Vec<u8>, VfsError> {
        check_name(name)?;
        let h = self.handle(ino)?;
        let st = h.read();
        may_access(cx, live(&st, ino)?, name, false)?;
        self.xattr_now(&h, &st, name)?
            .ok_or_else(|| VfsError::NoAttribute(show(name)))
    }

    /// Attribute names of `path`, sorted.
    pub fn list_xattr(&self, path: &str) -> Result<Vec<Vec<u8>>, VfsError> {
        let cx = self.creds();
        let ino = self.resolve_as(&cx, path, true)?;
        self.list_xattr_ino(&cx, ino)
    }

    /// Attribute names of `ino`, sorted (`trusted.` ones only for root, as Linux).
    pub fn list_xattr_ino(&self, cx: &Creds, ino: InodeNo) -> Result<Vec<Vec<u8>>, VfsError> {
        let h = self.handle(ino)?;
        let st = h.read();
        live(&st, ino)?;
        let mut names = self.xattr_names(ino)?;
        if st.xattrs_pending {
            let pending = h.xattrs.lock().expect("xattrs lock");
            names.retain(|n| !pending.contains_key(n));
            names.extend(
                pending
                    .iter()
                    .filter(|(_, v)| v.is_some())
                    .map(|(n, _)| n.clone()),
            );
            names.sort();
        }
        if !cx.is_root() {
            names.retain(|n| !n.starts_with(b"trusted."));
        }
        Ok(names)
    }

    pub(crate) fn xattr_names(&self, ino: InodeNo) -> Result<Vec<Vec<u8>>, VfsError> {
        self.core.store().xattr_names(ino)
    }

    pub fn remove_xattr(&self, path: &str, name: &[u8]) -> Result<(), VfsError> {
        let cx = self.creds();
        let ino = self.resolve_as(&cx, path, true)?;
        self.remove_xattr_ino(&cx, ino, name)
    }

    pub fn remove_xattr_ino(&self, cx: &Creds, ino: InodeNo, name: &[u8]) -> Result<(), VfsError> {
        check_name(name)?;
        let h = self.handle(ino)?;
        let mut st = h.write();
        let mut inode = *live(&st, ino)?;
        may_access(cx, &inode, name, true)?;
        if self.xattr_now(&h, &st, name)?.is_none() {
            return Err(VfsError::NoAttribute(show(name)));
        }
        inode.ctime_ns = self.now();
        self.change_xattr(&h, &mut st, inode, name, None)
    }
}
