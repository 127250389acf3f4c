//! Page memory: cached blocks live in 2 MiB chunks mapped for the page cache (asking
//! for transparent huge pages), not in one heap allocation each.
//!
//! Filling the cache from the heap cost more than the device reads it served: every 4
//! KiB block was a fresh allocation whose first touch faulted a page in, and the
//! allocator grew and shrank its arenas with a system call every few blocks (a cold 1
//! MiB sequential read spent three quarters of its CPU time there). A chunk is mapped
//! once, faults in as one huge page where the kernel allows, and its slots are reused
//! as blocks are evicted.
//!
//! A [`Block`] is a chunk and a slot index; the slot's reference count lives in the
//! chunk's own array, so making, cloning and dropping a block allocates nothing.
//!
//! Free slots are handed out lowest address first (each chunk keeps a bitmap of its free
//! slots): a file written block by block gets ascending, mostly consecutive slots, and
//! the slots a deleted file freed are the next ones taken, still in the CPU's caches.
//! Copying 4 KiB blocks into scattered slots ran at 10-13 GB/s on the development
//! machine, into consecutive ones at 28-31 GB/s (a single large copy's speed): the
//! hardware prefetchers follow ascending pages. With last-in-first-out reuse, a 2 MiB
//! write into the slots of a file just deleted went descending and scattered, and
//! Filebench's fileserver spent 60% of its time in those copies.
//!
//! Each thread takes slots in batches of [`BATCH`] (ascending) and gives freed slots
//! back in batches of [`BATCH`], so a thread that makes or drops many blocks in a row,
//! a large write or an unlink of a cached file, takes the global lock once per batch.
//!
//! Invariants:
//! - A slot belongs to at most one [`Block`] allocation at a time (its count is then
//!   the number of clones); it becomes free when the last clone drops.
//! - A free slot is in exactly one place: a thread's batch to take from, a thread's
//!   batch to give back, or its chunk's bitmap. Batches hold fewer than [`BATCH`] slots
//!   between calls and are emptied into the bitmaps when their thread exits.
//! - A thread's batch to take from is in ascending order of address (it pops the
//!   lowest).
//! - Chunks stay mapped (and their headers allocated): when all of a chunk's slots are
//!   free its pages are given back lazily (MADV_FREE), so the memory returns to the
//!   system under pressure, while a cache that shrinks and grows again reuses them
//!   without faults. The mapped total is the high-water mark of cached blocks (bounded
//!   by the caches' `max_bytes`) plus the batches' slots.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicU32, Ordering};
use std::sync::Mutex;

/// Bytes per page, the file-system block (a block is one page).
pub const PAGE: usize = 4096;
/// Bytes per chunk (a huge page on x86-64).
pub const CHUNK_BYTES: usize = 2 << 20;
const SLOTS: usize = CHUNK_BYTES / PAGE;
const WORDS: usize = SLOTS / 64;
/// Slots a thread takes from, or gives back to, the bitmaps at a time.
const BATCH: usize = 32;
/// The most chunks a search for a run of consecutive free slots looks at (it holds
/// the slab's lock: 512 bits a chunk).
const RUN_SEARCH_CHUNKS: usize = 16;

/// A chunk's header: where its bytes are and how many blocks hold each slot (0 when
/// free). Allocated once and never freed, like the mapping.
struct Chunk {
    base: NonNull<u8>,
    id: u32,
    refs: [AtomicU32; SLOTS],
}

// SAFETY: the chunk's memory is owned by the slab; a slot's bytes are written only by
// the one holder of its only reference (`Block::get_mut`) and read once shared.
unsafe impl Send for Chunk {}
// SAFETY: as above; the counts are atomic.
unsafe impl Sync for Chunk {}

/// A free slot.
#[derive(Clone, Copy)]
struct Free {
    chunk: &'static Chunk,
    index: u16,
}

struct ChunkFree {
    chunk: &'static Chunk,
    /// Bit `i` set: slot `i` is free (and in no thread's batch).
    bits: [u64; WORDS],
    free: usize,
}

#[derive(Default)]
struct State {
    chunks: Vec<ChunkFree>,
    /// The chunks with a free slot in their bitmap, by id: the lowest id is taken from
    /// first, which keeps the blocks in use packed into the oldest chunks, so the
    /// newest empty out and are given back.
    with_free: BTreeSet<usize>,
}

