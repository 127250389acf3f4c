//! [`Pmr`]: one mapped persistent memory region with explicit persistence points
//! (docs/DESIGN.md §5; its layout is docs/FORMAT.md §7).
//!
//! Stores (`write`, `store_u64`, `compare_exchange_u64`) reach the volatile view at once
//! and the medium only at `persist`, which writes back the covering 64-byte lines (DAX),
//! or `msync`s the covering pages (emulated PMR on a file), or copies the lines into
//! the durable image (crash model). The paper's WAL (augefs.txt §V-B) reserves disjoint
//! entry ranges with a CAS on a DRAM tail and writes and persists them in parallel; its
//! 8-byte slots and the per-CPU write versions of §VI-B are 8-byte atomic stores.
//!
//! Concurrency contract (all methods take `&self`; `Pmr` is `Send + Sync`):
//! - Concurrent writers write disjoint byte ranges. Violating this is not undefined
//!   behaviour (every access is an atomic word access, see `mapping.rs`), but the
//!   result is an unspecified mix of the writers' bytes.
//! - `persist(offset, len)` makes durable every store to the range that happened before
//!   the call (program order, or synchronised through `load_u64`/`store_u64`). Stores
//!   racing with the persist may or may not be included.
//! - `store_u64` is a release store and `load_u64` an acquire load: a thread that loads a
//!   value stored after some `write`s also sees those bytes.
//!
//! Invariants:
//! - The region is a multiple of 4096 bytes and at least `PMR_SIZE_MIN_BYTES`.
//! - A file-backed region holds an exclusive `flock` for its whole life.
//! - Out-of-range or misaligned accesses are bugs and panic.
//! - Every successful persist of `n` lines counts one write of `n * 64` bytes and one
//!   flush under its cause; `read` counts its bytes under its cause. Word loads and
//!   stores are not counted on their own: bytes are counted when they reach the medium.
//! - `Drop` does not persist: what was not persisted may or may not be on the medium.

use crate::crash_model::CrashModel;
use crate::error::PmrError;
use crate::mapping::{FileMapping, Mapping};
use crate::persist_mode::{flush_lines, FlushInstruction, PersistMode};
use format::constants::{BLOCK_SIZE_BYTES, PMR_LINE_BYTES, PMR_SIZE_MIN_BYTES};
use platform::{Clock, IoCause, IoCounters, Rng, SystemClock};
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The persistence unit: one CPU cache line.
pub const LINE_BYTES: u64 = PMR_LINE_BYTES;

/// How a region is opened.
#[derive(Debug, Clone)]
pub struct PmrOptions {
    /// Busy-wait this long per persisted 64-byte line, on `clock`, to emulate a slower
    /// medium (augefs.txt §VII emulates PMR with 900 ns per line). 0 = off.
    pub latency_ns_per_line: u64,
    /// The clock the injected latency waits on. It must advance by itself (a
    /// [`SystemClock`], or a test clock that ticks on every reading); a clock that
    /// only moves when told would make a latency-injecting persist spin forever.
    pub clock: Arc<dyn Clock>,
}

impl Default for PmrOptions {
    fn default() -> Self {
        PmrOptions {
            latency_ns_per_line: 0,
            clock: Arc::new(SystemClock::new()),
        }
    }
}

enum Backing {
    /// The open file; holding it holds the flock.
    File {
        path: PathBuf,
        _file: File,
    },
    Memory(CrashModel),
}

/// A mapped persistent memory region. See the module documentation for the contract.
pub struct Pmr {
    // Declared first so the mapping is unmapped before the file (and lock) is closed.
    mapping: Mapping,
    backing: Backing,
    mode: PersistMode,
    counters: IoCounters,
    latency_ns_per_line: u64,
    clock: Arc<dyn Clock>,
}

/// Checks a region size against the format's rules.
fn check_size(size: u64) -> Result<usize, PmrError> {
    if size < PMR_SIZE_MIN_BYTES {
        return Err(PmrError::TooSmall {
            size,
            min: PMR_SIZE_MIN_BYTES,
        });
    }
    if size % BLOCK_SIZE_BYTES != 0 {
        return Err(PmrError::Misaligned { size });
    }
    Ok(usize::try_from(size).expect("a PMR fits in the address space of a 64-bit machine"))
}

