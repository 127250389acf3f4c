//! File and directory operations of [`AugeFuse`]: attributes, open/read/write/release,
//! fsync, syncfs, fallocate, lseek, directories and extended attributes.
//!
//! Invariants:
//! - A READ's data is read by the vfs straight into the reply buffer (no copy, no
//!   allocation).
//! - A request the kernel makes for a node it still holds whose inode was removed (with
//!   writeback_cache: times or pages written back after the last name went) succeeds
//!   without effect: nothing can read that inode again. Any other ENOENT is returned.

use crate::adapter::{creds, done, ino, ino as vfs_ino, AugeFuse};
use crate::constants::READDIR_BATCH;
use crate::convert::{dirent_type, errno, join_ns};
use crate::proto::abi::{self, fattr};
use crate::proto::request::{Op, Request};
use crate::session::Out;
use crate::tables::{DirCursor, OpenFile, Resume};
use std::sync::{Arc, Mutex};
use vfs::locks::LockOwner;
use vfs::{AttrChanges, Creds, Kind, TimeChange, VfsError, XattrMode};

/// The vfs error "no such inode".
fn gone(e: &VfsError) -> bool {
    matches!(e, VfsError::NotFound(_))
}

impl AugeFuse {
    /// File operations; answers ENOSYS to what it does not know.
    pub(crate) fn dispatch_files(&self, req: &Request<'_>, out: &mut Out<'_>) {
        let h = &req.header;
        let i = h.nodeid;
        match &req.op {
            Op::Open(o) => match self
                .kill_setid(h, o.open_flags & abi::OPEN_KILL_SUIDGID != 0, out)
                .and_then(|()| self.fs.open_ino(ino(i)))
            {
                Ok(open) => {
                    let fh = self.files.insert(OpenFile::new(open));
                    out.send(&abi::OpenOut {
                        fh,
                        open_flags: self.open_flags(h),
                        padding: 0,
                    });
                }
                Err(e) => out.error(errno(&e)),
            },
            Op::Read(r) => {
                let tap = self.tap.get();
                let token = tap.and_then(|t| t.before(h.uid, h.gid, i));
                // A view of the cache's own blocks: written to the kernel from them where
                // the transport allows (else copied into the reply), and kept by the tap.
                match self.fs.read_view_at(ino(i), r.offset, r.size as usize) {
                    Ok(v) => {
                        let n = v.len();
                        if !out.send_view(&v) {
                            let copied = v.copy_to(out.buf().tail(n));
                            out.buf().commit(copied);
                            out.send_payload();
                        }
                        if let (Some(t), Some(token)) = (tap, token) {
                            t.after(h.uid, h.gid, i, token, r.offset, v, r.size as usize);
                        }
                        if !self.direct_io {
                            // The kernel's page cache keeps these bytes (KEEP_CACHE).
                            self.fs.let_go_behind(ino(i), r.offset, n);
                        }
                    }
                    Err(e) => out.error(errno(&e)),
                }
            }
            Op::Write { arg, data } => match self
                .kill_setid(h, arg.write_flags & abi::WRITE_KILL_SUIDGID != 0, out)
                .and_then(|()| self.fs.write_at(ino(i), arg.offset, data))
            {
                Ok(n) => {
                    out.send(&abi::WriteOut {
                        size: u32::try_from(n).expect("a FUSE write is below 4 GiB"),
                        padding: 0,
                    });
                    if !self.direct_io {
                        // The kernel's page cache keeps these bytes too.
                        self.fs.write_behind(ino(i));
                    }
                }
                Err(e) if gone(&e) && self.nodes.kind(i).is_some() => out.send(&abi::WriteOut {
                    size: arg.size,
                    padding: 0,
                }),
                Err(e) => out.error(errno(&e)),
            },
            Op::Flush(f) => {
                // close(2): writes already reached the vfs; durability is fsync's. The
                // closing process's record locks on the file go (POSIX).
                let owner = LockOwner::Kernel(f.lock_owner);
                self.fs.record_locks().release(ino(i), owner);
                out.ok();
            }
            Op::Release(r) => self.release(i, r, out),
            // Linux passes sync(2) and syncfs(2) to no FUSE file system but virtiofs
            // (FUSE_SYNCFS below waits for a kernel that does): an fsync of the root
            // directory, `sync DIR` of the mount point, is the way to make everything
            // durable now (docs/SEMANTICS.md §2).
            Op::FsyncDir(_) if i == abi::ROOT_ID => done(out, self.fs.persist_all()),
            Op::Fsync(f) | Op::FsyncDir(f) => {
                let data_only = f.fsync_flags & abi::FSYNC_FDATASYNC != 0;
                match self.fs.fsync_ino(ino(i), data_only) {
                    Err(e) if gone(&e) && self.nodes.kind(i).is_some() => out.ok(),
                    r => done(out, r),
                }
            }
            Op::Syncfs => done(out, self.fs.sync()),
            Op::Fallocate(f) => {
                let r = vfs::Fallocate::from_mode(f.mode as i32)
                    .and_then(|op| self.fs.fallocate(ino(i), op, f.offset, f.length));
                done(out, r);
            }
            Op::Lseek(l) => self.lseek(i, l, out),
            Op::GetLk(a) => self.getlk(i, a, out),
            Op::SetLk { arg, sleep } => self.setlk(h, arg, *sleep, out),
            _ => self.dispatch_dirs_xattrs(req, out),
        }
    }

