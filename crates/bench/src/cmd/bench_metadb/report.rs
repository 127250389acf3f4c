//! The results of `augefs bench metadb`: one row per (figure, threads, mode) holding one
//! sample per run, printed as a table (median, spread, ratio to fjall, bytes per put) or
//! as JSON with every sample.
//!
//! Invariants:
//! - The ratio of a row is its median over the median of the fjall row of the same
//!   figure and thread count, measured in the same invocation; the paired ratio is the
//!   median of run-by-run ratios (run i of both was measured back to back). Rows
//!   without such a baseline show none.
//! - Rows keep the order they were first measured in.

use crate::stats::{spread, Spread};
use serde_json::{json, Value};

/// Who is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum System {
    /// MetaDB with its WAL on the emulated PMR.
    Pmr,
    /// MetaDB with its WAL in the image's WAL region.
    Ssd,
    Fjall,
}

impl System {
    pub fn name(self) -> &'static str {
        match self {
            System::Pmr => "pmr",
            System::Ssd => "ssd",
            System::Fjall => "fjall",
        }
    }

    /// The name, with `pmr` (the emulated PMR's label) beside pmr mode's.
    pub fn label(self, pmr: &str) -> String {
        match self {
            System::Pmr => format!("pmr ({pmr})"),
            System::Ssd => "ssd".to_string(),
            System::Fjall => "fjall".to_string(),
        }
    }
}

/// What a row measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Figure {
    PutSync,
    PutBuffered,
    /// Load pace over the first tenth of the keys.
    LoadFirst,
    /// Load pace over the last tenth of the keys.
    LoadLast,
    /// LoadLast / LoadFirst.
    LoadKept,
    /// Keys over the time of the load plus the flush and compaction after it: the
    /// rate a store sustains once its compaction debt is paid.
    LoadPaid,
    GetP50,
    GetP99,
    Get,
    /// `MetaDb::open` (or fjall's open) after a crash with a memtable's worth of WAL.
    Recovery,
    /// Puts from several threads on a loaded and settled store of a tenth of the keys
    /// (`large`: of all the keys), new keys each run.
    AgedPut {
        sync: bool,
        large: bool,
    },
    /// AgedPut on the large store over AgedPut on the small one, run by run.
    AgedKept {
        sync: bool,
    },
}

impl Figure {
    pub fn name(self) -> &'static str {
        match self {
            Figure::PutSync => "put_sync_ops_per_sec",
            Figure::PutBuffered => "put_buffered_ops_per_sec",
            Figure::LoadFirst => "load_first_tenth_ops_per_sec",
            Figure::LoadLast => "load_last_tenth_ops_per_sec",
            Figure::LoadKept => "load_pace_last_over_first",
            Figure::LoadPaid => "load_with_compaction_ops_per_sec",
            Figure::GetP50 => "get_p50_us",
            Figure::GetP99 => "get_p99_us",
            Figure::Get => "get_ops_per_sec",
            Figure::Recovery => "recovery_ms",
            Figure::AgedPut { sync, large } => match (sync, large) {
                (true, false) => "aged_put_sync_small_ops_per_sec",
                (true, true) => "aged_put_sync_large_ops_per_sec",
                (false, false) => "aged_put_buffered_small_ops_per_sec",
                (false, true) => "aged_put_buffered_large_ops_per_sec",
            },
            Figure::AgedKept { sync: true } => "aged_put_sync_large_over_small",
            Figure::AgedKept { sync: false } => "aged_put_buffered_large_over_small",
        }
    }

    pub fn label(self, keys: u64) -> String {
        let tenth = keys / 10;
        match self {
            Figure::PutSync => "put, sync (ops/s)".to_string(),
            Figure::PutBuffered => "put, buffered (ops/s)".to_string(),
            Figure::LoadFirst => format!("load keys 0-{} (ops/s)", count(tenth)),
            Figure::LoadLast => {
                format!("load keys {}-{} (ops/s)", count(keys - tenth), count(keys))
            }
            Figure::LoadKept => format!("load pace at {} / at {}", count(keys), count(tenth)),
            Figure::LoadPaid => format!("load {} + compaction (ops/s)", count(keys)),
            Figure::GetP50 => format!("get p50, {} keys (us)", count(keys)),
            Figure::GetP99 => format!("get p99, {} keys (us)", count(keys)),
            Figure::Get => format!("get, {} keys (ops/s)", count(keys)),
            Figure::Recovery => "recovery open (ms)".to_string(),
            Figure::AgedPut { sync, large } => format!(
                "put {}, {}-key store (ops/s)",
                if sync { "sync" } else { "buffered" },
                count(if large { keys } else { tenth })
            ),
            Figure::AgedKept { sync } => format!(
                "put {} at {} / at {}",
                if sync { "sync" } else { "buffered" },
                count(keys),
                count(tenth)
            ),
        }
    }

    fn render(self, value: f64) -> String {
        match self {
            Figure::GetP50 | Figure::GetP99 | Figure::Recovery => format!("{value:.1}"),
            Figure::LoadKept | Figure::AgedKept { .. } => format!("{value:.3}"),
            _ => format!("{value:.0}"),
        }
    }
}