/// Opens `path` read-write and takes the exclusive lock, without waiting.
fn open_locked(path: &Path, create: bool) -> Result<File, PmrError> {
    let open_error = |source| PmrError::Open {
        path: path.to_path_buf(),
        source,
    };
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .open(path)
        .map_err(open_error)?;
    // SAFETY: flock on a descriptor we own; no memory is passed.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
            return Err(PmrError::InUse {
                path: path.to_path_buf(),
            });
        }
        return Err(open_error(err));
    }
    Ok(file)
}

/// Makes a new directory entry durable.
fn sync_parent_dir(path: &Path) -> std::io::Result<()> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    File::open(parent)?.sync_all()
}

impl Pmr {
    /// Creates (or recreates) the file at `path` as a zero-filled region of
    /// `size_bytes`, durably, then opens it. Any previous contents are discarded.
    pub fn create(path: &Path, size_bytes: u64, opts: PmrOptions) -> Result<Pmr, PmrError> {
        check_size(size_bytes)?;
        let file = open_locked(path, true)?;
        let open_error = |source| PmrError::Open {
            path: path.to_path_buf(),
            source,
        };
        // Truncating first turns every old byte into a hole that reads as zero.
        file.set_len(0).map_err(open_error)?;
        file.set_len(size_bytes).map_err(open_error)?;
        file.sync_all().map_err(open_error)?;
        sync_parent_dir(path).map_err(open_error)?;
        Self::map_file(path, file, size_bytes, opts)
    }

    /// Opens an existing region file. DAX is detected (a `MAP_SYNC` mapping succeeds),
    /// never assumed. A second open of the same file fails with `InUse`.
    pub fn open(path: &Path, opts: PmrOptions) -> Result<Pmr, PmrError> {
        let file = open_locked(path, false)?;
        let size = file
            .metadata()
            .map_err(|source| PmrError::Open {
                path: path.to_path_buf(),
                source,
            })?
            .len();
        Self::map_file(path, file, size, opts)
    }

    fn map_file(path: &Path, file: File, size: u64, opts: PmrOptions) -> Result<Pmr, PmrError> {
        let len = check_size(size)?;
        let (mapping, how) =
            Mapping::file(&file, len).map_err(|source| PmrError::Map { source })?;
        let mode = match (how, FlushInstruction::detect()) {
            (FileMapping::Sync, Some(instruction)) => PersistMode::Dax { instruction },
            // MAP_SYNC without a flush instruction cannot happen on x86-64; msync is
            // still correct on a DAX mapping.
            (FileMapping::Sync, None) | (FileMapping::Shared, _) => PersistMode::Msync,
        };
        let backing = Backing::File {
            path: path.to_path_buf(),
            _file: file,
        };
        Ok(Self::assemble(mapping, backing, mode, opts))
    }

    /// An in-memory copy of the region file at `path`, for openers that must never
    /// change it (a read-only mount, `fsck -n`, `inspect`): persists reach the copy
    /// only. Takes no lock (the image's lock already keeps read-write openers away).
    pub fn open_copy(path: &Path, opts: PmrOptions) -> Result<Pmr, PmrError> {
        let bytes = std::fs::read(path).map_err(|source| PmrError::Open {
            path: path.to_path_buf(),
            source,
        })?;
        Self::memory_from_image(&bytes, opts)
    }

    /// A zero-filled in-memory region with the crash model (tests and the simulator).
    pub fn memory(size_bytes: u64, opts: PmrOptions) -> Result<Pmr, PmrError> {
        let len = check_size(size_bytes)?;
        let mapping = Mapping::anonymous(len).map_err(|source| PmrError::Map { source })?;
        let model = CrashModel::new(vec![0; len]);
        Ok(Self::assemble(
            mapping,
            Backing::Memory(model),
            PersistMode::Memory,
            opts,
        ))
    }

    /// "Reboots" from a crash image: an in-memory region whose volatile view and
    /// durable image both equal `image`, with no dirty lines.
    pub fn memory_from_image(image: &[u8], opts: PmrOptions) -> Result<Pmr, PmrError> {
        let len = check_size(image.len() as u64)?;
        let mapping = Mapping::anonymous(len).map_err(|source| PmrError::Map { source })?;
        mapping.write_bytes(0, image);
        let model = CrashModel::new(image.to_vec());
        Ok(Self::assemble(
            mapping,
            Backing::Memory(model),
            PersistMode::Memory,
            opts,
        ))
    }

