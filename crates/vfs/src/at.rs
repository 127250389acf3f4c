//! Calls for front ends that keep per-process state (the POSIX descriptor layer of
//! `crates/posix`, used by the interposer and the C ABI): path resolution that starts at
//! a directory inode (the `*at` calls and a working directory), and an append that takes
//! the end of the file and writes there under one inode lock.
//!
//! Invariants:
//! - Resolution follows the rules of `path` (search permission on every directory
//!   passed, at most `SYMLINK_MAX` links); an absolute path starts at the root whatever
//!   the start.
//! - `append_ino` is atomic against every other write of the inode (O_APPEND).

use crate::creds::Creds;
use crate::error::VfsError;
use crate::fs::FileSystem;
use format::InodeNo;

impl FileSystem {
    /// The inode `path` names, relative to directory `start` (absolute paths start at
    /// the root); the last component's symlink is followed if `follow`.
    pub fn resolve_at(
        &self,
        cx: &Creds,
        start: InodeNo,
        path: &[u8],
        follow: bool,
    ) -> Result<InodeNo, VfsError> {
        let mut links = 0;
        self.walk(cx, start, path, follow, &mut links)
    }

    /// The directory holding `path`'s last component (relative to `start`) and that
    /// component; EINVAL when the path names no entry (empty, `.`, `..`).
    pub fn resolve_parent_at<'p>(
        &self,
        cx: &Creds,
        start: InodeNo,
        path: &'p [u8],
    ) -> Result<(InodeNo, &'p [u8]), VfsError> {
        // Every trailing slash goes ("d//" names d, as Linux resolves it; Gluster's
        // index directories are made by such paths).
        let mut trimmed = path;
        while let Some(t) = trimmed.strip_suffix(b"/") {
            trimmed = t;
        }
        let (dir, name) = match trimmed.iter().rposition(|&b| b == b'/') {
            Some(0) => (&b"/"[..], &trimmed[1..]),
            Some(i) => (&trimmed[..i], &trimmed[i + 1..]),
            None => (&b""[..], trimmed),
        };
        if name.is_empty() || name == b"." || name == b".." {
            return Err(VfsError::Invalid(format!(
                "{:?} names no entry",
                String::from_utf8_lossy(path)
            )));
        }
        let mut links = 0;
        let parent = self.walk(cx, start, dir, true, &mut links)?;
        Ok((parent, name))
    }

    /// [`FileSystem::resolve_parent_at`] for a call that creates the last component
    /// (mkdir, mknod, symlink, O_CREAT, a link's new name): a path whose last component
    /// is no name (the root, `.`, `..`) but which resolves names a directory that exists,
    /// EEXIST as Linux has it (a mkdir of each prefix of a path, as Gluster's bricks do,
    /// meets the mount's root).
    pub fn create_parent_at<'p>(
        &self,
        cx: &Creds,
        start: InodeNo,
        path: &'p [u8],
    ) -> Result<(InodeNo, &'p [u8]), VfsError> {
        match self.resolve_parent_at(cx, start, path) {
            Err(VfsError::Invalid(why)) => {
                self.resolve_at(cx, start, path, true)?;
                Err(VfsError::Exists(why))
            }
            r => r,
        }
    }

    /// Writes `data` at the end of file `ino` (O_APPEND): returns where it was written
    /// and how many bytes.
    pub fn append_ino(&self, ino: InodeNo, data: &[u8]) -> Result<(u64, usize), VfsError> {
        let h = self.handle(ino)?;
        self.write_data(&h, crate::data::At::End, data)
    }
}
