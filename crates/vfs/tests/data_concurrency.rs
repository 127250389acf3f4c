//! The data path's concurrency promises (docs/DESIGN.md §10.8), shown with
//! a device that can hold a request until the test lets it go:
//! - a reader of a file never waits for a writer of the same file, even one stalled in
//!   a device read, nor for a write-back stalled in a device write;
//! - stat never waits for a write-back stalled in a device write, and its `st_blocks`
//!   is the file's before the write-back until it is done;
//! - writers of disjoint block ranges of one file proceed while another is stalled;
//! - a read-ahead job stalled in a device read while a truncate drops its blocks caches
//!   nothing: the file's hole reads as zeros, not as the old blocks;
//! - with 64 threads (writers of whole ranges, readers, a truncater, a tiny cache and a
//!   busy flusher), every read sees each write whole or not at all, and the file ends
//!   as the last writes left it, also after a remount.

use device::backend::{Backend, BackendQueue, DeviceInfo};
use device::error::DeviceError;
use device::memory::MemoryBackend;
use device::request::{IoCompletion, IoOp, IoRequest};
use device::Device;
use engine::log::EngineConfig;
use platform::{IoCause, Rng, SystemClock};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;
use testsupport::check::fsck_problems;
use testsupport::image::{formatted, memory_image, SECTOR_BYTES};
use testsupport::mount::mount_cached;
use vfs::{CacheConfig, FileSystem, OpenOptions};

const BLOCK: u64 = 4096;

/// Which requests the gate holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hold {
    DataReads,
    DataWrites,
}

/// Holds the first matching request once armed, until opened.
#[derive(Debug, Default)]
struct Gate {
    /// (armed for, a request is held, open)
    state: Mutex<(Option<Hold>, bool, bool)>,
    changed: Condvar,
}

impl Gate {
    fn arm(&self, hold: Hold) {
        *self.state.lock().unwrap() = (Some(hold), false, false);
    }

    /// Waits until a request is held.
    fn wait_held(&self) {
        let s = self.state.lock().unwrap();
        let (s, timeout) = self
            .changed
            .wait_timeout_while(s, Duration::from_secs(20), |s| !s.1)
            .unwrap();
        assert!(!timeout.timed_out() && s.1, "no request reached the gate");
    }

    fn open(&self) {
        let mut s = self.state.lock().unwrap();
        s.0 = None;
        s.2 = true;
        self.changed.notify_all();
    }

    fn pass(&self, request: &IoRequest) {
        let hold = match (&request.op, request.cause) {
            (IoOp::Read { .. }, IoCause::UserData) => Hold::DataReads,
            (IoOp::Write { .. }, IoCause::UserData) => Hold::DataWrites,
            _ => return,
        };
        let mut s = self.state.lock().unwrap();
        if s.0 != Some(hold) || s.1 {
            return;
        }
        s.1 = true;
        self.changed.notify_all();
        while !s.2 {
            s = self.changed.wait(s).unwrap();
        }
    }
}

#[derive(Debug)]
struct GatedBackend {
    inner: MemoryBackend,
    gate: Arc<Gate>,
}

impl Backend for GatedBackend {
    fn info(&self) -> &DeviceInfo {
        self.inner.info()
    }

    fn queue(&self) -> Result<Box<dyn BackendQueue + '_>, DeviceError> {
        Ok(Box::new(GatedQueue {
            inner: self.inner.queue()?,
            gate: &self.gate,
            pushed: Vec::new(),
        }))
    }
}

struct GatedQueue<'a> {
    inner: Box<dyn BackendQueue + 'a>,
    gate: &'a Gate,
    pushed: Vec<IoRequest>,
}

impl BackendQueue for GatedQueue<'_> {
    fn depth(&self) -> usize {
        self.inner.depth()
    }

    fn push(&mut self, request: IoRequest) -> Result<(), IoRequest> {
        if self.outstanding() >= self.depth() {
            return Err(request);
        }
        self.pushed.push(request);
        Ok(())
    }

    fn submit(&mut self, min_complete: usize) -> Result<(), DeviceError> {
        for request in self.pushed.drain(..) {
            self.gate.pass(&request);
            self.inner.push(request).expect("room in the inner queue");
        }
        self.inner
            .submit(min_complete.min(self.inner.outstanding()))
    }

    fn pop(&mut self) -> Option<IoCompletion> {
        self.inner.pop()
    }

    fn outstanding(&self) -> usize {
        self.pushed.len() + self.inner.outstanding()
    }
}

