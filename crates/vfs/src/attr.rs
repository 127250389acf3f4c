//! Attributes: `stat` (with `st_blocks` counting the blocks dirty pages will take),
//! `access`, `chmod`/`chown`/`utimensat` ([`FileSystem::set_attr`]), `statfs`, and the
//! write of an inode's record in its own lane ([`FileSystem::put_inode`],
//! [`FileSystem::put_attrs`]).
//!
//! Invariants:
//! - A record is written under its handle's write lock ([`crate::handle::Handle::write`]),
//!   so no write-back is in flight and no writer installs pages meanwhile.
//! - A record never claims data the log does not hold: a change of attributes only
//!   (mode, owner, times) is logged at once when no page of the file is dirty, and
//!   otherwise rides in the batch of the write-back that logs those pages
//!   (docs/DESIGN.md §10.7 "Attributes of a file with dirty pages").
//! - Permission rules are POSIX's as `crate::creds` states them; checks happen under
//!   the same lock as the change.

use crate::creds::{Creds, MAY_WRITE, S_ISGID, S_ISUID};
use crate::error::VfsError;
use crate::fs::FileSystem;
use crate::handle::{live, Handle, InodeState};
use crate::records::{self, Inode, Kind, NAME_MAX};
use crate::shared::BLOCK;
use engine::log::Durability;
use format::InodeNo;
use metadb::WriteBatch;

/// Attributes as `stat` reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Metadata {
    pub ino: u64,
    pub kind: Kind,
    /// `st_mode`: kind and permission bits.
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    /// 512-byte units, as `st_blocks` (an upper bound: holes are not subtracted yet).
    pub blocks: u64,
    pub atime_ns: i64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub btime_ns: i64,
    /// `st_blksize`: the preferred I/O size (one block).
    pub blksize: u32,
    /// `st_rdev`: a device node's number (glibc's `dev_t` encoding), 0 for other kinds.
    pub rdev: u64,
}

impl Metadata {
    /// The `statx` mask bits every `Metadata` fills: the basic stats and the birth time
    /// (docs/SEMANTICS.md §5). `st_dev` is the front end's (the kernel's for FUSE).
    pub const STATX_MASK: u32 = libc::STATX_BASIC_STATS | libc::STATX_BTIME;
}

/// File-system totals as `statfs` reports them (4 KiB blocks). Used blocks are
/// `blocks - blocks_free`: live data and what the log keeps besides (MetaDB's tables,
/// the GC reserve, log heads), so `df`'s size, used and available add up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatFs {
    pub block_size: u32,
    /// The segment area, fixed for an image.
    pub blocks: u64,
    /// What new data may take now.
    pub blocks_free: u64,
    /// Inodes in use plus [`StatFs::files_free`].
    pub files: u64,
    /// An estimate: an inode costs only metadata records, but a file with data takes
    /// at least a block, so one per free block (ext4's default is one per 16 KiB).
    pub files_free: u64,
    pub name_max: u32,
}

/// A change of a file's time by `utimensat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeChange {
    /// The current time (UTIME_NOW): the owner, or anyone who may write the file.
    Now,
    /// This time, in nanoseconds since the epoch: the owner only.
    At(i64),
}

/// What `set_attr` changes (None leaves a field as it is).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AttrChanges {
    /// Permission bits, setuid, setgid and sticky (`mode & 0o7777`).
    pub perm: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub atime: Option<TimeChange>,
    pub mtime: Option<TimeChange>,
}

impl FileSystem {
    /// `access(2)`: Ok if `cx` may access `ino` as `mask` (MAY_* bits) says.
    pub fn access(&self, cx: &Creds, ino: InodeNo, mask: u32) -> Result<(), VfsError> {
        let h = self.handle(ino)?;
        let st = h.read();
        cx.check(live(&st, ino)?, mask, || format!("inode {ino}"))
    }

    /// Attributes of `ino` but for `st_blocks`, which leaves out dirty pages (what open,
    /// permission checks and seeks need: never waits for a write-back).
    pub(crate) fn attrs_ino(&self, ino: InodeNo) -> Result<Metadata, VfsError> {
        let h = self.handle(ino)?;
        let st = h.read();
        Ok(metadata(ino, &h.attrs(&st)?))
    }

