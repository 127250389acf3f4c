//! Names: lookups, creates (files, directories, symbolic links, special files), hard
//! links, readlink and readdir (docs/DESIGN.md §10.3 and
//! §10.5). Removal is [`crate::remove`], renames are
//! [`crate::rename`].
//!
//! Invariants:
//! - A name operation is one batch in the parent directory's lane.
//! - A create holds its directory in read mode and its name's stripe from the check
//!   that the name is free until its entry is in MetaDB; every other change of a
//!   directory's entries holds it in write mode.
//! - Names changed are forgotten by the name cache after their batch and before the
//!   directory is unlocked.

use crate::creds::{Creds, MAY_EXEC, MAY_WRITE, S_ISGID};
use crate::error::VfsError;
use crate::fs::FileSystem;
use crate::handle::{live, InodeState};
use crate::records::{self, Dentry, Inode, Kind, NAME_MAX};
use engine::log::Durability;
use format::InodeNo;
use metadb::WriteBatch;
use std::sync::MutexGuard;

/// One directory entry as readdir returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    pub name: Vec<u8>,
    pub ino: u64,
    pub kind: Kind,
}

impl FileSystem {
    /// The entry `name` of directory `dir` (whose state the caller has locked or read).
    pub(crate) fn lookup(&self, dir: InodeNo, name: &[u8]) -> Result<Option<Dentry>, VfsError> {
        let ticket = match self.core.names.get(dir, name) {
            crate::caches::Cached::Hit(entry) => return Ok(entry),
            crate::caches::Cached::Miss(ticket) => ticket,
        };
        let entry = self.core.store().dentry(dir, name)?;
        self.core.names.fill(ticket, dir, name, entry);
        Ok(entry)
    }

    /// Creates `name` in directory `parent`: a file, a directory or (with `target`) a
    /// symbolic link. EEXIST if the name is taken. Special files are [`FileSystem::mknod`].
    pub fn create(
        &self,
        cx: &Creds,
        parent: InodeNo,
        name: &[u8],
        kind: Kind,
        perm: u32,
        target: Option<&[u8]>,
    ) -> Result<InodeNo, VfsError> {
        assert!(!kind.is_special(), "special files are made by mknod");
        let node = NewNode {
            kind,
            perm,
            target,
            rdev: 0,
        };
        self.create_node(cx, parent, name, node)
    }

    /// `mknod(2)`: creates `name` in directory `parent` as a regular file, a FIFO, a
    /// socket or a device node (`dev`, a `dev_t`, for a device; ignored otherwise, as
    /// Linux does). The vfs only records the node: a FIFO's pipe, a socket and a device
    /// are the kernel's, through a kernel front end (docs/SEMANTICS.md §4). EINVAL for
    /// a directory, a symbolic link or a device number `mknod(2)` cannot carry.
    pub fn mknod(
        &self,
        cx: &Creds,
        parent: InodeNo,
        name: &[u8],
        kind: Kind,
        perm: u32,
        dev: u64,
    ) -> Result<InodeNo, VfsError> {
        if !(kind == Kind::File || kind.is_special()) {
            return Err(VfsError::Invalid(format!(
                "mknod of a {kind:?} ({})",
                show(name)
            )));
        }
        let rdev = match kind.is_device() {
            true => records::rdev_of(dev).ok_or_else(|| {
                VfsError::Invalid(format!("device number {dev:#x} ({})", show(name)))
            })?,
            false => 0,
        };
        let node = NewNode {
            kind,
            perm,
            target: None,
            rdev,
        };
        self.create_node(cx, parent, name, node)
    }

