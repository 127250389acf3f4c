//! Running a workload on the recording device: the setup unrecorded, then every step
//! recorded, with the tree after each step, each step's result, whose dirty data it
//! wrote back, and what each persistence point promised (docs/SEMANTICS.md §2).
//!
//! Invariants:
//! - `states[i]` is the tree after `i` recorded steps (`states[0]`: after setup).
//! - A promise is recorded only for a persistence point that returned success, with the
//!   writes the device's flushes had made durable when it returned.
//! - The image has room for every step (`Workload::room_bytes`) in its free space after
//!   the setup, checked before the first step: no step fails for want of space unless
//!   the workload was too big for every image size, which is an error, not a finding.

use crate::apply::{Runner, Scope, WrittenBack};
use crate::snapshot::Snapshot;
use crate::workload::Workload;
use device::memory::MemoryBackend;
use device::recording::{Recording, RecordingBackend, RecordingHandle};
use device::{AlignedBuf, Device, IoCause};
use engine::log::{EngineConfig, EngineEnv};
use engine::mkfs::{format, MkfsOptions};
use engine::progress::NoProgress;
use platform::ManualClock;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use vfs::{FileSystem, VfsError};

/// The image sizes a workload may get, smallest first: the smallest with room for the
/// workload after its setup is used (64 MiB has no free space left with 3 domains, each
/// domain keeping two heads).
pub const IMAGE_SIZES_MIB: [u64; 6] = [64, 96, 128, 192, 256, 512];

/// Free space kept beyond what the steps may take (a head segment's rounding).
const ROOM_MARGIN_BYTES: u64 = 1 << 20;

/// A persistence point that returned success: after step `step` (1-based count of
/// recorded steps done), covering `scope`. `durable`: how many writes the device's
/// flushes had made durable when it returned (`RecordingHandle::durable_writes`): every
/// crash after it keeps at least those, so every crash state with that durable prefix
/// must keep the promise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Promise {
    pub step: usize,
    pub durable: u64,
    pub scope: Scope,
}

/// What a run did, as the checker judges it.
#[derive(Debug, Clone, Default)]
pub struct History {
    pub states: Vec<Snapshot>,
    /// Per recorded step: Ok, or the errno it failed with.
    pub results: Vec<Result<(), i32>>,
    pub promises: Vec<Promise>,
    /// Per recorded step: whose dirty data it wrote back (nobody's if it failed).
    pub written_back: Vec<WrittenBack>,
}

