//! What `augefs bench report` runs: one step per sub-run, each the argument words of an
//! existing subcommand (`bench fs`, `bench apps`, `amplify`, `bench metadb`) or of the
//! fio baseline,
//! so that the report can print the command that repeats it.
//!
//! Invariants:
//! - Every step's words parse as its subcommand's arguments (tested below), and the
//!   JSON file a step writes is named after the step.
//! - `--quick` keeps the whole report near two minutes on two cores (a debug build):
//!   one run each, short runs, few workloads, one thread; its numbers are indicative
//!   only and the report says so.
//! - bench fs steps name every target; a target the machine cannot run (no root, no
//!   mkfs, no /dev/fuse, no interposer library) is skipped by bench fs with a note.

use std::path::Path;

/// Which library function a step calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    BenchFs,
    Amplify,
    BenchMetadb,
    Fio,
    Apps,
}

impl Kind {
    /// The command line a user types to repeat the step (fio's step is part of this
    /// command only).
    pub fn command(self) -> &'static str {
        match self {
            Kind::BenchFs => "augefs bench fs",
            Kind::Amplify => "augefs amplify",
            Kind::BenchMetadb => "augefs bench metadb",
            Kind::Fio => "(bench report's fio baseline)",
            Kind::Apps => "augefs bench apps",
        }
    }
}

/// One sub-run.
#[derive(Debug, Clone)]
pub struct Step {
    /// File stem of its JSON document, e.g. `bench-fs-metadata`.
    pub name: &'static str,
    pub title: &'static str,
    pub kind: Kind,
    pub argv: Vec<String>,
}

/// The settings every step takes from the report's arguments.
#[derive(Debug, Clone)]
pub struct Settings<'a> {
    pub dir: &'a Path,
    pub plot_dir: &'a Path,
    pub quick: bool,
    pub runs: u32,
    /// Seconds per bench fs and fio run.
    pub seconds: f64,
    pub threads: &'a [usize],
    pub pmr_dir: &'a Path,
    pub pmr_latency_ns_per_line: u64,
    /// fio is installed: its baseline runs.
    pub fio: bool,
}

/// The bench fs step whose cells are processes (`--procs`), judged apart.
pub const PROCS_STEP: &str = "bench-fs-procs";

/// Every target of the comparison (issue 7).
const TARGETS: &str = "api,api-view,api-pmr,interposer,attached,fuse,ext2,ext4,xfs,btrfs";
/// The quick run's targets: every augefs target and one kernel file system.
const QUICK_TARGETS: &str = "api,api-view,api-pmr,interposer,attached,fuse,ext4";

/// Thread counts of the full run: 1, 2, 4, ... up to the CPU count, at most 8.
pub fn default_threads(cpus: usize) -> Vec<usize> {
    let mut threads = vec![1];
    while threads.len() < 4 && threads[threads.len() - 1] * 2 <= cpus.max(1) {
        threads.push(threads[threads.len() - 1] * 2);
    }
    threads
}