    /// [`FileSystem::create`] and [`FileSystem::mknod`]: one batch in the parent's lane.
    fn create_node(
        &self,
        cx: &Creds,
        parent: InodeNo,
        name: &[u8],
        node: NewNode<'_>,
    ) -> Result<InodeNo, VfsError> {
        let NewNode {
            kind,
            perm,
            target,
            rdev,
        } = node;
        check_name(name)?;
        assert_eq!(
            kind == Kind::Symlink,
            target.is_some(),
            "a symlink has a target"
        );
        assert!(rdev == 0 || kind.is_device(), "rdev only on devices");
        let ph = self.handle(parent)?;
        // Creates share the directory (read mode): the name's stripe keeps two creates of
        // one name apart, and the directory's record is built in lane order below.
        // Everything else that changes the directory's entries holds it in write mode.
        let pst = ph.read();
        let _name = self.name_stripe(parent, name);
        let _forget = self.core.names.forget_on_drop(parent, name);
        let pinode = self.free_name(cx, &pst, parent, name)?;
        if kind == Kind::Dir {
            relinked(parent, pinode.nlink, 1)?;
        }
        let ino = self.allocate_ino()?;
        let mut inode = new_inode(cx, &pinode, parent, kind, perm, self.now());
        inode.size = target.map_or(0, |t| t.len() as u64);
        inode.rdev = rdev;
        let now = inode.btime_ns;
        let mut batch = WriteBatch::new();
        batch.put(
            records::dentry_key(parent, name),
            Dentry { ino, kind }.encode().to_vec(),
        );
        batch.put(records::inode_key(ino).to_vec(), inode.encode().to_vec());
        if let Some(t) = target {
            batch.put(records::symlink_key(ino).to_vec(), t.to_vec());
        }
        self.core.record_in(parent, parent)?;
        let ph_ref = &ph;
        self.core
            .engine
            .put_create(parent, ino, batch, Durability::Buffered, |batch| {
                // Under the lane's lock: the record order in the lane is the order of
                // these updates, so the last record of the directory is the newest.
                let mut created = ph_ref.created();
                let mut pinode = created.unwrap_or(pinode);
                pinode.mtime_ns = pinode.mtime_ns.max(now);
                pinode.ctime_ns = pinode.ctime_ns.max(now);
                if kind == Kind::Dir {
                    // Checked above; creates of other names (the directory in read
                    // mode too) may each add one since, so saturate, never overflow.
                    pinode.nlink = pinode.nlink.saturating_add(1);
                }
                batch.put(
                    records::inode_key(parent).to_vec(),
                    pinode.encode().to_vec(),
                );
                *created = Some(pinode);
            })?;
        self.core.count_inodes(1);
        let h = self.handle(ino)?;
        let mut st = h.write();
        st.inode = Some(inode);
        drop(st);
        self.note_lane(ino, parent);
        self.note_create(ino, parent)?;
        Ok(ino)
    }

    /// The lock of the stripe of names `name` of `parent` falls in: held by a create
    /// from its check that the name is free until its entry is in MetaDB.
    fn name_stripe(&self, parent: InodeNo, name: &[u8]) -> MutexGuard<'_, ()> {
        let i = (crate::caches::name_hash(parent, name) >> 56) as usize % self.name_stripes.len();
        self.name_stripes[i].lock().expect("name stripe lock")
    }

    /// The target of symbolic link `ino`.
    pub fn readlink_ino(&self, ino: InodeNo) -> Result<Vec<u8>, VfsError> {
        let h = self.handle(ino)?;
        let st = h.read();
        if live(&st, ino)?.kind != Kind::Symlink {
            return Err(VfsError::Invalid(format!(
                "inode {ino} is not a symbolic link"
            )));
        }
        self.core.store().symlink_target(ino)?.ok_or_else(|| {
            VfsError::corrupt(format!("symlink {ino}"), "target", "present", "absent")
        })
    }

    /// Entries of directory `dir` after `after` (a name a previous call returned, or
    /// None to start), at most `max`. A cursor stays valid while entries come and go:
    /// an entry present throughout is returned exactly once.
    pub fn readdir(
        &self,
        cx: &Creds,
        dir: InodeNo,
        after: Option<&[u8]>,
        max: usize,
    ) -> Result<Vec<DirEntry>, VfsError> {
        let h = self.handle(dir)?;
        let st = h.read();
        let inode = live(&st, dir)?;
        if inode.kind != Kind::Dir {
            return Err(VfsError::NotDir(format!("inode {dir}")));
        }
        cx.check(inode, crate::creds::MAY_READ, || format!("directory {dir}"))?;
        let entries = self.core.store().entries(dir, after, max)?;
        Ok(entries
            .into_iter()
            .map(|(name, d)| DirEntry {
                name,
                ino: d.ino.0,
                kind: d.kind,
            })
            .collect())
    }

    /// The inode of directory `parent` (whose state `pst` the caller holds locked) for a
    /// new entry `name`: search permission, EEXIST if the name is taken, then write
    /// permission (the order Linux checks in).
    fn free_name(
        &self,
        cx: &Creds,
        pst: &InodeState,
        parent: InodeNo,
        name: &[u8],
    ) -> Result<Inode, VfsError> {
        let pinode = live_dir(pst, parent, name)?;
        cx.check(&pinode, MAY_EXEC, || show(name))?;
        if self.lookup(parent, name)?.is_some() {
            return Err(VfsError::Exists(show(name)));
        }
        cx.check(&pinode, MAY_WRITE, || show(name))?;
        Ok(pinode)
    }

    /// Whether directory `dir` has no entries (no lock taken: callers hold it).
    pub(crate) fn is_empty_dir(&self, dir: InodeNo) -> Result<bool, VfsError> {
        self.core.store().is_empty_dir(dir)
    }

    /// Hard link: a new name `name` in `parent` for the non-directory `ino`.
    pub fn link(
        &self,
        cx: &Creds,
        ino: InodeNo,
        parent: InodeNo,
        name: &[u8],
    ) -> Result<(), VfsError> {
        check_name(name)?;
        // Directories have no hard links (checked before locking: `ino` may be `parent`).
        if self.attrs_ino(ino)?.kind == Kind::Dir {
            return Err(VfsError::NotPermitted(format!(
                "inode {ino}: hard links to directories"
            )));
        }
        let ph = self.handle(parent)?;
        let mut pst = ph.write();
        let _forget = self.core.names.forget_on_drop(parent, name);
        let mut pinode = self.free_name(cx, &pst, parent, name)?;
        let h = self.handle(ino)?;
        let mut st = h.write();
        self.settle(&h, &mut st)?;
        let mut inode = *live(&st, ino)?;
        let now = self.now();
        let mut batch = WriteBatch::new();
        if inode.nlink == 0 {
            // An O_TMPFILE file (or one unlinked while open) gets a name: no longer an
            // orphan. Its orphan record's lane is made durable first (`record_in_names`).
            batch.delete(records::orphan_key(ino).to_vec());
        }
        inode.nlink = relinked(ino, inode.nlink, 1)?;
        inode.ctime_ns = now;
        pinode.mtime_ns = now;
        pinode.ctime_ns = now;
        batch.put(
            records::dentry_key(parent, name),
            Dentry {
                ino,
                kind: inode.kind,
            }
            .encode()
            .to_vec(),
        );
        batch.put(records::inode_key(ino).to_vec(), inode.encode().to_vec());
        batch.put(
            records::inode_key(parent).to_vec(),
            pinode.encode().to_vec(),
        );
        self.core.record_in_names(ino, parent)?;
        self.core.record_in(parent, parent)?;
        self.core
            .engine
            .put_metadata(parent, &batch, Durability::Buffered)?;
        st.inode = Some(inode);
        self.note_lane(ino, parent);
        pst.inode = Some(pinode);
        Ok(())
    }
}