static STATE: Mutex<State> = Mutex::new(State {
    chunks: Vec::new(),
    with_free: BTreeSet::new(),
});

fn state() -> std::sync::MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Maps a chunk aligned to its size (so that it can be one huge page).
fn map_chunk() -> NonNull<u8> {
    let len = 2 * CHUNK_BYTES;
    let raw: *mut libc::c_void = match device::buf::map_anonymous(len) {
        Ok(p) => p.as_ptr().cast(),
        Err(_) => std::alloc::handle_alloc_error(
            std::alloc::Layout::from_size_align(CHUNK_BYTES, CHUNK_BYTES).expect("layout"),
        ),
    };
    let start = raw as usize;
    let aligned = start.next_multiple_of(CHUNK_BYTES);
    // SAFETY: both trimmed ranges lie inside the mapping just made and hold nothing.
    unsafe {
        if aligned > start {
            libc::munmap(raw, aligned - start);
        }
        let tail = aligned + CHUNK_BYTES;
        if start + len > tail {
            libc::munmap(tail as *mut libc::c_void, start + len - tail);
        }
        // Advice only: without huge pages the chunk faults in 4 KiB at a time.
        libc::madvise(
            aligned as *mut libc::c_void,
            CHUNK_BYTES,
            libc::MADV_HUGEPAGE,
        );
    }
    NonNull::new(aligned as *mut u8).expect("a mapping is not at address 0")
}

impl State {
    /// Appends up to `want` free slots to `out`, lowest first, mapping a new chunk if
    /// none is free.
    fn refill(&mut self, out: &mut Vec<Free>, want: usize) {
        while out.len() < want {
            let Some(&c) = self.with_free.first() else {
                self.add_chunk();
                continue;
            };
            let chunk = &mut self.chunks[c];
            for word in 0..WORDS {
                while chunk.bits[word] != 0 && out.len() < want {
                    let bit = chunk.bits[word].trailing_zeros() as usize;
                    chunk.bits[word] &= chunk.bits[word] - 1;
                    chunk.free -= 1;
                    out.push(Free {
                        chunk: chunk.chunk,
                        index: (word * 64 + bit) as u16,
                    });
                }
            }
            if chunk.free == 0 {
                self.with_free.remove(&c);
            }
        }
    }

    /// `count` consecutive free slots of one chunk taken from the bitmaps: the first fit
    /// in the first [`RUN_SEARCH_CHUNKS`] chunks with room, or a new chunk when no chunk
    /// has a free slot; `None` when none fits or `count` exceeds a chunk (the caller
    /// takes slots one by one).
    fn take_run(&mut self, count: usize) -> Option<(&'static Chunk, usize)> {
        assert!(count > 0);
        if count > SLOTS {
            return None;
        }
        if self.with_free.is_empty() {
            self.add_chunk();
        }
        let (c, start) = self
            .with_free
            .iter()
            .take(RUN_SEARCH_CHUNKS)
            .filter(|&&c| self.chunks[c].free >= count)
            .find_map(|&c| first_fit(&self.chunks[c].bits, count).map(|start| (c, start)))?;
        let chunk = &mut self.chunks[c];
        for slot in start..start + count {
            chunk.bits[slot / 64] &= !(1u64 << (slot % 64));
        }
        chunk.free -= count;
        if chunk.free == 0 {
            self.with_free.remove(&c);
        }
        Some((chunk.chunk, start))
    }

