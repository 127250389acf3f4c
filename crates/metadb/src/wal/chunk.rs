//! The device WAL region as a store of chunks (docs/FORMAT.md §5 "WAL region"): the
//! ssd-mode WAL keeps its lanes' logs here, and the PMR-mode WAL the entries it migrates
//! out of a full PMR half. Recovery scan, region header, unit allocation, writes.
//!
//! ```text
//! unit 0: region header copy 0 at byte 0, copy 1 at byte 4096
//! unit 1..n: chunks of one or more 64 KiB units: header sector, then records
//! ```
//!
//! Invariants:
//! - A chunk belongs to one (generation, lane) and lies in free units: units are reused
//!   only after `release_through` covered the generation of the chunk that held them (the
//!   caller records its `released_through` durably before calling it, and passes it back
//!   at recovery, so a reused unit's old chunk is recognised as released).
//! - Every open of the WAL (`ChunkStore::start`) writes and flushes a region header with a
//!   new *incarnation* before it writes anything else, and every chunk header carries the
//!   incarnation that wrote it. Records name their chunk header's CRC, so a record left by
//!   an earlier incarnation never checks out under a later chunk header in the same place,
//!   even if a generation number is reused after a crash that lost every trace of it.
//! - Recovery skips the inner units of a live chunk, so record payloads that happen to
//!   start a unit are never read as headers.

use super::flush::{FlushCombiner, Health};
use super::record::{
    decode_record, ChunkHeader, ChunkKind, RegionHeader, CHUNK_DATA_OFFSET,
    REGION_HEADER_COPY_STRIDE, UNIT_BYTES,
};
use super::recovery::Collector;
use super::RecoveredRecord;
use crate::error::MetaDbError;
use device::{AlignedBuf, BufPool, Device, DeviceError, IoCause, IoOp, IoRequest, Queue};
use format::constants::SECTOR_SIZE_BYTES;
use format::Region;
use std::sync::{Arc, Mutex, MutexGuard};

/// Reads issued at once while scanning headers.
const SCAN_BATCH_READS_MAX: usize = 64;
/// Write buffers kept for reuse (one unit each; larger writes allocate).
const WRITE_BUFS_POOLED_MAX: usize = 64;

/// The region's unit count; asserts the region can hold the header unit and a chunk.
fn unit_count(region: Region) -> u32 {
    let units = region.size_bytes() / UNIT_BYTES;
    assert!(
        units >= 2,
        "a WAL region of {} bytes holds no chunk",
        region.size_bytes()
    );
    u32::try_from(units).expect("a WAL region has fewer than 2^32 units")
}

/// The device IO granularity the WAL uses: a sector, or the device's logical block.
pub(super) fn io_bytes_for(device: &Device) -> usize {
    (device.info().logical_block_bytes as usize).max(SECTOR_SIZE_BYTES as usize)
}

/// A chunk of a live generation found by the scan.
#[derive(Debug, Clone, Copy)]
struct LiveChunk {
    unit: u32,
    units: u32,
    generation: u64,
}

/// What a recovery scan of the region found, besides the records it handed to the
/// collector: enough to start writing again.
#[derive(Debug)]
pub(super) struct RegionScan {
    region: Region,
    incarnation_max: u64,
    header_copies: [Option<u64>; 2],
    live: Vec<LiveChunk>,
}

