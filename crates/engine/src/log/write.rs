//! The write path (docs/DESIGN.md §9.4): reserve blocks in the domain's head, submit the
//! data, make the batch (mappings, reverse map, segment information, domain record, the
//! caller's operations) under the domain's lock in the domain's lane, then fsync by the
//! asynchronous or the ordered path. Also punch (unmap) and foreground cleaning.
//!
//! Invariants:
//! - A write's data-write number is issued, and its data submitted, before its batch is
//!   made (a memtable flush waits for the data of the batches it holds), and the number
//!   is completed whatever happens after.
//! - The persist of an fsync waits only for numbers issued before its batch, read under
//!   the domain's lock: a later number may belong to a writer waiting inside MetaDB.

mod many;

pub use many::FileWrite;

use super::domain::{DomainState, HeadKind, Required, Run};
use super::index::NewBlock;
use super::keys::{self, DomainRecord, FileBlock};
use super::{Domain, Durability, Engine, FsyncPath, BLOCK};
use crate::error::EngineError;
use device::{AlignedBuf, IoCause, IoRequest};
use format::{BlockAddr, DomainId, InodeNo};
use metadb::{CallerWrites, Receipt, WriteBatch};
use std::sync::atomic::Ordering;
use std::sync::MutexGuard;

/// The caller's operations for a write's or a punch's batch.
#[derive(Clone, Copy)]
pub enum Extra<'a> {
    /// These operations.
    Batch(&'a WriteBatch),
    /// The operations this function makes from the change in the file's mapped block
    /// count (blocks newly mapped minus blocks unmapped), known only under the domain's
    /// lock: how a caller keeps an exact allocated-block count in its inode record in
    /// the same batch.
    Counted(&'a dyn Fn(i64) -> WriteBatch),
}

impl std::fmt::Debug for Extra<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Extra::Batch(b) => f.debug_tuple("Batch").field(b).finish(),
            Extra::Counted(_) => f.write_str("Counted"),
        }
    }
}

impl Extra<'_> {
    /// Appends the operations to `batch`, given the mapped-block change.
    fn append_to(&self, batch: &mut WriteBatch, mapped_delta: i64) {
        match self {
            Extra::Batch(extra) => append(batch, extra),
            Extra::Counted(make) => append(batch, &make(mapped_delta)),
        }
    }
}

impl<'a> From<&'a WriteBatch> for Extra<'a> {
    fn from(batch: &'a WriteBatch) -> Self {
        Extra::Batch(batch)
    }
}

/// Where a write's blocks go.
#[derive(Clone, Copy, Debug)]
pub enum Ranges<'a> {
    /// One run from this block, as long as the data.
    From(FileBlock),
    /// (first block, block count), ascending and not overlapping; the data holds
    /// their blocks one after the other.
    These(&'a [(FileBlock, u64)]),
}

impl From<FileBlock> for Ranges<'_> {
    fn from(first: FileBlock) -> Self {
        Ranges::From(first)
    }
}

impl<'a> From<&'a [(FileBlock, u64)]> for Ranges<'a> {
    fn from(ranges: &'a [(FileBlock, u64)]) -> Self {
        Ranges::These(ranges)
    }
}

/// How a write or a punch is applied besides its blocks.
#[derive(Clone, Copy, Debug)]
pub struct WriteOptions<'a> {
    /// The caller's operations, in the same atomic batch.
    pub extra: Extra<'a>,
    /// Buffered, or durable when the call returns.
    pub durability: Durability,
    /// With [`Durability::Fsync`] (writes only): inodes whose domains' batches so far
    /// become durable by the same persist, as an fsync of each would make them.
    pub also: &'a [InodeNo],
}

impl<'a> WriteOptions<'a> {
    /// `extra` in the same batch, with `durability`.
    pub fn new(extra: impl Into<Extra<'a>>, durability: Durability) -> Self {
        WriteOptions {
            extra: extra.into(),
            durability,
            also: &[],
        }
    }

    /// Durable when the call returns, together with the batches of `also`'s domains.
    pub fn fsync_also(extra: impl Into<Extra<'a>>, also: &'a [InodeNo]) -> Self {
        WriteOptions {
            also,
            ..WriteOptions::new(extra, Durability::Fsync)
        }
    }
}

