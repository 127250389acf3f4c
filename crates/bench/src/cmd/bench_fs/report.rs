//! The results of `augefs bench fs`: every run's sample per (workload, threads, target)
//! cell, printed as a table of medians, as JSON, and as SVG plots of throughput against
//! threads.
//!
//! Invariants:
//! - Every requested cell is in the table and the JSON, measured or not: a skipped
//!   target keeps its rows (with the reason below the table), a failed run its error.
//! - Figures are medians over the runs; the spread is the largest distance of a run
//!   from the median, in percent of it. Latency percentiles are per run (nearest rank
//!   over the sampled operations), then the median over runs.
//! - The ratio compares medians within one cell against the baseline: `--baseline`, or
//!   else the fastest kernel file system measured in that cell, or else the first
//!   target measured; its name is printed beside the ratio.
//! - A ratio is withheld ("noisy") when the spread of the cell or of its baseline
//!   passes [`NOISY_SPREAD_PERCENT`]: the runs disagree more than most differences
//!   the table would show.

use super::case::Case;
use super::workload::Measured;
use crate::plot::{self, Chart, Series};
use crate::stats::{spread, Spread};
use crate::units::{bytes, duration};
use serde::Serialize;
use serde_json::{json, Value};
use std::path::Path;

/// What one run of one cell measured.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    /// The timed run; its CPU time includes a FUSE daemon's.
    #[serde(flatten)]
    pub run: Measured,
    /// Device bytes from the start of the run to the end of a sync after it.
    pub dev_read_bytes: Option<u64>,
    pub dev_write_bytes: Option<u64>,
    /// Bytes persisted to the (emulated) PMR over the same span, for a target with one;
    /// not part of `dev_write_bytes`.
    pub pmr_write_bytes: Option<u64>,
}

impl Sample {
    pub fn ops_per_sec(&self) -> f64 {
        self.run.ops as f64 * 1e9 / self.run.elapsed_ns.max(1) as f64
    }

    fn per_op(&self, v: u64) -> f64 {
        v as f64 / self.run.ops.max(1) as f64
    }
}

#[derive(Debug, Clone)]
pub struct Target {
    pub name: String,
    /// Why it has no figures, if it has none.
    pub note: Option<String>,
    /// The PMR under its figures, if it has one.
    pub pmr: Option<PmrNote>,
}

/// How a target's (emulated) PMR is labelled: the table's footer and the JSON.
#[derive(Debug, Clone)]
pub struct PmrNote {
    /// "emulated, 900 ns/line".
    pub label: String,
    /// `EmulatedPmr::json`: `emulated`, `latency_ns_per_line`, the file.
    pub json: Value,
}

/// The runs of one (workload, threads, target).
#[derive(Debug, Clone)]
pub struct Cell {
    pub case: Case,
    pub threads: usize,
    /// A target's name, as given with `--target`.
    pub target: String,
    /// One per successful run.
    pub samples: Vec<Sample>,
    /// One per failed run, naming the run.
    pub errors: Vec<String>,
}

#[derive(Debug, Default)]
pub struct Report {
    /// Lines above the table: what was run, on what, at which scale.
    pub header: Vec<String>,
    /// In the order given.
    pub targets: Vec<Target>,
    /// Every (workload, threads, target) asked for, measured or not.
    pub cells: Vec<Cell>,
    /// `--baseline`, if given.
    pub baseline: Option<String>,
}

/// Medians of a cell's runs.
#[derive(Debug, Clone, Copy)]
struct Summary {
    ops_per_sec: Spread,
    p50_ns: Option<f64>,
    p99_ns: Option<f64>,
    cpu_ns_per_op: Option<f64>,
    dev_write_per_op: Option<f64>,
    dev_read_per_op: Option<f64>,
    pmr_write_per_op: Option<f64>,
}

/// The median of `f` over `samples`, if every sample has it.
fn median(samples: &[Sample], f: impl Fn(&Sample) -> Option<f64>) -> Option<f64> {
    let values: Option<Vec<f64>> = samples.iter().map(f).collect();
    spread(&values?).map(|s| s.median)
}

