//! The throughput figures of `augefs bench engine`: append+fsync on the two fsync paths
//! and ext4, and append+fsync across domain counts (the measurement plan is in the
//! parent module's documentation; the recovery figure is in `crash.rs`).
//!
//! Invariants:
//! - Every augefs sample is taken on a freshly formatted image, with one engine open.
//! - Within each run the systems (or domain counts) take turns in an order that rotates
//!   from run to run, so drift of the machine hits them alike; ratio rows pair the
//!   samples of one run.

use super::ext4::Ext4;
use super::report::{Figure, Key, PerOp, Report, Sample, System};
use super::subject::Setup;
use super::workload::{self, BLOCK};
use super::{Args, Environment};
use crate::scratch::Scratch;
use crate::threads::{Limit, Run};
use crate::turns::turn_order;
use engine::log::FsyncPath;
use format::constants::SEGMENTS_PER_DOMAIN_MIN;
use format::Geometry;
use serde_json::json;

/// Writer threads of the domains figure (the 4).
pub const DOMAIN_THREADS: usize = 4;
/// The ext4 image is this large at most (smaller with a smaller `--image-size`).
const EXT4_IMAGE_BYTES_MAX: u64 = 1 << 30;

fn fsync_path(system: System) -> FsyncPath {
    match system {
        System::Async => FsyncPath::Async,
        System::Ordered => FsyncPath::Ordered,
        System::Ext4 => unreachable!("ext4 has no augefs fsync path"),
    }
}

/// A run's limit: `--seconds`, and at most half of `space_bytes` written in all, so a
/// fast disk never fills the image (a capped run is noted).
fn limit(args: &Args, threads: usize, space_bytes: u64) -> Limit {
    Limit {
        duration: std::time::Duration::from_secs_f64(args.seconds),
        ops_per_thread: Some((space_bytes / 2 / BLOCK as u64 / threads as u64).max(1)),
    }
}

fn sample(run: &Run, per_op: Option<PerOp>, io: serde_json::Value) -> Sample {
    if run.capped_threads > 0 {
        eprintln!(
            "augefs: note: {} threads stopped early, at half the image's space",
            run.capped_threads
        );
    }
    Sample {
        value: run.ops_per_sec(),
        per_op,
        detail: json!({
            "ops": run.ops,
            "elapsed_ns": run.elapsed_ns,
            "capped_threads": run.capped_threads,
            "io": io,
        }),
    }
}

/// One augefs run: format with `domains`, mount with `path`, append, close.
fn engine_sample(
    args: &Args,
    setup: &Setup,
    domains: u32,
    path: FsyncPath,
    threads: usize,
    env: &mut Environment,
) -> Result<Sample, String> {
    let mounted = setup.create(Some(domains), path)?;
    env.note(&mounted);
    let limit = limit(args, threads, mounted.geometry().segment_bytes());
    let before = mounted.io();
    let run = workload::engine_appends(&mounted.engine, threads, limit);
    let io = mounted.io().since(&before);
    // Closed (untimed) before an error is returned, so the image is released.
    let closed = mounted.close();
    let run = run?;
    closed?;
    let per_op = PerOp::counted(&io, run.ops);
    Ok(sample(&run, Some(per_op), json!(io)))
}

fn ext4_sample(args: &Args, ext4: &Ext4, threads: usize) -> Result<Sample, String> {
    let (run, per_op) = ext4.appends(threads, limit(args, threads, ext4.image_bytes))?;
    Ok(sample(&run, per_op, serde_json::Value::Null))
}

/// The ext4 baseline, or `None` with the reason noted.
fn ext4_baseline(args: &Args, scratch: &Scratch, env: &mut Environment) -> Option<Ext4> {
    if args.no_baseline {
        env.ext4 = Some("skipped (--no-baseline)".to_string());
        return None;
    }
    let bytes = args.image_size.min(EXT4_IMAGE_BYTES_MAX);
    eprintln!(
        "augefs: setting up the ext4 baseline ({})",
        platform::units::human(bytes)
    );
    match Ext4::setup(scratch, bytes, args.common.backend) {
        Ok(ext4) => {
            env.ext4 = Some(format!(
                "{} image on {} (direct IO {}), mkfs.ext4 -E lazy_itable_init=0,lazy_journal_init=0, default mount options (data=ordered); each append is pwrite + fdatasync; bytes and flushes from the loop device's stat",
                platform::units::human(bytes),
                ext4.loop_device(),
                match ext4.direct_io {
                    Some(true) => "on",
                    Some(false) => "off",
                    None => "unknown",
                },
            ));
            Some(ext4)
        }
        Err(e) => {
            eprintln!("augefs: note: skipping the ext4 baseline: {e}");
            env.ext4 = Some(format!("skipped: {e}"));
            None
        }
    }
}

