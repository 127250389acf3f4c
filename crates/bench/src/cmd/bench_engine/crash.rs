//! The recovery figure of `augefs bench engine`: a real crash. A child process (this
//! binary, `augefs-bench engine-crash-child`) mounts the image and appends with fsync
//! from several threads, printing each acknowledged append; the parent kills it with
//! SIGKILL once enough is acknowledged, so the child dies mid-IO with nothing closed.
//! Then the parent times `Engine::open` and checks what survived.
//!
//! Protocol (the child's stdout, one line each, printed only after the call returned):
//! - `mounted`: the engine is open;
//! - `done <file> <blocks>`: blocks `0..blocks` of inode `<file>` are durable.
//!
//! Invariants:
//! - Every block the child acknowledged reads back after recovery with its content
//!   (`workload::block_into`); otherwise the run is an error, not a sample. The last
//!   acknowledged block and the first of every file are read; so is every block past
//!   the acknowledged ones that recovery kept (they must be intact too).
//! - The engine's count of live blocks after recovery equals the blocks the files map.
//! - The child is bounded (it stops by itself past `--limit` bytes) and so is the wait
//!   for it (no line for [`STALL_TIMEOUT`] kills it); a guard kills it if the parent
//!   fails or panics.

use super::report::{Figure, Key, Report, Sample, System};
use super::subject::{Mounted, Setup};
use super::workload::{self, BLOCK};
use super::{Args, Environment};
use crate::child::CrashChild;
use crate::image;
use engine::log::keys::FileBlock;
use engine::log::{Durability, Engine, EngineConfig, EngineEnv, MountReport, WriteOptions};
use format::InodeNo;
use metadb::WriteBatch;
use platform::units::{human, parse_size};
use platform::{IoCause, SystemClock};
use serde_json::json;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Threads of the child, one file each (the "4 threads").
pub const CRASH_THREADS: usize = 4;
/// Bytes per append of the child.
pub const CRASH_WRITE_BYTES: u64 = 64 << 10;
/// The parent gives up on a child that prints nothing for this long.
const STALL_TIMEOUT: Duration = Duration::from_secs(120);
/// Blocks read past a file's acknowledged end at most (the child has one append in
/// flight per thread; recovery can keep no more than what was issued).
const SCAN_PAST_END_BLOCKS_MAX: u64 = 64 * 1024;

#[derive(clap::Args, Debug)]
pub struct ChildArgs {
    /// The formatted image.
    #[arg(long)]
    pub image: PathBuf,
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: device::BackendChoice,
    #[arg(long, default_value_t = CRASH_THREADS)]
    pub threads: usize,
    /// Bytes per append (whole 4 KiB blocks).
    #[arg(long, value_parser = parse_size, default_value = "64KiB")]
    pub write_size: u64,
    /// Stop after issuing this many bytes in all (the parent kills the child first).
    #[arg(long, value_parser = parse_size)]
    pub limit: u64,
}

/// The child: mounts and appends until killed, or fails past `limit`.
pub fn child(args: ChildArgs) -> Result<(), String> {
    if args.threads == 0 || args.write_size == 0 || args.write_size % BLOCK as u64 != 0 {
        return Err("--threads must be positive and --write-size whole 4 KiB blocks".into());
    }
    let device = image::open_device(&args.image, args.backend)?;
    let env = EngineEnv {
        device,
        pmr: None,
        clock: Arc::new(SystemClock::new()),
    };
    let engine = Engine::open(env, EngineConfig::default())
        .map_err(|e| format!("mounting {}: {e}", args.image.display()))?;
    println!("mounted");
    let issued = AtomicU64::new(0);
    let result = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..args.threads)
            .map(|thread| {
                let (engine, issued, args) = (&engine, &issued, &args);
                scope.spawn(move || child_appends(engine, thread, issued, args))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("an append thread panicked"))
            .collect::<Result<Vec<()>, String>>()
    });
    result?;
    Err(format!(
        "nobody killed the child after {} issued",
        human(args.limit)
    ))
}