    fn dispatch_dirs_xattrs(&self, req: &Request<'_>, out: &mut Out<'_>) {
        let h = &req.header;
        let i = h.nodeid;
        match &req.op {
            Op::OpenDir(_) => match self.fs.stat_ino(ino(i)) {
                Ok(m) if m.kind == Kind::Dir => {
                    let fh = self.dirs.insert(Arc::new(Mutex::new(DirCursor::default())));
                    out.send(&abi::OpenOut {
                        fh,
                        open_flags: 0,
                        padding: 0,
                    });
                }
                Ok(_) => out.error(libc::ENOTDIR),
                Err(e) => out.error(errno(&e)),
            },
            Op::ReadDir(r) => self.readdir(h, r, false, out),
            Op::ReadDirPlus(r) => self.readdir(h, r, true, out),
            Op::ReleaseDir(r) => match self.dirs.remove(r.fh) {
                Some(_) => out.ok(),
                None => out.error(libc::EBADF),
            },
            Op::SetXattr { arg, name, value } => {
                let mode = match arg.flags as i32 {
                    0 => XattrMode::Either,
                    libc::XATTR_CREATE => XattrMode::Create,
                    libc::XATTR_REPLACE => XattrMode::Replace,
                    _ => return out.error(libc::EINVAL),
                };
                let r = self.fs.set_xattr_ino(&creds(h), ino(i), name, value, mode);
                done(out, r);
            }
            Op::GetXattr { size, name } => match self.fs.get_xattr_ino(&creds(h), ino(i), name) {
                Ok(v) => reply_xattr(out, *size, &v),
                Err(e) => out.error(errno(&e)),
            },
            Op::ListXattr { size } => match self.fs.list_xattr_ino(&creds(h), ino(i)) {
                Ok(names) => {
                    let mut list = Vec::new();
                    for n in names {
                        list.extend_from_slice(&n);
                        list.push(0);
                    }
                    reply_xattr(out, *size, &list);
                }
                Err(e) => out.error(errno(&e)),
            },
            Op::RemoveXattr { name } => {
                done(out, self.fs.remove_xattr_ino(&creds(h), ino(i), name));
            }
            _ => out.error(libc::ENOSYS),
        }
    }

