//! Write batches and their encoding: the payload of a WAL record (docs/FORMAT.md §5.1).
//!
//! ```text
//! first_seq u64 | count u32 | count x ( kind u8 | key_len u32 | value_len u32 | key | value )
//! ```
//! (little-endian; `value_len` is 0 for deletes). A batch is atomic: recovery replays it
//! whole or not at all, because the WAL frames and checksums the record as one unit.

use crate::error::MetaDbError;
use crate::types::{Seq, ValueKind};

/// Operations applied atomically, in order, with consecutive sequence numbers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteBatch {
    ops: Vec<(ValueKind, Vec<u8>, Vec<u8>)>,
    bytes: usize,
}

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

    /// Bytes of the encoded record.
    pub fn encoded_len(&self) -> usize {
        HEADER_BYTES + self.bytes
    }

    /// Appends the encoding, with sequence numbers starting at `first_seq`, to `out`.
    pub fn encode_into(&self, first_seq: Seq, out: &mut Vec<u8>) {
        out.reserve(self.encoded_len());
        out.extend_from_slice(&first_seq.to_le_bytes());
        out.extend_from_slice(&(self.ops.len() as u32).to_le_bytes());
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
        let count = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes")) as usize;
        let mut at = HEADER_BYTES;
        let mut batch = WriteBatch::new();
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
        let mut out = Vec::new();
        b.encode_into(77, &mut out);
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
}
