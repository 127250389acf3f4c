//! One domain's in-memory state (augefs.txt §VI-A): its segment information, its log
//! heads (multi-head logging: user data and GC-moved data), the blocks reserved in them
//! for writes whose batch is not made yet, and how a batch records segment changes.
//!
//! Invariants (all under the domain's lock):
//! - A head's segment is in `seginfo` from the moment it is allocated; blocks below
//!   `next` are handed out, never twice.
//! - A segment with reserved blocks, or a head, is never a GC victim and is never freed.
//! - A sealed segment with no valid and no reserved block leaves `seginfo`, its `s` key
//!   is deleted in the same batch, and it goes back to the pool (pending until the
//!   domain's next checkpoint).

use super::keys::{self, DomainRecord};
use crate::space::pool::SpacePool;
use crate::space::seginfo::SegInfo;
use crate::space::{Owner, SpaceError};
use format::constants::BLOCKS_PER_SEGMENT;
use format::summary::SegmentKind;
use format::{BlockAddr, DomainId, Geometry, InodeNo, SegmentNo};
use metadb::WriteBatch;
use std::collections::{BTreeSet, HashMap};

const BLOCKS: u32 = BLOCKS_PER_SEGMENT as u32;

/// The log heads of a domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadKind {
    /// New user data.
    User = 0,
    /// Data moved by GC (cold: it survived at least one cleaning).
    Gc = 1,
}

#[derive(Debug, Clone, Copy)]
struct Head {
    segment: SegmentNo,
    next: u32,
}

/// A contiguous run of blocks handed out by a head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    pub start: BlockAddr,
    pub blocks: u32,
}

#[derive(Debug)]
pub struct DomainState {
    pub id: DomainId,
    pub seginfo: SegInfo,
    heads: [Option<Head>; 2],
    reserved: HashMap<SegmentNo, u32>,
    /// Segments whose `s` entry must be rewritten (or deleted) by the next batch.
    touched: BTreeSet<SegmentNo>,
    /// The receipt of the domain's newest batch.
    pub last_receipt: Option<metadb::Receipt>,
    /// Inodes of this domain created by a batch of another domain's lane and not yet
    /// named by a batch of this one: (that domain, the WAL generation the create was
    /// logged in, `u64::MAX` until it is). This lane's first batch naming one requires the
    /// other lane's newest record (`Engine::created_in`).
    pub created_elsewhere: HashMap<InodeNo, (DomainId, u64)>,
    /// `created_elsewhere`'s size after its last pruning.
    pub created_pruned_len: usize,
    /// Per other domain, the furthest of its batches a batch of this lane requires, not
    /// yet known durable: an fsync of this domain persists them too (with their data).
    pub required: Vec<Required>,
    /// Per other domain, the furthest of its batches the next batch of this lane must
    /// require (`Engine::order_after`); taken by that batch.
    pub ordered_after: Vec<Required>,
}

/// A batch of `domain`'s lane and the number of the writes its data (and its lane's
/// earlier batches') needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Required {
    pub domain: DomainId,
    pub receipt: metadb::Receipt,
    pub seq: u64,
}

impl Required {
    /// Widens this to cover `other` too (the same domain).
    pub fn merge(&mut self, other: &Required) {
        assert_eq!(self.domain, other.domain);
        if other.receipt.pos > self.receipt.pos {
            self.receipt = other.receipt;
        }
        self.seq = self.seq.max(other.seq);
    }

    /// Adds `r` to `list` (one entry per domain, each the furthest).
    pub fn merge_into(list: &mut Vec<Required>, r: &Required) {
        match list.iter_mut().find(|q| q.domain == r.domain) {
            Some(q) => q.merge(r),
            None => list.push(*r),
        }
    }

    /// Making this durable makes `other` (the same domain) durable.
    pub fn covers(&self, other: &Required) -> bool {
        self.domain == other.domain
            && self.receipt.pos >= other.receipt.pos
            && self.seq >= other.seq
    }
}

impl DomainState {
    pub fn new(id: DomainId, seginfo: SegInfo) -> DomainState {
        DomainState {
            id,
            seginfo,
            heads: [None, None],
            reserved: HashMap::new(),
            touched: BTreeSet::new(),
            last_receipt: None,
            created_elsewhere: HashMap::new(),
            created_pruned_len: 0,
            required: Vec::new(),
            ordered_after: Vec::new(),
        }
    }

    /// Segments GC must not touch: heads and segments with reserved blocks.
    pub fn busy_segments(&self) -> Vec<SegmentNo> {
        let mut busy: Vec<SegmentNo> = self.heads.iter().flatten().map(|h| h.segment).collect();
        busy.extend(self.reserved.keys().copied());
        busy
    }

    /// Free blocks left in the heads (what a write can take without a new segment).
    fn head_room(&self, kind: HeadKind) -> u32 {
        self.heads[kind as usize].map_or(0, |h| BLOCKS - h.next)
    }

