//! The engine's side of the image (docs/FORMAT.md §6.1-§6.2): segment information,
//! segment ownership, the block index and its reverse map, and (optionally) every mapped
//! block's data checksum.
//!
//! What must hold, and is checked here:
//! - every `s` entry names a domain and segment in range and decodes; its valid count
//!   equals its bitmap's population count;
//! - no segment is named by two owners (two domains, or a domain and MetaDB's manifest);
//! - every mapping (an `x` record, or an extent's block no `x` record shadows) points
//!   into a segment its file's domain owns, at a block whose validity bit is set, and
//!   the reverse map (the block's `r` entry or a `q` entry covering it) names the same
//!   file block; no two extents of a file overlap;
//! - no device block is mapped twice; every set validity bit is claimed by a mapping;
//! - with `--verify-data`, every mapped block matches its mapping's CRC.
//!
//! Repairs keep the mappings as the authority where the data agrees with them: a bit
//! that no mapping claims is cleared (leaked space), a mapping whose bit is clear is
//! marked valid again if its data verifies (else dropped), of two mappings of one block
//! the one whose data verifies stays. Of two owners of a segment, a domain entry that no
//! mapping uses is deleted; a conflict where both sides hold data is never repaired.

use crate::open::Recovered;
use crate::problem::{Class, Kind, Objects};
use crate::scan::{MapRec, Records, SegEntry};
use crate::{Fsck, FsckError};
use device::{AlignedBuf, IoRequest};
use engine::log::keys::{self, DomainRecord, Extent, FileBlock, Reverse};
use engine::space::Owner;
use format::constants::{BLOCKS_PER_SEGMENT, BLOCK_SIZE_BYTES};
use format::geometry::CheckpointOwner;
use format::{DomainId, InodeNo, SegmentNo};
use platform::IoCause;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

/// Blocks read per device batch.
const READ_BATCH_BLOCKS: usize = 256;

/// Where a mapping points, when that is inside a segment of its file's domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loc {
    pub domain: DomainId,
    pub segment: SegmentNo,
    pub block: u32,
}

/// The verdicts on the mappings (indexed like `Records::mappings`).
#[derive(Debug, Default)]
pub struct BlockState {
    /// The mapping stays (no applied repair dropped it).
    pub kept: Vec<bool>,
    pub loc: Vec<Option<Loc>>,
    /// Addresses whose validity bit a repair sets again (their data verified).
    pub revalidated: HashSet<u64>,
    /// Addresses a dropped mapping pointed to.
    pub released: HashSet<u64>,
    /// Entries a repair rewrites even if their bitmap does not change.
    pub rewrite: BTreeSet<(DomainId, SegmentNo)>,
    /// Blocks dropped from each extent (by inode and last block).
    pub extent_drops: BTreeMap<(InodeNo, FileBlock), BTreeSet<u64>>,
}