    /// The kernel says an unprivileged caller writes or opens with O_TRUNC (`asked`):
    /// the vfs drops the set-id bits that caller's write drops, and the kernel, which
    /// caches the mode and made no change itself, is told to forget it.
    fn kill_setid(
        &self,
        h: &abi::InHeader,
        asked: bool,
        out: &mut Out<'_>,
    ) -> Result<(), VfsError> {
        if !asked {
            return Ok(());
        }
        match self.fs.drop_setid_as(&creds(h), ino(h.nodeid)) {
            Ok(true) => {
                out.inval_attrs(h.nodeid);
                Ok(())
            }
            Ok(false) => Ok(()),
            Err(e) if gone(&e) && self.nodes.kind(h.nodeid).is_some() => Ok(()),
            Err(e) => Err(e),
        }
    }

    pub(crate) fn setattr(&self, h: &abi::InHeader, a: &abi::SetattrIn, out: &mut Out<'_>) {
        let i = h.nodeid;
        let time = |set: u32, now: u32, secs: u64, nsec: u32| {
            if a.valid & now != 0 {
                Some(TimeChange::Now)
            } else if a.valid & set != 0 {
                Some(TimeChange::At(join_ns(secs, nsec)))
            } else {
                None
            }
        };
        let change = AttrChanges {
            perm: (a.valid & fattr::MODE != 0).then_some(a.mode),
            uid: (a.valid & fattr::UID != 0).then_some(a.uid),
            gid: (a.valid & fattr::GID != 0).then_some(a.gid),
            atime: time(fattr::ATIME, fattr::ATIME_NOW, a.atime, a.atimensec),
            mtime: time(fattr::MTIME, fattr::MTIME_NOW, a.mtime, a.mtimensec),
        };
        let r = (|| {
            if a.valid & fattr::SIZE != 0 {
                // The reply carries the new attributes: no invalidation needed.
                if a.valid & fattr::KILL_SUIDGID != 0 {
                    self.fs.drop_setid_as(&creds(h), ino(i))?;
                }
                self.fs.truncate(ino(i), a.size)?;
            }
            if change != AttrChanges::default() {
                self.fs.set_attr(&creds(h), ino(i), &change)?;
            }
            self.fs.stat_ino(ino(i))
        })();
        match (r, self.nodes.kind(i)) {
            (Err(e), Some(kind)) if gone(&e) => {
                // The kernel writing back times of a removed inode: they no longer
                // matter. The reply keeps the kernel's inode of its type.
                let attr = abi::Attr {
                    ino: i,
                    mode: kind | (a.mode & 0o7777),
                    size: a.size,
                    ..abi::Attr::default()
                };
                out.send(&self.attr_out(attr));
            }
            (r, _) => self.attr_reply(out, r),
        }
    }

    fn release(&self, i: u64, r: &abi::ReleaseIn, out: &mut Out<'_>) {
        let Some(file) = self.files.remove(r.fh) else {
            return out.error(libc::EBADF);
        };
        if r.release_flags & abi::RELEASE_FLOCK_UNLOCK != 0 {
            self.fs
                .flocks()
                .release(ino(i), LockOwner::Kernel(r.lock_owner));
        }
        for owner in file.owners() {
            self.fs
                .record_locks()
                .release(ino(i), LockOwner::Kernel(owner));
        }
        match file.take() {
            Some(open) => done(out, self.fs.close_ino(open)),
            None => out.error(libc::EBADF),
        }
    }

    /// Only SEEK_DATA and SEEK_HOLE reach here (the kernel does the others).
    fn lseek(&self, i: u64, l: &abi::LseekIn, out: &mut Out<'_>) {
        let r = match l.whence as i32 {
            libc::SEEK_DATA => self.fs.seek_data(ino(i), l.offset),
            libc::SEEK_HOLE => self.fs.seek_hole(ino(i), l.offset),
            _ => return out.error(libc::EINVAL),
        };
        match r {
            Ok(at) => out.send(&abi::LseekOut { offset: at }),
            Err(e) => out.error(errno(&e)),
        }
    }

