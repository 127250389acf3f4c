//! Device geometry: where each region starts and how large it is, as a pure function of
//! the device size and the domain count (docs/FORMAT.md §2).
//!
//! Invariants:
//! - Regions appear in this order and never overlap: superblocks, checkpoints, manifest,
//!   WAL backing, segment summaries, segment area.
//! - The segment area starts on a 2 MiB boundary and holds whole segments only.
//! - The superblock stores the regions, and a reader recomputes them: any difference is
//!   corruption.

use crate::constants::*;
use crate::error::GeometryError;
use crate::ids::{BlockAddr, DomainId, SegmentNo};
use serde::Serialize;

/// A contiguous run of blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Region {
    pub start_block: u64,
    pub block_count: u64,
}

impl Region {
    pub fn start_byte(&self) -> u64 {
        self.start_block * BLOCK_SIZE_BYTES
    }

    pub fn end_block(&self) -> u64 {
        self.start_block + self.block_count
    }

    pub fn end_byte(&self) -> u64 {
        self.end_block() * BLOCK_SIZE_BYTES
    }

    pub fn size_bytes(&self) -> u64 {
        self.block_count * BLOCK_SIZE_BYTES
    }

    pub fn contains(&self, block: BlockAddr) -> bool {
        block.0 >= self.start_block && block.0 < self.end_block()
    }
}

/// Whose checkpoint a slot holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum CheckpointOwner {
    /// The whole-file-system checkpoint taken by sync().
    Global,
    Domain(DomainId),
}

/// The layout of one augefs device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Geometry {
    /// Bytes covered by the layout (the device size rounded down to a block).
    pub device_size_bytes: u64,
    pub domain_count: u32,
    pub superblocks: Region,
    pub checkpoints: Region,
    pub manifest: Region,
    pub wal: Region,
    pub summaries: Region,
    pub segments: Region,
    pub segment_count: u32,
}

fn align_up(x: u64, to: u64) -> u64 {
    x.div_ceil(to) * to
}

fn bytes_to_blocks(bytes: u64) -> u64 {
    assert!(bytes % BLOCK_SIZE_BYTES == 0, "{bytes} is not whole blocks");
    bytes / BLOCK_SIZE_BYTES
}

impl Geometry {
    /// Segments available for a device of this size, before choosing a domain count.
    pub fn segment_count_for(device_size_bytes: u64) -> Result<u32, GeometryError> {
        Ok(Self::compute(device_size_bytes, 1)?.segment_count)
    }

    /// The default domain count for a device: 16 (augefs.txt §VII-F) unless the device is
    /// too small to give each domain room to work.
    pub fn default_domain_count(device_size_bytes: u64) -> Result<u32, GeometryError> {
        let segments = Self::segment_count_for(device_size_bytes)? as u64;
        Ok((segments / SEGMENTS_PER_DOMAIN_MIN).clamp(1, DOMAIN_COUNT_DEFAULT as u64) as u32)
    }

