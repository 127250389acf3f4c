//! `augefs bench apps [--dir DIR] [--targets ext4,fuse,attached] [--workloads ...]
//! [--runs 3] [--options NAME=OPTS] [--quick] [--json] [--json-file F] [--keep]`: real
//! programs on a FUSE mount of augefs, attached to its instance, and on kernel file
//! systems (loop devices over image files in the same directory), in one run: untar of
//! /usr/include + `sync -f`, a warm lstat loop over the untarred tree, git clone + git
//! status, rm -rf of both trees, make -j2 of a generated C project, sqlite3 autocommit
//! inserts, db_bench fillrandom, readrandom and fillsync, a cold 1 MiB sequential read
//! and warm 4 KiB random reads of a file.
//!
//! Per run the targets take turns in going first; each starts on a fresh file system.
//! Per workload and target: the median of the runs, their spread, the ratio to the best
//! kernel file system among the targets (>1 is faster) and the serving daemon's CPU.
//!
//! Targets: ext2, ext4, xfs, btrfs; any name beginning with `fuse` is `augefs mount` of
//! an image of its own; any name beginning with `attached` is such a mount whose
//! programs run attached to its instance (`augefs run --mount DIR -- PROGRAM`).
//! `--options NAME=OPTS` gives target NAME `augefs mount -o OPTS` (for example
//! `fuse_wb=writeback_cache` beside `fuse`).
//!
//! Invariants:
//! - The inputs are made once, before any target runs (`inputs.rs`), so every target
//!   reads the same bytes from the page cache.
//! - A program that fails ends the run with its error; no figure is made up.
//! - Images carry the process id and are removed at the end unless `--keep`; mounts,
//!   daemons and loop devices are undone by guards (also on a signal).

mod inputs;
pub mod workloads;

use super::bench_fs::target::{self, InProcess};
use crate::image;
use crate::kernelfs::{self, KERNEL_FS};
use crate::loopdev::LoopDevice;
use crate::options::Common;
use crate::scratch::Scratch;
use crate::stats::spread;
use platform::units::{human, parse_size};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use workloads::{Place, Sample, Sizes, Workload};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Directory for the images and inputs, on the disk under test (created if missing).
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
    /// Targets, in turn: ext2, ext4, xfs, btrfs, fuse* (a FUSE mount), attached*
    /// (programs attached to a mount's instance).
    #[arg(long, value_delimiter = ',', default_value = "ext4,fuse,attached")]
    pub targets: Vec<String>,
    /// Workloads, in their fixed order: untar, stat, gitclone, rmrf, make, sqlite,
    /// fillrandom, readrandom, fillsync, seqread, randread (default: all).
    #[arg(long, value_delimiter = ',')]
    pub workloads: Vec<String>,
    /// `augefs mount -o` options of one target: NAME=OPTS (repeatable).
    #[arg(long = "options")]
    pub options: Vec<String>,
    /// db_bench keys of fillrandom (readrandom reads half as many).
    #[arg(long, value_parser = crate::options::parse_count)]
    pub num: Option<u64>,
    /// Synced puts of db_bench fillsync.
    #[arg(long, value_parser = crate::options::parse_count)]
    pub sync_puts: Option<u64>,
    /// Size of each image.
    #[arg(long, value_parser = parse_size, default_value = "4GiB")]
    pub image_size: u64,
    /// Small inputs (a part of the header tree, a few thousand keys): for tests; the
    /// numbers are indicative only.
    #[arg(long)]
    pub quick: bool,
    /// --runs, --backend, --json, --json-file, --keep (images and inputs).
    #[command(flatten)]
    pub common: Common,
}

/// What a target is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    Kernel(&'static str),
    Fuse,
    Attached,
}

fn kind_of(name: &str) -> Option<Kind> {
    if let Some(fs) = KERNEL_FS.iter().find(|k| **k == name) {
        return Some(Kind::Kernel(fs));
    }
    if name.starts_with("fuse") {
        return Some(Kind::Fuse);
    }
    name.starts_with("attached").then_some(Kind::Attached)
}