fn child_appends(
    engine: &Engine,
    thread: usize,
    issued: &AtomicU64,
    args: &ChildArgs,
) -> Result<(), String> {
    let file = workload::file_of(thread);
    let blocks = args.write_size / BLOCK as u64;
    let extra = WriteBatch::new();
    let mut data = vec![0u8; args.write_size as usize];
    let mut next = 0;
    while issued.fetch_add(args.write_size, Ordering::Relaxed) < args.limit {
        for (i, block) in data.chunks_mut(BLOCK).enumerate() {
            workload::block_into(file, next + i as u64, block);
        }
        engine
            .write(
                InodeNo(file),
                FileBlock(next),
                &data,
                WriteOptions::new(&extra, Durability::Fsync),
            )
            .map_err(|e| format!("append to inode {file}: {e}"))?;
        next += blocks;
        // One write per line (stdout is line-buffered), so lines never interleave.
        writeln!(std::io::stdout().lock(), "done {file} {next}")
            .map_err(|e| format!("telling the parent: {e}"))?;
    }
    Ok(())
}

/// What the child acknowledged before it died.
#[derive(Debug, Default)]
struct Crash {
    /// Blocks acknowledged per file.
    acknowledged: BTreeMap<u64, u64>,
    /// From "mounted" to the kill.
    appending_ns: u64,
}

impl Crash {
    fn acknowledged_bytes(&self) -> u64 {
        self.acknowledged.values().sum::<u64>() * BLOCK as u64
    }

    fn note(&mut self, line: &str) -> Result<(), String> {
        let bad = || format!("the crash child printed {line:?}");
        let mut words = line.split_whitespace();
        if words.next() != Some("done") {
            return Err(bad());
        }
        let mut number =
            || -> Result<u64, String> { words.next().and_then(|w| w.parse().ok()).ok_or_else(bad) };
        let (file, blocks) = (number()?, number()?);
        let known = self.acknowledged.entry(file).or_default();
        *known = (*known).max(blocks);
        Ok(())
    }
}

/// Runs the child on the formatted image until it has acknowledged `args.crash_size`,
/// then kills it.
fn crash(args: &Args, setup: &Setup, run: u32) -> Result<Crash, String> {
    let exe = std::env::current_exe().map_err(|e| format!("finding this program: {e}"))?;
    let limit = args.crash_size + args.crash_size / 4;
    let image = setup.image.to_string_lossy().into_owned();
    let mut command = Command::new(exe);
    command
        .args(["engine-crash-child", "--image", &image, "--backend"])
        .arg(args.common.backend.name())
        .args(["--threads", &CRASH_THREADS.to_string()])
        .args(["--write-size", &CRASH_WRITE_BYTES.to_string()])
        .args(["--limit", &limit.to_string()]);
    let child = CrashChild::spawn(command, "crash child")?;
    let mut crash = Crash::default();
    let mut next_progress = 1u64 << 28;
    crash.appending_ns = child.until_killed(STALL_TIMEOUT, |line| {
        crash.note(line)?;
        let done = crash.acknowledged_bytes();
        if done >= next_progress && done < args.crash_size {
            eprintln!(
                "augefs: recovery run {}/{}: {} acknowledged",
                run + 1,
                args.common.runs,
                human(done)
            );
            next_progress += 1 << 28;
        }
        Ok(done >= args.crash_size)
    })?;
    Ok(crash)
}

/// What reading the files back after recovery found.
#[derive(Debug)]
struct Checked {
    acknowledged_blocks: u64,
    /// Blocks past the acknowledged end that recovery kept (appends in flight).
    unacknowledged_blocks: u64,
}

/// Reads block `block` of `file`: whether it is mapped, and if so, whether it holds its
/// content.
fn read_block(engine: &Engine, file: u64, block: u64) -> Result<Option<bool>, String> {
    let mut data = vec![0u8; BLOCK];
    let mapped = engine
        .read(InodeNo(file), FileBlock(block), &mut data)
        .map_err(|e| format!("reading block {block} of inode {file} after recovery: {e}"))?;
    Ok(mapped[0].then(|| workload::is_block(file, block, &data)))
}

