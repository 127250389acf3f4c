//! Write batches and their encoding: the payload of a WAL record (docs/FORMAT.md §5.1).
//!
//! ```text
//! first_seq u64 | count u32 | [ requires u8 | requires x ( lane u16 | generation u64 | lane_seq u64 ) ]
//!   | (count & 0x7fff_ffff) x ( kind u8 | key_len u32 | value_len u32 | key | value )
//! ```
//! (little-endian; `value_len` is 0 for deletes; the bracketed part is present only when
//! bit 31 of `count` is set). A batch is atomic: recovery replays it whole or not at all,
//! because the WAL frames and checksums the record as one unit.
//!
//! *Requirements* are WAL positions of other lanes the batch depends on (`require`):
//! recovery drops the batch, with the rest of its lane, when one of them was lost, and a
//! persist of the batch's lane first persists them (docs/DESIGN.md
//! §6.3).

use crate::error::MetaDbError;
use crate::types::{Seq, ValueKind, WalPos};

/// Operations applied atomically, in order, with consecutive sequence numbers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteBatch {
    ops: Vec<(ValueKind, Vec<u8>, Vec<u8>)>,
    bytes: usize,
    requires: Vec<WalPos>,
}

/// Bit 31 of the encoded `count`: a requirement list follows the header.
const REQUIRES_FLAG: u32 = 1 << 31;
/// Bytes of one encoded requirement.
const REQUIRE_BYTES: usize = 18;
/// Most requirements one batch carries (one per other lane is all a caller needs).
pub const REQUIRES_MAX: usize = 255;

/// Largest key MetaDB accepts (file names are at most 255 bytes; keys add a prefix).
pub const KEY_BYTES_MAX: usize = 1024;
/// Largest value (an inode record, a small xattr, a segment-information entry).
pub const VALUE_BYTES_MAX: usize = 64 * 1024;

const HEADER_BYTES: usize = 12;
const OP_HEADER_BYTES: usize = 9;

impl WriteBatch {
    pub fn new() -> WriteBatch {
        WriteBatch::default()
    }

