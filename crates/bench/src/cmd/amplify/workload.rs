//! The workloads of io-amplification.txt (§2.3, Tables 1 and 2), written once over a
//! [`Subject`] (augefs through its Rust API, or a kernel file system through std::fs),
//! and how one run of one of them is measured.
//!
//! Invariants:
//! - Every run starts on a freshly made file system; its setup (files, directories,
//!   the prefilled file) is made durable before the first counted operation.
//! - Each counted operation is followed by its own fsync (of the file, or of the parent
//!   directory for namespace operations), as in the paper.
//! - "At fsync" is what the device did while the operations ran; "later" is what a
//!   final sync and unmount added (augefs also moves work the device counters attribute
//!   to background causes into "later", see [`Io::later_causes`]).

use std::time::Duration;

/// One workload of the paper.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// 4 KiB overwrite at a random aligned offset of a prefilled file, then fsync.
    Overwrite,
    /// 4 KiB append to a file, then fsync.
    Append,
    /// One 4 KiB read at a random aligned offset after caches were dropped (remount).
    ReadCold,
    /// 4 KiB reads of blocks not read before, with the file's metadata cached.
    ReadWarm,
    /// A new file in a directory at depth 3 (`a/b/c`), then fsync of the directory.
    Create,
    /// A new directory in a directory at depth 4 (`a/b/c/d`), then fsync of it.
    Mkdir,
    /// A rename within a directory at depth 3, then fsync of the directory.
    Rename,
}

impl Workload {
    pub const ALL: [Workload; 7] = [
        Workload::Overwrite,
        Workload::Append,
        Workload::ReadCold,
        Workload::ReadWarm,
        Workload::Create,
        Workload::Mkdir,
        Workload::Rename,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Workload::Overwrite => "overwrite",
            Workload::Append => "append",
            Workload::ReadCold => "read_cold",
            Workload::ReadWarm => "read_warm",
            Workload::Create => "create",
            Workload::Mkdir => "mkdir",
            Workload::Rename => "rename",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Workload::Overwrite => "4K overwrite+fsync",
            Workload::Append => "4K append+fsync",
            Workload::ReadCold => "4K read, cold",
            Workload::ReadWarm => "4K read, warm",
            Workload::Create => "create+fsync dir",
            Workload::Mkdir => "mkdir+fsync dir",
            Workload::Rename => "rename+fsync dir",
        }
    }

    /// Data workloads report amplification (per 4 KiB of user data); namespace
    /// workloads report bytes per operation.
    pub fn is_data(self) -> bool {
        matches!(
            self,
            Workload::Overwrite | Workload::Append | Workload::ReadCold | Workload::ReadWarm
        )
    }

    pub fn is_read(self) -> bool {
        matches!(self, Workload::ReadCold | Workload::ReadWarm)
    }
}

pub const BLOCK_BYTES: u64 = 4096;

/// The sizes of a run.
#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    /// Counted operations per run of the namespace workloads and of warm reads.
    pub ops: u64,
    /// 4 KiB writes per run of the overwrite and append workloads (the paper: 10 MB of
    /// writes, 2,560): a run's fixed costs (the setup's own records flushed and merged
    /// in the window, the unmount's checkpoints) are then spread as thin as in its
    /// Table 1.
    pub data_writes: u64,
    /// Cold reads per run, each after a remount.
    pub cold_reads: u64,
    /// The overwritten file (the paper: 100 MB).
    pub overwrite_file_bytes: u64,
    /// The read file (the paper: 10 MB).
    pub read_file_bytes: u64,
    /// Pause before each data write, so that the file's mtime changes on every write
    /// (the kernel's timestamps tick with the jiffy, 1-10 ms): an fsync then always has
    /// the inode to write, as in the paper's runs.
    pub write_spacing: Duration,
}

/// The device's work over an interval.
#[derive(Debug, Clone, Copy, Default)]
pub struct Io {
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub write_requests: u64,
    pub flushes: Option<u64>,
    /// augefs: bytes written by cause (`platform::IoCause` order); kernel: `None`.
    pub written_by_cause: Option<[u64; platform::IoCause::COUNT]>,
}

