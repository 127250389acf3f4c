//! The `interposer` and `attached` targets of `bench fs`: each cell runs in a child
//! process, `augefs-bench fs-worker`, started through `augefs run --image IMG --prefix
//! /augefs` (the `augefs` next to this binary), so that its std::fs calls on
//! `/augefs/...` reach the image through the LD_PRELOAD interposer in the worker
//! itself; or (`attached`) through `augefs run --mount MNT`, so that they reach the
//! instance of an `augefs mount` of the image directly, without FUSE. The worker runs the same setup and timed run as the in-process targets
//! (`workload.rs`) and prints one result line that this side parses.
//!
//! Invariants:
//! - The image is formatted by this process before each cell; a worker process mounts
//!   it when it first touches the prefix, so a new worker starts with cold caches:
//!   cold cases run setup and the timed run in two workers.
//! - A call the interposer does not support fails that cell with the worker's error
//!   (and the interposer's log lines), never the whole command.
//! - CPU time is the worker's own over its timed run (the file system runs inside it),
//!   plus, for `attached`, the mount daemon's over the timed run's worker; device bytes
//!   are not visible from here.

use super::ops::{Fs, PosixFs};
use super::target::format_image;
use super::workload::{self, Measured, Spec};
use crate::siblings;
use device::BackendChoice;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Paths under this prefix go to augefs in the worker.
pub const PREFIX: &str = "/augefs";

/// Starts the worker's result line on its stdout.
const RESULT_LINE: &str = "augefs-bench-fs-result ";

/// Lines of a failed worker's stderr quoted in the error.
const STDERR_LINES_QUOTED: usize = 4;

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Make what the case needs and make it durable.
    Setup,
    /// The timed run (setup made by an earlier worker).
    Run,
    /// Both, in one process.
    All,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Setup => "setup",
            Phase::Run => "run",
            Phase::All => "all",
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct WorkerArgs {
    /// The cell (a JSON `Spec`).
    #[arg(long)]
    pub spec: String,
    #[arg(long, value_enum)]
    pub phase: Phase,
    /// The file system's root directory.
    #[arg(long, default_value = PREFIX)]
    pub root: PathBuf,
}

#[derive(Debug, Serialize, Deserialize)]
enum Reply {
    Done(Option<Measured>),
    Failed(String),
}

/// `augefs-bench fs-worker`: one phase of one cell on `--root`, its result on stdout.
pub fn worker(args: WorkerArgs) -> Result<(), String> {
    let spec: Spec =
        serde_json::from_str(&args.spec).map_err(|e| format!("--spec is not a cell: {e}"))?;
    let fs = PosixFs { root: args.root };
    let result = (|| {
        if args.phase != Phase::Run {
            workload::setup(&fs, &spec)?;
            fs.sync()?;
        }
        match args.phase {
            Phase::Setup => Ok(None),
            _ => workload::measure(&fs, &spec).map(Some),
        }
    })();
    let reply = match &result {
        Ok(m) => Reply::Done(m.clone()),
        Err(e) => Reply::Failed(e.clone()),
    };
    let line = serde_json::to_string(&reply).expect("JSON of plain values");
    println!("{RESULT_LINE}{line}");
    result.map(|_| ())
}

/// The parent's side: formats the image and runs the workers.
#[derive(Debug)]
pub struct Interposer {
    image: PathBuf,
    backend: BackendChoice,
    /// `augefs`, which runs the worker under the interposer.
    augefs: PathBuf,
    /// This binary, the worker.
    exe: PathBuf,
}