/// Reads the region header copies and every chunk of a generation `> released_through`,
/// handing complete records to `collector`. Reads only.
pub(super) fn scan(
    device: &Device,
    region: Region,
    released_through: u64,
    collector: &mut Collector,
) -> Result<RegionScan, MetaDbError> {
    let units = unit_count(region);
    assert!(
        region.end_byte() <= device.size_bytes(),
        "WAL region beyond the device"
    );
    let io = io_bytes_for(device);
    let mut header_copies = [None, None];
    for (copy, slot) in header_copies.iter_mut().enumerate() {
        let offset = region.start_byte() + copy as u64 * REGION_HEADER_COPY_STRIDE;
        let buf = device.read(offset, AlignedBuf::zeroed(io), IoCause::Wal)?;
        if let Some(h) = RegionHeader::decode(&buf) {
            if h.region_start_block != region.start_block
                || h.region_block_count != region.block_count
                || h.copy_index != copy as u32
            {
                return Err(MetaDbError::corruption(
                    "WAL region header",
                    format!(
                        "copy {copy} describes another region or copy: {h:?}, expected {region:?}"
                    ),
                ));
            }
            *slot = Some(h.incarnation);
        }
    }
    let heads = read_unit_heads(device, region, units, io)?;
    let mut scan = RegionScan {
        region,
        incarnation_max: header_copies.iter().flatten().copied().max().unwrap_or(0),
        header_copies,
        live: Vec::new(),
    };
    // Every live chunk first (headers only), then their reads in batches, parsed in
    // order: a chunk's records reach the collector in the region's order either way.
    let mut found = Vec::new();
    let mut unit = 1u32;
    while unit < units {
        let Some((header, crc)) = heads[unit as usize] else {
            unit += 1;
            continue;
        };
        collector.saw_generation(header.generation);
        scan.incarnation_max = scan.incarnation_max.max(header.incarnation);
        if header.generation <= released_through {
            unit += 1;
            continue;
        }
        let fits = header.unit_count >= 1
            && u64::from(unit) + u64::from(header.unit_count) <= u64::from(units);
        if header.unit_index != unit || !fits {
            return Err(MetaDbError::corruption(
                "WAL chunk header",
                format!(
                    "unit {unit} of the WAL region holds a header for units {}+{}",
                    header.unit_index, header.unit_count
                ),
            ));
        }
        found.push((header, crc));
        scan.live.push(LiveChunk {
            unit,
            units: header.unit_count,
            generation: header.generation,
        });
        unit += header.unit_count;
    }
    for batch in found.chunks(SCAN_BATCH_READS_MAX) {
        let requests = batch
            .iter()
            .map(|(header, _)| {
                let offset = region.start_byte() + u64::from(header.unit_index) * UNIT_BYTES;
                let len = header.unit_count as usize * UNIT_BYTES as usize;
                IoRequest::read(offset, AlignedBuf::scratch(len), IoCause::Wal)
            })
            .collect();
        for ((header, crc), completion) in batch.iter().zip(device.run(requests)?) {
            completion.result?;
            let buf = completion
                .request
                .into_buf()
                .expect("a read returns its buffer");
            parse_chunk(&buf, header, *crc, collector)?;
        }
    }
    Ok(scan)
}

/// The chunk header (with its CRC) at the start of every unit that holds one (unit 0's
/// entry is unused): the first `io` bytes of each unit, read in batches into the same
/// buffers.
fn read_unit_heads(
    device: &Device,
    region: Region,
    units: u32,
    io: usize,
) -> Result<Vec<Option<(ChunkHeader, u32)>>, MetaDbError> {
    let mut heads = Vec::with_capacity(units as usize);
    heads.push(None);
    // The reads overwrite their buffers whole.
    let mut bufs: Vec<AlignedBuf> = Vec::new();
    let mut next = 1u32;
    while next < units {
        let end = (next + SCAN_BATCH_READS_MAX as u32).min(units);
        let requests = (next..end)
            .map(|u| {
                let offset = region.start_byte() + u64::from(u) * UNIT_BYTES;
                let buf = bufs.pop().unwrap_or_else(|| AlignedBuf::scratch(io));
                IoRequest::read(offset, buf, IoCause::Wal)
            })
            .collect();
        for completion in device.run(requests)? {
            completion.result?;
            let buf = completion
                .request
                .into_buf()
                .expect("a read returns its buffer");
            heads.push(ChunkHeader::decode(&buf));
            bufs.push(buf);
        }
        next = end;
    }
    Ok(heads)
}

