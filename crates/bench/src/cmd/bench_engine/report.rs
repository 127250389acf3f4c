//! The results of `augefs bench engine`: one row per (figure, threads, domains, system)
//! holding one sample per run, printed as a table (median, spread, device bytes and
//! flushes per fsync) or as JSON with every sample.
//!
//! Invariants:
//! - A ratio row holds one sample per run: the ratio of two samples measured back to
//!   back in that run ("paired"), so drift of the machine between runs does not move it.
//! - Rows keep the order they were first measured in.

use crate::stats::{spread, Spread};
use platform::{IoCause, IoSnapshot};
use serde_json::{json, Value};

/// Who is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum System {
    /// augefs with `FsyncPath::Async`.
    Async,
    /// augefs with `FsyncPath::Ordered`.
    Ordered,
    /// ext4 on a loop device over an image file beside augefs's.
    Ext4,
}

impl System {
    pub fn name(self) -> &'static str {
        match self {
            System::Async => "async",
            System::Ordered => "ordered",
            System::Ext4 => "ext4",
        }
    }
}

/// What a row measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Figure {
    /// 4 KiB appends, each with fsync, one file per thread.
    Fsync,
    /// Fsync of the async path over the ordered path, run by run.
    AsyncOverOrdered,
    /// Fsync of the async path over ext4, run by run.
    AsyncOverExt4,
    /// `Engine::open` after the child was killed.
    Recovery,
    /// Fsync at a domain count.
    Domains,
    /// Domains over the same run's one-domain sample.
    DomainsOverOne,
}

impl Figure {
    pub fn name(self) -> &'static str {
        match self {
            Figure::Fsync => "append_fsync_ops_per_sec",
            Figure::AsyncOverOrdered => "async_over_ordered",
            Figure::AsyncOverExt4 => "async_over_ext4",
            Figure::Recovery => "recovery_ms",
            Figure::Domains => "domains_append_fsync_ops_per_sec",
            Figure::DomainsOverOne => "domains_over_one_domain",
        }
    }

    pub fn label(self, crash_bytes: u64) -> String {
        match self {
            Figure::Fsync => "4 KiB append+fsync (ops/s)".to_string(),
            Figure::AsyncOverOrdered => "  async / ordered, paired".to_string(),
            Figure::AsyncOverExt4 => "  async / ext4, paired".to_string(),
            Figure::Recovery => format!(
                "recovery after {} appended (ms)",
                platform::units::human(crash_bytes)
            ),
            Figure::Domains => "domains: append+fsync (ops/s)".to_string(),
            Figure::DomainsOverOne => "  domains: vs 1 domain, paired".to_string(),
        }
    }

    fn is_ratio(self) -> bool {
        matches!(
            self,
            Figure::AsyncOverOrdered | Figure::AsyncOverExt4 | Figure::DomainsOverOne
        )
    }

    fn render(self, value: f64) -> String {
        match self {
            _ if self.is_ratio() => format!("{value:.2}x"),
            Figure::Recovery => format!("{value:.1}"),
            _ => format!("{value:.0}"),
        }
    }
}

/// Identifies a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    pub figure: Figure,
    pub threads: usize,
    /// The image's domain count (augefs), or 0 (ext4).
    pub domains: u32,
    pub system: System,
}

/// What one run wrote, per fsync.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PerOp {
    pub total: f64,
    pub flushes: f64,
    /// augefs: bytes by cause, in the order of [`CAUSES`] (the device's own counters).
    /// ext4: `None` (the loop device's `/sys/block/<dev>/stat` has totals only).
    pub by_cause: Option<[f64; 4]>,
}

/// The causes bytes per fsync are split by: file data, MetaDB's WAL, MetaDB's tables
/// (flush, compaction, manifest), and everything else (checkpoints, superblocks, GC).
pub const CAUSES: [&str; 4] = ["data", "wal", "tables", "other"];

impl PerOp {
    /// The device's work in `io` over `ops` operations.
    pub fn counted(io: &IoSnapshot, ops: u64) -> PerOp {
        let per = |bytes: u64| bytes as f64 / ops.max(1) as f64;
        let written =
            |causes: &[IoCause]| -> u64 { causes.iter().map(|&c| io.cause(c).write_bytes).sum() };
        let total = io.total().write_bytes;
        let data = written(&[IoCause::UserData]);
        let wal = written(&[IoCause::Wal]);
        let tables = written(&[IoCause::Table, IoCause::Compaction, IoCause::Manifest]);
        PerOp {
            total: per(total),
            flushes: per(io.total().flush_ops),
            by_cause: Some([data, wal, tables, total - data - wal - tables].map(per)),
        }
    }