    fn add_chunk(&mut self) {
        let id = u32::try_from(self.chunks.len()).expect("fewer than 2^32 chunks");
        let chunk: &'static Chunk = Box::leak(Box::new(Chunk {
            base: map_chunk(),
            id,
            refs: std::array::from_fn(|_| AtomicU32::new(0)),
        }));
        self.chunks.push(ChunkFree {
            chunk,
            bits: [u64::MAX; WORDS],
            free: SLOTS,
        });
        self.with_free.insert(id as usize);
    }

    /// Puts free slots back in their chunks' bitmaps.
    fn give_back(&mut self, slots: impl Iterator<Item = Free>) {
        for Free { chunk, index } in slots {
            let id = chunk.id as usize;
            let entry = &mut self.chunks[id];
            let (word, bit) = (usize::from(index) / 64, usize::from(index) % 64);
            assert_eq!(entry.bits[word] >> bit & 1, 0, "a slot is freed once");
            entry.bits[word] |= 1 << bit;
            entry.free += 1;
            if entry.free == 1 {
                self.with_free.insert(id);
            }
            if entry.free == SLOTS {
                // Handed back lazily: the kernel takes the pages only under memory
                // pressure, and until then a new block reuses them without a fault or a
                // zeroing (a remount's cold cache then costs what the kernel's own cache
                // does).
                // SAFETY: every slot is free: nothing refers to the chunk's bytes.
                unsafe { libc::madvise(chunk.base.as_ptr().cast(), CHUNK_BYTES, libc::MADV_FREE) };
            }
        }
    }
}

/// The first of `count` consecutive set bits (free slots) of `bits`.
fn first_fit(bits: &[u64; WORDS], count: usize) -> Option<usize> {
    let (mut start, mut len) = (0, 0);
    for (w, &word) in bits.iter().enumerate() {
        if word == u64::MAX || word == 0 {
            // A whole word free or taken: one step.
            if word == 0 {
                len = 0;
                continue;
            }
            if len == 0 {
                start = w * 64;
            }
            len += 64;
            if len >= count {
                return Some(start);
            }
            continue;
        }
        for bit in 0..64 {
            if word >> bit & 1 == 0 {
                len = 0;
                continue;
            }
            if len == 0 {
                start = w * 64 + bit;
            }
            len += 1;
            if len >= count {
                return Some(start);
            }
        }
    }
    None
}

/// A thread's batches: slots to take (highest first, so popping takes the lowest) and
/// freed slots to give back, both given back when the thread exits.
struct Magazine {
    take: Vec<Free>,
    freed: Vec<Free>,
}

impl Drop for Magazine {
    fn drop(&mut self) {
        state().give_back(self.take.drain(..).chain(self.freed.drain(..)));
    }
}

thread_local! {
    static LOCAL: RefCell<Magazine> = const {
        RefCell::new(Magazine {
            take: Vec::new(),
            freed: Vec::new(),
        })
    };
}

/// A free slot for a new block.
fn take() -> Free {
    let local = LOCAL.try_with(|m| {
        let mut m = m.borrow_mut();
        if m.take.is_empty() {
            state().refill(&mut m.take, BATCH);
            m.take.reverse();
        }
        m.take.pop().expect("refilled")
    });
    // A block made while the thread's locals are being destroyed comes from the bitmaps.
    local.unwrap_or_else(|_| {
        let mut one = Vec::with_capacity(1);
        state().refill(&mut one, 1);
        one[0]
    })
}

/// Returns a slot whose last block dropped.
fn free(slot: Free) {
    let kept = LOCAL.try_with(|m| {
        let mut m = m.borrow_mut();
        m.freed.push(slot);
        if m.freed.len() >= BATCH {
            state().give_back(m.freed.drain(..));
        }
    });
    if kept.is_err() {
        state().give_back(std::iter::once(slot));
    }
}

/// A block's bytes as cached: 4 KiB, immutable once shared (clones share them); the
/// cache, readers copying from it and write-backs sending it hold it alike.
pub(crate) struct Block {
    chunk: &'static Chunk,
    index: u16,
}

impl Block {
    /// A block of `bytes` (4 KiB).
    pub fn copy_of(bytes: &[u8]) -> Block {
        assert_eq!(bytes.len(), PAGE, "a block is one page");
        let Free { chunk, index } = take();
        let refs = &chunk.refs[usize::from(index)];
        assert_eq!(refs.load(Ordering::Relaxed), 0, "a free slot has no holder");
        refs.store(1, Ordering::Relaxed);
        let block = Block { chunk, index };
        // SAFETY: the slot's 4 KiB are ours alone and do not overlap `bytes`.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), block.ptr(), PAGE) };
        block
    }