struct Plan {
    targets: Vec<(String, Kind)>,
    workloads: Vec<Workload>,
    options: BTreeMap<String, String>,
    sizes: Sizes,
    recipe: inputs::Recipe,
}

fn plan(args: &Args) -> Result<Plan, String> {
    let mut targets = Vec::new();
    for name in &args.targets {
        let kind = kind_of(name).ok_or_else(|| {
            format!(
                "--targets: unknown target {name:?} ({}, fuse*, attached*)",
                KERNEL_FS.join(", ")
            )
        })?;
        if targets.iter().any(|(n, _)| n == name) {
            return Err(format!("--targets: {name:?} named twice"));
        }
        targets.push((name.clone(), kind));
    }
    if targets.is_empty() {
        return Err("--targets must name at least one target".into());
    }
    let workloads = match args.workloads.is_empty() {
        true => Workload::ALL.to_vec(),
        false => {
            let mut w = Vec::new();
            for name in &args.workloads {
                w.push(
                    Workload::parse(name)
                        .ok_or_else(|| format!("--workloads: unknown workload {name:?}"))?,
                );
            }
            Workload::ALL
                .into_iter()
                .filter(|x| w.contains(x))
                .collect()
        }
    };
    let mut options = BTreeMap::new();
    for o in &args.options {
        let (name, opts) = o
            .split_once('=')
            .ok_or_else(|| format!("--options {o:?}: expected NAME=OPTS"))?;
        match targets.iter().find(|(n, _)| n == name) {
            Some((_, Kind::Fuse | Kind::Attached)) => {
                options.insert(name.to_string(), opts.to_string());
            }
            _ => {
                return Err(format!(
                    "--options: {name:?} is no fuse* or attached* target"
                ))
            }
        }
    }
    if args.common.runs == 0 {
        return Err("--runs must be at least 1".into());
    }
    crate::options::check_image_size(args.image_size)?;
    let quick = args.quick;
    let sizes = Sizes {
        num: args.num.unwrap_or(if quick { 5_000 } else { 200_000 }),
        sync_puts: args.sync_puts.unwrap_or(if quick { 200 } else { 2_000 }),
        sqlite_rows: if quick { 50 } else { 1_000 },
        stat_rounds: if quick { 2 } else { 20 },
        reads: if quick { 5_000 } else { 200_000 },
    };
    if sizes.num == 0 || sizes.sync_puts == 0 {
        return Err("--num and --sync-puts must be positive".into());
    }
    let recipe = inputs::Recipe {
        tar_tree: if quick { "linux/netfilter" } else { "." },
        repo_tree: if quick { "linux/netfilter" } else { "linux" },
        sqlite_rows: sizes.sqlite_rows,
        data_bytes: if quick { 8 << 20 } else { 256 << 20 },
    };
    Ok(Plan {
        targets,
        workloads,
        options,
        sizes,
        recipe,
    })
}

/// The programs every run needs; the first one missing.
fn missing_program(workloads: &[Workload]) -> Option<&'static str> {
    let mut needed = vec!["sh", "tar", "cc", "git", "cp", "rm"];
    for (w, program) in [
        (Workload::Make, "make"),
        (Workload::Sqlite, "sqlite3"),
        (Workload::FillRandom, "db_bench"),
        (Workload::ReadRandom, "db_bench"),
        (Workload::FillSync, "db_bench"),
        (Workload::SeqRead, "dd"),
    ] {
        if workloads.contains(&w) {
            needed.push(program);
        }
    }
    needed
        .into_iter()
        .find(|p| !crate::loopdev::have_program(p))
}

/// One target, made ready to run.
struct Slot {
    name: String,
    kind: Kind,
    target: Box<dyn InProcess>,
}

pub fn run(args: Args) -> Result<(), String> {
    let doc = measure_json(&args)?;
    args.common.emit_value(&doc, || print!("{}", table(&doc)))
}

