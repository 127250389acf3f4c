//! The results of `augefs amplify`: per workload and file system the samples of every
//! run, printed as a table (medians, the paper's figure beside each) or as JSON.
//!
//! Invariants:
//! - Data workloads are shown as amplification (bytes / 4 KiB of user data), namespace
//!   workloads in KB (1024 B) per operation: the units of the paper's Tables 1 and 2.
//! - A file system that was skipped or failed keeps its column, with the reason below
//!   the table.

use super::paper::{figure, Measure};
use super::workload::{Sample, Workload, BLOCK_BYTES};
use crate::stats::spread;
use platform::IoCause;
use serde_json::{json, Value};

/// A column: a file system, and why it has no figures if it has none.
#[derive(Debug, Clone)]
pub struct Column {
    pub fs: String,
    pub note: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Cell {
    pub workload: Workload,
    pub fs: String,
    pub samples: Vec<Sample>,
}

#[derive(Debug, Default)]
pub struct Report {
    pub header: Vec<String>,
    pub columns: Vec<Column>,
    pub cells: Vec<Cell>,
}

/// A row of the table.
#[derive(Debug, Clone, Copy)]
enum Row {
    Paper(Measure),
    WriteRequests,
    Flushes,
}

fn rows(workload: Workload) -> &'static [Row] {
    use Measure::*;
    if workload.is_read() {
        return &[Row::Paper(Read)];
    }
    &[
        Row::Paper(WriteFsync),
        Row::Paper(WriteLater),
        Row::Paper(WriteTotal),
        Row::Paper(Read),
        Row::Paper(Space),
        Row::WriteRequests,
        Row::Flushes,
    ]
}

fn row_label(workload: Workload, row: Row) -> String {
    let unit = if workload.is_data() { "x" } else { "KB" };
    match row {
        Row::Paper(Measure::WriteFsync) => format!("write at fsync ({unit})"),
        Row::Paper(Measure::WriteLater) => format!("write later ({unit})"),
        Row::Paper(Measure::WriteTotal) => format!("write total ({unit})"),
        Row::Paper(Measure::Read) => format!("read ({unit})"),
        Row::Paper(Measure::Space) => format!("space, live ({unit})"),
        Row::WriteRequests => "write requests/op".to_string(),
        Row::Flushes => "flushes/op".to_string(),
    }
}

/// The median of one figure over the runs.
fn median(samples: &[Sample], f: impl Fn(&Sample) -> Option<f64>) -> Option<f64> {
    let values: Vec<f64> = samples.iter().filter_map(f).collect();
    (values.len() == samples.len())
        .then(|| spread(&values).map(|s| s.median))
        .flatten()
}

/// The measured value of `row`, in the table's unit.
fn value(workload: Workload, samples: &[Sample], row: Row) -> Option<f64> {
    let scale = if workload.is_data() {
        BLOCK_BYTES as f64
    } else {
        1024.0
    };
    let bytes = |f: fn(&Sample) -> f64| median(samples, |s| Some(f(s))).map(|v| v / scale);
    match row {
        Row::Paper(Measure::WriteFsync) => bytes(|s| s.write_fsync_bytes),
        Row::Paper(Measure::WriteLater) => bytes(|s| s.write_later_bytes),
        Row::Paper(Measure::WriteTotal) => bytes(|s| s.write_fsync_bytes + s.write_later_bytes),
        Row::Paper(Measure::Read) => bytes(|s| s.read_bytes),
        Row::Paper(Measure::Space) => {
            // Data workloads store a ratio already.
            let divide = if workload.is_data() { 1.0 } else { scale };
            median(samples, |s| s.space).map(|v| v / divide)
        }
        Row::WriteRequests => median(samples, |s| Some(s.write_requests)),
        Row::Flushes => median(samples, |s| s.flushes),
    }
}