    /// Per-component medians of `runs` (by cause only if every run has it).
    fn median(runs: &[PerOp]) -> Option<PerOp> {
        if runs.is_empty() {
            return None;
        }
        let median = |f: &dyn Fn(&PerOp) -> f64| {
            spread(&runs.iter().map(f).collect::<Vec<_>>()).map(|s| s.median)
        };
        let by_cause = runs.iter().all(|r| r.by_cause.is_some()).then(|| {
            [0, 1, 2, 3]
                .map(|i| median(&|r: &PerOp| r.by_cause.expect("checked")[i]).expect("runs"))
        });
        Some(PerOp {
            total: median(&|r| r.total)?,
            flushes: median(&|r| r.flushes)?,
            by_cause,
        })
    }

    fn render(self) -> String {
        let split = match self.by_cause {
            Some(c) => format!("({:.0} + {:.0} + {:.0} + {:.0})", c[0], c[1], c[2], c[3]),
            None => "(loop device)".to_string(),
        };
        format!("{:.0} {split}, {:.2}", self.total, self.flushes)
    }

    fn json(self) -> Value {
        let by_cause = self.by_cause.map(|c| {
            CAUSES
                .iter()
                .zip(c)
                .map(|(name, bytes)| (name.to_string(), json!(bytes)))
                .collect::<serde_json::Map<_, _>>()
        });
        json!({
            "source": if by_cause.is_some() { "device counters" } else { "loop device /sys/block stat" },
            "total_bytes": self.total,
            "flushes": self.flushes,
            "bytes_by_cause": by_cause,
        })
    }
}

/// One run's result.
#[derive(Debug, Clone)]
pub struct Sample {
    pub value: f64,
    pub per_op: Option<PerOp>,
    /// Everything else worth keeping, for the JSON output.
    pub detail: Value,
}

#[derive(Debug, Clone)]
pub struct Row {
    pub key: Key,
    pub samples: Vec<Sample>,
}

impl Row {
    pub fn spread(&self) -> Option<Spread> {
        spread(&self.samples.iter().map(|s| s.value).collect::<Vec<_>>())
    }

    fn per_op_median(&self) -> Option<PerOp> {
        let runs: Vec<PerOp> = self.samples.iter().filter_map(|s| s.per_op).collect();
        PerOp::median(&runs)
    }
}

/// Every row of one invocation.
#[derive(Debug, Default)]
pub struct Report {
    pub rows: Vec<Row>,
}

impl Report {
    pub fn add(&mut self, key: Key, sample: Sample) {
        match self.rows.iter_mut().find(|r| r.key == key) {
            Some(row) => row.samples.push(sample),
            None => self.rows.push(Row {
                key,
                samples: vec![sample],
            }),
        }
    }

    pub fn row(&self, key: Key) -> Option<&Row> {
        self.rows.iter().find(|r| r.key == key)
    }

    /// Adds the row `ratio` of `over` run by run over `under` (runs paired by index).
    pub fn add_paired_ratio(&mut self, ratio: Key, over: Key, under: Key) {
        let (Some(over_row), Some(under_row)) = (self.row(over), self.row(under)) else {
            return;
        };
        let samples: Vec<Sample> = over_row
            .samples
            .iter()
            .zip(&under_row.samples)
            .filter(|(_, u)| u.value > 0.0)
            .map(|(o, u)| Sample {
                value: o.value / u.value,
                per_op: None,
                detail: json!({ "over": o.value, "under": u.value }),
            })
            .collect();
        for sample in samples {
            self.add(ratio, sample);
        }
    }

    pub fn print_table(&self, crash_bytes: u64) {
        println!(
            "{:<40} {:>7} {:>7}  {:<7} {:>9} {:>19}  bytes/fsync: total (data + wal + tables + other), flushes/fsync",
            "figure", "threads", "domains", "path", "median", "spread (min - max)"
        );
        for row in &self.rows {
            let Some(s) = row.spread() else { continue };
            let render = |v| row.key.figure.render(v);
            let domains = match row.key.system {
                System::Ext4 => "-".to_string(),
                _ => row.key.domains.to_string(),
            };
            let line = format!(
                "{:<40} {:>7} {:>7}  {:<7} {:>9} {:>19}  {}",
                row.key.figure.label(crash_bytes),
                row.key.threads,
                domains,
                row.key.system.name(),
                render(s.median),
                format!("{} - {}", render(s.min), render(s.max)),
                row.per_op_median().map_or_else(String::new, PerOp::render),
            );
            println!("{}", line.trim_end());
        }
    }

