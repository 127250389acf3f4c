//! Credentials and the POSIX permission rules (docs/SEMANTICS.md §4): who is asking, and
//! whether an inode's mode lets them read, write or search it.
//!
//! Invariants:
//! - Exactly one class applies: owner if the uid matches, else group if the inode's group
//!   is the caller's primary or a supplementary group, else other (POSIX: an owner denied
//!   by the owner bits is denied even if the other bits allow).
//! - Root (uid 0) may read and write anything, and search or execute anything that has
//!   at least one execute bit, or is a directory (Linux's CAP_DAC_OVERRIDE).
//! - Supplementary groups may come from a front end's reader ([`Creds::with_group_reader`]),
//!   called at most once per `Creds` and only when an answer depends on them: a check
//!   whose group and other bits agree on the access asked, and every check by root or
//!   the owner, needs none (the FUSE front end reads them from /proc, a file read).

use crate::error::VfsError;
use crate::records::{Inode, Kind};
use std::sync::OnceLock;

/// Read permission (as in `access(2)`'s `R_OK`).
pub const MAY_READ: u32 = 4;
/// Write permission (`W_OK`).
pub const MAY_WRITE: u32 = 2;
/// Execute, or search for a directory (`X_OK`).
pub const MAY_EXEC: u32 = 1;

/// The set-user-ID, set-group-ID and sticky bits.
pub const S_ISUID: u32 = 0o4000;
pub const S_ISGID: u32 = 0o2000;
pub const S_ISVTX: u32 = 0o1000;

/// Reads the supplementary groups of a caller, named by a front end's number (the
/// FUSE front end: the calling thread's id).
pub type GroupReader = fn(u32) -> Vec<u32>;

