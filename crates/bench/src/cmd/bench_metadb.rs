//! `augefs bench metadb [--dir DIR] [--pmr-dir DIR] [--threads 1,2,4,8] [--seconds S]
//! [--ops N] [--keys N] [--gets N] [--runs N] [--modes pmr,ssd,fjall]
//! [--figures put,get,recovery] [--json] [--keep]`: MetaDB (docs/DESIGN.md §6) beside
//! fjall, an LSM tree with a journal, on the same disk.
//!
//! Figures, each measured `--runs` times:
//! - **put**: for each thread count, synchronous and buffered puts of unique keys
//!   (100-byte values) for `--seconds`, by MetaDB in pmr mode (WAL on an emulated PMR)
//!   and ssd mode (WAL in the image's WAL region) and by fjall; with the bytes written
//!   per put (device and PMR counters split by cause for MetaDB, `/proc/self/io` for
//!   fjall). The three stores take turns, the first of each run rotating, so drift of a
//!   noisy machine hits them alike.
//! - **get**: one thread loads `--keys` keys (buffered; MetaDB in ssd mode, as the WAL
//!   does not serve reads), noting the pace of the first and last tenth; flush and
//!   compaction; then timed random gets (p50, p99, throughput), rounds of MetaDB and
//!   fjall alternating after one warm-up round each. Then the aged-put figure: beside
//!   each full store a store of a tenth of the keys (MetaDB on a second, smaller image)
//!   was loaded and settled first; in each of `--runs` rounds every store, in rotating
//!   order, settles and takes a run of sync and a run of buffered puts from 4 threads on
//!   new keys, so small and large are measured minutes apart at most. Large over small,
//!   run by run, is the
//!   throughput kept as the store grows tenfold (the "under 10% loss"; the
//!   paper's Fig. 15(c) ages the store the same way). The load's own pace (first
//!   tenth against last) is shown too, but its first tenth is absorbed by memtables and
//!   level 0 while the last is paced by compaction, so it is no like-for-like measure.
//! - **recovery**: with background work off, one memtable's worth of keys flushed to
//!   tables and 90% of a memtable left in the WAL; a crash (drop without close); the
//!   time `MetaDb::open` takes. fjall closes (it cannot crash in-process; it does not
//!   flush memtables on close either) and its reopen is timed.
//!
//! Invariants:
//! - Every measurement starts from an empty store: the image is formatted again (it is
//!   written in full once first), fjall gets a fresh directory.
//! - Only one store is open during a put or recovery measurement.
//! - The bench files are removed at the end (also after an error) unless `--keep`; their
//!   names carry the process id, so invocations sharing `--dir` leave each other alone.
//! - Progress goes to stderr; the table or JSON alone to stdout.
//! - The PMR is emulated (a file, ideally on tmpfs, plus injected latency) and every
//!   output says so.

mod baseline;
mod figures;
mod keys;
mod output;
mod report;
mod subject;
mod workload;

use crate::image::DeviceFacts;
use crate::options::{check_image_size, check_seconds, check_threads, parse_count, Common};
use crate::pmr::{EmulatedPmr, PmrArgs};
use crate::scratch::Scratch;
use crate::threads::Limit;
use format::geometry::Geometry;
use metadb::MetaDbConfig;
use platform::units::{human, parse_size};
use platform::{Clock, SystemClock};
use pmr::PersistMode;
use report::{Report, System};
use std::path::PathBuf;
use std::sync::Arc;
use subject::{Augefs, Setup};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Directory for the image and fjall's files, on the disk under test (created if
    /// missing).
    #[arg(long, default_value = "./augefs-bench-metadb")]
    pub dir: PathBuf,
    /// The emulated PMR of pmr mode.
    #[command(flatten)]
    pub pmr: PmrArgs,
    /// Size of the image, e.g. 4G (10M keys take about 1.5 GiB of tables).
    #[arg(long, value_parser = parse_size, default_value = "4GiB")]
    pub image_size: u64,
    /// Writer thread counts of the put figure.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    pub threads: Vec<usize>,
    /// Length of one put run.
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// Puts per thread per run at most (a run ends at --seconds or here).
    #[arg(long)]
    pub ops: Option<u64>,
    /// Block cache of both stores, e.g. 1G (fjall also reads through the kernel's page
    /// cache; MetaDB reads with O_DIRECT, so this is all the caching it gets). Default:
    /// MetaDB's own for this machine, a sixteenth of memory (64 MiB to 2 GiB).
    #[arg(long, value_parser = parse_size)]
    pub cache: Option<u64>,
    /// Keys loaded for the get figure, e.g. 10M.
    #[arg(long, value_parser = parse_count, default_value = "10M")]
    pub keys: u64,
    /// Timed random gets per round.
    #[arg(long, value_parser = parse_count, default_value = "100K")]
    pub gets: u64,
    /// Which stores to measure (fjall is the baseline every ratio needs).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "pmr,ssd,fjall"
    )]
    pub modes: Vec<ModeArg>,
    /// Which figures to measure.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "put,get,recovery"
    )]
    pub figures: Vec<FigureSet>,
    #[command(flatten)]
    pub common: Common,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModeArg {
    Pmr,
    Ssd,
    Fjall,
}