    fn readdir(&self, h: &abi::InHeader, r: &abi::ReadIn, plus: bool, out: &mut Out<'_>) {
        let Some(cursor) = self.dirs.get(r.fh) else {
            return out.error(libc::EBADF);
        };
        let mut cursor = cursor.lock().expect("directory cursor lock");
        let listing = Listing {
            dir: h.nodeid,
            size: r.size as usize,
            plus,
        };
        match self.fill_dir(&creds(h), &listing, &mut cursor, r.offset, out) {
            Ok(()) => out.send_payload(),
            Err(e) => out.error(errno(&e)),
        }
    }

    /// Appends one entry if it fits; false if it does not. With `plus` it carries the
    /// entry's attributes (and counts a kernel lookup), except for `.` and `..` and an
    /// entry removed since it was listed, which go without (nodeid 0).
    fn push_entry(&self, l: &Listing, e: (u64, &[u8], u32), off: u64, out: &mut Out<'_>) -> bool {
        let (ino, name, typ) = e;
        if !l.plus {
            return out.buf().push_dirent(l.size, ino, off, typ, name);
        }
        if !out.buf().fits_direntplus(l.size, name) {
            return false;
        }
        let entry = match name {
            b"." | b".." => None,
            _ => self
                .fs
                .stat_ino(vfs_ino(ino))
                .ok()
                .map(|m| self.entry_out(&m)),
        };
        let entry = entry.unwrap_or_else(|| abi::EntryOut {
            attr: abi::Attr {
                ino,
                ..abi::Attr::default()
            },
            ..abi::EntryOut::default()
        });
        out.buf().push_direntplus(entry, off, typ, name);
        true
    }

    /// Fills the reply from `offset` of the listing `l`.
    fn fill_dir(
        &self,
        cx: &Creds,
        l: &Listing,
        cursor: &mut DirCursor,
        offset: u64,
        out: &mut Out<'_>,
    ) -> Result<(), VfsError> {
        let dt_dir = dirent_type(Kind::Dir);
        let mut after = match cursor.resume(offset) {
            Resume::End => return Ok(()),
            Resume::After(n) => Some(n),
            Resume::Start { dot, dotdot } => {
                if dot && !self.push_entry(l, (l.dir, b".", dt_dir), 1, out) {
                    return Ok(());
                }
                if dotdot {
                    let parent = self.fs.lookup_ino(cx, vfs_ino(l.dir), b"..")?;
                    if !self.push_entry(l, (parent.0, b"..", dt_dir), 2, out) {
                        return Ok(());
                    }
                }
                None
            }
        };
        // About as many entries as fit: a name of 8 bytes or more takes 32 bytes, 160
        // with attributes.
        let least = if l.plus { 160 } else { 32 };
        let batch = (l.size / least + 1).clamp(1, READDIR_BATCH);
        loop {
            let entries = self
                .fs
                .readdir(cx, vfs_ino(l.dir), after.as_deref(), batch)?;
            let Some(last) = entries.last() else {
                return Ok(());
            };
            let more = entries.len() == batch;
            after = Some(last.name.clone());
            for e in entries {
                let next = cursor.next_offset();
                if !self.push_entry(l, (e.ino, &e.name, dirent_type(e.kind)), next, out) {
                    // The kernel resumes after the last entry it got.
                    return Ok(());
                }
                cursor.push(e.name);
            }
            if !more {
                return Ok(());
            }
        }
    }
}

/// One READDIR or READDIRPLUS: of which directory, how many bytes, with attributes.
#[derive(Debug, Clone, Copy)]
struct Listing {
    dir: u64,
    size: usize,
    plus: bool,
}

/// getxattr/listxattr: the size alone for a zero-sized probe, ERANGE if it does not fit.
fn reply_xattr(out: &mut Out<'_>, size: u32, value: &[u8]) {
    let len = u32::try_from(value.len()).expect("attribute values are at most 64 KiB");
    if size == 0 {
        out.send(&abi::GetxattrOut {
            size: len,
            padding: 0,
        });
    } else if len > size {
        out.error(libc::ERANGE);
    } else {
        out.buf().push_bytes(value);
        out.send_payload();
    }
}
