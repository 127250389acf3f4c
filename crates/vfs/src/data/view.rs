//! Zero-copy reads: a [`ReadView`] lends a reader the page cache's own blocks instead of
//! copying them into its buffer (docs/DESIGN.md §10.7, "Views").
//!
//! The lifetime rule: a view's bytes are the file's bytes at one moment during the call
//! that made it (each write whole or not at all, as a copying read), and they **never
//! change and stay valid until the view is dropped**, whatever happens to the file
//! meanwhile: writes, truncates, hole punches, unlink, eviction, unmount.
//!
//! Why that holds without any lock:
//! - Cached blocks are immutable ([`crate::slab::Block`]): a writer installs new blocks
//!   in place of the old ones and never changes a shared one (`Block::get_mut` refuses
//!   while another holder exists).
//! - A view holds a reference on each of its blocks: the slot is not reused (and its
//!   chunk never unmapped) until the last reference is dropped.
//!
//! Invariants:
//! - `skip < PAGE` (the first block holds the first byte) and the blocks hold exactly
//!   `skip + len` bytes rounded up to whole blocks, or none when `len` is 0.
//! - A view's blocks are outside the cache's byte budget once the cache drops them: a
//!   holder of many views holds their memory (as a process pinning pages would).

use crate::pagecache::{Block, PAGE};

/// Bytes of a file lent without a copy; see the module's lifetime rule.
#[derive(Debug)]
pub struct ReadView {
    bytes: Bytes,
    len: usize,
}

#[derive(Debug)]
enum Bytes {
    /// The cache's blocks; the view starts `skip` bytes into the first.
    Blocks { blocks: Vec<Block>, skip: usize },
    /// Bytes of its own (a view of a file this process reads through another's cache).
    Owned(Vec<u8>),
}

impl ReadView {
    pub(crate) fn empty() -> ReadView {
        ReadView::of_bytes(Vec::new())
    }

    /// `len` bytes from byte `skip` of `blocks` (consecutive blocks of a file).
    pub(crate) fn of_blocks(blocks: Vec<Block>, skip: usize, len: usize) -> ReadView {
        assert!(skip < PAGE, "the first block holds the first byte");
        assert_eq!(blocks.len(), (skip + len).div_ceil(PAGE), "whole blocks");
        ReadView {
            bytes: Bytes::Blocks { blocks, skip },
            len,
        }
    }

    /// A view of bytes read elsewhere (a front end with no cache of its own in this
    /// process, which must still offer the interface; it copied once to get them).
    pub fn of_bytes(bytes: Vec<u8>) -> ReadView {
        ReadView {
            len: bytes.len(),
            bytes: Bytes::Owned(bytes),
        }
    }

    /// Bytes in the view.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes in order, as slices of at most one block each (the first and the last
    /// trimmed to the view), or one slice for owned bytes.
    pub fn slices(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let (blocks, skip, owned): (&[Block], usize, Option<&[u8]>) = match &self.bytes {
            Bytes::Blocks { blocks, skip } => (blocks, *skip, None),
            Bytes::Owned(v) => (&[], 0, Some(v.as_slice())),
        };
        let len = self.len;
        let lent = blocks.iter().enumerate().map(move |(i, b)| {
            let lo = if i == 0 { skip } else { 0 };
            let hi = (skip + len - i * PAGE).min(PAGE);
            &b[lo..hi]
        });
        owned.into_iter().filter(|s| !s.is_empty()).chain(lent)
    }

    /// Copies the view into the start of `buf`; returns the bytes copied (the shorter
    /// of the two).
    pub fn copy_to(&self, buf: &mut [u8]) -> usize {
        let mut done = 0;
        for s in self.slices() {
            let n = s.len().min(buf.len() - done);
            buf[done..done + n].copy_from_slice(&s[..n]);
            done += n;
            if done == buf.len() {
                break;
            }
        }
        done
    }

    /// The bytes as one vector (a copy).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0; self.len];
        let n = self.copy_to(&mut v);
        assert_eq!(n, self.len);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(fill: u8) -> Block {
        Block::from(&[fill; PAGE][..])
    }

    #[test]
    fn slices_trim_the_first_and_last_block() {
        let v = ReadView::of_blocks(vec![block(1), block(2), block(3)], 100, 2 * PAGE);
        let lens: Vec<usize> = v.slices().map(<[u8]>::len).collect();
        assert_eq!(lens, vec![PAGE - 100, PAGE, 100]);
        let all = v.to_vec();
        assert_eq!(all.len(), 2 * PAGE);
        assert_eq!(all[PAGE - 101], 1);
        assert_eq!(all[PAGE - 100], 2);
        assert_eq!(all[2 * PAGE - 101], 2);
        assert_eq!(all[2 * PAGE - 100], 3);
        let mut short = [0u8; 10];
        assert_eq!(v.copy_to(&mut short), 10);
        assert!(ReadView::empty().slices().next().is_none());
        assert_eq!(ReadView::of_bytes(vec![7; 5]).to_vec(), vec![7; 5]);
    }

    #[test]
    #[should_panic(expected = "whole blocks")]
    fn a_view_holds_exactly_its_blocks() {
        let _ = ReadView::of_blocks(vec![block(1), block(2)], 0, PAGE);
    }
}
