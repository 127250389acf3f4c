//! The io_uring backend: reads, writes and flushes on an `O_DIRECT` descriptor, many in
//! flight per queue (docs/DESIGN.md §4.1).
//!
//! Each [`BackendQueue`] owns one ring while it lives. Rings are pooled by the backend:
//! `queue()` takes one from the pool (or sets a new one up) and dropping the queue gives
//! it back, so threads that open queues often do not pay for ring setup.
//!
//! Invariants:
//! - A request's buffer stays owned by its slot while the kernel may touch it; a slot is
//!   freed only after its last completion entry has been reaped. Dropping a queue waits
//!   for every request in flight; if it cannot (the ring itself failed) it leaks the ring
//!   and the buffers rather than free memory the kernel may still write.
//! - At most `depth` requests are pushed and not popped; the submission ring holds
//!   `depth` entries and the completion ring twice that, so neither can overflow.
//! - Short transfers are continued and `EINTR`/`EAGAIN` resubmitted (bounded by
//!   [`RETRIES_MAX`]); any other failure completes the request with the errno.
//! - Flush and discard run synchronously at `submit`, in the submitting thread, before
//!   the ring is entered: flush is `fdatasync` (a flush covers only writes that completed
//!   before it was submitted, so running it before writes pushed alongside it is within
//!   its contract), discard a hole punch or `BLKDISCARD`. `IORING_OP_FSYNC` always runs
//!   on an io-wq worker, and the hand-off to it and back cost a sync WAL append (write
//!   plus flush) about a fifth of its latency on the development VM; discard is rare
//!   (segment reclaim) and not latency-bound.
//! - A ring that cannot be set up, or lacks the opcodes used here, is
//!   [`DeviceError::UringUnavailable`], so `file::open` can fall back to pread.
//!
//! Registered buffers (`READ_FIXED`/`WRITE_FIXED`) are not used. Requests bring their own
//! buffers, and a registered range must stay mapped to the same pages for as long as it
//! is registered, which only a pool owned by the ring could promise. Nor did they pay off
//! where measured: on the development VM (virtio disk, 4 KiB random reads, QD32), fio
//! with `--fixedbufs=1` against `=0`, 10 alternating 2 s pairs, had a median pair ratio
//! of 0.95 (an earlier 6 pairs: 1.13), inside the run-to-run noise. `gup_fast_fallback`,
//! the pinning fixed buffers save, was 5% of our samples in `perf` at about 40% of a core.

use crate::backend::{Backend, BackendKind, BackendQueue, DeviceInfo};
use crate::error::DeviceError;
use crate::request::{IoCompletion, IoOp, IoRequest};
use crate::sync::{self, RETRIES_MAX};
use io_uring::{opcode, squeue, types, IoUring, Probe};
use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::Mutex;

/// Largest queue depth (ring entries) a backend accepts.
pub const QUEUE_DEPTH_MAX: u32 = 4096;

/// Rings kept for reuse; more concurrent queues than this get rings that are closed
/// when their queue drops.
const RING_POOL_MAX: usize = 64;

/// Linux caps one read or write at this many bytes (`MAX_RW_COUNT`); longer requests
/// are split by the short-transfer path.
const TRANSFER_BYTES_MAX: usize = 0x7fff_f000;

/// io_uring on an `O_DIRECT` file or block device.
pub struct UringBackend {
    file: File,
    info: DeviceInfo,
    queue_depth: u32,
    rings: Mutex<Vec<Parts>>,
}

/// A queue's ring and bookkeeping, pooled together (a queue is taken per fsync: making
/// its slot table and completion queue anew was 5% of an append + fsync's CPU).
struct Parts {
    ring: IoUring,
    slots: Vec<Option<Slot>>,
    free: Vec<u32>,
    deferred: Vec<u32>,
    completed: VecDeque<IoCompletion>,
}

impl Parts {
    fn new(ring: IoUring, depth: usize) -> Parts {
        Parts {
            ring,
            slots: (0..depth).map(|_| None).collect(),
            free: (0..depth as u32).rev().collect(),
            deferred: Vec::with_capacity(depth),
            completed: VecDeque::with_capacity(depth),
        }
    }
}