/// How a worker process starts and reaches the file system.
#[derive(Clone, Copy)]
pub enum Via<'a> {
    /// It attaches the image itself (`augefs run --image`).
    Image(&'a Path),
    /// It attaches to the instance of the mount at `mount` (`augefs run --mount`).
    Mount(&'a Path),
    /// It runs as it is, on directories the kernel serves (a kernel file system, a
    /// FUSE mount).
    Kernel,
}

/// Where each of a cell's processes works: the root itself for one process, else a
/// directory of its own under it for each.
pub fn process_roots(root: &Path, spec: &Spec, procs: bool) -> Result<Vec<PathBuf>, String> {
    if !procs || spec.threads == 1 {
        return Ok(vec![root.to_path_buf()]);
    }
    (0..spec.threads)
        .map(|i| {
            let dir = root.join(format!("p{i}"));
            std::fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            Ok(dir)
        })
        .collect()
}

/// What a file system serving processes is asked between phases.
pub struct Hooks<'a> {
    /// Runs between setup and the timed run (a cold case drops every cache here).
    pub after_setup: &'a mut dyn FnMut() -> Result<(), String>,
    /// CPU time so far of the processes serving the file system.
    pub helper_cpu_ns: &'a dyn Fn() -> u64,
}

/// A cell run as one worker process per root: setup in each, the caches dropped for a
/// cold case, then the timed runs of every root at once, merged.
pub fn run_processes(
    augefs: Option<&Path>,
    exe: &Path,
    via: Via<'_>,
    roots: &[PathBuf],
    spec: &Spec,
    hooks: Hooks<'_>,
) -> Result<Measured, String> {
    let one = Spec {
        threads: if roots.len() > 1 { 1 } else { spec.threads },
        ..spec.clone()
    };
    for root in roots {
        run_worker(augefs, exe, via, Some(root), &one, Phase::Setup)?;
    }
    (hooks.after_setup)()?;
    let before = (hooks.helper_cpu_ns)();
    let runs: Vec<Result<Option<Measured>, String>> = std::thread::scope(|s| {
        let workers: Vec<_> = roots
            .iter()
            .map(|root| {
                let one = &one;
                s.spawn(move || run_worker(augefs, exe, via, Some(root), one, Phase::Run))
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join()
                    .unwrap_or_else(|_| Err("a worker thread panicked".into()))
            })
            .collect()
    });
    let mut all = Vec::new();
    for r in runs {
        all.push(r?.expect("a timed phase measures"));
    }
    let mut run = merge(&all);
    run.cpu_ns += (hooks.helper_cpu_ns)().saturating_sub(before);
    Ok(run)
}

impl Interposer {
    /// Fails (the target is skipped) without the interposer library.
    pub fn new(image: &Path, backend: BackendChoice) -> Result<Interposer, String> {
        siblings::preload_lib()?;
        Ok(Interposer {
            image: image.to_path_buf(),
            backend,
            augefs: siblings::augefs()?,
            exe: siblings::this_exe()?,
        })
    }

    pub fn run_cell(&self, spec: &Spec) -> Result<Measured, String> {
        format_image(&self.image, self.backend)?;
        let measured = if spec.case.cold {
            self.worker(spec, Phase::Setup)?;
            self.worker(spec, Phase::Run)?
        } else {
            self.worker(spec, Phase::All)?
        };
        Ok(measured.expect("a timed phase measures"))
    }

    fn worker(&self, spec: &Spec, phase: Phase) -> Result<Option<Measured>, String> {
        run_worker(
            Some(&self.augefs),
            &self.exe,
            Via::Image(&self.image),
            None,
            spec,
            phase,
        )
    }
}

/// The `attached` target: the image mounted by `augefs mount` (a fresh mount per cell,
/// remounted between setup and run for cold cases), its workers attached to the
/// mount's instance.
pub struct Attached {
    mount: super::target::Fuse,
    augefs: PathBuf,
    exe: PathBuf,
    /// A cell of N threads runs as N processes of one thread each, in directories
    /// of their own (`--procs`).
    procs: bool,
}

impl Attached {
    pub fn new(
        image: &Path,
        backend: BackendChoice,
        mnt: &Path,
        procs: bool,
    ) -> Result<Attached, String> {
        siblings::preload_lib()?;
        Ok(Attached {
            mount: super::target::Fuse::new(image, backend, mnt)?,
            augefs: siblings::augefs()?,
            exe: siblings::this_exe()?,
            procs,
        })
    }

