//! Running a workload on the recording device: the setup unrecorded, then every step
//! recorded, with the tree after each step and what each persistence point promised
//! (docs/SEMANTICS.md §2).
//!
//! Invariants:
//! - `states[i]` is the tree after `i` recorded steps (`states[0]`: after setup), and
//!   `writes[i]` the device's write count then.
//! - A promise is recorded only for a persistence point that returned success.

use crate::snapshot::Snapshot;
use crate::workload::{Op, Step, Workload};
use device::memory::MemoryBackend;
use device::recording::{Recording, RecordingBackend};
use device::{AlignedBuf, Device, IoCause};
use engine::log::{EngineConfig, EngineEnv};
use engine::mkfs::{format, MkfsOptions};
use engine::progress::NoProgress;
use format::InodeNo;
use platform::ManualClock;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use vfs::{Fallocate, FileSystem, VfsError, XattrMode};

/// Image size of every run (the smallest the format accepts, so images copy fast).
pub const IMAGE_BYTES: u64 = 64 << 20;

/// What a successful persistence point made durable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// sync: everything.
    All,
    /// fsync or fdatasync of a file: its contents and attributes, and these entries
    /// (the names it was created, linked or renamed under since its previous fsync).
    File {
        ino: u64,
        entries: Vec<(u64, Vec<u8>)>,
    },
    /// fsync of a directory: every entry of it.
    Dir { ino: u64 },
}

/// A persistence point that returned success: after step `step` (1-based count of
/// recorded steps done), covering `scope`, acknowledged once `writes` writes are durable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Promise {
    pub step: usize,
    pub writes: u64,
    pub scope: Scope,
}

/// A recorded run.
#[derive(Debug)]
pub struct Recorded {
    pub states: Vec<Snapshot>,
    pub writes: Vec<u64>,
    /// Per recorded step: Ok, or the errno it failed with (a failing step is legal: the
    /// generator makes sequences where, say, an unlink finds nothing).
    pub results: Vec<Result<(), i32>>,
    pub promises: Vec<Promise>,
    pub recording: Recording,
}

/// The engine configuration of every run (and every recovery): inline MetaDB jobs, so a
/// run is deterministic and a failure replays.
pub fn engine_config() -> EngineConfig {
    let mut config = EngineConfig::default();
    config.metadb.background = false;
    config.metadb.memtable_bytes = 256 << 10;
    config
}

/// Mounts `device` as the harness does.
pub fn mount(device: Arc<Device>) -> Result<FileSystem, VfsError> {
    let env = EngineEnv {
        device,
        pmr: None,
        clock: Arc::new(ManualClock::new(1_000_000)),
    };
    let fs = FileSystem::mount(env, engine_config())?;
    fs.set_creds(vfs::Creds::root());
    Ok(fs)
}

/// Runs `workload`: formats an image, runs and syncs the setup, then records every step.
/// An error here is the harness's or the workload's (a setup step failed), not a crash
/// finding.
pub fn record(workload: &Workload) -> Result<Recorded, String> {
    let image = set_up_image(workload)?;
    let (backend, handle) = RecordingBackend::over_shared(image, 512);
    let fs = mount(Arc::new(Device::new(Box::new(backend)))).map_err(|e| format!("mount: {e}"))?;
    let mut states = vec![Snapshot::take(&fs).map_err(|e| format!("snapshot: {e}"))?];
    let mut writes = vec![handle.write_count()];
    let mut results = Vec::new();
    let mut promises = Vec::new();
    for (i, step) in workload.steps.iter().enumerate() {
        let scope = scope_of(&fs, &step.op, &states, &promises);
        let result = apply(&fs, step, workload.setup.len() + i).map_err(|e| e.errno());
        let snap =
            Snapshot::take(&fs).map_err(|e| format!("snapshot after line {}: {e}", step.line))?;
        states.push(snap);
        writes.push(handle.write_count());
        if let (Ok(()), Some(scope)) = (&result, scope) {
            promises.push(Promise {
                step: i + 1,
                writes: handle.write_count(),
                scope,
            });
        }
        results.push(result);
    }
    fs.unmount().map_err(|e| format!("unmount: {e}"))?;
    Ok(Recorded {
        states,
        writes,
        results,
        promises,
        recording: handle.snapshot(),
    })
}

