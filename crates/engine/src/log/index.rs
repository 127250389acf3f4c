//! The block index (docs/FORMAT.md §6.2): per-block `x` records and `e` extents in
//! MetaDB, read as one map and changed in a domain's batches.
//!
//! A write of a long run (file blocks and device addresses both consecutive, at least
//! [`keys::EXTENT_MIN_BLOCKS`]) maps it by extents of up to [`keys::EXTENT_MAX_BLOCKS`]
//! blocks, deleting the `x` records it covers and trimming the extents it overlaps;
//! shorter writes get one `x` record per block, which shadows any extent under it (a
//! 4 KiB overwrite inside a 1 MiB extent rewrites no CRC array). A 100 MB file written
//! sequentially costs about 100 extents instead of 25,600 `x` and 25,600 `r` records.
//!
//! Invariants:
//! - An [`IndexView`] holds every `x` record and every extent overlapping the ranges it
//!   was loaded for (under the domain's lock it stays current: only the domain's batches
//!   change the file's index).
//! - A block's mapping is its `x` record, else the extent covering it. Addresses are
//!   invalidated only through that mapping, never through an extent's shadowed claim.

use super::domain::{self, DomainState};
use super::keys::{self, Extent, FileBlock, Mapping, Reverse, ReverseExtent};
use super::mapcache::Span;
use super::Engine;
use crate::error::EngineError;
use format::{BlockAddr, InodeNo};
use metadb::WriteBatch;
use std::collections::{BTreeMap, BTreeSet};

/// A file's index over some block ranges, as loaded from MetaDB and changed since.
#[derive(Debug)]
pub(super) struct IndexView {
    ino: InodeNo,
    singles: BTreeMap<FileBlock, Mapping>,
    /// By last block.
    extents: BTreeMap<FileBlock, Extent>,
    /// Last blocks of extents put or deleted since loading (written out by `finish`).
    changed: BTreeSet<FileBlock>,
}

/// One block a batch points somewhere new.
#[derive(Debug, Clone, Copy)]
pub(super) struct NewBlock {
    pub block: FileBlock,
    pub addr: BlockAddr,
    pub crc: u32,
}

impl Engine {
    /// The index of `ino` over `ranges` ((first block, count); `count` may reach the end
    /// of the file's block numbers).
    pub(super) fn load_index(
        &self,
        ino: InodeNo,
        ranges: &[(FileBlock, u64)],
    ) -> Result<IndexView, EngineError> {
        let mut view = IndexView {
            ino,
            singles: BTreeMap::new(),
            extents: BTreeMap::new(),
            changed: BTreeSet::new(),
        };
        for &(first, count) in ranges {
            assert!(count > 0, "an empty range");
            let end = first.0.saturating_add(count);
            if count == 1 {
                if let Some(v) = self.db.get(&keys::mapping_key(ino, first))? {
                    view.singles.insert(first, Mapping::decode(&v)?);
                }
            } else {
                let start = keys::mapping_key(ino, first);
                let stop = keys::mapping_key(ino, FileBlock(end));
                for item in self.db.range(&start, Some(&stop), None)? {
                    let (key, value) = item?;
                    let (_, block) = keys::parse_mapping_key(&key)?;
                    view.singles.insert(block, Mapping::decode(&value)?);
                }
            }
            // An extent overlapping first..end ends at or after `first` and at most
            // EXTENT_MAX_BLOCKS - 1 after `end - 1`.
            let start = keys::extent_key(ino, first);
            let stop = keys::extent_key(
                ino,
                FileBlock(end.saturating_add(keys::EXTENT_MAX_BLOCKS - 1)),
            );
            for item in self.db.range(&start, Some(&stop), None)? {
                let (key, value) = item?;
                let (_, last) = keys::parse_extent_key(&key)?;
                let e = Extent::decode(last, &value)?;
                if e.first.0 >= end {
                    break;
                }
                view.extents.insert(last, e);
            }
        }
        let mut previous: Option<FileBlock> = None;
        for (last, e) in &view.extents {
            if let Some(p) = previous.filter(|p| e.first <= *p) {
                return Err(EngineError::corruption(
                    "extent",
                    format!("inode {ino}, blocks {}..={}", e.first.0, last.0),
                    "no overlap with the file's other extents",
                    format!("overlaps the extent ending at block {}", p.0),
                ));
            }
            previous = Some(*last);
        }
        Ok(view)
    }