    /// Attributes of `ino`. `st_blocks` is exact, and a write-back of the file in flight
    /// is not waited for: the count is the file's before it until it notes its result.
    pub fn stat_ino(&self, ino: InodeNo) -> Result<Metadata, VfsError> {
        let h = self.handle(ino)?;
        self.core.learn_mappings(&h)?;
        // The record's count and the dirty pages over unmapped blocks, read together
        // under the state lock: a write-back notes its result (the new count, its pages
        // clean and mapped) under the state's write lock, and it learned the mappings
        // of the blocks it writes before writing them, so until it notes its result the
        // two describe the file before it. Blocks dirty pages will allocate count
        // already (as the kernel's delayed allocation does).
        let st = h.read();
        let mut meta = metadata(ino, &h.attrs(&st)?);
        meta.blocks += h.pages().pending_blocks() * (BLOCK / 512);
        Ok(meta)
    }

    /// Changes attributes of `ino` (chmod, chown, utimensat), with POSIX's rules: the
    /// owner (or root) changes mode and sets explicit times; only root changes the owner,
    /// and the owner may change the group to one of their groups; anyone who may write
    /// the file sets its times to now. A chown by anyone but root, or a chmod by a
    /// non-member of the file's group, clears set-group-ID; chown clears set-user-ID.
    pub fn set_attr(
        &self,
        cx: &Creds,
        ino: InodeNo,
        changes: &AttrChanges,
    ) -> Result<(), VfsError> {
        let h = self.handle(ino)?;
        let mut st = h.write();
        let mut inode = *live(&st, ino)?;
        let what = || format!("inode {ino}");
        let owner = cx.owns(&inode);
        if let Some(uid) = changes.uid {
            if uid != inode.uid && !cx.is_root() {
                return Err(VfsError::NotPermitted(format!("{}: chown", what())));
            }
        }
        if let Some(gid) = changes.gid {
            if gid != inode.gid && !(cx.is_root() || (owner && cx.in_group(gid))) {
                return Err(VfsError::NotPermitted(format!("{}: chgrp", what())));
            }
        }
        match changes.perm {
            // A writer may drop the set-id bits (the kernel asks a FUSE file system to,
            // in the writer's name, before a write: crate::setid).
            Some(p) if !owner && !crate::setid::may_drop_only(cx, &inode, p) => {
                return Err(VfsError::NotPermitted(format!("{}: chmod", what())));
            }
            _ => {}
        }
        for t in [changes.atime, changes.mtime].into_iter().flatten() {
            match t {
                TimeChange::At(_) if !owner => {
                    return Err(VfsError::NotPermitted(format!("{}: set times", what())));
                }
                TimeChange::Now if !owner => cx.check(&inode, MAY_WRITE, what)?,
                _ => {}
            }
        }
        let now = self.now();
        if let Some(p) = changes.perm {
            inode.perm = p & 0o7777;
            if !cx.is_root() && !cx.in_group(inode.gid) && inode.kind != Kind::Dir {
                inode.perm &= !S_ISGID;
            }
        }
        let chown = changes.uid.is_some() || changes.gid.is_some();
        if let Some(uid) = changes.uid {
            inode.uid = uid;
        }
        if let Some(gid) = changes.gid {
            inode.gid = gid;
        }
        if chown && inode.kind != Kind::Dir {
            inode.perm &= !S_ISUID;
            // A group-executable set-group-ID file loses the bit; without group execute
            // it marks mandatory locking and stays (Linux).
            if inode.perm & 0o010 != 0 {
                inode.perm &= !S_ISGID;
            }
        }
        let at = |t: TimeChange| match t {
            TimeChange::Now => now,
            TimeChange::At(ns) => ns,
        };
        if let Some(t) = changes.atime {
            inode.atime_ns = at(t);
        }
        if let Some(t) = changes.mtime {
            inode.mtime_ns = at(t);
        }
        inode.ctime_ns = now;
        self.put_attrs(&h, &mut st, inode)
    }