impl Engine {
    /// Writes `data` (whole 4 KiB blocks) as blocks of `ino` in one atomic batch with
    /// the caller's operations: from one block on, or as several ranges (how a page
    /// cache writes back a file's scattered dirty blocks at once).
    ///
    /// With [`Durability::Fsync`] the call is an fsync of `ino` and of `opts.also` when
    /// it returns: one MetaDB persist and one device flush, the WAL writes in flight
    /// together with the data's (an fsync of a file with dirty pages costs one write
    /// latency and one flush, not two writes).
    pub fn write<'r>(
        &self,
        ino: InodeNo,
        ranges: impl Into<Ranges<'r>>,
        data: &[u8],
        opts: WriteOptions<'_>,
    ) -> Result<(), EngineError> {
        assert!(
            opts.also.is_empty() || opts.durability == Durability::Fsync,
            "`also` is for durable writes"
        );
        let one;
        let ranges = match ranges.into() {
            Ranges::From(first) => {
                one = [(first, (data.len() / BLOCK) as u64)];
                &one[..]
            }
            Ranges::These(r) => r,
        };
        self.write_ranges_also(ino, ranges, data, opts.extra, opts.durability, opts.also)
    }

    fn write_ranges_also(
        &self,
        ino: InodeNo,
        ranges: &[(FileBlock, u64)],
        data: &[u8],
        extra: Extra<'_>,
        durability: Durability,
        also: &[InodeNo],
    ) -> Result<(), EngineError> {
        let pieces = [data];
        let blocks = Blocks::new(ino, ranges, &pieces, extra);
        self.check_writable()?;
        let domain = self.domain(ino);
        match self.config.fsync_path {
            FsyncPath::Async => self.write_async(domain, &blocks, durability, also),
            FsyncPath::Ordered => {
                self.write_ordered(domain, &blocks, durability)?;
                self.fsync_all(also)
            }
        }
    }

    /// Reserves `count` blocks in `domain`'s `kind` head, cleaning and checkpointing to
    /// make room when the pool runs short; ENOSPC only when that cannot help.
    pub(super) fn reserve<'a>(
        &'a self,
        domain: &'a Domain,
        kind: HeadKind,
        count: u32,
    ) -> Result<(MutexGuard<'a, DomainState>, Vec<Run>), EngineError> {
        let mut passes = 0;
        loop {
            let mut state = domain.lock();
            match state.reserve(&self.pool, &self.geometry, kind, count) {
                Ok(runs) => return Ok((state, runs)),
                Err(e) => {
                    drop(state);
                    if passes >= 2 || kind == HeadKind::Gc {
                        return Err(e.into());
                    }
                    passes += 1;
                    self.make_room()?;
                }
            }
        }
    }

    /// Foreground cleaning until an ordinary allocation can succeed: checkpoint the
    /// domains with pending segments (they become free), else clean the segment with the
    /// fewest valid blocks. ENOSPC when nothing is left to clean.
    pub(super) fn make_room(&self) -> Result<(), EngineError> {
        let config = self.pool.config();
        let kept = config.reserve_segments + config.metadb_headroom;
        for _ in 0..=self.geometry.segment_count {
            // Tables MetaDB freed since the last checkpoint wait for their discard.
            self.discard(self.pool.take_discards());
            let stats = self.pool.stats();
            if stats.free > kept {
                return Ok(());
            }
            let pending = self.pool.pending_domains();
            if !pending.is_empty() {
                for d in pending {
                    self.checkpoint(d)?;
                }
                continue;
            }
            if self
                .gc_pass(crate::space::victim::Policy::Greedy)?
                .is_none()
            {
                break;
            }
        }
        let stats = self.pool.stats();
        Err(crate::space::SpaceError::NoSpace {
            free: stats.free,
            reserve: kept,
            pending: stats.pending,
        }
        .into())
    }

    /// `count` reserved blocks of `domain`'s `kind` head and the numbers of `writes` data
    /// writes, issued under the domain's lock (returned held), so numbers follow the
    /// domain's batches.
    #[allow(clippy::type_complexity)]
    pub(super) fn reserve_numbered<'a>(
        &'a self,
        domain: &'a Domain,
        kind: HeadKind,
        count: u32,
        writes: usize,
    ) -> Result<(MutexGuard<'a, DomainState>, Vec<Run>, Vec<u64>), EngineError> {
        assert!(
            writes > 0 && writes <= count as usize,
            "{writes} writes of {count} blocks"
        );
        let (state, runs) = self.reserve(domain, kind, count)?;
        let seqs = (0..writes).map(|_| domain.tracker.issue()).collect();
        Ok((state, runs, seqs))
    }

    /// Writes `data` (its pieces one after the other) to `runs` and waits for it. The
    /// writes numbered `seqs` are complete when it returns, whatever happened; with
    /// `flush` they are durable too (a device flush after they completed).
    pub(super) fn write_data(
        &self,
        domain: &Domain,
        runs: &[Run],
        data: &[&[u8]],
        seqs: &[u64],
        cause: IoCause,
        flush: bool,
    ) -> Result<(), EngineError> {
        let written = self
            .device
            .queue()
            .map_err(Into::into)
            .and_then(|mut queue| {
                submit_runs(&mut queue, runs, data, cause).and_then(|()| reap(&mut queue))
            });
        for &seq in seqs {
            domain.tracker.complete(seq);
        }
        self.failing(written)?;
        if flush {
            let prefix = domain.tracker.completed_prefix();
            self.failing(self.device.flush(cause).map_err(Into::into))?;
            domain.tracker.durable_after_flush(prefix);
        }
        Ok(())
    }

    /// The data and its index batch are issued together; with `Durability::Fsync` the
    /// data's device writes are still in flight while MetaDB issues the WAL writes, and
    /// are reaped (the write's number completed) in the persist's hook, before the one
    /// flush (so `also`'s domains are made durable too).
    fn write_async(
        &self,
        domain: &Domain,
        blocks: &Blocks<'_>,
        durability: Durability,
        also: &[InodeNo],
    ) -> Result<(), EngineError> {
        assert!(
            also.is_empty() || durability == Durability::Fsync,
            "inodes to persist only with an fsync"
        );
        let count = blocks.count();
        // What `also` needs, read before this write's number is issued: a domain lock
        // may be held by a writer waiting (through a WAL rotation) for a persist that
        // waits for this number.
        let mut also_parts = Vec::new();
        self.parts_of(also, &mut also_parts);
        let queue = self.device.queue()?;
        let (mut state, runs, seqs) = self.reserve_numbered(domain, HeadKind::User, count, 1)?;
        let seq = seqs[0];
        // From here the write's number must complete whatever happens: `inflight`
        // completes it when reaped, at the latest when dropped.
        let mut inflight = InFlight {
            queue: Some(queue),
            tracker: &domain.tracker,
            seq,
        };
        let queue = inflight.queue.as_mut().expect("not reaped yet");
        let submitted = submit_runs(queue, &runs, blocks.data, IoCause::UserData);
        let made = submitted.and_then(|()| self.log_blocks(&mut state, domain, blocks, &runs, seq));
        let own_required = match (&made, durability) {
            (Ok(_), Durability::Fsync) => state.required.clone(),
            _ => Vec::new(),
        };
        drop(state);
        let receipt = match made {
            Ok(receipt) if durability == Durability::Fsync => receipt,
            // Buffered, or the batch failed: the data is reaped now.
            made => {
                self.failing(inflight.reap())?;
                self.failing(made)?;
                self.counted_written(count);
                return Ok(());
            }
        };
        let mut parts = vec![Required {
            domain: domain.id,
            receipt,
            seq,
        }];
        for r in own_required.iter().chain(&also_parts) {
            merge_part(&mut parts, r);
        }
        let persisted = self.persist_domains_after(parts, 1, &mut || self.failing(inflight.reap()));
        // A persist that failed before its hook still completes the write's number.
        let reaped = inflight.reap();
        persisted?;
        self.failing(reaped)?;
        self.counted_written(count);
        Ok(())
    }

    fn counted_written(&self, count: u32) {
        self.counters
            .blocks_written
            .fetch_add(u64::from(count), Ordering::Relaxed);
    }

    /// F2FS's order: the data, a wait for it (and a device flush for an fsync), then
    /// the batch, and for an fsync its persist.
    fn write_ordered(
        &self,
        domain: &Domain,
        blocks: &Blocks<'_>,
        durability: Durability,
    ) -> Result<(), EngineError> {
        let fsync = durability == Durability::Fsync;
        let (receipt, seq) = self.write_in_order(domain, &[blocks], fsync, &mut 0)?;
        if fsync {
            // The data is durable already; the persist also covers what the batch requires.
            self.persist_domain(domain, receipt, seq)?;
        }
        Ok(())
    }

    /// Puts `batch` in `domain`'s own WAL lane, under the domain's lock, and keeps its
    /// receipt for later fsyncs and checkpoints of the domain. The batch requires what
    /// the lane must not survive without: the records `Engine::order_after` named, and,
    /// if `ino` (the inode the batch changes) was created in another lane and this is
    /// the lane's first batch naming it, that lane's newest record (see
    /// [`Engine::created_in`]).
    pub(super) fn put_batch(
        &self,
        domain: &Domain,
        state: &mut DomainState,
        ino: Option<InodeNo>,
        batch: &WriteBatch,
    ) -> Result<Receipt, EngineError> {
        let mut requires = std::mem::take(&mut state.ordered_after);
        let created = ino
            .and_then(|ino| state.created_elsewhere.remove(&ino))
            .and_then(|(creator, _)| {
                *self.domains[usize::from(creator.0)]
                    .last_logged
                    .lock()
                    .expect("last logged lock")
            });
        if let Some(r) = created {
            Required::merge_into(&mut requires, &r);
        }
        debug_assert!(requires.iter().all(|r| r.domain != domain.id));
        let with_requirements;
        let batch = if requires.is_empty() {
            batch
        } else {
            with_requirements = {
                let mut b = batch.clone();
                for r in &requires {
                    b.require(r.receipt.pos);
                }
                b
            };
            &with_requirements
        };
        let written =
            self.db
                .write_pinned(domain.id.0 as usize, batch, metadb::Durability::Buffered);
        // After the batch is applied (or failed), before its writer returns.
        let mut last = None;
        for ino in batch
            .ops()
            .filter_map(|(_, key, _)| keys::index_key_inode(key))
        {
            if last != Some(ino) {
                self.map_cache.invalidate(ino);
                last = Some(ino);
            }
        }
        let receipt = match written {
            Ok(receipt) => receipt,
            Err(e) => {
                // Not logged: the lane's next batch still owes the orderings.
                for r in &requires {
                    Required::merge_into(&mut state.ordered_after, r);
                }
                return Err(e.into());
            }
        };
        state.last_receipt = Some(receipt);
        for r in &requires {
            Required::merge_into(&mut state.required, r);
        }
        // Under the lock, with the number: every write numbered up to it has its batch
        // in the lane already or completes without MetaDB (the rule of `fsync`), so a
        // persist that requires this batch may wait for them.
        *domain.last_logged.lock().expect("last logged lock") = Some(Required {
            domain: domain.id,
            receipt,
            seq: domain.tracker.issued(),
        });
        Ok(receipt)
    }

    /// Orders `lane`'s domain lane after everything logged so far in `after`'s: the
    /// next batch of `lane`'s domain (and so, each lane recovering as a prefix, every
    /// later one) requires `after`'s domain's newest record, and what `after`'s next
    /// batch is owed to require, and a persist of the lane persists those too, with
    /// their data. Nothing when both are one domain or
    /// `after`'s lane has logged nothing. How a batch that changes another lane's keys
    /// (a directory's entries, changed by a deletion in the file's lane) is ordered both
    /// ways with that lane (docs/DESIGN.md §6.3 "Dependencies between lanes"): called for
    /// its own lane before it is logged, for the other lane after.
    pub fn order_after(&self, lane: InodeNo, after: InodeNo) {
        let (to, from) = (self.domain(lane), self.domain(after));
        if to.id == from.id {
            return;
        }
        // What `after`'s lane is ordered after itself, not yet taken by a batch of it
        // (a deletion logged elsewhere that its next batch must follow): `lane` follows
        // that too. Taken first, under `after`'s domain lock alone.
        let owed = from.lock().ordered_after.clone();
        // A leaf lock, released before the domain lock is taken.
        let newest = *from.last_logged.lock().expect("last logged lock");
        let mut state = to.lock();
        for r in newest.iter().chain(&owed).filter(|r| r.domain != to.id) {
            Required::merge_into(&mut state.ordered_after, r);
        }
    }

    /// Notes that the batch creating `child` goes to `creator`'s lane. If `child`'s own
    /// domain is another, the first batch of that domain naming `child` (its data, its
    /// attributes, entries of a new directory) requires everything logged in the
    /// creating lane by then, the create included: a crash never keeps a file's or
    /// directory's contents while losing its name (docs/SEMANTICS.md §2), and persisting
    /// that batch persists the create in the same device flush. `logged`: the create's
    /// generation once it is logged (`None` before: noted first, so no batch naming
    /// `child` can come before the note).
    fn created_in(&self, child: InodeNo, creator: DomainId, logged: Option<u64>) {
        let domain = self.domain(child);
        if domain.id == creator {
            return;
        }
        let mut state = domain.lock();
        match logged {
            None => {
                state.created_elsewhere.insert(child, (creator, u64::MAX));
            }
            Some(generation) => {
                if let Some(entry) = state.created_elsewhere.get_mut(&child) {
                    entry.1 = generation;
                }
            }
        }
        if state.created_elsewhere.len() > (2 * state.created_pruned_len).max(4096) {
            // A create logged in a generation before the current one is durable (a
            // memtable switch persists its generation whole): nothing needs to require it.
            let current = self.db.generation();
            state
                .created_elsewhere
                .retain(|_, &mut (_, g)| g >= current);
            state.created_pruned_len = state.created_elsewhere.len();
        }
    }

    /// Makes the batch that points the blocks of `blocks` at `runs` (reserved, now
    /// written or in flight, by the write numbered `seq`), invalidating what they
    /// replace, and puts it in the domain's lane. Under the domain's lock.
    fn log_blocks(
        &self,
        state: &mut DomainState,
        domain: &Domain,
        blocks: &Blocks<'_>,
        runs: &[Run],
        seq: u64,
    ) -> Result<Receipt, EngineError> {
        assert_eq!(
            runs.iter().map(|r| r.blocks).sum::<u32>(),
            blocks.count(),
            "runs hold the write's blocks"
        );
        let ino = blocks.ino;
        let mut view = self.load_index(ino, blocks.ranges)?;
        let mut batch = WriteBatch::new();
        let addrs = runs
            .iter()
            .flat_map(|r| (0..u64::from(r.blocks)).map(move |i| BlockAddr(r.start.0 + i)));
        let new: Vec<NewBlock> = addrs
            .enumerate()
            .map(|(i, addr)| NewBlock {
                block: blocks.numbers[i],
                addr,
                crc: blocks.crcs[i],
            })
            .collect();
        let holes = self.map_blocks(state, &mut batch, &mut view, &new, seq);
        state.unreserve(&self.geometry, runs);
        self.finish_batch(state, domain, &mut batch);
        blocks.extra.append_to(&mut batch, holes as i64);
        self.put_batch(domain, state, Some(ino), &batch)
    }

    pub(super) fn finish_batch(
        &self,
        state: &mut DomainState,
        domain: &Domain,
        batch: &mut WriteBatch,
    ) {
        let record = DomainRecord {
            durable_seq: domain.tracker.durable(),
            issued_seq: domain.tracker.issued(),
            elapsed_ns: state.seginfo.now_ns(),
        };
        state.finish_batch(&self.pool, batch, record);
    }

    /// Makes `receipt` (a batch of `domain`) and every earlier batch of the domain
    /// durable together with all data they name (writes up to `seq`), and with them what
    /// those batches require in other domains' lanes, with those domains' data.
    pub(super) fn persist_domain(
        &self,
        domain: &Domain,
        receipt: Receipt,
        seq: u64,
    ) -> Result<(), EngineError> {
        self.persist_domains(vec![Required {
            domain: domain.id,
            receipt,
            seq,
        }])
    }

    /// Makes each of `parts` (a domain, a batch of its lane, the writes its data needs)
    /// durable, with everything they transitively require (`DomainState::required`),
    /// in one MetaDB persist and one device flush: the flush is requested after every
    /// included domain's writes up to its number completed, so no record it makes
    /// durable can be dropped at recovery for data that never arrived (which would drop
    /// the rest of its lane and, through a requirement, an acknowledged batch of another
    /// lane). Called holding no domain lock.
    pub(super) fn persist_domains(&self, parts: Vec<Required>) -> Result<(), EngineError> {
        self.persist_domains_after(parts, 0, &mut || Ok(()))
    }

    /// [`Engine::persist_domains`] that runs `first` in MetaDB's hook, while the WAL
    /// writes are in flight and before waiting for the included domains' writes (the
    /// caller reaps its own there), or earlier: before waiting for a domain's lock (its
    /// holder may wait, through a WAL rotation, for a persist that waits for the
    /// caller's writes). `first` must do nothing when called again, and may not run if
    /// the persist fails before. The requirements of `parts[..expanded]` are merged in
    /// already.
    fn persist_domains_after(
        &self,
        mut parts: Vec<Required>,
        expanded: usize,
        first: &mut dyn FnMut() -> Result<(), EngineError>,
    ) -> Result<(), EngineError> {
        let mut i = expanded;
        while i < parts.len() {
            let domain = &self.domains[usize::from(parts[i].domain.0)];
            let state = match domain.try_lock() {
                Some(state) => state,
                None => {
                    first()?;
                    domain.lock()
                }
            };
            let required = state.required.clone();
            drop(state);
            for r in &required {
                merge_part(&mut parts, r);
            }
            i += 1;
        }
        let receipts: Vec<Receipt> = parts.iter().map(|p| p.receipt).collect();
        let mut prefixes = vec![0; parts.len()];
        let mut failed_first = None;
        let r = self.db.persist_covering(&receipts, &mut || {
            if let Err(e) = first() {
                // Reported as is below; MetaDB only needs to know not to flush.
                failed_first = Some(e);
                return Err(metadb::MetaDbError::ReadOnly(
                    "the caller's device writes failed".into(),
                ));
            }
            // A flush is needed for the data only if some of it was not covered by one
            // yet (an fsync of a directory, or of a file written back and flushed
            // before, has none: in PMR mode it then costs no device flush at all).
            let mut unflushed = false;
            for (p, prefix) in parts.iter().zip(&mut prefixes) {
                let tracker = &self.domains[usize::from(p.domain.0)].tracker;
                *prefix = tracker.wait_completed(p.seq);
                unflushed |= tracker.durable() < p.seq;
            }
            if unflushed {
                return Ok(CallerWrites::Unflushed);
            }
            // Perhaps no flush follows: claim nothing beyond what is durable already.
            prefixes.fill(0);
            Ok(CallerWrites::Durable)
        });
        if let Some(e) = failed_first {
            return Err(e);
        }
        self.failing(r.map_err(Into::into))?;
        for (p, prefix) in parts.iter().zip(prefixes) {
            let domain = &self.domains[usize::from(p.domain.0)];
            domain.tracker.durable_after_flush(prefix);
            // What this persist covered no longer needs persisting with the domain.
            domain
                .lock()
                .required
                .retain(|r| !parts.iter().any(|q| q.domain == r.domain && q.covers(r)));
        }
        Ok(())
    }

    /// fsync of writes made with `Durability::Buffered`: makes every batch of `ino`'s
    /// domain durable with its data.
    pub fn fsync(&self, ino: InodeNo) -> Result<(), EngineError> {
        self.fsync_all(&[ino])
    }

    /// [`Engine::fsync`] of every inode of `inos` (of one or several domains) with one
    /// MetaDB persist and one device flush.
    pub fn fsync_all(&self, inos: &[InodeNo]) -> Result<(), EngineError> {
        if inos.is_empty() {
            return Ok(());
        }
        self.check_writable()?;
        let mut parts: Vec<Required> = Vec::with_capacity(inos.len());
        self.parts_of(inos, &mut parts);
        if parts.is_empty() {
            return Ok(());
        }
        self.persist_domains(parts)
    }

    /// Adds to `parts` what an fsync of `inos` persists: each domain's batches and
    /// writes so far (a domain in `parts` already is left as it is).
    fn parts_of(&self, inos: &[InodeNo], parts: &mut Vec<Required>) {
        for &ino in inos {
            let domain = self.domain(ino);
            if parts.iter().any(|p| p.domain == domain.id) {
                continue;
            }
            let state = domain.lock();
            if let Some(receipt) = state.last_receipt {
                parts.push(Required {
                    domain: domain.id,
                    receipt,
                    seq: domain.tracker.issued(),
                });
            }
        }
    }

    /// Applies `batch` (the caller's metadata: inodes, directory entries) atomically in
    /// the WAL lane of `ino`'s domain, ordered with that domain's other batches, so an
    /// fsync of `ino` (or of any file of the domain) makes it durable too.
    pub fn put_metadata(
        &self,
        ino: InodeNo,
        batch: &WriteBatch,
        durability: Durability,
    ) -> Result<(), EngineError> {
        self.put_in_lane(ino, std::borrow::Cow::Borrowed(batch), durability, None)
            .map(drop)
    }

    /// [`Engine::put_metadata`] of the batch creating inode `created` (a file, directory
    /// or symlink named in directory `ino`), with records `last` adds under the domain's
    /// lock, just before the batch takes its place in the lane: batches built this way by
    /// threads that share no other lock enter the lane in the order `last` ran in (the
    /// VFS builds a directory's record here when creates in it run in parallel).
    pub fn put_create(
        &self,
        ino: InodeNo,
        created: InodeNo,
        batch: WriteBatch,
        durability: Durability,
        mut last: impl FnMut(&mut WriteBatch),
    ) -> Result<(), EngineError> {
        self.check_writable()?;
        let creator = self.domain_of(ino);
        self.created_in(created, creator, None);
        let receipt = self.put_in_lane(
            ino,
            std::borrow::Cow::Owned(batch),
            durability,
            Some(&mut last),
        )?;
        self.created_in(created, creator, Some(receipt.pos.generation));
        Ok(())
    }

    fn put_in_lane(
        &self,
        ino: InodeNo,
        batch: std::borrow::Cow<'_, WriteBatch>,
        durability: Durability,
        last: Option<&mut dyn FnMut(&mut WriteBatch)>,
    ) -> Result<Receipt, EngineError> {
        self.check_writable()?;
        let domain = self.domain(ino);
        let mut state = domain.lock();
        let batch = match last {
            Some(last) => {
                let mut batch = batch.into_owned();
                last(&mut batch);
                std::borrow::Cow::Owned(batch)
            }
            None => batch,
        };
        let receipt = self.failing(self.put_batch(domain, &mut state, Some(ino), &batch))?;
        let seq = domain.tracker.issued();
        drop(state);
        if durability == Durability::Fsync {
            self.persist_domain(domain, receipt, seq)?;
        }
        Ok(receipt)
    }

    /// Unmaps blocks `from..` (`to` exclusive, or to the end of the file) of `ino` and
    /// applies the caller's operations in the same batch (truncate, hole punching,
    /// unlink).
    pub fn punch(
        &self,
        ino: InodeNo,
        from: FileBlock,
        to: Option<FileBlock>,
        opts: WriteOptions<'_>,
    ) -> Result<(), EngineError> {
        assert!(opts.also.is_empty(), "a punch persists only its own domain");
        let WriteOptions {
            extra, durability, ..
        } = opts;
        self.check_writable()?;
        let domain = self.domain(ino);
        let to = to.unwrap_or(FileBlock(u64::MAX));
        let mut state = domain.lock();
        let mut batch = WriteBatch::new();
        let mut unmapped = 0;
        if to > from {
            let mut view = self.load_index(ino, &[(from, to.0 - from.0)])?;
            unmapped = self.unmap_blocks(&mut state, &mut batch, &mut view, from, to);
        }
        self.finish_batch(&mut state, domain, &mut batch);
        extra.append_to(&mut batch, -(unmapped as i64));
        let receipt = self.failing(self.put_batch(domain, &mut state, Some(ino), &batch))?;
        // Read under the lock: a number issued later may belong to a writer waiting
        // inside MetaDB, which the persist must not wait for.
        let seq = domain.tracker.issued();
        drop(state);
        if durability == Durability::Fsync {
            self.persist_domain(domain, receipt, seq)?;
        }
        Ok(())
    }
}

