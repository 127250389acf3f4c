//! Filebench-like personalities (fileserver, varmail, webserver, webproxy) with the
//! parameters of trio-arckfs.txt Table 4, run by `bench fs` over an [`Fs`].
//!
//! Table 4 gives file counts, mean file sizes, read and write IO sizes and read:write
//! ratios; it gives no directory width or preallocation, which are Filebench's defaults
//! for each personality (`fileserver.f`: width 20; `webserver.f`: 20; `webproxy.f` and
//! `varmail.f`: 1,000,000, i.e. one directory). The flows are Filebench's, one counted
//! operation per flowop (create, write, append, fsync, open, read whole file, close,
//! delete, stat), as Filebench counts them.
//!
//! Choices, stated where they differ from Filebench:
//! - Each thread has a private fileset, as trio-arckfs.txt §6.6 did to avoid
//!   Filebench's fileset lock; the scaled file count is split between the threads, so
//!   the data set does not grow with threads.
//! - File sizes are the mean of Table 4 for every file (Filebench draws them from a
//!   gamma distribution); appends are 1 to `write_io` bytes in 4 KiB steps.
//! - Table 4 prints 512 MB as webproxy's mean file size: 100K such files are 51 TB and
//!   the paper calls webproxy's reads small-file reads, so it is read as 512 KB.
//! - `--scale` multiplies the file counts (printed with the run); `--quick` also
//!   divides the file and IO sizes by 64 (never below 4 KiB).
//!
//! Invariants:
//! - The per-thread state knows which files exist and their sizes: every whole-file
//!   read checks it read exactly that many bytes.
//! - Creates and deletes alternate in every flow, so a fileset neither empties nor
//!   fills up.

use super::case::{Kind, BLOCK_BYTES};
use super::ops::{FileOps, Fs};
use super::workload::{fill, Worker};
use platform::units::human;
use platform::Rng;
use serde::{Deserialize, Serialize};

/// How far the personalities are scaled down from Table 4.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Scale {
    /// Multiplies the file counts.
    pub files: f64,
    /// Divides file and IO sizes (1: Table 4's).
    pub size_divisor: u64,
}

impl Scale {
    /// File counts at 1/100 of Table 4: the largest data set, webserver's, is 800 MB.
    pub const DEFAULT_FILES: f64 = 0.01;

