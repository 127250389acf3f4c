//! Long-mode fuzzing: `augefs-fuzz [--seconds N] [--cases N] [--seed S] [TARGET...]`
//! runs each named target (all by default) for the budget and prints its cases;
//! `--list` names the targets, `--write-corpus DIR` writes their seeds as a cargo-fuzz
//! corpus (default fuzz/corpus). Build
//! it with the `fuzz` profile (release speed, overflow checks and debug assertions on):
//! `cargo run --profile fuzz -p fuzzing --bin augefs-fuzz -- --seconds 600`.
// Library code says why it cannot fail (`expect`) or returns an error; tests may unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

use fuzzing::driver::{run, Budget, DEFAULT_SEED};
use fuzzing::targets;
use std::process::ExitCode;
use std::time::Duration;

fn main() -> ExitCode {
    let mut budget = Budget {
        cases: None,
        time: None,
        seed: DEFAULT_SEED,
    };
    let mut names = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |what: &str| -> u64 {
            let v = args.next().unwrap_or_default();
            v.parse().unwrap_or_else(|_| {
                eprintln!("augefs-fuzz: {what} wants a number, got {v:?}");
                std::process::exit(2)
            })
        };
        match arg.as_str() {
            "--seconds" => budget.time = Some(Duration::from_secs(value("--seconds"))),
            "--cases" => budget.cases = Some(value("--cases")),
            "--seed" => budget.seed = value("--seed"),
            "--write-corpus" => {
                let dir = args.next().unwrap_or_else(|| "fuzz/corpus".into());
                if let Err(e) = fuzzing::write_corpus(std::path::Path::new(&dir)) {
                    eprintln!("augefs-fuzz: {dir}: {e}");
                    return ExitCode::FAILURE;
                }
                return ExitCode::SUCCESS;
            }
            "--list" => {
                for t in targets::all() {
                    println!("{}", t.name);
                }
                return ExitCode::SUCCESS;
            }
            name => names.push(name.to_string()),
        }
    }
    if budget.cases.is_none() && budget.time.is_none() {
        budget.time = Some(Duration::from_secs(60));
    }
    let chosen: Vec<_> = if names.is_empty() {
        targets::all()
    } else {
        names
            .iter()
            .map(|n| {
                targets::by_name(n).unwrap_or_else(|| {
                    eprintln!("augefs-fuzz: no target {n} (--list names them)");
                    std::process::exit(2)
                })
            })
            .collect()
    };
    println!("seed {:#x}", budget.seed);
    for target in &chosen {
        let report = run(target, budget);
        println!("{:<22} {report}", target.name);
    }
    ExitCode::SUCCESS
}