    fn assemble(mapping: Mapping, backing: Backing, mode: PersistMode, opts: PmrOptions) -> Pmr {
        assert_eq!(mapping.len() as u64 % BLOCK_SIZE_BYTES, 0);
        Pmr {
            mapping,
            backing,
            mode,
            counters: IoCounters::new(),
            latency_ns_per_line: opts.latency_ns_per_line,
            clock: opts.clock,
        }
    }

    /// Size of the region in bytes.
    pub fn len(&self) -> u64 {
        self.mapping.len() as u64
    }

    /// Always false: a region is at least `PMR_SIZE_MIN_BYTES`.
    pub fn is_empty(&self) -> bool {
        false
    }

    pub fn persist_mode(&self) -> PersistMode {
        self.mode
    }

    /// The backing file, or `None` for an in-memory region.
    pub fn path(&self) -> Option<&Path> {
        match &self.backing {
            Backing::File { path, .. } => Some(path),
            Backing::Memory(_) => None,
        }
    }

    pub fn latency_ns_per_line(&self) -> u64 {
        self.latency_ns_per_line
    }

    /// Per-cause counts of persisted bytes, flushes and reads.
    pub fn counters(&self) -> &IoCounters {
        &self.counters
    }

    /// Asserts `offset .. offset + len` is inside the region; returns it as `usize`s.
    fn range(&self, offset: u64, len: usize) -> (usize, usize) {
        let end = offset.checked_add(len as u64);
        assert!(
            end.is_some_and(|end| end <= self.len()),
            "PMR access {offset}+{len} outside the {}-byte region",
            self.len()
        );
        (offset as usize, len)
    }

    fn word_index(&self, offset: u64) -> usize {
        assert_eq!(
            offset % 8,
            0,
            "PMR atomic at {offset} is not 8-byte aligned"
        );
        let (offset, _) = self.range(offset, 8);
        offset / 8
    }

    /// Lines `first .. end` covering `offset .. offset + len` (`len > 0`).
    fn lines(offset: usize, len: usize) -> (usize, usize) {
        assert!(len > 0);
        let line = LINE_BYTES as usize;
        (offset / line, (offset + len).div_ceil(line))
    }

    fn stored(&self, offset: usize, len: usize) {
        if let Backing::Memory(model) = &self.backing {
            let (first, end) = Self::lines(offset, len);
            model.mark_dirty(first, end);
        }
    }

    /// Copies `buf.len()` bytes at `offset` into `buf`, counted as a read under `cause`.
    pub fn read(&self, offset: u64, buf: &mut [u8], cause: IoCause) {
        let (offset, _) = self.range(offset, buf.len());
        self.mapping.read_bytes(offset, buf);
        self.counters.count_read(cause, buf.len() as u64);
    }

    /// Stores `data` at `offset`. Not durable until persisted.
    pub fn write(&self, offset: u64, data: &[u8]) {
        let (offset, len) = self.range(offset, data.len());
        if len == 0 {
            return;
        }
        self.mapping.write_bytes(offset, data);
        self.stored(offset, len);
    }

    /// Atomic 8-byte release store of `value` (little-endian on the medium) at an
    /// 8-aligned `offset`. Not durable until persisted; atomic across a crash.
    pub fn store_u64(&self, offset: u64, value: u64) {
        let index = self.word_index(offset);
        self.mapping
            .word(index)
            .store(value.to_le(), Ordering::Release);
        self.stored(index * 8, 8);
    }

    /// Atomic 8-byte acquire load at an 8-aligned `offset`.
    pub fn load_u64(&self, offset: u64) -> u64 {
        let index = self.word_index(offset);
        u64::from_le(self.mapping.word(index).load(Ordering::Acquire))
    }