    pub fn put(&mut self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> &mut Self {
        let (key, value) = (key.into(), value.into());
        assert!(key.len() <= KEY_BYTES_MAX, "key of {} bytes", key.len());
        assert!(
            value.len() <= VALUE_BYTES_MAX,
            "value of {} bytes",
            value.len()
        );
        self.bytes += OP_HEADER_BYTES + key.len() + value.len();
        self.ops.push((ValueKind::Put, key, value));
        self
    }

    pub fn delete(&mut self, key: impl Into<Vec<u8>>) -> &mut Self {
        let key = key.into();
        assert!(key.len() <= KEY_BYTES_MAX, "key of {} bytes", key.len());
        self.bytes += OP_HEADER_BYTES + key.len();
        self.ops.push((ValueKind::Delete, key, Vec::new()));
        self
    }

    /// Makes the batch depend on the record at `pos` (another lane's, already written):
    /// after a crash it survives only if that record does, and persisting it persists that
    /// record first. A requirement on the batch's own lane, or on a generation already
    /// durable, is dropped when the batch is written (the lane's order already gives it).
    pub fn require(&mut self, pos: WalPos) -> &mut Self {
        match self.requires.iter_mut().find(|r| r.lane == pos.lane) {
            Some(r) => *r = (*r).max(pos),
            None => {
                assert!(self.requires.len() < REQUIRES_MAX, "too many requirements");
                self.requires.push(pos);
            }
        }
        self
    }

    /// The positions this batch depends on (at most one per lane).
    pub fn requires(&self) -> &[WalPos] {
        &self.requires
    }

    pub fn len(&self) -> usize {
        self.ops.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    pub fn ops(&self) -> impl Iterator<Item = (ValueKind, &[u8], &[u8])> {
        self.ops
            .iter()
            .map(|(k, key, v)| (*k, key.as_slice(), v.as_slice()))
    }

    /// Bytes of the encoded record (at most: requirements `encode_into` leaves out are
    /// counted).
    pub fn encoded_len(&self) -> usize {
        let requires = match self.requires.len() {
            0 => 0,
            n => 1 + n * REQUIRE_BYTES,
        };
        HEADER_BYTES + requires + self.bytes
    }

    /// Appends the encoding, with sequence numbers starting at `first_seq` and the
    /// requirements `keep` accepts, to `out`.
    pub fn encode_into(&self, first_seq: Seq, keep: impl Fn(&WalPos) -> bool, out: &mut Vec<u8>) {
        out.reserve(self.encoded_len());
        out.extend_from_slice(&first_seq.to_le_bytes());
        let count = u32::try_from(self.ops.len()).expect("batch count");
        assert!(count < REQUIRES_FLAG, "batch of {count} operations");
        let requires: Vec<&WalPos> = self.requires.iter().filter(|r| keep(r)).collect();
        if requires.is_empty() {
            out.extend_from_slice(&count.to_le_bytes());
        } else {
            out.extend_from_slice(&(count | REQUIRES_FLAG).to_le_bytes());
            out.push(u8::try_from(requires.len()).expect("at most 255 requirements"));
            for r in requires {
                out.extend_from_slice(&r.lane.to_le_bytes());
                out.extend_from_slice(&r.generation.to_le_bytes());
                out.extend_from_slice(&r.lane_seq.to_le_bytes());
            }
        }
        for (kind, key, value) in &self.ops {
            out.push(*kind as u8);
            out.extend_from_slice(&(key.len() as u32).to_le_bytes());
            out.extend_from_slice(&(value.len() as u32).to_le_bytes());
            out.extend_from_slice(key);
            out.extend_from_slice(value);
        }
    }

    /// Decodes a record: (first sequence number, batch).
    pub fn decode(bytes: &[u8]) -> Result<(Seq, WriteBatch), MetaDbError> {
        let bad = |why: &str| MetaDbError::corruption("WAL batch record", why);
        if bytes.len() < HEADER_BYTES {
            return Err(bad("shorter than its header"));
        }
        let first_seq = u64::from_le_bytes(bytes[0..8].try_into().expect("8 bytes"));
        let count = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
        let mut at = HEADER_BYTES;
        let mut batch = WriteBatch::new();
        if count & REQUIRES_FLAG != 0 {
            let n = usize::from(
                *bytes
                    .get(at)
                    .ok_or_else(|| bad("requirements past the end"))?,
            );
            at += 1;
            if n == 0 || bytes.len() < at + n * REQUIRE_BYTES {
                return Err(bad("requirements past the end or empty"));
            }
            for r in bytes[at..at + n * REQUIRE_BYTES].chunks_exact(REQUIRE_BYTES) {
                let pos = WalPos {
                    lane: u16::from_le_bytes(r[0..2].try_into().expect("2 bytes")),
                    generation: u64::from_le_bytes(r[2..10].try_into().expect("8 bytes")),
                    lane_seq: u64::from_le_bytes(r[10..18].try_into().expect("8 bytes")),
                };
                if batch.requires.iter().any(|q| q.lane == pos.lane) {
                    return Err(bad("two requirements on one lane"));
                }
                batch.requires.push(pos);
            }
            at += n * REQUIRE_BYTES;
        }
        let count = (count & !REQUIRES_FLAG) as usize;
        // Operation i has sequence number first_seq + i; recovery adds them up, and the
        // gate hands out numbers up to SEQ_MAX only.
        if first_seq.saturating_add(count as u64) > crate::gate::SEQ_MAX + 1 {
            return Err(bad("sequence numbers past the last one MetaDB hands out"));
        }
        for _ in 0..count {
            if bytes.len() < at + OP_HEADER_BYTES {
                return Err(bad("operation header past the end"));
            }
            let kind =
                ValueKind::from_u8(bytes[at]).ok_or_else(|| bad("unknown operation kind"))?;
            let key_len =
                u32::from_le_bytes(bytes[at + 1..at + 5].try_into().expect("4 bytes")) as usize;
            let value_len =
                u32::from_le_bytes(bytes[at + 5..at + 9].try_into().expect("4 bytes")) as usize;
            at += OP_HEADER_BYTES;
            if key_len > KEY_BYTES_MAX
                || value_len > VALUE_BYTES_MAX
                || bytes.len() < at + key_len + value_len
            {
                return Err(bad("operation body past the end or too large"));
            }
            if kind == ValueKind::Delete && value_len != 0 {
                // FORMAT.md §5.1: a delete carries no value; one that does was not
                // written by MetaDB.
                return Err(bad("delete with a value"));
            }
            let key = bytes[at..at + key_len].to_vec();
            let value = bytes[at + key_len..at + key_len + value_len].to_vec();
            at += key_len + value_len;
            match kind {
                ValueKind::Put => batch.put(key, value),
                ValueKind::Delete => batch.delete(key),
            };
        }
        if at != bytes.len() {
            return Err(bad("trailing bytes"));
        }
        Ok((first_seq, batch))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let mut b = WriteBatch::new();
        b.put(b"m:1:foo".to_vec(), b"inode".to_vec())
            .delete(b"m:1:bar".to_vec())
            .put(b"k".to_vec(), Vec::new());
        for with_requirements in [false, true] {
            if with_requirements {
                for (lane, lane_seq) in [(3, 9), (5, 1), (3, 12)] {
                    b.require(WalPos {
                        lane,
                        generation: 4,
                        lane_seq,
                    });
                }
                assert_eq!(
                    b.requires().len(),
                    2,
                    "one requirement per lane, the furthest"
                );
            }
            let mut out = Vec::new();
            b.encode_into(77, |_| true, &mut out);
            assert_eq!(out.len(), b.encoded_len());
            let (seq, decoded) = WriteBatch::decode(&out).unwrap();
            assert_eq!(seq, 77);
            assert_eq!(decoded, b);
            for cut in 0..out.len() {
                assert!(
                    WriteBatch::decode(&out[..cut]).is_err(),
                    "truncated at {cut}"
                );
            }
        }
        // Requirements the writer leaves out are not encoded.
        let mut out = Vec::new();
        b.encode_into(1, |r| r.lane != 3, &mut out);
        let (_, decoded) = WriteBatch::decode(&out).unwrap();
        assert_eq!(decoded.requires().len(), 1);
        assert_eq!(decoded.requires()[0].lane, 5);
    }
}