/// A formatted gated image and its gate.
fn gated_image() -> (Arc<Device>, Arc<Gate>) {
    let gate = Arc::new(Gate::default());
    let dev = Device::new(Box::new(GatedBackend {
        inner: MemoryBackend::new(256 << 20, SECTOR_BYTES),
        gate: gate.clone(),
    }));
    (formatted(dev, 2, None), gate)
}

/// No flusher and no background read-ahead: the gated tests hold the device's data
/// reads or writes and expect only the ones they make.
fn mount(dev: &Arc<Device>) -> Arc<FileSystem> {
    let cache = CacheConfig {
        flush_interval: None,
        readahead_workers: 0,
        ..CacheConfig::default()
    };
    mount_cached(
        dev,
        EngineConfig::default(),
        cache,
        Arc::new(SystemClock::new()),
    )
}

/// A 16-block file of block-numbered bytes, durable, on a fresh mount (nothing cached).
fn sixteen_blocks(dev: &Arc<Device>) -> Arc<FileSystem> {
    let fs = mount(dev);
    let f = OpenOptions::new()
        .write(true)
        .create(true)
        .open(&fs, "/f")
        .unwrap();
    for b in 0..16u64 {
        f.write_at(&[b as u8; BLOCK as usize], b * BLOCK).unwrap();
    }
    f.sync_all().unwrap();
    drop(f);
    Arc::try_unwrap(fs).unwrap().unmount().unwrap();
    mount(dev)
}