fn summary(samples: &[Sample]) -> Option<Summary> {
    let rates: Vec<f64> = samples.iter().map(Sample::ops_per_sec).collect();
    Some(Summary {
        ops_per_sec: spread(&rates)?,
        p50_ns: median(samples, |s| s.run.p50_ns.map(|v| v as f64)),
        p99_ns: median(samples, |s| s.run.p99_ns.map(|v| v as f64)),
        cpu_ns_per_op: median(samples, |s| Some(s.per_op(s.run.cpu_ns))),
        dev_write_per_op: median(samples, |s| s.dev_write_bytes.map(|b| s.per_op(b))),
        dev_read_per_op: median(samples, |s| s.dev_read_bytes.map(|b| s.per_op(b))),
        pmr_write_per_op: median(samples, |s| s.pmr_write_bytes.map(|b| s.per_op(b))),
    })
}

/// The spread (of a cell or its baseline) past which a ratio means nothing.
pub const NOISY_SPREAD_PERCENT: f64 = 25.0;

/// Kernel file systems: candidates for the default baseline.
fn is_kernel(target: &str) -> bool {
    target == "dir" || target.starts_with("dir:") || crate::kernelfs::KERNEL_FS.contains(&target)
}

impl Report {
    fn cell(&self, case: &Case, threads: usize, target: &str) -> Option<&Cell> {
        self.cells
            .iter()
            .find(|c| c.case == *case && c.threads == threads && c.target == target)
    }

    /// Distinct cases and thread counts, in the order measured.
    fn cases(&self) -> Vec<&Case> {
        let mut cases: Vec<&Case> = Vec::new();
        for c in &self.cells {
            if !cases.contains(&&c.case) {
                cases.push(&c.case);
            }
        }
        cases
    }

    fn threads(&self) -> Vec<usize> {
        let mut threads: Vec<usize> = self.cells.iter().map(|c| c.threads).collect();
        threads.sort_unstable();
        threads.dedup();
        threads
    }

    /// The baseline of a (case, threads) row group and its median ops/s.
    fn baseline(&self, case: &Case, threads: usize) -> Option<(String, f64)> {
        let measured = |target: &str| {
            self.cell(case, threads, target)
                .and_then(|c| summary(&c.samples))
                .map(|s| (target.to_string(), s.ops_per_sec.median))
        };
        if let Some(name) = &self.baseline {
            return measured(name);
        }
        let best_kernel = self
            .targets
            .iter()
            .filter(|t| is_kernel(&t.name))
            .filter_map(|t| measured(&t.name))
            .max_by(|a, b| a.1.total_cmp(&b.1));
        best_kernel.or_else(|| self.targets.iter().find_map(|t| measured(&t.name)))
    }

    /// Whether `cell`'s ratio against the baseline `base` is noise: the spread of
    /// either passes [`NOISY_SPREAD_PERCENT`].
    fn noisy(&self, cell: &Cell, base: &str) -> bool {
        let off = |c: Option<&Cell>| {
            c.and_then(|c| summary(&c.samples))
                .map_or(0.0, |s| s.ops_per_sec.off_percent())
        };
        let base_cell = self.cell(&cell.case, cell.threads, base);
        off(Some(cell)).max(off(base_cell)) > NOISY_SPREAD_PERCENT
    }

    pub fn json(&self) -> Value {
        let targets: Vec<Value> = self
            .targets
            .iter()
            .map(|t| {
                json!({
                    "name": t.name,
                    "measured": t.note.is_none(),
                    "note": t.note,
                    "pmr": t.pmr.as_ref().map(|p| &p.json),
                })
            })
            .collect();
        let results: Vec<Value> = self
            .cells
            .iter()
            .map(|c| {
                let s = summary(&c.samples);
                let base = self.baseline(&c.case, c.threads);
                let noisy = base.as_ref().is_some_and(|b| self.noisy(c, &b.0));
                let ratio = s
                    .zip(base.as_ref())
                    .filter(|_| !noisy)
                    .map(|(s, b)| s.ops_per_sec.median / b.1);
                json!({
                    "workload": c.case.name(),
                    "case": c.case,
                    "threads": c.threads,
                    "target": c.target,
                    "runs": c.samples,
                    "errors": c.errors,
                    "median": s.map(|s| json!({
                        "ops_per_sec": s.ops_per_sec.median,
                        "ops_per_sec_min": s.ops_per_sec.min,
                        "ops_per_sec_max": s.ops_per_sec.max,
                        "p50_ns": s.p50_ns,
                        "p99_ns": s.p99_ns,
                        "cpu_ns_per_op": s.cpu_ns_per_op,
                        "dev_write_bytes_per_op": s.dev_write_per_op,
                        "dev_read_bytes_per_op": s.dev_read_per_op,
                        "pmr_write_bytes_per_op": s.pmr_write_per_op,
                    })),
                    "baseline": base.map(|b| b.0),
                    "ratio": ratio,
                    "noisy": noisy,
                })
            })
            .collect();
        json!({
            "command": "bench fs",
            "header": self.header,
            "targets": targets,
            "results": results,
        })
    }

