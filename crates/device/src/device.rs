//! [`Device`]: the handle every layer uses. It checks alignment, counts each request by
//! cause, and offers blocking conveniences over the queue protocol.

use crate::backend::{Backend, BackendQueue, DeviceInfo};
use crate::buf::{AlignedBuf, BUF_ALIGN_BYTES};
use crate::error::DeviceError;
use crate::request::{IoCompletion, IoOp, IoRequest};
use platform::{IoCause, IoCounters};

/// A device: one backend plus IO accounting.
#[derive(Debug)]
pub struct Device {
    backend: Box<dyn Backend>,
    counters: IoCounters,
}

impl Device {
    pub fn new(backend: Box<dyn Backend>) -> Device {
        let info = backend.info();
        assert!(info.logical_block_bytes.is_power_of_two());
        assert!(info.logical_block_bytes as usize <= BUF_ALIGN_BYTES);
        Device {
            backend,
            counters: IoCounters::new(),
        }
    }

    pub fn info(&self) -> &DeviceInfo {
        self.backend.info()
    }

    pub fn size_bytes(&self) -> u64 {
        self.info().size_bytes
    }

    pub fn counters(&self) -> &IoCounters {
        &self.counters
    }

    /// The backend, for backend-specific calls in tests (e.g. the recording device).
    pub fn backend(&self) -> &dyn Backend {
        self.backend.as_ref()
    }

    /// A queue for this thread's requests.
    pub fn queue(&self) -> Result<Queue<'_>, DeviceError> {
        Ok(Queue {
            inner: self.backend.queue()?,
            device: self,
        })
    }

    fn check(&self, op: &IoOp) {
        let info = self.info();
        let block = info.logical_block_bytes as u64;
        if let Some((offset, len)) = op.range() {
            assert!(
                offset % block == 0,
                "{} offset {offset} not aligned to {block}",
                op.name()
            );
            assert!(
                len % block == 0 && len > 0,
                "{} length {len} not a multiple of {block}",
                op.name()
            );
            assert!(
                offset + len <= info.size_bytes,
                "{} [{offset}, +{len}) past device end {}",
                op.name(),
                info.size_bytes
            );
        }
        if let IoOp::Read { buf, .. } | IoOp::Write { buf, .. } = op {
            assert_eq!(buf.as_ptr() as usize % BUF_ALIGN_BYTES, 0);
        }
    }

    fn count(&self, request: &IoRequest) {
        let c = &self.counters;
        match &request.op {
            IoOp::Read { buf, .. } => c.count_read(request.cause, buf.len() as u64),
            IoOp::Write { buf, .. } => c.count_write(request.cause, buf.len() as u64),
            IoOp::Flush => c.count_flush(request.cause),
            IoOp::Discard { len, .. } => c.count_discard(request.cause, *len),
        }
    }

    /// Runs `requests` and returns their completions in request order. Requests between
    /// two flushes run concurrently; each flush starts after everything before it has
    /// completed, and nothing after it starts before it completes. Stops at the first
    /// phase with a failure and returns that failure.
    pub fn run(&self, requests: Vec<IoRequest>) -> Result<Vec<IoCompletion>, DeviceError> {
        let count = requests.len();
        let mut queue = self.queue()?;
        let mut done: Vec<Option<IoCompletion>> = (0..count).map(|_| None).collect();
        let mut originals: Vec<u64> = Vec::with_capacity(count);
        let mut phase: Vec<IoRequest> = Vec::new();
        let mut iter = requests.into_iter().enumerate().peekable();
        while iter.peek().is_some() {
            phase.clear();
            // A phase: everything up to and including the next flush (which runs alone).
            while let Some((i, mut r)) = iter.next_if(|(_, r)| !matches!(r.op, IoOp::Flush)) {
                originals.push(r.tag);
                r.tag = i as u64;
                phase.push(r);
            }
            queue.run_phase(std::mem::take(&mut phase), &mut done)?;
            if let Some((i, mut flush)) = iter.next() {
                originals.push(flush.tag);
                flush.tag = i as u64;
                queue.run_phase(vec![flush], &mut done)?;
            }
        }
        Ok(done
            .into_iter()
            .zip(originals)
            .map(|(c, tag)| {
                let mut c = c.expect("every request completed");
                c.request.tag = tag;
                c
            })
            .collect())
    }

    /// Reads `buf.len()` bytes at `offset` into `buf`.
    pub fn read(
        &self,
        offset: u64,
        buf: AlignedBuf,
        cause: IoCause,
    ) -> Result<AlignedBuf, DeviceError> {
        self.single(IoRequest::read(offset, buf, cause))
            .map(|b| b.expect("read returns its buffer"))
    }

    pub fn write(
        &self,
        offset: u64,
        buf: AlignedBuf,
        cause: IoCause,
    ) -> Result<AlignedBuf, DeviceError> {
        self.single(IoRequest::write(offset, buf, cause))
            .map(|b| b.expect("write returns its buffer"))
    }

    pub fn flush(&self, cause: IoCause) -> Result<(), DeviceError> {
        self.single(IoRequest::flush(cause)).map(|_| ())
    }

    pub fn discard(&self, offset: u64, len: u64, cause: IoCause) -> Result<(), DeviceError> {
        self.single(IoRequest::discard(offset, len, cause))
            .map(|_| ())
    }

    fn single(&self, request: IoRequest) -> Result<Option<AlignedBuf>, DeviceError> {
        let mut completions = self.run(vec![request])?;
        let c = completions.pop().expect("one completion");
        c.result?;
        Ok(c.request.into_buf())
    }
}

