//! Growing a file system into a larger device, offline (`augefs resize`; docs/FORMAT.md
//! §3 "Resizing").
//!
//! The layout is a function of the device size (docs/FORMAT.md §2). A grow is done in
//! place when the layout of the larger device keeps every region but the summaries
//! where they are and only adds segments (and their summaries) at the end, as it does
//! up to 256 MiB (the WAL's 8 MiB minimum) and within the 2 MiB alignment slack before
//! the segment area elsewhere, and the file system never grew by an added area. Any
//! other grow adds an area after the device's old end: the summaries of its segments,
//! then the segments (`Geometry::with_area`, at most `GROWS_MAX` times). Every shrink
//! is refused, saying why.
//!
//! Invariants:
//! - Nothing an existing structure points to moves: checkpoints, manifest, WAL, the
//!   summaries of existing segments and the segment areas keep their blocks.
//! - Crash safety: the new summaries are zeroed and flushed before the superblock
//!   copies (copy 1, flush, copy 0, flush) name them; a crash leaves the old file
//!   system on a larger device (which opens as it did) or the grown one.

use crate::error::EngineError;
use crate::image::{read_superblock, write_superblock};
use device::{AlignedBuf, Device, IoCause, IoRequest};
use format::geometry::{Geometry, Region};
use format::superblock::Superblock;

/// What a grow did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grown {
    pub old_segment_count: u32,
    pub new: Superblock,
}

/// The layout `old` grows into on a device of `new_size_bytes` (a pure function:
/// `augefs resize` asks before it extends a file).
pub fn plan(old: &Geometry, new_size_bytes: u64) -> Result<Geometry, EngineError> {
    let g = old;
    if new_size_bytes < g.device_size_bytes {
        return Err(EngineError::BadResize(format!(
            "shrinking ({} to {new_size_bytes} bytes) is not supported: the segments at the \
             end may hold data, and the log is not moved",
            g.device_size_bytes
        )));
    }
    if let Some(new) = in_place(g, new_size_bytes) {
        return Ok(new);
    }
    g.with_area(new_size_bytes)
        .map_err(|e| EngineError::BadResize(e.to_string()))
}

/// The layout of the larger device if it keeps every region but the summaries and
/// adds segments at the end of the segment area.
fn in_place(g: &Geometry, new_size_bytes: u64) -> Option<Geometry> {
    if g.grown_count > 0 {
        return None;
    }
    let new = Geometry::compute(new_size_bytes, g.domain_count).ok()?;
    let kept = new.checkpoints == g.checkpoints
        && new.manifest == g.manifest
        && new.wal == g.wal
        && new.summaries.start_block == g.summaries.start_block
        && new.segments.start_block == g.segments.start_block;
    (kept && new.segment_count > g.segment_count).then_some(new)
}

/// Grows the file system on `device` to `new_size_bytes` (at most the device's size).
pub fn grow(device: &Device, new_size_bytes: u64) -> Result<Grown, EngineError> {
    let old = read_superblock(device)?.superblock;
    let g = old.geometry;
    if new_size_bytes > device.size_bytes() {
        return Err(EngineError::BadResize(format!(
            "{new_size_bytes} bytes is more than the device has ({})",
            device.size_bytes()
        )));
    }
    let new = plan(&g, new_size_bytes)?;
    zero_new_summaries(device, &g, &new)?;
    let mut sb = old.clone();
    if new.grown_count > 0 {
        sb.feature_flags |= format::superblock::FEATURE_GROWN;
    }
    sb.geometry = new;
    sb.sequence += 1;
    write_superblock(device, &sb)?;
    Ok(Grown {
        old_segment_count: g.segment_count,
        new: sb,
    })
}

/// Zeroes the summaries of the segments the grow adds (the unused state), then flushes.
fn zero_new_summaries(device: &Device, old: &Geometry, new: &Geometry) -> Result<(), EngineError> {
    let added = if new.grown_count > old.grown_count {
        new.grown_areas().last().expect("an added area").summaries
    } else {
        let added = Region {
            start_block: old.summaries.end_block(),
            block_count: new.summaries.end_block() - old.summaries.end_block(),
        };
        assert!(
            added.end_block() <= new.segments.start_block,
            "before the segment area"
        );
        added
    };
    // In pieces: a grow by a terabyte adds gigabytes of summaries.
    const PIECE: u64 = 16 << 20;
    let mut at = added.start_byte();
    while at < added.end_byte() {
        let n = PIECE.min(added.end_byte() - at);
        device.run(vec![IoRequest::write(
            at,
            AlignedBuf::zeroed(n as usize),
            IoCause::Tool,
        )])?;
        at += n;
    }
    device.run(vec![IoRequest::flush(IoCause::Tool)])?;
    Ok(())
}