    /// `count` new blocks in consecutive slots of one chunk (so one device read can
    /// fill them all: [`Block::run_buf`]), their bytes unspecified until written; `None`
    /// if no such run is free now.
    pub fn run(count: usize) -> Option<Vec<Block>> {
        let (chunk, start) = state().take_run(count)?;
        Some(
            (start..start + count)
                .map(|index| {
                    let refs = &chunk.refs[index];
                    assert_eq!(refs.load(Ordering::Relaxed), 0, "a free slot has no holder");
                    refs.store(1, Ordering::Relaxed);
                    Block {
                        chunk,
                        index: index as u16,
                    }
                })
                .collect(),
        )
    }

    /// A device buffer over blocks `run[from..from + n]`, to read into.
    ///
    /// # Safety
    /// `run` came from [`Block::run`] and no block of it is cloned, read or written
    /// until the buffer drops (the device's writes are then its only use).
    pub unsafe fn run_buf(run: &[Block], from: usize, n: usize) -> device::AlignedBuf {
        assert!(n > 0 && from + n <= run.len(), "a range of the run");
        let first = &run[from];
        assert!(run[from..from + n]
            .iter()
            .all(|b| b.refs().load(Ordering::Relaxed) == 1));
        let ptr = std::ptr::NonNull::new(first.ptr()).expect("a slot is not at address 0");
        // SAFETY: the slots are consecutive (`run`), page-aligned in a mapped chunk, and
        // held only by `run` (count 1), which the caller does not use meanwhile.
        unsafe { device::AlignedBuf::lent(ptr, n * PAGE) }
    }

    /// Whether `bytes` are this block's own (not a copy elsewhere).
    pub fn holds(&self, bytes: &[u8]) -> bool {
        std::ptr::eq(bytes.as_ptr(), self.ptr()) && bytes.len() == PAGE
    }

    fn ptr(&self) -> *mut u8 {
        // SAFETY: the index is a slot of the chunk.
        unsafe { self.chunk.base.as_ptr().add(usize::from(self.index) * PAGE) }
    }

    fn refs(&self) -> &AtomicU32 {
        &self.chunk.refs[usize::from(self.index)]
    }

    /// Whether `a` and `b` are clones of one block (not merely equal bytes).
    pub fn same(a: &Block, b: &Block) -> bool {
        std::ptr::eq(a.chunk, b.chunk) && a.index == b.index
    }

    /// The bytes for changing, while this is the block's only holder.
    pub fn get_mut(&mut self) -> Option<&mut [u8]> {
        // Acquire: another holder's last reads happen before our writes (as Arc).
        if self.refs().load(Ordering::Acquire) != 1 {
            return None;
        }
        // SAFETY: the only holder of the slot (and `&mut self` keeps it so); its 4 KiB
        // are initialised (copy_of).
        Some(unsafe { std::slice::from_raw_parts_mut(self.ptr(), PAGE) })
    }
}

impl Clone for Block {
    fn clone(&self) -> Block {
        let before = self.refs().fetch_add(1, Ordering::Relaxed);
        assert!(before > 0 && before < u32::MAX / 2, "a held block's count");
        Block {
            chunk: self.chunk,
            index: self.index,
        }
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        if self.refs().fetch_sub(1, Ordering::Release) != 1 {
            return;
        }
        // Every other holder's use happens before the slot is reused (as Arc).
        fence(Ordering::Acquire);
        free(Free {
            chunk: self.chunk,
            index: self.index,
        });
    }
}

impl From<&[u8]> for Block {
    fn from(bytes: &[u8]) -> Block {
        Block::copy_of(bytes)
    }
}

impl std::ops::Deref for Block {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: the slot's 4 KiB are initialised and not changed while shared.
        unsafe { std::slice::from_raw_parts(self.ptr(), PAGE) }
    }
}

