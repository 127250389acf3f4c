//! `augefs crashtest [FILE...] [--generated N | --length L] [--sample K] [--domains N,..]
//! [--jobs J] [--states-max N] [--seed S]`: runs crash workloads (docs/TESTING.md §2a)
//! and checks every crash state. The harness is the `crashtest` crate; this only reads
//! files, runs workloads on threads and prints.

use crashtest::generate::sequences_sampled;
use crashtest::{check_workload, Report, Workload};
use device::recording::CrashPolicy;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Workload files in the crash-workload text format.
    pub files: Vec<PathBuf>,
    /// Also run the generated sequences of 1 to N operations.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=3), conflicts_with = "length")]
    pub generated: Option<u32>,
    /// Also run the generated sequences of exactly L operations.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=3))]
    pub length: Option<u32>,
    /// Of the generated sequences of 2 or 3 operations, run every K-th (a different
    /// sample for each domain count).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub sample: u64,
    /// Domain counts (1-8, comma-separated): every workload, files included, runs once
    /// with each, overriding a file's `domains` header. Without it a file runs with its
    /// header's count and generated workloads with 1.
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..=8))]
    pub domains: Vec<u32>,
    /// Workloads checked at once.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub jobs: u64,
    /// Most crash states checked per workload (the rest are counted as skipped).
    #[arg(long, default_value_t = usize::MAX)]
    pub states_max: usize,
    /// Seed of the crash-state sampling (in-flight subsets, torn writes).
    #[arg(long, default_value_t = 5)]
    pub seed: u64,
}

/// A long run reports its progress on stderr after this many workloads.
const PROGRESS_EVERY: usize = 500;

pub fn run(args: Args) -> Result<(), String> {
    let workloads = workloads(&args)?;
    let policy = CrashPolicy {
        states_max: args.states_max,
        ..CrashPolicy::with_seed(args.seed)
    };
    let started = std::time::Instant::now();
    // Crash states, skipped states, failing workloads, workloads done.
    let totals = Mutex::new((0usize, 0u64, 0usize, 0usize));
    // Per domain count: workloads, crash states, failing workloads.
    let by_domains = Mutex::new(std::collections::BTreeMap::<u32, (usize, usize, usize)>::new());
    let next = AtomicUsize::new(0);
    let verbose = workloads.len() <= args.files.len() * args.domains.len().max(1);
    let error = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..args.jobs {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(w) = workloads.get(i) else { return };
                match check_workload(w, &policy) {
                    Ok(report) => {
                        let mut t = totals.lock().expect("totals");
                        t.0 += report.states_checked;
                        t.1 += report.states_skipped;
                        t.2 += usize::from(!report.failures.is_empty());
                        t.3 += 1;
                        if !verbose && t.3 % PROGRESS_EVERY == 0 {
                            eprintln!(
                                "{}/{} workloads, {} crash states, {} failing, {:.0} s",
                                t.3,
                                workloads.len(),
                                t.0,
                                t.2,
                                started.elapsed().as_secs_f64()
                            );
                        }
                        drop(t);
                        let mut d = by_domains.lock().expect("by domains");
                        let d = d.entry(w.domains).or_default();
                        d.0 += 1;
                        d.1 += report.states_checked;
                        d.2 += usize::from(!report.failures.is_empty());
                        print_report(w, &report, verbose);
                    }
                    Err(e) => {
                        error
                            .lock()
                            .expect("error")
                            .get_or_insert(format!("{}: {e}", w.name));
                        next.store(workloads.len(), Ordering::Relaxed);
                    }
                }
            });
        }
    });
    if let Some(e) = error.into_inner().expect("error") {
        return Err(e);
    }
    let (states, skipped, failed, _) = totals.into_inner().expect("totals");
    println!(
        "{} workloads, {states} crash states checked ({skipped} skipped), {failed} failing, {:.1} s",
        workloads.len(),
        started.elapsed().as_secs_f64()
    );
    let by_domains = by_domains.into_inner().expect("by domains");
    if by_domains.len() > 1 {
        for (d, (n, states, failing)) in by_domains {
            println!("  {d} domains: {n} workloads, {states} crash states, {failing} failing");
        }
    }
    if failed > 0 {
        return Err(format!("{failed} workloads failed"));
    }
    Ok(())
}

/// The files (with each `--domains` count) and the generated sequences asked for.
fn workloads(args: &Args) -> Result<Vec<Workload>, String> {
    let mut out = Vec::new();
    for path in &args.files {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let w = Workload::parse(&path.display().to_string(), &text).map_err(|e| e.to_string())?;
        if args.domains.is_empty() {
            out.push(w);
        } else {
            out.extend(args.domains.iter().map(|&d| w.with_domains(d)));
        }
    }
    let lengths: Vec<usize> = match (args.generated, args.length) {
        (Some(n), _) => (1..=n as usize).collect(),
        (None, Some(l)) => vec![l as usize],
        (None, None) => Vec::new(),
    };
    let domains = if args.domains.is_empty() {
        vec![1]
    } else {
        args.domains.clone()
    };
    for len in lengths {
        for (phase, &d) in domains.iter().enumerate() {
            let every = if len == 1 { 1 } else { args.sample as usize };
            out.extend(sequences_sampled(len, d, every, phase * 17));
        }
    }
    if out.is_empty() {
        return Err("no workload: give files, --generated or --length".into());
    }
    Ok(out)
}

/// One line per passing workload (`verbose`: files only), every failure otherwise,
/// grouped by message with the crash states that show it.
fn print_report(w: &Workload, report: &Report, verbose: bool) {
    // One workload's lines together, whatever the other threads print.
    let mut out = String::new();
    if report.failures.is_empty() {
        if verbose {
            out.push_str(&format!(
                "ok    {} ({} crash states, {} MiB image)\n",
                w.name,
                report.states_checked,
                report.image_bytes >> 20
            ));
        }
    } else {
        for (message, states) in report.grouped() {
            out.push_str(&format!("FAIL  {}: {message}\n", w.name));
            if !states.is_empty() {
                out.push_str(&format!(
                    "      at {} crash states: {}\n",
                    states.len(),
                    states.join(", ")
                ));
            }
        }
        out.push_str(&format!(
            "--- workload (replay with augefs crashtest FILE) ---\n{w}"
        ));
    }
    print!("{out}");
}
