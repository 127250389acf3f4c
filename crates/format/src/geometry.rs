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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
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

/// The most areas a file system can grow by (the superblock records the device size
/// after each grow: docs/FORMAT.md §2 "Grown areas").
pub const GROWS_MAX: usize = 8;

/// An area added by growing the file system past what its layout can take in place:
/// the summaries of its segments, then (on a 2 MiB boundary) the segments, numbered on
/// from the segments before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
pub struct GrownArea {
    /// The device's size after this grow (the area ends with it, but for bytes too few
    /// for a segment).
    pub device_size_bytes: u64,
    pub first_segment: u32,
    pub segment_count: u32,
    pub summaries: Region,
    pub segments: Region,
}

/// The layout of one augefs device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Geometry {
    /// Bytes covered by the layout (the device size rounded down to a block).
    pub device_size_bytes: u64,
    /// The device size the regions up to `segments` were computed for:
    /// `device_size_bytes` unless the file system grew by added areas.
    pub layout_size_bytes: u64,
    pub domain_count: u32,
    pub superblocks: Region,
    pub checkpoints: Region,
    pub manifest: Region,
    pub wal: Region,
    /// The summaries of the first segment area's segments.
    pub summaries: Region,
    /// The first segment area.
    pub segments: Region,
    /// Segments in all: the first area's, then each grown area's.
    pub segment_count: u32,
    /// Areas added by growing, in order: the first `grown_count` entries.
    pub grown: [GrownArea; GROWS_MAX],
    pub grown_count: u32,
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
            layout_size_bytes: device_size_bytes,
            domain_count,
            superblocks,
            checkpoints,
            manifest,
            wal,
            summaries,
            segments,
            segment_count: n as u32,
            grown: [GrownArea::default(); GROWS_MAX],
            grown_count: 0,
        };
        geometry.assert_valid();
        Ok(geometry)
    }

    /// The layout of a file system made on `layout_size_bytes` and grown by an added
    /// area to each of `grown_sizes` in turn (what a superblock records).
    pub fn compute_grown(
        layout_size_bytes: u64,
        domain_count: u32,
        grown_sizes: &[u64],
    ) -> Result<Geometry, GeometryError> {
        let mut g = Geometry::compute(layout_size_bytes, domain_count)?;
        for &size in grown_sizes {
            g = g.with_area(size)?;
        }
        Ok(g)
    }

    /// This layout on a device grown to `new_size_bytes`, the space after the last
    /// segment area becoming an added area (docs/FORMAT.md §2 "Grown areas"). Nothing
    /// before it moves.
    pub fn with_area(&self, new_size_bytes: u64) -> Result<Geometry, GeometryError> {
        if self.grown_count as usize == GROWS_MAX {
            return Err(GeometryError::TooManyGrows { max: GROWS_MAX });
        }
        let new_size_bytes = new_size_bytes / BLOCK_SIZE_BYTES * BLOCK_SIZE_BYTES;
        let last_end = self
            .grown_areas()
            .last()
            .map_or(self.segments.end_byte(), |a| a.segments.end_byte());
        // Sizes come from a superblock too: near u64::MAX nothing may overflow.
        let start = last_end
            .max(self.device_size_bytes)
            .checked_next_multiple_of(SEGMENT_SIZE_BYTES)
            .unwrap_or(u64::MAX);
        let summary_bytes = SUMMARY_BLOCKS_PER_SEGMENT * BLOCK_SIZE_BYTES;
        let fits = |n: u64| {
            (start + n * summary_bytes)
                .checked_next_multiple_of(SEGMENT_SIZE_BYTES)
                .and_then(|seg_start| seg_start.checked_add(n * SEGMENT_SIZE_BYTES))
                .is_some_and(|end| end <= new_size_bytes)
        };
        let mut n = new_size_bytes.saturating_sub(start) / (SEGMENT_SIZE_BYTES + summary_bytes);
        while n > 0 && !fits(n) {
            n -= 1;
        }
        let n = n.min(u64::from(u32::MAX - self.segment_count));
        if n == 0 {
            return Err(GeometryError::GrowTooSmall {
                from_bytes: self.device_size_bytes,
                to_bytes: new_size_bytes,
                min_bytes: start
                    .saturating_add(2 * SEGMENT_SIZE_BYTES)
                    .saturating_sub(self.device_size_bytes),
            });
        }
        let summaries = Region {
            start_block: bytes_to_blocks(start),
            block_count: n * SUMMARY_BLOCKS_PER_SEGMENT,
        };
        let segments = Region {
            start_block: bytes_to_blocks(align_up(summaries.end_byte(), SEGMENT_SIZE_BYTES)),
            block_count: n * BLOCKS_PER_SEGMENT,
        };
        let mut g = *self;
        g.grown[g.grown_count as usize] = GrownArea {
            device_size_bytes: new_size_bytes,
            first_segment: self.segment_count,
            segment_count: n as u32,
            summaries,
            segments,
        };
        g.grown_count += 1;
        g.segment_count += n as u32;
        g.device_size_bytes = new_size_bytes;
        g.assert_valid();
        Ok(g)
    }

    /// The areas added by growing, in order.
    pub fn grown_areas(&self) -> &[GrownArea] {
        &self.grown[..self.grown_count as usize]
    }

    /// The device sizes after each grow by an added area (what the superblock records).
    pub fn grown_sizes(&self) -> Vec<u64> {
        self.grown_areas()
            .iter()
            .map(|a| a.device_size_bytes)
            .collect()
    }

    /// Segments in the first segment area.
    pub fn first_area_segments(&self) -> u32 {
        (self.segments.block_count / BLOCKS_PER_SEGMENT) as u32
    }

    /// Bytes of all segments.
    pub fn segment_bytes(&self) -> u64 {
        u64::from(self.segment_count) * SEGMENT_SIZE_BYTES
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
        assert!(self.segments.end_byte() <= self.layout_size_bytes);
        assert!(self.layout_size_bytes <= self.device_size_bytes);
        assert_eq!(self.segments.start_byte() % SEGMENT_SIZE_BYTES, 0);
        assert_eq!(self.segments.block_count % BLOCKS_PER_SEGMENT, 0);
        let first = self.first_area_segments();
        assert_eq!(
            self.summaries.block_count,
            u64::from(first) * SUMMARY_BLOCKS_PER_SEGMENT
        );
        // Grown areas follow in order, each after the device the grow before it left.
        let (mut end, mut size, mut next) =
            (self.segments.end_block(), self.layout_size_bytes, first);
        for a in self.grown_areas() {
            assert!(a.summaries.start_byte() >= size && a.summaries.start_block >= end);
            assert!(a.summaries.end_block() <= a.segments.start_block);
            assert_eq!(a.segments.start_byte() % SEGMENT_SIZE_BYTES, 0);
            assert_eq!(a.first_segment, next);
            assert_eq!(
                a.segments.block_count,
                u64::from(a.segment_count) * BLOCKS_PER_SEGMENT
            );
            assert_eq!(
                a.summaries.block_count,
                u64::from(a.segment_count) * SUMMARY_BLOCKS_PER_SEGMENT
            );
            assert!(a.segments.end_byte() <= a.device_size_bytes && a.device_size_bytes > size);
            (end, size, next) = (
                a.segments.end_block(),
                a.device_size_bytes,
                next + a.segment_count,
            );
        }
        assert_eq!(next, self.segment_count, "every segment in an area");
        assert_eq!(size, self.device_size_bytes);
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
        let (segments, _, i) = self.area_of(segment);
        BlockAddr(segments.start_block + i * BLOCKS_PER_SEGMENT)
    }

    pub fn segment_of(&self, block: BlockAddr) -> Option<SegmentNo> {
        if self.segments.contains(block) {
            let i = (block.0 - self.segments.start_block) / BLOCKS_PER_SEGMENT;
            return Some(SegmentNo(i as u32));
        }
        let a = self
            .grown_areas()
            .iter()
            .find(|a| a.segments.contains(block))?;
        let i = (block.0 - a.segments.start_block) / BLOCKS_PER_SEGMENT;
        Some(SegmentNo(a.first_segment + i as u32))
    }

    pub fn summary_offset(&self, segment: SegmentNo) -> u64 {
        let (_, summaries, i) = self.area_of(segment);
        summaries.start_byte() + i * SUMMARY_BLOCKS_PER_SEGMENT * BLOCK_SIZE_BYTES
    }

    /// The segment area holding `segment`, its summaries, and the segment's index there.
    fn area_of(&self, segment: SegmentNo) -> (Region, Region, u64) {
        assert!(
            segment.0 < self.segment_count,
            "segment {} of {}",
            segment.0,
            self.segment_count
        );
        if segment.0 < self.first_area_segments() {
            return (self.segments, self.summaries, u64::from(segment.0));
        }
        let a = self
            .grown_areas()
            .iter()
            .find(|a| segment.0 < a.first_segment + a.segment_count)
            .expect("every segment is in an area");
        (
            a.segments,
            a.summaries,
            u64::from(segment.0 - a.first_segment),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every segment of `g` maps to its own blocks and summary, and back.
    fn check_segments(g: &Geometry) {
        let mut last_end = 0;
        let mut summaries = std::collections::BTreeSet::new();
        for s in 0..g.segment_count {
            let start = g.segment_start(SegmentNo(s));
            assert!(start.0 >= last_end, "segment {s} overlaps the one before");
            last_end = start.0 + BLOCKS_PER_SEGMENT;
            assert!(last_end * BLOCK_SIZE_BYTES <= g.device_size_bytes);
            assert_eq!(g.segment_of(start), Some(SegmentNo(s)));
            assert_eq!(g.segment_of(BlockAddr(last_end - 1)), Some(SegmentNo(s)));
            let summary = g.summary_offset(SegmentNo(s));
            assert!(g
                .segment_of(BlockAddr(summary / BLOCK_SIZE_BYTES))
                .is_none());
            assert!(summary >= g.wal.end_byte() && summaries.insert(summary));
        }
        assert_eq!(
            g.segment_bytes(),
            u64::from(g.segment_count) * SEGMENT_SIZE_BYTES
        );
    }

    #[test]
    fn grown_areas_add_segments_and_move_nothing() {
        let g0 = Geometry::compute(64 * MIB, 2).unwrap();
        let g1 = g0.with_area(GIB + 5).unwrap();
        let g2 = g1.with_area(3 * GIB).unwrap();
        for g in [&g1, &g2] {
            assert_eq!(
                (g.checkpoints, g.manifest, g.wal, g.summaries, g.segments),
                (
                    g0.checkpoints,
                    g0.manifest,
                    g0.wal,
                    g0.summaries,
                    g0.segments
                )
            );
            check_segments(g);
        }
        assert_eq!(
            (g1.device_size_bytes, g1.layout_size_bytes),
            (GIB, 64 * MIB)
        );
        assert_eq!(g2.grown_sizes(), vec![GIB, 3 * GIB]);
        assert_eq!(g2.grown_areas()[0], g1.grown_areas()[0]);
        // 2 GiB more: 1,020 segments of 2 MiB after their 8 MiB of summaries (8 KiB
        // each, 2 MiB-aligned).
        assert_eq!(g2.segment_count - g1.segment_count, 1020);
        // The example of docs/FORMAT.md §2 "Grown areas".
        let [a, b] = [g2.grown_areas()[0], g2.grown_areas()[1]];
        assert_eq!(
            (
                a.summaries.start_byte(),
                a.segments.start_byte(),
                a.segment_count
            ),
            (64 * MIB, 68 * MIB, 478)
        );
        assert_eq!(
            (
                b.summaries.start_byte(),
                b.segments.start_byte(),
                b.first_segment
            ),
            (GIB, GIB + 8 * MIB, g0.segment_count + 478)
        );
        assert_eq!(
            Geometry::compute_grown(64 * MIB, 2, &[GIB + 5, 3 * GIB]).unwrap(),
            g2
        );
    }

    #[test]
    fn a_grow_too_small_or_one_too_many_is_refused() {
        let g = Geometry::compute(64 * MIB, 1).unwrap();
        assert!(matches!(
            g.with_area(64 * MIB + MIB),
            Err(GeometryError::GrowTooSmall { .. })
        ));
        assert!(g.with_area(32 * MIB).is_err() && g.with_area(u64::MAX - 1).is_ok());
        let mut g = g;
        for i in 1..=GROWS_MAX as u64 {
            g = g.with_area(64 * MIB + i * 8 * MIB).unwrap();
        }
        check_segments(&g);
        assert_eq!(
            g.with_area(GIB),
            Err(GeometryError::TooManyGrows { max: GROWS_MAX })
        );
    }

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