    /// Setup in each root, then the timed runs of every root at once.
    fn run_roots(&mut self, spec: &Spec) -> Result<Measured, String> {
        use super::target::InProcess;
        let mount = self.mount.root().to_path_buf();
        let roots = process_roots(&mount, spec, self.procs)?;
        let Attached {
            mount: fuse,
            augefs,
            exe,
            ..
        } = self;
        let fuse = std::cell::RefCell::new(fuse);
        let hooks = Hooks {
            after_setup: &mut || match spec.case.cold {
                true => fuse.borrow_mut().drop_caches(),
                false => Ok(()),
            },
            helper_cpu_ns: &|| fuse.borrow().helper_cpu_ns(),
        };
        run_processes(Some(augefs), exe, Via::Mount(&mount), &roots, spec, hooks)
    }

    pub fn run_cell(&mut self, spec: &Spec) -> Result<Measured, String> {
        use super::target::InProcess;
        self.mount.fresh()?;
        let measured = self.run_roots(spec);
        let finished = self.mount.finish();
        let measured = measured?;
        finished.map(|()| measured)
    }
}

/// The runs of processes that ran at once, as one: their operations and CPU summed,
/// the longest elapsed time, the worst percentiles.
fn merge(runs: &[Measured]) -> Measured {
    Measured {
        ops: runs.iter().map(|m| m.ops).sum(),
        elapsed_ns: runs.iter().map(|m| m.elapsed_ns).max().unwrap_or(0),
        capped_threads: runs.iter().map(|m| m.capped_threads).sum(),
        p50_ns: runs.iter().filter_map(|m| m.p50_ns).max(),
        p99_ns: runs.iter().filter_map(|m| m.p99_ns).max(),
        cpu_ns: runs.iter().map(|m| m.cpu_ns).sum(),
    }
}

/// Runs one phase of a cell in a worker process (`root`: where it works, else the
/// interposer's prefix).
pub fn run_worker(
    augefs: Option<&Path>,
    exe: &Path,
    via: Via<'_>,
    root: Option<&Path>,
    spec: &Spec,
    phase: Phase,
) -> Result<Option<Measured>, String> {
    let json = serde_json::to_string(spec).expect("JSON of plain values");
    let mut cmd = match (via, augefs) {
        (Via::Kernel, _) => Command::new(exe),
        (_, None) => return Err("no augefs binary to run the worker with".to_string()),
        (via, Some(augefs)) => {
            let mut cmd = Command::new(augefs);
            cmd.arg("run");
            match via {
                Via::Image(image) => cmd.arg("--image").arg(image).args(["--prefix", PREFIX]),
                Via::Mount(mount) => cmd.arg("--mount").arg(mount),
                Via::Kernel => unreachable!("matched above"),
            };
            cmd.arg("--").arg(exe);
            cmd
        }
    };
    cmd.args(["fs-worker", "--phase", phase.name(), "--spec", &json]);
    if let Some(root) = root {
        cmd.arg("--root").arg(root);
    }
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run augefs run: {e}"))?;
    {
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let quoted: Vec<&str> = stderr.lines().rev().take(STDERR_LINES_QUOTED).collect();
        let quoted: Vec<&str> = quoted.into_iter().rev().collect();
        let reply = stdout
            .lines()
            .find_map(|l| l.strip_prefix(RESULT_LINE))
            .map(serde_json::from_str::<Reply>);
        match reply {
            Some(Ok(Reply::Done(m))) if out.status.success() => Ok(m),
            Some(Ok(Reply::Failed(e))) => Err(format!("{e} [{}]", quoted.join(" | "))),
            _ => Err(format!(
                "the {} worker exited ({}) without a result [{}]",
                phase.name(),
                out.status,
                quoted.join(" | ")
            )),
        }
    }
}
