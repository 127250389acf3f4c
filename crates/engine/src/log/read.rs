//! Reading: the block index in MetaDB, then the data, checked against its CRC.
//!
//! Invariants:
//! - A block is returned only if it matches its mapping's CRC; a mismatch is retried
//!   while the mapping changed (GC moved it and its segment was reused) or the write is
//!   still in flight, and is EIO otherwise.

use super::keys::{self, Extent, FileBlock, Mapping};
use super::{Engine, BLOCK};
use crate::error::EngineError;
use device::{AlignedBuf, IoCause, IoRequest};
use format::InodeNo;

/// A MetaDB record: key and value.
type Record = (Vec<u8>, Vec<u8>);

impl Engine {
    /// Current mappings of blocks `first..first + count` of `ino`.
    pub(super) fn mappings(
        &self,
        ino: InodeNo,
        first: FileBlock,
        count: u64,
    ) -> Result<std::collections::HashMap<FileBlock, Mapping>, EngineError> {
        let end = first.0.checked_add(count).expect("block range overflows");
        let view = self.load_index(ino, &[(first, count)])?;
        Ok(view.mapped(first, FileBlock(end)).into_iter().collect())
    }

    /// [`Engine::mappings`] for a read, through the map cache: its spans answer when
    /// they cover the whole range; otherwise MetaDB does, and every extent it returns
    /// is then loaded whole, with the `x` records shadowing it, and kept for later reads
    /// (one more range read per miss; a cold 4 KiB random read of a file written in
    /// long runs then usually needs no MetaDB lookup at all).
    fn read_mappings(
        &self,
        ino: InodeNo,
        first: FileBlock,
        count: u64,
    ) -> Result<std::collections::HashMap<FileBlock, Mapping>, EngineError> {
        if let Some(found) = self.map_cache.lookup(ino, first, count) {
            return Ok((first.0..).map(FileBlock).zip(found).collect());
        }
        // Taken before anything is read: a change meanwhile voids the fill.
        let epoch = self.map_cache.epoch(ino);
        let end = first.0.checked_add(count).expect("block range overflows");
        let view = self.load_index(ino, &[(first, count)])?;
        let bounds = view
            .extents()
            .next()
            .zip(view.extents().last())
            .map(|((_, lo), (hi, _))| (lo.first, FileBlock(hi.0 + 1)));
        if let Some((from, to)) = bounds {
            let whole = self.load_index(ino, &[(from, to.0 - from.0)])?;
            self.map_cache.fill(ino, epoch, whole.spans(from, to));
        }
        Ok(view.mapped(first, FileBlock(end)).into_iter().collect())
    }