impl Io {
    /// Bytes written for causes that are background work (MetaDB flush and compaction,
    /// checkpoints, GC, superblocks): "later" even when the device did them while the
    /// operations ran. Kernel file systems: 0 (their counters have no causes).
    pub fn later_causes(&self) -> u64 {
        use platform::IoCause::*;
        self.written_by_cause.map_or(0, |w| {
            [Table, Compaction, Manifest, Checkpoint, Gc, Superblock]
                .iter()
                .map(|&c| w[c as usize])
                .sum()
        })
    }
}

/// A file system a workload runs on. Paths are relative to its root, `/`-separated.
pub trait Subject {
    /// Makes a fresh, empty file system and mounts it.
    fn make(&mut self) -> Result<(), String>;
    /// The device's counters since the file system was made.
    fn io(&self) -> Result<Io, String>;
    /// Bytes in use on the device (statfs).
    fn used_bytes(&self) -> Result<u64, String>;
    /// Makes everything durable.
    fn sync(&mut self) -> Result<(), String>;
    /// Makes everything durable and unmounts.
    fn unmount(&mut self) -> Result<(), String>;
    /// Unmounts and mounts again with every cache of the file system dropped.
    fn remount_cold(&mut self) -> Result<(), String>;

    fn mkdir(&mut self, path: &str) -> Result<(), String>;
    /// Creates (or truncates) `path` and writes `bytes` of data into it, unsynced.
    fn write_file(&mut self, path: &str, bytes: u64) -> Result<(), String>;
    /// Opens `path` (created if missing) as the file of `pwrite`, `pread`, `fsync`.
    fn open(&mut self, path: &str) -> Result<(), String>;
    fn pwrite(&mut self, buf: &[u8], offset: u64) -> Result<(), String>;
    fn pread(&mut self, buf: &mut [u8], offset: u64) -> Result<(), String>;
    fn fsync(&mut self) -> Result<(), String>;
    /// Closes the file `open` opened.
    fn close(&mut self);
    /// Creates the empty file `path`, then fsyncs its parent `dir`.
    fn create_fsync(&mut self, dir: &str, path: &str) -> Result<(), String>;
    /// Makes the directory `path`, then fsyncs its parent `dir`.
    fn mkdir_fsync(&mut self, dir: &str, path: &str) -> Result<(), String>;
    /// Renames `from` to `to` (both in `dir`), then fsyncs `dir`.
    fn rename_fsync(&mut self, dir: &str, from: &str, to: &str) -> Result<(), String>;
}

impl Sizes {
    /// Counted operations per run of write workload `workload`.
    pub fn writes_of(&self, workload: Workload) -> u64 {
        if workload.is_data() {
            self.data_writes
        } else {
            self.ops
        }
    }
}

/// What one run measured, per counted operation.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sample {
    pub ops: u64,
    pub write_fsync_bytes: f64,
    pub write_later_bytes: f64,
    pub read_bytes: f64,
    pub write_requests: f64,
    pub flushes: Option<f64>,
    /// Data workloads: bytes in use / bytes stored; namespace workloads: bytes in use
    /// added per operation. `None` for reads.
    pub space: Option<f64>,
    /// augefs: bytes written per operation by cause, at fsync and later together.
    pub written_by_cause: Option<[f64; platform::IoCause::COUNT]>,
}

/// A small deterministic generator (splitmix64) for offsets: the same run every time.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// `count` distinct block indexes below `blocks`, in random order.
    fn distinct(&mut self, blocks: u64, count: u64) -> Vec<u64> {
        assert!(count <= blocks, "the file has enough blocks");
        let mut all: Vec<u64> = (0..blocks).collect();
        for i in 0..count as usize {
            let j = i + (self.next() % (blocks - i as u64)) as usize;
            all.swap(i, j);
        }
        all.truncate(count as usize);
        all
    }
}

