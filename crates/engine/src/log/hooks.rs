//! What MetaDB asks of the engine (metadb::hooks): before a memtable becomes a table,
//! the data its batches point to must have completed (so the table's own device flush
//! makes that data durable and tables never need checking); at recovery, a WAL record
//! whose data may not have reached the device is dropped with the rest of its lane
//! (docs/DESIGN.md §9.4, crash case tree).
//!
//! Invariants:
//! - Only records of the domains' pinned lanes are ever dropped, and per lane only a
//!   suffix (MetaDB checks this).
//! - A record is kept without reading its data only when its domain's durable
//!   watermark (the highest `durable_seq` any recovered record of the domain carries)
//!   covers every write it names.

use super::keys::{self, DomainRecord, Extent, Mapping};
use super::tracker::SeqTracker;
use device::{AlignedBuf, Device, IoCause, IoRequest};
use format::constants::BLOCK_SIZE_BYTES;
use format::{DomainId, InodeNo};
use metadb::hooks::{ReplayRecord, WriteHooks};
use metadb::{MetaDbError, ValueKind};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

#[derive(Debug)]
pub struct EngineHooks {
    device: Arc<Device>,
    domain_count: u32,
    /// Per domain, the durable watermark of its checkpoint slot.
    checkpointed: Vec<u64>,
    /// Set once the domains exist (after recovery); until then no data is in flight.
    trackers: OnceLock<Vec<Arc<SeqTracker>>>,
    /// What the replay filter did, for the mount report.
    pub(crate) replay: Mutex<ReplayReport>,
}

/// What recovery did with the domains' WAL records.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplayReport {
    /// Records of the domains' lanes found in the WAL.
    pub records: u64,
    /// Data blocks read to check records newer than the durable watermark.
    pub blocks_verified: u64,
    /// Records dropped: their data (or an earlier record's) never reached the device.
    pub records_dropped: u64,
}

impl EngineHooks {
    /// Hooks for a mount whose domains' checkpoints hold `watermarks` (one per domain).
    pub fn new(device: Arc<Device>, watermarks: Vec<u64>) -> EngineHooks {
        EngineHooks {
            device,
            domain_count: watermarks.len() as u32,
            checkpointed: watermarks,
            trackers: OnceLock::new(),
            replay: Mutex::new(ReplayReport::default()),
        }
    }

    pub fn set_trackers(&self, trackers: Vec<Arc<SeqTracker>>) {
        assert_eq!(trackers.len(), self.domain_count as usize);
        self.trackers.set(trackers).expect("trackers set once");
    }

    fn domain_of_lane(&self, record: &ReplayRecord) -> Option<DomainId> {
        let pinned = record.pinned?;
        assert!(
            pinned < self.domain_count as usize,
            "pinned lane {pinned} beyond {} domains",
            self.domain_count
        );
        Some(DomainId(pinned as u16))
    }
}

impl WriteHooks for EngineHooks {
    fn before_memtable_flush(
        &self,
        lookup: &dyn Fn(&[u8]) -> Option<Vec<u8>>,
    ) -> Result<(), MetaDbError> {
        let Some(trackers) = self.trackers.get() else {
            return Ok(());
        };
        for (d, tracker) in trackers.iter().enumerate() {
            let Some(value) = lookup(&keys::domain_key(DomainId(d as u16))) else {
                continue;
            };
            let record = DomainRecord::decode(&value).map_err(|e| MetaDbError::Corruption {
                what: "engine domain record in a memtable".into(),
                detail: e.to_string(),
            })?;
            // Every batch of the domain in this memtable was made when at most
            // `issued_seq` writes were issued, and its writer is past its MetaDB call
            // (the memtable is sealed and drained), so these writes finish.
            tracker.wait_completed(record.issued_seq.min(tracker.issued()));
        }
        Ok(())
    }

    fn filter_replay(&self, records: &[ReplayRecord]) -> Result<Vec<bool>, MetaDbError> {
        let mut report = ReplayReport::default();
        let durable = self.durable_watermarks(records, &mut report)?;
        let checks = self.blocks_to_check(records, &durable)?;
        // A record that checked out but maps a block past the device is damage, not a
        // write in flight: refuse it rather than read past the end.
        let device_blocks = self.device.size_bytes() / BLOCK_SIZE_BYTES;
        if let Some((_, ino, block, m)) = checks.iter().find(|c| c.3.addr.0 >= device_blocks) {
            return Err(replay_corruption(format!(
                "inode {ino} block {} mapped to device block {}, past the device's {device_blocks}",
                block.0, m.addr.0
            )));
        }
        let bad = self.records_with_bad_blocks(records.len(), &checks, &mut report)?;
        // Drop each lane from its first bad record on.
        let mut dropping: HashMap<u16, bool> = HashMap::new();
        let keep = records
            .iter()
            .enumerate()
            .map(|(i, r)| {
                if self.domain_of_lane(r).is_none() {
                    return true;
                }
                let d = dropping.entry(r.lane).or_insert(false);
                *d |= bad[i];
                if *d {
                    report.records_dropped += 1;
                }
                !*d
            })
            .collect();
        *self.replay.lock().expect("replay report lock") = report;
        Ok(keep)
    }
}

