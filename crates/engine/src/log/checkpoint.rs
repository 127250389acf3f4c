//! Checkpoints (docs/DESIGN.md §9.5): a domain checkpoint makes every batch of the domain
//! durable with its data, writes the domain's slot and frees its pending segments (after
//! their discard); `sync` checkpoints every domain, then MetaDB's other lanes, then the
//! global slot.
//!
//! Invariants:
//! - A slot is written over the older of its owner's two slots and flushed before the
//!   segments the checkpoint frees are handed out.
//! - The cut is taken before the persist: segments released after it wait for the next
//!   checkpoint.

use super::domain::Required;
use super::keys::DomainRecord;
use super::Engine;
use crate::error::EngineError;
use device::{AlignedBuf, IoCause, IoRequest};
use format::checkpoint::CheckpointSlot;
use format::constants::{CHECKPOINT_SLOT_BYTES, SEGMENT_SIZE_BYTES};
use format::geometry::CheckpointOwner;
use format::DomainId;
use std::sync::atomic::Ordering;

/// A checkpoint payload (FORMAT.md §6.3): the owner's watermark and file-system time.
pub(super) const CHECKPOINT_PAYLOAD_VERSION: u32 = 1;

impl Engine {
    /// A domain checkpoint: every batch of the domain so far, and every data write it
    /// names, becomes durable; segments the domain freed before it become free; the
    /// domain's checkpoint slot records the watermark.
    pub fn checkpoint(&self, d: DomainId) -> Result<(), EngineError> {
        self.check_writable()?;
        let domain = &self.domains[d.0 as usize];
        let cut = self.pool.checkpoint_cut(d);
        let (receipt, seq, elapsed) = {
            let state = domain.lock();
            (
                state.last_receipt,
                domain.tracker.issued(),
                state.seginfo.now_ns(),
            )
        };
        if let Some(receipt) = receipt {
            self.persist_domain(domain, receipt, seq)?;
        }
        let record = DomainRecord {
            durable_seq: domain.tracker.durable(),
            issued_seq: seq,
            elapsed_ns: elapsed,
        };
        let mut slot = domain.slot.lock().expect("checkpoint slot lock");
        // A domain with no batch and no freed segment since its slot keeps it: a new slot
        // would differ only in its elapsed time, which the global slot and the domain's
        // MetaDB record carry too (a sync of one busy domain wrote every idle domain's
        // 16 KiB slot and flushed after each).
        let idle = slot.durable_seq == record.durable_seq
            && slot.issued_seq == record.issued_seq
            && !self.pool.releases_before(&cut);
        if !idle {
            let sequence = slot.sequence + 1;
            self.write_slot(CheckpointOwner::Domain(d), sequence, &record)?;
            *slot = super::SlotState {
                sequence,
                durable_seq: record.durable_seq,
                issued_seq: record.issued_seq,
            };
        }
        drop(slot);
        let discards = self.pool.checkpoint_committed(cut);
        self.discard(discards);
        self.counters.checkpoints.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Discards freed segments (the device may reclaim them; augefs.txt §VI-A leaves
    /// this to the FTL), then makes them allocatable. A failed discard loses nothing:
    /// the segment is free either way, so it is counted, not reported.
    pub(super) fn discard(&self, batch: crate::space::pool::DiscardBatch) {
        if !batch.is_empty() {
            let requests = batch
                .segments()
                .iter()
                .map(|&s| {
                    IoRequest::discard(
                        self.pool.segment_offset_bytes(s),
                        SEGMENT_SIZE_BYTES,
                        IoCause::Gc,
                    )
                })
                .collect();
            let failed = match self.device.run(requests) {
                Ok(done) => done.iter().filter(|c| c.result.is_err()).count() as u64,
                Err(_) => batch.segments().len() as u64,
            };
            self.counters
                .discards_failed
                .fetch_add(failed, Ordering::Relaxed);
            self.counters
                .segments_discarded
                .fetch_add(batch.segments().len() as u64, Ordering::Relaxed);
        }
        self.pool.discard_done(batch);
    }

    pub(super) fn checkpoint_all(&self) -> Result<(), EngineError> {
        for d in 0..self.domains.len() {
            self.checkpoint(DomainId(d as u16))?;
        }
        Ok(())
    }

    /// Writes `record` over the older slot of `owner` and flushes.
    fn write_slot(
        &self,
        owner: CheckpointOwner,
        sequence: u64,
        record: &DomainRecord,
    ) -> Result<(), EngineError> {
        self.write_slot_payload(
            owner,
            sequence,
            CHECKPOINT_PAYLOAD_VERSION,
            record.encode().to_vec(),
        )
    }

    fn write_slot_payload(
        &self,
        owner: CheckpointOwner,
        sequence: u64,
        payload_version: u32,
        payload: Vec<u8>,
    ) -> Result<(), EngineError> {
        let slot = CheckpointSlot {
            owner,
            payload_version,
            sequence,
            payload,
        };
        // Sequence n goes to slot (n + 1) mod 2 (mkfs wrote sequence 1 to slot 0), so a new
        // checkpoint never overwrites the current one.
        let index = ((sequence + 1) % 2) as u32;
        let offset = self.geometry.checkpoint_slot_offset(owner, index);
        let mut buf = AlignedBuf::zeroed(CHECKPOINT_SLOT_BYTES as usize);
        buf.copy_from_slice(&slot.encode());
        let r = self
            .device
            .run(vec![
                IoRequest::write(offset, buf, IoCause::Checkpoint),
                IoRequest::flush(IoCause::Checkpoint),
            ])
            .and_then(|done| done.into_iter().try_for_each(|c| c.result));
        self.failing(r.map_err(Into::into))
    }

    /// Every batch of every domain so far, with the data each names, and every other
    /// lane of MetaDB durable: what an fsync of every file gives, in one MetaDB persist
    /// and one device flush (none when all is durable already). Unlike `sync` it writes
    /// no checkpoint slot, so it costs what one fsync costs.
    pub fn persist_all(&self) -> Result<(), EngineError> {
        self.check_writable()?;
        let parts: Vec<Required> = self
            .domains
            .iter()
            .filter_map(|domain| {
                let state = domain.lock();
                state.last_receipt.map(|receipt| Required {
                    domain: domain.id,
                    receipt,
                    seq: domain.tracker.issued(),
                })
            })
            .collect();
        if !parts.is_empty() {
            self.persist_domains(parts)?;
        }
        self.failing(self.db.sync().map_err(Into::into))
    }

    /// sync(): a consistent whole-file-system checkpoint. Every domain checkpoints, then
    /// MetaDB's other lanes are made durable and the global slot is written, naming the
    /// WAL records now durable (FORMAT.md §6.3) so that recovery can tell damage to them
    /// from a torn tail.
    pub fn sync(&self) -> Result<(), EngineError> {
        self.checkpoint_all()?;
        self.failing(self.db.sync().map_err(Into::into))?;
        let extents = self.db.wal_durable();
        let sequence = self.global_checkpoint_seq.fetch_add(1, Ordering::SeqCst) + 1;
        let record = DomainRecord {
            durable_seq: 0,
            issued_seq: 0,
            elapsed_ns: self.domains[0].lock().seginfo.now_ns(),
        };
        self.write_slot_payload(
            CheckpointOwner::Global,
            sequence,
            super::global::GLOBAL_PAYLOAD_VERSION,
            super::global::encode(&record, &extents),
        )
    }
}
