//! fio as the baseline of `augefs bench device`: builds the job that matches one of our
//! device figures, runs it and reads its JSON report.
//!
//! Invariants:
//! - Every job is `--direct=1 --ioengine=io_uring` on the same file and the same span
//!   (`--offset=0 --size=<span>`) as our run, with the same block size and queue depth,
//!   time-based for the same number of seconds.
//! - Random jobs use `--norandommap` (uniform offsets with repeats, like ours) and an
//!   explicit seed; no job creates, extends or preallocates the file
//!   (`--fallocate=none`, `--allow_file_create=0`).

use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// The access pattern of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    RandRead,
    SeqRead,
    /// Random writes, each followed by `fdatasync`.
    RandWriteSync,
    SeqWrite,
}

impl Pattern {
    fn rw(self) -> &'static str {
        match self {
            Pattern::RandRead => "randread",
            Pattern::SeqRead => "read",
            Pattern::RandWriteSync => "randwrite",
            Pattern::SeqWrite => "write",
        }
    }

    fn direction(self) -> &'static str {
        match self {
            Pattern::RandRead | Pattern::SeqRead => "read",
            Pattern::RandWriteSync | Pattern::SeqWrite => "write",
        }
    }
}

/// One fio run.
#[derive(Debug, Clone)]
pub struct Job<'a> {
    pub filename: &'a Path,
    pub pattern: Pattern,
    pub block_bytes: u64,
    pub iodepth: u32,
    pub span_bytes: u64,
    pub seconds: u64,
    pub seed: u64,
}

/// What fio reported for the job's direction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Report {
    pub iops: f64,
    pub bytes_per_sec: f64,
    /// Completion latency percentiles, when fio reported them.
    pub clat_p50_ns: Option<u64>,
    pub clat_p99_ns: Option<u64>,
}

/// `fio --version`, or `None` when fio is not installed.
pub fn version() -> Option<String> {
    let out = Command::new("fio").arg("--version").output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The command-line arguments of `job`.
pub fn args(job: &Job<'_>) -> Vec<String> {
    let mut args = vec![
        format!("--name=augefs-{}", job.pattern.rw()),
        format!("--filename={}", job.filename.display()),
        "--ioengine=io_uring".to_string(),
        "--direct=1".to_string(),
        format!("--rw={}", job.pattern.rw()),
        format!("--bs={}", job.block_bytes),
        format!("--iodepth={}", job.iodepth),
        "--offset=0".to_string(),
        format!("--size={}", job.span_bytes),
        "--time_based".to_string(),
        format!("--runtime={}", job.seconds),
        "--norandommap".to_string(),
        format!("--randseed={}", job.seed),
        "--fallocate=none".to_string(),
        "--allow_file_create=0".to_string(),
        "--output-format=json".to_string(),
    ];
    if job.pattern == Pattern::RandWriteSync {
        args.push("--fdatasync=1".to_string());
    }
    args
}

/// Runs `job` and parses its report.
pub fn run(job: &Job<'_>) -> Result<Report, String> {
    let out = Command::new("fio")
        .args(args(job))
        .output()
        .map_err(|e| format!("cannot run fio: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(format!("fio failed ({}): {}", out.status, stderr.trim()));
    }
    parse(&stdout, job.pattern)
}

/// Reads the first job's figures for the pattern's direction from fio's JSON output
/// (fio may print notices before the JSON object).
pub fn parse(output: &str, pattern: Pattern) -> Result<Report, String> {
    let start = output.find('{').ok_or("fio printed no JSON report")?;
    let root: Value =
        serde_json::from_str(&output[start..]).map_err(|e| format!("fio's JSON report: {e}"))?;
    let job = root
        .get("jobs")
        .and_then(|j| j.get(0))
        .ok_or("fio's report has no jobs")?;
    if let Some(error) = job.get("error").and_then(Value::as_i64).filter(|&e| e != 0) {
        return Err(format!("fio's job failed with errno {error}"));
    }
    let stats = job
        .get(pattern.direction())
        .ok_or("fio's report lacks the job's direction")?;
    let number = |key: &str| {
        stats
            .get(key)
            .and_then(Value::as_f64)
            .ok_or(format!("fio's report lacks {key}"))
    };
    let percentile = |p: &str| {
        stats
            .pointer(&format!("/clat_ns/percentile/{p}"))
            .and_then(Value::as_u64)
    };
    Ok(Report {
        iops: number("iops")?,
        bytes_per_sec: number("bw_bytes")?,
        clat_p50_ns: percentile("50.000000"),
        clat_p99_ns: percentile("99.000000"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_match_our_figures() {
        let path = Path::new("/x/img");
        let job = Job {
            filename: path,
            pattern: Pattern::RandWriteSync,
            block_bytes: 4096,
            iodepth: 1,
            span_bytes: 1 << 30,
            seconds: 5,
            seed: 9,
        };
        let a = args(&job);
        for want in [
            "--filename=/x/img",
            "--direct=1",
            "--ioengine=io_uring",
            "--rw=randwrite",
            "--bs=4096",
        ] {
            assert!(a.iter().any(|x| x == want), "{want} missing from {a:?}");
        }
        for want in [
            "--iodepth=1",
            "--size=1073741824",
            "--offset=0",
            "--time_based",
            "--fdatasync=1",
        ] {
            assert!(a.iter().any(|x| x == want), "{want} missing from {a:?}");
        }
        let read = args(&Job {
            pattern: Pattern::RandRead,
            iodepth: 32,
            ..job
        });
        assert!(
            read.iter().any(|x| x == "--rw=randread") && !read.iter().any(|x| x == "--fdatasync=1")
        );
    }

    #[test]
    fn parses_a_report() {
        let output = r#"note: both iodepth >= 1 and synchronous I/O engine are selected
{
  "fio version" : "fio-3.33",
  "jobs" : [ { "jobname" : "augefs-randread", "error" : 0,
      "read" : { "io_bytes" : 4096000, "bw_bytes" : 819200, "iops" : 200.5,
                 "clat_ns" : { "percentile" : { "50.000000" : 1000, "99.000000" : 5000 } } },
      "write" : { "io_bytes" : 0, "bw_bytes" : 0, "iops" : 0.0 } } ]
}"#;
        let r = parse(output, Pattern::RandRead).expect("parse");
        assert_eq!(r.iops, 200.5);
        assert_eq!(r.bytes_per_sec, 819_200.0);
        assert_eq!((r.clat_p50_ns, r.clat_p99_ns), (Some(1000), Some(5000)));
        assert_eq!(parse(output, Pattern::SeqWrite).expect("parse").iops, 0.0);
        assert!(parse("fio: no such file", Pattern::RandRead).is_err());
        let failed = output.replace(r#""error" : 0"#, r#""error" : 5"#);
        assert!(parse(&failed, Pattern::RandRead)
            .unwrap_err()
            .contains("errno 5"));
    }
}