/// Runs every target and workload; the JSON document (`bench report` calls this).
pub fn measure_json(args: &Args) -> Result<Value, String> {
    let plan = plan(args)?;
    if let Some(p) = missing_program(&plan.workloads) {
        return Err(format!("{p} is not installed (bench apps runs it)"));
    }
    let needs_root = plan
        .targets
        .iter()
        .any(|(_, k)| matches!(k, Kind::Kernel(_)));
    if let Some(why) = needs_root.then(kernelfs::obstacle).flatten() {
        return Err(format!("kernel targets: {why}"));
    }
    let scratch = Scratch::create(&args.dir)?.keeping(args.common.keep);
    let input_dir = scratch.named("apps-inputs", "");
    let mut images: Vec<PathBuf> = Vec::new();
    let result = (|| -> Result<Vec<(String, Sample)>, String> {
        std::fs::create_dir(&input_dir).map_err(|e| format!("{}: {e}", input_dir.display()))?;
        eprintln!(
            "augefs bench apps: making the inputs in {}",
            input_dir.display()
        );
        let inputs = inputs::make(&input_dir, plan.recipe)?;
        let mut slots = slots(args, &plan, &scratch, &mut images)?;
        let samples = run_turns(args, &plan, &inputs, &mut slots)?;
        for s in &mut slots {
            s.target.finish()?;
        }
        Ok(samples)
    })();
    if args.common.keep {
        eprintln!(
            "augefs bench apps: kept {} and the images",
            input_dir.display()
        );
    } else {
        let files: Vec<&Path> = images.iter().map(PathBuf::as_path).collect();
        scratch.remove(&files, &[&input_dir]);
    }
    Ok(document(args, &plan, &result?))
}

/// The targets' file systems (images written once, loop device attached).
fn slots(
    args: &Args,
    plan: &Plan,
    scratch: &Scratch,
    images: &mut Vec<PathBuf>,
) -> Result<Vec<Slot>, String> {
    let mut device: Option<Rc<LoopDevice>> = None;
    let mut slots = Vec::new();
    for (name, kind) in &plan.targets {
        let target: Box<dyn InProcess> = match kind {
            Kind::Kernel(fs) => {
                let dev = match &device {
                    Some(d) => d.clone(),
                    None => {
                        let img = scratch.named("apps-kernel", ".img");
                        images.push(img.clone());
                        image::prepare(&img, args.image_size, args.common.backend)?;
                        let d = Rc::new(LoopDevice::attach(&img)?);
                        device = Some(d.clone());
                        d
                    }
                };
                let mnt = scratch.named(&format!("apps-{name}"), ".mnt");
                Box::new(target::Kernel::new(fs, dev, &mnt)?)
            }
            Kind::Fuse | Kind::Attached => {
                let img = scratch.named(&format!("apps-{name}"), ".img");
                images.push(img.clone());
                image::prepare(&img, args.image_size, args.common.backend)?;
                let mnt = scratch.named(&format!("apps-{name}"), ".mnt");
                let fuse = target::Fuse::new(&img, args.common.backend, &mnt)?
                    .with_options(plan.options.get(name).cloned());
                Box::new(fuse)
            }
        };
        slots.push(Slot {
            name: name.clone(),
            kind: kind.clone(),
            target,
        });
    }
    eprintln!(
        "augefs bench apps: images of {} in {}",
        human(args.image_size),
        args.dir.display()
    );
    Ok(slots)
}

/// Every run: the targets take turns in going first.
fn run_turns(
    args: &Args,
    plan: &Plan,
    inputs: &inputs::Inputs,
    slots: &mut [Slot],
) -> Result<Vec<(String, Sample)>, String> {
    let augefs = crate::siblings::augefs()?;
    let mut all = Vec::new();
    let n = slots.len();
    for run in 0..args.common.runs as usize {
        for k in 0..n {
            let slot = &mut slots[(k + run) % n];
            eprintln!(
                "augefs bench apps: run {}/{}: {}",
                run + 1,
                args.common.runs,
                slot.name
            );
            slot.target.fresh()?;
            let root = slot
                .target
                .root()
                .ok_or("a target without a directory")?
                .to_path_buf();
            let prefix: Vec<OsString> = match slot.kind {
                Kind::Attached => vec![
                    augefs.clone().into(),
                    "run".into(),
                    "--mount".into(),
                    root.clone().into(),
                    "--".into(),
                ],
                _ => Vec::new(),
            };
            // The CPU counter is read between programs and the caches dropped by one,
            // never both at once.
            let target = std::cell::RefCell::new(&mut slot.target);
            let cpu = || target.borrow().helper_cpu_ns();
            let place = Place {
                root: &root,
                prefix: &prefix,
                daemon_cpu_ns: &cpu,
            };
            let mut drop_caches = || {
                target.borrow_mut().drop_caches()?;
                kernelfs::drop_caches()
            };
            let samples = workloads::run_all(
                &place,
                inputs,
                &plan.sizes,
                &plan.workloads,
                &mut drop_caches,
            )?;
            all.extend(samples.into_iter().map(|s| (slot.name.clone(), s)));
            slot.target.finish()?;
        }
    }
    Ok(all)
}