impl ModeArg {
    fn system(self) -> System {
        match self {
            ModeArg::Pmr => System::Pmr,
            ModeArg::Ssd => System::Ssd,
            ModeArg::Fjall => System::Fjall,
        }
    }
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum FigureSet {
    Put,
    Get,
    Recovery,
}

/// MetaDB tables take about this many bytes per loaded key (24-byte key, 100-byte
/// value, sequence and block overheads), and compaction may hold two copies at once.
const TABLE_BYTES_PER_KEY_ESTIMATE: u64 = 140;

fn validate(args: &Args) -> Result<(), String> {
    check_image_size(args.image_size)?;
    let geometry = Geometry::compute(args.image_size, 1).map_err(|e| e.to_string())?;
    args.pmr.check_size()?;
    check_threads(&args.threads)?;
    check_seconds(args.seconds)?;
    if args.modes.is_empty() {
        return Err("--modes must name at least one of pmr, ssd, fjall".to_string());
    }
    let augefs_selected = args.modes.iter().any(|m| *m != ModeArg::Fjall);
    if args.figures.contains(&FigureSet::Recovery) && !augefs_selected {
        return Err(
            "the recovery figure of fjall copies the shape of a pmr or ssd run: add one to --modes"
                .to_string(),
        );
    }
    if args.ops == Some(0) || args.common.runs == 0 || args.gets == 0 {
        return Err("--ops, --runs and --gets must be at least 1".to_string());
    }
    if args.keys < workload::LOAD_PARTS || args.keys >= keys::AGED_FIRST_INDEX {
        return Err(format!(
            "--keys must be in {}..{}",
            workload::LOAD_PARTS,
            keys::AGED_FIRST_INDEX
        ));
    }
    let needed = args.keys * TABLE_BYTES_PER_KEY_ESTIMATE * 2;
    if args.figures.contains(&FigureSet::Get) && needed > geometry.segment_bytes() {
        return Err(format!(
            "--image-size {} is too small for --keys {}: tables need about {} while compacting",
            human(args.image_size),
            args.keys,
            human(needed)
        ));
    }
    Ok(())
}

impl Args {
    /// When one put run stops: `--seconds`, or `--ops` puts per thread.
    fn put_limit(&self) -> Limit {
        Limit {
            duration: std::time::Duration::from_secs_f64(self.seconds),
            ops_per_thread: self.ops,
        }
    }

    /// The block cache of both stores: `--cache`, or MetaDB's default.
    pub fn cache_bytes(&self) -> u64 {
        self.cache.unwrap_or_else(|| {
            metadb::MetaDbConfig::block_cache_for_memory(platform::memory::physical_bytes()) as u64
        })
    }

