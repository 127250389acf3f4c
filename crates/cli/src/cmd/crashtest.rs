//! `augefs crashtest [FILE...] [--generated N] [--domains N] [--states-max N] [--seed S]`:
//! runs crash workloads (docs/TESTING.md "Crash workloads") and checks every crash state.
//! The harness is the `crashtest` crate; this only reads files and prints.

use crashtest::generate::sequences;
use crashtest::{check_workload, Workload};
use device::recording::CrashPolicy;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Workload files in the crash-workload text format.
    pub files: Vec<PathBuf>,
    /// Also run the generated sequences of 1 (or 1 and 2) operations.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=2))]
    pub generated: Option<u32>,
    /// Domain count of the generated workloads.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=8))]
    pub domains: u32,
    /// Most crash states checked per workload (the rest are counted as skipped).
    #[arg(long, default_value_t = usize::MAX)]
    pub states_max: usize,
    /// Seed of the crash-state sampling (in-flight subsets, torn writes).
    #[arg(long, default_value_t = 5)]
    pub seed: u64,
}

pub fn run(args: Args) -> Result<(), String> {
    let mut workloads = Vec::new();
    for path in &args.files {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        workloads
            .push(Workload::parse(&path.display().to_string(), &text).map_err(|e| e.to_string())?);
    }
    if let Some(n) = args.generated {
        for len in 1..=n as usize {
            workloads.extend(sequences(len, args.domains));
        }
    }
    if workloads.is_empty() {
        return Err("no workload: give files or --generated".into());
    }
    let policy = CrashPolicy {
        states_max: args.states_max,
        ..CrashPolicy::with_seed(args.seed)
    };
    let started = std::time::Instant::now();
    let (mut states, mut skipped, mut failed) = (0usize, 0u64, 0usize);
    for w in &workloads {
        let report = check_workload(w, &policy).map_err(|e| format!("{}: {e}", w.name))?;
        states += report.states_checked;
        skipped += report.states_skipped;
        if report.failures.is_empty() {
            if args.files.len() == workloads.len() {
                println!("ok    {} ({} crash states)", w.name, report.states_checked);
            }
        } else {
            failed += 1;
            for f in &report.failures {
                println!("FAIL  {f}");
            }
            println!("--- workload (replay with augefs crashtest FILE) ---\n{w}");
        }
    }
    println!(
        "{} workloads, {states} crash states checked ({skipped} skipped), {failed} failing, {:.1} s",
        workloads.len(),
        started.elapsed().as_secs_f64()
    );
    if failed > 0 {
        return Err(format!("{failed} workloads failed"));
    }
    Ok(())
}