/// The image after mkfs and `workload`'s setup, shared by every workload with the same
/// domain count and setup (the generated ones all share one).
fn set_up_image(workload: &Workload) -> Result<Arc<[u8]>, String> {
    static CACHE: OnceLock<Mutex<HashMap<String, Arc<[u8]>>>> = OnceLock::new();
    let key = format!(
        "{}\n{}",
        workload.domains,
        workload
            .setup
            .iter()
            .map(|s| s.op.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    );
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(image) = cache.lock().expect("image cache").get(&key) {
        return Ok(image.clone());
    }
    let base = Device::new(Box::new(MemoryBackend::new(IMAGE_BYTES, 512)));
    let opts = MkfsOptions {
        domain_count: Some(workload.domains),
        fs_uuid: [0xc7; 16],
        created_unix_ns: 1,
        force: false,
    };
    format(&base, None, &opts, &NoProgress).map_err(|e| format!("mkfs: {e}"))?;
    let base = Arc::new(base);
    let fs = mount(base.clone()).map_err(|e| format!("mount: {e}"))?;
    for (i, step) in workload.setup.iter().enumerate() {
        apply(&fs, step, i).map_err(|e| format!("setup line {}: {}: {e}", step.line, step.op))?;
    }
    fs.unmount()
        .map_err(|e| format!("unmount after setup: {e}"))?;
    let image: Arc<[u8]> = base
        .read(0, AlignedBuf::zeroed(IMAGE_BYTES as usize), IoCause::Tool)
        .map_err(|e| format!("reading the set-up image: {e}"))?
        .to_vec()
        .into();
    cache
        .lock()
        .expect("image cache")
        .insert(key, image.clone());
    Ok(image)
}

/// What `op` promises if it succeeds (None: not a persistence point, or its path names
/// nothing now).
fn scope_of(fs: &FileSystem, op: &Op, states: &[Snapshot], promises: &[Promise]) -> Option<Scope> {
    let path = match op {
        Op::Sync => return Some(Scope::All),
        Op::Fsync(p) | Op::Fdatasync(p) => p,
        _ => return None,
    };
    let ino = fs.resolve(path, true).ok()?.0;
    let now = states.last().expect("states start non-empty");
    if now
        .objects
        .get(&ino)
        .is_some_and(|o| o.kind == vfs::Kind::Dir)
    {
        return Some(Scope::Dir { ino });
    }
    // The names `ino` gained since its previous fsync (or since recording began).
    let since = promises
        .iter()
        .rev()
        .find(|p| matches!(&p.scope, Scope::File { ino: i, .. } if *i == ino))
        .map_or(0, |p| p.step);
    let mut entries = BTreeSet::new();
    for w in states[since..].windows(2) {
        for (key, &target) in &w[1].entries {
            if target == ino && w[0].entries.get(key) != Some(&ino) {
                entries.insert(key.clone());
            }
        }
    }
    Some(Scope::File {
        ino,
        entries: entries.into_iter().collect(),
    })
}

/// The bytes step `index` writes at `offset`: they depend on the step and on the byte's
/// offset, so a stale or misplaced block never reads as the right one.
pub fn pattern(index: usize, offset: u64, len: u64) -> Vec<u8> {
    (offset..offset + len)
        .map(|o| {
            let v =
                (o / 4096).wrapping_mul(31) ^ (o % 4096).wrapping_mul(7) ^ (index as u64 * 0x9e37);
            (v % 251) as u8 + 1
        })
        .collect()
}

/// Runs one step (`index` counts setup and recorded steps together, for the pattern).
fn apply(fs: &FileSystem, step: &Step, index: usize) -> Result<(), VfsError> {
    let root = vfs::Creds::root();
    match &step.op {
        Op::Create(p) => {
            let (parent, name) = fs.resolve_parent(p)?;
            fs.create(&root, parent, name, vfs::Kind::File, 0o644, None)
                .map(|_| ())
        }
        Op::Mkdir(p) => fs.create_dir(p, 0o755),
        Op::Write(p, off, len) => {
            let ino = file(fs, p)?;
            fs.write_at(ino, *off, &pattern(index, *off, *len))
                .map(|_| ())
        }
        Op::Append(p, len) => {
            let ino = file(fs, p)?;
            let off = fs.stat_ino(ino)?.size;
            fs.write_at(ino, off, &pattern(index, off, *len))
                .map(|_| ())
        }
        Op::Truncate(p, size) => fs.truncate(file(fs, p)?, *size),
        Op::Punch(p, off, len) => fs.fallocate(file(fs, p)?, Fallocate::PunchHole, *off, *len),
        Op::Falloc(p, off, len, keep) => fs.fallocate(
            file(fs, p)?,
            Fallocate::Allocate { keep_size: *keep },
            *off,
            *len,
        ),
        Op::Unlink(p) => fs.remove_file(p),
        Op::Rmdir(p) => fs.remove_dir(p),
        Op::Rename(a, b, mode) => fs.rename_path(a, b, *mode),
        Op::Link(a, b) => fs.hard_link(a, b),
        Op::Symlink(t, p) => fs.symlink(t, p),
        Op::SetXattr(p, n, v) => fs.set_xattr(p, n.as_bytes(), v.as_bytes(), XattrMode::Either),
        Op::RemoveXattr(p, n) => fs.remove_xattr(p, n.as_bytes()),
        Op::Chmod(p, m) => fs.set_permissions(p, *m),
        Op::Fsync(p) => fs.fsync_ino(fs.resolve(p, true)?, false),
        Op::Fdatasync(p) => fs.fsync_ino(fs.resolve(p, true)?, true),
        Op::Sync => fs.sync(),
    }
}

fn file(fs: &FileSystem, path: &str) -> Result<InodeNo, VfsError> {
    let ino = fs.resolve(path, true)?;
    match fs.stat_ino(ino)?.kind {
        vfs::Kind::File => Ok(ino),
        vfs::Kind::Dir => Err(VfsError::IsDir(path.into())),
        vfs::Kind::Symlink => Err(VfsError::Invalid(path.into())),
    }
}
