//! A copy-on-write memory device: a shared, never-modified base image and, over it, the
//! logical blocks written since. Crash tests mount hundreds of crash images of one run;
//! each is the run's initial image plus a few megabytes of writes, so sharing the base
//! replaces a full image copy per crash state with a map of the written blocks.
//!
//! Invariants:
//! - The base is never written: any number of devices may share it.
//! - A read returns, per logical block, the newest written bytes or else the base's.
//! - Discards write zeros (as the memory device); flushes do nothing (nothing is lost on
//!   a crash of a memory device).

use crate::backend::{Backend, BackendKind, BackendQueue, DeviceInfo};
use crate::error::DeviceError;
use crate::memory::{SyncQueue, MEMORY_QUEUE_DEPTH};
use crate::request::{IoOp, IoRequest};
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

#[derive(Debug)]
pub struct CowBackend {
    info: DeviceInfo,
    base: Arc<[u8]>,
    unit: u64,
    /// Logical block index -> its bytes.
    written: RwLock<HashMap<u64, Box<[u8]>>>,
}

impl CowBackend {
    pub fn new(base: Arc<[u8]>, logical_block_bytes: u32) -> CowBackend {
        let unit = u64::from(logical_block_bytes);
        assert!(unit.is_power_of_two() && base.len() as u64 % unit == 0);
        CowBackend {
            info: DeviceInfo {
                backend: BackendKind::Memory,
                path: None,
                size_bytes: base.len() as u64,
                logical_block_bytes,
                is_block_device: false,
                discard_supported: true,
                notice: Some("copy-on-write over a shared image".into()),
            },
            base,
            unit,
            written: RwLock::new(HashMap::new()),
        }
    }

    /// Writes `data` (None: zeros) over `len` bytes at `offset`, both multiples of the
    /// logical block.
    pub fn put(&self, offset: u64, data: Option<&[u8]>, len: u64) {
        assert!(
            offset % self.unit == 0 && len % self.unit == 0,
            "unaligned {len} bytes at {offset}"
        );
        assert!(offset + len <= self.base.len() as u64, "write past the end");
        let unit = self.unit as usize;
        let mut written = self.written.write().expect("cow lock");
        let first = offset / self.unit;
        for i in 0..(len / self.unit) {
            let bytes: Box<[u8]> = match data {
                Some(d) => d[i as usize * unit..(i as usize + 1) * unit].into(),
                None => vec![0u8; unit].into(),
            };
            written.insert(first + i, bytes);
        }
    }

    /// A copy of the current contents.
    pub fn image(&self) -> Vec<u8> {
        let mut image = self.base.to_vec();
        let unit = self.unit as usize;
        for (&block, bytes) in self.written.read().expect("cow lock").iter() {
            let at = block as usize * unit;
            image[at..at + unit].copy_from_slice(bytes);
        }
        image
    }

    /// Logical blocks written over the base.
    pub fn written_blocks(&self) -> usize {
        self.written.read().expect("cow lock").len()
    }

    pub(crate) fn execute(&self, request: &mut IoRequest) -> Result<(), DeviceError> {
        match &mut request.op {
            IoOp::Read { offset, buf } => {
                let (start, len) = (*offset as usize, buf.len());
                buf.copy_from_slice(&self.base[start..start + len]);
                let written = self.written.read().expect("cow lock");
                if !written.is_empty() {
                    let first = *offset / self.unit;
                    for (i, chunk) in buf.chunks_mut(self.unit as usize).enumerate() {
                        if let Some(bytes) = written.get(&(first + i as u64)) {
                            chunk.copy_from_slice(bytes);
                        }
                    }
                }
            }
            IoOp::Write { offset, buf } => {
                let len = buf.len() as u64;
                self.put(*offset, Some(buf), len);
            }
            IoOp::Discard { offset, len } => self.put(*offset, None, *len),
            IoOp::Flush => {}
        }
        Ok(())
    }
}

impl Backend for CowBackend {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AlignedBuf, Device, IoCause};

    #[test]
    fn reads_see_writes_over_the_shared_base() {
        let base: Arc<[u8]> = vec![7u8; 8192].into();
        let a = Device::new(Box::new(CowBackend::new(base.clone(), 512)));
        let b = Device::new(Box::new(CowBackend::new(base.clone(), 512)));
        a.write(512, AlignedBuf::from_slice(&[1u8; 1024]), IoCause::Tool)
            .unwrap();
        a.discard(4096, 512, IoCause::Tool).unwrap();
        let got = a.read(0, AlignedBuf::zeroed(8192), IoCause::Tool).unwrap();
        assert!(got[..512].iter().all(|&x| x == 7));
        assert!(got[512..1536].iter().all(|&x| x == 1));
        assert!(got[1536..4096].iter().all(|&x| x == 7));
        assert!(got[4096..4608].iter().all(|&x| x == 0));
        let other = b.read(0, AlignedBuf::zeroed(8192), IoCause::Tool).unwrap();
        assert!(other.iter().all(|&x| x == 7), "devices share only the base");
        assert!(base.iter().all(|&x| x == 7), "the base is never written");
    }
}
