//! One cell of `bench fs`: what a case makes before its timed run (`setup`), what each
//! thread does per counted operation (`worker`), and the run itself (`measure`), all
//! over an [`Fs`]. The same code runs in this process (api, dir, kernel, fuse targets)
//! and in the interposer's worker process.
//!
//! Layout on the file system: thread `t`'s private directory is `p<t>`, the shared one
//! `s`; names in a shared directory carry the thread, so threads never collide. Data
//! files are `data` in the directory (the shared one split into one region per thread).
//!
//! Invariants:
//! - Everything an operation needs exists before the run; a thread prepares its own
//!   state (opens its file, warms its cache for warm reads) before the start.
//! - Workloads that consume what setup made (unlink, rmdir, appends into a bounded
//!   file, cold reads that must not read a block twice) are capped per thread; the
//!   JSON says how many threads stopped at their cap rather than at the deadline.
//! - Every read checks its length and every readdir its entry count: a figure of
//!   failing calls is never reported.

use super::case::{Case, Kind, BLOCK_BYTES};
use super::filebench::{self, Scale};
use super::ops::{FileOps, Fs};
use crate::cpu;
use crate::stats::percentile;
use crate::threads::{self, Limit};
use platform::Rng;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The sizes of a cell.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Sizes {
    /// Files (or directories) each thread has for unlink, rmdir, rename, open, stat.
    pub files_per_thread: u64,
    /// Entries of the directory readdir lists.
    pub dir_entries: u64,
    /// Each thread's data file, or its region of the shared file.
    pub file_bytes: u64,
    /// Files or directories all threads of a create or mkdir run may make: what the
    /// images hold (inodes of ext2/ext4 included), so a fast run stops at a cap rather
    /// than failing with ENOSPC.
    pub creates_max: u64,
    pub filebench: Scale,
}

/// Everything a cell's run depends on (what the interposer's worker receives).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Spec {
    pub case: Case,
    pub threads: usize,
    pub seconds: f64,
    pub sizes: Sizes,
}

/// What one timed run measured in the process that ran it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Measured {
    /// Operations all threads completed.
    pub ops: u64,
    /// From the first thread's start to the last one's stop, by their own clocks.
    pub elapsed_ns: u64,
    /// Threads that stopped at the case's cap rather than at the deadline.
    pub capped_threads: usize,
    /// Percentiles of the sampled operations' latencies.
    pub p50_ns: Option<u64>,
    pub p99_ns: Option<u64>,
    /// User + system CPU time of the process over the run.
    pub cpu_ns: u64,
}

pub type Worker<'a> = Box<dyn FnMut(u64) -> Result<(), String> + 'a>;

/// Bytes per write while files are filled before a run.
const FILL_CHUNK_BYTES: u64 = 1 << 20;

fn dir_of(case: &Case, thread: usize) -> String {
    if case.shared {
        "s".to_string()
    } else {
        format!("p{thread}")
    }
}

/// Where thread `thread`'s data starts in its data file.
fn region_start(case: &Case, thread: usize, sizes: &Sizes) -> u64 {
    if case.shared {
        thread as u64 * sizes.file_bytes
    } else {
        0
    }
}

/// Data no earlier write wrote the same way: never all zeros, different per seed.
fn pattern(bytes: u64, seed: u64) -> Vec<u8> {
    let mut buf = vec![0u8; bytes as usize];
    Rng::from_seed(seed | 1).fill(&mut buf);
    buf
}

/// Writes `bytes` of data at `start` of `file`.
pub fn fill(file: &dyn FileOps, start: u64, bytes: u64) -> Result<(), String> {
    let chunk = pattern(FILL_CHUNK_BYTES.min(bytes.max(1)), start);
    let mut done = 0;
    while done < bytes {
        let n = (bytes - done).min(chunk.len() as u64);
        file.write_at(&chunk[..n as usize], start + done)?;
        done += n;
    }
    Ok(())
}

/// Makes what the case's operations need, for `threads` threads.
pub fn setup(fs: &dyn Fs, spec: &Spec) -> Result<(), String> {
    let (case, sizes) = (&spec.case, &spec.sizes);
    if case.kind.group() == super::case::Group::Filebench {
        return filebench::setup(fs, case.kind, spec.threads, &sizes.filebench);
    }
    let dirs = if case.shared { 1 } else { spec.threads };
    for t in 0..dirs {
        fs.mkdir(&dir_of(case, t))?;
    }
    let files = sizes.files_per_thread;
    for t in 0..spec.threads {
        let dir = dir_of(case, t);
        match case.kind {
            Kind::Unlink => make_files(fs, &dir, &format!("u{t}-"), "", files)?,
            Kind::Rename => make_files(fs, &dir, &format!("n{t}-"), ".0", files)?,
            Kind::Open | Kind::Stat => make_files(fs, &dir, &format!("o{t}-"), "", files)?,
            Kind::Rmdir => {
                for i in 0..files {
                    fs.mkdir(&format!("{dir}/r{t}-{i}"))?;
                }
            }
            Kind::Readdir if !case.shared || t == 0 => {
                make_files(fs, &dir, "e", "", sizes.dir_entries)?;
            }
            Kind::Append if !case.shared || t == 0 => drop(fs.create(&format!("{dir}/data"))?),
            Kind::Overwrite | Kind::RandRead | Kind::SeqRead if !case.shared || t == 0 => {
                let file = fs.create(&format!("{dir}/data"))?;
                let bytes = sizes.file_bytes * if case.shared { spec.threads as u64 } else { 1 };
                fill(file.as_ref(), 0, bytes)?;
            }
            _ => {}
        }
    }
    Ok(())
}

