//! The shared segment pool: every segment of the segment area, free or owned by one
//! domain or by MetaDB (docs/DESIGN.md §8; augefs.txt §VI-A: "each
//! domain allocates resources on demand and AugeFS does not reserve space for each
//! domain").
//!
//! A segment moves through these states:
//!
//! ```text
//!            allocate / allocate_for_gc              release (domain)
//!   Free ───────────────────────────────> InUse ───────────────────> Pending(domain)
//!    ^                                      │                            │ checkpoint_committed
//!    │ discard_done                         │ release (MetaDB)           v (cut covers it)
//!    └──────────────────────── Discarding <─┴────────────────────────────┘
//! ```
//!
//! (Without discards, "Discarding" is skipped and the segment is free at once.)
//!
//! Invariants:
//! - A segment is handed out only from Free, so never to two owners at once.
//! - A segment released by a domain is not allocatable until a checkpoint of that domain
//!   whose cut was taken after the release has committed: the last durable checkpoint may
//!   still name live blocks in it, and recovery rolls back to that checkpoint.
//! - A segment released by MetaDB is free at once: MetaDB releases a table's segment only
//!   after the manifest edit that drops the table is durable (or when the table was never
//!   named by a durable manifest), so the manifest edit is MetaDB's checkpoint for it.
//! - A segment waiting for its discard is not allocatable, so a discard never lands on a
//!   segment that was handed out again. When an allocation would fail, segments whose
//!   discard has not been handed to the caller yet are made free without it (a discard
//!   is only a hint to the device; the segment will be overwritten): MetaDB frees tables
//!   between checkpoints, and its flushes must not starve behind discards no one issued.
//! - Ordinary allocations fail with `NoSpace` while `free <= reserve`; GC allocations use
//!   the reserve and fail only at `free == 0`. The reserve is what lets GC make progress
//!   (and free space) when ordinary writers are already told ENOSPC.
//! - Allocation is O(1): free segments wait in a FIFO queue. Released segments go to its
//!   back, so a segment just freed (and discarded) is reused last: wear and discards are
//!   spread over the device, and a discard has the longest time to complete before the
//!   segment is written again. Segment numbers carry no cost on an SSD, so there is no
//!   reason to prefer low ones.

use super::{Owner, SpaceError};
use format::{DomainId, Geometry, SegmentNo};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

/// Segments ordinary allocations leave for GC. Once ordinary writers are told ENOSPC,
/// GC runs one domain at a time (augefs.txt §VI-A: GC first selects the domain with the
/// highest garbage ratio), writing one data and one node destination segment; twice that
/// lets the next pass start before the checkpoint that frees the previous victims. Not per
/// domain: 2 per domain would hold back 12 of the 24 segments of a 64 MiB image with its
/// default 6 domains.
pub const GC_RESERVE_SEGMENTS: u32 = 4;

/// How a pool hands out space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolConfig {
    /// Free segments ordinary allocations leave for GC.
    pub reserve_segments: u32,
    /// Further free segments ordinary allocations leave for MetaDB's tables: the most
    /// its flushes and one compaction can need beyond what it holds (the engine derives
    /// it from MetaDB's configuration), so MetaDB never runs out before writers do.
    pub metadb_headroom: u32,
    /// Whether freed segments are discarded (the device supports it) before reuse.
    pub discard: bool,
}

impl PoolConfig {
    /// The default configuration: a reserve of [`GC_RESERVE_SEGMENTS`] (4 of the 24
    /// segments of a 64 MiB image, 4 of 491 on 1 GiB, 4 of 32,510 on 64 GiB; mkfs
    /// guarantees at least 4 segments per domain, so a little is always left).
    pub fn for_geometry(geometry: &Geometry, discard: bool) -> PoolConfig {
        assert!(
            geometry.segment_count > GC_RESERVE_SEGMENTS,
            "mkfs guarantees more than the reserve"
        );
        PoolConfig {
            reserve_segments: GC_RESERVE_SEGMENTS,
            metadb_headroom: 0,
            discard,
        }
    }
}

/// Counts of segments by state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolStats {
    pub free: u32,
    pub in_use: u32,
    /// Released by a domain; free after that domain's next checkpoint.
    pub pending: u32,
    /// Freed, waiting for the caller to discard them.
    pub discarding: u32,
    /// Discards skipped so far because an allocation needed the segment first.
    pub discards_skipped: u64,
    pub reserve: u32,
}

