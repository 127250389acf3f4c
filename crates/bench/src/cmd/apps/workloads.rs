//! The programs `augefs bench apps` times, and how each one's figure is read.
//!
//! Invariants:
//! - A program that fails (exit status, or a figure it should print and did not) is an
//!   error that ends the run, never a sample.
//! - Every workload starts where the one before it left the file system; the order of
//!   `Workload::ALL` is the order of a run (untar makes the tree stat and rm -rf use).
//! - The serving daemon's CPU time is read before and after each timed program, so the
//!   CPU figure is the daemon's share of that program only.

use super::inputs::Inputs;
use crate::loopdev::path_str;
use std::ffi::OsString;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

/// One timed program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// tar -x of /usr/include, then `sync -f` of the mount.
    Untar,
    /// lstat of every untarred path, warm, several rounds (C loop).
    Stat,
    /// git clone of a local repository, then git status.
    GitClone,
    /// rm -rf of the untarred and the cloned trees.
    RmRf,
    /// make -j2 of a generated C project.
    Make,
    /// sqlite3 autocommit inserts (one transaction each, synchronous=FULL by default).
    Sqlite,
    /// db_bench fillrandom (its log written with write(2), no sync).
    FillRandom,
    /// db_bench readrandom of what fillrandom wrote.
    ReadRandom,
    /// db_bench fillsync (every put synced).
    FillSync,
    /// dd of a file with cold caches, 1 MiB at a time.
    SeqRead,
    /// Warm 4 KiB preads at random aligned offsets of that file (C loop).
    RandRead,
}

/// How a workload's figure reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Seconds,
    PerSecond,
    MiBPerSecond,
}

impl Unit {
    pub fn higher_is_better(self) -> bool {
        self != Unit::Seconds
    }

    pub fn name(self) -> &'static str {
        match self {
            Unit::Seconds => "s",
            Unit::PerSecond => "ops/s",
            Unit::MiBPerSecond => "MiB/s",
        }
    }
}

impl Workload {
    pub const ALL: [Workload; 11] = [
        Workload::Untar,
        Workload::Stat,
        Workload::GitClone,
        Workload::RmRf,
        Workload::Make,
        Workload::Sqlite,
        Workload::FillRandom,
        Workload::ReadRandom,
        Workload::FillSync,
        Workload::SeqRead,
        Workload::RandRead,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Workload::Untar => "untar",
            Workload::Stat => "stat",
            Workload::GitClone => "gitclone",
            Workload::RmRf => "rmrf",
            Workload::Make => "make",
            Workload::Sqlite => "sqlite",
            Workload::FillRandom => "fillrandom",
            Workload::ReadRandom => "readrandom",
            Workload::FillSync => "fillsync",
            Workload::SeqRead => "seqread",
            Workload::RandRead => "randread",
        }
    }

    pub fn parse(name: &str) -> Option<Workload> {
        Workload::ALL.into_iter().find(|w| w.name() == name)
    }

    pub fn unit(self) -> Unit {
        match self {
            Workload::Untar | Workload::GitClone | Workload::RmRf | Workload::Make => Unit::Seconds,
            Workload::SeqRead => Unit::MiBPerSecond,
            _ => Unit::PerSecond,
        }
    }
}

/// Sizes of the programs' work.
#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    /// db_bench keys for fillrandom (readrandom reads half as many).
    pub num: u64,
    /// db_bench synced puts of fillsync.
    pub sync_puts: u64,
    pub sqlite_rows: u64,
    pub stat_rounds: u64,
    pub reads: u64,
}

/// Where the programs run: the mount's root, the words that run a program attached to
/// the mount's instance (empty: run it plainly), and the daemon's CPU so far.
pub struct Place<'a> {
    pub root: &'a Path,
    pub prefix: &'a [OsString],
    pub daemon_cpu_ns: &'a dyn Fn() -> u64,
}

/// One measured figure: the workload's value in its unit and the daemon's CPU time.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub workload: Workload,
    pub value: f64,
    pub daemon_cpu_s: f64,
}