impl UringBackend {
    /// Serves `file` (opened by `file::open`, which filled `info`). Sets up one ring now,
    /// so that a kernel or sandbox without io_uring is reported here, as
    /// [`DeviceError::UringUnavailable`].
    pub fn new(
        file: File,
        mut info: DeviceInfo,
        queue_depth: u32,
    ) -> Result<UringBackend, DeviceError> {
        assert!(
            queue_depth > 0 && queue_depth <= QUEUE_DEPTH_MAX,
            "queue depth {queue_depth} outside 1..={QUEUE_DEPTH_MAX}"
        );
        let ring = setup_ring(queue_depth)?;
        info.backend = BackendKind::IoUring;
        Ok(UringBackend {
            file,
            info,
            queue_depth,
            rings: Mutex::new(vec![Parts::new(ring, queue_depth as usize)]),
        })
    }
}

impl std::fmt::Debug for UringBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pooled = self.rings.lock().map(|r| r.len()).unwrap_or(0);
        f.debug_struct("UringBackend")
            .field("file", &self.file)
            .field("info", &self.info)
            .field("queue_depth", &self.queue_depth)
            .field("rings_pooled", &pooled)
            .finish()
    }
}

/// Sets up a ring with `depth` submission entries and checks the opcodes we use.
fn setup_ring(depth: u32) -> Result<IoUring, DeviceError> {
    let unavailable = |what: &str, e: io::Error| DeviceError::UringUnavailable {
        reason: format!("{what}: {e}"),
    };
    let entries = depth.next_power_of_two();
    // Cooperative task running (5.19) spares the submitting thread an interrupt per
    // completion; submit-all (5.18) keeps submitting past a failed entry. Older kernels
    // reject the flags with EINVAL, and then get a plain ring.
    let ring = IoUring::builder()
        .setup_coop_taskrun()
        .setup_taskrun_flag()
        .setup_submit_all()
        .setup_cqsize(entries * 2)
        .build(entries)
        .or_else(|e| match e.raw_os_error() {
            Some(libc::EINVAL) => IoUring::builder().setup_cqsize(entries * 2).build(entries),
            _ => Err(e),
        })
        .map_err(|e| unavailable("io_uring_setup", e))?;
    let mut probe = Probe::new();
    ring.submitter()
        .register_probe(&mut probe)
        .map_err(|e| unavailable("probe", e))?;
    for (name, code) in [("read", opcode::Read::CODE), ("write", opcode::Write::CODE)] {
        if !probe.is_supported(code) {
            return Err(DeviceError::UringUnavailable {
                reason: format!("the kernel lacks the {name} opcode"),
            });
        }
    }
    assert!(ring.params().sq_entries() >= depth && ring.params().cq_entries() >= 2 * depth);
    Ok(ring)
}

impl Backend for UringBackend {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn queue(&self) -> Result<Box<dyn BackendQueue + '_>, DeviceError> {
        let pooled = self.rings.lock().expect("ring pool lock").pop();
        let parts = match pooled {
            Some(parts) => parts,
            None => Parts::new(setup_ring(self.queue_depth)?, self.queue_depth as usize),
        };
        Ok(Box::new(UringQueue::new(self, parts)))
    }
}

/// A request the kernel is working on (or will, once submitted).
struct Slot {
    request: IoRequest,
    /// Bytes already transferred by earlier, short completions.
    done_bytes: usize,
    retries: u32,
}

/// One thread's queue: a ring and `depth` request slots; `user_data` is the slot index.
struct UringQueue<'b> {
    backend: &'b UringBackend,
    /// `None` only after `drop` took it.
    ring: Option<IoUring>,
    depth: usize,
    slots: Vec<Option<Slot>>,
    /// Indices of empty slots.
    free: Vec<u32>,
    /// Slots holding discards, run synchronously at the next `submit`.
    deferred: Vec<u32>,
    completed: VecDeque<IoCompletion>,
}