    /// Atomically replaces `current` by `new` at an 8-aligned `offset`; returns the value
    /// seen (`Ok` if it was `current`). Not durable until persisted.
    pub fn compare_exchange_u64(&self, offset: u64, current: u64, new: u64) -> Result<u64, u64> {
        let index = self.word_index(offset);
        let word = self.mapping.word(index);
        match word.compare_exchange(
            current.to_le(),
            new.to_le(),
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(seen) => {
                self.stored(index * 8, 8);
                Ok(u64::from_le(seen))
            }
            Err(seen) => Err(u64::from_le(seen)),
        }
    }

    /// Makes `offset .. offset + len` durable: writes back its 64-byte lines and fences
    /// (DAX), `msync`s its pages (emulated), or copies its lines to the durable image
    /// (memory). Counts `lines * 64` bytes and one flush under `cause`, then waits the
    /// injected latency. A zero-length persist does nothing.
    ///
    /// An error means the bytes may not be durable; do not retry and trust it.
    pub fn persist(&self, offset: u64, len: u64, cause: IoCause) -> Result<(), PmrError> {
        let len_usize = usize::try_from(len).expect("persist length fits in usize");
        let (offset_usize, _) = self.range(offset, len_usize);
        if len == 0 {
            return Ok(());
        }
        let (first, end) = Self::lines(offset_usize, len_usize);
        let lines = end - first;
        let line = LINE_BYTES as usize;
        match (&self.backing, self.mode) {
            (Backing::Memory(model), _) => model.persist_lines(&self.mapping, first, end),
            (Backing::File { .. }, PersistMode::Dax { instruction }) => {
                // SAFETY: lines `first .. end` are inside the mapping (range asserted
                // above, and the region is a multiple of 64 bytes); the base is
                // page-aligned so each line address is 64-aligned; `instruction` came
                // from `FlushInstruction::detect` on this machine.
                unsafe { flush_lines(self.mapping.addr(first * line), lines, instruction) };
            }
            (Backing::File { .. }, _) => {
                self.mapping
                    .msync(offset_usize, len_usize)
                    .map_err(|source| PmrError::Persist {
                        offset,
                        len,
                        source,
                    })?
            }
        }
        let lines = lines as u64;
        self.counters.count_write(cause, lines * LINE_BYTES);
        self.counters.count_flush(cause);
        self.inject_latency(lines);
        Ok(())
    }

    /// Persists the whole region.
    pub fn persist_all(&self, cause: IoCause) -> Result<(), PmrError> {
        self.persist(0, self.len(), cause)
    }

    fn inject_latency(&self, lines: u64) {
        if self.latency_ns_per_line == 0 {
            return;
        }
        let deadline = self
            .clock
            .now_ns()
            .saturating_add(lines.saturating_mul(self.latency_ns_per_line));
        // Bounded by the deadline on a clock that advances (see `PmrOptions::clock`).
        while self.clock.now_ns() < deadline {
            std::hint::spin_loop();
        }
    }

    fn crash_model(&self) -> &CrashModel {
        match &self.backing {
            Backing::Memory(model) => model,
            Backing::File { .. } => panic!("crash images exist only for Pmr::memory regions"),
        }
    }

    /// The number of lines written since they were last persisted (memory regions only).
    pub fn dirty_lines_count(&self) -> usize {
        self.crash_model().dirty_lines_count()
    }

    /// What the medium could hold after a crash now: the durable image, with each line
    /// written since its last persist independently kept or lost, chosen by `rng`.
    /// Memory regions only; take it while no thread is storing.
    pub fn crash_image(&self, rng: &mut Rng) -> Vec<u8> {
        self.crash_model().crash_image(&self.mapping, rng)
    }

    /// The crash in which every unpersisted line is lost.
    pub fn crash_image_all_lost(&self) -> Vec<u8> {
        self.crash_model().image(&self.mapping, |_| false)
    }

    /// The crash in which every unpersisted line happened to reach the medium.
    pub fn crash_image_all_kept(&self) -> Vec<u8> {
        self.crash_model().image(&self.mapping, |_| true)
    }
}