fn check(engine: &Engine, crash: &Crash, report: &MountReport) -> Result<Checked, String> {
    let mut checked = Checked {
        acknowledged_blocks: 0,
        unacknowledged_blocks: 0,
    };
    for thread in 0..CRASH_THREADS {
        let file = workload::file_of(thread);
        let blocks = crash.acknowledged.get(&file).copied().unwrap_or(0);
        let ends = if blocks == 0 {
            vec![]
        } else {
            vec![0, blocks - 1]
        };
        for block in ends {
            let found = match read_block(engine, file, block)? {
                Some(true) => continue,
                Some(false) => "wrong",
                None => "missing",
            };
            return Err(format!(
                "block {block} of inode {file} was acknowledged (fsync) before the crash but is {found} after recovery"
            ));
        }
        checked.acknowledged_blocks += blocks;
        let mut block = blocks;
        while block - blocks < SCAN_PAST_END_BLOCKS_MAX {
            match read_block(engine, file, block)? {
                None => break,
                Some(true) => block += 1,
                Some(false) => {
                    return Err(format!(
                        "block {block} of inode {file} (not acknowledged) was recovered with wrong content"
                    ))
                }
            }
        }
        checked.unacknowledged_blocks += block - blocks;
    }
    let mapped = checked.acknowledged_blocks + checked.unacknowledged_blocks;
    if report.valid_blocks != mapped {
        return Err(format!(
            "after recovery the engine counts {} live blocks but the files map {mapped}",
            report.valid_blocks
        ));
    }
    Ok(checked)
}

/// One run: format, crash the child, recover (timed), check.
fn recovery_run(
    args: &Args,
    setup: &Setup,
    run: u32,
    env: &mut Environment,
) -> Result<Sample, String> {
    setup.format_only()?;
    let crash = crash(args, setup, run)?;
    let (mounted, open_ns, before) = setup.recover()?;
    env.note(&mounted);
    let open_io = mounted.io().since(&before);
    let mount = mounted.engine.mount_report().clone();
    let checked = check(&mounted.engine, &crash, &mount);
    let closed = Mounted::close(mounted);
    let checked = checked?;
    closed?;
    eprintln!(
        "augefs: recovery run {}/{}: {} acknowledged, killed, Engine::open {:.1} ms ({} records replayed, {} blocks verified, {} dropped)",
        run + 1,
        args.common.runs,
        human(crash.acknowledged_bytes()),
        open_ns as f64 / 1e6,
        mount.replay.records,
        mount.replay.blocks_verified,
        mount.replay.records_dropped,
    );
    let detail = json!({
        "open_ns": open_ns,
        "acknowledged_bytes": crash.acknowledged_bytes(),
        "acknowledged_blocks_per_file": crash.acknowledged,
        "appending_ns": crash.appending_ns,
        "unacknowledged_blocks_recovered": checked.unacknowledged_blocks,
        "replay_records": mount.replay.records,
        "replay_blocks_verified": mount.replay.blocks_verified,
        "replay_records_dropped": mount.replay.records_dropped,
        "valid_blocks": mount.valid_blocks,
        "domain_segments": mount.domain_segments,
        "open_read_bytes": open_io.total().read_bytes,
        "open_wal_read_bytes": open_io.cause(IoCause::Wal).read_bytes,
        "open_written_bytes": open_io.total().write_bytes,
        "open_flushes": open_io.total().flush_ops,
    });
    Ok(Sample {
        value: open_ns as f64 / 1e6,
        per_op: None,
        detail,
    })
}

pub(super) fn recovery_figure(
    args: &Args,
    setup: &Setup,
    report: &mut Report,
    env: &mut Environment,
) -> Result<(), String> {
    let key = Key {
        figure: Figure::Recovery,
        threads: CRASH_THREADS,
        domains: setup.default_domains()?,
        system: System::Async,
    };
    for run in 0..args.common.runs {
        let sample = recovery_run(args, setup, run, env)?;
        report.add(key, sample);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acknowledgements_keep_the_highest_block_count() {
        let mut crash = Crash::default();
        crash.note("done 1 16").unwrap();
        crash.note("done 2 16").unwrap();
        crash.note("done 1 32").unwrap();
        assert_eq!(crash.acknowledged.get(&1), Some(&32));
        assert_eq!(crash.acknowledged_bytes(), 48 * BLOCK as u64);
        assert!(crash.note("done 1").is_err());
        assert!(crash.note("hello").is_err());
    }
}