    /// Makes `inode`, which changes only attributes of `h` (mode, owner, times: not its
    /// size, kind or block count), its record; the caller holds its write lock as `st`
    /// ([`crate::handle::Handle::write`]). With no dirty page the record is logged now.
    /// With dirty pages it is not: the write-back that logs them carries the inode's
    /// record as it is then, so the new attributes reach the log in one batch with the
    /// data written before them. Logging it now would need the pages written back first
    /// (the in-memory size and times describe them) or a record mixing the new
    /// attributes with the old data, a state the file never had; waiting costs nothing,
    /// since no durability call promises a file's attributes without its data.
    pub(crate) fn put_attrs(
        &self,
        h: &Handle,
        st: &mut InodeState,
        inode: Inode,
    ) -> Result<(), VfsError> {
        let old = live(st, h.ino)?;
        assert_eq!(
            (old.kind, old.size, old.blocks),
            (inode.kind, inode.size, inode.blocks),
            "inode {}: an attribute change changes no size, kind or block count",
            h.ino
        );
        // Stable while `st` is held for writing: writers install pages under the state
        // lock, and a write-back (the only thing that cleans pages) holds `writeback`.
        let dirty = h.pages().dirty_count() > 0;
        if !dirty {
            self.put_inode(h.ino, &inode, WriteBatch::new())?;
        }
        st.inode = Some(inode);
        Ok(())
    }

    /// Applies `batch` with `inode` as `ino`'s new record, in `ino`'s own lane (an
    /// attribute or size change without blocks). The caller holds `ino`'s write lock.
    pub(crate) fn put_inode(
        &self,
        ino: InodeNo,
        inode: &Inode,
        mut batch: WriteBatch,
    ) -> Result<(), VfsError> {
        batch.put(records::inode_key(ino).to_vec(), inode.encode().to_vec());
        self.core.record_in(ino, ino)?;
        self.core
            .engine
            .put_metadata(ino, &batch, Durability::Buffered)?;
        Ok(())
    }

    /// How many inodes there are of each kind (one scan of the inode records: for
    /// `augefs inspect`, not for a hot path).
    pub fn inode_kinds(&self) -> Result<Vec<(Kind, u64)>, VfsError> {
        let counts = self.core.store().inode_kinds()?;
        Ok(Kind::ALL.iter().map(|&k| (k, counts[k as usize])).collect())
    }

    /// Bytes new data may still take: the page cache's look-up of the device's room,
    /// less its dirty pages (erring low). Cheap, unlike [`FileSystem::statfs`], which
    /// visits every domain: for a front end that asks on a hot path.
    pub fn room_left(&self) -> u64 {
        self.core.cache.room_left()
    }

    /// Returns once the files unlinked so far have their blocks freed (the reaper's
    /// queue, `crate::reap`): the engine's space figures are exact after it.
    pub fn wait_for_frees(&self) {
        self.core.reap_all();
    }

    pub fn statfs(&self) -> StatFs {
        // Files unlinked last free their blocks first: df right after an rm shows them
        // free.
        self.wait_for_frees();
        let space = self.core.engine.space_report();
        let used = self.core.inode_count.used();
        // Dirty pages take blocks at write-back (a write claimed that room, as ext4's
        // delayed allocation reserves it): df after a write shows them used.
        let dirty_blocks = self.core.cache.dirty_bytes().div_ceil(BLOCK);
        let free = space.room_blocks().saturating_sub(dirty_blocks);
        assert!(free <= space.area_blocks(), "free within the area");
        StatFs {
            block_size: BLOCK as u32,
            blocks: space.area_blocks(),
            blocks_free: free,
            files: used + free,
            files_free: free,
            name_max: NAME_MAX as u32,
        }
    }
}

fn metadata(ino: InodeNo, inode: &Inode) -> Metadata {
    Metadata {
        ino: ino.0,
        kind: inode.kind,
        mode: inode.mode(),
        nlink: inode.nlink,
        uid: inode.uid,
        gid: inode.gid,
        // A directory's entries are records, not a file: it shows one block, as ext4's
        // and xfs's smallest directories do (`ls -l` users expect a size there).
        size: if inode.kind == Kind::Dir {
            BLOCK
        } else {
            inode.size
        },
        blocks: inode.blocks * (BLOCK / 512),
        atime_ns: inode.atime_ns,
        mtime_ns: inode.mtime_ns,
        ctime_ns: inode.ctime_ns,
        btime_ns: inode.btime_ns,
        blksize: BLOCK as u32,
        rdev: records::dev_of(inode.rdev),
    }
}