/// Hands every intact record of the chunk to `collector`. Where a record does not check
/// out, the scan resumes at the next byte offset where one does: records are packed
/// byte to byte, and intact records beyond a gap are what tells damage from a torn tail
/// (`WalRecovery::damage`). A record of another chunk never checks out here (it names
/// its own chunk header's CRC).
pub(super) fn parse_chunk(
    buf: &[u8],
    header: &ChunkHeader,
    crc: u32,
    collector: &mut Collector,
) -> Result<(), MetaDbError> {
    // Bytes past the last non-zero one were never written: no record starts there.
    let written = written_len(buf);
    let mut at = CHUNK_DATA_OFFSET;
    while at < written {
        let Some((id, payload, len)) = decode_record(&buf[at..], header, crc) else {
            at += 1;
            continue;
        };
        collector.note_durable(id.generation, id.lane, id.durable);
        collector.add(RecoveredRecord {
            generation: id.generation,
            lane: id.lane,
            lane_seq: id.lane_seq,
            payload: buf[at + payload.start..at + payload.end].to_vec(),
        })?;
        at += len;
    }
    Ok(())
}

/// The length of `buf` up to its last non-zero byte, found from the end a 4 KiB piece at
/// a time by comparing with a zero block (the C library's vectorized comparison: this runs
/// on every chunk and manifest half at every recovery, and their unwritten tails are
/// usually most of them), then a byte at a time within the last piece that is not zero.
pub(crate) fn written_len(buf: &[u8]) -> usize {
    const PIECE: usize = 4096;
    static ZEROS: [u8; PIECE] = [0; PIECE];
    let mut end = buf.len();
    while end > 0 {
        let start = end - (end - 1) % PIECE - 1;
        let piece = &buf[start..end];
        if piece != &ZEROS[..piece.len()] {
            let p = piece
                .iter()
                .rposition(|&b| b != 0)
                .expect("a non-zero byte");
            return start + p + 1;
        }
        end = start;
    }
    0
}

/// Which units hold chunks of unreleased generations; allocation is first-fit from a
/// cursor that moves forward, so the region is used as a ring.
#[derive(Debug)]
struct UnitMap {
    /// Per unit: the generation of the chunk holding it, or 0 if free (generations start
    /// at 1). Unit 0 (region header) is never free.
    owner: Vec<u64>,
    cursor: usize,
    free_count: usize,
}

impl UnitMap {
    fn allocate(&mut self, generation: u64, units: usize) -> Option<u32> {
        assert!(generation > 0 && units > 0);
        let count = self.owner.len();
        if units > self.free_count {
            return None;
        }
        // Two passes: from the cursor to the end, then from unit 1.
        for (from, to) in [(self.cursor, count), (1, count)] {
            let mut run_start = from;
            let mut at = from;
            while at < to {
                if self.owner[at] != 0 {
                    at += 1;
                    run_start = at;
                    continue;
                }
                at += 1;
                if at - run_start == units {
                    self.owner[run_start..at].fill(generation);
                    self.free_count -= units;
                    self.cursor = if at == count { 1 } else { at };
                    return Some(run_start as u32);
                }
            }
        }
        None
    }

    fn free(&mut self, unit: u32, units: u32) {
        let range = unit as usize..(unit + units) as usize;
        assert!(
            self.owner[range.clone()].iter().all(|&g| g != 0),
            "freeing a free unit"
        );
        self.owner[range].fill(0);
        self.free_count += units as usize;
    }

    fn release_through(&mut self, generation: u64) {
        for owner in &mut self.owner[1..] {
            if *owner != 0 && *owner <= generation {
                *owner = 0;
                self.free_count += 1;
            }
        }
    }
}

/// The started region: allocation, chunk construction, writes and flushes.
#[derive(Debug)]
pub(super) struct ChunkStore {
    device: Arc<Device>,
    region: Region,
    io_bytes: usize,
    incarnation: u64,
    units: Mutex<UnitMap>,
    flusher: FlushCombiner,
    health: Health,
    bufs: BufPool,
}

