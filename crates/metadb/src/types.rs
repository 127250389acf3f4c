//! Keys, sequence numbers, durability and receipts.
//!
//! Invariants:
//! - Internal keys order by user key ascending, then sequence number descending, so the
//!   newest version of a key comes first.
//! - A batch of n operations takes n consecutive sequence numbers.

use std::cmp::Ordering;

/// Sequence number of one operation. 0 is never assigned (it means "before everything").
pub type Seq = u64;

/// What an entry does to its key. Stored on disk: values are forever.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum ValueKind {
    Delete = 0,
    Put = 1,
}

impl ValueKind {
    pub fn from_u8(v: u8) -> Option<ValueKind> {
        match v {
            0 => Some(ValueKind::Delete),
            1 => Some(ValueKind::Put),
            _ => None,
        }
    }
}

/// A versioned key: user key, sequence number and kind.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct InternalKey {
    pub user_key: Vec<u8>,
    pub seq: Seq,
    pub kind: ValueKind,
}

impl InternalKey {
    pub fn new(user_key: impl Into<Vec<u8>>, seq: Seq, kind: ValueKind) -> InternalKey {
        InternalKey {
            user_key: user_key.into(),
            seq,
            kind,
        }
    }

    /// The smallest internal key for `user_key` visible at `snapshot` (seeks start here).
    pub fn seek_key(user_key: &[u8], snapshot: Seq) -> InternalKey {
        InternalKey {
            user_key: user_key.to_vec(),
            seq: snapshot,
            kind: ValueKind::Put,
        }
    }
}

/// Orders (user key asc, seq desc, kind desc).
pub fn compare_internal(
    a_key: &[u8],
    a_seq: Seq,
    a_kind: ValueKind,
    b_key: &[u8],
    b_seq: Seq,
    b_kind: ValueKind,
) -> Ordering {
    a_key
        .cmp(b_key)
        .then(b_seq.cmp(&a_seq))
        .then((b_kind as u8).cmp(&(a_kind as u8)))
}

impl Ord for InternalKey {
    fn cmp(&self, other: &Self) -> Ordering {
        compare_internal(
            &self.user_key,
            self.seq,
            self.kind,
            &other.user_key,
            other.seq,
            other.kind,
        )
    }
}

impl PartialOrd for InternalKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// How durable a write must be when the call returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Durable (WAL persisted) before the call returns.
    Sync,
    /// Logged but not necessarily persisted; `MetaDb::persist(receipt)` makes it durable
    /// later, as does any later sync write of the same lane, a memtable switch, or
    /// `MetaDb::sync`.
    Buffered,
}

/// What the hook of `MetaDb::persist_covering` reports about its caller's own device
/// writes (those the records being persisted refer to).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallerWrites {
    /// Some completed without a device flush since: the call's flush must cover them.
    Unflushed,
    /// All are durable already (or there are none): the call needs a device flush only
    /// for its own WAL writes, and none at all if its records are durable already (in
    /// PMR mode, once their lines are persisted).
    Durable,
}

/// Where a write's WAL record lives: enough to persist exactly it (and the earlier
/// records of its lane, which it may depend on) and nothing else. Within one lane, later
/// records compare greater.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WalPos {
    pub lane: u16,
    /// Generation (memtable) the record belongs to.
    pub generation: u64,
    /// The record's number within (generation, lane), from 0.
    pub lane_seq: u64,
}

/// Returned by every write. Pass it to `MetaDb::persist` to make the write durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Receipt {
    /// Sequence number of the batch's first operation.
    pub seq: Seq,
    pub pos: WalPos,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_version_sorts_first() {
        let a1 = InternalKey::new(b"a".to_vec(), 1, ValueKind::Put);
        let a5 = InternalKey::new(b"a".to_vec(), 5, ValueKind::Delete);
        let ab = InternalKey::new(b"ab".to_vec(), 9, ValueKind::Put);
        let mut v = vec![ab.clone(), a1.clone(), a5.clone()];
        v.sort();
        assert_eq!(v, vec![a5, a1, ab]);
        assert!(
            InternalKey::seek_key(b"a", 3) < InternalKey::new(b"a".to_vec(), 1, ValueKind::Put)
        );
        assert!(
            InternalKey::seek_key(b"a", 3) > InternalKey::new(b"a".to_vec(), 5, ValueKind::Put)
        );
    }
}