/// The JSON document: per workload and target every run's value, the median and
/// spread, the daemon's CPU, and the ratio to the best kernel file system measured.
fn document(args: &Args, plan: &Plan, samples: &[(String, Sample)]) -> Value {
    let mut rows = Vec::new();
    for w in &plan.workloads {
        let unit = w.unit();
        let mut per_target = serde_json::Map::new();
        let mut medians = BTreeMap::new();
        for (name, _) in &plan.targets {
            let of: Vec<&Sample> = samples
                .iter()
                .filter(|(n, s)| n == name && s.workload == *w)
                .map(|(_, s)| s)
                .collect();
            let values: Vec<f64> = of.iter().map(|s| s.value).collect();
            let cpu: Vec<f64> = of.iter().map(|s| s.daemon_cpu_s).collect();
            let Some(v) = spread(&values) else { continue };
            medians.insert(name.clone(), v.median);
            per_target.insert(
                name.clone(),
                json!({
                    "values": values,
                    "median": v.median,
                    "min": v.min,
                    "max": v.max,
                    "daemon_cpu_s": spread(&cpu).map(|c| c.median),
                }),
            );
        }
        let better = |a: f64, b: f64| match unit.higher_is_better() {
            true => a > b,
            false => a < b,
        };
        let baseline = plan
            .targets
            .iter()
            .filter(|(_, k)| matches!(k, Kind::Kernel(_)))
            .filter_map(|(n, _)| medians.get(n).map(|m| (n.clone(), *m)))
            .reduce(|a, b| if better(b.1, a.1) { b } else { a });
        let ratios: serde_json::Map<String, Value> = match &baseline {
            Some((_, base)) => medians
                .iter()
                .map(|(n, m)| {
                    let r = match unit.higher_is_better() {
                        true => m / base,
                        false => base / m,
                    };
                    (n.clone(), json!(r))
                })
                .collect(),
            None => serde_json::Map::new(),
        };
        rows.push(json!({
            "workload": w.name(),
            "unit": unit.name(),
            "higher_is_better": unit.higher_is_better(),
            "targets": per_target,
            "baseline": baseline.map(|b| b.0),
            "ratios": ratios,
        }));
    }
    json!({
        "runs": args.common.runs,
        "quick": args.quick,
        "targets": plan.targets.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(),
        "options": plan.options,
        "sizes": {
            "num": plan.sizes.num,
            "sync_puts": plan.sizes.sync_puts,
            "sqlite_rows": plan.sizes.sqlite_rows,
            "stat_rounds": plan.sizes.stat_rounds,
            "reads": plan.sizes.reads,
            "data_bytes": plan.recipe.data_bytes,
            "tar_tree": format!("/usr/include/{}", plan.recipe.tar_tree),
        },
        "workloads": rows,
    })
}

