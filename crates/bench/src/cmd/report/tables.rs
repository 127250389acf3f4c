//! The report's Markdown tables, one section per sub-run, made from the JSON documents
//! the sub-runs return (the same documents are saved beside the report).
//!
//! Invariants:
//! - Every figure is a median over the runs; throughput cells carry the spread (the
//!   largest distance of a run from the median, in percent) and the ratio to the best
//!   kernel file system of that row (ext2/ext4/xfs/btrfs), or "-" where none was
//!   measured. bench metadb has no kernel file system: its ratios are to fjall.
//! - A target that was skipped keeps its column ("skipped"), with its note below.
//! - A figure measured on the emulated PMR is labelled so, with its latency.

use super::fs_results::{is_kernel, FsResults, Median};
use crate::plot::short_number;
use crate::units::{bytes, duration};
use serde_json::Value;
use std::fmt::Write;

/// A Markdown table.
pub fn table(head: &[String], rows: &[Vec<String>]) -> String {
    let line = |cells: &[String]| format!("| {} |\n", cells.join(" | "));
    let mut out = line(head);
    out.push_str(&line(&vec!["---".to_string(); head.len()]));
    for row in rows {
        out.push_str(&line(row));
    }
    out
}

fn ratio(value: f64, base: f64) -> String {
    format!("{:.2}x", value / base.max(f64::MIN_POSITIVE))
}

/// A pivot of a bench fs document: a row per (workload, threads), a column per target.
fn fs_pivot(r: &FsResults, cell: impl Fn(Median, Option<f64>) -> String, best: bool) -> String {
    let targets = r.targets();
    let mut head = vec!["workload".to_string(), "threads".to_string()];
    head.extend(
        targets
            .iter()
            .map(|t| t["name"].as_str().unwrap_or("?").to_string()),
    );
    if best {
        head.push("best kernel fs".to_string());
    }
    let rows: Vec<Vec<String>> = r
        .rows()
        .into_iter()
        .map(|(workload, threads)| {
            let base = r.best_kernel(&workload, threads);
            let mut row = vec![workload.clone(), threads.to_string()];
            for t in &targets {
                let name = t["name"].as_str().unwrap_or("?");
                row.push(match r.median(&workload, threads, name) {
                    Some(m) => cell(m, base.as_ref().map(|b| b.1)),
                    None if t["measured"] == false => "skipped".to_string(),
                    None => "failed".to_string(),
                });
            }
            if best {
                row.push(base.map_or("-".to_string(), |b| {
                    format!("{} {}", b.0, short_number(b.1))
                }));
            }
            row
        })
        .collect();
    table(&head, &rows)
}

/// The notes of a bench fs document: the PMR's label, skipped targets, failed runs.
fn fs_notes(r: &FsResults, out: &mut String) {
    for t in r.targets() {
        let name = t["name"].as_str().unwrap_or("?");
        if let Some(pmr) = t.get("pmr").filter(|p| !p.is_null()) {
            let kind = if pmr["emulated"] == false {
                "a real"
            } else {
                "an EMULATED"
            };
            let _ = writeln!(
                out,
                "- {name}: MetaDB's WAL on {kind} PMR, {} ns injected per persisted 64-byte \
                 line ({}).",
                pmr["latency_ns_per_line"],
                pmr["persist_mode"].as_str().unwrap_or("?")
            );
        }
        if let Some(note) = t["note"].as_str() {
            let _ = writeln!(out, "- {name}: {note}");
        }
    }
    for e in r.errors() {
        let _ = writeln!(out, "- failed: {e}");
    }
}

