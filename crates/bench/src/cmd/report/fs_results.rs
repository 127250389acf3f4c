//! Reading the JSON documents `bench fs` produces (`bench_fs/report.rs`), for the
//! report's tables and goals: a cell's median figures, and the best kernel file system
//! of a (workload, threads) row.
//!
//! Invariants:
//! - Only measured figures are returned: a skipped target or a failed cell has none.
//! - "Kernel file system" means ext2, ext4, xfs or btrfs on the loop device (issue 7's
//!   baseline); the best of a row is the one with the highest median ops/s.

use crate::kernelfs::KERNEL_FS;
use serde_json::Value;

pub fn is_kernel(target: &str) -> bool {
    KERNEL_FS.contains(&target)
}

/// The `results` of one or more bench fs documents.
#[derive(Debug, Clone, Default)]
pub struct FsResults<'a> {
    docs: Vec<&'a Value>,
}

/// A cell's median figures (`median` of its JSON entry).
#[derive(Debug, Clone, Copy)]
pub struct Median<'a>(pub &'a Value);

impl Median<'_> {
    pub fn get(&self, key: &str) -> Option<f64> {
        self.0.get(key).and_then(Value::as_f64)
    }

    pub fn ops(&self) -> f64 {
        self.get("ops_per_sec").expect("a median has ops/s")
    }

    /// The largest distance of a run from the median, in percent of it.
    pub fn spread_percent(&self) -> f64 {
        let m = self.ops();
        let min = self.get("ops_per_sec_min").unwrap_or(m);
        let max = self.get("ops_per_sec_max").unwrap_or(m);
        100.0 * (max - m).max(m - min) / m.max(f64::MIN_POSITIVE)
    }
}

impl<'a> FsResults<'a> {
    pub fn new(docs: Vec<&'a Value>) -> FsResults<'a> {
        FsResults { docs }
    }

    fn results(&self) -> impl Iterator<Item = &'a Value> + '_ {
        self.docs
            .iter()
            .flat_map(|d| d["results"].as_array().into_iter().flatten())
    }

    /// Targets in the order of the first document naming them.
    pub fn targets(&self) -> Vec<&'a Value> {
        let mut seen: Vec<&'a Value> = Vec::new();
        for t in self
            .docs
            .iter()
            .flat_map(|d| d["targets"].as_array().into_iter().flatten())
        {
            if !seen.iter().any(|s| s["name"] == t["name"]) {
                seen.push(t);
            }
        }
        seen
    }

    /// Distinct (workload, threads) rows in the order measured.
    pub fn rows(&self) -> Vec<(String, u64)> {
        let mut rows: Vec<(String, u64)> = Vec::new();
        for r in self.results() {
            let key = (
                r["workload"].as_str().unwrap_or_default().to_string(),
                r["threads"].as_u64().unwrap_or_default(),
            );
            if !rows.contains(&key) {
                rows.push(key);
            }
        }
        rows
    }

    /// The measured medians of a cell.
    pub fn median(&self, workload: &str, threads: u64, target: &str) -> Option<Median<'a>> {
        self.results()
            .find(|r| r["workload"] == workload && r["threads"] == threads && r["target"] == target)
            .map(|r| &r["median"])
            .filter(|m| m.get("ops_per_sec").and_then(Value::as_f64).is_some())
            .map(Median)
    }

    /// The errors of every cell, as "target workload xT: error".
    pub fn errors(&self) -> Vec<String> {
        self.results()
            .flat_map(|r| {
                let errors = r["errors"].as_array().cloned().unwrap_or_default();
                errors.into_iter().map(move |e| {
                    format!(
                        "{} {} x{}: {}",
                        r["target"].as_str().unwrap_or("?"),
                        r["workload"].as_str().unwrap_or("?"),
                        r["threads"],
                        e.as_str().unwrap_or("?")
                    )
                })
            })
            .collect()
    }

    /// The fastest kernel file system of a row and its median ops/s.
    pub fn best_kernel(&self, workload: &str, threads: u64) -> Option<(String, f64)> {
        KERNEL_FS
            .iter()
            .filter_map(|k| {
                self.median(workload, threads, k)
                    .map(|m| (k.to_string(), m.ops()))
            })
            .max_by(|a, b| a.1.total_cmp(&b.1))
    }

    /// Thread counts measured for `workload`, ascending.
    pub fn threads(&self, workload: &str) -> Vec<u64> {
        let mut threads: Vec<u64> = self
            .rows()
            .into_iter()
            .filter(|(w, _)| w == workload)
            .map(|(_, t)| t)
            .collect();
        threads.sort_unstable();
        threads
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use serde_json::json;

    /// A bench fs document with one run per cell: (workload, threads, target, ops/s).
    pub fn doc(cells: &[(&str, u64, &str, f64)]) -> Value {
        let mut targets: Vec<Value> = Vec::new();
        for (_, _, t, _) in cells {
            if !targets.iter().any(|v| v["name"] == *t) {
                targets.push(json!({"name": t, "measured": true, "note": null}));
            }
        }
        let results: Vec<Value> = cells
            .iter()
            .map(|(w, th, t, ops)| {
                json!({
                    "workload": w, "threads": th, "target": t, "errors": [],
                    "median": {"ops_per_sec": ops, "ops_per_sec_min": ops * 0.9,
                               "ops_per_sec_max": ops * 1.05, "dev_write_bytes_per_op": 4096.0},
                })
            })
            .collect();
        json!({"command": "bench fs", "targets": targets, "results": results})
    }

    #[test]
    fn the_best_kernel_fs_is_the_fastest_measured() {
        let d = doc(&[
            ("create+fsync", 1, "api", 9000.0),
            ("create+fsync", 1, "ext4", 300.0),
            ("create+fsync", 1, "xfs", 450.0),
            ("create+fsync", 2, "api", 12000.0),
        ]);
        let r = FsResults::new(vec![&d]);
        assert_eq!(
            r.best_kernel("create+fsync", 1),
            Some(("xfs".to_string(), 450.0))
        );
        assert_eq!(r.best_kernel("create+fsync", 2), None);
        assert_eq!(r.threads("create+fsync"), [1, 2]);
        let m = r.median("create+fsync", 1, "api").unwrap();
        assert!((m.spread_percent() - 10.0).abs() < 1e-9);
        assert!(r.median("create+fsync", 1, "btrfs").is_none());
        assert_eq!(r.rows().len(), 2);
        assert_eq!(r.targets().len(), 3);
    }
}