/// A block of data no earlier write wrote (never all zeros, never the same twice).
fn block_of(op: u64) -> Vec<u8> {
    let mut buf = vec![0u8; BLOCK_BYTES as usize];
    for (i, chunk) in buf.chunks_mut(8).enumerate() {
        chunk.copy_from_slice(&(op << 16 | i as u64 | 1 << 63).to_le_bytes());
    }
    buf
}

const DEPTH3: &str = "a/b/c";
const DEPTH4: &str = "a/b/c/d";

/// Runs `workload` once on a fresh file system of `subject` and measures it.
pub fn run(workload: Workload, subject: &mut dyn Subject, sizes: &Sizes) -> Result<Sample, String> {
    assert!(
        sizes.ops > 0 && sizes.data_writes > 0,
        "at least one operation"
    );
    subject.make()?;
    let used_empty = subject.used_bytes()?;
    let stored = setup(workload, subject, sizes)?;
    subject.sync()?;
    if workload.is_read() {
        return reads(workload, subject, sizes);
    }
    let used_before = subject.used_bytes()?;
    let before = subject.io()?;
    operations(workload, subject, sizes)?;
    let during = subject.io()?;
    subject.sync()?;
    let used_after = subject.used_bytes()?;
    subject.unmount()?;
    let after = subject.io()?;
    let n = sizes.writes_of(workload);
    let ops = n as f64;
    let window = diff(&during, &before);
    let end = diff(&after, &during);
    let moved = window.later_causes();
    let space = if workload.is_data() {
        let stored = stored
            + if workload == Workload::Append {
                n * BLOCK_BYTES
            } else {
                0
            };
        used_after.saturating_sub(used_empty) as f64 / stored as f64
    } else {
        used_after.saturating_sub(used_before) as f64 / ops
    };
    let total = diff(&after, &before);
    Ok(Sample {
        ops: n,
        write_fsync_bytes: (window.write_bytes - moved) as f64 / ops,
        write_later_bytes: (end.write_bytes + moved) as f64 / ops,
        read_bytes: window.read_bytes as f64 / ops,
        write_requests: window.write_requests as f64 / ops,
        flushes: window.flushes.map(|f| f as f64 / ops),
        space: Some(space),
        written_by_cause: total.written_by_cause.map(|w| w.map(|b| b as f64 / ops)),
    })
}

fn diff(later: &Io, earlier: &Io) -> Io {
    Io {
        read_bytes: later.read_bytes - earlier.read_bytes,
        write_bytes: later.write_bytes - earlier.write_bytes,
        write_requests: later.write_requests - earlier.write_requests,
        flushes: later.flushes.zip(earlier.flushes).map(|(a, b)| a - b),
        written_by_cause: later
            .written_by_cause
            .zip(earlier.written_by_cause)
            .map(|(a, b)| std::array::from_fn(|i| a[i] - b[i])),
    }
}

/// Makes what the counted operations need; returns the bytes of data it stored.
fn setup(workload: Workload, subject: &mut dyn Subject, sizes: &Sizes) -> Result<u64, String> {
    let dirs: &[&str] = match workload {
        Workload::Create | Workload::Rename => &["a", "a/b", DEPTH3],
        Workload::Mkdir => &["a", "a/b", DEPTH3, DEPTH4],
        _ => &[],
    };
    for dir in dirs {
        subject.mkdir(dir)?;
    }
    match workload {
        Workload::Overwrite => {
            subject.write_file("file", sizes.overwrite_file_bytes)?;
            Ok(sizes.overwrite_file_bytes)
        }
        Workload::ReadCold | Workload::ReadWarm => {
            subject.write_file("file", sizes.read_file_bytes)?;
            Ok(sizes.read_file_bytes)
        }
        Workload::Rename => {
            for i in 0..sizes.ops {
                subject.write_file(&format!("{DEPTH3}/f{i}"), 0)?;
            }
            Ok(0)
        }
        Workload::Append | Workload::Create | Workload::Mkdir => Ok(0),
    }
}