/// A read-ahead job held in its device read while a truncate drops its blocks and a
/// second one grows the file back: the job's fetch is stale, so what it read is not
/// cached, and the grown file reads zeros there (a job that cached its blocks anyway
/// would show the old data where the file now has a hole).
#[test]
fn a_read_ahead_job_overtaken_by_a_truncate_caches_nothing() {
    let (dev, gate) = gated_image();
    let fs = mount(&dev);
    let f = OpenOptions::new()
        .write(true)
        .create(true)
        .open(&fs, "/f")
        .unwrap();
    for b in 0..64u64 {
        f.write_at(&[b as u8 + 1; BLOCK as usize], b * BLOCK)
            .unwrap();
    }
    f.sync_all().unwrap();
    drop(f);
    Arc::try_unwrap(fs).unwrap().unmount().unwrap();
    let cache = CacheConfig {
        flush_interval: None,
        readahead_workers: 1,
        ..CacheConfig::default()
    };
    let fs = mount_cached(
        &dev,
        EngineConfig::default(),
        cache,
        Arc::new(SystemClock::new()),
    );
    let r = OpenOptions::new().read(true).open(&fs, "/f").unwrap();
    let mut buf = vec![0u8; 8 * BLOCK as usize];
    // Blocks 0-7 read; the read-ahead reads 8-39 (two windows of 16).
    r.read_at(&mut buf, 0).unwrap();
    for _ in 0..2000 {
        if fs.cache_stats().readahead >= 32 {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(fs.cache_stats().readahead, 32, "{:?}", fs.cache_stats());
    // Blocks 8-15 hit, and the read-ahead goes on with 40-63: held at the device (and
    // let go if the test fails, so that unmount does not wait for it forever).
    struct Opens(Arc<Gate>);
    impl Drop for Opens {
        fn drop(&mut self) {
            self.0.open();
        }
    }
    let _opens = Opens(gate.clone());
    gate.arm(Hold::DataReads);
    r.read_at(&mut buf, 8 * BLOCK).unwrap();
    for (i, block) in buf.chunks(BLOCK as usize).enumerate() {
        assert!(block.iter().all(|&x| x == 9 + i as u8), "block {}", 8 + i);
    }
    gate.wait_held();
    let ino = fs.resolve("/f", true).unwrap();
    fs.truncate(ino, 40 * BLOCK).unwrap();
    fs.truncate(ino, 64 * BLOCK).unwrap();
    gate.open();
    // The read waits for the job's fetch in flight, then reads the hole.
    for b in 40..64 {
        assert!(block_of(&fs, b).iter().all(|&x| x == 0), "block {b}");
    }
    assert!(block_of(&fs, 39).iter().all(|&x| x == 40));
}

fn block_of(fs: &Arc<FileSystem>, b: u64) -> Vec<u8> {
    let f = OpenOptions::new().read(true).open(fs, "/f").unwrap();
    let mut buf = vec![0u8; BLOCK as usize];
    assert_eq!(f.read_at(&mut buf, b * BLOCK).unwrap(), buf.len());
    buf
}

#[test]
fn readers_and_other_writers_pass_a_writer_stalled_in_a_device_read() {
    let (dev, gate) = gated_image();
    let fs = sixteen_blocks(&dev);
    assert_eq!(block_of(&fs, 0), vec![0u8; BLOCK as usize]);
    gate.arm(Hold::DataReads);
    // A partial write of block 10 (not cached) reads the block first: held there.
    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let (fs, done) = (fs.clone(), done.clone());
        std::thread::spawn(move || {
            let f = OpenOptions::new().write(true).open(&fs, "/f").unwrap();
            f.write_at(b"stalled", 10 * BLOCK + 100).unwrap();
            done.store(true, Ordering::SeqCst);
        })
    };
    gate.wait_held();
    // A reader of a cached block, a writer of whole other blocks (no device read), a
    // reader of what that writer wrote, and stat: none waits for the stalled writer.
    assert_eq!(block_of(&fs, 0), vec![0u8; BLOCK as usize]);
    let f = OpenOptions::new().write(true).open(&fs, "/f").unwrap();
    f.write_at(&[0xee; 2 * BLOCK as usize], 2 * BLOCK).unwrap();
    f.write_at(&[0xdd; BLOCK as usize], 20 * BLOCK).unwrap();
    assert_eq!(block_of(&fs, 3), vec![0xee; BLOCK as usize]);
    assert_eq!(fs.metadata("/f").unwrap().size, 21 * BLOCK);
    assert!(!done.load(Ordering::SeqCst), "the stalled writer went on");
    gate.open();
    writer.join().unwrap();
    let b10 = block_of(&fs, 10);
    assert_eq!(&b10[100..107], b"stalled");
    assert!(b10[..100].iter().chain(&b10[107..]).all(|&x| x == 10));
}

#[test]
fn readers_and_writers_pass_a_write_back_stalled_in_a_device_write() {
    let (dev, gate) = gated_image();
    let fs = sixteen_blocks(&dev);
    assert_eq!(block_of(&fs, 5), vec![5u8; BLOCK as usize]);
    let f = OpenOptions::new().write(true).open(&fs, "/f").unwrap();
    f.write_at(&[0xaa; BLOCK as usize], 7 * BLOCK).unwrap();
    gate.arm(Hold::DataWrites);
    let done = Arc::new(AtomicBool::new(false));
    let syncer = {
        let (fs, done) = (fs.clone(), done.clone());
        std::thread::spawn(move || {
            let f = OpenOptions::new().write(true).open(&fs, "/f").unwrap();
            f.sync_all().unwrap();
            done.store(true, Ordering::SeqCst);
        })
    };
    gate.wait_held();
    // The file's readers see the dirty block being written back and clean ones; a
    // writer rewrites the block being written back (it stays dirty, with the new bytes).
    assert_eq!(block_of(&fs, 7), vec![0xaa; BLOCK as usize]);
    assert_eq!(block_of(&fs, 5), vec![5u8; BLOCK as usize]);
    f.write_at(&[0xbb; BLOCK as usize], 7 * BLOCK).unwrap();
    f.write_at(&[0xcc; 10], 16 * BLOCK).unwrap();
    assert_eq!(block_of(&fs, 7), vec![0xbb; BLOCK as usize]);
    assert!(
        !done.load(Ordering::SeqCst),
        "the stalled write-back went on"
    );
    gate.open();
    syncer.join().unwrap();
    assert_eq!(
        fs.dirty_blocks(fs.resolve("/f", false).unwrap()).unwrap(),
        vec![7, 16]
    );
    f.sync_all().unwrap();
    drop(f);
    Arc::try_unwrap(fs).unwrap().unmount().unwrap();
    let fs = mount(&dev);
    assert_eq!(block_of(&fs, 7), vec![0xbb; BLOCK as usize]);
    assert_eq!(fs.metadata("/f").unwrap().size, 16 * BLOCK + 10);
}

#[test]
fn sixty_four_threads_see_whole_writes_through_truncates_and_write_backs() {
    const RANGE: usize = 24 * 1024 + 100;
    let dev = memory_image(256 << 20, 2);
    // A tiny cache and a flusher that writes back at once: evictions, misses, stale
    // fetches and write-backs under the threads' feet.
    let cache = CacheConfig {
        max_bytes: 64 << 10,
        dirty_bytes: 32 << 10,
        flush_interval: Some(Duration::from_millis(1)),
        expire: Duration::ZERO,
        readahead_max: 64 << 10,
        // Background read-ahead races the writers and truncates too.
        readahead_workers: 2,
    };
    let fs = mount_cached(
        &dev,
        EngineConfig::default(),
        cache,
        Arc::new(SystemClock::new()),
    );
    OpenOptions::new()
        .write(true)
        .create(true)
        .open(&fs, "/shared")
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    // 24 writers of the whole first range (one value each write), 8 writers of ranges
    // of their own past it, 30 readers, a truncater and a stat-er.
    for t in 0..24u64 {
        let fs = fs.clone();
        threads.push(std::thread::spawn(move || {
            let f = OpenOptions::new().write(true).open(&fs, "/shared").unwrap();
            for i in 0..40u64 {
                let v = ((t * 40 + i) % 250) as u8 + 1;
                f.write_at(&vec![v; RANGE], 0).unwrap();
            }
        }));
    }
    for t in 0..8u64 {
        let fs = fs.clone();
        threads.push(std::thread::spawn(move || {
            let f = OpenOptions::new()
                .write(true)
                .open(&fs, "/own")
                .or_else(|_| {
                    OpenOptions::new()
                        .write(true)
                        .create(true)
                        .open(&fs, "/own")
                });
            let f = f.unwrap();
            for i in 0..40u64 {
                let v = (i % 200) as u8 + t as u8 + 1;
                f.write_at(&vec![v; 5000], t * 5000).unwrap();
            }
        }));
    }
    for r in 0..30u64 {
        let (fs, stop) = (fs.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            let f = OpenOptions::new().read(true).open(&fs, "/shared").unwrap();
            let mut rng = Rng::from_seed(r);
            let mut buf = vec![0u8; RANGE];
            while !stop.load(Ordering::SeqCst) {
                let at = rng.below(RANGE as u64 / 2);
                let n = f.read_at(&mut buf[..RANGE - at as usize], at).unwrap();
                // Whole writes of one value, or a truncate's zeros: never a mix within
                // what one write covers.
                let seen = &buf[..n];
                assert!(
                    seen.iter().all(|&x| x == seen[0]),
                    "reader {r}: a torn read at {at} of {n} bytes"
                );
            }
        }));
    }
    {
        let (fs, stop) = (fs.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            let f = OpenOptions::new().write(true).open(&fs, "/shared").unwrap();
            while !stop.load(Ordering::SeqCst) {
                f.set_len(0).unwrap();
                std::thread::sleep(Duration::from_millis(2));
            }
        }));
    }
    {
        let (fs, stop) = (fs.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                let m = fs.metadata("/shared").unwrap();
                assert!(m.size == 0 || m.size == RANGE as u64, "size {}", m.size);
            }
        }));
    }
    let (writers, rest): (Vec<_>, Vec<_>) =
        threads.into_iter().enumerate().partition(|(i, _)| *i < 32);
    for (_, w) in writers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::SeqCst);
    for (_, t) in rest {
        t.join().unwrap();
    }
    let shared = {
        let f = OpenOptions::new().read(true).open(&fs, "/shared").unwrap();
        let mut buf = vec![0u8; RANGE + 10];
        let n = f.read_at(&mut buf, 0).unwrap();
        buf.truncate(n);
        buf
    };
    assert!(shared.len() == RANGE || shared.is_empty());
    assert!(shared
        .iter()
        .all(|&x| x == shared.first().copied().unwrap_or(0)));
    let own = {
        let f = OpenOptions::new().read(true).open(&fs, "/own").unwrap();
        let mut buf = vec![0u8; 8 * 5000];
        assert_eq!(f.read_at(&mut buf, 0).unwrap(), buf.len());
        buf
    };
    for t in 0..8usize {
        // Each writer's last write (i = 39).
        let want = 39 + t as u8 + 1;
        assert!(
            own[t * 5000..(t + 1) * 5000].iter().all(|&x| x == want),
            "writer {t}"
        );
    }
    Arc::try_unwrap(fs).unwrap().unmount().unwrap();
    assert!(fsck_problems(&dev).is_empty());
    let fs = testsupport::mount::mount(&dev);
    let f = OpenOptions::new().read(true).open(&fs, "/shared").unwrap();
    let mut buf = vec![0u8; RANGE + 10];
    let n = f.read_at(&mut buf, 0).unwrap();
    assert_eq!(&buf[..n], &shared[..]);
}