fn make_files(fs: &dyn Fs, dir: &str, prefix: &str, suffix: &str, n: u64) -> Result<(), String> {
    for i in 0..n {
        drop(fs.create(&format!("{dir}/{prefix}{i}{suffix}"))?);
    }
    Ok(())
}

/// Operations per thread the case can do at most, if bounded.
pub fn cap(spec: &Spec) -> Option<u64> {
    let (case, sizes) = (&spec.case, &spec.sizes);
    match case.kind {
        Kind::Unlink | Kind::Rmdir => Some(sizes.files_per_thread),
        Kind::Create | Kind::Mkdir => Some(sizes.creates_max / spec.threads as u64),
        Kind::Append => Some(sizes.file_bytes / case.io_bytes),
        Kind::RandRead if case.cold => Some(sizes.file_bytes / BLOCK_BYTES),
        Kind::SeqRead if case.cold => Some(sizes.file_bytes / case.io_bytes),
        _ => None,
    }
}

/// Thread `thread`'s operation: called with 0, 1, 2, ...
pub fn worker<'a>(fs: &'a dyn Fs, spec: &'a Spec, thread: usize) -> Result<Worker<'a>, String> {
    let case = &spec.case;
    match case.kind.group() {
        super::case::Group::Filebench => {
            filebench::worker(fs, case.kind, thread, spec.threads, &spec.sizes.filebench)
        }
        super::case::Group::Metadata => Ok(metadata_worker(fs, spec, thread)),
        super::case::Group::Data => data_worker(fs, spec, thread),
    }
}

fn metadata_worker<'a>(fs: &'a dyn Fs, spec: &'a Spec, t: usize) -> Worker<'a> {
    let case = &spec.case;
    let dir = dir_of(case, t);
    let files = spec.sizes.files_per_thread.max(1);
    let entries = spec.sizes.dir_entries as usize;
    let fsync = case.fsync;
    // Open and stat visit the files setup made, over and over: their paths are made
    // once, so that the timed operation is the file system's, not the formatting's.
    let made: Vec<String> = match case.kind {
        Kind::Open | Kind::Stat => (0..files).map(|j| format!("{dir}/o{t}-{j}")).collect(),
        _ => Vec::new(),
    };
    Box::new(move |i: u64| {
        match case.kind {
            Kind::Create => drop(fs.create(&format!("{dir}/c{t}-{i}"))?),
            Kind::Mkdir => fs.mkdir(&format!("{dir}/m{t}-{i}"))?,
            Kind::Unlink => fs.unlink(&format!("{dir}/u{t}-{i}"))?,
            Kind::Rmdir => fs.rmdir(&format!("{dir}/r{t}-{i}"))?,
            Kind::Rename => {
                let (j, generation) = (i % files, i / files);
                let from = format!("{dir}/n{t}-{j}.{generation}");
                fs.rename(&from, &format!("{dir}/n{t}-{j}.{}", generation + 1))?;
            }
            Kind::Readdir => {
                let n = fs.readdir(&dir)?;
                if n != entries {
                    return Err(format!("readdir {dir}: {n} entries, {entries} made"));
                }
            }
            Kind::Open => drop(fs.open(&made[(i % files) as usize], false)?),
            Kind::Stat => drop(fs.stat(&made[(i % files) as usize])?),
            _ => unreachable!("a metadata kind"),
        }
        if fsync {
            fs.fsync_dir(&dir)?;
        }
        Ok(())
    })
}