/// Taken just before a domain's checkpoint captures its state: the checkpoint covers
/// every segment the domain released before the cut, and none released after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "pass the cut to checkpoint_committed once the checkpoint is durable"]
pub struct CheckpointCut {
    domain: DomainId,
    /// Releases numbered below this are covered.
    release_no: u64,
}

impl CheckpointCut {
    pub fn domain(&self) -> DomainId {
        self.domain
    }
}

/// Freed segments the caller must discard (or skip, if the device cannot) and then give
/// back with [`SpacePool::discard_done`]. Until then they are not allocatable.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "give the batch back with discard_done, or its segments are lost until remount"]
pub struct DiscardBatch {
    segments: Vec<SegmentNo>,
}

impl DiscardBatch {
    pub fn segments(&self) -> &[SegmentNo] {
        &self.segments
    }

    pub fn is_empty(&self) -> bool {
        self.segments.is_empty()
    }
}

impl Drop for DiscardBatch {
    fn drop(&mut self) {
        // A batch dropped with segments in it would leak them until remount: a bug.
        assert!(
            self.segments.is_empty() || std::thread::panicking(),
            "discard batch of {} segments dropped without discard_done",
            self.segments.len()
        );
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Free,
    InUse(Owner),
    Pending(DomainId),
    Discarding,
}

#[derive(Debug)]
struct Inner {
    /// The truth, per segment.
    state: Vec<State>,
    /// Exactly the Free segments, oldest-freed first.
    free: VecDeque<SegmentNo>,
    /// Per domain, its Pending segments with their release numbers, in release order.
    pending: Vec<VecDeque<(u64, SegmentNo)>>,
    pending_count: u32,
    /// Discarding segments not yet handed to the caller in a batch.
    discard_queue: Vec<SegmentNo>,
    discarding_count: u32,
    /// Discards skipped because space was short.
    discards_skipped: u64,
    in_use_count: u32,
    next_release_no: u64,
}

/// The pool. Thread-safe; every operation takes one short mutex.
#[derive(Debug)]
pub struct SpacePool {
    geometry: Geometry,
    config: PoolConfig,
    inner: Mutex<Inner>,
}

impl SpacePool {
    /// A pool with every segment free (a freshly formatted image).
    pub fn new(geometry: Geometry, config: PoolConfig) -> SpacePool {
        assert!(
            config.reserve_segments < geometry.segment_count,
            "a reserve of {} leaves nothing of {} segments",
            config.reserve_segments,
            geometry.segment_count
        );
        let count = geometry.segment_count;
        SpacePool {
            geometry,
            config,
            inner: Mutex::new(Inner {
                state: vec![State::Free; count as usize],
                free: (0..count).map(SegmentNo).collect(),
                pending: vec![VecDeque::new(); geometry.domain_count as usize],
                pending_count: 0,
                discard_queue: Vec::new(),
                discarding_count: 0,
                discards_skipped: 0,
                in_use_count: 0,
                next_release_no: 0,
            }),
        }
    }

    /// Recovery: a pool in which the segments of `in_use` (from the domains' checkpoints)
    /// are owned and every other segment is free. A segment out of range, named twice, or
    /// owned by a domain the geometry lacks is corruption.
    pub fn recover(
        geometry: Geometry,
        config: PoolConfig,
        in_use: &[(SegmentNo, Owner)],
    ) -> Result<SpacePool, SpaceError> {
        let pool = SpacePool::new(geometry, config);
        pool.claim_each(in_use.iter().copied())?;
        Ok(pool)
    }

    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    pub fn config(&self) -> PoolConfig {
        self.config
    }

    /// Byte offset of `segment` on the device.
    pub fn segment_offset_bytes(&self, segment: SegmentNo) -> u64 {
        self.geometry.segment_start(segment).byte_offset()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().expect("space pool lock")
    }

    fn assert_owner_in_range(&self, owner: Owner) {
        if let Owner::Domain(d) = owner {
            assert!(
                u32::from(d.0) < self.geometry.domain_count,
                "domain {d} out of range"
            );
        }
    }

    /// A free segment for `owner`'s log or tables; `NoSpace` once only the reserve and
    /// MetaDB's headroom are left.
    pub fn allocate(&self, owner: Owner) -> Result<SegmentNo, SpaceError> {
        self.allocate_keeping(
            owner,
            self.config.reserve_segments + self.config.metadb_headroom,
        )
    }