/// A recorded run.
#[derive(Debug)]
pub struct Recorded {
    pub history: History,
    pub recording: Recording,
    pub image_bytes: u64,
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
/// An error here is the harness's or the workload's (a setup step failed, no image has
/// room), not a crash finding.
pub fn record(workload: &Workload) -> Result<Recorded, String> {
    record_with(workload, &|_| {})
}

/// [`record`] that hands the recording device to `before_steps` once the setup is done
/// (tests set fault plans or flush mutations there).
pub fn record_with(
    workload: &Workload,
    before_steps: &dyn Fn(&RecordingHandle),
) -> Result<Recorded, String> {
    let (image, room) = set_up_image(workload)?;
    let image_bytes = image.len() as u64;
    let (backend, handle) = RecordingBackend::over_shared(image, 512);
    let fs = mount(Arc::new(Device::new(Box::new(backend)))).map_err(|e| format!("mount: {e}"))?;
    let free = free_bytes(&fs);
    if free < room {
        return Err(format!(
            "the {} MiB image has {free} bytes free, the steps need {room}",
            image_bytes >> 20
        ));
    }
    before_steps(&handle);
    let mut runner = Runner::new(&fs);
    let mut h = History {
        states: vec![Snapshot::take(&fs).map_err(|e| format!("snapshot: {e}"))?],
        ..History::default()
    };
    for (i, step) in workload.steps.iter().enumerate() {
        let acked: Vec<(usize, &Scope)> = h.promises.iter().map(|p| (p.step, &p.scope)).collect();
        let scope = runner.scope_of(&step.op, &h.states, &acked);
        let written_back = runner.written_back(&step.op);
        let result = runner
            .apply(step, workload.setup.len() + i)
            .map_err(|e| e.errno());
        if let (Ok(()), Some(scope)) = (&result, scope) {
            h.promises.push(Promise {
                step: i + 1,
                durable: handle.durable_writes(),
                scope,
            });
        }
        if result.is_ok() {
            runner.note_dirty(&step.op, &written_back);
        }
        let snap =
            Snapshot::take(&fs).map_err(|e| format!("snapshot after line {}: {e}", step.line))?;
        h.states.push(snap);
        h.written_back.push(match result {
            Ok(()) => written_back,
            Err(_) => WrittenBack::Files(Default::default()),
        });
        h.results.push(result);
    }
    runner
        .close_all()
        .map_err(|e| format!("closing descriptors: {e}"))?;
    drop(runner);
    fs.unmount().map_err(|e| format!("unmount: {e}"))?;
    Ok(Recorded {
        history: h,
        recording: handle.snapshot(),
        image_bytes,
    })
}

/// The room the engine promises (not statfs's free, which counts free segments a
/// small image's writes may take now but GC may not make again).
fn free_bytes(fs: &FileSystem) -> u64 {
    fs.wait_for_frees();
    let s = fs.engine().space_report();
    s.capacity_blocks.saturating_sub(s.live_blocks) * format::constants::BLOCK_SIZE_BYTES
}

/// The image after mkfs and `workload`'s setup, of the smallest size in
/// [`IMAGE_SIZES_MIB`] with room for its steps, and the room they need.
fn set_up_image(workload: &Workload) -> Result<(Arc<[u8]>, u64), String> {
    let room = workload.room_bytes() + ROOM_MARGIN_BYTES;
    let mut largest = String::new();
    for mib in IMAGE_SIZES_MIB {
        // A small image may not take the domain count at all (mkfs refuses): the next.
        match set_up_image_of(workload, mib << 20) {
            Ok((image, free)) if free >= room => return Ok((image, room)),
            Ok((_, free)) => largest = format!("{mib} MiB has {free} bytes free after the setup"),
            Err(e) => largest = format!("{mib} MiB: {e}"),
        }
    }
    Err(format!(
        "no image has room for the steps ({room} bytes) with {} domains: {largest}",
        workload.domains
    ))
}

/// The image of `bytes` after mkfs and `workload`'s setup, and its free bytes then;
/// shared by every workload with the same domain count and setup (the generated ones
/// all share one).
fn set_up_image_of(workload: &Workload, bytes: u64) -> Result<(Arc<[u8]>, u64), String> {
    type Cache = Mutex<HashMap<String, (Arc<[u8]>, u64)>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let key = format!(
        "{bytes}\n{}\n{}",
        workload.domains,
        workload
            .setup
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    );
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(found) = cache.lock().expect("image cache").get(&key) {
        return Ok(found.clone());
    }
    let base = Device::new(Box::new(MemoryBackend::new(bytes, 512)));
    let opts = MkfsOptions {
        domain_count: Some(workload.domains),
        fs_uuid: [0xc7; 16],
        created_unix_ns: 1,
        force: false,
        label: String::new(),
    };
    format(&base, None, &opts, &NoProgress).map_err(|e| format!("mkfs: {e}"))?;
    let base = Arc::new(base);
    let fs = mount(base.clone()).map_err(|e| format!("mount: {e}"))?;
    let mut runner = Runner::new(&fs);
    for (i, step) in workload.setup.iter().enumerate() {
        let result = runner.apply(step, i).map_err(|e| e.errno());
        if result != step.expect.map_or(Ok(()), Err) {
            return Err(format!(
                "setup line {}: {step}: {}",
                step.line,
                crate::check::outcome(result)
            ));
        }
    }
    runner
        .close_all()
        .map_err(|e| format!("closing the setup's descriptors: {e}"))?;
    drop(runner);
    fs.unmount()
        .map_err(|e| format!("unmount after setup: {e}"))?;
    let image: Arc<[u8]> = base
        .read(0, AlignedBuf::zeroed(bytes as usize), IoCause::Tool)
        .map_err(|e| format!("reading the set-up image: {e}"))?
        .to_vec()
        .into();
    // The free space as a run's mount sees it (its recovery may take a segment for a
    // table), on a copy-on-write view, so the image stays as the setup left it.
    let view = Device::new(Box::new(device::cow::CowBackend::new(image.clone(), 512)));
    let free = free_bytes(&mount(Arc::new(view)).map_err(|e| format!("mount: {e}"))?);
    cache
        .lock()
        .expect("image cache")
        .insert(key, (image.clone(), free));
    Ok((image, free))
}