    pub fn quick() -> Scale {
        Scale {
            files: 0.001,
            size_divisor: 64,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Create,
    WriteWhole,
    Append,
    Fsync,
    Close,
    Open,
    ReadWhole,
    Delete,
    Stat,
    /// Webserver: an append to the thread's log file, held open.
    AppendLog,
}

/// One personality's parameters.
#[derive(Debug, Clone, Copy)]
pub struct Personality {
    /// Table 4.
    pub files: u64,
    pub mean_file_bytes: u64,
    pub read_io_bytes: u64,
    pub write_io_bytes: u64,
    /// Filebench's defaults.
    pub dir_width: u64,
    pub prealloc_percent: u64,
    flow: &'static [Step],
}

use Step::*;

const FILESERVER: [Step; 11] = [
    Create, WriteWhole, Close, Open, Append, Close, Open, ReadWhole, Close, Delete, Stat,
];
const WEBSERVER: [Step; 31] = [
    Open, ReadWhole, Close, Open, ReadWhole, Close, Open, ReadWhole, Close, Open, ReadWhole, Close,
    Open, ReadWhole, Close, Open, ReadWhole, Close, Open, ReadWhole, Close, Open, ReadWhole, Close,
    Open, ReadWhole, Close, Open, ReadWhole, Close, AppendLog,
];
const WEBPROXY: [Step; 19] = [
    Delete, Create, Append, Close, Open, ReadWhole, Close, Open, ReadWhole, Close, Open, ReadWhole,
    Close, Open, ReadWhole, Close, Open, ReadWhole, Close,
];
const VARMAIL: [Step; 13] = [
    Delete, Create, Append, Fsync, Close, Open, ReadWhole, Append, Fsync, Close, Open, ReadWhole,
    Close,
];

const KB: u64 = 1 << 10;
const MB: u64 = 1 << 20;

pub fn personality(kind: Kind) -> Personality {
    let (files, mean_file_bytes, read_io_bytes, write_io_bytes, dir_width, prealloc, flow) =
        match kind {
            Kind::Fileserver => (10_000, 2 * MB, MB, 512 * KB, 20, 80, &FILESERVER[..]),
            Kind::Webserver => (20_000, 4 * MB, MB, 256 * KB, 20, 100, &WEBSERVER[..]),
            Kind::Webproxy => (100_000, 512 * KB, MB, 16 * KB, 1_000_000, 80, &WEBPROXY[..]),
            Kind::Varmail => (100_000, 16 * KB, MB, 16 * KB, 1_000_000, 80, &VARMAIL[..]),
            _ => unreachable!("a personality"),
        };
    Personality {
        files,
        mean_file_bytes,
        read_io_bytes,
        write_io_bytes,
        dir_width,
        prealloc_percent: prealloc,
        flow,
    }
}

/// The parameters after scaling, per thread.
#[derive(Debug, Clone, Copy)]
struct Scaled {
    files_per_thread: u64,
    file_bytes: u64,
    read_io: u64,
    write_io: u64,
    dir_width: u64,
    prealloc: u64,
}

fn at_least_a_block(bytes: u64, divisor: u64) -> u64 {
    (bytes / divisor).div_ceil(BLOCK_BYTES).max(1) * BLOCK_BYTES
}

fn scaled(kind: Kind, threads: usize, scale: &Scale) -> Scaled {
    let p = personality(kind);
    let total = ((p.files as f64 * scale.files).ceil() as u64).max(1);
    // At least a few files per thread, so that picks have a choice.
    let files_per_thread = total.div_ceil(threads as u64).max(4);
    Scaled {
        files_per_thread,
        file_bytes: at_least_a_block(p.mean_file_bytes, scale.size_divisor),
        read_io: at_least_a_block(p.read_io_bytes, scale.size_divisor),
        write_io: at_least_a_block(p.write_io_bytes, scale.size_divisor),
        dir_width: p.dir_width,
        prealloc: files_per_thread * p.prealloc_percent / 100,
    }
}

/// "varmail: 1000 files of 16.0 KiB (Table 4: 100000 x 0.01), ...", for the header.
pub fn describe(kind: Kind, threads: usize, scale: &Scale) -> String {
    let p = personality(kind);
    let s = scaled(kind, threads, scale);
    format!(
        "{}: {} files of {} (Table 4: {} x {}), {} per directory, {}% made before the run; \
         reads {}, writes up to {}; {} thread(s), a private fileset each",
        kind.name(),
        s.files_per_thread * threads as u64,
        human(s.file_bytes),
        p.files,
        scale.files,
        p.dir_width.min(s.files_per_thread),
        p.prealloc_percent,
        human(s.read_io),
        human(s.write_io),
        threads,
    )
}

/// Bytes the filesets of `threads` threads hold before the run.
pub fn data_bytes(kind: Kind, threads: usize, scale: &Scale) -> u64 {
    let s = scaled(kind, threads, scale);
    s.prealloc * threads as u64 * s.file_bytes
}

fn file_path(thread: usize, slot: u64, dir_width: u64) -> String {
    format!("fb{thread}/d{}/f{slot}", slot / dir_width)
}

/// Makes every thread's fileset: its directories and the preallocated files.
pub fn setup(fs: &dyn Fs, kind: Kind, threads: usize, scale: &Scale) -> Result<(), String> {
    let s = scaled(kind, threads, scale);
    for t in 0..threads {
        fs.mkdir(&format!("fb{t}"))?;
        for d in 0..s.files_per_thread.div_ceil(s.dir_width) {
            fs.mkdir(&format!("fb{t}/d{d}"))?;
        }
        for slot in 0..s.prealloc {
            let file = fs.create(&file_path(t, slot, s.dir_width))?;
            fill(file.as_ref(), 0, s.file_bytes)?;
        }
        if kind == Kind::Webserver {
            drop(fs.create(&format!("fb{t}/log"))?);
        }
    }
    Ok(())
}

/// One thread's fileset and where it is in its flow.
struct Flow<'a> {
    fs: &'a dyn Fs,
    thread: usize,
    s: Scaled,
    steps: &'static [Step],
    /// Size of each slot's file; `None`: no such file.
    sizes: Vec<Option<u64>>,
    /// The open file and its slot.
    open: Option<(Box<dyn FileOps>, usize)>,
    log: Option<(Box<dyn FileOps>, u64)>,
    rng: Rng,
    buf: Vec<u8>,
    /// The reads' buffer, made once (as Filebench's are): a fresh zeroed 1 MiB per
    /// whole-file read was 12% of an augefs varmail run.
    read_buf: Vec<u8>,
}

impl Flow<'_> {
    /// A random slot whose file exists (`present`) or not.
    fn pick(&mut self, present: bool) -> Result<usize, String> {
        let n = self.sizes.len();
        for _ in 0..64 {
            let slot = self.rng.below(n as u64) as usize;
            if self.sizes[slot].is_some() == present {
                return Ok(slot);
            }
        }
        let start = self.rng.below(n as u64) as usize;
        (0..n)
            .map(|i| (start + i) % n)
            .find(|&slot| self.sizes[slot].is_some() == present)
            .ok_or_else(|| format!("fileset of thread {} has no such file", self.thread))
    }

    fn path(&self, slot: usize) -> String {
        file_path(self.thread, slot as u64, self.s.dir_width)
    }

    fn opened(&self, step: Step) -> Result<(&dyn FileOps, usize), String> {
        self.open
            .as_ref()
            .map(|(f, slot)| (f.as_ref(), *slot))
            .ok_or_else(|| format!("{step:?} without an open file: a flow bug"))
    }

    fn append_bytes(&mut self) -> u64 {
        (self.rng.below(self.s.write_io / BLOCK_BYTES) + 1) * BLOCK_BYTES
    }

