//! The emulated PMR of the benchmarks (`bench metadb`'s pmr mode, `bench fs`'s
//! `api-pmr` target): a file, by default on tmpfs (/dev/shm), mapped by the PMR layer,
//! whose every persist also busy-waits a fixed time per 64-byte line — the emulation of
//! augefs.txt §VII (900 ns per line). docs/DESIGN.md §5, §14.2.
//!
//! Invariants:
//! - On tmpfs a persist costs the injected latency only (msync of a tmpfs page writes
//!   nothing), so the latency flag alone sets the PMR's speed.
//! - Every output that shows a figure measured on it says that the PMR is emulated
//!   (unless the region really is DAX memory) and gives the injected latency:
//!   [`EmulatedPmr::describe`], [`EmulatedPmr::label`] and [`EmulatedPmr::json`].
//! - The file's name carries the process id, so invocations sharing the directory never
//!   touch each other's region; the benchmark removes it at the end, and a signal that
//!   interrupts it removes it too (`Undo::File`: it is outside the scratch directory).

use crate::interrupt::{on_interrupt, Registered, Undo};
use format::pmr::PmrLayout;
use platform::units::{human, parse_size};
use platform::Clock;
use pmr::{PersistMode, Pmr, PmrOptions};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// augefs.txt §VII: the emulated PMR's latency per persisted 64-byte line.
pub const PAPER_LATENCY_NS_PER_LINE: u64 = 900;

/// The options of an emulated PMR (flattened into a benchmark's arguments).
#[derive(clap::Args, Debug, Clone)]
pub struct PmrArgs {
    /// Directory for the emulated PMR file. tmpfs makes a persist cost only the injected
    /// latency; on a disk file system every persist would be an msync to disk.
    #[arg(id = "pmr_dir", long = "pmr-dir", default_value = "/dev/shm")]
    pub dir: PathBuf,
    /// Size of the PMR, e.g. 64M.
    #[arg(id = "pmr_size", long = "pmr-size", value_parser = parse_size, default_value = "64MiB")]
    pub bytes: u64,
    /// Injected PMR latency per persisted 64-byte line (augefs.txt §VII: 900).
    #[arg(id = "pmr_latency_ns", long = "pmr-latency-ns", default_value_t = PAPER_LATENCY_NS_PER_LINE)]
    pub latency_ns_per_line: u64,
}

impl PmrArgs {
    /// Checks the size against the PMR format's rules.
    pub fn check_size(&self) -> Result<(), String> {
        PmrLayout::compute(self.bytes)
            .map(|_| ())
            .map_err(|e| format!("--pmr-size: {e}"))
    }

    /// The emulated PMR `<dir>/augefs-<stem>-<pid>.pmr`; fails if `--pmr-dir` is not a
    /// directory. Nothing is created yet.
    pub fn emulated(&self, stem: &str, clock: Arc<dyn Clock>) -> Result<EmulatedPmr, String> {
        if !self.dir.is_dir() {
            return Err(format!(
                "--pmr-dir {} is not a directory (a tmpfs such as /dev/shm emulates a PMR best)",
                self.dir.display()
            ));
        }
        let path = self
            .dir
            .join(format!("augefs-{stem}-{}.pmr", std::process::id()));
        Ok(EmulatedPmr {
            _on_interrupt: Arc::new(on_interrupt(Undo::File(path.clone()))),
            path,
            dir_fs: crate::scratch::fs_type(&self.dir),
            bytes: self.bytes,
            latency_ns_per_line: self.latency_ns_per_line,
            clock,
        })
    }
}

/// One benchmark's emulated PMR file and how it is opened.
#[derive(Debug, Clone)]
pub struct EmulatedPmr {
    pub path: PathBuf,
    /// File-system type of the directory (tmpfs expected).
    pub dir_fs: Option<String>,
    pub bytes: u64,
    pub latency_ns_per_line: u64,
    clock: Arc<dyn Clock>,
    /// Removes the file if a signal interrupts the process while a copy of this lives
    /// (it is outside the scratch directory, whose own undo does not reach it).
    _on_interrupt: Arc<Registered>,
}

impl EmulatedPmr {
    fn options(&self) -> PmrOptions {
        PmrOptions {
            latency_ns_per_line: self.latency_ns_per_line,
            clock: self.clock.clone(),
        }
    }