    /// A free segment for `domain`'s garbage collection, which may use the reserve.
    pub fn allocate_for_gc(&self, domain: DomainId) -> Result<SegmentNo, SpaceError> {
        self.allocate_keeping(Owner::Domain(domain), 0)
    }

    /// A segment for MetaDB's tables, which may use the headroom and half the reserve:
    /// writers see ENOSPC while MetaDB can still flush the batches GC and deletes make (a
    /// MetaDB that cannot flush turns the whole file system read-only).
    pub fn allocate_for_metadb(&self) -> Result<SegmentNo, SpaceError> {
        self.allocate_keeping(Owner::MetaDb, self.config.reserve_segments / 2)
    }

    fn allocate_keeping(&self, owner: Owner, keep: u32) -> Result<SegmentNo, SpaceError> {
        self.assert_owner_in_range(owner);
        let mut inner = self.lock();
        if inner.free.len() as u32 <= keep {
            Self::skip_queued_discards(&mut inner);
        }
        if inner.free.len() as u32 <= keep {
            return Err(SpaceError::NoSpace {
                free: inner.free.len() as u32,
                reserve: keep,
                pending: inner.pending_count + inner.discarding_count,
            });
        }
        let segment = inner.free.pop_front().expect("free count checked");
        let state = &mut inner.state[segment.0 as usize];
        assert_eq!(*state, State::Free, "segment {segment} in the free queue");
        *state = State::InUse(owner);
        inner.in_use_count += 1;
        Ok(segment)
    }

    /// Gives back `segment`, owned by `owner`. A domain's segment becomes free after the
    /// domain's next checkpoint; MetaDB's at once (module doc). Releasing a segment the
    /// owner does not hold is a bug.
    pub fn release(&self, segment: SegmentNo, owner: Owner) {
        let mut inner = self.lock();
        let at = segment.0 as usize;
        assert!(at < inner.state.len(), "segment {segment} out of range");
        assert_eq!(
            inner.state[at],
            State::InUse(owner),
            "segment {segment} released by {owner:?}, which does not own it"
        );
        inner.in_use_count -= 1;
        match owner {
            Owner::Domain(d) => {
                let release_no = inner.next_release_no;
                inner.next_release_no += 1;
                inner.state[at] = State::Pending(d);
                inner.pending[d.0 as usize].push_back((release_no, segment));
                inner.pending_count += 1;
            }
            Owner::MetaDb => self.freed(&mut inner, segment),
        }
    }

    /// Gives back a segment `owner` was just given and never wrote or named anywhere
    /// durable: free at once, first in line again.
    pub fn unallocate(&self, segment: SegmentNo, owner: Owner) {
        let mut inner = self.lock();
        let at = segment.0 as usize;
        assert_eq!(
            inner.state[at],
            State::InUse(owner),
            "segment {segment} unallocated by {owner:?}, which does not own it"
        );
        inner.in_use_count -= 1;
        inner.state[at] = State::Free;
        inner.free.push_front(segment);
    }

    /// A segment whose freeing is durable: to the discard queue, or straight to Free.
    /// Frees every segment still waiting in the discard queue, without its discard.
    fn skip_queued_discards(inner: &mut Inner) {
        for segment in std::mem::take(&mut inner.discard_queue) {
            let state = &mut inner.state[segment.0 as usize];
            assert_eq!(*state, State::Discarding, "queued segment {segment}");
            *state = State::Free;
            inner.discarding_count -= 1;
            inner.discards_skipped += 1;
            inner.free.push_back(segment);
        }
    }

    fn freed(&self, inner: &mut Inner, segment: SegmentNo) {
        if self.config.discard {
            inner.state[segment.0 as usize] = State::Discarding;
            inner.discard_queue.push(segment);
            inner.discarding_count += 1;
        } else {
            inner.state[segment.0 as usize] = State::Free;
            inner.free.push_back(segment);
        }
    }

    /// Recovery: `segments` are owned by `owner` (named by a checkpoint or by MetaDB's
    /// manifest). Each must be free: a segment out of range or already owned means two
    /// durable structures disagree, which is corruption. O(free segments) per call.
    pub fn claim(&self, owner: Owner, segments: &[SegmentNo]) -> Result<(), SpaceError> {
        self.claim_each(segments.iter().map(|&s| (s, owner)))
    }

