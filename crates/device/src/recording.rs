//! The recording, fault-injecting device for crash tests ([`BackendKind::Recording`]).
//!
//! [`RecordingBackend`] serves reads from the state the file system sees (every successful
//! write applied, as before a crash) and logs every write, discard and flush. A cloneable
//! [`RecordingHandle`] lets a test, while the [`crate::Device`] is still in use, inject
//! failures ([`FaultPlan`]), take a [`Recording`] snapshot, enumerate [`CrashState`]s under
//! a [`CrashPolicy`] and build the device image of each.
//!
//! Crash model (the device assumptions of docs/TESTING.md "Crash images"):
//! - Writes are numbered from 0 in completion order ([`WriteId`]). A discard is recorded
//!   as a write of zeros: before it is durable the range holds old data or zeros.
//! - A flush covers the writes that had completed when the `submit` call carrying it
//!   began (lib.rs invariant). Writes pushed in the same `submit` are in flight with it
//!   and not covered, as on io_uring without a drain flag. A failed flush covers nothing.
//! - In the epoch after the k-th successful flush, writes `0..durable` have landed; any
//!   subset of the later completed writes may have landed too. Landed writes apply in
//!   write order, so an overlapping later write wins.
//! - A write tears only at 4 KiB-aligned device boundaries ([`TORN_BLOCK_BYTES`]): any
//!   subset of its 4 KiB blocks may land, each block whole. The format assumes only
//!   512-byte sector atomicity, so this model is optimistic inside a 4 KiB block.
//! - An injected write or discard failure changes nothing and records no write; the
//!   device state stays consistent with the log at every moment (one lock orders both).
//!
//! This file holds the device, its log and fault plan; [`state`] describes crash states,
//! [`snapshot`] builds their images and [`enumerate`] chooses which ones to check.

pub mod enumerate;
#[cfg(feature = "mutations")]
pub mod mutation;
pub mod snapshot;
pub mod state;

pub use enumerate::{CrashPolicy, CrashStates, EXHAUSTIVE_LIMIT};
#[cfg(feature = "mutations")]
pub use mutation::FlushMutation;
pub use snapshot::{Epoch, Recording};
pub use state::{CrashState, ParseCrashStateError, TornWrite};

use crate::backend::{Backend, BackendKind, BackendQueue, DeviceInfo};
use crate::error::DeviceError;
use crate::memory::{MemoryBackend, SyncQueue, MEMORY_QUEUE_DEPTH};
use crate::request::{IoCompletion, IoOp, IoRequest};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// The unit a write tears at: a write spanning several 4 KiB-aligned blocks may land
/// partially, block by block.
pub const TORN_BLOCK_BYTES: u64 = 4096;

/// Index of a recorded write (or discard) in completion order, from 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WriteId(pub u64);

impl fmt::Display for WriteId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "W{}", self.0)
    }
}

/// What a recorded write put on the device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteData {
    Bytes(Arc<[u8]>),
    /// A discard, modelled as a write of zeros.
    Zeros {
        len_bytes: u64,
    },
}

/// A write or discard that completed successfully.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedWrite {
    pub offset: u64,
    pub data: WriteData,
}

impl RecordedWrite {
    pub fn len_bytes(&self) -> u64 {
        match &self.data {
            WriteData::Bytes(bytes) => bytes.len() as u64,
            WriteData::Zeros { len_bytes } => *len_bytes,
        }
    }

    pub fn is_discard(&self) -> bool {
        matches!(self.data, WriteData::Zeros { .. })
    }

    /// How many 4 KiB-aligned device blocks the write touches.
    pub fn block_count(&self) -> u32 {
        assert!(self.len_bytes() > 0, "empty write recorded");
        let first = self.offset / TORN_BLOCK_BYTES;
        let last = (self.offset + self.len_bytes() - 1) / TORN_BLOCK_BYTES;
        u32::try_from(last - first + 1).expect("a write spans fewer than 2^32 blocks")
    }

    /// Device byte range `[start, end)` of block `block` of this write.
    pub fn block_range(&self, block: u32) -> (u64, u64) {
        assert!(block < self.block_count(), "block {block} beyond the write");
        let block_start = (self.offset / TORN_BLOCK_BYTES + u64::from(block)) * TORN_BLOCK_BYTES;
        let start = block_start.max(self.offset);
        let end = (block_start + TORN_BLOCK_BYTES).min(self.offset + self.len_bytes());
        (start, end)
    }