    fn step(&mut self, step: Step) -> Result<(), String> {
        match step {
            Create => {
                let slot = self.pick(false)?;
                let file = self.fs.create(&self.path(slot))?;
                self.sizes[slot] = Some(0);
                self.open = Some((file, slot));
            }
            Open => {
                let slot = self.pick(true)?;
                let file = self.fs.open(&self.path(slot), true)?;
                self.open = Some((file, slot));
            }
            Close => self.open = None,
            Delete => {
                let slot = self.pick(true)?;
                self.fs.unlink(&self.path(slot))?;
                self.sizes[slot] = None;
            }
            Stat => {
                let slot = self.pick(true)?;
                self.fs.stat(&self.path(slot))?;
            }
            WriteWhole => {
                let (file, slot) = self.opened(step)?;
                let mut done = 0;
                while done < self.s.file_bytes {
                    let n = self.s.write_io.min(self.s.file_bytes - done);
                    file.write_at(&self.buf[..n as usize], done)?;
                    done += n;
                }
                self.sizes[slot] = Some(done);
            }
            Append => {
                let n = self.append_bytes();
                let (file, slot) = self.opened(step)?;
                let size = self.sizes[slot].expect("an open file exists");
                file.write_at(&self.buf[..n as usize], size)?;
                self.sizes[slot] = Some(size + n);
            }
            Fsync => self.opened(step)?.0.fsync()?,
            ReadWhole => self.read_whole()?,
            AppendLog => {
                let n = self.append_bytes();
                let (log, size) = self.log.as_mut().expect("webserver has a log");
                log.write_at(&self.buf[..n as usize], *size)?;
                *size += n;
            }
        }
        Ok(())
    }

    fn read_whole(&mut self) -> Result<(), String> {
        let (file, slot) = self
            .open
            .as_ref()
            .map(|(f, slot)| (f.as_ref(), *slot))
            .ok_or("ReadWhole without an open file: a flow bug")?;
        let mut total = 0u64;
        loop {
            let n = file.read_at(&mut self.read_buf, total)?;
            if n == 0 {
                break;
            }
            total += n as u64;
        }
        let expected = self.sizes[slot].expect("an open file exists");
        if total != expected {
            let path = self.path(slot);
            return Err(format!("{path}: read {total} bytes of {expected}"));
        }
        Ok(())
    }
}

/// Thread `thread`'s worker: each call is the next flowop of the personality's flow.
pub fn worker<'a>(
    fs: &'a dyn Fs,
    kind: Kind,
    thread: usize,
    threads: usize,
    scale: &Scale,
) -> Result<Worker<'a>, String> {
    let s = scaled(kind, threads, scale);
    let mut sizes = vec![None; s.files_per_thread as usize];
    for size in sizes.iter_mut().take(s.prealloc as usize) {
        *size = Some(s.file_bytes);
    }
    let log = match kind {
        Kind::Webserver => Some((fs.open(&format!("fb{thread}/log"), true)?, 0)),
        _ => None,
    };
    let mut buf = vec![0u8; s.write_io as usize];
    Rng::from_seed(0x6669_6c65 ^ thread as u64).fill(&mut buf);
    let mut flow = Flow {
        fs,
        thread,
        s,
        steps: personality(kind).flow,
        sizes,
        open: None,
        log,
        rng: Rng::from_seed(0x666c_6f77 ^ (thread as u64) << 8),
        buf,
        read_buf: vec![0u8; s.read_io as usize],
    };
    Ok(Box::new(move |i: u64| {
        let step = flow.steps[(i % flow.steps.len() as u64) as usize];
        flow.step(step)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flows_alternate_creates_and_deletes() {
        for kind in [
            Kind::Fileserver,
            Kind::Webserver,
            Kind::Webproxy,
            Kind::Varmail,
        ] {
            let flow = personality(kind).flow;
            let creates = flow.iter().filter(|&&s| s == Create).count();
            let deletes = flow.iter().filter(|&&s| s == Delete).count();
            assert_eq!(creates, deletes, "{kind:?}");
            let opens = flow.iter().filter(|&&s| s == Open || s == Create).count();
            let closes = flow.iter().filter(|&&s| s == Close).count();
            assert_eq!(opens, closes, "{kind:?}: every open file is closed");
        }
    }

    #[test]
    fn scaling_keeps_the_data_set_and_states_it() {
        let default = Scale {
            files: Scale::DEFAULT_FILES,
            size_divisor: 1,
        };
        let one = scaled(Kind::Webserver, 1, &default);
        assert_eq!(one.files_per_thread, 200);
        assert_eq!(one.file_bytes, 4 * MB);
        let four = scaled(Kind::Webserver, 4, &default);
        assert_eq!(four.files_per_thread, 50);
        assert_eq!(data_bytes(Kind::Webserver, 4, &default), 800 * MB);
        let quick = scaled(Kind::Varmail, 2, &Scale::quick());
        assert_eq!((quick.files_per_thread, quick.file_bytes), (50, 4096));
        let text = describe(Kind::Varmail, 2, &Scale::quick());
        assert!(
            text.contains("100 files") && text.contains("100000 x 0.001"),
            "{text}"
        );
    }
}
