//! Set-user-ID and set-group-ID bits dropped by a write or truncate, as Linux drops them
//! (`setattr_should_drop_suidgid`, `file_remove_privs`): a privileged writer (root here,
//! CAP_FSETID on Linux) keeps them; anyone else removes
//! - S_ISUID;
//! - S_ISGID when the file is group-executable (without group execute it marks
//!   mandatory locking, and stays unless the writer is outside the file's group).
//!
//! Through FUSE the kernel either flags the write (HANDLE_KILLPRIV_V2: the adapter calls
//! [`FileSystem::drop_setid_as`] with the writer's identity) or, on older kernels, sends a
//! SETATTR of the mode in the writer's name; `FileSystem::set_attr` therefore lets a
//! writer who is not the owner make exactly that change. The interposer, the C ABI and
//! the Rust API write through the vfs, which drops the bits itself (`drop_setid`).
//!
//! Invariants:
//! - Only regular files lose bits; directories keep S_ISGID (it is inherited, not a
//!   privilege).
//! - The fast path (no set-id bit on the file) costs a bit test.

use crate::creds::{Creds, MAY_WRITE, S_ISGID, S_ISUID};
use crate::error::VfsError;
use crate::fs::FileSystem;
use crate::handle::{live, Handle};
use crate::records::{Inode, Kind};
use std::sync::Arc;

/// The set-id bits, for the fast path's test.
pub(crate) const SETID_BITS: u32 = S_ISUID | S_ISGID;

/// The bits a write or truncate by `cx` removes from `inode`.
pub(crate) fn bits_to_drop(cx: &Creds, inode: &Inode) -> u32 {
    if inode.kind != Kind::File || cx.is_root() || inode.perm & SETID_BITS == 0 {
        return 0;
    }
    let mut drop = inode.perm & S_ISUID;
    if inode.perm & S_ISGID != 0 && (inode.perm & 0o010 != 0 || !cx.in_group(inode.gid)) {
        drop |= S_ISGID;
    }
    drop
}

/// Whether `cx`, who does not own `inode`, may change its permission bits to `perm`:
/// only by removing set-id bits, and only if `cx` may write the file (what a write of
/// theirs would do anyway; the kernel asks exactly this of a FUSE file system).
pub(crate) fn may_drop_only(cx: &Creds, inode: &Inode, perm: u32) -> bool {
    let perm = perm & 0o7777;
    let removed = inode.perm & !perm;
    let added = perm & !inode.perm;
    added == 0
        && removed != 0
        && removed & !SETID_BITS == 0
        && cx.check(inode, MAY_WRITE, String::new).is_ok()
}

impl FileSystem {
    /// Before a write, truncate or truncating open of `ino` by `cx` (a front end that
    /// learns who writes, e.g. FUSE with HANDLE_KILLPRIV_V2): removes the set-id bits
    /// that caller's write removes. True if bits were removed.
    pub fn drop_setid_as(&self, cx: &Creds, ino: format::InodeNo) -> Result<bool, VfsError> {
        let h = self.handle(ino)?;
        self.drop_setid_for(&h, cx)
    }

    /// Before a write or truncate of `h` by the path API's identity: removes the
    /// set-id bits it must (only when a bit is there to drop; a record logged at once, or
    /// with the write-back of the file's dirty pages: `FileSystem::put_attrs`).
    pub(crate) fn drop_setid(&self, h: &Arc<Handle>) -> Result<(), VfsError> {
        self.drop_setid_for(h, &self.creds()).map(|_| ())
    }

    fn drop_setid_for(&self, h: &Arc<Handle>, cx: &Creds) -> Result<bool, VfsError> {
        let mut st = h.write();
        if bits_to_drop(cx, live(&st, h.ino)?) == 0 {
            return Ok(false);
        }
        let mut inode = *live(&st, h.ino)?;
        inode.perm &= !bits_to_drop(cx, &inode);
        inode.ctime_ns = self.now();
        // With dirty pages, the record rides with their write-back (`put_attrs`): the
        // bits are never kept beside data written after they were dropped.
        self.put_attrs(h, &mut st, inode)?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use format::InodeNo;

    fn file(perm: u32, gid: u32) -> Inode {
        Inode::new(Kind::File, perm, 1000, gid, InodeNo(5), 0)
    }

    fn user(uid: u32, gid: u32) -> Creds {
        Creds::user(uid, gid, vec![])
    }

    #[test]
    fn which_bits_a_writer_drops() {
        let other = user(2000, 2000);
        let member = user(2000, 50);
        let root = user(0, 0);
        // (perm, gid, writer, dropped)
        let cases = [
            (0o4777, 50, &other, S_ISUID),
            (0o2777, 50, &other, S_ISGID),
            (0o6777, 50, &other, S_ISUID | S_ISGID),
            (0o6777, 50, &root, 0),
            (0o0777, 50, &other, 0),
            // S_ISGID without group execute: kept for a member of the group.
            (0o2767, 50, &member, 0),
            (0o2767, 50, &other, S_ISGID),
            (0o4767, 50, &member, S_ISUID),
        ];
        for (perm, gid, cx, want) in cases {
            assert_eq!(
                bits_to_drop(cx, &file(perm, gid)),
                want,
                "{perm:o} gid {gid}"
            );
        }
        let mut dir = file(0o2777, 50);
        dir.kind = Kind::Dir;
        assert_eq!(bits_to_drop(&other, &dir), 0, "directories keep S_ISGID");
    }

    #[test]
    fn a_writer_may_only_drop_set_id_bits() {
        let other = user(2000, 2000);
        let f = file(0o6777, 50);
        assert!(may_drop_only(&other, &f, 0o0777));
        assert!(may_drop_only(&other, &f, 0o2777));
        assert!(!may_drop_only(&other, &f, 0o6777), "no change");
        assert!(!may_drop_only(&other, &f, 0o0755), "other bits");
        assert!(
            !may_drop_only(&other, &file(0o4755, 50), 0o0755),
            "no write permission"
        );
    }
}
