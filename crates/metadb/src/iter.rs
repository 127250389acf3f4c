//! Internal iterators over versioned entries, and the merging iterator that combines the
//! memtables and tables into one sorted stream.
//!
//! Invariants:
//! - An internal iterator yields entries in internal-key order (user key ascending,
//!   sequence number descending); all versions are yielded, tombstones included.
//! - Errors (IO, corruption) are returned from `seek`/`next`, never hidden.

use crate::error::MetaDbError;
use crate::types::{compare_internal, InternalKey, Seq, ValueKind};
use std::cmp::Ordering;

/// A cursor over versioned entries in internal-key order.
pub trait InternalIterator {
    /// Positions at the first entry `>= target` (in internal-key order).
    fn seek(&mut self, target: &InternalKey) -> Result<(), MetaDbError>;
    fn seek_to_first(&mut self) -> Result<(), MetaDbError>;
    fn valid(&self) -> bool;
    /// The current entry's user key. Requires `valid()`.
    fn user_key(&self) -> &[u8];
    fn seq(&self) -> Seq;
    fn kind(&self) -> ValueKind;
    fn value(&self) -> &[u8];
    fn next(&mut self) -> Result<(), MetaDbError>;
}

/// The union of several internal iterators, in internal-key order: the memtables' and
/// tables' cursors merged for lookups, scans and compaction.
///
/// A binary min-heap of the valid children, ordered by (current internal key, child
/// index). Every version from every child is yielded; when two children hold the very
/// same internal key, the child listed first comes first (list newer sources first).
pub struct MergingIterator {
    children: Vec<Box<dyn InternalIterator + Send>>,
    /// Indices of valid children; `heap[0]` holds the smallest current entry.
    heap: Vec<usize>,
}

impl std::fmt::Debug for MergingIterator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MergingIterator")
            .field("children", &self.children.len())
            .field("heap", &self.heap)
            .finish()
    }
}

impl MergingIterator {
    /// A merge of `children`; invalid until positioned with `seek` or `seek_to_first`.
    pub fn new(children: Vec<Box<dyn InternalIterator + Send>>) -> MergingIterator {
        let heap = Vec::with_capacity(children.len());
        MergingIterator { children, heap }
    }

    pub fn child_count(&self) -> usize {
        self.children.len()
    }

    /// Whether child `a`'s entry comes before child `b`'s.
    fn before(&self, a: usize, b: usize) -> bool {
        let (x, y) = (&self.children[a], &self.children[b]);
        let order = compare_internal(
            x.user_key(),
            x.seq(),
            x.kind(),
            y.user_key(),
            y.seq(),
            y.kind(),
        );
        order.then(a.cmp(&b)) == Ordering::Less
    }

    fn sift_down(&mut self, mut i: usize) {
        let n = self.heap.len();
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut smallest = i;
            if l < n && self.before(self.heap[l], self.heap[smallest]) {
                smallest = l;
            }
            if r < n && self.before(self.heap[r], self.heap[smallest]) {
                smallest = r;
            }
            if smallest == i {
                return;
            }
            self.heap.swap(i, smallest);
            i = smallest;
        }
    }

    /// Rebuilds the heap from every valid child.
    fn rebuild(&mut self) {
        self.heap.clear();
        self.heap
            .extend((0..self.children.len()).filter(|&i| self.children[i].valid()));
        for i in (0..self.heap.len() / 2).rev() {
            self.sift_down(i);
        }
        debug_assert!(self.heap_ordered());
    }

    fn heap_ordered(&self) -> bool {
        (1..self.heap.len()).all(|i| !self.before(self.heap[i], self.heap[(i - 1) / 2]))
    }

    /// Positions every child with `f`, then rebuilds; after an error the merge is invalid.
    fn position_all(
        &mut self,
        mut f: impl FnMut(&mut (dyn InternalIterator + Send)) -> Result<(), MetaDbError>,
    ) -> Result<(), MetaDbError> {
        self.heap.clear();
        for child in &mut self.children {
            f(child.as_mut())?;
        }
        self.rebuild();
        Ok(())
    }

    fn top(&self) -> &(dyn InternalIterator + Send) {
        let i = *self.heap.first().expect("merging iterator is valid");
        self.children[i].as_ref()
    }
}

