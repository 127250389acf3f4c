//! Checking a workload: each step's outcome against what the workload expects, then every
//! crash state of the recorded run: fsck (check only, data verified) finds nothing, the
//! image mounts (recovery succeeds), and the recovered tree passes [`crate::judge`].
//!
//! Invariants:
//! - Every failure is kept, each naming its crash state (or the step, for an outcome),
//!   so a workload that fails in many ways shows all of them.

use crate::judge::judge;
use crate::run::{self, Recorded};
use crate::snapshot::Snapshot;
use crate::workload::{errno_name, Workload};
use device::recording::{CrashPolicy, CrashState, RecordingHandle};
use device::Device;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// One thing found wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The crash state it was found in (None: a step's outcome).
    pub state: Option<String>,
    pub message: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.state {
            Some(state) => write!(f, "crash state {state}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

/// What checking a workload found.
#[derive(Debug, Default)]
pub struct Report {
    pub states_checked: usize,
    pub states_skipped: u64,
    pub failures: Vec<Failure>,
    /// The size of the image the workload ran on.
    pub image_bytes: u64,
}

impl Report {
    /// The failures by message, each with the crash states it was found in (in order).
    pub fn grouped(&self) -> Vec<(&str, Vec<&str>)> {
        let mut groups: BTreeMap<&str, (usize, Vec<&str>)> = BTreeMap::new();
        for (i, f) in self.failures.iter().enumerate() {
            let g = groups.entry(&f.message).or_insert((i, Vec::new()));
            g.1.extend(f.state.as_deref());
        }
        let mut out: Vec<(usize, &str, Vec<&str>)> =
            groups.into_iter().map(|(m, (i, s))| (i, m, s)).collect();
        out.sort_by_key(|g| g.0);
        out.into_iter().map(|(_, m, s)| (m, s)).collect()
    }
}

/// "success" or the errno's name.
pub(crate) fn outcome(result: Result<(), i32>) -> String {
    match result {
        Ok(()) => "success".into(),
        Err(e) => errno_name(e),
    }
}

/// Runs and checks `workload` under `policy`.
pub fn check_workload(workload: &Workload, policy: &CrashPolicy) -> Result<Report, String> {
    check_workload_with(workload, policy, &|_| {})
}

/// [`check_workload`] that hands the recording device to `before_steps` after the setup
/// (where tests inject faults or flush mutations).
pub fn check_workload_with(
    workload: &Workload,
    policy: &CrashPolicy,
    before_steps: &dyn Fn(&RecordingHandle),
) -> Result<Report, String> {
    let recorded = run::record_with(workload, before_steps)?;
    let states = recorded.recording.crash_states(policy);
    let mut report = Report {
        states_skipped: states.skipped_count,
        image_bytes: recorded.image_bytes,
        ..Report::default()
    };
    for (step, result) in workload.steps.iter().zip(&recorded.history.results) {
        let expected = step.expect.map_or(Ok(()), Err);
        if *result != expected {
            report.failures.push(Failure {
                state: None,
                message: format!(
                    "line {} ({}): {}, expected {}",
                    step.line,
                    step.op,
                    outcome(*result),
                    outcome(expected)
                ),
            });
        }
    }
    for state in &states.states {
        report.states_checked += 1;
        for message in check_state(workload, &recorded, state) {
            report.failures.push(Failure {
                state: Some(state.to_string()),
                message,
            });
        }
    }
    Ok(report)
}

/// The problems of one crash state.
fn check_state(workload: &Workload, recorded: &Recorded, state: &CrashState) -> Vec<String> {
    let device = Arc::new(Device::new(Box::new(
        recorded.recording.crash_device(state, 512),
    )));
    let mut problems = Vec::new();
    if let Err(e) = fsck_clean(&device) {
        problems.push(e);
    }
    let got = match run::mount(device) {
        Err(e) => Err(format!("recovery failed: {e}")),
        Ok(fs) => Snapshot::take(&fs).map_err(|e| format!("reading the recovered tree: {e}")),
    };
    match got {
        Ok(got) => problems.extend(judge(
            workload,
            &recorded.history,
            &got,
            state.durable_writes(),
        )),
        Err(e) => problems.push(e),
    }
    problems
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