/// A block a replayed record maps: the record's index, the file, its block, the mapping.
type BlockCheck = (usize, InodeNo, keys::FileBlock, Mapping);

fn replay_corruption(detail: String) -> MetaDbError {
    MetaDbError::Corruption {
        what: "engine record in the WAL".into(),
        detail,
    }
}

fn corrupt(e: impl std::fmt::Display) -> MetaDbError {
    replay_corruption(e.to_string())
}

impl EngineHooks {
    /// The durable watermark of each domain: the highest its checkpoint or any of its
    /// replayed records carries. The checkpoint's counts: a sync persists the WAL
    /// without a new domain record, and the data it made durable may since have been
    /// unmapped, its segment freed, discarded and reused, so checking it would fail a
    /// good record (and drop the rest of its lane: a deletion after it would be lost).
    fn durable_watermarks(
        &self,
        records: &[ReplayRecord],
        report: &mut ReplayReport,
    ) -> Result<HashMap<DomainId, u64>, MetaDbError> {
        let mut durable: HashMap<DomainId, u64> = self
            .checkpointed
            .iter()
            .enumerate()
            .map(|(d, &w)| (DomainId(d as u16), w))
            .collect();
        for record in records {
            let Some(domain) = self.domain_of_lane(record) else {
                continue;
            };
            report.records += 1;
            for (kind, key, value) in record.batch.ops() {
                if kind == ValueKind::Put && key == keys::domain_key(domain) {
                    let r = DomainRecord::decode(value).map_err(corrupt)?;
                    let w = durable.entry(domain).or_insert(0);
                    *w = (*w).max(r.durable_seq);
                }
            }
        }
        Ok(durable)
    }

    /// The blocks to check: those of mappings written after their domain's watermark.
    fn blocks_to_check(
        &self,
        records: &[ReplayRecord],
        durable: &HashMap<DomainId, u64>,
    ) -> Result<Vec<BlockCheck>, MetaDbError> {
        let mut checks = Vec::new();
        for (i, record) in records.iter().enumerate() {
            let Some(domain) = self.domain_of_lane(record) else {
                continue;
            };
            let w = durable.get(&domain).copied().unwrap_or(0);
            for (kind, key, value) in record.batch.ops() {
                if kind != ValueKind::Put {
                    continue;
                }
                match key.first() {
                    Some(&keys::MAPPING_TAG) => {
                        let (ino, block) = keys::parse_mapping_key(key).map_err(corrupt)?;
                        let m = Mapping::decode(value).map_err(corrupt)?;
                        if m.write_seq > w {
                            checks.push((i, ino, block, m));
                        }
                    }
                    Some(&keys::EXTENT_TAG) => {
                        let (ino, last) = keys::parse_extent_key(key).map_err(corrupt)?;
                        let e = Extent::decode(last, value).map_err(corrupt)?;
                        // A trimmed piece of an older extent carries that write's number,
                        // and may keep stale claims on blocks `x` records shadow. Their
                        // addresses still hold that write's data: an address is written
                        // again only in a reused segment, and a segment is reused only
                        // after a checkpoint whose watermark covers every write before
                        // its freeing, so a piece numbered above the watermark has none.
                        if e.write_seq > w {
                            for b in e.first.0..=last.0 {
                                let block = keys::FileBlock(b);
                                checks.push((i, ino, block, e.mapping(block)));
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
        Ok(checks)
    }

    /// Reads every checked block: which of the `records` records map a block whose
    /// contents fail the mapping's checksum (a write that never landed).
    fn records_with_bad_blocks(
        &self,
        records: usize,
        checks: &[BlockCheck],
        report: &mut ReplayReport,
    ) -> Result<Vec<bool>, MetaDbError> {
        let mut bad = vec![false; records];
        for chunk in checks.chunks(256) {
            let requests = chunk
                .iter()
                .map(|(_, _, _, m)| {
                    IoRequest::read(
                        m.addr.byte_offset(),
                        AlignedBuf::zeroed(BLOCK_SIZE_BYTES as usize),
                        IoCause::Recovery,
                    )
                })
                .collect();
            let done = self.device.run(requests).map_err(MetaDbError::Device)?;
            for ((i, ino, block, m), c) in chunk.iter().zip(done) {
                c.result.map_err(MetaDbError::Device)?;
                let buf = c.request.into_buf().expect("a read returns its buffer");
                report.blocks_verified += 1;
                if keys::block_crc(*ino, *block, &buf) != m.crc {
                    bad[*i] = true;
                }
            }
        }
        Ok(bad)
    }
}