    /// Applies the device bytes `[start, end)` of this write to `image`.
    pub(crate) fn apply_range(&self, image: &mut [u8], start: u64, end: u64) {
        assert!(self.offset <= start && start < end && end <= self.offset + self.len_bytes());
        let target = &mut image[start as usize..end as usize];
        match &self.data {
            WriteData::Bytes(bytes) => {
                target.copy_from_slice(
                    &bytes[(start - self.offset) as usize..(end - self.offset) as usize],
                );
            }
            WriteData::Zeros { .. } => target.fill(0),
        }
    }

    fn apply(&self, image: &mut [u8]) {
        self.apply_range(image, self.offset, self.offset + self.len_bytes());
    }
}

/// One entry of the event log, in the order the device executed them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A write or discard completed and is in the current state.
    Write { id: WriteId },
    /// A flush succeeded: writes `0..covers` are durable.
    Flush { covers: u64 },
    /// An injected failure: the `nth` `op` ("write", "flush", "discard") since the fault
    /// plan was set. Nothing was applied or made durable.
    Failed { op: &'static str, nth: u64 },
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::Write { id } => write!(f, "{id}"),
            Event::Flush { covers } => write!(f, "flush(covers {covers})"),
            Event::Failed { op, nth } => write!(f, "failed {op} #{nth}"),
        }
    }
}

/// Which requests fail with [`DeviceError::Injected`] (errno EIO). Counts are 1-based and
/// start when the plan is set with [`RecordingHandle::set_fault`]; every write, flush and
/// discard counts, failed or not. Discards count separately and fail only once the
/// device has died. Reads never fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FaultPlan {
    #[default]
    None,
    /// The nth write fails; later writes succeed.
    FailWrite { nth: u64 },
    /// The nth flush fails; later flushes succeed.
    FailFlush { nth: u64 },
    /// The device dies at the nth write: it and every later write, flush and discard
    /// fail until another plan is set.
    DieAtWrite { nth: u64 },
    /// The device dies at the nth flush, as above.
    DieAtFlush { nth: u64 },
}

impl FaultPlan {
    /// The kind of operation and its count (since the plan was set) that triggers it.
    fn target(self) -> Option<(OpKind, u64)> {
        match self {
            FaultPlan::None => None,
            FaultPlan::FailWrite { nth } | FaultPlan::DieAtWrite { nth } => {
                Some((OpKind::Write, nth))
            }
            FaultPlan::FailFlush { nth } | FaultPlan::DieAtFlush { nth } => {
                Some((OpKind::Flush, nth))
            }
        }
    }