/// A thread's queue on a [`Device`]: checks and counts each request, then hands it to
/// the backend queue.
pub struct Queue<'d> {
    inner: Box<dyn BackendQueue + 'd>,
    device: &'d Device,
}

impl std::fmt::Debug for Queue<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("outstanding", &self.inner.outstanding())
            .finish()
    }
}

impl Queue<'_> {
    pub fn depth(&self) -> usize {
        self.inner.depth()
    }

    pub fn outstanding(&self) -> usize {
        self.inner.outstanding()
    }

    /// Adds a request; returns it back when the queue is full.
    pub fn push(&mut self, request: IoRequest) -> Result<(), IoRequest> {
        self.device.check(&request.op);
        if self.inner.outstanding() >= self.inner.depth() {
            return Err(request);
        }
        self.device.count(&request);
        self.inner.push(request)
    }

    pub fn submit(&mut self, min_complete: usize) -> Result<(), DeviceError> {
        assert!(
            min_complete <= self.inner.outstanding(),
            "waiting for more than is outstanding"
        );
        self.inner.submit(min_complete)
    }

    pub fn pop(&mut self) -> Option<IoCompletion> {
        self.inner.pop()
    }

    /// Runs a set of requests concurrently, keeping the queue full, and stores each
    /// completion at `done[tag]`. Returns the first failure after all have finished.
    fn run_phase(
        &mut self,
        requests: Vec<IoRequest>,
        done: &mut [Option<IoCompletion>],
    ) -> Result<(), DeviceError> {
        let mut pending = requests.into_iter();
        let mut next = pending.next();
        let mut first_error: Option<DeviceError> = None;
        loop {
            while let Some(r) = next.take() {
                match self.push(r) {
                    Ok(()) => next = pending.next(),
                    Err(r) => {
                        next = Some(r);
                        break;
                    }
                }
            }
            if self.outstanding() == 0 {
                break;
            }
            self.submit(1)?;
            while let Some(c) = self.pop() {
                if let Err(e) = &c.result {
                    if first_error.is_none() {
                        first_error = Some(clone_error(e));
                    }
                }
                let slot = c.request.tag as usize;
                assert!(done[slot].is_none(), "request {slot} completed twice");
                done[slot] = Some(c);
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// Device errors hold io::Error, which is not Clone; keep errno and text.
fn clone_error(e: &DeviceError) -> DeviceError {
    match e {
        DeviceError::Io { op, offset, source } => DeviceError::Io {
            op,
            offset: *offset,
            source: match source.raw_os_error() {
                Some(errno) => std::io::Error::from_raw_os_error(errno),
                None => std::io::Error::new(source.kind(), source.to_string()),
            },
        },
        DeviceError::Injected { op, nth } => DeviceError::Injected { op, nth: *nth },
        other => DeviceError::Io {
            op: "unknown",
            offset: 0,
            source: std::io::Error::from_raw_os_error(other.errno()),
        },
    }
}