    pub fn compute(device_size_bytes: u64, domain_count: u32) -> Result<Geometry, GeometryError> {
        if device_size_bytes < DEVICE_SIZE_MIN_BYTES {
            return Err(GeometryError::DeviceTooSmall {
                size_bytes: device_size_bytes,
                min_bytes: DEVICE_SIZE_MIN_BYTES,
            });
        }
        if domain_count == 0 || domain_count > DOMAIN_COUNT_MAX {
            return Err(GeometryError::DomainCount {
                count: domain_count,
                max: DOMAIN_COUNT_MAX,
                fit: 0,
            });
        }
        let device_size_bytes = device_size_bytes / BLOCK_SIZE_BYTES * BLOCK_SIZE_BYTES;
        let superblocks = Region {
            start_block: 0,
            block_count: SUPERBLOCK_COPIES,
        };

        let owners = domain_count as u64 + 1;
        let checkpoints = Region {
            start_block: CHECKPOINT_REGION_START_BLOCK,
            block_count: owners * CHECKPOINT_SLOTS_PER_OWNER * CHECKPOINT_SLOT_BLOCKS,
        };
        let manifest_start = align_up(checkpoints.end_byte(), MANIFEST_REGION_ALIGN_BYTES);
        let manifest = Region {
            start_block: bytes_to_blocks(manifest_start),
            block_count: bytes_to_blocks(MANIFEST_REGION_BYTES),
        };
        let wal_start = align_up(manifest.end_byte(), SEGMENT_SIZE_BYTES);
        let wal_bytes = (device_size_bytes / WAL_REGION_DEVICE_FRACTION / SEGMENT_SIZE_BYTES
            * SEGMENT_SIZE_BYTES)
            .clamp(WAL_REGION_BYTES_MIN, WAL_REGION_BYTES_MAX);
        let wal = Region {
            start_block: bytes_to_blocks(wal_start),
            block_count: bytes_to_blocks(wal_bytes),
        };

        // n segments cost n * (2 MiB + summary) plus alignment of the segment area.
        let summaries_start = wal.end_byte();
        let summary_bytes = SUMMARY_BLOCKS_PER_SEGMENT * BLOCK_SIZE_BYTES;
        let mut n = device_size_bytes.saturating_sub(summaries_start)
            / (SEGMENT_SIZE_BYTES + summary_bytes);
        // The sizes come from a superblock too, so a device size near u64::MAX must not
        // overflow: n x 8 KiB and n x 2 MiB are below the size, their sum may not be.
        let fits = |n: u64| {
            let seg_start = align_up(summaries_start + n * summary_bytes, SEGMENT_SIZE_BYTES);
            seg_start
                .checked_add(n * SEGMENT_SIZE_BYTES)
                .is_some_and(|end| end <= device_size_bytes)
        };
        while n > 0 && !fits(n) {
            n -= 1;
        }
        let n = n.min(u32::MAX as u64);
        let summaries = Region {
            start_block: bytes_to_blocks(summaries_start),
            block_count: n * SUMMARY_BLOCKS_PER_SEGMENT,
        };
        let segments_start = align_up(summaries.end_byte(), SEGMENT_SIZE_BYTES);
        let segments = Region {
            start_block: bytes_to_blocks(segments_start),
            block_count: n * BLOCKS_PER_SEGMENT,
        };

        let fit = (n / SEGMENTS_PER_DOMAIN_MIN).min(DOMAIN_COUNT_MAX as u64) as u32;
        if n < SEGMENTS_PER_DOMAIN_MIN {
            return Err(GeometryError::DeviceTooSmall {
                size_bytes: device_size_bytes,
                min_bytes: DEVICE_SIZE_MIN_BYTES,
            });
        }
        if domain_count > fit {
            return Err(GeometryError::DomainCount {
                count: domain_count,
                max: DOMAIN_COUNT_MAX,
                fit,
            });
        }
        let geometry = Geometry {
            device_size_bytes,
            domain_count,
            superblocks,
            checkpoints,
            manifest,
            wal,
            summaries,
            segments,
            segment_count: n as u32,
        };
        geometry.assert_valid();
        Ok(geometry)
    }

    /// Panics if regions overlap, are out of order or leave the device.
    pub fn assert_valid(&self) {
        let order = [
            self.superblocks,
            self.checkpoints,
            self.manifest,
            self.wal,
            self.summaries,
            self.segments,
        ];
        for pair in order.windows(2) {
            assert!(
                pair[0].end_block() <= pair[1].start_block,
                "regions overlap: {order:?}"
            );
        }
        assert!(self.segments.end_byte() <= self.device_size_bytes);
        assert_eq!(self.segments.start_byte() % SEGMENT_SIZE_BYTES, 0);
        assert_eq!(
            self.segments.block_count,
            self.segment_count as u64 * BLOCKS_PER_SEGMENT
        );
        assert_eq!(
            self.summaries.block_count,
            self.segment_count as u64 * SUMMARY_BLOCKS_PER_SEGMENT
        );
    }

    /// The byte offset of a checkpoint slot (0 or 1) of `owner`.
    pub fn checkpoint_slot_offset(&self, owner: CheckpointOwner, slot: u32) -> u64 {
        assert!((slot as u64) < CHECKPOINT_SLOTS_PER_OWNER);
        let owner_index = match owner {
            CheckpointOwner::Global => 0,
            CheckpointOwner::Domain(d) => {
                assert!((d.0 as u32) < self.domain_count, "domain {d} out of range");
                d.0 as u64 + 1
            }
        };
        self.checkpoints.start_byte()
            + (owner_index * CHECKPOINT_SLOTS_PER_OWNER + slot as u64) * CHECKPOINT_SLOT_BYTES
    }

    /// Every checkpoint owner: the global one first, then domains in order.
    pub fn checkpoint_owners(&self) -> Vec<CheckpointOwner> {
        std::iter::once(CheckpointOwner::Global)
            .chain((0..self.domain_count).map(|d| CheckpointOwner::Domain(DomainId(d as u16))))
            .collect()
    }