/// The text table of a document (also what `bench report` shows).
pub fn table(doc: &Value) -> String {
    let targets: Vec<&str> = doc["targets"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut out = format!(
        "median of {} run(s) (min-max); time in s, or ops/s (db_bench, sqlite3 inserts, \
         stat, randread), or MiB/s (seqread); x: ratio to the best kernel file system \
         here (>1 is faster); CPU: the serving daemon's, in s\n",
        doc["runs"]
    );
    out.push_str(&format!("{:<11}", "workload"));
    for t in &targets {
        out.push_str(&format!("{t:>26}{:>8}{:>7}", "x", "CPU"));
    }
    out.push('\n');
    for row in doc["workloads"].as_array().into_iter().flatten() {
        out.push_str(&format!("{:<11}", row["workload"].as_str().unwrap_or("?")));
        let seconds = row["unit"] == "s";
        let fmt = |v: f64| match seconds {
            true => format!("{v:.3}"),
            false => format!("{v:.0}"),
        };
        for t in &targets {
            let cell = &row["targets"][*t];
            let (Some(m), Some(lo), Some(hi)) = (
                cell["median"].as_f64(),
                cell["min"].as_f64(),
                cell["max"].as_f64(),
            ) else {
                out.push_str(&format!("{:>26}{:>8}{:>7}", "-", "", ""));
                continue;
            };
            out.push_str(&format!(
                "{:>26}",
                format!("{} ({}-{})", fmt(m), fmt(lo), fmt(hi))
            ));
            match row["ratios"][*t].as_f64() {
                Some(r) => out.push_str(&format!("{:>7.2}x", r)),
                None => out.push_str(&format!("{:>8}", "")),
            }
            match cell["daemon_cpu_s"].as_f64() {
                Some(c) if !matches!(kind_of(t), Some(Kind::Kernel(_))) => {
                    out.push_str(&format!("{c:>7.2}"))
                }
                _ => out.push_str(&format!("{:>7}", "")),
            }
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::parse_args;

    fn args(words: &[&str]) -> Args {
        parse_args::<Args, _>(words).expect("arguments parse")
    }

    #[test]
    fn targets_workloads_and_options_are_checked() {
        let p = plan(&args(&["--options", "fuse=writeback_cache"])).expect("default plan");
        assert_eq!(p.targets.len(), 3);
        assert_eq!(p.workloads, Workload::ALL);
        assert_eq!(p.options["fuse"], "writeback_cache");
        let p = plan(&args(&["--workloads", "rmrf,untar"])).expect("plan");
        assert_eq!(
            p.workloads,
            [Workload::Untar, Workload::RmRf],
            "in the fixed order"
        );
        for (words, message) in [
            (vec!["--targets", "zfs"], "unknown target"),
            (vec!["--targets", "fuse,fuse"], "named twice"),
            (vec!["--workloads", "tar"], "unknown workload"),
            (vec!["--options", "ext4=ro"], "no fuse* or attached*"),
            (vec!["--options", "fuse"], "NAME=OPTS"),
            (vec!["--runs", "0"], "--runs"),
        ] {
            let e = plan(&args(&words)).err().expect("refused");
            assert!(e.contains(message), "{words:?}: {e}");
        }
    }

    #[test]
    fn ratios_are_to_the_best_kernel_file_system() {
        let p = plan(&args(&[
            "--targets",
            "ext4,xfs,fuse",
            "--workloads",
            "untar,sqlite",
        ]))
        .expect("plan");
        let sample = |workload, value| Sample {
            workload,
            value,
            daemon_cpu_s: 0.5,
        };
        let samples = vec![
            ("ext4".to_string(), sample(Workload::Untar, 1.0)),
            ("xfs".to_string(), sample(Workload::Untar, 2.0)),
            ("fuse".to_string(), sample(Workload::Untar, 4.0)),
            ("ext4".to_string(), sample(Workload::Sqlite, 100.0)),
            ("xfs".to_string(), sample(Workload::Sqlite, 300.0)),
            ("fuse".to_string(), sample(Workload::Sqlite, 150.0)),
        ];
        let doc = document(&args(&[]), &p, &samples);
        let untar = &doc["workloads"][0];
        assert_eq!(untar["baseline"], "ext4", "the shorter time is the best");
        assert_eq!(untar["ratios"]["fuse"], 0.25);
        let sqlite = &doc["workloads"][1];
        assert_eq!(sqlite["baseline"], "xfs", "the higher rate is the best");
        assert_eq!(sqlite["ratios"]["fuse"], 0.5);
        let text = table(&doc);
        assert!(text.contains("0.25x") && text.contains("0.50x"), "{text}");
    }
}
