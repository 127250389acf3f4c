//! [`Recording`]: a snapshot of a recording device's log, and the device image of any
//! [`CrashState`] of it (docs/TESTING.md "Crash images").
//!
//! Invariants:
//! - A snapshot never changes: the device may go on writing, the snapshot keeps the log
//!   as it was when taken.
//! - An image is the initial image, then the landed writes (prefix, whole and torn) in
//!   write order, so where landed writes overlap the later one wins.
//! - The cached base image is always the initial image plus exactly its prefix of writes.

use super::{CrashState, Event, RecordedWrite, WriteId};
use std::fmt;
use std::sync::{Arc, Mutex};

/// The writes between two successful flushes: after the `flushes_before`-th one, writes
/// `0..durable_writes` are durable and writes `durable_writes..end_writes` completed
/// before the next successful flush (or the end of the log) and may or may not have
/// landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Epoch {
    pub flushes_before: usize,
    pub durable_writes: u64,
    pub end_writes: u64,
}

/// A snapshot of a recording: the initial image, the writes and the events.
pub struct Recording {
    initial: Arc<[u8]>,
    writes: Vec<RecordedWrite>,
    events: Vec<Event>,
    /// The image after the first `.0` writes: images are built in durable order, so each
    /// extends the last instead of replaying the log.
    base: Mutex<Option<(u64, Vec<u8>)>>,
}

impl fmt::Debug for Recording {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Recording")
            .field("image_bytes", &self.initial.len())
            .field("writes", &self.writes.len())
            .field("events", &self.events.len())
            .finish()
    }
}

impl Recording {
    pub(super) fn new(
        initial: Arc<[u8]>,
        writes: Vec<RecordedWrite>,
        events: Vec<Event>,
    ) -> Recording {
        Recording {
            initial,
            writes,
            events,
            base: Mutex::new(None),
        }
    }

    pub fn initial_image(&self) -> &[u8] {
        &self.initial
    }

    pub fn writes(&self) -> &[RecordedWrite] {
        &self.writes
    }

    /// The write `id`; panics if it was not recorded.
    pub fn write(&self, id: WriteId) -> &RecordedWrite {
        &self.writes[id.0 as usize]
    }

    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// The epochs, one per successful flush plus the one before the first.
    pub fn epochs(&self) -> Vec<Epoch> {
        let mut epochs = Vec::new();
        let (mut durable, mut completed) = (0u64, 0u64);
        for event in &self.events {
            match *event {
                Event::Write { .. } => completed += 1,
                Event::Flush { covers } => {
                    epochs.push(Epoch {
                        flushes_before: epochs.len(),
                        durable_writes: durable,
                        end_writes: completed,
                    });
                    durable = durable.max(covers);
                }
                Event::Failed { .. } => {}
            }
        }
        assert_eq!(completed, self.writes.len() as u64);
        epochs.push(Epoch {
            flushes_before: epochs.len(),
            durable_writes: durable,
            end_writes: completed,
        });
        epochs
    }

    /// The device image of `state`. Panics if the state names writes or blocks this
    /// recording does not have.
    pub fn image(&self, state: &CrashState) -> Vec<u8> {
        let mut image = self.base_image(state.durable_writes);
        self.landed_after_prefix(state, |write, start, end| {
            write.apply_range(&mut image, start, end)
        });
        image
    }

    /// The device of `state` as a copy-on-write device over the shared initial image:
    /// the same bytes as [`Recording::image`] without copying the whole image.
    pub fn crash_device(
        &self,
        state: &CrashState,
        logical_block_bytes: u32,
    ) -> crate::cow::CowBackend {
        let device = crate::cow::CowBackend::new(self.initial.clone(), logical_block_bytes);
        let put = |write: &RecordedWrite, start: u64, end: u64| match &write.data {
            super::WriteData::Bytes(bytes) => device.put(
                start,
                Some(&bytes[(start - write.offset) as usize..(end - write.offset) as usize]),
                end - start,
            ),
            super::WriteData::Zeros { .. } => device.put(start, None, end - start),
        };
        for write in &self.writes[..state.durable_writes as usize] {
            put(write, write.offset, write.offset + write.len_bytes());
        }
        self.landed_after_prefix(state, put);
        device
    }

    /// [`Recording::crash_device`] as a device: what a crash test mounts.
    pub fn device(&self, state: &CrashState, logical_block_bytes: u32) -> crate::Device {
        crate::Device::new(Box::new(self.crash_device(state, logical_block_bytes)))
    }

    /// Calls `apply(write, start, end)` for every byte range that lands in `state` after
    /// its durable prefix, in write order.
    fn landed_after_prefix(
        &self,
        state: &CrashState,
        mut apply: impl FnMut(&RecordedWrite, u64, u64),
    ) {
        let write_count = self.writes.len() as u64;
        assert!(
            state.durable_writes <= write_count,
            "crash state {state} beyond {write_count} writes"
        );
        assert!(
            state.torn.iter().all(|t| t.write.0 < write_count),
            "crash state {state} tears a write beyond {write_count} writes"
        );
        let mut torn = state.torn.iter().peekable();
        let mut apply_torn_before =
            |limit: u64, apply: &mut dyn FnMut(&RecordedWrite, u64, u64)| {
                while let Some(t) = torn.next_if(|t| t.write.0 < limit) {
                    let write = self.write(t.write);
                    for &block in &t.blocks {
                        let (start, end) = write.block_range(block);
                        apply(write, start, end);
                    }
                }
            };
        for &(start, end) in &state.landed {
            assert!(
                end <= write_count,
                "crash state {state} beyond {write_count} writes"
            );
            apply_torn_before(start, &mut apply);
            for id in start..end {
                let write = self.write(WriteId(id));
                apply(write, write.offset, write.offset + write.len_bytes());
            }
        }
        apply_torn_before(u64::MAX, &mut apply);
    }

    /// The image with every write applied: the state without a crash.
    pub fn image_after_all(&self) -> Vec<u8> {
        self.image(&CrashState::durable_prefix(self.writes.len() as u64))
    }

    fn base_image(&self, durable_writes: u64) -> Vec<u8> {
        let mut cache = self.base.lock().expect("base image lock poisoned");
        if !matches!(&*cache, Some((done, _)) if *done <= durable_writes) {
            *cache = Some((0, self.initial.to_vec()));
        }
        let (done, image) = cache.as_mut().expect("base image set above");
        for write in &self.writes[*done as usize..durable_writes as usize] {
            write.apply(image);
        }
        *done = durable_writes;
        image.clone()
    }
}
