//! A copy-on-write device for `fsck -n`: reads come from the image, writes (MetaDB's
//! recovery flush, a manifest edit) are kept in memory, so recovery can run in full
//! while the image file is never written.
//!
//! Invariants:
//! - Nothing is ever written to the inner device: it may be opened read-only.
//! - A read returns the newest overlaid bytes where a write covered them and the inner
//!   device's bytes elsewhere, at the inner device's logical block granularity.
//! - Discards are dropped (a discarded range's contents are unspecified, so keeping the
//!   old bytes is a valid outcome); flushes do nothing (nothing here is durable).

use device::memory::SyncQueue;
use device::{AlignedBuf, Backend, BackendQueue, Device, DeviceError, DeviceInfo, IoOp, IoRequest};
use std::collections::HashMap;
use std::sync::RwLock;

/// Queue depth of overlay queues (requests run synchronously at submit).
const OVERLAY_QUEUE_DEPTH: usize = 64;

#[derive(Debug)]
pub struct OverlayBackend {
    inner: Device,
    info: DeviceInfo,
    unit_bytes: u64,
    /// Unit index -> bytes written there.
    written: RwLock<HashMap<u64, Box<[u8]>>>,
}

impl OverlayBackend {
    pub fn new(inner: Device) -> OverlayBackend {
        let mut info = inner.info().clone();
        info.discard_supported = false;
        info.notice = Some("copy-on-write overlay: writes stay in memory".into());
        let unit_bytes = u64::from(info.logical_block_bytes);
        assert!(unit_bytes.is_power_of_two());
        OverlayBackend {
            inner,
            info,
            unit_bytes,
            written: RwLock::new(HashMap::new()),
        }
    }

    /// Bytes held in memory (writes that would have reached the image).
    pub fn overlaid_bytes(&self) -> u64 {
        self.written.read().expect("overlay lock").len() as u64 * self.unit_bytes
    }

    fn execute(&self, request: &mut IoRequest) -> Result<(), DeviceError> {
        let unit = self.unit_bytes as usize;
        match &mut request.op {
            IoOp::Read { offset, buf } => {
                let got = self
                    .inner
                    .read(*offset, AlignedBuf::zeroed(buf.len()), request.cause)?;
                buf.copy_from_slice(&got);
                let written = self.written.read().expect("overlay lock");
                if !written.is_empty() {
                    let first = *offset / self.unit_bytes;
                    for (i, chunk) in buf.chunks_mut(unit).enumerate() {
                        if let Some(bytes) = written.get(&(first + i as u64)) {
                            chunk.copy_from_slice(bytes);
                        }
                    }
                }
            }
            IoOp::Write { offset, buf } => {
                let first = *offset / self.unit_bytes;
                let mut written = self.written.write().expect("overlay lock");
                for (i, chunk) in buf.chunks(unit).enumerate() {
                    written.insert(first + i as u64, chunk.into());
                }
            }
            IoOp::Flush | IoOp::Discard { .. } => {}
        }
        Ok(())
    }
}

impl Backend for OverlayBackend {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn queue(&self) -> Result<Box<dyn BackendQueue + '_>, DeviceError> {
        Ok(Box::new(SyncQueue::new(
            OVERLAY_QUEUE_DEPTH,
            move |r: &mut IoRequest| self.execute(r),
        )))
    }
}

/// `inner` behind a copy-on-write overlay.
pub fn overlay(inner: Device) -> Device {
    Device::new(Box::new(OverlayBackend::new(inner)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use device::memory::MemoryBackend;
    use platform::IoCause;

    #[test]
    fn writes_stay_in_the_overlay() {
        let inner = Device::new(Box::new(MemoryBackend::from_image(vec![7u8; 8192], 512)));
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
        assert_eq!(got[600], 1);
    }
}