/// A bench fs sub-run: throughput, p99 latency and device bytes per operation.
pub fn bench_fs(doc: &Value) -> String {
    let r = FsResults::new(vec![doc]);
    let mut out = String::new();
    for line in doc["header"].as_array().into_iter().flatten() {
        let _ = writeln!(out, "> {}  ", line.as_str().unwrap_or_default().trim());
    }
    out.push_str(
        "\nThroughput, operations per second: median ± largest distance of a run from it \
         (ratio to the best kernel file system of the row).\n\n",
    );
    out.push_str(&fs_pivot(
        &r,
        |m, base| {
            let ops = m.ops();
            let versus = base.map_or(String::new(), |b| format!(" ({})", ratio(ops, b)));
            format!("{} ±{:.0}%{versus}", short_number(ops), m.spread_percent())
        },
        true,
    ));
    out.push_str("\np99 latency (median over runs):\n\n");
    out.push_str(&fs_pivot(
        &r,
        |m, _| m.get("p99_ns").map_or("-".to_string(), duration),
        false,
    ));
    out.push_str(
        "\nDevice bytes written per operation, from the run's start to the end of a sync \
         after it (\"+ N pmr\": bytes persisted to the emulated PMR, counted apart; \"-\": \
         not countable there):\n\n",
    );
    out.push_str(&fs_pivot(
        &r,
        |m, _| {
            let dev = m
                .get("dev_write_bytes_per_op")
                .map_or("-".to_string(), bytes);
            match m.get("pmr_write_bytes_per_op") {
                Some(p) => format!("{dev} + {} pmr", bytes(p)),
                None => dev,
            }
        },
        false,
    ));
    let mut notes = String::new();
    fs_notes(&r, &mut notes);
    if !notes.is_empty() {
        out.push_str("\nNotes:\n\n");
        out.push_str(&notes);
    }
    out
}

/// The rows of the amplify table: (JSON key, label).
const AMPLIFY_ROWS: [(&str, &str); 4] = [
    ("write_fsync", "written at fsync"),
    ("write_total", "written in all"),
    ("read", "read"),
    ("space", "space, live"),
];

/// The spread of the runs' total bytes written per operation, in percent of their
/// median.
fn amplify_total_spread(result: &Value) -> Option<f64> {
    let totals: Option<Vec<f64>> = result["runs"]
        .as_array()?
        .iter()
        .map(|run| {
            Some(
                run["write_fsync_bytes_per_op"].as_f64()?
                    + run["write_later_bytes_per_op"].as_f64()?,
            )
        })
        .collect();
    let s = crate::stats::spread(&totals?)?;
    Some(100.0 * (s.max - s.median).max(s.median - s.min) / s.median.max(f64::MIN_POSITIVE))
}