impl std::fmt::Debug for Pmr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pmr")
            .field("path", &self.path())
            .field("len", &self.len())
            .field("mode", &self.mode)
            .field("latency_ns_per_line", &self.latency_ns_per_line)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use format::constants::MIB;

    fn memory() -> Pmr {
        Pmr::memory(2 * MIB, PmrOptions::default()).unwrap()
    }

    #[test]
    fn sizes_are_checked() {
        let err = Pmr::memory(MIB, PmrOptions::default()).unwrap_err();
        assert!(matches!(err, PmrError::TooSmall { size, min } if size == MIB && min == 2 * MIB));
        let err = Pmr::memory(2 * MIB + 64, PmrOptions::default()).unwrap_err();
        assert!(matches!(err, PmrError::Misaligned { size } if size == 2 * MIB + 64));
        assert_eq!(memory().len(), 2 * MIB);
        assert_eq!(memory().persist_mode(), PersistMode::Memory);
        assert!(memory().path().is_none());
    }

    #[test]
    fn words_are_little_endian_and_atomic_ops_work() {
        let pmr = memory();
        pmr.store_u64(4096, 0x0102_0304_0506_0708);
        let mut bytes = [0u8; 8];
        pmr.read(4096, &mut bytes, IoCause::Wal);
        assert_eq!(bytes, [8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(pmr.load_u64(4096), 0x0102_0304_0506_0708);
        assert_eq!(
            pmr.compare_exchange_u64(4096, 1, 2),
            Err(0x0102_0304_0506_0708)
        );
        assert_eq!(
            pmr.compare_exchange_u64(4096, 0x0102_0304_0506_0708, 9),
            Ok(0x0102_0304_0506_0708)
        );
        assert_eq!(pmr.load_u64(4096), 9);
        pmr.write(4100, &[0xAB]);
        assert_eq!(pmr.load_u64(4096), 9 | 0xAB << 32);
    }

    #[test]
    fn failed_compare_exchange_does_not_dirty() {
        let pmr = memory();
        assert!(pmr.compare_exchange_u64(0, 5, 6).is_err());
        assert_eq!(pmr.dirty_lines_count(), 0);
        assert!(pmr.compare_exchange_u64(0, 0, 6).is_ok());
        assert_eq!(pmr.dirty_lines_count(), 1);
    }

    #[test]
    fn persist_counts_covering_lines_and_one_flush() {
        let pmr = memory();
        pmr.write(10, &[1; 100]);
        let before = pmr.counters().snapshot();
        // Bytes 10..110 touch lines 0 and 1.
        pmr.persist(10, 100, IoCause::Wal).unwrap();
        // Bytes 64..128 are exactly line 1.
        pmr.persist(64, 64, IoCause::Checkpoint).unwrap();
        // Nothing to do, nothing counted.
        pmr.persist(200, 0, IoCause::Wal).unwrap();
        let mut buf = [0u8; 33];
        pmr.read(5, &mut buf, IoCause::Table);
        let delta = pmr.counters().snapshot().since(&before);
        let wal = delta.cause(IoCause::Wal);
        assert_eq!((wal.write_ops, wal.write_bytes, wal.flush_ops), (1, 128, 1));
        let checkpoint = delta.cause(IoCause::Checkpoint);
        assert_eq!((checkpoint.write_bytes, checkpoint.flush_ops), (64, 1));
        let table = delta.cause(IoCause::Table);
        assert_eq!((table.read_ops, table.read_bytes), (1, 33));
        assert_eq!(delta.total().read_bytes, 33);
    }

    #[test]
    fn persist_all_leaves_nothing_dirty() {
        let pmr = memory();
        pmr.write(0, &[1; 300]);
        pmr.store_u64(MIB, 7);
        assert_eq!(pmr.dirty_lines_count(), 6);
        pmr.persist_all(IoCause::Tool).unwrap();
        assert_eq!(pmr.dirty_lines_count(), 0);
        assert_eq!(
            pmr.counters().snapshot().cause(IoCause::Tool).write_bytes,
            2 * MIB
        );
    }

    #[test]
    #[should_panic(expected = "outside")]
    fn write_past_the_end_panics() {
        memory().write(2 * MIB - 4, &[0; 5]);
    }

    #[test]
    #[should_panic(expected = "outside")]
    fn persist_past_the_end_panics() {
        let _ = memory().persist(2 * MIB, 1, IoCause::Wal);
    }

    #[test]
    #[should_panic(expected = "not 8-byte aligned")]
    fn misaligned_atomic_panics() {
        memory().store_u64(12, 1);
    }
}
