//! The cleaner (augefs.txt §VI-A "Garbage Collection"): pick the domain whose best victim
//! frees the most, move the victim's valid blocks to the domain's GC head, re-point their
//! mappings, and free the victim (pending until the domain's next checkpoint).
//!
//! Invariants:
//! - Moved data is durable (its own device flush) before the batch that re-points it is
//!   made, so a GC batch never needs checking at recovery and the victim can be reused
//!   as soon as a checkpoint makes that batch durable.
//! - A block is re-pointed only if it is still valid at its old address under the
//!   domain's lock (every change of a mapping goes through that lock and the bitmap), so
//!   a user write that raced the move wins and the moved copy is garbage.
//! - A moved block is checked against its mapping's CRC before it is copied: GC never
//!   spreads corrupt data under a valid checksum.

use super::domain::{HeadKind, Run};
use super::index::NewBlock;
use super::keys::{self, FileBlock, Mapping, Reverse, ReverseExtent};
use super::{Domain, Engine, BLOCK};
use crate::error::EngineError;
use crate::space::victim::{self, Policy};
use device::{AlignedBuf, IoCause, IoRequest};
use format::{BlockAddr, DomainId, InodeNo, SegmentNo};
use metadb::WriteBatch;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;

/// What one cleaning pass did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GcReport {
    pub domain: DomainId,
    pub victim: SegmentNo,
    /// Valid blocks copied and re-pointed.
    pub moved: u32,
    /// Blocks copied but overwritten by a user meanwhile (left as garbage).
    pub raced: u32,
}

impl Engine {
    /// One pass over the domain whose victim (by `policy`) has the fewest valid blocks;
    /// `None` when no domain has a segment worth cleaning.
    pub fn gc_pass(&self, policy: Policy) -> Result<Option<GcReport>, EngineError> {
        let mut best: Option<(u32, usize, SegmentNo)> = None;
        for (i, d) in self.domains.iter().enumerate() {
            let state = d.lock();
            let candidates = state.seginfo.candidates(&state.busy_segments());
            if let Some(v) = victim::pick(&candidates, policy, state.seginfo.now_ns()) {
                if best.is_none_or(|(valid, _, _)| v.valid_blocks < valid) {
                    best = Some((v.valid_blocks, i, v.segment));
                }
            }
        }
        match best {
            None => Ok(None),
            Some((_, i, segment)) => self.clean(&self.domains[i], segment).map(Some),
        }
    }

    /// One pass over domain `d`.
    pub fn gc_domain(&self, d: DomainId, policy: Policy) -> Result<Option<GcReport>, EngineError> {
        let domain = &self.domains[d.0 as usize];
        let segment = {
            let state = domain.lock();
            let candidates = state.seginfo.candidates(&state.busy_segments());
            victim::pick(&candidates, policy, state.seginfo.now_ns()).map(|v| v.segment)
        };
        match segment {
            None => Ok(None),
            Some(s) => self.clean(domain, s).map(Some),
        }
    }

    fn clean(&self, domain: &Domain, victim: SegmentNo) -> Result<GcReport, EngineError> {
        self.check_writable()?;
        // Cleaning frees nothing until a checkpoint: when the pool is down to the
        // reserve, turn earlier passes' victims into free space first, so the moves and
        // MetaDB's flush of their batches always find room.
        let stats = self.pool.stats();
        if stats.free <= stats.reserve && stats.pending > 0 {
            for d in self.pool.pending_domains() {
                self.checkpoint(d)?;
            }
        }
        let _one_pass = domain.gc_lock.lock().expect("gc lock");
        let nothing = GcReport {
            domain: domain.id,
            victim,
            moved: 0,
            raced: 0,
        };
        let valid: Vec<u32> = {
            let state = domain.lock();
            if state.busy_segments().contains(&victim) {
                return Ok(nothing);
            }
            match state.seginfo.get(victim) {
                Some(info) => info.valid().collect(),
                None => return Ok(nothing),
            }
        };
        let moving = self.live_blocks(victim, &valid)?;
        let data = self.read_verified(&moving)?;
        let (runs, seq) = self.write_moved(domain, &data, moving.len())?;
        let (moved, raced) = self.remap(domain, victim, &moving, &runs, seq)?;
        self.counters
            .gc_blocks_moved
            .fetch_add(u64::from(moved), Ordering::Relaxed);
        self.counters
            .gc_segments_cleaned
            .fetch_add(1, Ordering::Relaxed);
        Ok(GcReport {
            moved,
            raced,
            ..nothing
        })
    }