    pub fn print_table(&self) {
        for line in &self.header {
            println!("{line}");
        }
        println!();
        let with_pmr = self.targets.iter().any(|t| t.pmr.is_some());
        let mut widths = vec![22, 3, 12, 9, 6, 8, 8, 8, 8, 8, 14];
        let mut head = vec![
            "workload",
            "thr",
            "target",
            "ops/s",
            "+-",
            "p50",
            "p99",
            "devW/op",
            "devR/op",
            "CPU/op",
            "vs baseline",
        ];
        if with_pmr {
            widths.insert(PMR_COLUMN, 8);
            head.insert(PMR_COLUMN, "pmrW/op");
        }
        let head: Vec<String> = head.into_iter().map(String::from).collect();
        println!("{}", row(&head, &widths));
        for case in self.cases() {
            for threads in self.threads() {
                let base = self.baseline(case, threads);
                for target in &self.targets {
                    let Some(cell) = self.cell(case, threads, &target.name) else {
                        continue;
                    };
                    let fields = self.fields(cell, base.as_ref(), with_pmr);
                    println!("{}", row(&fields, &widths));
                }
            }
        }
        let notes: Vec<String> = self
            .targets
            .iter()
            .filter_map(|t| t.note.as_ref().map(|n| format!("  {}: {n}", t.name)))
            .chain(self.cells.iter().flat_map(|c| {
                c.errors
                    .iter()
                    .map(move |e| format!("  {} {} t={}: {e}", c.target, c.case.name(), c.threads))
            }))
            .collect();
        let noisy = self.cells.iter().any(|c| {
            self.baseline(&c.case, c.threads)
                .is_some_and(|b| self.noisy(c, &b.0))
        });
        if noisy {
            println!(
                "\nnoisy: the runs of the cell or of its baseline spread more than {NOISY_SPREAD_PERCENT}% \
                 (+- column), so the ratio is withheld: rerun with more --runs and --seconds, \
                 on an idle machine, before comparing."
            );
        }
        if !notes.is_empty() {
            println!("\nnotes:");
            for n in notes {
                println!("{n}");
            }
        }
        println!(
            "\nops/s: median of the runs, +- the largest distance of a run from it; p50/p99: \
             latency of sampled operations; devW/devR: device bytes per operation from the \
             start of the run to the end of a sync after it; CPU: process (and FUSE daemon) \
             time per operation, kernel threads not counted; '-': not measurable there."
        );
        for t in &self.targets {
            if let Some(p) = &t.pmr {
                println!(
                    "{}: MetaDB's WAL on a PMR ({}); pmrW/op: bytes persisted to it \
                     per operation, not part of devW/op.",
                    t.name, p.label
                );
            }
        }
    }

    fn fields(&self, cell: &Cell, base: Option<&(String, f64)>, with_pmr: bool) -> Vec<String> {
        let dash = || "-".to_string();
        let mut fields = vec![
            cell.case.name(),
            cell.threads.to_string(),
            cell.target.clone(),
        ];
        let Some(s) = summary(&cell.samples) else {
            let why = if cell.errors.is_empty() {
                "skipped"
            } else {
                "failed"
            };
            fields.push(why.to_string());
            return fields;
        };
        let m = s.ops_per_sec.median;
        fields.push(plot::short_number(m));
        fields.push(format!("{:.0}%", s.ops_per_sec.off_percent()));
        fields.push(s.p50_ns.map_or_else(dash, duration));
        fields.push(s.p99_ns.map_or_else(dash, duration));
        fields.push(s.dev_write_per_op.map_or_else(dash, bytes));
        fields.push(s.dev_read_per_op.map_or_else(dash, bytes));
        if with_pmr {
            fields.push(s.pmr_write_per_op.map_or_else(dash, bytes));
        }
        fields.push(s.cpu_ns_per_op.map_or_else(dash, duration));
        fields.push(match base {
            Some((name, _)) if self.noisy(cell, name) => format!("noisy {name}"),
            Some((name, b)) => format!("{:.2}x {name}", m / b),
            None => dash(),
        });
        fields
    }

