//! Renames: a move, a replace or an exchange of two names, atomically in one batch
//! (docs/DESIGN.md §10.5; docs/SEMANTICS.md §2 "Directories and renames").
//!
//! Invariants:
//! - Cross-directory renames hold the rename mutex, then both parents, an ancestor
//!   before its descendant (else by inode number): the order every other operation
//!   takes, so no cycle of waits forms, and the tree stays still for the "into
//!   itself" check.
//! - Files that get new names are written back first and the rename is logged after
//!   their lanes: a new name never survives without the data the file had.

use crate::creds::{Creds, MAY_EXEC, MAY_WRITE};
use crate::error::VfsError;
use crate::fs::FileSystem;
use crate::handle::{live, Handle, StateWrite};
use crate::namespace::{check_name, live_dir, relinked, show};
use crate::records::{self, Dentry, Inode, Kind, ROOT};
use engine::log::Durability;
use format::InodeNo;
use metadb::WriteBatch;

/// How `rename` treats an existing target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RenameMode {
    /// Replace a target of a compatible kind (POSIX).
    #[default]
    Replace,
    /// Fail with EEXIST if the target exists (RENAME_NOREPLACE).
    NoReplace,
    /// Swap source and target, which must both exist (RENAME_EXCHANGE).
    Exchange,
}

impl FileSystem {
    /// Renames `sp/sname` to `dp/dname` atomically (one batch).
    pub fn rename(
        &self,
        cx: &Creds,
        sp: InodeNo,
        sname: &[u8],
        dp: InodeNo,
        dname: &[u8],
        mode: RenameMode,
    ) -> Result<(), VfsError> {
        check_name(sname)?;
        check_name(dname)?;
        let n = Names {
            sp,
            sname,
            dp,
            dname,
        };
        let _cross = (sp != dp).then(|| self.rename_lock.lock().expect("rename lock"));
        let (sh, dh) = (self.handle(sp)?, self.handle(dp)?);
        let (mut s_guard, mut d_guard) = self.lock_parents(&sh, &dh)?;
        let _forget_source = self.core.names.forget_on_drop(sp, sname);
        let _forget_target = self.core.names.forget_on_drop(dp, dname);
        let spi = live_dir(&s_guard, sp, sname)?;
        let dpi = match &d_guard {
            Some(g) => live_dir(g, dp, dname)?,
            None => spi,
        };
        cx.check(&spi, MAY_EXEC, || show(sname))?;
        cx.check(&dpi, MAY_EXEC, || show(dname))?;
        let src = self
            .lookup(sp, sname)?
            .ok_or_else(|| VfsError::NotFound(show(sname)))?;
        let dst = self.lookup(dp, dname)?;
        self.may_rename(cx, (sp, &spi, sname, &src), (dp, &dpi, dname, dst.as_ref()))?;
        if sp == dp && sname == dname {
            return match mode {
                RenameMode::NoReplace => Err(VfsError::Exists(show(dname))),
                _ => Ok(()),
            };
        }
        let renamed = self.settle_renamed(mode, src, dst)?;
        let now = self.now();
        let mut changes = Changes::default();
        match (mode, dst) {
            (RenameMode::NoReplace, Some(_)) => return Err(VfsError::Exists(show(dname))),
            (RenameMode::Exchange, None) => return Err(VfsError::NotFound(show(dname))),
            (RenameMode::Exchange, Some(d)) => {
                self.exchange_entries(n, src, d, now, &mut changes)?
            }
            (_, target) => {
                if !self.move_entry(n, src, target, now, &mut changes)? {
                    return Ok(());
                }
            }
        }
        let (spi, dpi, parents) = parent_records(n, (spi, dpi), &changes, now)?;
        let logged_in = self.log_rename(n, src, &renamed, changes, parents)?;
        self.note_lane(sp, logged_in);
        self.note_lane(dp, logged_in);
        s_guard.inode = Some(spi);
        if let Some(g) = d_guard.as_mut() {
            g.inode = Some(dpi);
        }
        self.note_lane(src.ino, logged_in);
        if let (RenameMode::Exchange, Some(d)) = (mode, dst) {
            self.note_lane(d.ino, logged_in);
        }
        Ok(())
    }