/// One write's blocks with their CRCs, as `Engine::write` prepared them.
struct Blocks<'a> {
    ino: InodeNo,
    /// (first block, count), ascending.
    ranges: &'a [(FileBlock, u64)],
    /// The file block of each 4 KiB block of `data`.
    numbers: Vec<FileBlock>,
    /// The blocks' bytes, in pieces of whole blocks, one after the other.
    data: &'a [&'a [u8]],
    crcs: Vec<u32>,
    /// The caller's operations for the same batch.
    extra: Extra<'a>,
}

impl<'a> Blocks<'a> {
    /// The blocks of `data` (whole 4 KiB blocks, in pieces of whole blocks) as blocks
    /// `ranges` of `ino`, their CRCs computed; ranges that do not ascend, overlap or
    /// cover the data are a bug.
    fn new(
        ino: InodeNo,
        ranges: &'a [(FileBlock, u64)],
        data: &'a [&'a [u8]],
        extra: Extra<'a>,
    ) -> Blocks<'a> {
        assert!(ino.0 != 0, "inode 0");
        let bytes: usize = data.iter().map(|p| p.len()).sum();
        assert!(
            bytes > 0 && data.iter().all(|p| p.len() % BLOCK == 0),
            "write of {bytes} bytes in pieces of {:?}",
            data.iter().map(|p| p.len()).collect::<Vec<_>>()
        );
        assert_eq!(
            ranges.iter().map(|r| r.1).sum::<u64>(),
            (bytes / BLOCK) as u64,
            "ranges cover the data"
        );
        assert!(
            ranges.windows(2).all(|w| w[0].0 .0 + w[0].1 <= w[1].0 .0)
                && ranges.iter().all(|r| r.1 > 0),
            "ranges ascend without overlapping"
        );
        let numbers: Vec<FileBlock> = ranges
            .iter()
            .flat_map(|&(first, n)| (first.0..first.0 + n).map(FileBlock))
            .collect();
        Blocks {
            ino,
            ranges,
            crcs: data
                .iter()
                .flat_map(|p| p.chunks(BLOCK))
                .zip(&numbers)
                .map(|(b, &n)| keys::block_crc(ino, n, b))
                .collect(),
            numbers,
            data,
            extra,
        }
    }

    fn count(&self) -> u32 {
        self.crcs.len() as u32
    }
}