    /// One SVG per case under `dir`: median ops/s against threads, a line per target.
    pub fn plots(&self, dir: &Path) -> Result<Vec<std::path::PathBuf>, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut written = Vec::new();
        for case in self.cases() {
            let series: Vec<Series> = self
                .targets
                .iter()
                .filter_map(|t| {
                    let points: Vec<(f64, f64)> = self
                        .cells
                        .iter()
                        .filter(|c| c.case == *case && c.target == t.name)
                        .filter_map(|c| {
                            summary(&c.samples).map(|s| (c.threads as f64, s.ops_per_sec.median))
                        })
                        .collect();
                    (!points.is_empty()).then(|| Series {
                        name: t.name.clone(),
                        points,
                    })
                })
                .collect();
            let chart = Chart {
                title: format!("bench fs: {}", case.name()),
                x_label: "threads".to_string(),
                y_label: "operations per second (median)".to_string(),
                series,
            };
            let path = dir.join(plot_file_name(&case.name()));
            std::fs::write(&path, plot::svg(&chart))
                .map_err(|e| format!("{}: {e}", path.display()))?;
            written.push(path);
        }
        Ok(written)
    }
}

/// The file name of a workload's plot: `bench-fs-append_4K.svg` for `append/4K`.
pub fn plot_file_name(workload: &str) -> String {
    let name: String = workload
        .chars()
        .map(|c| match c.is_ascii_alphanumeric() || c == '-' {
            true => c,
            false => '_',
        })
        .collect();
    format!("bench-fs-{name}.svg")
}

/// Where the pmrW/op column goes when a target has a PMR: after devR/op.
const PMR_COLUMN: usize = 9;

fn row(fields: &[String], widths: &[usize]) -> String {
    let mut line = String::new();
    for (i, f) in fields.iter().enumerate() {
        let w = widths.get(i).copied().unwrap_or(8);
        if i < 3 {
            line.push_str(&format!("{f:<w$} "));
        } else {
            line.push_str(&format!("{f:>w$} "));
        }
    }
    line.trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::super::case::parse_cases;
    use super::*;

    fn sample(ops: u64) -> Sample {
        Sample {
            run: Measured {
                ops,
                elapsed_ns: 1_000_000_000,
                capped_threads: 0,
                p50_ns: Some(1000),
                p99_ns: Some(5000),
                cpu_ns: ops * 2000,
            },
            dev_read_bytes: None,
            dev_write_bytes: Some(ops * 4096),
            pmr_write_bytes: None,
        }
    }

    #[test]
    fn the_default_baseline_is_the_fastest_kernel_fs() {
        let case = parse_cases(&["create".to_string()], false, &[4096]).unwrap()[0].clone();
        let cell = |target: &str, ops| Cell {
            case: case.clone(),
            threads: 1,
            target: target.to_string(),
            samples: vec![sample(ops)],
            errors: vec![],
        };
        let target = |name: &str| Target {
            name: name.to_string(),
            note: None,
            pmr: None,
        };
        let mut report = Report {
            targets: vec![target("api"), target("ext4"), target("xfs")],
            cells: vec![cell("api", 900), cell("ext4", 300), cell("xfs", 450)],
            ..Report::default()
        };
        assert_eq!(report.baseline(&case, 1), Some(("xfs".to_string(), 450.0)));
        let doc = report.json();
        let api = &doc["results"][0];
        assert_eq!(api["ratio"], 2.0);
        assert_eq!(api["median"]["dev_write_bytes_per_op"], 4096.0);
        assert_eq!(api["median"]["cpu_ns_per_op"], 2000.0);
        report.baseline = Some("ext4".to_string());
        assert_eq!(report.json()["results"][0]["ratio"], 3.0);
        // A baseline whose runs spread past 25%: the ratio is withheld.
        report.cells[1].samples = vec![sample(200), sample(300), sample(400)];
        let doc = report.json();
        assert_eq!(doc["results"][0]["ratio"], Value::Null, "{doc}");
        assert_eq!(doc["results"][0]["noisy"], true);
        report.cells[1].samples = vec![sample(290), sample(300), sample(310)];
        assert_eq!(report.json()["results"][0]["ratio"], 3.0);
        assert_eq!(report.json()["results"][0]["noisy"], false);
        report.cells.truncate(1);
        report.baseline = None;
        assert_eq!(
            report.baseline(&case, 1).unwrap().0,
            "api",
            "first target measured"
        );
    }
}
