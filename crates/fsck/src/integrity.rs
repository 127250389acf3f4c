//! Checksums of the structures outside MetaDB's records (docs/DESIGN.md §13.1): both
//! superblock copies and every segment summary. MetaDB's own structures (WAL records,
//! manifest, table blocks) are checked by its recovery and by the scan that reads every
//! record; checkpoint slots by the engine's reader, which refuses an owner without a
//! valid slot.
//!
//! Invariants:
//! - A superblock copy is written whole by one sector-atomic write (mkfs, the feature
//!   upgrade, tune, resize), and summaries by no current code (resize zeroes the new
//!   ones), so no crash leaves either invalid: any copy or summary that is neither valid
//!   nor (for summaries) all zero is damage.
//! - Repairs rewrite only what no reader depends on: the damaged copy from the valid
//!   one, a damaged summary as zeros (the unused state).

use crate::problem::{Class, Kind, Objects};
use crate::{Fsck, FsckError};
use device::{AlignedBuf, IoCause, IoRequest};
use format::constants::{BLOCK_SIZE_BYTES, SUMMARY_BLOCKS_PER_SEGMENT};
use format::summary::SegmentSummary;
use format::SegmentNo;

/// A rewrite fsck's repair does outside MetaDB: (device byte offset, bytes).
pub(crate) type RawWrite = (u64, Vec<u8>);

impl Fsck<'_> {
    /// Reports every superblock copy the reader rejected; returns the rewrites that
    /// repair them.
    pub(crate) fn check_superblocks(&mut self) -> Result<Vec<RawWrite>, FsckError> {
        let choice = engine::image::read_superblock(self.device)?;
        let mut writes = Vec::new();
        for (copy, error) in choice.copy_errors.iter().enumerate() {
            let Some(error) = error else { continue };
            let offset = copy as u64 * BLOCK_SIZE_BYTES;
            if self.report(
                Kind::SuperblockCopyInvalid,
                Class::Safe,
                Objects {
                    addr: Some(copy as u64),
                    ..Objects::default()
                },
                format!("superblock copy {copy} (block {copy}) is invalid: {error}"),
                Some("rewrite it from the valid copy"),
            ) {
                let mut block = choice.superblock.encode(copy as u32);
                block.resize(BLOCK_SIZE_BYTES as usize, 0);
                writes.push((offset, block));
            }
        }
        Ok(writes)
    }

    /// Reports every segment summary that is neither all zero nor valid for its segment.
    pub(crate) fn check_summaries(&mut self) -> Result<Vec<RawWrite>, FsckError> {
        let bytes = (SUMMARY_BLOCKS_PER_SEGMENT * BLOCK_SIZE_BYTES) as usize;
        let mut writes = Vec::new();
        for s in 0..self.geometry.segment_count {
            let segment = SegmentNo(s);
            let offset = self.geometry.summary_offset(segment);
            let buf = self
                .device
                .read(offset, AlignedBuf::zeroed(bytes), IoCause::Tool)?;
            if buf.iter().all(|&b| b == 0) {
                continue;
            }
            let Err(error) = SegmentSummary::decode(&buf, segment) else {
                continue;
            };
            if self.report(
                Kind::SummaryInvalid,
                Class::Safe,
                Objects {
                    segment: Some(s),
                    addr: Some(offset / BLOCK_SIZE_BYTES),
                    ..Objects::default()
                },
                format!(
                    "segment summary of segment {s} (block {}) is damaged: {error}",
                    offset / BLOCK_SIZE_BYTES
                ),
                Some("zero it (no reader depends on summaries)"),
            ) {
                writes.push((offset, vec![0u8; bytes]));
            }
        }
        Ok(writes)
    }
}

/// Writes `writes` and flushes.
pub(crate) fn apply(device: &device::Device, writes: Vec<RawWrite>) -> Result<(), FsckError> {
    if writes.is_empty() {
        return Ok(());
    }
    let mut requests: Vec<IoRequest> = writes
        .into_iter()
        .map(|(offset, bytes)| {
            IoRequest::write(offset, AlignedBuf::from_slice(&bytes), IoCause::Tool)
        })
        .collect();
    requests.push(IoRequest::flush(IoCause::Tool));
    for completion in device.run(requests)? {
        completion.result?;
    }
    Ok(())
}