impl<'b> UringQueue<'b> {
    fn new(backend: &'b UringBackend, parts: Parts) -> UringQueue<'b> {
        let depth = backend.queue_depth as usize;
        assert!(
            parts.slots.len() == depth
                && parts.free.len() == depth
                && parts.deferred.is_empty()
                && parts.completed.is_empty(),
            "a pooled queue is idle"
        );
        debug_assert!(parts.slots.iter().all(Option::is_none));
        UringQueue {
            backend,
            ring: Some(parts.ring),
            depth,
            slots: parts.slots,
            free: parts.free,
            deferred: parts.deferred,
            completed: parts.completed,
        }
    }

    fn ring(&mut self) -> &mut IoUring {
        self.ring
            .as_mut()
            .expect("queue has its ring until dropped")
    }

    /// Requests pushed and not yet completed (in the rings, or deferred).
    fn in_flight(&self) -> usize {
        self.depth - self.free.len()
    }

    /// Queues the submission entry for slot `index`'s remaining transfer.
    fn enqueue(&mut self, index: u32) {
        let fd = types::Fd(self.backend.file.as_raw_fd());
        let slot = self.slots[index as usize]
            .as_mut()
            .expect("enqueued slot is occupied");
        let entry = entry_for(fd, slot).user_data(index as u64);
        // SAFETY: the entry points into the slot's buffer, which the slot owns until the
        // entry's completion is reaped (`complete`), and the queue's drop waits for that.
        let pushed = unsafe { self.ring().submission().push(&entry) };
        // Every occupied slot has at most one entry in the submission ring, and the ring
        // has at least `depth` entries.
        pushed.expect("submission ring has room for every slot");
    }

    /// Reaps every available completion entry, without a system call.
    fn reap(&mut self) {
        loop {
            let next = self.ring().completion().next();
            let Some(cqe) = next else { break };
            self.complete(cqe.user_data() as u32, cqe.result());
        }
    }

    /// Handles one completion entry of slot `index`: finishes the request, or resubmits
    /// what is left of it.
    fn complete(&mut self, index: u32, result: i32) {
        let slot = self.slots[index as usize]
            .as_mut()
            .expect("completion for an occupied slot");
        let op = slot.request.op.name();
        let (offset, len) = slot.request.op.range().unwrap_or((0, 0));
        let at = offset + slot.done_bytes as u64;
        let outcome: Option<Result<(), DeviceError>> = if result < 0 {
            let errno = -result;
            if (errno == libc::EINTR || errno == libc::EAGAIN) && slot.retries < RETRIES_MAX {
                slot.retries += 1;
                None
            } else {
                Some(Err(DeviceError::Io {
                    op,
                    offset: at,
                    source: io::Error::from_raw_os_error(errno),
                }))
            }
        } else if result == 0 {
            let kind = if op == "read" {
                io::ErrorKind::UnexpectedEof
            } else {
                io::ErrorKind::WriteZero
            };
            Some(Err(DeviceError::Io {
                op,
                offset: at,
                source: io::Error::from(kind),
            }))
        } else {
            slot.done_bytes += result as usize;
            assert!(
                slot.done_bytes as u64 <= len,
                "kernel transferred more than asked"
            );
            if slot.done_bytes as u64 == len {
                Some(Ok(()))
            } else if slot.retries < RETRIES_MAX {
                slot.retries += 1;
                None
            } else {
                Some(Err(DeviceError::Io {
                    op,
                    offset: at,
                    source: io::Error::from(io::ErrorKind::WriteZero),
                }))
            }
        };
        match outcome {
            None => self.enqueue(index),
            Some(result) => self.finish(index, result),
        }
    }

    fn finish(&mut self, index: u32, result: Result<(), DeviceError>) {
        let slot = self.slots[index as usize]
            .take()
            .expect("finished slot is occupied");
        self.free.push(index);
        self.completed.push_back(IoCompletion {
            request: slot.request,
            result,
        });
    }

    /// Runs the deferred flushes and discards, in push order.
    fn run_deferred(&mut self) {
        let fd = self.backend.file.as_raw_fd();
        let is_block_device = self.backend.info.is_block_device;
        for k in 0..self.deferred.len() {
            let index = self.deferred[k];
            let slot = self.slots[index as usize]
                .as_ref()
                .expect("deferred slot is occupied");
            let result = match slot.request.op {
                IoOp::Discard { offset, len } => sync::discard(fd, is_block_device, offset, len)
                    .map_err(|source| DeviceError::Io {
                        op: "discard",
                        offset,
                        source,
                    }),
                IoOp::Flush => sync::fdatasync(fd).map_err(|source| DeviceError::Io {
                    op: "flush",
                    offset: 0,
                    source,
                }),
                _ => unreachable!("only flushes and discards are deferred"),
            };
            self.finish(index, result);
        }
        self.deferred.clear();
    }
}

/// The submission entry for what is left of a slot's read, write or flush.
fn entry_for(fd: types::Fd, slot: &mut Slot) -> squeue::Entry {
    let done = slot.done_bytes;
    match &mut slot.request.op {
        IoOp::Read { offset, buf } => {
            let len = (buf.len() - done).min(TRANSFER_BYTES_MAX) as u32;
            let ptr = buf[done..].as_mut_ptr();
            opcode::Read::new(fd, ptr, len)
                .offset(*offset + done as u64)
                .build()
        }
        IoOp::Write { offset, buf } => {
            let len = (buf.len() - done).min(TRANSFER_BYTES_MAX) as u32;
            let ptr = buf[done..].as_ptr();
            opcode::Write::new(fd, ptr, len)
                .offset(*offset + done as u64)
                .build()
        }
        IoOp::Flush | IoOp::Discard { .. } => {
            unreachable!("flushes and discards run synchronously")
        }
    }
}

impl BackendQueue for UringQueue<'_> {
    fn depth(&self) -> usize {
        self.depth
    }