    /// Both parents of a rename for writing (one lock for one directory), an ancestor
    /// before its descendant (the order every other operation takes parent and child
    /// in), else by inode number; the rename mutex keeps the tree's shape still
    /// meanwhile.
    fn lock_parents<'h>(
        &self,
        sh: &'h Handle,
        dh: &'h Handle,
    ) -> Result<(StateWrite<'h>, Option<StateWrite<'h>>), VfsError> {
        let (sp, dp) = (sh.ino, dh.ino);
        let source_first =
            sp != dp && (self.is_ancestor(sp, dp)? || (!self.is_ancestor(dp, sp)? && sp < dp));
        Ok(if sp == dp {
            (sh.write(), None)
        } else if source_first {
            let s = sh.write();
            (s, Some(dh.write()))
        } else {
            let d = dh.write();
            (sh.write(), Some(d))
        })
    }

    /// The files the rename gives new names, written back: the rename is logged after
    /// their lanes ([`FileSystem::log_rename`]), so a new name never survives without
    /// the data the file had (docs/SEMANTICS.md §2; ext4's auto_da_alloc does as much
    /// for a rename over a file).
    fn settle_renamed(
        &self,
        mode: RenameMode,
        src: Dentry,
        dst: Option<Dentry>,
    ) -> Result<Vec<Dentry>, VfsError> {
        let mut renamed = vec![src];
        if let (RenameMode::Exchange, Some(d)) = (mode, dst) {
            renamed.push(d);
        }
        renamed.retain(|d| d.kind == Kind::File);
        renamed.dedup_by_key(|d| d.ino);
        for d in &renamed {
            let h = self.handle(d.ino)?;
            let mut st = h.write();
            if st.inode.is_some() {
                self.settle(&h, &mut st)?;
            }
        }
        Ok(renamed)
    }

    /// RENAME_EXCHANGE: the two entries swap (`d` is the target's).
    fn exchange_entries(
        &self,
        n: Names<'_>,
        src: Dentry,
        d: Dentry,
        now: i64,
        c: &mut Changes,
    ) -> Result<(), VfsError> {
        let Names {
            sp,
            sname,
            dp,
            dname,
        } = n;
        let into_itself = |dir: &Dentry, dest: InodeNo| -> Result<bool, VfsError> {
            Ok(dir.kind == Kind::Dir && sp != dp && self.is_ancestor(dir.ino, dest)?)
        };
        if into_itself(&src, dp)? || into_itself(&d, sp)? {
            return Err(VfsError::Invalid(format!(
                "cannot move {} into itself",
                show(dname)
            )));
        }
        c.batch
            .put(records::dentry_key(dp, dname), src.encode().to_vec());
        c.batch
            .put(records::dentry_key(sp, sname), d.encode().to_vec());
        if src.kind == Kind::Dir {
            self.reparent(src.ino, dp, now, &mut c.batch)?;
        }
        if d.kind == Kind::Dir {
            self.reparent(d.ino, sp, now, &mut c.batch)?;
        }
        if (src.kind == Kind::Dir) != (d.kind == Kind::Dir) {
            // A directory changes parents: one link moves with it.
            let delta: i64 = if src.kind == Kind::Dir { 1 } else { -1 };
            c.d_links += delta;
            c.s_links -= delta;
        }
        Ok(())
    }

    /// A move of the source's entry to the target's name, replacing `target` if there
    /// is one. False if the target is the source's file under another name: POSIX
    /// says do nothing.
    fn move_entry(
        &self,
        n: Names<'_>,
        src: Dentry,
        target: Option<Dentry>,
        now: i64,
        c: &mut Changes,
    ) -> Result<bool, VfsError> {
        let Names {
            sp,
            sname,
            dp,
            dname,
        } = n;
        if src.kind == Kind::Dir && sp != dp && self.is_ancestor(src.ino, dp)? {
            return Err(VfsError::Invalid(format!(
                "cannot move {} into itself",
                show(sname)
            )));
        }
        if let Some(t) = target {
            if t.ino == src.ino {
                return Ok(false);
            }
            self.replace_target(n, src, t, now, c)?;
        }
        c.batch.delete(records::dentry_key(sp, sname));
        c.batch
            .put(records::dentry_key(dp, dname), src.encode().to_vec());
        if src.kind == Kind::Dir {
            self.reparent(src.ino, dp, now, &mut c.batch)?;
            c.s_links -= 1;
            c.d_links += 1;
        }
        Ok(true)
    }

    /// The target `t` loses its name to the source: a link less, and if that was its
    /// last while it is closed, its deletion (a file's after the rename's batch, in
    /// its own lane: [`FileSystem::log_rename`]; anything else's in the batch).
    fn replace_target(
        &self,
        n: Names<'_>,
        src: Dentry,
        t: Dentry,
        now: i64,
        c: &mut Changes,
    ) -> Result<(), VfsError> {
        let (dp, dname) = (n.dp, n.dname);
        match (src.kind == Kind::Dir, t.kind == Kind::Dir) {
            (false, true) => return Err(VfsError::IsDir(show(dname))),
            (true, false) => return Err(VfsError::NotDir(show(dname))),
            (true, true) => {
                if !self.is_empty_dir(t.ino)? {
                    return Err(VfsError::NotEmpty(show(dname)));
                }
            }
            (false, false) => {}
        }
        let th = self.handle(t.ino)?;
        let mut tst = th.write();
        if !((t.kind == Kind::Dir || live(&tst, t.ino)?.nlink == 1) && tst.open == 0) {
            self.settle(&th, &mut tst)?;
        }
        let mut tinode = *live(&tst, t.ino)?;
        tinode.ctime_ns = now;
        if t.kind == Kind::Dir {
            tinode.nlink = 0;
            c.d_links -= 1;
        } else {
            tinode.nlink = relinked(t.ino, tinode.nlink, -1)?;
        }
        if tinode.nlink == 0 && tst.open == 0 && tinode.kind == Kind::File {
            c.follow_up = Some((t.ino, tinode));
            tst.inode = None;
            tst.xattrs_pending = false;
        } else if tinode.nlink == 0 && tst.open == 0 {
            // A directory or symlink: no blocks, so it goes with the rename.
            self.core.deletion_records(t.ino, &tinode, &mut c.batch)?;
            tst.inode = None;
            tst.xattrs_pending = false;
        } else {
            self.core.record_in_names(t.ino, dp)?;
            c.batch
                .put(records::inode_key(t.ino).to_vec(), tinode.encode().to_vec());
            if tinode.nlink == 0 {
                // Open, nameless: freed at last close, or by the next mount.
                c.batch.put(records::orphan_key(t.ino).to_vec(), Vec::new());
            }
            self.note_lane(t.ino, dp);
            tst.inode = Some(tinode);
        }
        Ok(())
    }

    /// Logs the rename (`c`, and `parents`: the parents' new records); returns the lane
    /// it is logged in, which fsyncs of both directories must reach.
    fn log_rename(
        &self,
        n: Names<'_>,
        src: Dentry,
        renamed: &[Dentry],
        c: Changes,
        parents: WriteBatch,
    ) -> Result<InodeNo, VfsError> {
        let (sp, dp) = (n.sp, n.dp);
        let mut batch = c.batch;
        Ok(match c.follow_up {
            // The replaced file's last link: the entries and the parents' new times (their
            // link counts do not change: a file replaced a file) go to its lane with its
            // deletion, so the rename and the freeing are one batch, and an fsync of the
            // directory writes one lane.
            Some((ino, inode)) => {
                let mut also = self.lanes_of(src.ino);
                also.push(src.ino);
                self.order_deletion(ino, &[sp, dp], &also);
                self.core.record_in(sp, ino)?;
                self.core.record_in(dp, ino)?;
                add_puts(&mut batch, &parents);
                self.core.delete_inode(ino, &inode, batch)?;
                self.drop_pages(ino);
                self.core.engine.order_after(sp, ino);
                self.core.engine.order_after(dp, ino);
                ino
            }
            None => {
                self.core.record_in(sp, dp)?;
                self.core.record_in(dp, dp)?;
                add_puts(&mut batch, &parents);
                for d in renamed {
                    self.core.engine.order_after(dp, d.ino);
                }
                self.core
                    .engine
                    .put_metadata(dp, &batch, Durability::Buffered)?;
                dp
            }
        })
    }

    /// Permission for a rename: write and search on both parents, the sticky rule for the
    /// source and for a target it replaces, and write on a directory that changes
    /// parents (its `..` changes).
    fn may_rename(
        &self,
        cx: &Creds,
        (sp, spi, sname, src): (InodeNo, &Inode, &[u8], &Dentry),
        (dp, dpi, dname, dst): (InodeNo, &Inode, &[u8], Option<&Dentry>),
    ) -> Result<(), VfsError> {
        if cx.is_root() {
            return Ok(());
        }
        // The parents are locked by the caller: their inodes are taken from it, never
        // locked again (a rename into itself names a parent as source or target).
        let inode_of = |ino: InodeNo| match ino {
            _ if ino == sp => Ok(*spi),
            _ if ino == dp => Ok(*dpi),
            _ => self.inode_of(ino),
        };
        let moves = sp != dp;
        let source = inode_of(src.ino)?;
        cx.may_delete(spi, &source, || show(sname))?;
        match dst {
            Some(d) if d.ino != src.ino => {
                let target = inode_of(d.ino)?;
                cx.may_delete(dpi, &target, || show(dname))?;
            }
            _ => cx.check(dpi, MAY_WRITE | MAY_EXEC, || show(dname))?,
        }
        if moves && source.kind == Kind::Dir {
            cx.check(&source, MAY_WRITE, || show(sname))?;
        }
        Ok(())
    }

    /// Points directory `dir`'s parent at `parent` (in `batch`).
    fn reparent(
        &self,
        dir: InodeNo,
        parent: InodeNo,
        now: i64,
        batch: &mut WriteBatch,
    ) -> Result<(), VfsError> {
        let h = self.handle(dir)?;
        let mut st = h.write();
        let mut inode = *live(&st, dir)?;
        inode.parent = parent.0;
        inode.ctime_ns = now;
        // Every rename that reparents is logged in `parent`'s lane.
        self.core.record_in_names(dir, parent)?;
        batch.put(records::inode_key(dir).to_vec(), inode.encode().to_vec());
        st.inode = Some(inode);
        Ok(())
    }

    /// Whether directory `a` is `b` or one of `b`'s ancestors (walking `b`'s parents up to
    /// the root; the rename mutex keeps the tree still).
    fn is_ancestor(&self, a: InodeNo, mut b: InodeNo) -> Result<bool, VfsError> {
        for _ in 0..1_000_000 {
            if a == b {
                return Ok(true);
            }
            if b == ROOT {
                return Ok(false);
            }
            let Some(inode) = self.core.store().inode(b)? else {
                return Ok(false);
            };
            b = InodeNo(inode.parent);
        }
        Err(VfsError::corrupt(
            "directory tree",
            "depth",
            "below 1000000",
            "more (a cycle)",
        ))
    }
}