fn data_worker<'a>(fs: &'a dyn Fs, spec: &'a Spec, t: usize) -> Result<Worker<'a>, String> {
    let case = &spec.case;
    let path = format!("{}/data", dir_of(case, t));
    let file = fs.open(&path, !case.kind.is_read())?;
    let start = region_start(case, t, &spec.sizes);
    let region = spec.sizes.file_bytes;
    let blocks = region / BLOCK_BYTES;
    let mut rng = Rng::from_seed(0x6265_6e63_6866_7300 ^ t as u64);
    let io = match case.kind {
        Kind::Append | Kind::SeqRead => case.io_bytes,
        _ => BLOCK_BYTES,
    };
    let mut buf = pattern(io, 0x7772_6974_6500 + t as u64);
    if case.kind.is_read() && !case.cold {
        read_region(file.as_ref(), start, region, &mut buf)?;
    }
    // Cold random reads visit each block once, in random order.
    let mut order: Vec<u64> = Vec::new();
    if case.kind == Kind::RandRead && case.cold {
        order = (0..blocks).collect();
        for i in 0..order.len() {
            let j = i + rng.below((order.len() - i) as u64) as usize;
            order.swap(i, j);
        }
    }
    let kind = case.kind;
    Ok(Box::new(move |i: u64| match kind {
        Kind::Append => {
            file.write_at(&buf, start + i * io)?;
            file.fsync()
        }
        Kind::Overwrite => {
            file.write_at(&buf, start + rng.below(blocks) * BLOCK_BYTES)?;
            file.fsync()
        }
        Kind::RandRead => {
            let block = match order.get(i as usize) {
                Some(&b) => b,
                None => rng.below(blocks),
            };
            read_exact(file.as_ref(), &mut buf, start + block * BLOCK_BYTES)
        }
        Kind::SeqRead => {
            let offset = (i % (region / io)) * io;
            read_exact(file.as_ref(), &mut buf, start + offset)
        }
        _ => unreachable!("a data kind"),
    }))
}

fn read_exact(file: &dyn FileOps, buf: &mut [u8], offset: u64) -> Result<(), String> {
    let n = file.read_at(buf, offset)?;
    if n != buf.len() {
        return Err(format!("read at {offset}: {n} bytes, {} asked", buf.len()));
    }
    Ok(())
}

/// Reads `bytes` at `start` once (a warm run's data in the file system's cache).
fn read_region(file: &dyn FileOps, start: u64, bytes: u64, buf: &mut [u8]) -> Result<(), String> {
    let step = buf.len() as u64;
    let mut offset = 0;
    while offset + step <= bytes {
        read_exact(file, buf, start + offset)?;
        offset += step;
    }
    Ok(())
}

/// Runs the case's timed run on `fs` (setup done) and measures it.
pub fn measure(fs: &dyn Fs, spec: &Spec) -> Result<Measured, String> {
    let limit = Limit {
        duration: Duration::from_secs_f64(spec.seconds),
        ops_per_thread: cap(spec),
    };
    let cpu_before = cpu::self_ns();
    // A clock read every 8 operations: a cheap API stat is about 1 us, a clock read
    // 20-30 ns; the longest operations (fsync, whole-file reads) overshoot the deadline
    // by a few of themselves, and the run's time is what the threads measured.
    let (run, mut latencies) =
        threads::timed_sampled(spec.threads, limit, 8, |t| worker(fs, spec, t))?;
    let cpu_ns = cpu::self_ns() - cpu_before;
    latencies.sort_unstable();
    Ok(Measured {
        ops: run.ops,
        elapsed_ns: run.elapsed_ns,
        capped_threads: run.capped_threads,
        p50_ns: percentile(&latencies, 50.0),
        p99_ns: percentile(&latencies, 99.0),
        cpu_ns,
    })
}

#[cfg(test)]
mod tests {
    use super::super::case::parse_cases;
    use super::super::ops::PosixFs;
    use super::*;

    fn sizes() -> Sizes {
        Sizes {
            files_per_thread: 20,
            dir_entries: 10,
            file_bytes: 64 << 10,
            creates_max: 1000,
            filebench: Scale::quick(),
        }
    }

    /// Every case runs on a directory: setup, a capped run, and no failing call.
    #[test]
    fn every_case_runs_on_a_directory() {
        let items = [
            "metadata",
            "data",
            "randread-cold",
            "seqread-shared-cold",
            "create+fsync",
        ];
        let items: Vec<String> = items.iter().map(|s| s.to_string()).collect();
        for case in parse_cases(&items, false, &[4096, 16384]).unwrap() {
            let tmp = tempfile::tempdir().unwrap();
            let fs = PosixFs {
                root: tmp.path().to_path_buf(),
            };
            let spec = Spec {
                case: case.clone(),
                threads: 2,
                seconds: 0.05,
                sizes: sizes(),
            };
            setup(&fs, &spec).unwrap();
            let m = measure(&fs, &spec).unwrap_or_else(|e| panic!("{}: {e}", case.name()));
            assert!(m.ops > 0 && m.elapsed_ns > 0, "{}", case.name());
            assert!(m.p50_ns <= m.p99_ns && m.p50_ns.is_some());
            if matches!(case.kind, Kind::Unlink | Kind::Rmdir) {
                assert!(m.ops <= 40, "{}: capped at the files made", case.name());
            }
        }
    }
}
