//! The line-granular crash model of an in-memory PMR (docs/FORMAT.md §7 "assumptions
//! about the device", docs/DESIGN.md §5).
//!
//! The region has two images: the volatile view (the [`Mapping`] every load and store
//! sees, standing for the CPU caches) and the durable image (what the medium holds).
//! `persist` copies the covered 64-byte lines from the volatile view to the durable
//! image. A crash keeps the durable image, and for every line written since it was last
//! persisted (a *dirty* line) keeps either the whole volatile line or the whole durable
//! line, independently per line: persisted lines survive, unpersisted ones may or may
//! not, and no line is ever torn. An aligned 8-byte store lies inside one line, so it is
//! atomic across a crash too.
//!
//! Invariants:
//! - When no store or persist is running, a line whose dirty bit is clear is identical
//!   in both images.
//! - A writer stores its bytes, then sets the dirty bit (release); a persister clears the
//!   bit (acquire), then copies. Either the copy sees the bytes or the bit stays set.
//! - Persists copy under one mutex, so two persists of one line never interleave their
//!   copies (which could leave an older copy on top of a newer one).

use crate::mapping::Mapping;
use format::constants::PMR_LINE_BYTES;
use platform::Rng;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

const LINE_BYTES: usize = PMR_LINE_BYTES as usize;
const WORDS_PER_LINE: usize = LINE_BYTES / 8;

/// Durable image plus dirty-line bitmap of a memory-backed PMR.
#[derive(Debug)]
pub(crate) struct CrashModel {
    durable: Mutex<Vec<u8>>,
    /// Bit `l % 64` of word `l / 64` is set while line `l` may differ from durable.
    dirty: Box<[AtomicU64]>,
    lines_count: usize,
}

impl CrashModel {
    /// A model whose durable image is `durable` and which the volatile view equals.
    pub(crate) fn new(durable: Vec<u8>) -> CrashModel {
        assert_eq!(durable.len() % LINE_BYTES, 0);
        let lines_count = durable.len() / LINE_BYTES;
        let dirty = (0..lines_count.div_ceil(64))
            .map(|_| AtomicU64::new(0))
            .collect();
        CrashModel {
            durable: Mutex::new(durable),
            dirty,
            lines_count,
        }
    }

    fn durable(&self) -> MutexGuard<'_, Vec<u8>> {
        // A panic while copying leaves a durable image of whole words; still usable.
        self.durable.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Marks lines `first .. end` dirty. Called after the bytes are stored.
    pub(crate) fn mark_dirty(&self, first: usize, end: usize) {
        assert!(first < end && end <= self.lines_count);
        for line in first..end {
            self.dirty[line / 64].fetch_or(1 << (line % 64), Ordering::Release);
        }
    }

    /// Copies lines `first .. end` from `volatile` into the durable image.
    pub(crate) fn persist_lines(&self, volatile: &Mapping, first: usize, end: usize) {
        assert!(first < end && end <= self.lines_count);
        assert_eq!(volatile.len(), self.lines_count * LINE_BYTES);
        let mut durable = self.durable();
        for line in first..end {
            // Clear before copying: a store that lands after our copy sets the bit again.
            self.dirty[line / 64].fetch_and(!(1 << (line % 64)), Ordering::AcqRel);
            copy_line(volatile, line, &mut durable);
        }
    }

    /// The number of lines written since they were last persisted.
    pub(crate) fn dirty_lines_count(&self) -> usize {
        self.dirty
            .iter()
            .map(|w| w.load(Ordering::Acquire).count_ones() as usize)
            .sum()
    }

    /// The durable image with each dirty line replaced by its volatile content when
    /// `keep(line)` says so.
    pub(crate) fn image(&self, volatile: &Mapping, mut keep: impl FnMut(usize) -> bool) -> Vec<u8> {
        let durable = self.durable();
        let mut image = durable.clone();
        drop(durable);
        for (word_index, word) in self.dirty.iter().enumerate() {
            let mut bits = word.load(Ordering::Acquire);
            while bits != 0 {
                let line = word_index * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                if keep(line) {
                    copy_line(volatile, line, &mut image);
                }
            }
        }
        image
    }

    /// A crash: every dirty line independently survives or not, by `rng`.
    pub(crate) fn crash_image(&self, volatile: &Mapping, rng: &mut Rng) -> Vec<u8> {
        self.image(volatile, |_| rng.chance(1, 2))
    }
}

/// Copies one line from `volatile` into `image` with word loads.
fn copy_line(volatile: &Mapping, line: usize, image: &mut [u8]) {
    let base = line * LINE_BYTES;
    for w in 0..WORDS_PER_LINE {
        let value = volatile
            .word(line * WORDS_PER_LINE + w)
            .load(Ordering::Acquire);
        image[base + w * 8..base + w * 8 + 8].copy_from_slice(&value.to_ne_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn persist_clears_dirty_and_copies() {
        let volatile = Mapping::anonymous(4096).unwrap();
        let model = CrashModel::new(vec![0; 4096]);
        volatile.write_bytes(70, &[9; 100]);
        model.mark_dirty(1, 3);
        assert_eq!(model.dirty_lines_count(), 2);
        assert_eq!(model.image(&volatile, |_| false), vec![0; 4096]);
        model.persist_lines(&volatile, 1, 2);
        assert_eq!(model.dirty_lines_count(), 1);
        let lost = model.image(&volatile, |_| false);
        assert_eq!(&lost[70..128], &[9; 58]);
        assert_eq!(&lost[128..170], &[0; 42]);
        let kept = model.image(&volatile, |_| true);
        assert_eq!(&kept[70..170], &[9; 100]);
    }
}
