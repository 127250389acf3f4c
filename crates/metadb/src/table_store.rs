//! Where tables live: space lent by the layer above (docs/DESIGN.md §7, "One allocator").
//!
//! MetaDB knows nothing of segments' owners or domains: it asks a [`TableStore`] for a
//! free 2 MiB segment per table, and gives segments back once the durable manifest no
//! longer names them. The engine implements this trait over its free-segment pool;
//! [`SegmentPool`] is a standalone implementation over an augefs image's segment area,
//! for MetaDB used on its own (tests, `augefs bench metadb`).
//!
//! Invariants:
//! - A segment is handed out to at most one table at a time.
//! - A released segment was named by no durable manifest state when it was released.

use crate::error::MetaDbError;
use format::SegmentNo;

pub trait TableStore: Send + Sync + std::fmt::Debug {
    /// A free segment for one table.
    fn allocate(&self) -> Result<SegmentNo, MetaDbError>;
    /// Gives back a segment no durable manifest state names.
    fn release(&self, segment: SegmentNo);
    /// Recovery: these segments hold live tables (named by the manifest).
    fn claim(&self, segments: &[SegmentNo]);
    /// Byte offset of the segment on the device.
    fn offset(&self, segment: SegmentNo) -> u64;
}

/// A standalone table store over `[first, first + count)` of an image's segment area.
#[derive(Debug)]
pub struct SegmentPool {
    geometry: format::Geometry,
    first: u32,
    count: u32,
    used: std::sync::Mutex<Vec<bool>>,
}

impl SegmentPool {
    /// A pool over segments `first .. first + count` of `geometry`'s segment area.
    pub fn new(geometry: format::Geometry, first: u32, count: u32) -> SegmentPool {
        assert!(
            first as u64 + count as u64 <= geometry.segment_count as u64,
            "pool beyond the segment area"
        );
        SegmentPool {
            geometry,
            first,
            count,
            used: std::sync::Mutex::new(vec![false; count as usize]),
        }
    }

    /// A pool over the whole segment area.
    pub fn whole(geometry: format::Geometry) -> SegmentPool {
        SegmentPool::new(geometry, 0, geometry.segment_count)
    }

    pub fn free_count(&self) -> usize {
        self.used
            .lock()
            .expect("pool lock")
            .iter()
            .filter(|u| !**u)
            .count()
    }
}

impl TableStore for SegmentPool {
    fn allocate(&self) -> Result<SegmentNo, MetaDbError> {
        let mut used = self.used.lock().expect("pool lock");
        let i = used.iter().position(|u| !*u).ok_or(MetaDbError::NoSpace)?;
        used[i] = true;
        Ok(SegmentNo(self.first + i as u32))
    }

    fn release(&self, segment: SegmentNo) {
        let i = (segment.0 - self.first) as usize;
        let mut used = self.used.lock().expect("pool lock");
        assert!(used[i], "segment {segment} released twice");
        used[i] = false;
    }

    fn claim(&self, segments: &[SegmentNo]) {
        let mut used = self.used.lock().expect("pool lock");
        for s in segments {
            assert!(
                s.0 >= self.first && s.0 < self.first + self.count,
                "segment {s} outside the pool"
            );
            let i = (s.0 - self.first) as usize;
            assert!(!used[i], "segment {s} claimed twice");
            used[i] = true;
        }
    }

    fn offset(&self, segment: SegmentNo) -> u64 {
        self.geometry.segment_start(segment).byte_offset()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocates_releases_and_claims() {
        let g = format::Geometry::compute(64 << 20, 1).unwrap();
        let pool = SegmentPool::new(g, 2, 3);
        pool.claim(&[SegmentNo(3)]);
        let a = pool.allocate().unwrap();
        let b = pool.allocate().unwrap();
        assert_eq!((a, b), (SegmentNo(2), SegmentNo(4)));
        assert!(matches!(pool.allocate(), Err(MetaDbError::NoSpace)));
        pool.release(a);
        assert_eq!(pool.allocate().unwrap(), a);
        assert_eq!(pool.offset(SegmentNo(0)), g.segments.start_byte());
    }
}