    /// Claims each (segment, owner) in turn, up to the first conflict; one pass over the
    /// free queue at the end, so recovery of n segments is O(n).
    fn claim_each(
        &self,
        claims: impl Iterator<Item = (SegmentNo, Owner)>,
    ) -> Result<(), SpaceError> {
        let mut inner = self.lock();
        let inner = &mut *inner;
        let mut result = Ok(());
        for (segment, owner) in claims {
            if let Err(e) = self.claim_one(inner, segment, owner) {
                result = Err(e);
                break;
            }
        }
        // The segments claimed before any error stay claimed; the queue keeps only Free.
        let state = &inner.state;
        inner.free.retain(|s| state[s.0 as usize] == State::Free);
        result
    }

    fn claim_one(
        &self,
        inner: &mut Inner,
        segment: SegmentNo,
        owner: Owner,
    ) -> Result<(), SpaceError> {
        let bad = |expected: String, got: String| {
            SpaceError::corruption(
                format!("ownership of segment {segment}"),
                format!("claim by {owner:?}"),
                expected,
                got,
            )
        };
        if let Owner::Domain(d) = owner {
            if u32::from(d.0) >= self.geometry.domain_count {
                return Err(bad(
                    format!("a domain below {}", self.geometry.domain_count),
                    d.to_string(),
                ));
            }
        }
        match inner.state.get(segment.0 as usize) {
            Some(State::Free) => {}
            Some(other) => return Err(bad("a free segment".into(), format!("{other:?}"))),
            None => {
                return Err(bad(
                    format!("a segment below {}", inner.state.len()),
                    segment.to_string(),
                ))
            }
        }
        inner.state[segment.0 as usize] = State::InUse(owner);
        inner.in_use_count += 1;
        Ok(())
    }

    /// The cut for a checkpoint of `domain` about to capture its state (see
    /// [`CheckpointCut`]). Take it while the domain's state is locked for capture.
    pub fn checkpoint_cut(&self, domain: DomainId) -> CheckpointCut {
        self.assert_owner_in_range(Owner::Domain(domain));
        CheckpointCut {
            domain,
            release_no: self.lock().next_release_no,
        }
    }

    /// Whether `cut`'s domain released segments before it (its checkpoint frees them).
    pub fn releases_before(&self, cut: &CheckpointCut) -> bool {
        self.lock().pending[cut.domain.0 as usize]
            .front()
            .is_some_and(|&(release_no, _)| release_no < cut.release_no)
    }

    /// The checkpoint taken after `cut` is durable: the segments its domain released
    /// before the cut are free (after their discard, when discards are in use). Returns
    /// every segment now waiting for a discard, MetaDB's included.
    pub fn checkpoint_committed(&self, cut: CheckpointCut) -> DiscardBatch {
        let mut inner = self.lock();
        let d = cut.domain.0 as usize;
        while let Some(&(release_no, segment)) = inner.pending[d].front() {
            if release_no >= cut.release_no {
                break;
            }
            inner.pending[d].pop_front();
            assert_eq!(inner.state[segment.0 as usize], State::Pending(cut.domain));
            inner.pending_count -= 1;
            self.freed(&mut inner, segment);
        }
        DiscardBatch {
            segments: std::mem::take(&mut inner.discard_queue),
        }
    }

    /// Every segment waiting for a discard (MetaDB frees tables between checkpoints).
    pub fn take_discards(&self) -> DiscardBatch {
        DiscardBatch {
            segments: std::mem::take(&mut self.lock().discard_queue),
        }
    }

    /// The discards of `batch` are done (or were skipped): its segments are free.
    pub fn discard_done(&self, mut batch: DiscardBatch) {
        let segments = std::mem::take(&mut batch.segments);
        let mut inner = self.lock();
        for segment in segments {
            let state = &mut inner.state[segment.0 as usize];
            assert_eq!(
                *state,
                State::Discarding,
                "segment {segment} not discarding"
            );
            *state = State::Free;
            inner.discarding_count -= 1;
            inner.free.push_back(segment);
        }
    }

    /// The owner of `segment`, if it is in use.
    pub fn owner(&self, segment: SegmentNo) -> Option<Owner> {
        match self.lock().state[segment.0 as usize] {
            State::InUse(owner) => Some(owner),
            _ => None,
        }
    }

