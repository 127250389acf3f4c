//! fsck of a test image.

use device::Device;
use engine::progress::NoProgress;
use fsck::{FsckError, Mode, Options, Report};
use std::sync::Arc;

/// The time fsck gives what it creates while repairing (late 2023).
pub const NOW_NS: i64 = 1_700_000_000_000_000_000;

/// fsck of the unmounted image on `dev` in `mode`, also reading every mapped block
/// against its checksum if `verify_data`.
pub fn try_fsck(dev: Arc<Device>, mode: Mode, verify_data: bool) -> Result<Report, FsckError> {
    let options = Options {
        mode,
        verify_data,
        now_ns: NOW_NS,
    };
    fsck::check(dev, None, &options, &NoProgress)
}

/// [`try_fsck`], which must run to the end (whatever it finds).
pub fn run_fsck(dev: Arc<Device>, mode: Mode, verify_data: bool) -> Report {
    try_fsck(dev, mode, verify_data).expect("fsck runs")
}

/// The problems fsck finds (check only, data verified) on the unmounted image on `dev`,
/// a line each; none if it is clean.
pub fn fsck_problems(dev: &Arc<Device>) -> Vec<String> {
    run_fsck(dev.clone(), Mode::Check, true)
        .problems
        .iter()
        .map(|p| format!("{:?}: {}", p.kind, p.message))
        .collect()
}