    /// MetaDB's configuration in this run: the defaults with the `--cache` block cache.
    fn metadb_config(&self) -> MetaDbConfig {
        MetaDbConfig {
            block_cache_bytes: usize::try_from(self.cache_bytes()).expect("cache size fits memory"),
            ..MetaDbConfig::default()
        }
    }
}

/// The files of one invocation.
#[derive(Debug)]
struct Paths {
    scratch: Scratch,
    image: PathBuf,
    /// pmr mode's region.
    pmr: EmulatedPmr,
    fjall: PathBuf,
    /// The aged-put figure's small stores (a tenth of the keys), open beside the large.
    small_image: PathBuf,
    small_fjall: PathBuf,
}

impl Paths {
    fn create(args: &Args, clock: Arc<dyn Clock>) -> Result<Paths, String> {
        let pmr = args.pmr.emulated("bench-metadb", clock)?;
        let scratch = Scratch::create(&args.dir)?.keeping(args.common.keep);
        Ok(Paths {
            image: scratch.named("metadb", ".img"),
            fjall: scratch.named("fjall", ""),
            small_image: scratch.named("metadb", "-small.img"),
            small_fjall: scratch.named("fjall", "-small"),
            pmr,
            scratch,
        })
    }

    fn remove(&self) {
        self.scratch.remove(
            &[&self.image, &self.small_image, self.pmr.path()],
            &[&self.fjall, &self.small_fjall],
        );
    }
}

/// Facts about the stores, noted when the first augefs store opens.
#[derive(Debug, Default)]
struct Environment {
    device: DeviceFacts,
    pmr_persist_mode: Option<PersistMode>,
    wal_region_bytes: Option<u64>,
    segment_count: Option<u32>,
}

impl Environment {
    fn note(&mut self, augefs: &Augefs) {
        self.device.note(&augefs.device);
        if let Some(p) = &augefs.pmr {
            self.pmr_persist_mode.get_or_insert(p.persist_mode());
        }
        self.wal_region_bytes
            .get_or_insert(augefs.geometry.wal.size_bytes());
        self.segment_count
            .get_or_insert(augefs.geometry.segment_count);
    }
}

pub fn run(args: Args) -> Result<(), String> {
    let (paths, report, env) = execute(&args)?;
    let json = output::report_json(&args, &paths, &env, &report);
    args.common.emit_value(&json, || {
        output::print_header(&args, &paths, &env);
        report.print_table(args.keys, &paths.pmr.label());
        for goal in output::goals(&report) {
            println!("goal: {}: {}", goal.text, goal.verdict());
        }
    })
}

/// Measures what `args` asks for and returns the JSON document `--json` prints (for
/// `bench report`).
pub fn measure_json(args: &Args) -> Result<serde_json::Value, String> {
    let (paths, report, env) = execute(args)?;
    Ok(output::report_json(args, &paths, &env, &report))
}

/// Measures, then removes the bench files (unless `--keep`).
fn execute(args: &Args) -> Result<(Paths, Report, Environment), String> {
    validate(args)?;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let paths = Paths::create(args, clock.clone())?;
    let measured = measure(args, &paths, clock);
    if args.common.keep {
        eprintln!(
            "augefs: kept {}, {} and {}",
            paths.image.display(),
            paths.pmr.path().display(),
            paths.fjall.display()
        );
    } else {
        paths.remove();
    }
    let (report, env) = measured?;
    Ok((paths, report, env))
}

fn measure(
    args: &Args,
    paths: &Paths,
    clock: Arc<dyn Clock>,
) -> Result<(Report, Environment), String> {
    let setup = Setup {
        image: paths.image.clone(),
        image_bytes: args.image_size,
        pmr: paths.pmr.clone(),
        backend: args.common.backend,
        clock,
    };
    setup.prepare_image()?;
    let mut report = Report::default();
    let mut env = Environment::default();
    if args.figures.contains(&FigureSet::Put) {
        figures::put_figures(args, &setup, paths, &mut report, &mut env)?;
    }
    if args.figures.contains(&FigureSet::Get) {
        figures::get_figures(args, &setup, paths, &mut report, &mut env)?;
    }
    if args.figures.contains(&FigureSet::Recovery) {
        figures::recovery_figures(args, &setup, paths, &mut report, &mut env)?;
    }
    Ok((report, env))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_parse_with_decimal_suffixes() {
        assert_eq!(parse_count("20000").unwrap(), 20_000);
        assert_eq!(parse_count("100K").unwrap(), 100_000);
        assert_eq!(parse_count("10M").unwrap(), 10_000_000);
        assert_eq!(parse_count("1g").unwrap(), 1_000_000_000);
        assert!(parse_count("ten").is_err());
        assert!(parse_count("99999999999999999G").is_err());
    }
}
