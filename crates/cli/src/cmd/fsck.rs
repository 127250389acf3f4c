//! `augefs fsck IMAGE [-n | -p | -y] [--verify-data] [--json] [--pmr FILE]`: a thin front
//! end over the `fsck` crate, with e2fsck's exit codes (0 clean, 1 errors corrected,
//! 4 errors left uncorrected, 8 operational error, 16 usage error).

use fsck::{Mode, Report};
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

/// Exit code for an operational error (e2fsck's FSCK_ERROR).
pub const EXIT_OPERATIONAL: u8 = 8;
/// Exit code for a usage error (e2fsck's FSCK_USAGE).
pub const EXIT_USAGE: u8 = 16;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Image file or block device.
    pub image: PathBuf,
    /// Check only: open the image read-only; nothing is written to it (the default
    /// without -p or -y is the same).
    #[arg(short = 'n', conflicts_with_all = ["preen", "yes"])]
    pub no: bool,
    /// Repair what loses nothing a reader could see (counts, link counts, stray records).
    #[arg(short = 'p', conflicts_with = "yes")]
    pub preen: bool,
    /// Repair everything fsck can (also drop dangling names and unreadable mappings,
    /// link disconnected inodes into /lost+found).
    #[arg(short = 'y')]
    pub yes: bool,
    /// Read every mapped block and check its checksum.
    #[arg(long)]
    pub verify_data: bool,
    /// Print a JSON report instead of text (no progress bar).
    #[arg(long)]
    pub json: bool,
    /// The PMR file the image was formatted with.
    #[arg(long)]
    pub pmr: Option<PathBuf>,
}

/// A counting progress bar, drawn only when stdout is a terminal.
struct Bar(ProgressBar);

impl engine::progress::Progress for Bar {
    fn step(&self, name: &str, total: u64) {
        self.0.set_message(name.to_string());
        self.0.set_length(total);
        self.0.set_position(0);
    }

    fn advance(&self, delta: u64) {
        self.0.inc(delta);
    }

    fn finish(&self) {
        self.0.finish_and_clear();
    }
}

pub fn run(args: Args) -> ExitCode {
    let mode = if args.yes {
        Mode::Repair
    } else if args.preen {
        Mode::Preen
    } else {
        Mode::Check
    };
    match check(&args, mode) {
        Ok(report) => {
            if args.json {
                match serde_json::to_string_pretty(&Json {
                    image: &args.image,
                    exit_code: report.exit_code(),
                    report: &report,
                }) {
                    Ok(s) => println!("{s}"),
                    Err(e) => return fail(&args, &e.to_string()),
                }
            } else {
                print_text(&args, &report);
            }
            ExitCode::from(report.exit_code() as u8)
        }
        Err(message) => fail(&args, &message),
    }
}

fn fail(args: &Args, message: &str) -> ExitCode {
    eprintln!("augefs fsck: {}: {message}", args.image.display());
    ExitCode::from(EXIT_OPERATIONAL)
}

#[derive(serde::Serialize)]
struct Json<'a> {
    image: &'a PathBuf,
    exit_code: i32,
    #[serde(flatten)]
    report: &'a Report,
}

fn check(args: &Args, mode: Mode) -> Result<Report, String> {
    if !args.image.exists() {
        return Err("no such file or device".into());
    }
    let device = fsck::open_image_waiting(
        &args.image,
        mode != Mode::Check,
        crate::ui::HOLDER_WAIT,
        &mut crate::ui::say_waiting(&args.image),
    )
    .map_err(|e| e.to_string())?;
    let pmr = match &args.pmr {
        Some(p) => {
            let region =
                pmr::Pmr::open(p, pmr::PmrOptions::default()).map_err(|e| e.to_string())?;
            Some(Arc::new(if mode == Mode::Check {
                // Check only: the PMR's WAL is recovered in a private copy.
                let mut image = vec![0u8; region.len() as usize];
                region.read(0, &mut image, platform::IoCause::Tool);
                pmr::Pmr::memory_from_image(&image, pmr::PmrOptions::default())
                    .map_err(|e| e.to_string())?
            } else {
                region
            }))
        }
        None => None,
    };
    let options = fsck::Options {
        mode,
        verify_data: args.verify_data,
        now_ns: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i64),
    };
    let bar = if !args.json && std::io::stdout().is_terminal() {
        let b = ProgressBar::new(0);
        b.set_style(
            ProgressStyle::with_template("{msg:32} [{bar:30}] {pos}/{len}")
                .expect("valid template")
                .progress_chars("=> "),
        );
        b
    } else {
        ProgressBar::hidden()
    };
    let report = fsck::check(device, pmr, &options, &Bar(bar));
    report.map_err(|e| e.to_string())
}

fn print_text(args: &Args, r: &Report) {
    let image = args.image.display();
    let what = match r.mode {
        Mode::Check => "check only, nothing is changed",
        Mode::Preen => "repairing what loses nothing (-p)",
        Mode::Repair => "repairing (-y)",
    };
    println!("augefs fsck {image} ({what})");
    for p in &r.problems {
        let state = if p.fixed { "FIXED" } else { "NOT FIXED" };
        let repair = match (&p.repair, p.fixed) {
            (Some(how), true) => format!(": {how}"),
            (Some(how), false) => format!(" (repair: {how})"),
            (None, _) => " (no repair known)".into(),
        };
        let kind = serde_json::to_value(p.kind).unwrap_or_default();
        let kind = kind.as_str().unwrap_or("unknown");
        let paths = if p.objects.paths.len() > 1 {
            p.objects.paths.clone()
        } else {
            p.objects.path.iter().cloned().collect()
        };
        let named = paths.iter().all(|path| p.message.contains(path.as_str()));
        let paths = if named {
            String::new()
        } else {
            format!(" [{}]", paths.join(", "))
        };
        println!("  [{state}] {kind}: {}{paths}{repair}", p.message);
    }
    let s = &r.stats;
    println!(
        "{image}: {} records, {} inodes ({} directories, {} files, {} symlinks, {} special), {} mapped blocks, {} domain segments, {} table segments{}",
        s.records,
        s.inodes,
        s.directories,
        s.files,
        s.symlinks,
        s.special,
        s.mappings,
        s.domain_segments,
        s.table_segments,
        if r.verify_data {
            format!(", {} blocks verified", s.blocks_verified)
        } else {
            String::new()
        }
    );
    // As e2fsck's last line: files, how many are not contiguous, blocks.
    let non_contiguous = if s.files_mapped == 0 {
        0.0
    } else {
        100.0 * s.files_fragmented as f64 / s.files_mapped as f64
    };
    println!(
        "{image}: {} files ({non_contiguous:.1}% non-contiguous, {:.2} runs per file with data), {}/{} blocks",
        s.files + s.directories + s.symlinks + s.special,
        if s.files_mapped == 0 {
            0.0
        } else {
            s.fragments as f64 / s.files_mapped as f64
        },
        s.mappings,
        s.blocks_total,
    );
    let fixed = r.problems.iter().filter(|p| p.fixed).count();
    match (r.problems.len(), r.mode) {
        (0, _) => println!("{image}: clean"),
        (n, Mode::Check) => println!(
            "{image}: {n} problems; run with -y to repair (or -p for the safe repairs only)"
        ),
        (n, _) => println!("{image}: {n} problems, {fixed} fixed, {} left", n - fixed),
    }
}