    pub fn segment_start(&self, segment: SegmentNo) -> BlockAddr {
        assert!(segment.0 < self.segment_count);
        BlockAddr(self.segments.start_block + segment.0 as u64 * BLOCKS_PER_SEGMENT)
    }

    pub fn segment_of(&self, block: BlockAddr) -> Option<SegmentNo> {
        self.segments
            .contains(block)
            .then(|| SegmentNo(((block.0 - self.segments.start_block) / BLOCKS_PER_SEGMENT) as u32))
    }

    pub fn summary_offset(&self, segment: SegmentNo) -> u64 {
        assert!(segment.0 < self.segment_count);
        self.summaries.start_byte()
            + segment.0 as u64 * SUMMARY_BLOCKS_PER_SEGMENT * BLOCK_SIZE_BYTES
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minimum_device_layout() {
        let g = Geometry::compute(64 * MIB, 1).unwrap();
        assert_eq!(g.checkpoints.start_block, 4);
        assert_eq!(g.manifest.start_byte(), MIB);
        assert_eq!(g.wal.start_byte(), 6 * MIB);
        assert_eq!(g.wal.size_bytes(), 8 * MIB);
        assert_eq!(g.summaries.start_byte(), 14 * MIB);
        assert_eq!(g.segments.start_byte(), 16 * MIB);
        assert_eq!(g.segment_count, 24);
        assert_eq!(Geometry::default_domain_count(64 * MIB).unwrap(), 6);
    }

    #[test]
    fn large_device_uses_capped_wal_and_default_domains() {
        let g = Geometry::compute(64 * GIB, 16).unwrap();
        assert_eq!(g.wal.size_bytes(), WAL_REGION_BYTES_MAX);
        assert_eq!(Geometry::default_domain_count(64 * GIB).unwrap(), 16);
        assert!(g.segment_count > 32_000);
        // Little is wasted: segments cover all but the fixed regions and alignment.
        let overhead = g.device_size_bytes - g.segments.size_bytes();
        assert!(
            overhead < WAL_REGION_BYTES_MAX + g.summaries.size_bytes() + 8 * MIB,
            "{overhead}"
        );
        // Summaries cost 8 KiB per 2 MiB segment: 0.4% of the device.
        assert!(g.summaries.size_bytes() * 250 < g.device_size_bytes);
    }

    #[test]
    fn every_size_between_min_and_a_few_gib_is_valid() {
        let mut size = DEVICE_SIZE_MIN_BYTES;
        while size < 3 * GIB {
            let g = Geometry::compute(size, 1).unwrap();
            g.assert_valid();
            size += 7 * MIB + 12 * KIB;
        }
    }

    #[test]
    fn rejects_too_small_and_bad_domain_counts() {
        assert!(matches!(
            Geometry::compute(MIB, 1),
            Err(GeometryError::DeviceTooSmall { .. })
        ));
        assert!(matches!(
            Geometry::compute(64 * MIB, 0),
            Err(GeometryError::DomainCount { .. })
        ));
        assert!(matches!(
            Geometry::compute(64 * MIB, 7),
            Err(GeometryError::DomainCount { fit: 6, .. })
        ));
        assert!(matches!(
            Geometry::compute(64 * GIB, 257),
            Err(GeometryError::DomainCount { .. })
        ));
    }

    #[test]
    fn checkpoint_slots_are_distinct_and_inside_region() {
        let g = Geometry::compute(GIB, 16).unwrap();
        let mut offsets = Vec::new();
        for owner in g.checkpoint_owners() {
            for slot in 0..2 {
                let off = g.checkpoint_slot_offset(owner, slot);
                assert!(off >= g.checkpoints.start_byte());
                assert!(off + CHECKPOINT_SLOT_BYTES <= g.checkpoints.end_byte());
                offsets.push(off);
            }
        }
        offsets.sort();
        offsets.dedup();
        assert_eq!(offsets.len(), 17 * 2);
    }

    #[test]
    fn segment_addressing_round_trips() {
        let g = Geometry::compute(GIB, 4).unwrap();
        let last = SegmentNo(g.segment_count - 1);
        let addr = g.segment_start(last);
        assert_eq!(g.segment_of(addr), Some(last));
        assert_eq!(
            g.segment_of(BlockAddr(addr.0 + BLOCKS_PER_SEGMENT - 1)),
            Some(last)
        );
        assert_eq!(g.segment_of(BlockAddr(0)), None);
        assert!(g.summary_offset(last) + SUMMARY_BYTES as u64 <= g.summaries.end_byte());
    }
}
