//! Whole-WAL targets (docs/FORMAT.md §5.2): a device WAL region and a PMR, recovered and
//! started as a mount does, so the decoded headers, chunks, slots and entries are also
//! used (unit maps, incarnations, slot ranges) and not only parsed.

use crate::driver::{Outcome, Target};
use device::memory::MemoryBackend;
use device::{AlignedBuf, Device, IoCause};
use format::Region;
use metadb::wal::fuzz as wal;
use metadb::wal::pmr::PmrWal;
use metadb::wal::ssd::SsdWal;
use metadb::wal::Wal;
use pmr::{Pmr, PmrOptions};
use std::sync::Arc;

const UNIT: usize = 64 << 10;
/// The part of each unit an input holds: the region header copies at 0 and 4 KiB of
/// unit 0, the chunk header and the first records elsewhere. The rest stays zero, so a
/// case costs little and mutations land where decoders look.
const UNIT_HEAD: usize = 8 << 10;
/// A region of 8 units at 1 MiB of a 2 MiB device.
const SSD_REGION: Region = Region {
    start_block: 256,
    block_count: 128,
};
const SSD_DEVICE_BYTES: usize = 2 << 20;
const SSD_UNITS: usize = 8;
const LANES: usize = 4;

fn memory_device(image: Vec<u8>) -> Arc<Device> {
    Arc::new(Device::new(Box::new(MemoryBackend::from_image(image, 512))))
}

fn expand(input: &[u8]) -> Vec<u8> {
    let mut image = vec![0u8; SSD_DEVICE_BYTES];
    let start = SSD_REGION.start_byte() as usize;
    for (u, piece) in input.chunks(UNIT_HEAD).take(SSD_UNITS).enumerate() {
        let at = start + u * UNIT;
        image[at..at + piece.len()].copy_from_slice(piece);
    }
    image
}

fn ssd_seeds() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for generations in [1u64, 2] {
        let device = memory_device(vec![0u8; SSD_DEVICE_BYTES]);
        let (w, _) = SsdWal::open(device.clone(), SSD_REGION, LANES, 0, 1).expect("opens");
        for g in 1..=generations {
            for i in 0..6u16 {
                w.append(i % 2, &vec![i as u8; 40 + usize::from(i) * 30])
                    .expect("append");
            }
            if g < generations {
                w.rotate(g + 1).expect("rotate");
            }
        }
        w.persist_all().expect("persist");
        let region = device
            .read(
                SSD_REGION.start_byte(),
                AlignedBuf::zeroed(SSD_UNITS * UNIT),
                IoCause::Tool,
            )
            .expect("memory read");
        let mut input = Vec::new();
        for u in 0..SSD_UNITS {
            input.extend_from_slice(&region[u * UNIT..u * UNIT + UNIT_HEAD]);
        }
        out.push(input);
    }
    out
}

fn ssd_reseal(input: &mut [u8]) {
    for (u, piece) in input.chunks_mut(UNIT_HEAD).enumerate() {
        if u == 0 {
            wal::region_header_reseal(piece);
            if piece.len() > 4096 {
                wal::region_header_reseal(&mut piece[4096..]);
            }
        } else {
            wal::chunk_reseal(piece);
        }
    }
}

fn ssd_check(input: &[u8]) -> Outcome {
    let device = memory_device(expand(input));
    let Ok((recovered, recovery)) = SsdWal::recover(device, SSD_REGION, LANES, 0) else {
        return Outcome::Rejected;
    };
    // Start a new life as MetaDB does (a new incarnation over the older header copy,
    // the recovered chunks' units taken), then write and persist a record.
    let Some(next) = recovery.generation_max.checked_add(1) else {
        return Outcome::Rejected;
    };
    let Ok(w) = recovered.start(next) else {
        return Outcome::Rejected;
    };
    if w.append(1, b"after recovery").is_ok() {
        let _ = w.persist_all();
    }
    Outcome::Decoded
}

// ---- A PMR holding the WAL, with the device region its full halves migrate to ----

const PMR_BYTES: usize = 2 << 20;
/// Header (4 KiB), slots (4 KiB) and the first 8 KiB of the data area.
const PMR_HEAD: usize = 16 << 10;

fn pmr_seeds() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for generations in [1u64, 2] {
        let pmr = Arc::new(Pmr::memory(PMR_BYTES as u64, PmrOptions::default()).expect("pmr"));
        pmr::format_region(&pmr, [4; 16]).expect("format");
        let device = memory_device(vec![0u8; SSD_DEVICE_BYTES]);
        let (w, _) = PmrWal::open(pmr.clone(), device, SSD_REGION, LANES, 0, 1).expect("opens");
        for g in 1..=generations {
            for i in 0..5u16 {
                w.append(i % LANES as u16, &vec![i as u8; 20 + usize::from(i) * 50])
                    .expect("append");
            }
            if g < generations {
                w.rotate(g + 1).expect("rotate");
            }
        }
        w.persist_all().expect("persist");
        let mut head = vec![0u8; PMR_HEAD];
        pmr.read(0, &mut head, IoCause::Tool);
        out.push(head);
    }
    out
}

fn pmr_reseal(input: &mut [u8]) {
    if input.len() > 8192 {
        wal::pmr_entries_reseal(&mut input[8192..]);
    }
}

fn pmr_check(input: &[u8]) -> Outcome {
    let mut image = vec![0u8; PMR_BYTES];
    let n = input.len().min(PMR_HEAD);
    image[..n].copy_from_slice(&input[..n]);
    let Ok(pmr) = Pmr::memory_from_image(&image, PmrOptions::default()) else {
        return Outcome::Rejected;
    };
    let pmr = Arc::new(pmr);
    let device = memory_device(vec![0u8; SSD_DEVICE_BYTES]);
    let Ok((recovered, recovery)) = PmrWal::recover(pmr, device, SSD_REGION, LANES, 0) else {
        return Outcome::Rejected;
    };
    let Some(next) = recovery.generation_max.checked_add(1) else {
        return Outcome::Rejected;
    };
    let Ok(w) = recovered.start(next) else {
        return Outcome::Rejected;
    };
    if w.append(2, b"after recovery").is_ok() {
        let _ = w.persist_all();
    }
    Outcome::Decoded
}

pub fn targets() -> Vec<Target> {
    vec![
        Target {
            name: "wal_ssd_region",
            seeds: ssd_seeds,
            reseal: ssd_reseal,
            check: ssd_check,
            len_max: SSD_UNITS * UNIT_HEAD,
            // A case reads and writes a 2 MiB device: about 0.4 ms in the test profile.
            ci_cases: 5000,
        },
        Target {
            name: "wal_pmr",
            seeds: pmr_seeds,
            reseal: pmr_reseal,
            check: pmr_check,
            len_max: PMR_HEAD,
            // A case maps, scans and zeroes a 2 MiB PMR: about 15 ms in the test profile.
            ci_cases: 300,
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression: a region header whose incarnation is u64::MAX (CRC intact) made the
    /// new life's incarnation overflow.
    #[test]
    fn the_last_incarnation_is_refused() {
        // The seeds' first open wrote copy 0; its incarnation is at bytes 16-23.
        let mut input = ssd_seeds().remove(0);
        input[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
        ssd_reseal(&mut input);
        assert_eq!(ssd_check(&input), Outcome::Rejected);
    }
}
