//! The kernel's references to inodes: per node id, how many lookups the kernel counts
//! (every reply carrying an entry adds one; FORGET and BATCH_FORGET subtract) and the
//! inode's type. With `writeback_cache` the kernel may write times or pages of an inode
//! after its last name is gone (a syncfs after `rm`); the adapter answers such requests
//! for a node it knows the kernel still holds as for a file that no longer exists
//! (nothing to keep), instead of failing them with ENOENT.
//!
//! Invariants:
//! - A node is listed exactly while its count is above zero; the root is never listed
//!   (the kernel never forgets it).
//! - vfs inode numbers are never reused, so a listed node that the vfs no longer finds
//!   is the inode the kernel means, removed.

use std::collections::HashMap;
use std::sync::Mutex;

const SHARDS: usize = 16;

#[derive(Debug, Clone, Copy)]
struct Node {
    lookups: u64,
    /// `S_IFMT` bits.
    kind: u32,
}

#[derive(Debug)]
pub struct Nodes {
    shards: [Mutex<HashMap<u64, Node>>; SHARDS],
}

impl Default for Nodes {
    fn default() -> Self {
        Nodes {
            shards: std::array::from_fn(|_| Mutex::new(HashMap::new())),
        }
    }
}

impl Nodes {
    fn shard(&self, ino: u64) -> std::sync::MutexGuard<'_, HashMap<u64, Node>> {
        // Inode numbers are handed out in sequence: the low bits spread them.
        self.shards[(ino as usize) % SHARDS]
            .lock()
            .expect("node shard lock")
    }

    /// The kernel got an entry for `ino` (of type `kind`, `S_IFMT` bits).
    pub fn looked_up(&self, ino: u64, kind: u32) {
        if ino == crate::proto::abi::ROOT_ID {
            return;
        }
        let mut s = self.shard(ino);
        let n = s.entry(ino).or_insert(Node { lookups: 0, kind });
        n.lookups += 1;
        n.kind = kind;
    }

    /// The kernel dropped `count` references to `ino`.
    pub fn forget(&self, ino: u64, count: u64) {
        let mut s = self.shard(ino);
        let Some(n) = s.get_mut(&ino) else {
            return; // The root, or a node of a reply the kernel did not take.
        };
        n.lookups = n.lookups.saturating_sub(count);
        if n.lookups == 0 {
            s.remove(&ino);
        }
    }

    /// The type of `ino` if the kernel holds it.
    pub fn kind(&self, ino: u64) -> Option<u32> {
        self.shard(ino).get(&ino).map(|n| n.kind)
    }

    /// The lookups the kernel counts of `ino` (0: it holds none).
    pub fn lookups(&self, ino: u64) -> u64 {
        self.shard(ino).get(&ino).map_or(0, |n| n.lookups)
    }

    /// Nodes the kernel holds (diagnostics and tests).
    pub fn count(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().expect("node shard lock").len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_are_listed_while_the_kernel_counts_them() {
        let n = Nodes::default();
        n.looked_up(1, libc::S_IFDIR);
        n.looked_up(5, libc::S_IFREG);
        n.looked_up(5, libc::S_IFREG);
        assert_eq!(n.count(), 1);
        n.forget(5, 1);
        assert_eq!(n.kind(5), Some(libc::S_IFREG));
        n.forget(5, 1);
        assert_eq!(n.kind(5), None);
        n.forget(77, 3);
        assert_eq!(n.count(), 0);
    }
}