impl ChunkStore {
    /// Writes a region header with a new incarnation over the older copy and flushes it,
    /// so that nothing written from now on can be confused with an earlier open's data.
    pub fn start(device: Arc<Device>, scan: RegionScan) -> Result<ChunkStore, MetaDbError> {
        let region = scan.region;
        let units = unit_count(region);
        let io_bytes = io_bytes_for(&device);
        // Incarnations are read from the region's headers: one at u64::MAX leaves none.
        let incarnation = scan.incarnation_max.checked_add(1).ok_or_else(|| {
            MetaDbError::corruption(
                "WAL region",
                format!("incarnation {} leaves no next one", u64::MAX),
            )
        })?;
        let copy = match scan.header_copies {
            [Some(a), Some(b)] => usize::from(b < a),
            [Some(_), None] => 1,
            [None, _] => 0,
        };
        let mut owner = vec![0u64; units as usize];
        owner[0] = u64::MAX;
        let mut free_count = units as usize - 1;
        for chunk in &scan.live {
            let range = chunk.unit as usize..(chunk.unit + chunk.units) as usize;
            assert!(
                owner[range.clone()].iter().all(|&g| g == 0),
                "recovered chunks overlap"
            );
            owner[range].fill(chunk.generation);
            free_count -= chunk.units as usize;
        }
        let cursor = scan
            .live
            .iter()
            .map(|c| (c.unit + c.units) as usize)
            .max()
            .unwrap_or(1);
        let store = ChunkStore {
            device,
            region,
            io_bytes,
            incarnation,
            units: Mutex::new(UnitMap {
                owner,
                cursor: if cursor >= units as usize { 1 } else { cursor },
                free_count,
            }),
            flusher: FlushCombiner::default(),
            health: Health::default(),
            bufs: BufPool::new(UNIT_BYTES as usize, WRITE_BUFS_POOLED_MAX),
        };
        let mut buf = AlignedBuf::zeroed(io_bytes);
        RegionHeader {
            copy_index: copy as u32,
            incarnation,
            region_start_block: region.start_block,
            region_block_count: region.block_count,
        }
        .encode(&mut buf);
        let offset = region.start_byte() + copy as u64 * REGION_HEADER_COPY_STRIDE;
        store.device.write(offset, buf, IoCause::Wal)?;
        store.flush()?;
        Ok(store)
    }