fn render(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

impl Report {
    fn cell(&self, workload: Workload, fs: &str) -> Option<&Cell> {
        self.cells
            .iter()
            .find(|c| c.workload == workload && c.fs == fs)
    }

    fn workloads(&self) -> Vec<Workload> {
        Workload::ALL
            .into_iter()
            .filter(|w| self.cells.iter().any(|c| c.workload == *w))
            .collect()
    }

    pub fn print_table(&self) {
        for line in &self.header {
            println!("{line}");
        }
        println!();
        let width = 17;
        print!("{:<20} {:<20}", "workload", "measure");
        for c in &self.columns {
            print!(" {:>width$}", c.fs);
        }
        println!();
        for workload in self.workloads() {
            for (i, &row) in rows(workload).iter().enumerate() {
                let name = if i == 0 { workload.label() } else { "" };
                print!("{name:<20} {:<20}", row_label(workload, row));
                for c in &self.columns {
                    let measured = self
                        .cell(workload, &c.fs)
                        .and_then(|cell| value(workload, &cell.samples, row));
                    let paper = match row {
                        Row::Paper(m) => figure(workload, m, &c.fs),
                        _ => None,
                    };
                    let text = match (measured, paper) {
                        (Some(v), Some(p)) => format!("{} ({})", render(v), render(p)),
                        (Some(v), None) => render(v),
                        (None, Some(p)) => format!("- ({})", render(p)),
                        (None, None) => "-".to_string(),
                    };
                    print!(" {text:>width$}");
                }
                println!();
            }
        }
        println!();
        println!("(N): the paper's figure (io-amplification.txt Tables 1 and 2). Data rows: bytes / 4 KiB");
        println!(
            "of user data; namespace rows: KB per operation. Later: a final sync and unmount, and"
        );
        println!("augefs's background causes (MetaDB flush/compaction, checkpoints, GC). Space, live: statfs");
        println!("bytes in use the workload added, over the bytes it stored (data) or per operation; the");
        println!(
            "paper counts distinct blocks written instead, so journals count there and not here."
        );
        for c in &self.columns {
            if let Some(note) = &c.note {
                println!("{}: {note}", c.fs);
            }
        }
    }

    pub fn json(&self) -> Value {
        let results: Vec<Value> = self
            .cells
            .iter()
            .map(|cell| {
                let mut median = serde_json::Map::new();
                let mut paper = serde_json::Map::new();
                for &row in rows(cell.workload) {
                    let key = row_key(row);
                    median.insert(key.into(), json!(value(cell.workload, &cell.samples, row)));
                    if let Row::Paper(m) = row {
                        if let Some(p) = figure(cell.workload, m, &cell.fs) {
                            paper.insert(key.into(), json!(p));
                        }
                    }
                }
                json!({
                    "workload": cell.workload.name(),
                    "fs": cell.fs,
                    "unit": if cell.workload.is_data() { "amplification" } else { "KB per op" },
                    "median": median,
                    "paper": paper,
                    "runs": cell.samples.iter().map(sample_json).collect::<Vec<_>>(),
                })
            })
            .collect();
        json!({
            "command": "amplify",
            "header": self.header,
            "file_systems": self.columns.iter().map(|c| json!({
                "name": c.fs,
                "measured": c.note.is_none(),
                "note": c.note,
            })).collect::<Vec<_>>(),
            "results": results,
        })
    }
}

fn row_key(row: Row) -> &'static str {
    match row {
        Row::Paper(Measure::WriteFsync) => "write_fsync",
        Row::Paper(Measure::WriteLater) => "write_later",
        Row::Paper(Measure::WriteTotal) => "write_total",
        Row::Paper(Measure::Read) => "read",
        Row::Paper(Measure::Space) => "space",
        Row::WriteRequests => "write_requests_per_op",
        Row::Flushes => "flushes_per_op",
    }
}

fn sample_json(s: &Sample) -> Value {
    let by_cause = s.written_by_cause.map(|w| {
        IoCause::ALL
            .iter()
            .zip(w)
            .filter(|(_, b)| *b > 0.0)
            .map(|(c, b)| (format!("{c:?}").to_lowercase(), json!(b)))
            .collect::<serde_json::Map<_, _>>()
    });
    json!({
        "ops": s.ops,
        "write_fsync_bytes_per_op": s.write_fsync_bytes,
        "write_later_bytes_per_op": s.write_later_bytes,
        "read_bytes_per_op": s.read_bytes,
        "write_requests_per_op": s.write_requests,
        "flushes_per_op": s.flushes,
        "space": s.space,
        "written_bytes_per_op_by_cause": by_cause,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_rows_are_in_kb_and_data_rows_in_blocks() {
        let s = Sample {
            ops: 10,
            write_fsync_bytes: 2048.0,
            write_later_bytes: 6144.0,
            space: Some(4096.0),
            ..Sample::default()
        };
        let total = Row::Paper(Measure::WriteTotal);
        assert_eq!(value(Workload::Create, &[s], total), Some(8.0));
        assert_eq!(value(Workload::Overwrite, &[s], total), Some(2.0));
        assert_eq!(
            value(Workload::Create, &[s], Row::Paper(Measure::Space)),
            Some(4.0)
        );
        assert_eq!(value(Workload::Create, &[s], Row::Flushes), None);
    }
}
