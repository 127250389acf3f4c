//! `augefs bench report [--dir DIR] [--out bench/results] [--quick] [--runs N]
//! [--seconds S] [--threads LIST] [--pmr-dir DIR] [--pmr-latency-ns N]`: the whole
//! comparison of issue 7 in one invocation, written as a report (docs/DESIGN.md §14.3).
//!
//! It runs, in this process, `bench fs` (metadata, data and Filebench-like workloads on
//! api, api-pmr, interposer, fuse and ext2/ext4/xfs/btrfs), a fio baseline, `amplify`
//! and `bench metadb` (`report/plan.rs` lists their arguments), by calling their library
//! functions, and writes `OUT/<UTC date-time>/`: `report.md` (the machine, the goals
//! judged on the numbers, a table per sub-run), each sub-run's JSON document,
//! `report.json` (machine, sub-runs, goals) and `plots/*.svg` (throughput against
//! threads, `crate::plot`).
//!
//! Invariants:
//! - Nothing in the report is typed in: every table and verdict is computed from the
//!   JSON documents of this invocation (`report/tables.rs`, `report/goals.rs`).
//! - A failing sub-run leaves its error in the report and the others go on; the command
//!   then exits with an error, after writing the report.
//! - The sub-runs clean up after themselves (images, loop devices, mounts, daemons, the
//!   emulated PMR): they are the same code as the subcommands.
//! - The PMR is emulated and the report says so, with its latency, wherever a PMR
//!   figure appears.

mod fio_baseline;
mod fs_results;
mod goals;
mod machine;
mod mount_goals;
mod plan;
mod tables;

use crate::cmd::{amplify, apps, bench_fs, bench_metadb};
use crate::goal::Goal;
use crate::options::parse_args;
use crate::pmr::PmrArgs;
use crate::scratch;
use fs_results::FsResults;
use machine::Machine;
use plan::{Kind, Settings, Step};
use platform::SystemClock;
use serde_json::{json, Value};
use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Directory for the images, on the disk under test (created if missing).
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
    /// The report goes into a new directory named by the UTC date and time in here.
    #[arg(long, default_value = "bench/results")]
    pub out: PathBuf,
    /// A run of about two minutes (tests): few workloads, one run of short seconds, one
    /// thread, no kernel file system but ext4; its numbers are indicative only.
    #[arg(long)]
    pub quick: bool,
    /// Runs of every measurement (default 3; 1 with --quick).
    #[arg(long)]
    pub runs: Option<u32>,
    /// Seconds per bench fs run and per fio job (default 1; 0.2 with --quick).
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Thread counts of bench fs (default 1, 2, 4, ... up to the CPU count, at most 8;
    /// 1 with --quick).
    #[arg(long, value_delimiter = ',')]
    pub threads: Vec<usize>,
    /// The emulated PMR of api-pmr and of bench metadb's pmr mode.
    #[command(flatten)]
    pub pmr: PmrArgs,
}

/// What a sub-run gave.
struct Outcome {
    step: Step,
    result: Result<Value, String>,
    seconds: f64,
}

/// "2025-01-31T12-34-56Z": the UTC time as a directory name (no colons).
fn stamp(unix_ns: u64) -> String {
    crate::units::utc(unix_ns).replace(':', "-")
}

fn run_step(step: &Step) -> Result<Value, String> {
    match step.kind {
        Kind::BenchFs => bench_fs::measure_json(&parse_args(&step.argv)?),
        Kind::Amplify => amplify::measure_json(&parse_args(&step.argv)?),
        Kind::BenchMetadb => bench_metadb::measure_json(&parse_args(&step.argv)?),
        Kind::Fio => fio_baseline::measure_json(&parse_args(&step.argv)?),
        Kind::Apps => apps::measure_json(&parse_args(&step.argv)?),
    }
}

/// How the PMR is emulated here, and whether it is: a region is made in `--pmr-dir` to
/// learn how it persists, then removed.
fn pmr_description(args: &PmrArgs) -> (String, Option<bool>) {
    let probe = match args.emulated("bench-report-probe", Arc::new(SystemClock::new())) {
        Ok(p) => p,
        Err(e) => return (format!("none usable: {e}"), None),
    };
    let mode = probe.create().map(|region| region.persist_mode());
    if let Err(e) = scratch::remove_file(probe.path()) {
        eprintln!("augefs bench report: {e}");
    }
    match mode {
        Ok(m) => (
            format!(
                "{}; used by api-pmr and by bench metadb's pmr mode",
                probe.describe(Some(m))
            ),
            Some(m.is_emulated()),
        ),
        Err(e) => (format!("cannot be emulated here: {e}"), None),
    }
}