impl Fsck<'_> {
    /// Drops mapping `i` (an applied repair): its record goes, its block is released.
    pub(crate) fn drop_mapping(&mut self, r: &Records, b: &mut BlockState, i: usize) {
        let MapRec {
            ino,
            block,
            m,
            extent,
        } = r.mappings[i];
        match extent {
            None => {
                self.delete(&keys::mapping_key(ino, block));
                // An extent under the record would map the block again (with a stale
                // address): the block leaves it too.
                let under = r
                    .extents
                    .range((ino, block)..)
                    .next()
                    .filter(|((i, _), e)| *i == ino && e.contains(block))
                    .map(|(k, _)| k.1);
                if let Some(last) = under {
                    self.drop_from_extent(r, b, ino, last, block);
                }
            }
            Some(last) => self.drop_from_extent(r, b, ino, last, block),
        }
        b.kept[i] = false;
        b.released.insert(m.addr.0);
    }

    /// Rewrites extent (`ino`, `last`) as the pieces left without `block` and the blocks
    /// dropped from it before.
    fn drop_from_extent(
        &mut self,
        r: &Records,
        b: &mut BlockState,
        ino: InodeNo,
        last: FileBlock,
        block: FileBlock,
    ) {
        let e = &r.extents[&(ino, last)];
        let drops = b.extent_drops.entry((ino, last)).or_default();
        let before = extent_pieces(e, drops);
        drops.insert(block.0);
        let after = extent_pieces(e, drops);
        self.delete(&keys::extent_key(ino, last));
        for p in before {
            self.delete(&p.key(ino));
        }
        for p in after {
            self.put(&p.key(ino), &p.encode());
        }
    }

    /// Reads the blocks at `addrs`; `None` for a block the device could not read.
    pub(crate) fn read_blocks(&self, addrs: &[u64]) -> Result<Vec<Option<AlignedBuf>>, FsckError> {
        let mut out = Vec::with_capacity(addrs.len());
        for chunk in addrs.chunks(READ_BATCH_BLOCKS) {
            let requests = chunk
                .iter()
                .map(|&a| {
                    IoRequest::read(
                        a * BLOCK_SIZE_BYTES,
                        AlignedBuf::zeroed(BLOCK_SIZE_BYTES as usize),
                        IoCause::Tool,
                    )
                })
                .collect();
            for c in self.device.run(requests)? {
                out.push(match c.result {
                    Ok(()) => c.request.into_buf(),
                    Err(_) => None,
                });
            }
        }
        Ok(out)
    }

    /// Whether mapping `i`'s data verifies against its CRC (false if unreadable).
    fn verifies(&mut self, r: &Records, i: usize) -> Result<bool, FsckError> {
        let MapRec { ino, block, m, .. } = r.mappings[i];
        self.stats.blocks_verified += 1;
        Ok(match self.read_blocks(&[m.addr.0])?.pop().flatten() {
            Some(buf) => keys::block_crc(ino, block, &buf) == m.crc,
            None => false,
        })
    }

    pub(crate) fn check_blocks(
        &mut self,
        r: &mut Records,
        rec: &Recovered,
    ) -> Result<BlockState, FsckError> {
        self.progress
            .step("checking segment information", r.seginfo.len() as u64);
        let mut b = BlockState {
            kept: vec![true; r.mappings.len()],
            loc: vec![None; r.mappings.len()],
            ..BlockState::default()
        };
        self.check_seginfo(r, &mut b)?;
        self.progress
            .step("checking the block index", r.mappings.len() as u64);
        self.recreate_missing_seginfo(r, rec);
        self.locate_mappings(r, &mut b);
        self.check_conflicts(r, rec, &mut b);
        self.check_shared_blocks(r, &mut b)?;
        self.check_validity(r, &mut b)?;
        Ok(b)
    }

    /// Ranges, ownership, counts and times of the `s` entries.
    fn check_seginfo(&mut self, r: &mut Records, b: &mut BlockState) -> Result<(), FsckError> {
        let g = self.geometry;
        let out_of_range: Vec<_> = r
            .seginfo
            .keys()
            .filter(|(d, s)| u32::from(d.0) >= g.domain_count || s.0 >= g.segment_count)
            .copied()
            .collect();
        for (d, s) in out_of_range {
            r.seginfo.remove(&(d, s));
            if self.report(
                Kind::SeginfoOutOfRange,
                Class::Destructive,
                Objects::segment(d, s),
                format!(
                    "segment information for segment {s} of domain {d}, beyond the image's {} segments and {} domains",
                    g.segment_count, g.domain_count
                ),
                Some("delete the entry"),
            ) {
                self.delete(&keys::seginfo_key(d, s));
            }
        }
        let elapsed = self.elapsed_per_domain(r)?;
        let keys: Vec<_> = r.seginfo.keys().copied().collect();
        for (d, s) in keys {
            self.progress.advance(1);
            let e = r.seginfo.get_mut(&(d, s)).expect("key listed");
            if !e.decoded {
                b.rewrite.insert((d, s));
                continue;
            }
            let (count, pop, modified) = (e.count, e.popcount(), e.modified_ns);
            if u32::from(count) != pop
                && self.report(
                    Kind::SeginfoCountMismatch,
                    Class::Safe,
                    Objects::segment(d, s),
                    format!("segment {s} (domain {d}) records {count} valid blocks; its bitmap has {pop}"),
                    Some("set the count from the bitmap"),
                )
            {
                b.rewrite.insert((d, s));
            }
            let limit = elapsed.get(&d).copied().unwrap_or(0);
            if modified > limit
                && self.report(
                    Kind::SeginfoUndecodable,
                    Class::Safe,
                    Objects::segment(d, s),
                    format!("segment {s} (domain {d}) was modified at file-system time {modified} ns, after the domain's elapsed time {limit} ns (a mount refuses it)"),
                    Some("set its modification time to the domain's elapsed time"),
                )
            {
                r.seginfo.get_mut(&(d, s)).expect("key listed").modified_ns = limit;
                b.rewrite.insert((d, s));
            }
        }
        Ok(())
    }

    /// Each domain's file-system time: the newer of its `d` record and checkpoint slot.
    fn elapsed_per_domain(&self, r: &Records) -> Result<HashMap<DomainId, u64>, FsckError> {
        let mut out: HashMap<DomainId, u64> = r
            .domains
            .iter()
            .map(|(d, rec)| (*d, rec.elapsed_ns))
            .collect();
        for owner in engine::image::read_checkpoints(self.device, &self.geometry)? {
            let (CheckpointOwner::Domain(d), Some(slot)) = (owner.owner, owner.current) else {
                continue;
            };
            if let Ok(rec) = DomainRecord::decode(&slot.payload) {
                let e = out.entry(d).or_insert(0);
                *e = (*e).max(rec.elapsed_ns);
            }
        }
        Ok(out)
    }

    /// Mappings into a segment no one owns (no `s` entry of any domain, not MetaDB's)
    /// whose file's domain has no entry there: the entry was lost, not the data. It is
    /// recreated from the mappings (their data is then verified one by one, like those
    /// of an undecodable entry), rather than dropping every block of the segment.
    fn recreate_missing_seginfo(&mut self, r: &mut Records, rec: &Recovered) {
        for &(d, s) in &rec.lost {
            let count = r
                .mappings
                .iter()
                .filter(|m| self.geometry.segment_of(m.m.addr) == Some(s))
                .count();
            // Recovery claimed the segment already, so no table lands on it.
            self.report(
                Kind::SeginfoMissing,
                Class::Safe,
                Objects::segment(d, s),
                format!("{count} mappings point into segment {s}, which has no segment information and no owner (domain {d} takes it)"),
                Some("recreate the entry from the mappings whose data verifies"),
            );
            r.seginfo.insert(
                (d, s),
                SegEntry {
                    decoded: false,
                    kind: 1,
                    count: 0,
                    modified_ns: 0,
                    bitmap: [0; 8],
                },
            );
        }
    }

    /// Each mapping must point into a segment its file's domain owns.
    fn locate_mappings(&mut self, r: &Records, b: &mut BlockState) {
        let g = self.geometry;
        for i in 0..r.mappings.len() {
            let MapRec { ino, block, m, .. } = r.mappings[i];
            let domain = DomainId((ino.0 % u64::from(g.domain_count)) as u16);
            let seg = g.segment_of(m.addr);
            if let Some(s) = seg.filter(|s| r.seginfo.contains_key(&(domain, *s))) {
                let within = (m.addr.0 - g.segment_start(s).0) as u32;
                b.loc[i] = Some(Loc {
                    domain,
                    segment: s,
                    block: within,
                });
                continue;
            }
            let where_ = match seg {
                None => "outside the segment area".to_string(),
                Some(s) => format!("in segment {s}, which domain {domain} does not own"),
            };
            if self.report(
                Kind::MappingOutsideDomain,
                Class::Destructive,
                Objects::block(ino, block.0, m.addr),
                format!(
                    "block {} of inode {ino} is mapped to device block {} {where_}",
                    block.0, m.addr
                ),
                Some("drop the mapping (the file reads a hole there)"),
            ) {
                self.drop_mapping(r, b, i);
            }
        }
    }

    /// Segments an `s` entry names that the pool gave another owner first (MetaDB's
    /// manifest, or a domain earlier in key order). An entry no mapping points into is
    /// deleted (the segment stays its other owner's); otherwise both sides hold data
    /// and fsck cannot tell which is right.
    fn check_conflicts(&mut self, r: &mut Records, rec: &Recovered, b: &mut BlockState) {
        for c in &rec.conflicts {
            let holder = match c.holder {
                Some(Owner::MetaDb) => "MetaDB's manifest (a table)".to_string(),
                Some(Owner::Domain(o)) => format!("domain {o}"),
                None => "another owner".to_string(),
            };
            let used: Vec<usize> = (0..r.mappings.len())
                .filter(|&i| {
                    b.kept[i]
                        && b.loc[i].is_some_and(|l| l.domain == c.domain && l.segment == c.segment)
                })
                .collect();
            let repair = used
                .is_empty()
                .then_some("delete the domain's entry (no mapping points into the segment)");
            if self.report(
                Kind::SegmentOwnerConflict,
                Class::Safe,
                Objects::segment(c.domain, c.segment),
                format!(
                    "segment {} is named by domain {}'s segment information ({} mappings point into it) and by {holder}",
                    c.segment,
                    c.domain,
                    used.len()
                ),
                repair,
            ) {
                r.seginfo.remove(&(c.domain, c.segment));
                self.delete(&keys::seginfo_key(c.domain, c.segment));
            }
        }
    }

    /// A device block mapped by two file blocks keeps the mapping its data verifies for
    /// (preferring the one the reverse map names); the others are dropped.
    fn check_shared_blocks(&mut self, r: &Records, b: &mut BlockState) -> Result<(), FsckError> {
        let mut by_addr: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
        for (i, m) in r.mappings.iter().enumerate() {
            if b.kept[i] && b.loc[i].is_some() {
                by_addr.entry(m.m.addr.0).or_default().push(i);
            }
        }
        for (addr, users) in by_addr.into_iter().filter(|(_, u)| u.len() > 1) {
            let loc = b.loc[users[0]].expect("located");
            let at = (loc.segment, loc.block as u16);
            let is_named = |i: usize| r.reverse_names(at, r.mappings[i].ino, r.mappings[i].block);
            let mut verified = Vec::new();
            for &i in &users {
                if self.verifies(r, i)? {
                    verified.push(i);
                }
            }
            let winner = verified
                .iter()
                .copied()
                .find(|&i| is_named(i))
                .or_else(|| verified.first().copied())
                .or_else(|| users.iter().copied().find(|&i| is_named(i)))
                .unwrap_or(users[0]);
            let w = r.mappings[winner];
            for &i in users.iter().filter(|&&i| i != winner) {
                let MapRec { ino, block, m, .. } = r.mappings[i];
                if self.report(
                    Kind::BlockOwnedTwice,
                    Class::Destructive,
                    Objects::block(ino, block.0, m.addr),
                    format!(
                        "device block {addr} is mapped by block {} of inode {ino} and by block {} of inode {}",
                        block.0, w.block.0, w.ino
                    ),
                    Some("drop this mapping (the other one's data verifies or the reverse map names it)"),
                ) {
                    self.drop_mapping(r, b, i);
                    // The winner still holds the block.
                    b.released.remove(&addr);
                }
            }
        }
        Ok(())
    }

    /// Validity bits and reverse entries of the located mappings.
    fn check_validity(&mut self, r: &Records, b: &mut BlockState) -> Result<(), FsckError> {
        let mut claimed: HashSet<u64> = HashSet::new();
        for i in 0..r.mappings.len() {
            self.progress.advance(1);
            let (Some(loc), true) = (b.loc[i], b.kept[i]) else {
                continue;
            };
            let MapRec { ino, block, m, .. } = r.mappings[i];
            let entry = &r.seginfo[&(loc.domain, loc.segment)];
            let objects = Objects::block(ino, block.0, m.addr);
            if !entry.decoded && !claimed.contains(&m.addr.0) && !self.verifies(r, i)? {
                // The entry is rebuilt from the mappings: only data that verifies counts.
                if self.report(
                    Kind::MappingToInvalidBlock,
                    Class::Destructive,
                    objects,
                    format!(
                        "block {} of inode {ino} is mapped to device block {} in segment {}, whose segment information is lost, and its data does not verify",
                        block.0, m.addr, loc.segment
                    ),
                    Some("drop the mapping (the file reads a hole there)"),
                ) {
                    self.drop_mapping(r, b, i);
                }
                continue;
            }
            if entry.decoded && !entry.is_valid(loc.block) && !claimed.contains(&m.addr.0) {
                let sound = self.verifies(r, i)?;
                let (class, repair) = if sound {
                    (Class::Safe, "mark the block valid (its data verifies)")
                } else {
                    (
                        Class::Destructive,
                        "drop the mapping (its data does not verify)",
                    )
                };
                let fix = self.report(
                    Kind::MappingToInvalidBlock,
                    class,
                    objects.clone(),
                    format!(
                        "block {} of inode {ino} is mapped to device block {}, which segment {} marks invalid",
                        block.0, m.addr, loc.segment
                    ),
                    Some(repair),
                );
                match (fix, sound) {
                    (true, true) => {
                        b.revalidated.insert(m.addr.0);
                    }
                    (true, false) => {
                        self.drop_mapping(r, b, i);
                        continue;
                    }
                    (false, _) => continue,
                }
            }
            claimed.insert(m.addr.0);
            let at = (loc.segment, loc.block as u16);
            if !r.reverse_names(at, ino, block)
                && self.report(
                    Kind::ReverseMismatch,
                    Class::Safe,
                    objects,
                    format!(
                        "the reverse map of device block {} names {}, not block {} of inode {ino}",
                        m.addr,
                        r.reverse
                            .get(&at)
                            .map_or("nothing".to_string(), |h| format!(
                                "block {} of inode {}",
                                h.block.0, h.ino
                            )),
                        block.0
                    ),
                    Some("rewrite the reverse entry"),
                )
            {
                self.put(
                    &keys::reverse_key(loc.segment, loc.block as u16),
                    &Reverse { ino, block }.encode(),
                );
            }
        }
        Ok(())
    }

    /// `--verify-data`: every kept mapping's block against its CRC.
    pub(crate) fn verify_data(&mut self, r: &Records, b: &mut BlockState) -> Result<(), FsckError> {
        let todo: Vec<usize> = (0..r.mappings.len())
            .filter(|&i| b.kept[i] && b.loc[i].is_some())
            .collect();
        self.progress
            .step("verifying data checksums", todo.len() as u64);
        for chunk in todo.chunks(READ_BATCH_BLOCKS) {
            let addrs: Vec<u64> = chunk.iter().map(|&i| r.mappings[i].m.addr.0).collect();
            let bufs = self.read_blocks(&addrs)?;
            for (&i, buf) in chunk.iter().zip(bufs) {
                self.stats.blocks_verified += 1;
                let MapRec { ino, block, m, .. } = r.mappings[i];
                let ok = buf.is_some_and(|buf| keys::block_crc(ino, block, &buf) == m.crc);
                if !ok
                    && self.report(
                        Kind::DataChecksumMismatch,
                        Class::Destructive,
                        Objects::block(ino, block.0, m.addr),
                        format!(
                            "block {} of inode {ino} at device block {} does not match its checksum (reads fail with EIO)",
                            block.0, m.addr
                        ),
                        Some("drop the mapping (the file reads zeros there instead of EIO)"),
                    )
                {
                    self.drop_mapping(r, b, i);
                }
            }
            self.progress.advance(chunk.len() as u64);
        }
        Ok(())
    }

    /// Every set validity bit must be claimed by a kept mapping; entries whose bitmap or
    /// count a repair changed are rewritten with the count from the bitmap.
    pub(crate) fn reconcile_seginfo(&mut self, r: &Records, b: &BlockState) {
        let g = self.geometry;
        let mut claimed: HashSet<u64> = HashSet::new();
        for (i, m) in r.mappings.iter().enumerate() {
            if b.kept[i] && b.loc[i].is_some() {
                claimed.insert(m.m.addr.0);
            }
        }
        for (&(d, s), e) in &r.seginfo {
            let start = g.segment_start(s).0;
            let mut new = e.clone();
            if !e.decoded {
                new.bitmap = [0; 8];
            }
            for blk in 0..BLOCKS_PER_SEGMENT as u32 {
                let addr = start + u64::from(blk);
                let bit = 1u64 << (blk % 64);
                let word = &mut new.bitmap[blk as usize / 64];
                let stored = e.decoded && e.is_valid(blk);
                if !e.decoded || b.revalidated.contains(&addr) {
                    if claimed.contains(&addr) {
                        *word |= bit;
                    }
                    continue;
                }
                if !stored || claimed.contains(&addr) {
                    continue;
                }
                if b.released.contains(&addr)
                    || self.report(
                        Kind::ValidBlockUnclaimed,
                        Class::Safe,
                        Objects::segment(d, s),
                        format!("block {blk} of segment {s} (device block {addr}, domain {d}) is marked valid but no mapping points to it"),
                        Some("clear its validity bit (leaked space)"),
                    )
                {
                    *new.bitmap.get_mut(blk as usize / 64).expect("bounded") &= !bit;
                }
            }
            new.count = new.popcount() as u16;
            new.decoded = true;
            let changed = new.bitmap != e.bitmap;
            if changed || b.rewrite.contains(&(d, s)) {
                self.put(&keys::seginfo_key(d, s), &new.encode(s));
            }
        }
    }

    pub(crate) fn count(&mut self, r: &Records, b: &BlockState, rec: &Recovered) {
        use vfs::Kind as K;
        self.stats.inodes = r.inodes.len() as u64;
        for i in r.inodes.values() {
            match i.kind {
                K::Dir => self.stats.directories += 1,
                K::File => self.stats.files += 1,
                K::Symlink => self.stats.symlinks += 1,
                K::Fifo | K::Socket | K::CharDev | K::BlockDev => self.stats.special += 1,
            }
        }
        self.stats.mappings = b.kept.iter().filter(|&&k| k).count() as u64;
        self.count_fragments(r, b);
        self.stats.blocks_total = u64::from(self.geometry.segment_count) * BLOCKS_PER_SEGMENT;
        self.stats.domain_segments = r.seginfo.len() as u64;
        self.stats.table_segments = rec
            .pool
            .in_use()
            .iter()
            .filter(|(_, o)| *o == Owner::MetaDb)
            .count() as u64;
    }
}