impl Place<'_> {
    fn command(&self, program: &str) -> Command {
        match self.prefix.split_first() {
            None => Command::new(program),
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(program);
                c
            }
        }
    }

    /// Runs `program args`; its standard output.
    fn run(&self, program: &str, args: &[&str]) -> Result<String, String> {
        let out = self
            .command(program)
            .args(args)
            .output()
            .map_err(|e| format!("{program}: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "{program} {} failed ({}): {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `sh -c script` (the prefix applies to the shell and so to every program in it).
    fn shell(&self, script: &str) -> Result<String, String> {
        self.run("sh", &["-c", script])
    }

    /// Times `f` and the daemon's CPU during it.
    fn timed<T>(&self, f: impl FnOnce() -> Result<T, String>) -> Result<(T, f64, f64), String> {
        let cpu = (self.daemon_cpu_ns)();
        let start = Instant::now();
        let t = f()?;
        let seconds = start.elapsed().as_secs_f64();
        Ok((t, seconds, ((self.daemon_cpu_ns)() - cpu) as f64 / 1e9))
    }
}

fn quote(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', "'\\''"))
}

/// The first number in `out`.
fn number(program: &str, out: &str) -> Result<f64, String> {
    out.split_whitespace()
        .find_map(|w| w.parse::<f64>().ok())
        .ok_or_else(|| format!("{program} printed no figure: {out:?}"))
}

/// db_bench's ops/s for `benchmark` in its output.
fn db_bench_rate(out: &str, benchmark: &str) -> Result<f64, String> {
    out.lines()
        .filter(|l| l.split_whitespace().next() == Some(benchmark))
        .find_map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            let at = words.iter().position(|w| w.starts_with("ops/sec"))?;
            words.get(at.checked_sub(1)?)?.parse::<f64>().ok()
        })
        .ok_or_else(|| format!("db_bench printed no rate for {benchmark}: {out}"))
}

/// Runs the wanted workloads in order on a fresh file system at `place`, calling
/// `drop_caches` where a workload needs cold caches (the mount is the same directory
/// after it). Returns every sample.
pub fn run_all(
    place: &Place,
    inputs: &Inputs,
    sizes: &Sizes,
    wanted: &[Workload],
    drop_caches: &mut dyn FnMut() -> Result<(), String>,
) -> Result<Vec<Sample>, String> {
    let want = |w| wanted.contains(&w);
    let m = place.root;
    let mut samples = Vec::new();
    let mut push = |workload, value, daemon_cpu_s| {
        samples.push(Sample {
            workload,
            value,
            daemon_cpu_s,
        })
    };
    let untar = format!(
        "tar -C {} -xf {} && sync -f {}",
        quote(m),
        quote(&inputs.tarball),
        quote(m)
    );
    if want(Workload::Untar) || want(Workload::Stat) {
        let ((), s, cpu) = place.timed(|| place.shell(&untar).map(drop))?;
        if want(Workload::Untar) {
            push(Workload::Untar, s, cpu);
        }
    }
    if want(Workload::Stat) {
        let list = m.join(".stat-list");
        place.shell(&format!(
            "find {} -path {} -prune -o -print > {}",
            quote(m),
            quote(&list),
            quote(&list)
        ))?;
        let rounds = sizes.stat_rounds.to_string();
        let (statloop, list_s) = (path_str(&inputs.statloop)?, path_str(&list)?);
        // One round to warm the caches, then the timed ones.
        place.run(statloop, &[list_s, "1"])?;
        let (out, _, cpu) = place.timed(|| place.run(statloop, &[list_s, &rounds]))?;
        push(Workload::Stat, number("stat loop", &out)?, cpu);
        std::fs::remove_file(&list).map_err(|e| format!("{}: {e}", list.display()))?;
    }
    if want(Workload::GitClone) {
        let repo = m.join("repo");
        let script = format!(
            "git clone -q {} {} && git -C {} status --short",
            quote(&inputs.repo),
            quote(&repo),
            quote(&repo)
        );
        let ((), s, cpu) = place.timed(|| place.shell(&script).map(drop))?;
        push(Workload::GitClone, s, cpu);
    }
    if want(Workload::RmRf) {
        let script = format!(
            "rm -rf {} {}",
            quote(&m.join("include")),
            quote(&m.join("repo"))
        );
        let ((), s, cpu) = place.timed(|| place.shell(&script).map(drop))?;
        push(Workload::RmRf, s, cpu);
    }
    if want(Workload::Make) {
        let proj = m.join("proj");
        place.shell(&format!(
            "cp -r {} {}",
            quote(&inputs.project),
            quote(&proj)
        ))?;
        let script = format!("make -s -j2 -C {}", quote(&proj));
        let ((), s, cpu) = place.timed(|| place.shell(&script).map(drop))?;
        push(Workload::Make, s, cpu);
    }
    if want(Workload::Sqlite) {
        let script = format!(
            "sqlite3 {} '.read {}'",
            quote(&m.join("t.db")),
            inputs.sql.display()
        );
        let ((), s, cpu) = place.timed(|| place.shell(&script).map(drop))?;
        push(Workload::Sqlite, sizes.sqlite_rows as f64 / s, cpu);
    }
    db_bench_all(place, sizes, &want, &mut push)?;
    if want(Workload::SeqRead) || want(Workload::RandRead) {
        reads(place, inputs, sizes, &want, drop_caches, &mut push)?;
    }
    Ok(samples)
}

/// The cold sequential read of a copied file after `drop_caches`, then warm random
/// reads of it.
fn reads(
    place: &Place,
    inputs: &Inputs,
    sizes: &Sizes,
    want: &dyn Fn(Workload) -> bool,
    drop_caches: &mut dyn FnMut() -> Result<(), String>,
    push: &mut dyn FnMut(Workload, f64, f64),
) -> Result<(), String> {
    let data = place.root.join("data");
    place.shell(&format!(
        "cp {} {} && sync {}",
        quote(&inputs.data),
        quote(&data),
        quote(&data)
    ))?;
    drop_caches()?;
    let mib = inputs.data_bytes as f64 / (1 << 20) as f64;
    let dd = format!("dd if={} of=/dev/null bs=1M status=none", quote(&data));
    let ((), s, cpu) = place.timed(|| place.shell(&dd).map(drop))?;
    if want(Workload::SeqRead) {
        push(Workload::SeqRead, mib / s, cpu);
    }
    if want(Workload::RandRead) {
        let reads = sizes.reads.to_string();
        let (randread, data_s) = (path_str(&inputs.randread)?, path_str(&data)?);
        let (out, _, cpu) = place.timed(|| place.run(randread, &[data_s, &reads]))?;
        push(Workload::RandRead, number("random reads", &out)?, cpu);
    }
    Ok(())
}

/// db_bench's workloads: fillrandom and readrandom in one invocation (readrandom reads
/// what fillrandom wrote), fillsync in another on a database of its own.
fn db_bench_all(
    place: &Place,
    sizes: &Sizes,
    want: &dyn Fn(Workload) -> bool,
    push: &mut dyn FnMut(Workload, f64, f64),
) -> Result<(), String> {
    let common = [
        "--compression_type=none",
        "--value_size=100",
        "--key_size=16",
        "--threads=1",
        "--write_buffer_size=4194304",
        "--cache_size=8388608",
    ];
    let m = place.root;
    if want(Workload::FillRandom) || want(Workload::ReadRandom) {
        let db = format!("--db={}", m.join("db").display());
        let num = format!("--num={}", sizes.num);
        let reads = format!("--reads={}", (sizes.num / 2).max(1));
        // readrandom reads what fillrandom wrote.
        let list = match want(Workload::ReadRandom) {
            true => "--benchmarks=fillrandom,readrandom",
            false => "--benchmarks=fillrandom",
        };
        let mut args = vec![db.as_str(), list, &num, &reads];
        args.extend(common);
        let (out, _, cpu) = place.timed(|| place.run("db_bench", &args))?;
        for w in [Workload::FillRandom, Workload::ReadRandom] {
            if want(w) {
                push(w, db_bench_rate(&out, w.name())?, cpu);
            }
        }
    }
    if want(Workload::FillSync) {
        let db = format!("--db={}", m.join("dbsync").display());
        // Every one of fillsync's --num puts is synced (its "(N ops)" note is
        // --num / 1000, not the count it wrote).
        let num = format!("--num={}", sizes.sync_puts);
        let mut args = vec![db.as_str(), "--benchmarks=fillsync", &num];
        args.extend(common);
        let (out, _, cpu) = place.timed(|| place.run("db_bench", &args))?;
        push(Workload::FillSync, db_bench_rate(&out, "fillsync")?, cpu);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workloads_parse_by_name_and_read_in_their_units() {
        for w in Workload::ALL {
            assert_eq!(Workload::parse(w.name()), Some(w));
        }
        assert_eq!(Workload::parse("tar"), None);
        assert!(!Workload::Untar.unit().higher_is_better());
        assert!(Workload::Sqlite.unit().higher_is_better());
        assert_eq!(Workload::SeqRead.unit(), Unit::MiBPerSecond);
    }

    #[test]
    fn db_bench_rates_are_read_from_its_lines() {
        let out = "fillrandom   :      32.568 micros/op 30704 ops/sec 1.628 seconds 50000 \
                   operations;    3.4 MB/s\nreadrandom   :       9.1 micros/op 109890 ops/sec;";
        assert_eq!(db_bench_rate(out, "fillrandom"), Ok(30704.0));
        assert_eq!(db_bench_rate(out, "readrandom"), Ok(109890.0));
        assert!(db_bench_rate(out, "fillsync").is_err());
        assert!(number("x", "no figure").is_err());
        assert_eq!(number("x", "123\n"), Ok(123.0));
    }
}