/// What a create makes: its kind, permission bits, a symlink's target, a device's
/// number (the inode's 32-bit `rdev`).
struct NewNode<'a> {
    kind: Kind,
    perm: u32,
    target: Option<&'a [u8]>,
    rdev: u32,
}

/// A new inode of `kind` made by `cx` in directory `parent` (whose inode is `pinode`),
/// with one link (two for a directory) and every time `now`. A set-group-ID directory
/// hands its group (and, to directories, the bit) down.
pub(crate) fn new_inode(
    cx: &Creds,
    pinode: &Inode,
    parent: InodeNo,
    kind: Kind,
    perm: u32,
    now: i64,
) -> Inode {
    let inherit = pinode.perm & S_ISGID != 0;
    let gid = if inherit { pinode.gid } else { cx.gid };
    let mut perm = perm & 0o7777;
    if kind == Kind::Dir && inherit {
        perm |= S_ISGID;
    } else if kind == Kind::File && !cx.is_root() && !cx.in_group(gid) {
        perm &= !S_ISGID;
    }
    Inode::new(kind, perm, cx.uid, gid, parent, now)
}

/// A copy of a live directory's inode (for an operation on `name` in it).
pub(crate) fn live_dir(st: &InodeState, dir: InodeNo, name: &[u8]) -> Result<Inode, VfsError> {
    let inode = *live(st, dir)?;
    if inode.kind != Kind::Dir {
        return Err(VfsError::NotDir(format!(
            "inode {dir} (looking for {})",
            show(name)
        )));
    }
    Ok(inode)
}

pub(crate) fn check_name(name: &[u8]) -> Result<(), VfsError> {
    if name.len() > NAME_MAX {
        return Err(VfsError::NameTooLong(show(name)));
    }
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0)
    {
        return Err(VfsError::Invalid(format!("file name {:?}", show(name))));
    }
    Ok(())
}

/// `nlink` changed by `delta`. Link counts are read from MetaDB: one that would pass
/// u32::MAX is EMLINK (as Linux refuses a link beyond its maximum), one that would go
/// below 0 is corruption (an entry named an inode that counts no links).
pub(crate) fn relinked(ino: InodeNo, nlink: u32, delta: i64) -> Result<u32, VfsError> {
    let n = i64::from(nlink) + delta;
    u32::try_from(n).map_err(|_| {
        if n < 0 {
            VfsError::corrupt(
                format!("inode {ino}"),
                "nlink",
                "a link for each entry",
                nlink,
            )
        } else {
            VfsError::TooManyLinks(format!("inode {ino}"))
        }
    })
}

pub(crate) fn show(name: &[u8]) -> String {
    String::from_utf8_lossy(name).into_owned()
}