    /// Hands out `count` blocks from the `kind` head, taking new segments from the pool
    /// as needed (all or nothing: on `NoSpace` nothing is taken). The blocks are
    /// reserved until [`Self::unreserve`].
    pub fn reserve(
        &mut self,
        pool: &SpacePool,
        geometry: &Geometry,
        kind: HeadKind,
        count: u32,
    ) -> Result<Vec<Run>, SpaceError> {
        assert!(count > 0);
        let room = self.head_room(kind);
        let needed = count.saturating_sub(room).div_ceil(BLOCKS);
        let mut fresh = Vec::with_capacity(needed as usize);
        for _ in 0..needed {
            let got = match kind {
                HeadKind::User => pool.allocate(Owner::Domain(self.id)),
                HeadKind::Gc => pool.allocate_for_gc(self.id),
            };
            match got {
                Ok(s) => fresh.push(s),
                Err(e) => {
                    // Never written and never named by a batch: straight back.
                    for s in fresh {
                        pool.unallocate(s, Owner::Domain(self.id));
                    }
                    return Err(e);
                }
            }
        }
        let mut runs = Vec::new();
        let mut left = count;
        let mut fresh = fresh.into_iter();
        while left > 0 {
            let head = match self.heads[kind as usize] {
                Some(h) if h.next < BLOCKS => h,
                old => {
                    if let Some(old) = old {
                        self.touched.insert(old.segment);
                    }
                    let segment = fresh.next().expect("segments counted above");
                    self.seginfo.add(segment, SegmentKind::Data);
                    Head { segment, next: 0 }
                }
            };
            let take = left.min(BLOCKS - head.next);
            runs.push(Run {
                start: BlockAddr(geometry.segment_start(head.segment).0 + u64::from(head.next)),
                blocks: take,
            });
            *self.reserved.entry(head.segment).or_insert(0) += take;
            self.heads[kind as usize] = Some(Head {
                segment: head.segment,
                next: head.next + take,
            });
            left -= take;
        }
        assert!(fresh.next().is_none(), "every new segment used");
        Ok(runs)
    }

    /// The blocks of `runs` are no longer reserved (their batch is made, or they were
    /// abandoned: then they stay invalid, garbage for GC).
    pub fn unreserve(&mut self, geometry: &Geometry, runs: &[Run]) {
        for run in runs {
            let segment = geometry
                .segment_of(run.start)
                .expect("a run is in the segment area");
            let r = self
                .reserved
                .get_mut(&segment)
                .unwrap_or_else(|| panic!("segment {segment} has no reservation"));
            *r = r.checked_sub(run.blocks).expect("reservations balance");
            if *r == 0 {
                self.reserved.remove(&segment);
            }
            self.touched.insert(segment);
        }
    }

    /// `addr` (a block of this domain) now holds live data.
    pub fn mark_valid(&mut self, geometry: &Geometry, addr: BlockAddr) {
        let (segment, block) = locate(geometry, addr);
        self.seginfo.mark_valid(segment, block);
        self.touched.insert(segment);
    }

    /// `addr` no longer holds live data.
    pub fn invalidate(&mut self, geometry: &Geometry, addr: BlockAddr) {
        let (segment, block) = locate(geometry, addr);
        self.seginfo.invalidate(segment, block);
        self.touched.insert(segment);
    }

    /// Whether `addr` holds live data of this domain.
    pub fn is_valid(&self, geometry: &Geometry, addr: BlockAddr) -> bool {
        let (segment, block) = locate(geometry, addr);
        self.seginfo
            .get(segment)
            .is_some_and(|info| info.is_valid(block))
    }

    /// Adds the segment-information changes since the last batch, and the domain record,
    /// to `batch`; frees emptied sealed segments (to the pool's pending state).
    pub fn finish_batch(&mut self, pool: &SpacePool, batch: &mut WriteBatch, record: DomainRecord) {
        let heads: Vec<SegmentNo> = self.heads.iter().flatten().map(|h| h.segment).collect();
        for segment in std::mem::take(&mut self.touched) {
            let Some(info) = self.seginfo.get(segment) else {
                continue;
            };
            let key = keys::seginfo_key(self.id, segment);
            let idle = !heads.contains(&segment) && !self.reserved.contains_key(&segment);
            if info.valid_blocks() == 0 && idle {
                self.seginfo.remove(segment);
                batch.delete(key.to_vec());
                pool.release(segment, Owner::Domain(self.id));
            } else {
                batch.put(key.to_vec(), self.seginfo.encode_entry(segment).to_vec());
            }
        }
        batch.put(keys::domain_key(self.id).to_vec(), record.encode().to_vec());
    }

    /// `segment`'s entry is rewritten (or the segment freed) by the next batch.
    pub fn touch(&mut self, segment: SegmentNo) {
        self.touched.insert(segment);
    }

    /// Every segment with no valid block is looked at by the next batch (after
    /// recovery: a segment emptied by a batch whose free did not complete).
    pub fn touch_empty(&mut self) {
        let empty: Vec<SegmentNo> = self
            .seginfo
            .iter()
            .filter(|(_, info)| info.valid_blocks() == 0)
            .map(|(s, _)| s)
            .collect();
        self.touched.extend(empty);
    }

    /// Seals every head (recovery, or a domain giving up its open segments at unmount):
    /// their unwritten tails become garbage for GC.
    pub fn seal_heads(&mut self) {
        for head in self.heads.iter_mut() {
            if let Some(h) = head.take() {
                self.touched.insert(h.segment);
            }
        }
    }
}

/// (segment, block in segment) of `addr`; an address outside the segment area is a bug.
pub fn locate(geometry: &Geometry, addr: BlockAddr) -> (SegmentNo, u32) {
    let segment = geometry
        .segment_of(addr)
        .unwrap_or_else(|| panic!("block {addr} outside the segment area"));
    let block = (addr.0 - geometry.segment_start(segment).0) as u32;
    (segment, block)
}