    /// Whether triggering leaves the device dead.
    fn kills(self) -> bool {
        matches!(
            self,
            FaultPlan::DieAtWrite { .. } | FaultPlan::DieAtFlush { .. }
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpKind {
    Write,
    Flush,
    Discard,
}

impl OpKind {
    fn name(self) -> &'static str {
        match self {
            OpKind::Write => "write",
            OpKind::Flush => "flush",
            OpKind::Discard => "discard",
        }
    }
}

/// The log, the fault plan and its counters. One lock orders log and device state.
#[derive(Debug, Default)]
struct Log {
    writes: Vec<RecordedWrite>,
    events: Vec<Event>,
    fault: FaultPlan,
    dead: bool,
    /// Writes, flushes and discards seen since the plan was set, by `OpKind`.
    seen_since_plan: [u64; 3],
    injected_count: u64,
    /// The highest `covers` of a successful flush so far: writes below it are durable.
    flushed_writes: u64,
    #[cfg(feature = "mutations")]
    mutation: mutation::MutationState,
}

impl Log {
    /// Counts an operation and decides whether the fault plan fails it.
    fn admit(&mut self, kind: OpKind) -> Result<(), DeviceError> {
        let counter = &mut self.seen_since_plan[kind as usize];
        *counter += 1;
        let nth = *counter;
        let hit = self.fault.target() == Some((kind, nth));
        self.dead |= hit && self.fault.kills();
        let fails = hit || self.dead;
        if !fails {
            return Ok(());
        }
        self.injected_count += 1;
        self.events.push(Event::Failed {
            op: kind.name(),
            nth,
        });
        Err(DeviceError::Injected {
            op: kind.name(),
            nth,
        })
    }

    fn push_write(&mut self, write: RecordedWrite) {
        let id = WriteId(self.writes.len() as u64);
        self.writes.push(write);
        self.events.push(Event::Write { id });
        #[cfg(feature = "mutations")]
        if let Some(covers) = self.mutation.flush_after_write() {
            self.push_flush(covers);
        }
    }

    fn push_flush(&mut self, covers: u64) {
        self.events.push(Event::Flush { covers });
        self.flushed_writes = self.flushed_writes.max(covers);
    }
}

/// Where a recording device keeps what reads return.
#[derive(Debug)]
enum Store {
    Memory(MemoryBackend),
    /// Over a shared initial image (no copy of it per device).
    Cow(crate::cow::CowBackend),
}

impl Store {
    fn execute(&self, request: &mut IoRequest) -> Result<(), DeviceError> {
        match self {
            Store::Memory(m) => m.execute(request),
            Store::Cow(c) => c.execute(request),
        }
    }

    fn image(&self) -> Vec<u8> {
        match self {
            Store::Memory(m) => m.image(),
            Store::Cow(c) => c.image(),
        }
    }
}

#[derive(Debug)]
struct Shared {
    memory: Store,
    initial: Arc<[u8]>,
    log: Mutex<Log>,
}

impl Shared {
    fn log(&self) -> MutexGuard<'_, Log> {
        self.log
            .lock()
            .expect("recording log lock poisoned by a panicking IO thread")
    }

    /// Executes one request. `covered_writes` is how many writes had completed when the
    /// `submit` carrying the request began: what a flush in it may cover.
    fn execute(&self, request: &mut IoRequest, covered_writes: u64) -> Result<(), DeviceError> {
        let record = match &request.op {
            IoOp::Read { .. } => return self.memory.execute(request),
            IoOp::Write { offset, buf } => RecordedWrite {
                offset: *offset,
                data: WriteData::Bytes(Arc::from(&buf[..])),
            },
            IoOp::Discard { offset, len } => RecordedWrite {
                offset: *offset,
                data: WriteData::Zeros { len_bytes: *len },
            },
            IoOp::Flush => {
                let mut log = self.log();
                log.admit(OpKind::Flush)?;
                assert!(
                    covered_writes <= log.writes.len() as u64,
                    "flush covers unrecorded writes"
                );
                #[cfg(feature = "mutations")]
                if log.mutation.intercept_flush(request.cause, covered_writes) {
                    return Ok(());
                }
                log.push_flush(covered_writes);
                return Ok(());
            }
        };
        let mut log = self.log();
        log.admit(if record.is_discard() {
            OpKind::Discard
        } else {
            OpKind::Write
        })?;
        self.memory.execute(request)?;
        log.push_write(record);
        Ok(())
    }
}

/// The recording device. Create it with [`RecordingBackend::new`], keep the handle, and
/// give the backend to [`crate::Device::new`].
#[derive(Debug)]
pub struct RecordingBackend {
    info: DeviceInfo,
    shared: Arc<Shared>,
}

impl RecordingBackend {
    /// A device holding `initial_image`, and the handle to its recording.
    pub fn new(
        initial_image: Vec<u8>,
        logical_block_bytes: u32,
    ) -> (RecordingBackend, RecordingHandle) {
        RecordingBackend::over(MemoryBackend::from_image(
            initial_image,
            logical_block_bytes,
        ))
    }

    /// Records the IO to `memory`, whose contents become the initial image.
    pub fn over(memory: MemoryBackend) -> (RecordingBackend, RecordingHandle) {
        let initial: Arc<[u8]> = Arc::from(memory.image());
        let info = memory.info().clone();
        RecordingBackend::with_store(Store::Memory(memory), info, initial)
    }

    /// A device holding the shared `initial_image`, which is never copied or written (many
    /// recordings may start from one image).
    pub fn over_shared(
        initial_image: Arc<[u8]>,
        logical_block_bytes: u32,
    ) -> (RecordingBackend, RecordingHandle) {
        let cow = crate::cow::CowBackend::new(initial_image.clone(), logical_block_bytes);
        let info = cow.info().clone();
        RecordingBackend::with_store(Store::Cow(cow), info, initial_image)
    }

    fn with_store(
        memory: Store,
        mut info: DeviceInfo,
        initial: Arc<[u8]>,
    ) -> (RecordingBackend, RecordingHandle) {
        info.backend = BackendKind::Recording;
        info.notice = None;
        let shared = Arc::new(Shared {
            memory,
            initial,
            log: Mutex::new(Log::default()),
        });
        let handle = RecordingHandle {
            shared: Arc::clone(&shared),
        };
        (RecordingBackend { info, shared }, handle)
    }