    /// The victim's valid blocks that a file still maps, with their owner and mapping.
    /// Of the reverse records naming a block (a stale one may remain from an earlier
    /// life of the segment), the owner is the one whose mapping names it; a block
    /// unmapped since the bitmap's snapshot is left out.
    fn live_blocks(&self, victim: SegmentNo, valid: &[u32]) -> Result<Vec<Moving>, EngineError> {
        let base = self.geometry.segment_start(victim);
        let mut candidates: HashMap<u16, Vec<Reverse>> = HashMap::new();
        for item in self.db.prefix(&keys::reverse_prefix(victim), None)? {
            let (key, value) = item?;
            let (_, b) = keys::parse_reverse_key(&key)?;
            candidates
                .entry(b)
                .or_default()
                .push(Reverse::decode(&value)?);
        }
        let mut runs_written: Vec<(u16, ReverseExtent)> = Vec::new();
        for item in self.db.prefix(&keys::reverse_extent_prefix(victim), None)? {
            let (key, value) = item?;
            let (_, start) = keys::parse_reverse_extent_key(&key)?;
            runs_written.push((start, ReverseExtent::decode(&value)?));
        }
        let mut moving = Vec::with_capacity(valid.len());
        for &b in valid {
            let addr = BlockAddr(base.0 + u64::from(b));
            let b = b as u16;
            let named = candidates.get(&b).into_iter().flatten().copied().chain(
                runs_written
                    .iter()
                    .filter_map(|(start, q)| q.owner_of(*start, b)),
            );
            let mut any = false;
            for owner in named {
                any = true;
                if let Some(m) = self.mapping_of(owner.ino, owner.block)? {
                    if m.addr == addr {
                        moving.push((addr, owner, m));
                        break;
                    }
                }
            }
            if !any {
                return Err(EngineError::corruption(
                    "reverse map",
                    format!("segment {victim} block {b}"),
                    "an owner for a valid block",
                    "none",
                ));
            }
        }
        Ok(moving)
    }

    /// The blocks' contents, each checked against its mapping's checksum (a cleaner
    /// never copies a damaged block under a fresh checksum).
    fn read_verified(&self, moving: &[Moving]) -> Result<Vec<u8>, EngineError> {
        let mut data = vec![0u8; moving.len() * BLOCK];
        if moving.is_empty() {
            return Ok(data);
        }
        let requests = moving
            .iter()
            .map(|(addr, _, _)| {
                IoRequest::read(addr.byte_offset(), AlignedBuf::zeroed(BLOCK), IoCause::Gc)
            })
            .collect();
        let done = self.device.run(requests)?;
        for (i, c) in done.into_iter().enumerate() {
            c.result?;
            let buf = c.request.into_buf().expect("a read returns its buffer");
            let (addr, owner, m) = &moving[i];
            if keys::block_crc(owner.ino, owner.block, &buf) != m.crc {
                return Err(EngineError::DataChecksum {
                    ino: owner.ino,
                    block: owner.block.0,
                    addr: *addr,
                });
            }
            data[i * BLOCK..(i + 1) * BLOCK].copy_from_slice(&buf);
        }
        Ok(data)
    }

    /// Writes `blocks` blocks of `data` to the domain's GC head and flushes them: the
    /// runs they went to, and the write's sequence number (None when there was nothing
    /// to move).
    fn write_moved(
        &self,
        domain: &Domain,
        data: &[u8],
        blocks: usize,
    ) -> Result<(Vec<Run>, Option<u64>), EngineError> {
        if blocks == 0 {
            return Ok((Vec::new(), None));
        }
        let (state, runs, seqs) = self.reserve_numbered(domain, HeadKind::Gc, blocks as u32, 1)?;
        drop(state);
        self.write_data(domain, &runs, &[data], &seqs, IoCause::Gc, true)?;
        Ok((runs, Some(seqs[0])))
    }

