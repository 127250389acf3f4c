//! The backend interface every device implementation provides.

use crate::error::DeviceError;
use crate::request::{IoCompletion, IoRequest};
use serde::Serialize;
use std::path::PathBuf;

/// Which implementation serves a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BackendKind {
    IoUring,
    Pread,
    Memory,
    Recording,
}

impl BackendKind {
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::IoUring => "io_uring",
            BackendKind::Pread => "pread",
            BackendKind::Memory => "memory",
            BackendKind::Recording => "recording",
        }
    }
}

/// What a device is and can do.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceInfo {
    pub backend: BackendKind,
    pub path: Option<PathBuf>,
    pub size_bytes: u64,
    /// The smallest aligned unit of direct IO (offset and length granularity).
    pub logical_block_bytes: u32,
    pub is_block_device: bool,
    pub discard_supported: bool,
    /// Why a fallback backend was chosen, if it was.
    pub notice: Option<String>,
}

/// A device implementation. Shared between threads; each thread works through its own
/// [`BackendQueue`].
pub trait Backend: Send + Sync + std::fmt::Debug {
    fn info(&self) -> &DeviceInfo;

    /// A queue for one thread's requests. Backends may pool the resources behind it.
    fn queue(&self) -> Result<Box<dyn BackendQueue + '_>, DeviceError>;
}

/// One thread's submission and completion queue.
///
/// Protocol: `push` requests (up to `depth` not yet popped), `submit` to start them and
/// wait for at least `min_complete` finished ones, `pop` completions in any order.
/// Dropping a queue waits for requests still in flight.
pub trait BackendQueue: Send {
    /// The most requests that may be pushed and not yet popped.
    fn depth(&self) -> usize;

    /// Adds a request. Returns it back when the queue is full.
    fn push(&mut self, request: IoRequest) -> Result<(), IoRequest>;

    /// Starts every pushed request and waits until at least `min_complete` completions
    /// can be popped. `min_complete` must not exceed the requests pushed and not popped.
    fn submit(&mut self, min_complete: usize) -> Result<(), DeviceError>;

    /// A finished request, if any.
    fn pop(&mut self) -> Option<IoCompletion>;

    /// Requests pushed and not yet popped.
    fn outstanding(&self) -> usize;
}