/// The supplementary groups of thread (or process) `tid` (its /proc status's `Groups:` line; none if
/// it is gone).
pub fn groups_of(tid: u32) -> Vec<u32> {
    use std::io::Read;
    let Ok(mut f) = std::fs::File::open(format!("/proc/{tid}/status")) else {
        return Vec::new();
    };
    // The status text is about 1.5 KiB; `Groups:` is in its first half.
    let mut buf = [0u8; 4096];
    let mut len = 0;
    while len < buf.len() {
        match f.read(&mut buf[len..]) {
            Ok(0) | Err(_) => break,
            Ok(n) => len += n,
        }
    }
    let text = String::from_utf8_lossy(&buf[..len]);
    text.lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|g| {
            g.split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Who is asking: effective user and group IDs and the supplementary groups.
#[derive(Debug, Clone)]
pub struct Creds {
    pub uid: u32,
    pub gid: u32,
    groups: OnceLock<Vec<u32>>,
    /// Fills `groups` on first need: the reader and its argument.
    reader: Option<(GroupReader, u32)>,
}

impl PartialEq for Creds {
    fn eq(&self, other: &Creds) -> bool {
        self.uid == other.uid && self.gid == other.gid && self.groups() == other.groups()
    }
}

impl Eq for Creds {}

impl Creds {
    /// The superuser.
    pub fn root() -> Creds {
        Creds::user(0, 0, Vec::new())
    }

    pub fn user(uid: u32, gid: u32, groups: Vec<u32>) -> Creds {
        Creds {
            uid,
            gid,
            groups: OnceLock::from(groups),
            reader: None,
        }
    }

    /// A caller whose supplementary groups `read(caller)` returns, read only if a
    /// decision needs them.
    pub fn with_group_reader(uid: u32, gid: u32, read: GroupReader, caller: u32) -> Creds {
        Creds {
            uid,
            gid,
            groups: OnceLock::new(),
            reader: Some((read, caller)),
        }
    }

    /// The supplementary groups (read now if they come from a reader).
    pub fn groups(&self) -> &[u32] {
        self.groups.get_or_init(|| match self.reader {
            Some((read, caller)) => read(caller),
            None => Vec::new(),
        })
    }

    /// Whether the supplementary groups were needed (and read) so far.
    pub fn groups_known(&self) -> bool {
        self.groups.get().is_some()
    }

    /// The calling process's effective IDs and supplementary groups.
    pub fn of_process() -> Creds {
        // SAFETY: geteuid and getegid cannot fail and touch no memory.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        // SAFETY: a zero-sized query returns the count and writes nothing.
        let count = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
        let mut groups = vec![0 as libc::gid_t; count.max(0) as usize];
        // SAFETY: `groups` has room for `count` entries; a changed count shows as -1.
        let got = unsafe { libc::getgroups(count.max(0), groups.as_mut_ptr()) };
        groups.truncate(got.max(0) as usize);
        Creds::user(uid, gid, groups)
    }

    pub fn is_root(&self) -> bool {
        self.uid == 0
    }

    /// Whether `gid` is the caller's primary or a supplementary group.
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups().contains(&gid)
    }

    /// Whether `inode`'s mode grants every access in `mask` (MAY_* bits).
    pub fn permits(&self, inode: &Inode, mask: u32) -> bool {
        debug_assert_eq!(mask & !7, 0, "mask {mask:o}");
        if self.is_root() {
            let exec_ok =
                mask & MAY_EXEC == 0 || inode.kind == Kind::Dir || inode.perm & 0o111 != 0;
            return exec_ok;
        }
        if self.uid == inode.uid {
            return (inode.perm >> 6) & mask == mask;
        }
        let group = (inode.perm >> 3) & mask == mask;
        let other = inode.perm & mask == mask;
        // Membership decides only where the two classes disagree.
        if group == other {
            return other;
        }
        if self.in_group(inode.gid) {
            group
        } else {
            other
        }
    }

    /// EACCES unless `inode`'s mode grants `mask`; `what` names it in the error.
    pub fn check(
        &self,
        inode: &Inode,
        mask: u32,
        what: impl FnOnce() -> String,
    ) -> Result<(), VfsError> {
        if self.permits(inode, mask) {
            Ok(())
        } else {
            Err(VfsError::Access(what()))
        }
    }

    /// Whether the caller owns `inode` (or is root): chmod, utimens with explicit
    /// times, and setting attributes need it.
    pub fn owns(&self, inode: &Inode) -> bool {
        self.is_root() || self.uid == inode.uid
    }

    /// Removing or renaming away `child` from directory `dir`: write and search on the
    /// directory, and in a sticky directory ownership of the child or the directory.
    pub fn may_delete(
        &self,
        dir: &Inode,
        child: &Inode,
        what: impl Fn() -> String,
    ) -> Result<(), VfsError> {
        self.check(dir, MAY_WRITE | MAY_EXEC, &what)?;
        if dir.perm & S_ISVTX != 0 && !self.owns(child) && !self.owns(dir) {
            return Err(VfsError::NotPermitted(format!(
                "{} (sticky directory, owned by someone else)",
                what()
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inode(kind: Kind, perm: u32, uid: u32, gid: u32) -> Inode {
        Inode {
            kind,
            perm,
            uid,
            gid,
            nlink: 1,
            parent: 0,
            size: 0,
            atime_ns: 0,
            mtime_ns: 0,
            ctime_ns: 0,
            btime_ns: 0,
            blocks: 0,
            rdev: 0,
        }
    }

    #[test]
    fn one_class_applies() {
        let f = inode(Kind::File, 0o047, 10, 20);
        let owner = Creds::user(10, 20, vec![]);
        let member = Creds::user(11, 99, vec![20]);
        let other = Creds::user(12, 99, vec![]);
        // The owner gets the owner bits (none), even though group and other allow more.
        assert!(!owner.permits(&f, MAY_READ));
        assert!(member.permits(&f, MAY_READ));
        assert!(!member.permits(&f, MAY_WRITE));
        assert!(other.permits(&f, MAY_READ | MAY_WRITE | MAY_EXEC));
    }

    #[test]
    fn groups_are_read_only_when_the_answer_depends_on_them() {
        fn read(caller: u32) -> Vec<u32> {
            assert_eq!(caller, 77);
            vec![20]
        }
        let cx = Creds::with_group_reader(11, 99, read, 77);
        // Group and other bits agree: no read.
        assert!(cx.permits(&inode(Kind::File, 0o644, 10, 20), MAY_READ));
        assert!(!cx.permits(&inode(Kind::File, 0o644, 10, 20), MAY_WRITE));
        // The owner, root, or the caller's primary group: no read.
        assert!(cx.permits(&inode(Kind::File, 0o600, 11, 20), MAY_WRITE));
        assert!(cx.permits(&inode(Kind::File, 0o060, 10, 99), MAY_WRITE));
        assert!(!cx.groups_known());
        // Group grants what other does not: the groups decide, read once.
        assert!(cx.permits(&inode(Kind::File, 0o060, 10, 20), MAY_WRITE));
        assert!(cx.groups_known());
        assert!(!cx.permits(&inode(Kind::File, 0o604, 10, 20), MAY_READ));
        assert_eq!(cx, Creds::user(11, 99, vec![20]));
    }

    #[test]
    fn root_needs_an_execute_bit_to_execute_a_file() {
        let root = Creds::root();
        assert!(root.permits(&inode(Kind::File, 0, 10, 10), MAY_READ | MAY_WRITE));
        assert!(!root.permits(&inode(Kind::File, 0o600, 10, 10), MAY_EXEC));
        assert!(root.permits(&inode(Kind::File, 0o610, 10, 10), MAY_EXEC));
        assert!(root.permits(&inode(Kind::Dir, 0, 10, 10), MAY_EXEC));
    }

    #[test]
    fn sticky_directories_keep_others_files() {
        let dir = inode(Kind::Dir, 0o1777, 0, 0);
        let mine = inode(Kind::File, 0o644, 10, 10);
        let alice = Creds::user(10, 10, vec![]);
        let bob = Creds::user(11, 11, vec![]);
        assert!(alice.may_delete(&dir, &mine, || "f".into()).is_ok());
        assert_eq!(
            bob.may_delete(&dir, &mine, || "f".into())
                .unwrap_err()
                .errno(),
            libc::EPERM
        );
        assert!(Creds::root().may_delete(&dir, &mine, || "f".into()).is_ok());
        let plain = inode(Kind::Dir, 0o777, 0, 0);
        assert!(bob.may_delete(&plain, &mine, || "f".into()).is_ok());
    }
}