    /// Every in-use segment with its owner, by segment number (for checkpoints and tests).
    pub fn in_use(&self) -> Vec<(SegmentNo, Owner)> {
        let inner = self.lock();
        inner
            .state
            .iter()
            .enumerate()
            .filter_map(|(i, s)| match s {
                State::InUse(owner) => Some((SegmentNo(i as u32), *owner)),
                _ => None,
            })
            .collect()
    }

    /// Domains with segments pending (freed, waiting for the domain's checkpoint).
    pub fn pending_domains(&self) -> Vec<DomainId> {
        let inner = self.lock();
        (0..inner.pending.len())
            .filter(|&d| !inner.pending[d].is_empty())
            .map(|d| DomainId(d as u16))
            .collect()
    }

    pub fn stats(&self) -> PoolStats {
        let inner = self.lock();
        let stats = PoolStats {
            free: inner.free.len() as u32,
            in_use: inner.in_use_count,
            pending: inner.pending_count,
            discarding: inner.discarding_count,
            discards_skipped: inner.discards_skipped,
            reserve: self.config.reserve_segments,
        };
        assert_eq!(
            (stats.free + stats.in_use + stats.pending + stats.discarding) as usize,
            inner.state.len(),
            "every segment in exactly one state"
        );
        stats
    }
}

/// The pool as MetaDB's `TableStore`: tables take segments owned by `Owner::MetaDb`.
///
/// The trait's `claim` cannot fail, but in the engine a manifest naming a segment a
/// domain's checkpoint also names is corruption, not a bug; the first such conflict is
/// kept and reported by [`MetaDbSpace::claim_result`], which the engine checks after
/// MetaDB opens.
#[derive(Debug)]
pub struct MetaDbSpace {
    pool: Arc<SpacePool>,
    claim_error: Mutex<Option<SpaceError>>,
}

impl MetaDbSpace {
    pub fn new(pool: Arc<SpacePool>) -> MetaDbSpace {
        MetaDbSpace {
            pool,
            claim_error: Mutex::new(None),
        }
    }