#[test]
fn stat_passes_a_write_back_stalled_in_a_device_write() {
    let (dev, gate) = gated_image();
    let fs = sixteen_blocks(&dev);
    let sectors = |blocks: u64| blocks * BLOCK / 512;
    assert_eq!(fs.metadata("/f").unwrap().blocks, sectors(16));
    // An overwrite of a mapped block not cached (its mapping unknown to the cache) and
    // a new block past the end: one more block once written back.
    let f = OpenOptions::new().write(true).open(&fs, "/f").unwrap();
    f.write_at(&[0xaa; BLOCK as usize], 7 * BLOCK).unwrap();
    f.write_at(&[0xbb; BLOCK as usize], 16 * BLOCK).unwrap();
    gate.arm(Hold::DataWrites);
    let syncer = {
        let fs = fs.clone();
        std::thread::spawn(move || {
            let f = OpenOptions::new().write(true).open(&fs, "/f").unwrap();
            f.sync_all().unwrap();
        })
    };
    gate.wait_held();
    let (sent, stat) = std::sync::mpsc::channel();
    let stater = {
        let fs = fs.clone();
        std::thread::spawn(move || {
            let meta = fs.metadata("/f").unwrap();
            sent.send((meta.size, meta.blocks)).unwrap();
        })
    };
    let seen = stat.recv_timeout(Duration::from_secs(10));
    let held = !syncer.is_finished();
    gate.open();
    syncer.join().unwrap();
    stater.join().unwrap();
    let (size, blocks) = seen.expect("stat waited for the stalled write-back");
    assert!(held, "the write-back was not stalled during the stat");
    assert_eq!((size, blocks), (17 * BLOCK, sectors(17)));
    assert_eq!(fs.metadata("/f").unwrap().blocks, sectors(17));
    assert!(fs
        .dirty_blocks(fs.resolve("/f", false).unwrap())
        .unwrap()
        .is_empty());
}