    /// The mapping of one block (its `x` record, else the extent covering it).
    pub(super) fn mapping_of(
        &self,
        ino: InodeNo,
        block: FileBlock,
    ) -> Result<Option<Mapping>, EngineError> {
        Ok(self.load_index(ino, &[(block, 1)])?.get(block))
    }

    /// Points `blocks` (ascending file blocks, each once) at their new addresses in
    /// `batch`: invalidates what they mapped before, marks the new addresses valid and
    /// writes the index and reverse records. Returns how many of them were holes.
    pub(super) fn map_blocks(
        &self,
        state: &mut DomainState,
        batch: &mut WriteBatch,
        view: &mut IndexView,
        blocks: &[NewBlock],
        seq: u64,
    ) -> u64 {
        let mut holes = 0;
        for b in blocks {
            match view.get(b.block) {
                Some(old) => state.invalidate(&self.geometry, old.addr),
                None => holes += 1,
            }
            state.mark_valid(&self.geometry, b.addr);
        }
        let ino = view.ino;
        for piece in pieces(&self.geometry, blocks) {
            let first = piece[0];
            let (segment, start) = domain::locate(&self.geometry, first.addr);
            if self.extents && piece.len() as u64 >= keys::EXTENT_MIN_BLOCKS {
                let end = FileBlock(first.block.0 + piece.len() as u64);
                view.unmap(batch, first.block, end);
                view.insert(Extent {
                    first: first.block,
                    addr: first.addr,
                    write_seq: seq,
                    crcs: piece.iter().map(|b| b.crc).collect(),
                });
                batch.put(
                    keys::reverse_extent_key(segment, start as u16).to_vec(),
                    ReverseExtent {
                        ino,
                        file_block: first.block,
                        count: piece.len() as u32,
                    }
                    .encode()
                    .to_vec(),
                );
            } else {
                for (k, b) in piece.iter().enumerate() {
                    let mapping = Mapping {
                        addr: b.addr,
                        crc: b.crc,
                        write_seq: seq,
                    };
                    batch.put(
                        keys::mapping_key(ino, b.block).to_vec(),
                        mapping.encode().to_vec(),
                    );
                    view.singles.insert(b.block, mapping);
                    batch.put(
                        keys::reverse_key(segment, (start + k as u32) as u16).to_vec(),
                        Reverse {
                            ino,
                            block: b.block,
                        }
                        .encode()
                        .to_vec(),
                    );
                }
            }
        }
        view.finish(batch);
        holes
    }

    /// Unmaps blocks `from..to` of the view's file in `batch` (the view must cover them)
    /// and invalidates their addresses. Returns how many blocks were mapped.
    pub(super) fn unmap_blocks(
        &self,
        state: &mut DomainState,
        batch: &mut WriteBatch,
        view: &mut IndexView,
        from: FileBlock,
        to: FileBlock,
    ) -> u64 {
        let mapped = view.mapped(from, to);
        for (_, m) in &mapped {
            state.invalidate(&self.geometry, m.addr);
        }
        view.unmap(batch, from, to);
        view.finish(batch);
        mapped.len() as u64
    }
}

impl IndexView {
    /// The mapping of `block` (which must lie in the loaded ranges).
    pub fn get(&self, block: FileBlock) -> Option<Mapping> {
        if let Some(m) = self.singles.get(&block) {
            return Some(*m);
        }
        self.extents
            .range(block..)
            .next()
            .filter(|(_, e)| e.contains(block))
            .map(|(_, e)| e.mapping(block))
    }