impl std::fmt::Debug for Block {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Block(chunk {}, slot {})", self.chunk.id, self.index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_fit_finds_the_first_run_of_free_slots() {
        let mut bits = [0u64; WORDS];
        assert_eq!(first_fit(&bits, 1), None);
        bits[0] = 0b1011_0000;
        assert_eq!(first_fit(&bits, 1), Some(4));
        assert_eq!(first_fit(&bits, 2), Some(4));
        assert_eq!(first_fit(&bits, 3), None);
        // A run across words: the last 3 bits of word 1, word 2 whole, word 3's first.
        bits[1] = 0b111 << 61;
        bits[2] = u64::MAX;
        bits[3] = 1;
        assert_eq!(first_fit(&bits, 68), Some(64 + 61));
        assert_eq!(first_fit(&bits, 69), None);
        assert_eq!(first_fit(&[u64::MAX; WORDS], SLOTS), Some(0));
    }

    #[test]
    fn a_run_is_consecutive_slots_that_a_device_buffer_covers() {
        let run = Block::run(100).expect("a fresh chunk has room");
        for (i, b) in run.iter().enumerate() {
            assert_eq!(b.ptr() as usize, run[0].ptr() as usize + i * PAGE);
        }
        // SAFETY: the run is fresh and unused until the buffer drops.
        let mut buf = unsafe { Block::run_buf(&run, 10, 5) };
        buf.fill(0xab);
        drop(buf);
        assert!(run[10..15].iter().all(|b| b.iter().all(|&x| x == 0xab)));
        assert!(run[15].holds(&run[15]) && !run[15].holds(&run[16]));
    }

    #[test]
    fn blocks_hold_their_bytes_and_slots_are_reused() {
        let a = Block::from(&[7u8; PAGE][..]);
        let mut b = Block::from(&[9u8; PAGE][..]);
        assert!(a.iter().all(|&x| x == 7) && b.iter().all(|&x| x == 9));
        b.get_mut().expect("only holder")[0] = 1;
        let c = b.clone();
        assert!(b.get_mut().is_none(), "shared blocks do not change");
        assert_eq!(c[0], 1);
        drop(a);
        // Another thread's block may take the freed slot first; only check it is sane.
        let d = Block::from(&[3u8; PAGE][..]);
        assert!(d.iter().all(|&x| x == 3));
        // More blocks than one chunk holds, then all dropped.
        let many: Vec<Block> = (0..SLOTS + 10)
            .map(|i| Block::from(&[i as u8; PAGE][..]))
            .collect();
        for (i, m) in many.iter().enumerate() {
            assert_eq!(m[PAGE - 1], i as u8);
        }
        drop(many);
        assert!(c.iter().skip(1).all(|&x| x == 9));
    }

    #[test]
    fn blocks_made_in_a_row_take_ascending_slots() {
        // A fresh thread's first batch: within each chunk, slots ascend in the order
        // the blocks were made (other tests' threads may free slots meanwhile, so the
        // slots need not be consecutive).
        let made = std::thread::spawn(|| {
            (0..BATCH)
                .map(|i| Block::from(&[i as u8; PAGE][..]))
                .collect::<Vec<_>>()
        })
        .join()
        .expect("maker");
        for pair in made.windows(2) {
            if std::ptr::eq(pair[0].chunk, pair[1].chunk) {
                assert!(
                    pair[0].index < pair[1].index,
                    "{:?} then {:?}",
                    pair[0],
                    pair[1]
                );
            } else {
                assert!(pair[0].chunk.id < pair[1].chunk.id);
            }
        }
    }

    #[test]
    fn blocks_made_on_one_thread_drop_on_another_while_threads_come_and_go() {
        // Blocks made on one thread and dropped on another, while threads come and go.
        let made: Vec<Vec<Block>> = std::thread::scope(|s| {
            let hands: Vec<_> = (0..4u8)
                .map(|t| {
                    s.spawn(move || {
                        (0..3 * BATCH)
                            .map(|i| Block::from(&[t ^ i as u8; PAGE][..]))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            hands
                .into_iter()
                .map(|h| h.join().expect("maker"))
                .collect()
        });
        std::thread::scope(|s| {
            for (t, blocks) in made.into_iter().enumerate() {
                s.spawn(move || {
                    for (i, b) in blocks.iter().enumerate() {
                        assert!(b.iter().all(|&x| x == t as u8 ^ i as u8));
                    }
                    let again: Vec<Block> = blocks.iter().map(|b| Block::from(&b[..])).collect();
                    drop(blocks);
                    for (i, b) in again.iter().enumerate() {
                        assert_eq!(b[0], t as u8 ^ i as u8);
                    }
                });
            }
        });
    }
}