/// The amplify sub-run: per workload and measure, each file system's median, the best
/// (lowest) kernel file system and augefs's ratio to it.
pub fn amplify(doc: &Value) -> String {
    let results: Vec<&Value> = doc["results"].as_array().into_iter().flatten().collect();
    let systems: Vec<String> = doc["file_systems"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f["name"].as_str().map(String::from))
        .collect();
    let mut workloads: Vec<&str> = Vec::new();
    for r in &results {
        let w = r["workload"].as_str().unwrap_or("?");
        if !workloads.contains(&w) {
            workloads.push(w);
        }
    }
    let find = |w: &str, fs: &str| {
        results
            .iter()
            .find(|r| r["workload"] == w && r["fs"] == fs)
            .copied()
    };
    let mut head = vec!["workload".to_string(), "measure".to_string()];
    head.extend(systems.iter().cloned());
    head.extend(["best kernel fs".to_string(), "augefs / best".to_string()]);
    let mut rows = Vec::new();
    for w in &workloads {
        let unit = find(w, &systems[0]).map_or("", |r| {
            if r["unit"] == "amplification" {
                "x"
            } else {
                "KB/op"
            }
        });
        for (key, label) in AMPLIFY_ROWS {
            let value = |fs: &str| find(w, fs).and_then(|r| r["median"][key].as_f64());
            if systems.iter().all(|fs| value(fs).is_none()) {
                continue;
            }
            let mut row = vec![w.to_string(), format!("{label} ({unit})")];
            for fs in &systems {
                let spread = (key == "write_total")
                    .then(|| find(w, fs).and_then(amplify_total_spread))
                    .flatten();
                row.push(match (value(fs), spread) {
                    (Some(v), Some(s)) => format!("{v:.2} ±{s:.0}%"),
                    (Some(v), None) => format!("{v:.2}"),
                    (None, _) => "-".to_string(),
                });
            }
            let best = systems
                .iter()
                .filter(|fs| is_kernel(fs))
                .filter_map(|fs| value(fs).map(|v| (fs, v)))
                .min_by(|a, b| a.1.total_cmp(&b.1));
            row.push(best.map_or("-".to_string(), |(fs, v)| format!("{fs} {v:.2}")));
            row.push(match (value("augefs"), best) {
                (Some(a), Some((_, b))) if b > 0.0 => ratio(a, b),
                (Some(0.0), Some(_)) => "equal (0)".to_string(),
                _ => "-".to_string(),
            });
            rows.push(row);
        }
    }
    let mut out = String::new();
    for line in doc["header"].as_array().into_iter().flatten() {
        let _ = writeln!(out, "> {}  ", line.as_str().unwrap_or_default().trim());
    }
    out.push_str(
        "\nMedians over the runs (written in all: ± the largest distance of a run from the \
         median). Data workloads in bytes per 4 KiB of user data (x), namespace workloads \
         in KB per operation; lower is better.\n\n",
    );
    if systems.is_empty() {
        out.push_str("(no file system measured)\n");
    } else {
        out.push_str(&table(&head, &rows));
    }
    for f in doc["file_systems"].as_array().into_iter().flatten() {
        if let Some(note) = f["note"].as_str() {
            let _ = writeln!(out, "\n- {}: {note}", f["name"].as_str().unwrap_or("?"));
        }
    }
    out
}

