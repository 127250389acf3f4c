//! The goals of the mounts, judged on one `bench report`: issue 31's for the FUSE mount
//! (target `fuse`) and issue 30's for real programs attached to a mount's instance
//! (target `attached`), from bench fs's figures and `bench apps`'s document.
//!
//! Invariants (as `goals.rs`): a goal is met only if every figure it names was measured
//! and passes; a ratio is augefs's median over the best kernel file system's median in
//! the same run (bench apps: the best kernel target it ran); a time "at most k x" the
//! kernel's is a ratio of at least 1/k.

use super::fs_results::FsResults;
use super::goals::{versus_kernel, Evidence, Inputs};
use crate::goal::Goal;
use serde_json::Value;

/// `target`'s ratio in bench apps for each of `workloads`; a pass is at least `factor`.
fn versus_apps(apps: Option<&Value>, workloads: &[&str], target: &str, factor: f64) -> Evidence {
    let mut e = Evidence::default();
    for w in workloads {
        let row = apps
            .and_then(|d| d["workloads"].as_array())
            .and_then(|rows| rows.iter().find(|r| r["workload"] == *w));
        let ratio =
            row.and_then(|r| Some((r["ratios"][target].as_f64()?, r["baseline"].as_str()?)));
        match ratio {
            Some((r, base)) => {
                e.measured
                    .push((format!("{w} {target} vs {base}:"), r, r >= factor))
            }
            None => e.missing.push(format!("{w} on {target} (bench apps)")),
        }
    }
    e
}

/// Attached clients as two processes over one (`--procs` cells of `workload`).
fn two_processes(procs: Option<&Value>, workload: &str, factor: f64) -> Evidence {
    let mut e = Evidence::default();
    let docs = FsResults::new(procs.into_iter().collect());
    let one = docs.median(workload, 1, "attached").map(|m| m.ops());
    let two = docs.median(workload, 2, "attached").map(|m| m.ops());
    match (one, two) {
        (Some(one), Some(two)) => {
            let r = two / one.max(f64::MIN_POSITIVE);
            e.measured
                .push((format!("{workload} 2 procs vs 1:"), r, r >= factor));
        }
        _ => e
            .missing
            .push(format!("{workload} attached --procs at 1 and 2")),
    }
    e
}

/// Attached clients against the interposer's single owner, each of `workloads` at one
/// thread: a pass is at least `factor` of the owner's ops/s.
fn versus_owner(inputs: &Inputs, workloads: &[&str], factor: f64) -> Evidence {
    let mut e = Evidence::default();
    for w in workloads {
        let attached = inputs.fs.median(w, 1, "attached").map(|m| m.ops());
        let owner = inputs.fs.median(w, 1, "interposer").map(|m| m.ops());
        match (attached, owner) {
            (Some(a), Some(o)) => {
                let r = a / o.max(f64::MIN_POSITIVE);
                e.measured
                    .push((format!("{w} attached vs interposer:"), r, r >= factor));
            }
            _ => e.missing.push(format!("{w} on attached and interposer")),
        }
    }
    e
}