    /// The first mapped block of `ino` at or after `from` (SEEK_DATA), if any.
    pub fn next_mapped(
        &self,
        ino: InodeNo,
        from: FileBlock,
    ) -> Result<Option<FileBlock>, EngineError> {
        let next = InodeNo(ino.0 + 1);
        let single =
            match self.first_in(&keys::mapping_key(ino, from), &keys::mapping_prefix(next))? {
                Some((key, _)) => Some(keys::parse_mapping_key(&key)?.1),
                None => None,
            };
        // The first extent ending at or after `from` covers it or starts after it.
        let extent =
            match self.first_in(&keys::extent_key(ino, from), &keys::extent_prefix(next))? {
                Some((key, value)) => {
                    let (_, last) = keys::parse_extent_key(&key)?;
                    Some(Extent::decode(last, &value)?.first.max(from))
                }
                None => None,
            };
        Ok(match (single, extent) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        })
    }

    /// The first record with a key in `start..stop`.
    fn first_in(&self, start: &[u8], stop: &[u8]) -> Result<Option<Record>, EngineError> {
        Ok(self.db.range(start, Some(stop), None)?.next().transpose()?)
    }

    /// The first unmapped block of `ino` at or after `from` (SEEK_HOLE). Walks the run
    /// of mapped blocks starting at `from`: one lookup per `x` record or extent in it.
    pub fn next_unmapped(&self, ino: InodeNo, from: FileBlock) -> Result<FileBlock, EngineError> {
        let mut at = from;
        loop {
            let view = self.load_index(ino, &[(at, 1)])?;
            // Loaded extents overlap `at`; every block of an extent is mapped.
            at = match view.extents().next() {
                Some((last, _)) => FileBlock(last.0 + 1),
                None if view.get(at).is_some() => FileBlock(at.0 + 1),
                None => return Ok(at),
            };
        }
    }

    /// Reads blocks `first..first + count` of `ino` into `out` (count x 4 KiB); holes
    /// read as zeros. Returns, per block, whether it was mapped. See
    /// [`Engine::read_blocks`].
    pub fn read(
        &self,
        ino: InodeNo,
        first: FileBlock,
        out: &mut [u8],
    ) -> Result<Vec<bool>, EngineError> {
        assert!(out.len() % BLOCK == 0 && !out.is_empty());
        let count = (out.len() / BLOCK) as u64;
        let mut mapped = vec![false; count as usize];
        self.read_blocks(ino, first, count, |i, block| {
            let to = &mut out[i as usize * BLOCK..(i as usize + 1) * BLOCK];
            match block {
                Some(block) => {
                    to.copy_from_slice(block);
                    mapped[i as usize] = true;
                }
                None => to.fill(0),
            }
        })?;
        Ok(mapped)
    }

    /// Reads blocks `first..first + count` of `ino`, handing each to `deliver` once, as
    /// (index from `first`, its 4 KiB or `None` for a hole), in no particular order and
    /// straight from the device's buffer (no copy). Blocks of consecutive file offsets
    /// at consecutive device addresses are read by one request of up to
    /// [`READ_RUN_BLOCKS_MAX`] blocks (all requests in flight together). Every block is
    /// checked against its CRC; a block GC moved meanwhile is looked up again. On an
    /// error some blocks may have been delivered.
    pub fn read_blocks(
        &self,
        ino: InodeNo,
        first: FileBlock,
        count: u64,
        deliver: impl FnMut(u64, Option<&[u8]>),
    ) -> Result<(), EngineError> {
        self.read_blocks_into(ino, first, count, |_, _| None, deliver)
    }

    /// [`Engine::read_blocks`] into the caller's memory: `dest(i, n)` may give the
    /// buffer blocks `i..i + n` (from `first`) are read into (else a scratch buffer is),
    /// and the slices handed to `deliver` then lie in it.
    pub fn read_blocks_into(
        &self,
        ino: InodeNo,
        first: FileBlock,
        count: u64,
        mut dest: impl FnMut(u64, usize) -> Option<AlignedBuf>,
        mut deliver: impl FnMut(u64, Option<&[u8]>),
    ) -> Result<(), EngineError> {
        assert!(count > 0);
        let mut todo: Vec<u64> = (0..count).collect();
        for attempt in 0..4 {
            // A retry asks MetaDB itself.
            let maps = match attempt {
                0 => self.read_mappings(ino, first, count)?,
                _ => self.mappings(ino, first, count)?,
            };
            let mut wanted: Vec<(u64, Mapping)> = Vec::new();
            for &i in &todo {
                match maps.get(&FileBlock(first.0 + i)) {
                    None => deliver(i, None),
                    Some(m) => wanted.push((i, *m)),
                }
            }
            // Mappings come from MetaDB's bytes: one naming a block outside the segment
            // area is corruption, never a read past the device's end.
            if let Some((i, m)) = wanted
                .iter()
                .find(|(_, m)| self.geometry.segment_of(m.addr).is_none())
            {
                return Err(EngineError::corruption(
                    "block mapping",
                    format!("inode {ino} block {}", first.0 + i),
                    "an address in the segment area",
                    m.addr,
                ));
            }
            let runs = device_runs(&wanted);
            let requests = runs
                .iter()
                .map(|run| {
                    let (i, m) = wanted[run.start];
                    let buf = dest(i, run.len())
                        .unwrap_or_else(|| AlignedBuf::scratch(run.len() * BLOCK));
                    assert_eq!(buf.len(), run.len() * BLOCK, "a run's buffer");
                    IoRequest::read(m.addr.byte_offset(), buf, IoCause::UserData)
                })
                .collect();
            let done = self.device.run(requests)?;
            let mut retry = Vec::new();
            for (run, c) in runs.into_iter().zip(done) {
                c.result?;
                let buf = c.request.into_buf().expect("a read returns its buffer");
                for (k, &(i, m)) in wanted[run].iter().enumerate() {
                    let block = &buf[k * BLOCK..(k + 1) * BLOCK];
                    if keys::block_crc(ino, FileBlock(first.0 + i), block) == m.crc {
                        deliver(i, Some(block));
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
            }
            if retry.is_empty() {
                break;
            }
            // A mismatch is a block moved (and its segment reused) under us, or a write
            // whose batch is made while its data is still in flight; otherwise, with the
            // mapping unchanged, the data is corrupt. The cache is not trusted after it.
            self.map_cache.invalidate(ino);
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
        Ok(())
    }
}

/// The most blocks one read request carries (512 KiB): a long run is split so that
/// several requests are in flight at once, which the device serves faster than one,
/// while a read-ahead job (512 KiB) is one request.
pub const READ_RUN_BLOCKS_MAX: usize = 128;

/// Splits `wanted` (ascending file blocks with their mappings) into runs of
/// consecutive file blocks at consecutive device addresses, each at most
/// [`READ_RUN_BLOCKS_MAX`] long: index ranges into `wanted`.
fn device_runs(wanted: &[(u64, Mapping)]) -> Vec<std::ops::Range<usize>> {
    let mut runs: Vec<std::ops::Range<usize>> = Vec::new();
    for (k, &(i, m)) in wanted.iter().enumerate() {
        if let Some(run) = runs.last_mut() {
            let (pi, pm) = wanted[k - 1];
            if run.len() < READ_RUN_BLOCKS_MAX && pi + 1 == i && pm.addr.0 + 1 == m.addr.0 {
                run.end = k + 1;
                continue;
            }
        }
        runs.push(k..k + 1);
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;
    use format::BlockAddr;

    fn at(addr: u64) -> Mapping {
        Mapping {
            addr: BlockAddr(addr),
            crc: 0,
            write_seq: 0,
        }
    }

    #[test]
    fn runs_follow_both_file_and_device_order_up_to_the_limit() {
        // Blocks 0-2 at 10-12, block 3 elsewhere, block 5 (4 is a hole) after 3's address.
        let wanted = [
            (0, at(10)),
            (1, at(11)),
            (2, at(12)),
            (3, at(40)),
            (5, at(41)),
        ];
        assert_eq!(device_runs(&wanted), vec![0..3, 3..4, 4..5]);
        let max = READ_RUN_BLOCKS_MAX;
        let long: Vec<_> = (0..2 * max as u64 + 22).map(|i| (i, at(100 + i))).collect();
        assert_eq!(
            device_runs(&long),
            vec![0..max, max..2 * max, 2 * max..2 * max + 22]
        );
        assert!(device_runs(&[]).is_empty());
    }
}