    fn units(&self) -> MutexGuard<'_, UnitMap> {
        self.units
            .lock()
            .expect("WAL unit map lock poisoned by a panic")
    }

    pub fn health(&self) -> &Health {
        &self.health
    }

    /// Units needed by a chunk holding `data_bytes` of records.
    pub fn units_for(data_bytes: usize) -> u32 {
        let units = (CHUNK_DATA_OFFSET + data_bytes).div_ceil(UNIT_BYTES as usize);
        u32::try_from(units).expect("a chunk has fewer than 2^32 units")
    }

    /// Units not holding chunks of unreleased generations.
    pub fn free_units(&self) -> usize {
        self.units().free_count
    }

    /// A new chunk of `units` units for (generation, lane): its device offset, a zeroed
    /// buffer of its size with the header in place, and the header's CRC. `WalFull` if
    /// no run of free units is long enough.
    pub fn new_chunk(
        &self,
        generation: u64,
        lane: u16,
        kind: ChunkKind,
        units: u32,
    ) -> Result<NewChunk, MetaDbError> {
        let unit = self
            .units()
            .allocate(generation, units as usize)
            .ok_or(MetaDbError::WalFull)?;
        let header = ChunkHeader {
            incarnation: self.incarnation,
            generation,
            lane,
            kind,
            unit_index: unit,
            unit_count: units,
        };
        let mut buf = vec![0u8; units as usize * UNIT_BYTES as usize];
        let crc = header.encode(&mut buf);
        Ok(NewChunk {
            unit,
            units,
            offset: self.region.start_byte() + u64::from(unit) * UNIT_BYTES,
            buf,
            crc,
        })
    }

    /// Gives back a chunk that was never written (allocation rollback).
    pub fn discard_chunk(&self, chunk: &NewChunk) {
        self.units().free(chunk.unit, chunk.units);
    }

    /// Generations `<= generation` are in durable tables: their units become free.
    pub fn release_through(&self, generation: u64) {
        self.units().release_through(generation);
    }

    /// A write of `bytes[start..end]` of the chunk at device offset `chunk_offset`,
    /// widened to whole IO blocks (bytes past the data written so far are zero in
    /// `bytes`). The buffer comes from the pool.
    pub fn chunk_write(
        &self,
        chunk_offset: u64,
        bytes: &[u8],
        start: usize,
        end: usize,
    ) -> IoRequest {
        let io = self.io_bytes;
        let from = start / io * io;
        let to = end.div_ceil(io) * io;
        assert!(
            from < to && to <= bytes.len(),
            "chunk write [{from}, {to}) outside {} bytes",
            bytes.len()
        );
        let mut buf = self.bufs.get();
        if buf.capacity() >= to - from {
            buf.set_len(to - from);
            buf.copy_from_slice(&bytes[from..to]);
        } else {
            buf = AlignedBuf::from_slice(&bytes[from..to]);
        }
        IoRequest::write(chunk_offset + from as u64, buf, IoCause::Wal)
    }

    /// Runs `writes` concurrently and waits for them, breaking the WAL if any fails.
    pub fn run(&self, writes: Vec<IoRequest>) -> Result<(), MetaDbError> {
        self.health.check()?;
        debug_assert!(writes.iter().all(|w| matches!(w.op, IoOp::Write { .. })));
        let completions = self
            .device
            .run(writes)
            .map_err(|e| self.health.fail(e.into()))?;
        for completion in completions {
            if let Some(buf) = completion.request.into_buf() {
                self.bufs.put(buf);
            }
        }
        Ok(())
    }

    /// A queue on which writes are issued now and waited for later
    /// ([`IssuedWrites`]).
    pub fn issuer(&self) -> Result<IssuedWrites<'_>, MetaDbError> {
        self.health.check()?;
        let queue = self
            .device
            .queue()
            .map_err(|e| self.health.fail(e.into()))?;
        Ok(IssuedWrites {
            store: self,
            queue,
            failed: None,
        })
    }

    /// The flushes that cover every write completed before the call
    /// ([`FlushCombiner::need`]).
    pub fn flush_need(&self) -> super::flush::FlushNeed {
        self.flusher.need()
    }

    /// Returns once every write that completed before the call is durable.
    pub fn flush(&self) -> Result<(), MetaDbError> {
        self.flusher.flush(&self.device, &self.health)
    }

    /// Returns once a flush with ticket `need` or later has succeeded.
    pub fn flush_covering(&self, need: super::flush::FlushNeed) -> Result<(), MetaDbError> {
        self.flusher
            .flush_covering(need, &self.device, &self.health)
    }
}

/// A freshly allocated chunk (see [`ChunkStore::new_chunk`]).
#[derive(Debug)]
pub(super) struct NewChunk {
    pub unit: u32,
    pub units: u32,
    /// Device byte offset of the chunk.
    pub offset: u64,
    /// The whole chunk; bytes past the header are zero.
    pub buf: Vec<u8>,
    /// The header's CRC, which every record of the chunk names.
    pub crc: u32,
}

/// Chunk writes issued without waiting, so the issuer can do other work while the device
/// writes (`persist_covering` runs its caller's `before_flush` then). [`IssuedWrites::wait`]
/// must be called before the writes' lanes are released: it is what knows they completed.
pub(super) struct IssuedWrites<'a> {
    store: &'a ChunkStore,
    queue: Queue<'a>,
    /// The first failed write; later completions are still collected.
    failed: Option<DeviceError>,
}