pub fn judge(inputs: &Inputs) -> Vec<Goal> {
    let apps = inputs.apps;
    let fsync_heavy = ["create+fsync", "append/4K", "varmail"];
    vec![
        // Issue 31: the FUSE mount.
        versus_apps(apps, &["untar", "gitclone", "rmrf"], "fuse", 1.0 / 1.5).verdict(
            "FUSE: untar, git clone, rm -rf at most 1.5x the best kernel fs's time (ratio \
             >= 0.67)"
                .to_string(),
            "x",
        ),
        versus_apps(apps, &["make"], "fuse", 1.0 / 1.1).verdict(
            "FUSE: make -j2 at most 1.1x the best kernel fs's time (ratio >= 0.91)".to_string(),
            "x",
        ),
        versus_kernel(inputs, &["stat", "randread"], &["fuse"], 0.8).verdict(
            "FUSE: stat and warm 4 KiB read >= 0.8x the best kernel fs".to_string(),
            "x",
        ),
        versus_kernel(inputs, &["create"], &["fuse"], 0.5)
            .verdict("FUSE: create >= 0.5x the best kernel fs".to_string(), "x"),
        versus_kernel(inputs, &["seqread-cold/1M"], &["fuse"], 0.9).verdict(
            "FUSE: cold 1 MiB sequential read >= 0.9x the best kernel fs".to_string(),
            "x",
        ),
        versus_apps(apps, &["fillrandom"], "fuse", 0.5).verdict(
            "FUSE: db_bench fillrandom >= 0.5x the best kernel fs".to_string(),
            "x",
        ),
        versus_apps(apps, &["readrandom"], "fuse", 0.9).verdict(
            "FUSE: db_bench readrandom >= 0.9x the best kernel fs".to_string(),
            "x",
        ),
        versus_kernel(inputs, &fsync_heavy, &["fuse"], 1.5)
            .and(versus_apps(apps, &["sqlite"], "fuse", 1.5))
            .verdict(
                "FUSE keeps the fsync lead: create+fsync, 4 KiB append+fsync, varmail and \
                 sqlite3 autocommit inserts >= 1.5x the best kernel fs"
                    .to_string(),
                "x",
            ),
        // Issue 30: real programs attached to the instance.
        versus_apps(
            apps,
            &["untar", "gitclone", "rmrf", "make"],
            "attached",
            1.0,
        )
        .verdict(
            "attached: untar, git clone, rm -rf and make -j2 at least as fast as the best \
             kernel fs"
                .to_string(),
            "x",
        ),
        versus_apps(apps, &["sqlite"], "attached", 2.0).verdict(
            "attached: sqlite3 autocommit inserts >= 2x the best kernel fs".to_string(),
            "x",
        ),
        versus_apps(apps, &["fillrandom"], "attached", 1.0)
            .and(versus_apps(apps, &["fillsync"], "attached", 2.0))
            .verdict(
                "attached: db_bench fillrandom >= 1x and fillsync >= 2x the best kernel fs"
                    .to_string(),
                "x",
            ),
        two_processes(inputs.procs, "create+fsync", 1.6).verdict(
            "attached: two processes doing create+fsync >= 1.6x one process".to_string(),
            "x",
        ),
        versus_owner(
            inputs,
            &["create", "create+fsync", "stat", "randread"],
            1.0 / 1.5,
        )
        .verdict(
            "attached: create, create+fsync, stat and warm read within 1.5x of the \
                 interposer's single owner (ratio >= 0.67)"
                .to_string(),
            "x",
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn apps_doc(rows: &[(&str, f64, f64)]) -> Value {
        let rows: Vec<Value> = rows
            .iter()
            .map(|(w, fuse, attached)| {
                json!({"workload": w, "baseline": "ext4",
                       "ratios": {"ext4": 1.0, "fuse": fuse, "attached": attached}})
            })
            .collect();
        json!({ "workloads": rows })
    }

    fn verdict(goals: &[Goal], starts: &str) -> Option<bool> {
        goals
            .iter()
            .find(|g| g.text.starts_with(starts))
            .unwrap_or_else(|| panic!("no goal {starts}"))
            .met
    }

    #[test]
    fn real_program_goals_follow_the_ratios() {
        let doc = apps_doc(&[
            ("untar", 0.7, 1.1),
            ("gitclone", 0.67, 1.0),
            ("rmrf", 0.9, 0.99),
            ("make", 0.95, 1.2),
            ("fillrandom", 0.49, 1.0),
            ("readrandom", 0.95, 1.0),
            ("sqlite", 1.6, 2.5),
            ("fillsync", 2.0, 2.0),
        ]);
        let inputs = Inputs {
            apps: Some(&doc),
            ..Inputs::default()
        };
        let goals = judge(&inputs);
        assert_eq!(verdict(&goals, "FUSE: untar"), Some(true), "0.67 >= 1/1.5");
        assert_eq!(verdict(&goals, "FUSE: make"), Some(true));
        assert_eq!(verdict(&goals, "FUSE: db_bench fillrandom"), Some(false));
        assert_eq!(verdict(&goals, "FUSE: db_bench readrandom"), Some(true));
        assert_eq!(
            verdict(&goals, "FUSE keeps"),
            None,
            "sqlite passes, bench fs figures missing"
        );
        assert_eq!(verdict(&goals, "FUSE: stat"), None, "no bench fs figures");
        assert_eq!(
            verdict(&goals, "attached: untar"),
            Some(false),
            "rm -rf 0.99"
        );
        assert_eq!(verdict(&goals, "attached: sqlite3"), Some(true));
        assert_eq!(verdict(&goals, "attached: db_bench"), Some(true));
        assert_eq!(verdict(&goals, "attached: two processes"), None);
        let procs = super::super::fs_results::tests::doc(&[
            ("create+fsync", 1, "attached", 1000.0),
            ("create+fsync", 2, "attached", 1500.0),
        ]);
        let fs = super::super::fs_results::tests::doc(&[
            ("create", 1, "attached", 700.0),
            ("create", 1, "interposer", 1000.0),
            ("create+fsync", 1, "attached", 700.0),
            ("create+fsync", 1, "interposer", 1000.0),
            ("stat", 1, "attached", 700.0),
            ("stat", 1, "interposer", 1000.0),
            ("randread", 1, "attached", 600.0),
            ("randread", 1, "interposer", 1000.0),
        ]);
        let inputs = Inputs {
            fs: FsResults::new(vec![&fs]),
            procs: Some(&procs),
            ..Inputs::default()
        };
        let goals = judge(&inputs);
        assert_eq!(
            verdict(&goals, "attached: two processes"),
            Some(false),
            "1.5x"
        );
        assert_eq!(
            verdict(&goals, "attached: create, create+fsync"),
            Some(false),
            "randread 0.6"
        );
        let none = judge(&Inputs::default());
        assert!(none.iter().all(|g| g.met.is_none()), "nothing measured");
    }
}