    /// The first conflict met while MetaDB claimed its tables' segments, if any.
    pub fn claim_result(&self) -> Result<(), SpaceError> {
        match self.claim_error.lock().expect("claim error lock").clone() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl metadb::TableStore for MetaDbSpace {
    fn allocate(&self) -> Result<SegmentNo, metadb::MetaDbError> {
        self.pool
            .allocate_for_metadb()
            .map_err(|_| metadb::MetaDbError::NoSpace)
    }

    fn release(&self, segment: SegmentNo) {
        self.pool.release(segment, Owner::MetaDb);
    }

    fn claim(&self, segments: &[SegmentNo]) {
        if let Err(e) = self.pool.claim(Owner::MetaDb, segments) {
            self.claim_error
                .lock()
                .expect("claim error lock")
                .get_or_insert(e);
        }
    }

    fn offset(&self, segment: SegmentNo) -> u64 {
        self.pool.segment_offset_bytes(segment)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use metadb::TableStore;

    fn geometry(domains: u32) -> Geometry {
        Geometry::compute(64 << 20, domains).unwrap()
    }

    fn d(i: u16) -> Owner {
        Owner::Domain(DomainId(i))
    }

    #[test]
    fn the_default_reserve_leaves_small_images_usable() {
        for (size, segments) in [(64u64 << 20, 24), (1 << 30, 491)] {
            let domains = Geometry::default_domain_count(size).unwrap();
            let g = Geometry::compute(size, domains).unwrap();
            assert_eq!(g.segment_count, segments);
            let pool = SpacePool::new(g, PoolConfig::for_geometry(&g, false));
            let mut usable = 0;
            while pool.allocate(Owner::MetaDb).is_ok() {
                usable += 1;
            }
            assert_eq!(usable, segments - GC_RESERVE_SEGMENTS);
        }
    }

    fn config(reserve_segments: u32, discard: bool) -> PoolConfig {
        PoolConfig {
            reserve_segments,
            metadb_headroom: 0,
            discard,
        }
    }

    #[test]
    fn hands_out_in_fifo_order_and_stops_at_the_reserve() {
        let g = geometry(2);
        assert_eq!(g.segment_count, 24);
        let pool = SpacePool::new(g, config(3, false));
        let got: Vec<u32> = (0..21).map(|_| pool.allocate(d(0)).unwrap().0).collect();
        assert_eq!(got, (0..21).collect::<Vec<_>>());
        assert_eq!(
            pool.allocate(Owner::MetaDb),
            Err(SpaceError::NoSpace {
                free: 3,
                reserve: 3,
                pending: 0
            })
        );
        for _ in 0..3 {
            pool.allocate_for_gc(DomainId(1)).unwrap();
        }
        assert!(matches!(
            pool.allocate_for_gc(DomainId(1)),
            Err(SpaceError::NoSpace { free: 0, .. })
        ));
        assert_eq!(pool.allocate(d(0)).unwrap_err().errno(), 28);
    }

    #[test]
    fn a_domain_release_waits_for_that_domains_checkpoint() {
        let pool = SpacePool::new(geometry(2), config(0, false));
        let all: Vec<SegmentNo> = (0..24).map(|_| pool.allocate(d(0)).unwrap()).collect();
        pool.release(all[5], d(0));
        assert!(matches!(
            pool.allocate(d(1)),
            Err(SpaceError::NoSpace { pending: 1, .. })
        ));
        // Another domain's checkpoint does not cover it.
        let other = pool.checkpoint_committed(pool.checkpoint_cut(DomainId(1)));
        assert!(other.is_empty());
        assert!(pool.allocate(d(1)).is_err());
        // A cut taken before the release does not cover it either.
        pool.release(all[6], d(0));
        let cut = pool.checkpoint_cut(DomainId(0));
        pool.release(all[7], d(0));
        assert!(pool.checkpoint_committed(cut).is_empty());
        assert_eq!(pool.stats().pending, 1);
        assert_eq!(pool.allocate(d(1)).unwrap(), all[5]);
        assert_eq!(pool.allocate(d(1)).unwrap(), all[6]);
        assert!(pool.allocate(d(1)).is_err());
        let later = pool.checkpoint_cut(DomainId(0));
        let _ = pool.checkpoint_committed(later);
        assert_eq!(pool.allocate(Owner::MetaDb).unwrap(), all[7]);
    }

    #[test]
    fn discards_hold_segments_until_done() {
        let pool = SpacePool::new(geometry(1), config(0, true));
        let a = pool.allocate(d(0)).unwrap();
        let t = pool.allocate(Owner::MetaDb).unwrap();
        pool.release(t, Owner::MetaDb);
        pool.release(a, d(0));
        let early = pool.take_discards();
        assert_eq!(early.segments(), &[t]);
        let batch = pool.checkpoint_committed(pool.checkpoint_cut(DomainId(0)));
        assert_eq!(batch.segments(), &[a]);
        assert_eq!(
            pool.stats(),
            PoolStats {
                free: 22,
                in_use: 0,
                pending: 0,
                discarding: 2,
                discards_skipped: 0,
                reserve: 0
            }
        );
        let handed: Vec<SegmentNo> = (0..22).map(|_| pool.allocate(d(0)).unwrap()).collect();
        assert!(!handed.contains(&a) && !handed.contains(&t));
        pool.discard_done(batch);
        pool.discard_done(early);
        assert_eq!(pool.allocate(d(0)).unwrap(), a);
        assert_eq!(pool.allocate(d(0)).unwrap(), t);
    }

    /// MetaDB frees and takes tables between checkpoints; when space is short, a queued
    /// discard is skipped rather than failing MetaDB (the CI failure of 2026-11-22: free
    /// space ran out with 16 of MetaDB's own segments waiting for a discard).
    #[test]
    fn a_short_pool_skips_queued_discards_but_never_in_flight_ones() {
        let pool = SpacePool::new(geometry(1), config(2, true));
        let held: Vec<SegmentNo> = (0..20).map(|_| pool.allocate(d(0)).unwrap()).collect();
        assert_eq!(pool.stats().free, 4);
        let in_flight = pool.allocate(Owner::MetaDb).unwrap();
        pool.release(in_flight, Owner::MetaDb);
        let batch = pool.take_discards();
        // Many flush cycles: each takes a table segment and frees the previous one.
        let mut table = pool.allocate_for_metadb().unwrap();
        for _ in 0..100 {
            let next = pool.allocate_for_metadb().unwrap();
            pool.release(table, Owner::MetaDb);
            table = next;
        }
        let stats = pool.stats();
        assert!(stats.discards_skipped >= 98, "{stats:?}");
        assert_eq!(stats.discarding, 1 + 1, "{stats:?}");
        // The segment whose discard is in flight is never handed out.
        let mut rest = Vec::new();
        while let Ok(s) = pool.allocate_for_gc(DomainId(0)) {
            rest.push(s);
        }
        assert!(!rest.contains(&in_flight) && !held.contains(&in_flight));
        pool.discard_done(batch);
        assert_eq!(pool.allocate_for_gc(DomainId(0)).unwrap(), in_flight);
    }

    #[test]
    fn recovery_rebuilds_ownership_and_rejects_conflicts() {
        let g = geometry(2);
        let in_use = [(SegmentNo(3), d(1)), (SegmentNo(0), d(0))];
        let pool = SpacePool::recover(g, config(1, false), &in_use).unwrap();
        assert_eq!(
            pool.in_use(),
            vec![(SegmentNo(0), d(0)), (SegmentNo(3), d(1))]
        );
        assert_eq!(pool.allocate(d(0)).unwrap(), SegmentNo(1));
        assert_eq!(pool.allocate(d(0)).unwrap(), SegmentNo(2));
        assert_eq!(pool.allocate(d(0)).unwrap(), SegmentNo(4));

        for bad in [
            vec![(SegmentNo(1), d(0)), (SegmentNo(1), Owner::MetaDb)],
            vec![(SegmentNo(24), d(0))],
            vec![(SegmentNo(1), d(2))],
        ] {
            let err = SpacePool::recover(g, config(1, false), &bad).unwrap_err();
            assert!(matches!(err, SpaceError::Corruption(_)), "{bad:?}: {err}");
            assert_eq!(err.errno(), 117);
        }
    }

    #[test]
    fn metadb_handle_keeps_the_table_store_contract() {
        let g = geometry(1);
        let pool =
            Arc::new(SpacePool::recover(g, config(2, false), &[(SegmentNo(1), d(0))]).unwrap());
        let store = MetaDbSpace::new(pool.clone());
        store.claim(&[SegmentNo(0), SegmentNo(2)]);
        store.claim_result().unwrap();
        assert_eq!(pool.owner(SegmentNo(2)), Some(Owner::MetaDb));
        let s = store.allocate().unwrap();
        assert_eq!(s, SegmentNo(3));
        assert_eq!(pool.owner(s), Some(Owner::MetaDb));
        assert_eq!(store.offset(SegmentNo(0)), g.segments.start_byte());
        assert_eq!(
            store.offset(s),
            g.segments.start_byte() + 3 * format::constants::SEGMENT_SIZE_BYTES
        );
        // A manifest edit is MetaDB's checkpoint: the segment is reusable at once.
        store.release(s);
        // MetaDB may use half the reserve of 2.
        while pool.stats().free > 1 {
            store.allocate().unwrap();
        }
        assert!(matches!(
            store.allocate(),
            Err(metadb::MetaDbError::NoSpace)
        ));
        assert!(pool.allocate_for_gc(DomainId(0)).is_ok());
        // A manifest naming a domain's segment is corruption, reported after open.
        store.claim(&[SegmentNo(1)]);
        assert!(matches!(
            store.claim_result(),
            Err(SpaceError::Corruption(_))
        ));
    }

    #[test]
    #[should_panic(expected = "does not own it")]
    fn releasing_a_segment_twice_is_a_bug() {
        let pool = SpacePool::new(geometry(1), config(0, false));
        let s = pool.allocate(d(0)).unwrap();
        pool.release(s, d(0));
        pool.release(s, d(0));
    }

    #[test]
    fn concurrent_allocations_never_share_a_segment() {
        let pool = Arc::new(SpacePool::new(geometry(4), config(4, false)));
        let threads: Vec<_> = (0..4u16)
            .map(|t| {
                let pool = pool.clone();
                std::thread::spawn(move || {
                    let mut mine = Vec::new();
                    for round in 0..200 {
                        match pool.allocate(d(t)) {
                            Ok(s) => mine.push(s),
                            Err(SpaceError::NoSpace { .. }) => {}
                            Err(e) => panic!("{e}"),
                        }
                        if round % 3 == 0 {
                            if let Some(s) = mine.pop() {
                                assert_eq!(pool.owner(s), Some(d(t)));
                                pool.release(s, d(t));
                            }
                        }
                        if round % 10 == 0 {
                            let cut = pool.checkpoint_cut(DomainId(t));
                            let _ = pool.checkpoint_committed(cut);
                        }
                    }
                    mine
                })
            })
            .collect();
        let mut all: Vec<SegmentNo> = threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        let held = all.len();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), held, "a segment was handed out twice");
        assert_eq!(pool.stats().in_use as usize, held);
    }
}