pub(super) fn fsync_figure(
    args: &Args,
    setup: &Setup,
    scratch: &Scratch,
    report: &mut Report,
    env: &mut Environment,
) -> Result<(), String> {
    let ext4 = ext4_baseline(args, scratch, env);
    let mut systems = vec![System::Async, System::Ordered];
    if ext4.is_some() {
        systems.push(System::Ext4);
    }
    let domains = setup.default_domains()?;
    let key = |figure, threads, system| Key {
        figure,
        threads,
        domains: if system == System::Ext4 { 0 } else { domains },
        system,
    };
    for &threads in &args.threads {
        for run in 0..args.common.runs {
            for system in turn_order(&systems, run) {
                let sample = match (&ext4, system) {
                    (Some(ext4), System::Ext4) => ext4_sample(args, ext4, threads)?,
                    _ => engine_sample(args, setup, domains, fsync_path(system), threads, env)?,
                };
                eprintln!(
                    "augefs: append+fsync x{threads}, run {}/{}, {}: {:.0} ops/s",
                    run + 1,
                    args.common.runs,
                    system.name(),
                    sample.value
                );
                report.add(key(Figure::Fsync, threads, system), sample);
            }
        }
        let of = |system| key(Figure::Fsync, threads, system);
        report.add_paired_ratio(
            key(Figure::AsyncOverOrdered, threads, System::Async),
            of(System::Async),
            of(System::Ordered),
        );
        report.add_paired_ratio(
            key(Figure::AsyncOverExt4, threads, System::Async),
            of(System::Async),
            of(System::Ext4),
        );
    }
    Ok(())
}

/// Whether an image of `image_bytes` can be formatted with `domains` and give each at
/// least the segments mkfs's default count allows per domain.
pub(super) fn domains_fit(image_bytes: u64, domains: u32) -> bool {
    Geometry::compute(image_bytes, domains)
        .is_ok_and(|g| u64::from(g.segment_count) / u64::from(domains) >= SEGMENTS_PER_DOMAIN_MIN)
}

pub(super) fn domains_figure(
    args: &Args,
    setup: &Setup,
    report: &mut Report,
    env: &mut Environment,
) -> Result<(), String> {
    let (counts, skipped): (Vec<u32>, Vec<u32>) = args
        .domains
        .iter()
        .partition(|&&n| domains_fit(args.image_size, n));
    if !skipped.is_empty() {
        eprintln!("augefs: note: the image is too small for {skipped:?} domains; skipping those");
    }
    env.domains_skipped = skipped;
    let key = |figure, domains| Key {
        figure,
        threads: DOMAIN_THREADS,
        domains,
        system: System::Async,
    };
    for run in 0..args.common.runs {
        for domains in turn_order(&counts, run) {
            let sample =
                engine_sample(args, setup, domains, FsyncPath::Async, DOMAIN_THREADS, env)?;
            eprintln!(
                "augefs: append+fsync x{DOMAIN_THREADS}, domains {domains}, run {}/{}: {:.0} ops/s",
                run + 1,
                args.common.runs,
                sample.value
            );
            report.add(key(Figure::Domains, domains), sample);
        }
    }
    for &domains in counts.iter().filter(|&&n| n != 1) {
        report.add_paired_ratio(
            key(Figure::DomainsOverOne, domains),
            key(Figure::Domains, domains),
            key(Figure::Domains, 1),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_images_hold_fewer_domains() {
        assert!(domains_fit(256 << 20, 16));
        assert!(domains_fit(4 << 30, 16));
        assert!(!domains_fit(64 << 20, 16));
        assert!(domains_fit(64 << 20, 1));
    }
}