    pub fn rows_json(&self, crash_bytes: u64) -> Vec<Value> {
        self.rows
            .iter()
            .map(|row| {
                let s = row.spread();
                let runs: Vec<Value> = row
                    .samples
                    .iter()
                    .map(|sample| {
                        json!({
                            "value": sample.value,
                            "per_fsync": sample.per_op.map(PerOp::json),
                            "detail": sample.detail,
                        })
                    })
                    .collect();
                json!({
                    "figure": row.key.figure.name(),
                    "label": row.key.figure.label(crash_bytes).trim(),
                    "threads": row.key.threads,
                    "domains": row.key.domains,
                    "system": row.key.system.name(),
                    "median": s.map(|s| s.median),
                    "min": s.map(|s| s.min),
                    "max": s.map(|s| s.max),
                    "per_fsync_median": row.per_op_median().map(PerOp::json),
                    "runs": runs,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(figure: Figure, system: System) -> Key {
        Key {
            figure,
            threads: 1,
            domains: 16,
            system,
        }
    }

    fn sample(value: f64, per_op: Option<PerOp>) -> Sample {
        Sample {
            value,
            per_op,
            detail: Value::Null,
        }
    }

    #[test]
    fn paired_ratios_divide_run_by_run() {
        let mut r = Report::default();
        let a = key(Figure::Fsync, System::Async);
        let o = key(Figure::Fsync, System::Ordered);
        for (x, y) in [(30.0, 10.0), (40.0, 40.0), (10.0, 5.0)] {
            r.add(a, sample(x, None));
            r.add(o, sample(y, None));
        }
        let ratio = key(Figure::AsyncOverOrdered, System::Async);
        r.add_paired_ratio(ratio, a, o);
        let row = r.row(ratio).unwrap();
        let values: Vec<f64> = row.samples.iter().map(|s| s.value).collect();
        assert_eq!(values, [3.0, 1.0, 2.0]);
        assert_eq!(row.spread().unwrap().median, 2.0);
        // No ext4 row: no ratio row either.
        r.add_paired_ratio(
            key(Figure::AsyncOverExt4, System::Async),
            a,
            key(Figure::Fsync, System::Ext4),
        );
        assert_eq!(r.rows.len(), 3);
    }

    #[test]
    fn bytes_per_fsync_split_by_cause_and_take_medians() {
        let counters = platform::IoCounters::new();
        counters.count_write(IoCause::UserData, 4096 * 10);
        counters.count_write(IoCause::Wal, 512 * 10);
        counters.count_write(IoCause::Table, 2 << 20);
        counters.count_write(IoCause::Checkpoint, 16384);
        counters.count_flush(IoCause::Wal);
        let per = PerOp::counted(&counters.snapshot(), 10);
        assert_eq!(per.by_cause, Some([4096.0, 512.0, 209715.2, 1638.4]));
        assert_eq!(per.total, per.by_cause.unwrap().iter().sum::<f64>());
        assert_eq!(per.flushes, 0.1);
        assert_eq!(per.render(), "215962 (4096 + 512 + 209715 + 1638), 0.10");
        let mut r = Report::default();
        let k = key(Figure::Fsync, System::Ext4);
        for (total, flushes) in [(300.0, 1.0), (100.0, 3.0), (200.0, 2.0)] {
            let per_op = PerOp {
                total,
                flushes,
                by_cause: None,
            };
            r.add(k, sample(1.0, Some(per_op)));
        }
        let median = r.row(k).unwrap().per_op_median().unwrap();
        assert_eq!((median.total, median.flushes), (200.0, 2.0));
        assert_eq!(median.by_cause, None);
        assert_eq!(median.render(), "200 (loop device), 2.00");
        assert_eq!(PerOp::median(&[]), None);
    }

    #[test]
    fn ratios_render_with_an_x() {
        assert_eq!(Figure::AsyncOverOrdered.render(1.4), "1.40x");
        assert_eq!(Figure::Recovery.render(393.04), "393.0");
        assert_eq!(Figure::Fsync.render(1234.4), "1234");
    }
}