/// The counted operations of a write workload.
fn operations(workload: Workload, subject: &mut dyn Subject, sizes: &Sizes) -> Result<(), String> {
    let mut rng = Rng(0x616d_706c_6966_7900);
    match workload {
        Workload::Overwrite | Workload::Append => {
            subject.open("file")?;
            let blocks = sizes.overwrite_file_bytes / BLOCK_BYTES;
            for op in 0..sizes.data_writes {
                std::thread::sleep(sizes.write_spacing);
                let offset = match workload {
                    Workload::Overwrite => (rng.next() % blocks) * BLOCK_BYTES,
                    _ => op * BLOCK_BYTES,
                };
                subject.pwrite(&block_of(op), offset)?;
                subject.fsync()?;
            }
            subject.close();
        }
        Workload::Create => {
            for i in 0..sizes.ops {
                subject.create_fsync(DEPTH3, &format!("{DEPTH3}/n{i}"))?;
            }
        }
        Workload::Mkdir => {
            for i in 0..sizes.ops {
                subject.mkdir_fsync(DEPTH4, &format!("{DEPTH4}/d{i}"))?;
            }
        }
        Workload::Rename => {
            for i in 0..sizes.ops {
                let (from, to) = (format!("{DEPTH3}/f{i}"), format!("{DEPTH3}/r{i}"));
                subject.rename_fsync(DEPTH3, &from, &to)?;
            }
        }
        Workload::ReadCold | Workload::ReadWarm => unreachable!("reads are measured apart"),
    }
    Ok(())
}

/// Cold: each read follows a remount with caches dropped (the open is counted with
/// it: the paper's cold read pays for the inode and the directory). Warm: one read
/// after a remount warms the metadata; the counted reads then fetch blocks not read
/// before (read-ahead may already have fetched some: that is the file system's
/// amplification too).
fn reads(workload: Workload, subject: &mut dyn Subject, sizes: &Sizes) -> Result<Sample, String> {
    let blocks = sizes.read_file_bytes / BLOCK_BYTES;
    let ops = match workload {
        Workload::ReadCold => sizes.cold_reads,
        _ => sizes.ops,
    }
    .min(blocks - 1);
    let mut order = Rng(0x7265_6164_7300).distinct(blocks, ops + 1);
    let mut buf = vec![0u8; BLOCK_BYTES as usize];
    let mut read = Io::default();
    if workload == Workload::ReadWarm {
        subject.remount_cold()?;
        subject.open("file")?;
        subject.pread(&mut buf, order.pop().expect("one more") * BLOCK_BYTES)?;
        let before = subject.io()?;
        for &block in &order {
            subject.pread(&mut buf, block * BLOCK_BYTES)?;
        }
        read = diff(&subject.io()?, &before);
        subject.close();
    } else {
        for &block in &order[..ops as usize] {
            subject.remount_cold()?;
            let before = subject.io()?;
            subject.open("file")?;
            subject.pread(&mut buf, block * BLOCK_BYTES)?;
            subject.close();
            let one = diff(&subject.io()?, &before);
            read.read_bytes += one.read_bytes;
            read.write_bytes += one.write_bytes;
        }
    }
    subject.unmount()?;
    let per = |b: u64| b as f64 / ops as f64;
    Ok(Sample {
        ops,
        write_fsync_bytes: per(read.write_bytes),
        read_bytes: per(read.read_bytes),
        ..Sample::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_are_distinct_and_blocks_differ() {
        let picked = Rng(1).distinct(100, 100);
        let mut sorted = picked.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..100).collect::<Vec<_>>());
        assert_ne!(picked, sorted, "shuffled");
        assert_ne!(block_of(1), block_of(2));
        assert!(block_of(0).iter().any(|&b| b != 0));
    }

    #[test]
    fn background_causes_count_as_later() {
        let mut w = [0u64; platform::IoCause::COUNT];
        w[platform::IoCause::UserData as usize] = 4096;
        w[platform::IoCause::Compaction as usize] = 100;
        w[platform::IoCause::Checkpoint as usize] = 20;
        let io = Io {
            written_by_cause: Some(w),
            ..Io::default()
        };
        assert_eq!(io.later_causes(), 120);
        assert_eq!(Io::default().later_causes(), 0);
    }
}