#[test]
fn stat_counts_blocks_exactly_while_holes_are_written_back() {
    // Whole-block writes into holes of a durable sparse file: pages whose mapping the
    // cache does not know, each written back at once while two threads stat the file.
    // A stat counts each such block once: as a dirty page over a hole, or mapped.
    const HOLES: u64 = 2000;
    let (dev, _gate) = gated_image();
    let fs = mount(&dev);
    let f = OpenOptions::new()
        .write(true)
        .create(true)
        .open(&fs, "/f")
        .unwrap();
    f.set_len(HOLES * BLOCK).unwrap();
    f.sync_all().unwrap();
    let ino = fs.resolve("/f", false).unwrap();
    let written = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let staters: Vec<_> = (0..2)
        .map(|_| {
            let (fs, written, stop) = (fs.clone(), written.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut stats = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    let before = written.load(Ordering::SeqCst);
                    let blocks = fs.stat_ino(ino).unwrap().blocks / (BLOCK / 512);
                    let after = written.load(Ordering::SeqCst);
                    assert!(
                        before <= blocks && blocks <= after + 1,
                        "{blocks} blocks with {before}..={after} written"
                    );
                    stats += 1;
                }
                stats
            })
        })
        .collect();
    for b in 0..HOLES {
        f.write_at(&[1; BLOCK as usize], b * BLOCK).unwrap();
        written.store(b + 1, Ordering::SeqCst);
        f.sync_all().unwrap();
    }
    stop.store(true, Ordering::SeqCst);
    for s in staters {
        assert!(s.join().unwrap() > 0);
    }
    assert_eq!(fs.metadata("/f").unwrap().blocks, HOLES * (BLOCK / 512));
}