impl InternalIterator for MergingIterator {
    fn seek(&mut self, target: &InternalKey) -> Result<(), MetaDbError> {
        self.position_all(|c| c.seek(target))
    }

    fn seek_to_first(&mut self) -> Result<(), MetaDbError> {
        self.position_all(|c| c.seek_to_first())
    }

    fn valid(&self) -> bool {
        !self.heap.is_empty()
    }

    fn user_key(&self) -> &[u8] {
        self.top().user_key()
    }

    fn seq(&self) -> Seq {
        self.top().seq()
    }

    fn kind(&self) -> ValueKind {
        self.top().kind()
    }

    fn value(&self) -> &[u8] {
        self.top().value()
    }

    fn next(&mut self) -> Result<(), MetaDbError> {
        let top = *self
            .heap
            .first()
            .expect("next on an invalid merging iterator");
        if let Err(e) = self.children[top].next() {
            self.heap.clear();
            return Err(e);
        }
        if !self.children[top].valid() {
            self.heap.swap_remove(0);
        }
        if !self.heap.is_empty() {
            self.sift_down(0);
        }
        debug_assert!(self.heap_ordered());
        Ok(())
    }
}

/// An internal iterator over entries held in memory (tests, small merges).
#[derive(Debug, Clone)]
pub struct VecIterator {
    entries: Vec<(InternalKey, Vec<u8>)>,
    pos: usize,
}

impl VecIterator {
    /// Sorts `entries` into internal-key order; duplicate internal keys are a bug.
    pub fn new(mut entries: Vec<(InternalKey, Vec<u8>)>) -> VecIterator {
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        assert!(
            entries.windows(2).all(|w| w[0].0 != w[1].0),
            "duplicate internal key"
        );
        let pos = entries.len();
        VecIterator { entries, pos }
    }

    fn current(&self) -> &(InternalKey, Vec<u8>) {
        self.entries.get(self.pos).expect("vec iterator is valid")
    }
}

impl InternalIterator for VecIterator {
    fn seek(&mut self, target: &InternalKey) -> Result<(), MetaDbError> {
        self.pos = self.entries.partition_point(|e| e.0 < *target);
        Ok(())
    }

    fn seek_to_first(&mut self) -> Result<(), MetaDbError> {
        self.pos = 0;
        Ok(())
    }

    fn valid(&self) -> bool {
        self.pos < self.entries.len()
    }

    fn user_key(&self) -> &[u8] {
        &self.current().0.user_key
    }

    fn seq(&self) -> Seq {
        self.current().0.seq
    }

    fn kind(&self) -> ValueKind {
        self.current().0.kind
    }

    fn value(&self) -> &[u8] {
        &self.current().1
    }

    fn next(&mut self) -> Result<(), MetaDbError> {
        assert!(self.valid(), "next on an invalid vec iterator");
        self.pos += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str, seq: Seq) -> InternalKey {
        InternalKey::new(k.as_bytes().to_vec(), seq, ValueKind::Put)
    }

    fn collect(it: &mut dyn InternalIterator) -> Vec<(Vec<u8>, Seq, Vec<u8>)> {
        let mut out = Vec::new();
        while it.valid() {
            out.push((it.user_key().to_vec(), it.seq(), it.value().to_vec()));
            it.next().unwrap();
        }
        out
    }

    #[test]
    fn merges_versions_of_the_same_key_from_every_child() {
        let a = VecIterator::new(vec![
            (key("a", 3), b"a3".to_vec()),
            (key("c", 1), b"c1".to_vec()),
        ]);
        let b = VecIterator::new(vec![
            (key("a", 5), b"a5".to_vec()),
            (key("a", 1), b"a1".to_vec()),
        ]);
        let c = VecIterator::new(vec![]);
        let d = VecIterator::new(vec![
            (key("b", 9), b"b9".to_vec()),
            (key("c", 2), b"c2".to_vec()),
        ]);
        let mut m = MergingIterator::new(vec![Box::new(a), Box::new(b), Box::new(c), Box::new(d)]);
        assert!(!m.valid(), "invalid until positioned");
        m.seek_to_first().unwrap();
        let got: Vec<(String, Seq)> = collect(&mut m)
            .into_iter()
            .map(|(k, s, _)| (String::from_utf8(k).unwrap(), s))
            .collect();
        let want = [("a", 5), ("a", 3), ("a", 1), ("b", 9), ("c", 2), ("c", 1)];
        assert_eq!(got, want.map(|(k, s)| (k.to_string(), s)));
        m.seek(&InternalKey::seek_key(b"a", 4)).unwrap();
        assert_eq!((m.user_key(), m.seq()), (&b"a"[..], 3));
        m.seek(&InternalKey::seek_key(b"bb", 100)).unwrap();
        assert_eq!(
            (m.user_key(), m.seq(), m.value()),
            (&b"c"[..], 2, &b"c2"[..])
        );
        m.seek(&InternalKey::seek_key(b"d", 100)).unwrap();
        assert!(!m.valid());
    }