impl Fsck<'_> {
    /// How the kept mappings of each file break into runs (the log's fragmentation:
    /// a file's blocks are contiguous when written together, and split by rewrites,
    /// GC and interleaved writers).
    fn count_fragments(&mut self, r: &Records, b: &BlockState) {
        let mut runs: BTreeMap<InodeNo, Vec<(u64, u64)>> = BTreeMap::new();
        for (i, m) in r.mappings.iter().enumerate() {
            if b.kept[i] {
                runs.entry(m.ino).or_default().push((m.block.0, m.m.addr.0));
            }
        }
        for blocks in runs.values_mut() {
            blocks.sort_unstable();
            let breaks = blocks
                .windows(2)
                .filter(|w| w[1] != (w[0].0 + 1, w[0].1 + 1))
                .count() as u64;
            self.stats.files_mapped += 1;
            self.stats.fragments += 1 + breaks;
            if breaks > 0 {
                self.stats.files_fragmented += 1;
            }
        }
        assert!(self.stats.fragments >= self.stats.files_mapped);
    }
}

/// What is left of extent `e` without the blocks in `drops`: its maximal runs.
fn extent_pieces(e: &Extent, drops: &BTreeSet<u64>) -> Vec<Extent> {
    let mut pieces = Vec::new();
    let mut from = e.first.0;
    for &d in drops.iter().chain(std::iter::once(&(e.last().0 + 1))) {
        if let Some(p) = e.slice(FileBlock(from), FileBlock(d)) {
            pieces.push(p);
        }
        from = d + 1;
    }
    pieces
}