/// Appends the operations of `extra` to `batch`.
fn append(batch: &mut WriteBatch, extra: &WriteBatch) {
    for (kind, key, value) in extra.ops() {
        match kind {
            metadb::ValueKind::Put => batch.put(key.to_vec(), value.to_vec()),
            metadb::ValueKind::Delete => batch.delete(key.to_vec()),
        };
    }
}

/// Submits one write per run of `data` (its pieces one after the other; without
/// waiting).
fn submit_runs(
    queue: &mut device::Queue<'_>,
    runs: &[Run],
    data: &[&[u8]],
    cause: IoCause,
) -> Result<(), EngineError> {
    let mut pieces = data.iter().copied().filter(|p| !p.is_empty());
    let mut piece: &[u8] = &[];
    for run in runs {
        let mut buf = AlignedBuf::scratch(run.blocks as usize * BLOCK);
        let mut filled = 0;
        while filled < buf.len() {
            if piece.is_empty() {
                piece = pieces.next().expect("runs cover the data");
            }
            let n = piece.len().min(buf.len() - filled);
            buf[filled..filled + n].copy_from_slice(&piece[..n]);
            piece = &piece[n..];
            filled += n;
        }
        let mut request = IoRequest::write(run.start.byte_offset(), buf, cause);
        loop {
            match queue.push(request) {
                Ok(()) => break,
                Err(back) => {
                    request = back;
                    queue.submit(1)?;
                    while let Some(c) = queue.pop() {
                        c.result?;
                    }
                }
            }
        }
    }
    assert!(
        piece.is_empty() && pieces.next().is_none(),
        "runs cover the data"
    );
    queue.submit(0)?;
    Ok(())
}