    /// Points every moved block that is still valid at its new address in one batch,
    /// and releases the runs: (moved, raced), raced being the blocks a file overwrote or
    /// dropped while they were being copied.
    fn remap(
        &self,
        domain: &Domain,
        victim: SegmentNo,
        moving: &[Moving],
        runs: &[Run],
        seq: Option<u64>,
    ) -> Result<(u32, u32), EngineError> {
        let mut state = domain.lock();
        let mut batch = WriteBatch::new();
        let mut moved = 0;
        let mut raced = 0;
        let targets = runs
            .iter()
            .flat_map(|r| (0..u64::from(r.blocks)).map(move |i| BlockAddr(r.start.0 + i)));
        let mut by_file: BTreeMap<InodeNo, Vec<NewBlock>> = BTreeMap::new();
        for ((old, owner, m), new) in moving.iter().zip(targets) {
            if !state.is_valid(&self.geometry, *old) {
                raced += 1;
                continue;
            }
            by_file.entry(owner.ino).or_default().push(NewBlock {
                block: owner.block,
                addr: new,
                crc: m.crc,
            });
            moved += 1;
        }
        for (ino, mut blocks) in by_file {
            blocks.sort_by_key(|b| b.block);
            let ranges = block_ranges(&blocks);
            let mut view = self.load_index(ino, &ranges)?;
            let holes = self.map_blocks(
                &mut state,
                &mut batch,
                &mut view,
                &blocks,
                seq.expect("moved blocks were written"),
            );
            assert_eq!(holes, 0, "a valid block of inode {ino} was unmapped");
        }
        state.unreserve(&self.geometry, runs);
        state.touch(victim);
        self.finish_batch(&mut state, domain, &mut batch);
        self.failing(self.put_batch(domain, &mut state, None, &batch))?;
        Ok((moved, raced))
    }
}

/// A block to move: its address in the victim, its owner, and the mapping naming it.
type Moving = (BlockAddr, Reverse, Mapping);

/// When the background cleaner runs (augefs.txt §VI-A: background and foreground GC).
#[derive(Debug, Clone, Copy)]
pub struct CleanerConfig {
    /// Clean while free segments are fewer than this share of the segment area (plus
    /// what ordinary allocations keep back).
    pub low_free_share: f64,
    /// How long the cleaner sleeps when there is nothing to do.
    pub idle: std::time::Duration,
}

impl Default for CleanerConfig {
    fn default() -> Self {
        CleanerConfig {
            low_free_share: 0.10,
            idle: std::time::Duration::from_millis(50),
        }
    }
}

/// A running background cleaner; stops (and joins) when dropped or stopped.
#[derive(Debug)]
pub struct Cleaner {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<Result<u64, EngineError>>>,
}

impl Cleaner {
    /// Stops the cleaner; returns the segments it cleaned, or its first error.
    pub fn stop(mut self) -> Result<u64, EngineError> {
        self.halt()
    }

    fn halt(&mut self) -> Result<u64, EngineError> {
        self.stop.store(true, Ordering::SeqCst);
        match self.thread.take() {
            Some(t) => {
                t.thread().unpark();
                t.join().expect("cleaner thread panicked")
            }
            None => Ok(0),
        }
    }
}

impl Drop for Cleaner {
    fn drop(&mut self) {
        let _ = self.halt();
    }
}

impl Engine {
    /// Starts the background cleaner: while free space is low it cleans with the
    /// cost-benefit policy (cold, mostly-empty segments first) and checkpoints the
    /// domains whose victims wait to be freed, so writers rarely clean in the
    /// foreground. It holds the engine weakly: dropping the engine's last `Arc` ends it.
    pub fn start_cleaner(self: &std::sync::Arc<Self>, config: CleanerConfig) -> Cleaner {
        let engine = std::sync::Arc::downgrade(self);
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let halt = stop.clone();
        let thread = std::thread::Builder::new()
            .name("augefs-cleaner".into())
            .spawn(move || {
                let mut cleaned = 0u64;
                while !halt.load(Ordering::SeqCst) {
                    let Some(engine) = engine.upgrade() else {
                        break;
                    };
                    // Tables MetaDB freed since the last checkpoint wait for their discard.
                    engine.discard(engine.pool.take_discards());
                    let space = engine.space_report();
                    let low = (f64::from(space.segments) * config.low_free_share) as u32
                        + space.gc_reserve
                        + space.metadb_headroom;
                    let mut worked = false;
                    if space.free < low && engine.check_writable().is_ok() {
                        if engine.gc_pass(Policy::CostBenefit)?.is_some() {
                            cleaned += 1;
                            worked = true;
                        }
                        for d in engine.pool.pending_domains() {
                            engine.checkpoint(d)?;
                        }
                    }
                    drop(engine);
                    if !worked {
                        std::thread::park_timeout(config.idle);
                    }
                }
                Ok(cleaned)
            })
            .expect("spawn the cleaner thread");
        Cleaner {
            stop,
            thread: Some(thread),
        }
    }
}

/// The runs of consecutive file blocks of `blocks` (ascending), as (first, count).
fn block_ranges(blocks: &[NewBlock]) -> Vec<(FileBlock, u64)> {
    let mut ranges: Vec<(FileBlock, u64)> = Vec::new();
    for b in blocks {
        match ranges.last_mut() {
            Some((first, n)) if first.0 + *n == b.block.0 => *n += 1,
            _ => ranges.push((b.block, 1)),
        }
    }
    ranges
}
