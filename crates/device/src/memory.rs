//! An in-memory device: a byte vector. Writes are durable at once (there is no cache to
//! lose), so flush only orders. Used by unit tests and the simulator, and as the store
//! behind the recording device.

use crate::backend::{Backend, BackendKind, BackendQueue, DeviceInfo};
use crate::error::DeviceError;
use crate::request::{IoCompletion, IoOp, IoRequest};
use std::collections::VecDeque;
use std::sync::RwLock;

/// Queue depth of memory queues: large enough that callers exercise batching.
pub const MEMORY_QUEUE_DEPTH: usize = 256;

#[derive(Debug)]
pub struct MemoryBackend {
    info: DeviceInfo,
    bytes: RwLock<Vec<u8>>,
}

impl MemoryBackend {
    pub fn new(size_bytes: u64, logical_block_bytes: u32) -> MemoryBackend {
        MemoryBackend::from_image(vec![0; size_bytes as usize], logical_block_bytes)
    }

    /// A device whose contents are `image` (e.g. a crash image).
    pub fn from_image(image: Vec<u8>, logical_block_bytes: u32) -> MemoryBackend {
        assert!(image.len() as u64 % logical_block_bytes as u64 == 0);
        let info = DeviceInfo {
            backend: BackendKind::Memory,
            path: None,
            size_bytes: image.len() as u64,
            logical_block_bytes,
            is_block_device: false,
            discard_supported: true,
            notice: None,
        };
        MemoryBackend {
            info,
            bytes: RwLock::new(image),
        }
    }

    /// A copy of the current contents.
    pub fn image(&self) -> Vec<u8> {
        self.bytes.read().expect("memory lock").clone()
    }

    /// Applies one request to the bytes. Shared with the recording backend.
    pub(crate) fn execute(&self, request: &mut IoRequest) -> Result<(), DeviceError> {
        match &mut request.op {
            IoOp::Read { offset, buf } => {
                let bytes = self.bytes.read().expect("memory lock");
                let start = *offset as usize;
                let len = buf.len();
                buf.copy_from_slice(&bytes[start..start + len]);
            }
            IoOp::Write { offset, buf } => {
                let mut bytes = self.bytes.write().expect("memory lock");
                let start = *offset as usize;
                bytes[start..start + buf.len()].copy_from_slice(buf);
            }
            IoOp::Flush => {}
            IoOp::Discard { offset, len } => {
                // Discarded ranges read back as zeros, like a thin-provisioned device.
                let mut bytes = self.bytes.write().expect("memory lock");
                bytes[*offset as usize..(*offset + *len) as usize].fill(0);
            }
        }
        Ok(())
    }
}

impl Backend for MemoryBackend {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn queue(&self) -> Result<Box<dyn BackendQueue + '_>, DeviceError> {
        Ok(Box::new(SyncQueue::new(
            MEMORY_QUEUE_DEPTH,
            move |r: &mut IoRequest| self.execute(r),
        )))
    }
}

/// A queue that executes each request synchronously, in push order, at `submit`.
/// Used by backends without real asynchrony (memory, recording, pread).
#[expect(missing_debug_implementations, reason = "holds a closure")]
pub struct SyncQueue<F> {
    depth: usize,
    execute: F,
    pushed: VecDeque<IoRequest>,
    completed: VecDeque<IoCompletion>,
}

impl<F: FnMut(&mut IoRequest) -> Result<(), DeviceError> + Send> SyncQueue<F> {
    pub fn new(depth: usize, execute: F) -> Self {
        SyncQueue {
            depth,
            execute,
            pushed: VecDeque::new(),
            completed: VecDeque::new(),
        }
    }
}

impl<F: FnMut(&mut IoRequest) -> Result<(), DeviceError> + Send> BackendQueue for SyncQueue<F> {
    fn depth(&self) -> usize {
        self.depth
    }

    fn push(&mut self, request: IoRequest) -> Result<(), IoRequest> {
        if self.outstanding() >= self.depth {
            return Err(request);
        }
        self.pushed.push_back(request);
        Ok(())
    }

    fn submit(&mut self, min_complete: usize) -> Result<(), DeviceError> {
        assert!(min_complete <= self.outstanding());
        while let Some(mut request) = self.pushed.pop_front() {
            let result = (self.execute)(&mut request);
            self.completed.push_back(IoCompletion { request, result });
        }
        Ok(())
    }

    fn pop(&mut self) -> Option<IoCompletion> {
        self.completed.pop_front()
    }

    fn outstanding(&self) -> usize {
        self.pushed.len() + self.completed.len()
    }
}
