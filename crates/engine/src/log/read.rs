//! Reading: the block index in MetaDB, then the data, checked against its CRC.
//!
//! Invariants:
//! - A block is returned only if it matches its mapping's CRC; a mismatch is retried
//!   while the mapping changed (GC moved it and its segment was reused) or the write is
//!   still in flight, and is EIO otherwise.

use super::keys::{self, FileBlock, Mapping};
use super::{Engine, BLOCK};
use crate::error::EngineError;
use device::{AlignedBuf, IoCause, IoRequest};
use format::InodeNo;

impl Engine {
    /// Current mappings of blocks `first..first + count` of `ino`.
    pub(super) fn mappings(
        &self,
        ino: InodeNo,
        first: FileBlock,
        count: u64,
    ) -> Result<std::collections::HashMap<FileBlock, Mapping>, EngineError> {
        let mut out = std::collections::HashMap::new();
        if count == 1 {
            if let Some(v) = self.db.get(&keys::mapping_key(ino, first))? {
                out.insert(first, Mapping::decode(&v)?);
            }
            return Ok(out);
        }
        let end = first.0.checked_add(count).expect("block range overflows");
        let start = keys::mapping_key(ino, first);
        let stop = keys::mapping_key(ino, FileBlock(end));
        for item in self.db.range(&start, Some(&stop), None)? {
            let (key, value) = item?;
            let (_, block) = keys::parse_mapping_key(&key)?;
            out.insert(block, Mapping::decode(&value)?);
        }
        Ok(out)
    }

    /// The first mapped block of `ino` at or after `from` (SEEK_DATA), if any.
    pub fn next_mapped(
        &self,
        ino: InodeNo,
        from: FileBlock,
    ) -> Result<Option<FileBlock>, EngineError> {
        let start = keys::mapping_key(ino, from);
        let stop = keys::mapping_prefix(InodeNo(ino.0 + 1));
        match self.db.range(&start, Some(&stop), None)?.next() {
            Some(item) => Ok(Some(keys::parse_mapping_key(&item?.0)?.1)),
            None => Ok(None),
        }
    }

    /// The first unmapped block of `ino` at or after `from` (SEEK_HOLE). Walks the run
    /// of mapped blocks starting at `from`: O(length of that run).
    pub fn next_unmapped(&self, ino: InodeNo, from: FileBlock) -> Result<FileBlock, EngineError> {
        let start = keys::mapping_key(ino, from);
        let stop = keys::mapping_prefix(InodeNo(ino.0 + 1));
        let mut expect = from.0;
        for item in self.db.range(&start, Some(&stop), None)? {
            let (_, block) = keys::parse_mapping_key(&item?.0)?;
            if block.0 != expect {
                break;
            }
            expect += 1;
        }
        Ok(FileBlock(expect))
    }

    /// Reads blocks `first..first + count` of `ino` into `out` (count x 4 KiB); holes
    /// read as zeros. Returns, per block, whether it was mapped. Every block is checked
    /// against its CRC; a block GC moved meanwhile is looked up again.
    pub fn read(
        &self,
        ino: InodeNo,
        first: FileBlock,
        out: &mut [u8],
    ) -> Result<Vec<bool>, EngineError> {
        assert!(out.len() % BLOCK == 0 && !out.is_empty());
        let count = (out.len() / BLOCK) as u64;
        let mut mapped = vec![false; count as usize];
        let mut todo: Vec<u64> = (0..count).collect();
        for attempt in 0..4 {
            let maps = self.mappings(ino, first, count)?;
            let mut requests = Vec::new();
            let mut wanted = Vec::new();
            for &i in &todo {
                match maps.get(&FileBlock(first.0 + i)) {
                    None => {
                        out[i as usize * BLOCK..(i as usize + 1) * BLOCK].fill(0);
                        mapped[i as usize] = false;
                    }
                    Some(m) => {
                        requests.push(IoRequest::read(
                            m.addr.byte_offset(),
                            AlignedBuf::zeroed(BLOCK),
                            IoCause::UserData,
                        ));
                        wanted.push((i, *m));
                    }
                }
            }
            let done = self.device.run(requests)?;
            let mut retry = Vec::new();
            for ((i, m), c) in wanted.into_iter().zip(done) {
                c.result?;
                let buf = c.request.into_buf().expect("a read returns its buffer");
                if keys::block_crc(ino, FileBlock(first.0 + i), &buf) == m.crc {
                    out[i as usize * BLOCK..(i as usize + 1) * BLOCK].copy_from_slice(&buf);
                    mapped[i as usize] = true;
                } else if attempt < 3 {
                    retry.push((i, m));
                } else {
                    return Err(EngineError::DataChecksum {
                        ino,
                        block: first.0 + i,
                        addr: m.addr,
                    });
                }
            }
            if retry.is_empty() {
                break;
            }
            // A mismatch is a block moved (and its segment reused) under us, or a write
            // whose batch is made while its data is still in flight; otherwise, with the
            // mapping unchanged, the data is corrupt.
            let now = self.mappings(ino, first, count)?;
            let tracker = &self.domain(ino).tracker;
            todo.clear();
            for (i, m) in retry {
                match now.get(&FileBlock(first.0 + i)) {
                    Some(n) if *n == m && m.write_seq > tracker.completed_prefix() => {
                        tracker.wait_completed(m.write_seq);
                        todo.push(i);
                    }
                    Some(n) if *n == m => {
                        return Err(EngineError::DataChecksum {
                            ino,
                            block: first.0 + i,
                            addr: m.addr,
                        })
                    }
                    _ => todo.push(i),
                }
            }
            if todo.is_empty() {
                break;
            }
        }
        Ok(mapped)
    }
}