    pub fn handle(&self) -> RecordingHandle {
        RecordingHandle {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl Backend for RecordingBackend {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn queue(&self) -> Result<Box<dyn BackendQueue + '_>, DeviceError> {
        let covered = Arc::new(AtomicU64::new(0));
        let shared = &*self.shared;
        let in_closure = Arc::clone(&covered);
        let inner = SyncQueue::new(MEMORY_QUEUE_DEPTH, move |r: &mut IoRequest| {
            shared.execute(r, in_closure.load(Ordering::Relaxed))
        });
        Ok(Box::new(RecordingQueue {
            inner,
            covered,
            shared,
        }))
    }
}

/// A [`SyncQueue`] that notes, at each `submit`, how many writes a flush in it covers.
struct RecordingQueue<'a, F> {
    inner: SyncQueue<F>,
    /// Writes completed when the current `submit` began (read by the closure, same thread).
    covered: Arc<AtomicU64>,
    shared: &'a Shared,
}

impl<F: FnMut(&mut IoRequest) -> Result<(), DeviceError> + Send> BackendQueue
    for RecordingQueue<'_, F>
{
    fn depth(&self) -> usize {
        self.inner.depth()
    }

    fn push(&mut self, request: IoRequest) -> Result<(), IoRequest> {
        self.inner.push(request)
    }

    fn submit(&mut self, min_complete: usize) -> Result<(), DeviceError> {
        let completed = self.shared.log().writes.len() as u64;
        self.covered.store(completed, Ordering::Relaxed);
        self.inner.submit(min_complete)
    }

    fn pop(&mut self) -> Option<IoCompletion> {
        self.inner.pop()
    }

    fn outstanding(&self) -> usize {
        self.inner.outstanding()
    }
}

/// A cloneable handle to a recording device's log and fault plan, usable while the
/// device runs.
#[derive(Debug, Clone)]
pub struct RecordingHandle {
    shared: Arc<Shared>,
}

impl RecordingHandle {
    /// Replaces the fault plan, restarts its counts and revives a dead device.
    pub fn set_fault(&self, plan: FaultPlan) {
        if let Some((_, nth)) = plan.target() {
            assert!(nth >= 1, "fault counts start at 1");
        }
        let mut log = self.shared.log();
        log.fault = plan;
        log.dead = false;
        log.seen_since_plan = [0; 3];
    }

    pub fn fault(&self) -> FaultPlan {
        self.shared.log().fault
    }

    /// Whether a `DieAt*` plan has triggered.
    pub fn is_dead(&self) -> bool {
        self.shared.log().dead
    }

    /// Requests failed by fault plans since the device was created.
    pub fn injected_count(&self) -> u64 {
        self.shared.log().injected_count
    }

    /// Writes and discards recorded so far.
    pub fn write_count(&self) -> u64 {
        self.shared.log().writes.len() as u64
    }

    /// How many writes a successful flush has made durable so far (the highest `covers`
    /// recorded, as [`Recording::epochs`] takes it): every crash from now on keeps at
    /// least these. What a caller that just returned from a durability call may rely on.
    pub fn durable_writes(&self) -> u64 {
        self.shared.log().flushed_writes
    }

    /// Breaks the flush contract from now on as `mutation` says (tests only).
    #[cfg(feature = "mutations")]
    pub fn set_flush_mutation(&self, mutation: FlushMutation) {
        self.shared.log().mutation.set(mutation);
    }

    pub fn events(&self) -> Vec<Event> {
        self.shared.log().events.clone()
    }

    /// A copy of the log as it is now; the device may go on.
    pub fn snapshot(&self) -> Recording {
        let log = self.shared.log();
        Recording::new(
            Arc::clone(&self.shared.initial),
            log.writes.clone(),
            log.events.clone(),
        )
    }

    /// The crash states of the log so far; see [`Recording::crash_states`].
    pub fn crash_states(&self, policy: &CrashPolicy) -> CrashStates {
        self.snapshot().crash_states(policy)
    }

    /// The image of one crash state of the log so far. Each call takes a snapshot; to
    /// build many images, take one [`Recording`] and ask it.
    pub fn image(&self, state: &CrashState) -> Vec<u8> {
        self.snapshot().image(state)
    }

    /// The image with every recorded write applied: the state without a crash.
    pub fn image_after_all(&self) -> Vec<u8> {
        self.snapshot().image_after_all()
    }

    /// What reads return now (equal to `image_after_all`).
    pub fn current_image(&self) -> Vec<u8> {
        let _order = self.shared.log();
        self.shared.memory.image()
    }
}