    fn error(&self, e: impl std::fmt::Display) -> String {
        format!("{}: {e}", self.path.display())
    }

    /// Creates the region afresh (zeros) and opens it.
    pub fn create(&self) -> Result<Arc<Pmr>, String> {
        let pmr = Pmr::create(&self.path, self.bytes, self.options()).map_err(|e| self.error(e))?;
        Ok(Arc::new(pmr))
    }

    /// Opens the region as a mount does: its header must name `fs_uuid`.
    pub fn open(&self, fs_uuid: [u8; 16]) -> Result<Arc<Pmr>, String> {
        let pmr = Pmr::open(&self.path, self.options()).map_err(|e| self.error(e))?;
        pmr::header::read_header_for(&pmr, fs_uuid).map_err(|e| self.error(e))?;
        Ok(Arc::new(pmr))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// "EMULATED PMR: 64 MiB file in /dev/shm (tmpfs), persist = msync (...) + 900 ns
    /// busy-wait per 64-byte line", for headers; `mode` is the region's once opened.
    pub fn describe(&self, mode: Option<PersistMode>) -> String {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        let (kind, persist) = match mode {
            Some(mode) if !mode.is_emulated() => ("real (DAX) PMR", mode.name()),
            Some(mode) => ("EMULATED PMR", mode.name()),
            None => ("EMULATED PMR", "(not opened yet)"),
        };
        format!(
            "{kind}: {} file in {} ({}), persist = {persist} + {} ns busy-wait per 64-byte line",
            human(self.bytes),
            dir.display(),
            self.dir_fs.as_deref().unwrap_or("?"),
            self.latency_ns_per_line,
        )
    }

    /// "emulated, 900 ns/line": a short label beside a PMR figure.
    pub fn label(&self) -> String {
        format!("emulated, {} ns/line", self.latency_ns_per_line)
    }

    /// The facts as JSON; `emulated` is false only for a region that opened as DAX.
    pub fn json(&self, mode: Option<PersistMode>) -> Value {
        json!({
            "emulated": mode.is_none_or(|m| m.is_emulated()),
            "file": self.path,
            "dir_fs": self.dir_fs,
            "bytes": self.bytes,
            "latency_ns_per_line": self.latency_ns_per_line,
            "persist_mode": mode.map(|m| m.name()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::parse_args;
    use platform::SystemClock;

    #[test]
    fn an_emulated_pmr_says_so_everywhere() {
        let dir = tempfile::tempdir().unwrap();
        let dir_arg = dir.path().to_str().unwrap();
        let args: PmrArgs = parse_args(&[
            "--pmr-dir",
            dir_arg,
            "--pmr-size",
            "8M",
            "--pmr-latency-ns",
            "5",
        ])
        .unwrap();
        args.check_size().unwrap();
        let emulated = args.emulated("test", Arc::new(SystemClock::new())).unwrap();
        assert!(emulated
            .path()
            .ends_with(format!("augefs-test-{}.pmr", std::process::id())));
        let pmr = emulated.create().unwrap();
        assert!(pmr.persist_mode().is_emulated());
        let text = emulated.describe(Some(pmr.persist_mode()));
        assert!(text.starts_with("EMULATED PMR: 8.0 MiB file"), "{text}");
        assert!(text.contains("+ 5 ns busy-wait per 64-byte line"), "{text}");
        assert_eq!(emulated.label(), "emulated, 5 ns/line");
        let json = emulated.json(Some(pmr.persist_mode()));
        assert_eq!(json["emulated"], true);
        assert_eq!(json["latency_ns_per_line"], 5);
        drop(pmr);
        let missing: PmrArgs = parse_args(&["--pmr-dir", "/nonexistent-augefs"]).unwrap();
        assert_eq!(missing.latency_ns_per_line, PAPER_LATENCY_NS_PER_LINE);
        assert!(missing
            .emulated("test", Arc::new(SystemClock::new()))
            .unwrap_err()
            .contains("--pmr-dir"));
        let tiny: PmrArgs = parse_args(&["--pmr-size", "4K"]).unwrap();
        assert!(tiny.check_size().unwrap_err().contains("--pmr-size"));
    }
}