pub fn run(args: Args) -> Result<(), String> {
    let runs = args.runs.unwrap_or(if args.quick { 1 } else { 3 });
    let seconds = args.seconds.unwrap_or(if args.quick { 0.2 } else { 1.0 });
    let threads = match (args.threads.is_empty(), args.quick) {
        (false, _) => args.threads.clone(),
        (true, true) => vec![1],
        (true, false) => {
            plan::default_threads(std::thread::available_parallelism().map_or(1, |n| n.get()))
        }
    };
    crate::options::check_threads(&threads)?;
    crate::options::check_seconds(seconds)?;
    if runs == 0 {
        return Err("--runs must be at least 1".to_string());
    }
    let now_ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let report_dir = args.out.join(stamp(now_ns));
    if report_dir.exists() {
        return Err(format!("{} exists already", report_dir.display()));
    }
    let plot_dir = report_dir.join("plots");
    std::fs::create_dir_all(&plot_dir).map_err(|e| format!("{}: {e}", plot_dir.display()))?;
    // Made now so that its file system and disk can be described; removed at the end
    // if this invocation made it and the sub-runs left it empty.
    let dir = scratch::Scratch::create(&args.dir)?;
    let machine = Machine::describe(&args.dir, pmr_description(&args.pmr));
    let settings = Settings {
        dir: &args.dir,
        plot_dir: &plot_dir,
        quick: args.quick,
        runs,
        seconds,
        threads: &threads,
        pmr_dir: &args.pmr.dir,
        pmr_latency_ns_per_line: args.pmr.latency_ns_per_line,
        fio: crate::fio::version().is_some(),
    };
    let started = Instant::now();
    let outcomes = run_steps(plan::steps(&settings), &report_dir)?;
    let elapsed_s = started.elapsed().as_secs_f64();
    dir.remove(&[], &[]);
    let pmr = args
        .pmr
        .emulated("bench-report", Arc::new(SystemClock::new()))
        .map(|p| p.label())
        .unwrap_or_else(|_| format!("emulated, {} ns/line", args.pmr.latency_ns_per_line));
    let goals = judge(&outcomes, &pmr);
    let text = markdown(&args, &machine, &outcomes, &goals, now_ns, elapsed_s);
    write(&report_dir.join("report.md"), &text)?;
    let summary = json!({
        "command": "bench report",
        "quick": args.quick,
        "started_utc": crate::units::utc(now_ns),
        "elapsed_s": elapsed_s,
        "machine": machine.json(),
        "steps": outcomes.iter().map(|o| json!({
            "name": o.step.name,
            "command": o.step.kind.command(),
            "args": o.step.argv,
            "seconds": o.seconds,
            "error": o.result.as_ref().err(),
        })).collect::<Vec<_>>(),
        "goals": goals.iter().map(Goal::json).collect::<Vec<_>>(),
    });
    let pretty = serde_json::to_string_pretty(&summary).expect("JSON of plain values");
    write(&report_dir.join("report.json"), &pretty)?;
    println!("{}", report_dir.join("report.md").display());
    let failed: Vec<String> = outcomes
        .iter()
        .filter_map(|o| {
            o.result
                .as_ref()
                .err()
                .map(|e| format!("{}: {e}", o.step.name))
        })
        .collect();
    match failed.is_empty() {
        true => Ok(()),
        false => Err(format!(
            "the report was written, but {} sub-run(s) failed: {}",
            failed.len(),
            failed.join("; ")
        )),
    }
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Runs every step in turn, saving each one's JSON document as it finishes.
fn run_steps(steps: Vec<Step>, report_dir: &Path) -> Result<Vec<Outcome>, String> {
    let total = steps.len();
    let mut outcomes = Vec::new();
    for (i, step) in steps.into_iter().enumerate() {
        eprintln!(
            "augefs bench report: [{}/{total}] {}: {} {}",
            i + 1,
            step.name,
            step.kind.command(),
            step.argv.join(" ")
        );
        let started = Instant::now();
        let result = run_step(&step);
        match &result {
            Ok(doc) => {
                let pretty = serde_json::to_string_pretty(doc).expect("JSON of plain values");
                write(&report_dir.join(format!("{}.json", step.name)), &pretty)?;
            }
            Err(e) => eprintln!("augefs bench report: {} failed: {e}", step.name),
        }
        outcomes.push(Outcome {
            step,
            result,
            seconds: started.elapsed().as_secs_f64(),
        });
    }
    Ok(outcomes)
}

fn judge(outcomes: &[Outcome], pmr: &str) -> Vec<Goal> {
    let of = |kind: Kind| {
        outcomes
            .iter()
            .filter(move |o| o.step.kind == kind)
            .filter_map(|o| o.result.as_ref().ok())
    };
    // The --procs step's cells have the same names as the threads' ones: kept apart.
    let procs = |o: &&Outcome| o.step.name == plan::PROCS_STEP;
    let fs: Vec<&Value> = outcomes
        .iter()
        .filter(|o| o.step.kind == Kind::BenchFs && !procs(o))
        .filter_map(|o| o.result.as_ref().ok())
        .collect();
    let inputs = goals::Inputs {
        fs: FsResults::new(fs),
        amplify: of(Kind::Amplify).next(),
        fio: of(Kind::Fio).next(),
        apps: of(Kind::Apps).next(),
        procs: outcomes
            .iter()
            .filter(procs)
            .find_map(|o| o.result.as_ref().ok()),
    };
    let mut all = goals::judge(&inputs, pmr);
    all.extend(mount_goals::judge(&inputs));
    all
}

fn markdown(
    args: &Args,
    machine: &Machine,
    outcomes: &[Outcome],
    goals: &[Goal],
    now_ns: u64,
    elapsed_s: f64,
) -> String {
    let mut out = format!(
        "# augefs benchmark report, {}\n\n",
        crate::units::utc(now_ns)
    );
    if args.quick {
        out.push_str(
            "**--quick run: tiny sizes, one short run per cell; the numbers are indicative \
             only.**\n\n",
        );
    }
    let _ = writeln!(
        out,
        "Made by `augefs bench report` in {:.1} minutes: every table and verdict below is \
         computed from the JSON documents beside this file, measured in that one \
         invocation. Repeat a part with the command shown above its table. Load average \
         at the start {}, at the end {} (on {} logical CPUs: above that, other work \
         shared the machine and the spreads show it).\n",
        elapsed_s / 60.0,
        machine
            .load_average
            .map_or("?".to_string(), |l| format!("{l:.2}")),
        machine::load_average().map_or("?".to_string(), |l| format!("{l:.2}")),
        machine.cpus,
    );
    out.push_str("## Machine\n\n");
    out.push_str(&machine.markdown());
    out.push_str("\n## Goals (issues 7, 30, 31, 32)\n\n");
    out.push_str(
        "augefs against the best of ext2/ext4/xfs/btrfs on loop devices backed by the same \
         disk, measured here. A goal is met only if every figure it names was measured and \
         passes; \"not measured\" means this run lacked a figure it needs.\n\n",
    );
    let rows: Vec<Vec<String>> = goals
        .iter()
        .map(|g| {
            let verdict = match g.met {
                Some(true) => "met",
                Some(false) => "**NOT met**",
                None => "not measured",
            };
            vec![g.text.clone(), verdict.to_string(), g.evidence.clone()]
        })
        .collect();
    out.push_str(&tables::table(
        &["goal", "verdict", "evidence"].map(String::from),
        &rows,
    ));
    for o in outcomes {
        let _ = write!(
            out,
            "\n## {}\n\n`{} {}` ({:.0} s",
            o.step.title,
            o.step.kind.command(),
            o.step.argv.join(" "),
            o.seconds
        );
        match &o.result {
            Ok(doc) => {
                let _ = writeln!(out, "; JSON: [{0}.json]({0}.json))\n", o.step.name);
                out.push_str(&match o.step.kind {
                    Kind::BenchFs => tables::bench_fs(doc),
                    Kind::Amplify => tables::amplify(doc),
                    Kind::BenchMetadb => tables::metadb(doc),
                    Kind::Fio => tables::fio(doc),
                    Kind::Apps => format!("```\n{}```\n", apps::table(doc)),
                });
            }
            Err(e) => {
                let _ = writeln!(out, ")\n\n**Failed:** {e}");
            }
        }
    }
    plots_section(&mut out, outcomes);
    out
}

/// Links to the SVGs the bench fs sub-runs wrote, a line per workload.
fn plots_section(out: &mut String, outcomes: &[Outcome]) {
    let mut names: Vec<String> = Vec::new();
    for o in outcomes.iter().filter(|o| o.step.kind == Kind::BenchFs) {
        if let Ok(doc) = &o.result {
            for (workload, _) in FsResults::new(vec![doc]).rows() {
                if !names.contains(&workload) {
                    names.push(workload);
                }
            }
        }
    }
    if names.is_empty() {
        return;
    }
    out.push_str("\n## Plots: throughput against threads\n\n");
    for name in names {
        let file = bench_fs::plot_file_name(&name);
        let _ = writeln!(out, "![{name}](plots/{file})\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_directories_are_named_by_utc_time() {
        assert_eq!(stamp(1_700_000_000 * 1_000_000_000), "2023-11-14T22-13-20Z");
    }
}