/// Merges `r` into the part of its domain, or adds it.
fn merge_part(parts: &mut Vec<Required>, r: &Required) {
    match parts.iter_mut().find(|p| p.domain == r.domain) {
        Some(p) => p.merge(r),
        None => parts.push(*r),
    }
}

/// A data write's device requests in flight and its number, completed once reaped.
struct InFlight<'a> {
    queue: Option<device::Queue<'a>>,
    tracker: &'a super::tracker::SeqTracker,
    seq: u64,
}

impl InFlight<'_> {
    /// Waits for the requests (once) and completes the number; the first failure.
    fn reap(&mut self) -> Result<(), EngineError> {
        let Some(mut queue) = self.queue.take() else {
            return Ok(());
        };
        let reaped = reap(&mut queue);
        self.tracker.complete(self.seq);
        reaped
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        // Unwinding: the buffers must not be freed under the device, and the number
        // must complete (persists and memtable flushes wait for it).
        let _ = self.reap();
    }
}

/// Waits for every request of `queue`; the first failure, after all have finished.
fn reap(queue: &mut device::Queue<'_>) -> Result<(), EngineError> {
    let mut first_error = None;
    while queue.outstanding() > 0 {
        queue.submit(1)?;
        while let Some(c) = queue.pop() {
            if let Err(e) = c.result {
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}