fn words(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn join<T: ToString>(items: &[T]) -> String {
    items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// The bench fs workloads of each step: (name, title, workloads, io sizes).
fn fs_steps(quick: bool) -> Vec<(&'static str, &'static str, &'static str, &'static str)> {
    if quick {
        return vec![(
            "bench-fs",
            "File-system workloads (bench fs)",
            "create+fsync,append,randread,varmail",
            "4K",
        )];
    }
    vec![
        (
            "bench-fs-metadata",
            "Metadata workloads (bench fs, FxMark-like)",
            "create+fsync,mkdir+fsync,unlink+fsync,rename+fsync,create,stat",
            "4K",
        ),
        (
            "bench-fs-data",
            "Data workloads, 4 KiB (bench fs)",
            "append,overwrite,randread,randread-cold",
            "4K",
        ),
        (
            "bench-fs-data-1M",
            "Data workloads, 1 MiB (bench fs)",
            "append,seqread-cold",
            "1M",
        ),
        (
            "bench-fs-filebench",
            "Filebench-like personalities (bench fs)",
            "varmail,fileserver",
            "4K",
        ),
    ]
}

/// The steps, in the order they run.
pub fn steps(s: &Settings) -> Vec<Step> {
    let dir = s.dir.to_string_lossy().into_owned();
    let runs = s.runs.to_string();
    let pmr_dir = s.pmr_dir.to_string_lossy().into_owned();
    let latency = s.pmr_latency_ns_per_line.to_string();
    let targets = if s.quick { QUICK_TARGETS } else { TARGETS };
    let mut steps: Vec<Step> = fs_steps(s.quick)
        .into_iter()
        .map(|(name, title, workloads, io_sizes)| {
            let mut argv = words(&["--target", targets, "--workload", workloads]);
            argv.extend(words(&["--io-size", io_sizes, "--threads"]));
            argv.push(join(s.threads));
            argv.extend(words(&[
                "--seconds",
                &s.seconds.to_string(),
                "--runs",
                &runs,
            ]));
            argv.extend(words(&["--dir", &dir, "--plot"]));
            argv.push(s.plot_dir.to_string_lossy().into_owned());
            argv.extend(words(&[
                "--pmr-dir",
                &pmr_dir,
                "--pmr-latency-ns",
                &latency,
            ]));
            if s.quick {
                argv.push("--quick".to_string());
            }
            Step {
                name,
                title,
                kind: Kind::BenchFs,
                argv,
            }
        })
        .collect();
    if s.fio {
        let seconds = s.seconds.ceil().max(1.0).to_string();
        let size = if s.quick { "64M" } else { "1G" };
        steps.push(Step {
            name: "fio",
            title: "fio on an image file in the same directory",
            kind: Kind::Fio,
            argv: words(&[
                "--dir",
                &dir,
                "--size",
                size,
                "--seconds",
                &seconds,
                "--runs",
                &runs,
            ]),
        });
    }
    steps.extend(mount_steps(s, &dir, &runs));
    let mut amplify = words(&["--dir", &dir, "--runs", &runs]);
    if s.quick {
        amplify.extend(words(&["--quick", "--fs", "augefs,ext4"]));
    }
    steps.push(Step {
        name: "amplify",
        title: "IO amplification (amplify, io-amplification.txt's workloads)",
        kind: Kind::Amplify,
        argv: amplify,
    });
    let mut metadb = words(&["--dir", &dir, "--runs", &runs, "--pmr-dir", &pmr_dir]);
    metadb.extend(words(&["--pmr-latency-ns", &latency]));
    let sizes = match s.quick {
        true => {
            "--figures put --threads 1 --seconds 0.2 --image-size 128M --pmr-size 4M --keys 20K"
        }
        false => "--threads 1,2 --seconds 1 --image-size 1G --keys 500K --gets 50K",
    };
    metadb.extend(sizes.split_whitespace().map(String::from));
    steps.push(Step {
        name: "bench-metadb",
        title: "MetaDB beside fjall (bench metadb)",
        kind: Kind::BenchMetadb,
        argv: metadb,
    });
    steps
}

/// The steps of the mounts' goals (issues 30 and 31): attached clients as processes of
/// one thread each (two against one), then real programs on ext4, the FUSE mount and
/// attached processes.
fn mount_steps(s: &Settings, dir: &str, runs: &str) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut procs = words(&[
        "--target",
        "attached",
        "--procs",
        "--workload",
        "create+fsync",
    ]);
    procs.extend(words(&["--io-size", "4K", "--threads", "1,2", "--seconds"]));
    procs.extend(words(&[
        &s.seconds.to_string(),
        "--runs",
        runs,
        "--dir",
        dir,
    ]));
    if s.quick {
        procs.push("--quick".to_string());
    }
    steps.push(Step {
        name: PROCS_STEP,
        title: "Attached processes, one thread each (bench fs --procs)",
        kind: Kind::BenchFs,
        argv: procs,
    });
    let mut apps = words(&["--dir", dir, "--runs", runs]);
    if s.quick {
        apps.extend(words(&["--quick", "--image-size", "1GiB"]));
    }
    steps.push(Step {
        name: "apps",
        title: "Real programs on the mount and attached (bench apps)",
        kind: Kind::Apps,
        argv: apps,
    });
    steps
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::{amplify, apps, bench_fs, bench_metadb};
    use crate::options::parse_args;

    fn settings(quick: bool, fio: bool) -> Settings<'static> {
        Settings {
            dir: Path::new("/d"),
            plot_dir: Path::new("/d/plots"),
            quick,
            runs: 3,
            seconds: 1.5,
            threads: &[1, 2],
            pmr_dir: Path::new("/dev/shm"),
            pmr_latency_ns_per_line: 900,
            fio,
        }
    }

    #[test]
    fn every_step_parses_as_its_subcommand() {
        for (quick, fio) in [(false, true), (true, false)] {
            let steps = steps(&settings(quick, fio));
            assert_eq!(steps.iter().any(|s| s.kind == Kind::Fio), fio);
            for step in &steps {
                let parsed = match step.kind {
                    Kind::BenchFs => parse_args::<bench_fs::Args, _>(&step.argv).map(|a| {
                        assert_eq!(a.pmr.latency_ns_per_line, 900);
                        assert_eq!(a.quick, quick);
                    }),
                    Kind::Amplify => parse_args::<amplify::Args, _>(&step.argv).map(|_| ()),
                    Kind::BenchMetadb => {
                        parse_args::<bench_metadb::Args, _>(&step.argv).map(|_| ())
                    }
                    Kind::Fio => parse_args::<super::super::fio_baseline::Args, _>(&step.argv)
                        .map(|a| assert_eq!(a.seconds, 2)),
                    Kind::Apps => {
                        parse_args::<apps::Args, _>(&step.argv).map(|a| assert_eq!(a.quick, quick))
                    }
                };
                assert!(parsed.is_ok(), "{}: {parsed:?}", step.name);
            }
        }
        let full = steps(&settings(false, false));
        let metadata = &full[0];
        assert!(metadata
            .argv
            .join(" ")
            .contains("--target api,api-view,api-pmr,interposer,attached,fuse"));
        assert!(metadata.argv.join(" ").contains("--threads 1,2"));
    }

    #[test]
    fn threads_double_up_to_the_cpus() {
        assert_eq!(default_threads(1), [1]);
        assert_eq!(default_threads(2), [1, 2]);
        assert_eq!(default_threads(6), [1, 2, 4]);
        assert_eq!(default_threads(64), [1, 2, 4, 8]);
    }
}