/// The two names of a rename: the source's directory and name, the target's.
#[derive(Clone, Copy)]
struct Names<'a> {
    sp: InodeNo,
    sname: &'a [u8],
    dp: InodeNo,
    dname: &'a [u8],
}

/// What a rename's entries change: its batch, the replaced file whose last link goes
/// (deleted in its own lane, with the batch), and the link-count changes of the source
/// and target directories.
#[derive(Default)]
struct Changes {
    batch: WriteBatch,
    follow_up: Option<(InodeNo, Inode)>,
    s_links: i64,
    d_links: i64,
}

/// Adds `parents` (the parents' new records) to `batch`.
fn add_puts(batch: &mut WriteBatch, parents: &WriteBatch) {
    for (kind, key, value) in parents.ops() {
        assert_eq!(kind, metadb::ValueKind::Put, "parent records are puts");
        batch.put(key.to_vec(), value.to_vec());
    }
}

/// The parents' new records (`spi`, `dpi`: their inodes before): times `now`, link
/// counts changed as `c` says, and the batch writing them (one record when one
/// directory carries both changes).
fn parent_records(
    n: Names<'_>,
    (mut spi, mut dpi): (Inode, Inode),
    c: &Changes,
    now: i64,
) -> Result<(Inode, Inode, WriteBatch), VfsError> {
    let (sp, dp) = (n.sp, n.dp);
    spi.mtime_ns = now;
    spi.ctime_ns = now;
    dpi.mtime_ns = now;
    dpi.ctime_ns = now;
    let mut parents = WriteBatch::new();
    if sp == dp {
        // One directory carries both changes.
        spi.nlink = relinked(sp, spi.nlink, c.s_links + c.d_links)?;
        dpi = spi;
        parents.put(records::inode_key(sp).to_vec(), spi.encode().to_vec());
    } else {
        spi.nlink = relinked(sp, spi.nlink, c.s_links)?;
        dpi.nlink = relinked(dp, dpi.nlink, c.d_links)?;
        parents.put(records::inode_key(sp).to_vec(), spi.encode().to_vec());
        parents.put(records::inode_key(dp).to_vec(), dpi.encode().to_vec());
    }
    Ok((spi, dpi, parents))
}
