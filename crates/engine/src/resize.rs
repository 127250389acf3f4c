//! Growing a file system into a larger device, offline (`augefs resize`; docs/FORMAT.md
//! §3 "Resizing").
//!
//! The layout is a function of the device size (docs/FORMAT.md §2): a grow is done in
//! place when the new layout keeps every region but the summaries where they are and
//! only adds segments (and their summaries) at the end, as it does up to 256 MiB (the
//! WAL's 8 MiB minimum) and within the 2 MiB alignment slack before the segment area
//! elsewhere. Any other grow would move the WAL or the segment area and is refused,
//! saying why; so is every shrink.
//!
//! Invariants:
//! - Nothing an existing structure points to moves: checkpoints, manifest, WAL, the
//!   summaries of existing segments and the segment area keep their blocks.
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

/// The layout `old` grows into on a device of `new_size_bytes`, if the grow can be
/// done in place (a pure function: `augefs resize` asks before it extends a file).
pub fn plan(old: &Geometry, new_size_bytes: u64) -> Result<Geometry, EngineError> {
    let refuse = |why: String| Err(EngineError::BadResize(why));
    let g = old;
    if new_size_bytes < g.device_size_bytes {
        return refuse(format!(
            "shrinking ({} to {new_size_bytes} bytes) is not supported: the segments at the \
             end may hold data, and the log is not moved",
            g.device_size_bytes
        ));
    }
    let new = Geometry::compute(new_size_bytes, g.domain_count)
        .map_err(|e| EngineError::BadResize(e.to_string()))?;
    let kept = [
        ("checkpoints", g.checkpoints, new.checkpoints),
        ("manifest", g.manifest, new.manifest),
        ("WAL", g.wal, new.wal),
    ];
    for (name, was, would) in kept {
        if was != would {
            return refuse(format!(
                "growing to {new_size_bytes} bytes would move or resize the {name} (blocks \
                 {}+{} to {}+{}): not supported in place (the layout follows the device's \
                 size, docs/FORMAT.md §2); copy the files to a file system made on the \
                 larger device",
                was.start_block, was.block_count, would.start_block, would.block_count
            ));
        }
    }
    if new.summaries.start_block != g.summaries.start_block
        || new.segments.start_block != g.segments.start_block
    {
        return refuse(format!(
            "growing to {new_size_bytes} bytes would move the segment area (its summaries \
             outgrow the space before it): not supported in place"
        ));
    }
    assert!(
        new.segment_count >= g.segment_count,
        "a larger device, no fewer segments"
    );
    if new.segment_count == g.segment_count {
        return refuse(format!(
            "the file system already has every segment {new_size_bytes} bytes hold ({})",
            g.segment_count
        ));
    }
    Ok(new)
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
    let added = Region {
        start_block: old.summaries.end_block(),
        block_count: new.summaries.end_block() - old.summaries.end_block(),
    };
    assert!(
        added.end_block() <= new.segments.start_block,
        "before the segment area"
    );
    let bytes = added.size_bytes() as usize;
    device.run(vec![
        IoRequest::write(added.start_byte(), AlignedBuf::zeroed(bytes), IoCause::Tool),
        IoRequest::flush(IoCause::Tool),
    ])?;
    Ok(())
}
