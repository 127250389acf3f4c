//! Checking every crash state of a recorded run against docs/SEMANTICS.md.
//!
//! For each crash state: the image mounts (recovery succeeds), and
//! - every directory entry and every object (contents, mode, link count, attributes)
//!   is in a state it had at some step at or after the last acknowledged persistence
//!   point covering it (nothing promised is lost, nothing never written appears, no
//!   operation is half applied);
//! - with one domain, the whole tree equals the tree after some step at or after the last
//!   acknowledged persistence point (each domain keeps a prefix of its operations);
//! - fsck (check only, data verified) finds nothing wrong with the crash image.
//!
//! A persistence point is acknowledged in a crash state when every write made before it
//! returned is durable there.
//!
//! Invariants:
//! - A failure names the crash state, the line of the workload and what differs, so it
//!   can be replayed.

use crate::run::{self, Promise, Recorded, Scope};
use crate::snapshot::{show, Snapshot};
use crate::workload::Workload;
use device::recording::{CrashPolicy, CrashState};
use device::Device;
use std::sync::Arc;

/// What checking a workload found.
#[derive(Debug, Default)]
pub struct Report {
    pub states_checked: usize,
    pub states_skipped: u64,
    pub failures: Vec<String>,
}

/// Runs and checks `workload` under `policy`.
pub fn check_workload(workload: &Workload, policy: &CrashPolicy) -> Result<Report, String> {
    let recorded = run::record(workload)?;
    let states = recorded.recording.crash_states(policy);
    let mut report = Report {
        states_skipped: states.skipped_count,
        ..Report::default()
    };
    for state in &states.states {
        report.states_checked += 1;
        if let Err(e) = check_state(workload, &recorded, state) {
            report
                .failures
                .push(format!("{}: crash state {state}: {e}", workload.name));
            // One failure per workload is enough to act on.
            break;
        }
    }
    Ok(report)
}

fn check_state(workload: &Workload, recorded: &Recorded, state: &CrashState) -> Result<(), String> {
    let device = Arc::new(Device::new(Box::new(
        recorded.recording.crash_device(state, 512),
    )));
    fsck_clean(&device)?;
    let fs = run::mount(device.clone()).map_err(|e| format!("recovery failed: {e}"))?;
    let got = Snapshot::take(&fs).map_err(|e| format!("reading the recovered tree: {e}"))?;
    drop(fs);
    let acked: Vec<&Promise> = recorded
        .promises
        .iter()
        .filter(|p| p.writes <= state.durable_writes())
        .collect();
    let line = |step: usize| match step {
        0 => "the setup".to_string(),
        s => format!(
            "line {} ({})",
            workload.steps[s - 1].line,
            workload.steps[s - 1].op
        ),
    };
    // Entries.
    let mut keys: std::collections::BTreeSet<&(u64, Vec<u8>)> = got.entries.keys().collect();
    for s in &recorded.states {
        keys.extend(s.entries.keys());
    }
    for key in keys {
        let point = acked
            .iter()
            .filter(|p| covers_entry(&p.scope, key))
            .map(|p| p.step)
            .max()
            .unwrap_or(0);
        let value = got.entries.get(key);
        if !recorded.states[point..]
            .iter()
            .any(|s| s.entries.get(key) == value)
        {
            return Err(format!(
                "entry {}/{} is {:?}, a value it never had since {}",
                key.0,
                show(&key.1),
                value,
                line(point)
            ));
        }
    }
    // Objects.
    for (ino, object) in &got.objects {
        let point = acked
            .iter()
            .filter(|p| covers_object(&p.scope, *ino))
            .map(|p| p.step)
            .max()
            .unwrap_or(0);
        if !recorded.states[point..]
            .iter()
            .any(|s| s.objects.get(ino) == Some(object))
        {
            let last = recorded.states.last().and_then(|s| s.objects.get(ino));
            return Err(format!(
                "inode {ino} is {}, a state it never had since {} (at the end: {})",
                object.describe(),
                line(point),
                last.map_or("gone".into(), |o| o.describe())
            ));
        }
    }
    // One domain: a prefix of the whole history.
    if workload.domains == 1 {
        let point = acked.iter().map(|p| p.step).max().unwrap_or(0);
        if !recorded.states[point..].contains(&got) {
            let nearest = recorded.states[point..]
                .iter()
                .min_by_key(|s| s.diff(&got).len())
                .expect("at least the last state");
            return Err(format!(
                "the tree equals no tree since {}; nearest: {}",
                line(point),
                got.diff(nearest)
            ));
        }
    }
    Ok(())
}

/// fsck of the crash image (read-only: it recovers on an overlay) finds nothing.
fn fsck_clean(device: &Arc<Device>) -> Result<(), String> {
    let options = fsck::Options {
        mode: fsck::Mode::Check,
        verify_data: true,
        now_ns: 0,
    };
    let report = fsck::check(
        device.clone(),
        None,
        &options,
        &engine::progress::NoProgress,
    )
    .map_err(|e| format!("fsck could not check the image: {e}"))?;
    let problems: Vec<String> = report
        .problems
        .iter()
        .map(|p| format!("{:?}: {}", p.kind, p.message))
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!("fsck: {}", problems.join("; ")))
    }
}

fn covers_entry(scope: &Scope, key: &(u64, Vec<u8>)) -> bool {
    match scope {
        Scope::All => true,
        Scope::File { entries, .. } => entries.contains(key),
        Scope::Dir { ino } => key.0 == *ino,
    }
}

fn covers_object(scope: &Scope, object: u64) -> bool {
    match scope {
        Scope::All => true,
        Scope::File { ino, .. } | Scope::Dir { ino } => *ino == object,
    }
}
