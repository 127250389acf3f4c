//! O_TMPFILE: a regular file created open and without a name in a directory, over the
//! orphan mechanism of `fs` (an inode with no links kept by an `o` record). Its last
//! close frees it, a mount after a crash frees it, and `link` (linkat of the open file)
//! gives it a name, dropping the orphan record in the same batch.
//!
//! Invariants:
//! - The inode record and its orphan record are written in one batch of the file's own
//!   lane, so no crash keeps a nameless inode without the record that frees it.
//! - The returned handle counts as open before anyone else can reach the inode.

use crate::creds::{Creds, MAY_EXEC, MAY_WRITE};
use crate::error::VfsError;
use crate::fs::FileSystem;
use crate::handle::live;
use crate::inode_api::OpenInode;
use crate::namespace::new_inode;
use crate::records::{self, Kind};
use engine::log::Durability;
use format::InodeNo;
use metadb::WriteBatch;

impl FileSystem {
    /// `open(dir, O_TMPFILE)`: a new nameless regular file that `cx` may write, made as
    /// if created in directory `dir` (owner, group, set-group-ID rules), open. Needs
    /// write and search permission on `dir`.
    pub fn create_tmpfile(
        &self,
        cx: &Creds,
        dir: InodeNo,
        perm: u32,
    ) -> Result<OpenInode, VfsError> {
        let dh = self.handle(dir)?;
        let dst = dh.read();
        let dinode = *live(&dst, dir)?;
        if dinode.kind != Kind::Dir {
            return Err(VfsError::NotDir(format!("inode {dir}")));
        }
        cx.check(&dinode, MAY_WRITE | MAY_EXEC, || format!("directory {dir}"))?;
        let ino = self.allocate_ino()?;
        let mut inode = new_inode(cx, &dinode, dir, Kind::File, perm, self.now());
        inode.nlink = 0;
        let mut batch = WriteBatch::new();
        batch.put(records::inode_key(ino).to_vec(), inode.encode().to_vec());
        batch.put(records::orphan_key(ino).to_vec(), Vec::new());
        self.core
            .engine
            .put_metadata(ino, &batch, Durability::Buffered)?;
        self.core.count_inodes(1);
        drop(dst);
        let open = self.open_ino(ino)?;
        assert_eq!(self.attrs_ino(ino)?.nlink, 0, "a fresh tmpfile has no name");
        Ok(open)
    }
}