    fn push(&mut self, request: IoRequest) -> Result<(), IoRequest> {
        if self.outstanding() >= self.depth {
            return Err(request);
        }
        let index = self.free.pop().expect("a free slot below depth");
        let deferred = matches!(request.op, IoOp::Discard { .. } | IoOp::Flush);
        self.slots[index as usize] = Some(Slot {
            request,
            done_bytes: 0,
            retries: 0,
        });
        if deferred {
            self.deferred.push(index);
        } else {
            self.enqueue(index);
        }
        Ok(())
    }

    fn submit(&mut self, min_complete: usize) -> Result<(), DeviceError> {
        assert!(
            min_complete <= self.outstanding(),
            "waiting for more than is outstanding"
        );
        self.run_deferred();
        // Each pass either returns or waits for a completion; resubmissions (rare) may
        // need more passes, and each request has at most RETRIES_MAX of them. A kernel
        // that keeps refusing to enter (EAGAIN/EBUSY: out of memory for requests) gets
        // RETRIES_MAX tries before the queue reports it.
        let mut refusals = 0u32;
        loop {
            self.reap();
            let unsubmitted = self.ring().submission().len();
            if self.completed.len() >= min_complete && unsubmitted == 0 {
                return Ok(());
            }
            // In flight are all in the rings now, so they can satisfy the wait.
            let want = min_complete
                .saturating_sub(self.completed.len())
                .min(self.in_flight());
            match self.ring().submit_and_wait(want) {
                Ok(_) => {}
                Err(e)
                    if refusals < RETRIES_MAX
                        && matches!(
                            e.raw_os_error(),
                            Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                        ) =>
                {
                    refusals += 1;
                }
                Err(source) => {
                    return Err(DeviceError::Io {
                        op: "io_uring_enter",
                        offset: 0,
                        source,
                    })
                }
            }
        }
    }

    fn pop(&mut self) -> Option<IoCompletion> {
        if self.completed.is_empty() {
            self.reap();
        }
        self.completed.pop_front()
    }

    fn outstanding(&self) -> usize {
        self.in_flight() + self.completed.len()
    }
}

impl Drop for UringQueue<'_> {
    fn drop(&mut self) {
        let all = self.outstanding();
        if let Err(e) = self.submit(all) {
            // The kernel may still own buffers: leak them and the ring, never free them.
            eprintln!("augefs: io_uring queue failed while draining ({e}); leaking its buffers");
            std::mem::forget(std::mem::take(&mut self.slots));
            std::mem::forget(self.ring.take());
            return;
        }
        assert_eq!(self.in_flight(), 0);
        self.completed.clear();
        let parts = Parts {
            ring: self.ring.take().expect("queue has its ring until dropped"),
            slots: std::mem::take(&mut self.slots),
            free: std::mem::take(&mut self.free),
            deferred: std::mem::take(&mut self.deferred),
            completed: std::mem::take(&mut self.completed),
        };
        let mut pool = self.backend.rings.lock().expect("ring pool lock");
        if pool.len() < RING_POOL_MAX {
            pool.push(parts);
        }
    }
}