/// The bench metadb sub-run: per figure and threads, each mode's median ± spread and
/// its ratio to fjall; then MetaDB's own goals as that command judged them.
pub fn metadb(doc: &Value) -> String {
    let rows_json: Vec<&Value> = doc["rows"].as_array().into_iter().flatten().collect();
    let latency = &doc["config"]["pmr_latency_ns_per_line"];
    let modes = ["pmr", "ssd", "fjall"];
    let mut keys: Vec<(String, u64)> = Vec::new();
    for r in &rows_json {
        let key = (
            r["label"].as_str().unwrap_or("?").to_string(),
            r["threads"].as_u64().unwrap_or(0),
        );
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    let mut head = vec!["figure".to_string(), "threads".to_string()];
    head.push(format!("pmr (emulated, {latency} ns/line)"));
    head.extend(["ssd".to_string(), "fjall".to_string()]);
    let rows: Vec<Vec<String>> = keys
        .iter()
        .map(|(label, threads)| {
            let mut row = vec![label.clone(), threads.to_string()];
            for mode in modes {
                let found = rows_json.iter().find(|r| {
                    r["label"] == label.as_str() && r["threads"] == *threads && r["mode"] == mode
                });
                row.push(
                    match found.and_then(|r| r["median"].as_f64().map(|m| (r, m))) {
                        Some((r, m)) => {
                            let min = r["min"].as_f64().unwrap_or(m);
                            let max = r["max"].as_f64().unwrap_or(m);
                            let off = 100.0 * (max - m).max(m - min) / m.max(f64::MIN_POSITIVE);
                            let versus = r["ratio_to_fjall"]
                                .as_f64()
                                .filter(|_| mode != "fjall")
                                .map_or(String::new(), |x| format!(" ({x:.2}x)"));
                            format!("{} ±{off:.0}%{versus}", short_number(m))
                        }
                        None => "-".to_string(),
                    },
                );
            }
            row
        })
        .collect();
    let mut out = format!(
        "MetaDB in pmr mode (WAL on an EMULATED PMR, {latency} ns per persisted 64-byte \
         line) and ssd mode beside fjall; medians ± the largest distance of a run from the \
         median (ratio to fjall; us and ms rows: lower is better).\n\n"
    );
    out.push_str(&table(&head, &rows));
    let goals: Vec<&Value> = doc["goals"].as_array().into_iter().flatten().collect();
    if !goals.is_empty() {
        out.push_str("\nMetaDB's own goals, as `bench metadb` judges them:\n\n");
        for g in goals {
            let verdict = match g["met"].as_bool() {
                Some(true) => "met",
                Some(false) => "NOT met",
                None => "not measured",
            };
            let _ = writeln!(
                out,
                "- {}: **{verdict}** ({})",
                g["goal"].as_str().unwrap_or("?"),
                g["evidence"].as_str().unwrap_or("")
            );
        }
    }
    out
}

/// The fio baseline: IOPS per job.
pub fn fio(doc: &Value) -> String {
    let head = ["job", "IOPS (median ± spread)", "runs", "fio arguments"].map(String::from);
    let rows: Vec<Vec<String>> = doc["jobs"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(name, job)| {
            let runs: Vec<f64> = job["iops_runs"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_f64)
                .collect();
            let figure = crate::stats::spread(&runs).map_or("-".to_string(), |s| {
                let off = 100.0 * (s.max - s.median).max(s.median - s.min) / s.median.max(1.0);
                format!("{} ±{off:.0}%", short_number(s.median))
            });
            let args: Vec<&str> = job["fio_args"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .filter(|a| !a.starts_with("--filename") && !a.starts_with("--output"))
                .collect();
            vec![
                name.clone(),
                figure,
                runs.len().to_string(),
                format!("`{}`", args.join(" ")),
            ]
        })
        .collect();
    format!(
        "{} on a {} image in {}, one request at a time.\n\n{}",
        doc["fio_version"].as_str().unwrap_or("fio"),
        platform::units::human(doc["span_bytes"].as_u64().unwrap_or(0)),
        doc["dir"].as_str().unwrap_or("?"),
        table(&head, &rows)
    )
}

#[cfg(test)]
mod tests {
    use super::super::fs_results::tests::doc;
    use super::*;
    use serde_json::json;

    #[test]
    fn a_bench_fs_table_has_ratios_to_the_best_kernel_fs() {
        let d = doc(&[
            ("create+fsync", 1, "api", 900.0),
            ("create+fsync", 1, "ext4", 300.0),
            ("create+fsync", 1, "xfs", 450.0),
        ]);
        let text = bench_fs(&d);
        assert!(
            text.contains("| workload | threads | api | ext4 | xfs | best kernel fs |"),
            "{text}"
        );
        assert!(
            text.contains("| create+fsync | 1 | 900 ±10% (2.00x) | 300 ±10% (0.67x) | 450 ±10% (1.00x) | xfs 450 |"),
            "{text}"
        );
        assert!(text.contains("4.0K"), "{text}");
    }

    #[test]
    fn the_amplify_table_compares_with_the_lowest_kernel_fs() {
        let result = |fs: &str, total: f64| {
            json!({"workload": "create", "fs": fs, "unit": "KB per op",
                   "median": {"write_fsync": 1.0, "write_total": total},
                   "runs": [{"write_fsync_bytes_per_op": 1024.0, "write_later_bytes_per_op": 1024.0}]})
        };
        let d = json!({
            "file_systems": [{"name": "augefs"}, {"name": "ext4"}, {"name": "xfs"}],
            "results": [result("augefs", 2.0), result("ext4", 8.0), result("xfs", 4.0)],
        });
        let text = amplify(&d);
        assert!(
            text.contains("| create | written in all (KB/op) | 2.00 ±0% | 8.00 ±0% | 4.00 ±0% | xfs 4.00 | 0.50x |"),
            "{text}"
        );
    }

    #[test]
    fn tables_are_markdown() {
        let t = table(
            &["a".to_string(), "b".to_string()],
            &[vec!["1".into(), "2".into()]],
        );
        assert_eq!(t, "| a | b |\n| --- | --- |\n| 1 | 2 |\n");
    }
}