impl IssuedWrites<'_> {
    /// Submits `writes` (waiting for earlier ones first while the queue is full) and
    /// returns without waiting for them. A failure breaks the WAL.
    pub fn issue(&mut self, writes: Vec<IoRequest>) -> Result<(), MetaDbError> {
        debug_assert!(writes.iter().all(|w| matches!(w.op, IoOp::Write { .. })));
        for write in writes {
            let mut request = write;
            while let Err(back) = self.queue.push(request) {
                request = back;
                self.submit(1)?;
            }
        }
        self.submit(0)
    }

    fn submit(&mut self, min_complete: usize) -> Result<(), MetaDbError> {
        let submitted = self.queue.submit(min_complete);
        while let Some(completion) = self.queue.pop() {
            if let Err(e) = completion.result {
                self.failed.get_or_insert(e);
            }
            if let Some(buf) = completion.request.into_buf() {
                self.store.bufs.put(buf);
            }
        }
        submitted.map_err(|e| self.store.health.fail(e.into()))
    }

    /// Waits for every issued write; the first failure, if any, breaks the WAL.
    pub fn wait(mut self) -> Result<(), MetaDbError> {
        while self.queue.outstanding() > 0 {
            self.submit(1)?;
        }
        match self.failed.take() {
            Some(e) => Err(self.store.health.fail(e.into())),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(units: usize) -> UnitMap {
        let mut owner = vec![0; units];
        owner[0] = u64::MAX;
        UnitMap {
            owner,
            cursor: 1,
            free_count: units - 1,
        }
    }

    #[test]
    fn allocation_is_a_ring_and_release_frees_generations() {
        let mut m = map(6);
        assert_eq!(m.allocate(1, 2), Some(1));
        assert_eq!(m.allocate(1, 1), Some(3));
        assert_eq!(m.allocate(2, 2), Some(4));
        assert_eq!(m.allocate(2, 1), None);
        m.release_through(1);
        assert_eq!(m.free_count, 3);
        // Wraps to the start of the ring.
        assert_eq!(m.allocate(3, 3), Some(1));
        assert_eq!(m.allocate(3, 1), None);
        m.release_through(2);
        assert_eq!(m.allocate(4, 1), Some(4));
        m.free(4, 1);
        assert_eq!(m.free_count, 2);
        // A run longer than any free stretch does not fit even if enough units are free.
        m.release_through(3);
        assert_eq!(m.allocate(5, 5), Some(1));
    }

    #[test]
    fn the_chunk_scan_finds_intact_records_beyond_a_damaged_one() {
        use super::super::record::{encode_record, record_bytes, RecordId};
        let header = ChunkHeader {
            incarnation: 1,
            generation: 3,
            lane: 2,
            kind: ChunkKind::Lane,
            unit_index: 1,
            unit_count: 1,
        };
        let mut buf = vec![0u8; UNIT_BYTES as usize];
        let crc = header.encode(&mut buf);
        let mut at = CHUNK_DATA_OFFSET;
        let mut starts = Vec::new();
        for lane_seq in 0..4u64 {
            let payload = vec![lane_seq as u8 + 1; 100 + lane_seq as usize * 7];
            starts.push(at);
            let id = RecordId {
                generation: 3,
                lane: 2,
                lane_seq,
                durable: 0,
            };
            encode_record(&mut buf[at..], id, crc, &payload);
            at += record_bytes(payload.len());
        }
        buf[starts[1] + 40] ^= 0x55;
        let mut collector = Collector::new(0);
        parse_chunk(&buf, &header, crc, &mut collector).unwrap();
        let recovery = collector.finish();
        let run: Vec<u64> = recovery.records.iter().map(|r| r.lane_seq).collect();
        assert_eq!(run, [0]);
        let beyond: Vec<u64> = recovery.holes[0].beyond.iter().map(|b| b.0).collect();
        assert_eq!(beyond, [2, 3]);
    }

    #[test]
    fn written_len_finds_the_last_non_zero_byte() {
        for len in [0usize, 1, 7, 8, 9, 64, 100, 4095, 4096, 4097, 8193] {
            assert_eq!(written_len(&vec![0u8; len]), 0);
            for at in 0..len {
                let mut buf = vec![0u8; len];
                buf[at] = 1;
                assert_eq!(written_len(&buf), at + 1, "len {len} at {at}");
            }
        }
    }
}