/// "10M", "1.5M", "20K", "999".
pub fn count(n: u64) -> String {
    let (scaled, unit) = match n {
        1_000_000.. => (n as f64 / 1e6, "M"),
        1_000.. => (n as f64 / 1e3, "K"),
        _ => return n.to_string(),
    };
    let text = format!("{scaled:.1}");
    format!("{}{unit}", text.strip_suffix(".0").unwrap_or(&text))
}

/// What one put run wrote, per put.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PutBytes {
    /// augefs: the device's and PMR's own counters.
    Counted {
        total: f64,
        wal: f64,
        tables: f64,
        /// Device flushes plus PMR persists.
        flushes: f64,
    },
    /// fjall: `/proc/self/io` write_bytes.
    Process { write_bytes: f64 },
}

/// One run's result.
#[derive(Debug, Clone)]
pub struct Sample {
    pub value: f64,
    pub bytes: Option<PutBytes>,
    /// Everything else worth keeping, for the JSON output.
    pub detail: Value,
}

impl Sample {
    /// A sample with no bytes-per-put figure.
    pub fn of(value: f64, detail: Value) -> Sample {
        Sample {
            value,
            bytes: None,
            detail,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Row {
    pub figure: Figure,
    pub threads: usize,
    pub system: System,
    pub samples: Vec<Sample>,
}

impl Row {
    fn values(&self) -> Vec<f64> {
        self.samples.iter().map(|s| s.value).collect()
    }

    pub fn spread(&self) -> Option<Spread> {
        spread(&self.values())
    }

    /// Medians of the bytes per put over the runs that counted them.
    fn bytes_median(&self) -> Option<PutBytes> {
        let counted: Vec<[f64; 4]> = self
            .samples
            .iter()
            .filter_map(|s| match s.bytes {
                Some(PutBytes::Counted {
                    total,
                    wal,
                    tables,
                    flushes,
                }) => Some([total, wal, tables, flushes]),
                _ => None,
            })
            .collect();
        let median = |i: usize| spread(&counted.iter().map(|c| c[i]).collect::<Vec<_>>());
        if let (Some(total), Some(wal), Some(tables), Some(flushes)) =
            (median(0), median(1), median(2), median(3))
        {
            return Some(PutBytes::Counted {
                total: total.median,
                wal: wal.median,
                tables: tables.median,
                flushes: flushes.median,
            });
        }
        let process: Vec<f64> = self
            .samples
            .iter()
            .filter_map(|s| match s.bytes {
                Some(PutBytes::Process { write_bytes }) => Some(write_bytes),
                _ => None,
            })
            .collect();
        spread(&process).map(|s| PutBytes::Process {
            write_bytes: s.median,
        })
    }
}

/// Every row of one invocation.
#[derive(Debug, Default)]
pub struct Report {
    pub rows: Vec<Row>,
}

impl Report {
    pub fn add(&mut self, figure: Figure, threads: usize, system: System, sample: Sample) {
        let at = self
            .rows
            .iter()
            .position(|r| r.figure == figure && r.threads == threads && r.system == system);
        match at {
            Some(i) => self.rows[i].samples.push(sample),
            None => self.rows.push(Row {
                figure,
                threads,
                system,
                samples: vec![sample],
            }),
        }
    }

    pub fn row(&self, figure: Figure, threads: usize, system: System) -> Option<&Row> {
        self.rows
            .iter()
            .find(|r| r.figure == figure && r.threads == threads && r.system == system)
    }

    /// The row's median over the median of fjall's row of the same figure and threads.
    pub fn ratio(&self, row: &Row) -> Option<f64> {
        if row.system == System::Fjall {
            return None;
        }
        let ours = row.spread()?.median;
        let theirs = self
            .row(row.figure, row.threads, System::Fjall)?
            .spread()?
            .median;
        (theirs > 0.0).then(|| ours / theirs)
    }

    /// The median over runs of this row's sample over fjall's sample of the same run
    /// (measured back to back), which drift of the machine between runs does not move.
    pub fn paired_ratio(&self, row: &Row) -> Option<f64> {
        if row.system == System::Fjall {
            return None;
        }
        let theirs = self.row(row.figure, row.threads, System::Fjall)?;
        let ratios: Vec<f64> = row
            .samples
            .iter()
            .zip(&theirs.samples)
            .filter(|(_, t)| t.value > 0.0)
            .map(|(o, t)| o.value / t.value)
            .collect();
        spread(&ratios).map(|s| s.median)
    }

    pub fn print_table(&self, keys: u64, pmr: &str) {
        println!(
            "{:<38} {:>7}  {:<28} {:>10} {:>23} {:>9} {:>7}  bytes/put: total (wal + tables), flushes",
            "figure", "threads", "mode", "median", "spread (min - max)", "vs fjall", "paired"
        );
        for row in &self.rows {
            let Some(s) = row.spread() else { continue };
            let render = |v| row.figure.render(v);
            let ratio = self
                .ratio(row)
                .map_or_else(|| "-".to_string(), |r| format!("{r:.2}x"));
            let paired = self
                .paired_ratio(row)
                .map_or_else(|| "-".to_string(), |r| format!("{r:.2}x"));
            let bytes = match row.bytes_median() {
                Some(PutBytes::Counted {
                    total,
                    wal,
                    tables,
                    flushes,
                }) => format!("{total:.0} ({wal:.0} + {tables:.0}), {flushes:.3}"),
                Some(PutBytes::Process { write_bytes }) => {
                    format!("{write_bytes:.0} (/proc/self/io)")
                }
                None => String::new(),
            };
            println!(
                "{:<38} {:>7}  {:<28} {:>10} {:>23} {:>9} {:>7}  {bytes}",
                row.figure.label(keys),
                row.threads,
                row.system.label(pmr),
                render(s.median),
                format!("{} - {}", render(s.min), render(s.max)),
                ratio,
                paired,
            );
        }
    }

    pub fn rows_json(&self, keys: u64) -> Vec<Value> {
        self.rows
            .iter()
            .map(|row| {
                let s = row.spread();
                let samples: Vec<Value> = row
                    .samples
                    .iter()
                    .map(|sample| {
                        json!({
                            "value": sample.value,
                            "bytes_per_put": sample.bytes.map(bytes_json),
                            "detail": sample.detail,
                        })
                    })
                    .collect();
                json!({
                    "figure": row.figure.name(),
                    "label": row.figure.label(keys),
                    "threads": row.threads,
                    "mode": row.system.name(),
                    "median": s.map(|s| s.median),
                    "min": s.map(|s| s.min),
                    "max": s.map(|s| s.max),
                    "ratio_to_fjall": self.ratio(row),
                    "paired_ratio_to_fjall": self.paired_ratio(row),
                    "bytes_per_put_median": row.bytes_median().map(bytes_json),
                    "runs": samples,
                })
            })
            .collect()
    }
}

fn bytes_json(b: PutBytes) -> Value {
    match b {
        PutBytes::Counted {
            total,
            wal,
            tables,
            flushes,
        } => json!({
            "source": "device and PMR counters",
            "total": total,
            "wal": wal,
            "tables": tables,
            "flushes": flushes,
        }),
        PutBytes::Process { write_bytes } => json!({
            "source": "/proc/self/io write_bytes",
            "total": write_bytes,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(value: f64) -> Sample {
        Sample {
            value,
            bytes: None,
            detail: Value::Null,
        }
    }

    #[test]
    fn ratios_compare_medians_with_fjall_of_the_same_threads() {
        let mut r = Report::default();
        for v in [10.0, 30.0, 20.0] {
            r.add(Figure::PutSync, 2, System::Pmr, sample(v));
        }
        r.add(Figure::PutSync, 2, System::Fjall, sample(4.0));
        r.add(Figure::PutSync, 1, System::Fjall, sample(1.0));
        r.add(Figure::PutSync, 4, System::Ssd, sample(9.0));
        assert_eq!(r.rows.len(), 4);
        let pmr = r.row(Figure::PutSync, 2, System::Pmr).unwrap();
        assert_eq!(pmr.samples.len(), 3);
        assert_eq!(r.ratio(pmr), Some(5.0));
        // Runs 10/4 only: the other runs have no fjall sample to pair with.
        assert_eq!(r.paired_ratio(pmr), Some(2.5));
        assert_eq!(
            r.ratio(r.row(Figure::PutSync, 2, System::Fjall).unwrap()),
            None
        );
        assert_eq!(
            r.ratio(r.row(Figure::PutSync, 4, System::Ssd).unwrap()),
            None
        );
    }

    #[test]
    fn bytes_medians_per_component() {
        let mut r = Report::default();
        for (total, wal) in [(300.0, 200.0), (100.0, 50.0), (200.0, 150.0)] {
            let bytes = PutBytes::Counted {
                total,
                wal,
                tables: total - wal,
                flushes: 1.0,
            };
            let s = Sample {
                value: 1.0,
                bytes: Some(bytes),
                detail: Value::Null,
            };
            r.add(Figure::PutSync, 1, System::Ssd, s);
        }
        let row = r.row(Figure::PutSync, 1, System::Ssd).unwrap();
        assert_eq!(
            row.bytes_median(),
            Some(PutBytes::Counted {
                total: 200.0,
                wal: 150.0,
                tables: 50.0,
                flushes: 1.0
            })
        );
    }

    #[test]
    fn counts_render_short() {
        assert_eq!(count(10_000_000), "10M");
        assert_eq!(count(1_500_000), "1.5M");
        assert_eq!(count(20_000), "20K");
        assert_eq!(count(2_000), "2K");
        assert_eq!(count(999), "999");
    }
}
