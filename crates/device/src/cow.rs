//! A copy-on-write device: a base that is never modified and, over it, the logical
//! blocks written since. Two bases:
//! - shared bytes ([`CowBackend::new`]): crash tests mount hundreds of crash images of
//!   one run; each is the run's initial image plus a few megabytes of writes, so sharing
//!   the base replaces a full image copy per crash state with a map of the written blocks;
//! - an open device ([`CowBackend::over`], [`overlay`]): `fsck -n` and read-only mounts
//!   run recovery in full (MetaDB's recovery flush, manifest edits) while the image,
//!   opened read-only, is never written.
//!
//! Invariants:
//! - The base is never written: any number of devices may share it, and a device base
//!   may be opened read-only.
//! - A read returns, per logical block, the newest written bytes or else the base's.
//! - Discards write zeros over a bytes base; over a device base they are dropped (a
//!   discarded range's contents are unspecified, so the old bytes are a valid outcome,
//!   and a large discard then costs no memory). Flushes do nothing (nothing here is
//!   durable).

use crate::backend::{Backend, BackendKind, BackendQueue, DeviceInfo};
use crate::buf::AlignedBuf;
use crate::device::Device;
use crate::error::DeviceError;
use crate::memory::{SyncQueue, MEMORY_QUEUE_DEPTH};
use crate::request::{IoOp, IoRequest};
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

/// What a [`CowBackend`] reads where nothing was written.
#[derive(Debug)]
enum Base {
    Bytes(Arc<[u8]>),
    Device(Box<Device>),
}

#[derive(Debug)]
pub struct CowBackend {
    info: DeviceInfo,
    base: Base,
    unit: u64,
    /// Logical block index -> its bytes (ordered: a read visits only the written blocks
    /// in its range).
    written: RwLock<BTreeMap<u64, Box<[u8]>>>,
}

impl CowBackend {
    /// Over shared bytes (a memory device's image).
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
            base: Base::Bytes(base),
            unit,
            written: RwLock::new(BTreeMap::new()),
        }
    }

    /// Over an open device, which is only ever read.
    pub fn over(inner: Device) -> CowBackend {
        let mut info = inner.info().clone();
        info.discard_supported = false;
        info.notice = Some("copy-on-write overlay: writes stay in memory".into());
        let unit = u64::from(info.logical_block_bytes);
        assert!(unit.is_power_of_two());
        CowBackend {
            info,
            base: Base::Device(Box::new(inner)),
            unit,
            written: RwLock::new(BTreeMap::new()),
        }
    }

    fn size_bytes(&self) -> u64 {
        self.info.size_bytes
    }

    /// Writes `data` (None: zeros) over `len` bytes at `offset`, both multiples of the
    /// logical block.
    pub fn put(&self, offset: u64, data: Option<&[u8]>, len: u64) {
        assert!(
            offset % self.unit == 0 && len % self.unit == 0,
            "unaligned {len} bytes at {offset}"
        );
        assert!(offset + len <= self.size_bytes(), "write past the end");
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

    /// A copy of the current contents (a bytes base only).
    pub fn image(&self) -> Vec<u8> {
        let Base::Bytes(base) = &self.base else {
            panic!("image() of a copy-on-write device over a device");
        };
        let mut image = base.to_vec();
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

    /// Bytes held in memory (writes that did not reach the base).
    pub fn written_bytes(&self) -> u64 {
        self.written_blocks() as u64 * self.unit
    }

    pub(crate) fn execute(&self, request: &mut IoRequest) -> Result<(), DeviceError> {
        match &mut request.op {
            IoOp::Read { offset, buf } => {
                match &self.base {
                    Base::Bytes(base) => {
                        let (start, len) = (*offset as usize, buf.len());
                        buf.copy_from_slice(&base[start..start + len]);
                    }
                    Base::Device(inner) => {
                        let got =
                            inner.read(*offset, AlignedBuf::scratch(buf.len()), request.cause)?;
                        buf.copy_from_slice(&got);
                    }
                }
                let written = self.written.read().expect("cow lock");
                let (first, unit) = (*offset / self.unit, self.unit as usize);
                let end = first + (buf.len() / unit) as u64;
                for (&block, bytes) in written.range(first..end) {
                    let at = (block - first) as usize * unit;
                    buf[at..at + unit].copy_from_slice(bytes);
                }
            }
            IoOp::Write { offset, buf } => {
                let len = buf.len() as u64;
                self.put(*offset, Some(buf), len);
            }
            IoOp::Discard { offset, len } => {
                if matches!(self.base, Base::Bytes(_)) {
                    self.put(*offset, None, *len);
                }
            }
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

/// `inner` behind a copy-on-write overlay: it is read, never written.
pub fn overlay(inner: Device) -> Device {
    Device::new(Box::new(CowBackend::over(inner)))
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

    #[test]
    fn an_overlay_never_writes_its_device() {
        let inner = Device::new(Box::new(crate::memory::MemoryBackend::from_image(
            vec![7u8; 8192],
            512,
        )));
        let dev = overlay(inner);
        dev.write(512, AlignedBuf::from_slice(&[1u8; 512]), IoCause::Tool)
            .unwrap();
        let got = dev
            .read(0, AlignedBuf::zeroed(4096), IoCause::Tool)
            .unwrap();
        assert!(got[..512].iter().all(|&b| b == 7));
        assert!(got[512..1024].iter().all(|&b| b == 1));
        assert!(got[1024..].iter().all(|&b| b == 7));
        dev.discard(0, 4096, IoCause::Tool).unwrap();
        dev.flush(IoCause::Tool).unwrap();
        let got = dev
            .read(0, AlignedBuf::zeroed(1024), IoCause::Tool)
            .unwrap();
        assert_eq!(got[600], 1, "a discard over a device base is dropped");
    }
}