    /// The loaded extents, by last block.
    pub fn extents(&self) -> impl Iterator<Item = (&FileBlock, &Extent)> {
        self.extents.iter()
    }

    /// The extents lying wholly inside `from..to` (which the view must have been loaded
    /// over), each with the `x` records shadowing its blocks.
    pub fn spans(&self, from: FileBlock, to: FileBlock) -> Vec<Span> {
        self.extents
            .range(from..to)
            .map(|(_, e)| e)
            .filter(|e| e.first >= from)
            .map(|e| Span {
                extent: e.clone(),
                shadows: self
                    .singles
                    .range(e.first..=e.last())
                    .map(|(b, m)| (*b, *m))
                    .collect(),
            })
            .collect()
    }

    /// Every mapped block in `from..to`, ascending.
    pub fn mapped(&self, from: FileBlock, to: FileBlock) -> Vec<(FileBlock, Mapping)> {
        let mut out: BTreeMap<FileBlock, Mapping> = self
            .singles
            .range(from..to)
            .map(|(b, m)| (*b, *m))
            .collect();
        for e in self.extents.range(from..).map(|(_, e)| e) {
            if e.first >= to {
                break;
            }
            let lo = e.first.max(from).0;
            let hi = (e.last().0 + 1).min(to.0);
            for b in lo..hi {
                out.entry(FileBlock(b))
                    .or_insert_with(|| e.mapping(FileBlock(b)));
            }
        }
        out.into_iter().collect()
    }

    /// Removes every `x` record and extent claim in `from..to` (extents are trimmed).
    fn unmap(&mut self, batch: &mut WriteBatch, from: FileBlock, to: FileBlock) {
        let singles: Vec<FileBlock> = self.singles.range(from..to).map(|(b, _)| *b).collect();
        for b in singles {
            self.singles.remove(&b);
            batch.delete(keys::mapping_key(self.ino, b).to_vec());
        }
        let overlapping: Vec<FileBlock> = self
            .extents
            .range(from..)
            .take_while(|(_, e)| e.first < to)
            .map(|(last, _)| *last)
            .collect();
        for last in overlapping {
            let e = self.extents.remove(&last).expect("listed");
            self.changed.insert(last);
            let left = e.slice(e.first, from);
            let right = e.slice(to, FileBlock(last.0 + 1));
            for piece in left.into_iter().chain(right) {
                self.insert(piece);
            }
        }
    }

    fn insert(&mut self, e: Extent) {
        let last = e.last();
        self.changed.insert(last);
        let replaced = self.extents.insert(last, e);
        assert!(replaced.is_none(), "extents overlap at block {last:?}");
    }

    /// Writes the extents changed since the last call to `batch`.
    fn finish(&mut self, batch: &mut WriteBatch) {
        for last in std::mem::take(&mut self.changed) {
            let key = keys::extent_key(self.ino, last).to_vec();
            match self.extents.get(&last) {
                Some(e) => batch.put(key, e.encode()),
                None => batch.delete(key),
            };
        }
    }
}

/// Splits `blocks` into runs that are consecutive both in the file and on the device,
/// inside one segment and at most one extent long.
fn pieces<'a>(
    geometry: &'a format::Geometry,
    blocks: &'a [NewBlock],
) -> impl Iterator<Item = &'a [NewBlock]> + 'a {
    let mut rest = blocks;
    std::iter::from_fn(move || {
        let first = rest.first()?;
        let segment = geometry.segment_of(first.addr);
        let mut n = 1;
        while n < rest.len()
            && (n as u64) < keys::EXTENT_MAX_BLOCKS
            && rest[n].block.0 == first.block.0 + n as u64
            && rest[n].addr.0 == first.addr.0 + n as u64
            && geometry.segment_of(rest[n].addr) == segment
        {
            n += 1;
        }
        let (piece, tail) = rest.split_at(n);
        rest = tail;
        Some(piece)
    })
}