    #[test]
    fn identical_internal_keys_come_in_child_order() {
        let a = VecIterator::new(vec![(key("k", 1), b"first".to_vec())]);
        let b = VecIterator::new(vec![(key("k", 1), b"second".to_vec())]);
        let mut m = MergingIterator::new(vec![Box::new(b), Box::new(a)]);
        m.seek_to_first().unwrap();
        let values: Vec<Vec<u8>> = collect(&mut m).into_iter().map(|e| e.2).collect();
        assert_eq!(values, vec![b"second".to_vec(), b"first".to_vec()]);
    }

    struct Failing;

    impl InternalIterator for Failing {
        fn seek(&mut self, _: &InternalKey) -> Result<(), MetaDbError> {
            Err(MetaDbError::corruption("test child", "always fails"))
        }
        fn seek_to_first(&mut self) -> Result<(), MetaDbError> {
            Err(MetaDbError::corruption("test child", "always fails"))
        }
        fn valid(&self) -> bool {
            false
        }
        fn user_key(&self) -> &[u8] {
            unreachable!()
        }
        fn seq(&self) -> Seq {
            unreachable!()
        }
        fn kind(&self) -> ValueKind {
            unreachable!()
        }
        fn value(&self) -> &[u8] {
            unreachable!()
        }
        fn next(&mut self) -> Result<(), MetaDbError> {
            unreachable!()
        }
    }

    #[test]
    fn a_failing_child_fails_the_merge() {
        let a = VecIterator::new(vec![(key("a", 1), vec![])]);
        let mut m = MergingIterator::new(vec![Box::new(a), Box::new(Failing)]);
        assert!(matches!(
            m.seek_to_first(),
            Err(MetaDbError::Corruption { .. })
        ));
        assert!(!m.valid());
    }

    #[test]
    fn random_merges_equal_the_sorted_union() {
        let mut rng = platform::Rng::from_seed(5);
        for round in 0..50 {
            let children = 1 + rng.below(6) as usize;
            let mut all = Vec::new();
            let mut parts: Vec<Vec<(InternalKey, Vec<u8>)>> = vec![Vec::new(); children];
            let mut seq = 1;
            for _ in 0..rng.below(200) {
                let k = InternalKey::new(
                    format!("{:03}", rng.below(40)).into_bytes(),
                    seq,
                    ValueKind::Put,
                );
                seq += 1;
                let v = seq.to_le_bytes().to_vec();
                all.push((k.clone(), v.clone()));
                parts[rng.below(children as u64) as usize].push((k, v));
            }
            all.sort_by(|a, b| a.0.cmp(&b.0));
            let boxed = parts
                .into_iter()
                .map(|p| Box::new(VecIterator::new(p)) as Box<dyn InternalIterator + Send>);
            let mut m = MergingIterator::new(boxed.collect());
            m.seek_to_first().unwrap();
            let got = collect(&mut m);
            let want: Vec<_> = all
                .iter()
                .map(|(k, v)| (k.user_key.clone(), k.seq, v.clone()))
                .collect();
            assert_eq!(got, want, "round {round}");
            for _ in 0..10 {
                let target = InternalKey::seek_key(
                    format!("{:03}", rng.below(45)).as_bytes(),
                    rng.below(seq + 1),
                );
                m.seek(&target).unwrap();
                let from = all.partition_point(|e| e.0 < target);
                assert_eq!(
                    collect(&mut m),
                    want[from..].to_vec(),
                    "round {round} seek {target:?}"
                );
            }
        }
    }
}
