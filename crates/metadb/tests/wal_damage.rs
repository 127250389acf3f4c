//! Damage to the WAL against the evidence that tells it from a torn tail (docs/FORMAT.md
//! §5.2, "what proves damage"), in ssd and PMR mode: what `durable_extents` names after a
//! persist is refused when a byte of it changes; so is a record that a later record of
//! its lane says was durable (`lane_durable`); without either, the same bytes read as
//! the torn tail a crash leaves.

use device::memory::MemoryBackend;
use device::Device;
use format::Region;
use metadb::wal::pmr::PmrWal;
use metadb::wal::ssd::SsdWal;
use metadb::wal::{Wal, WalExtent, WalRecovery};
use pmr::{Pmr, PmrOptions};
use std::sync::Arc;

const MIB: u64 = 1 << 20;
/// An 8 MiB WAL region at 1 MiB on a 10 MiB device.
const REGION: Region = Region {
    start_block: 256,
    block_count: 2048,
};
const DEVICE_BYTES: usize = 10 << 20;
const RECORDS: u64 = 30;

fn device(image: Vec<u8>) -> Arc<Device> {
    Arc::new(Device::new(Box::new(MemoryBackend::from_image(image, 512))))
}

fn image(device: &Device) -> Vec<u8> {
    device
        .read(
            0,
            device::AlignedBuf::zeroed(DEVICE_BYTES),
            device::IoCause::Tool,
        )
        .unwrap()
        .to_vec()
}

/// Appends `RECORDS` records of 300 bytes to lanes 0 and 1 in turn and persists them;
/// then five more to lane 0, not persisted. Returns the extents named after the persist.
fn write(wal: &dyn Wal) -> Vec<WalExtent> {
    for i in 0..RECORDS {
        wal.append((i % 2) as u16, &[i as u8; 300]).unwrap();
    }
    wal.persist_all().unwrap();
    let mut extents = wal.durable_extents();
    extents.sort_by_key(|e| e.lane);
    let generation = wal.generation();
    assert_eq!(
        extents,
        [0, 1].map(|lane| WalExtent {
            generation,
            lane,
            count: RECORDS / 2,
        })
    );
    for _ in 0..5 {
        wal.append(0, &[9u8; 300]).unwrap();
    }
    assert_eq!(wal.durable_extents().len(), 2);
    assert_eq!(
        wal.durable_extents().iter().map(|e| e.count).max(),
        Some(RECORDS / 2),
        "unpersisted records are not durable"
    );
    extents
}

/// The damage verdicts for `recovery` with and without the extents.
fn verdicts(recovery: &WalRecovery, extents: &[WalExtent]) {
    let run: u64 = recovery.records.iter().filter(|r| r.lane == 0).count() as u64;
    assert!(run < RECORDS / 2, "the damage cut lane 0 short: {run}");
    let damage = recovery
        .damage(extents, 0)
        .expect("durable records are missing");
    assert!(damage.location.contains("lane 0"), "{damage}");
    assert_eq!(
        recovery.damage(&[], 0),
        None,
        "without evidence: a torn tail"
    );
    assert_eq!(recovery.damage(extents, 1), None, "released generation");
}

#[test]
fn ssd_damage_to_durable_records_is_proven_by_the_extents() {
    let dev = device(vec![0; DEVICE_BYTES]);
    let (wal, _) = SsdWal::open(dev.clone(), REGION, 2, 0, 1).unwrap();
    let extents = write(&wal);
    drop(wal);
    let mut bytes = image(&dev);
    // Lane 0's chunk is the first allocated (unit 1); record 3 or so of it.
    let at = (REGION.start_byte() + 64 * 1024 + 512 + 1000) as usize;
    bytes[at] ^= 0x5a;
    let (_, recovery) = SsdWal::recover(device(bytes), REGION, 2, 0).unwrap();
    verdicts(&recovery, &extents);
}

#[test]
fn pmr_damage_to_durable_entries_is_proven_by_the_extents() {
    let pmr = Arc::new(Pmr::memory(2 * MIB, PmrOptions::default()).unwrap());
    let dev = device(vec![0; DEVICE_BYTES]);
    let (wal, _) = PmrWal::open(pmr.clone(), dev.clone(), REGION, 2, 0, 1).unwrap();
    let extents = write(&wal);
    drop(wal);
    let mut bytes = pmr.crash_image_all_lost();
    // Entries start after the header and slot area (8 KiB); lane 0 writes every other
    // entry of 384 bytes: the third entry is lane 0's second.
    bytes[8192 + 2 * 384 + 100] ^= 0x5a;
    let pmr = Arc::new(Pmr::memory_from_image(&bytes, PmrOptions::default()).unwrap());
    let (_, recovery) = PmrWal::recover(pmr, dev, REGION, 2, 0).unwrap();
    verdicts(&recovery, &extents);
}

/// Appends `RECORDS` records to lanes 0 and 1 in turn, persisting each: every record
/// says the ones before it in its lane were durable.
fn write_synced(wal: &dyn Wal) {
    for i in 0..RECORDS {
        let pos = wal.append((i % 2) as u16, &[i as u8; 300]).unwrap();
        wal.persist(&[pos]).unwrap();
    }
}

/// A gap with a later record of the lane that was appended after the missing one was
/// durable is damage; the lane's last record, with nothing after it, is a torn tail.
fn marks_verdicts(middle: &WalRecovery, last: &WalRecovery) {
    let damage = middle
        .damage(&[], 0)
        .expect("a later record says it was durable");
    assert!(damage.expected.contains("later intact record"), "{damage}");
    assert_eq!(last.damage(&[], 0), None, "the last record: a torn tail");
}

#[test]
fn ssd_a_record_a_later_one_says_was_durable_is_damage() {
    let dev = device(vec![0; DEVICE_BYTES]);
    let (wal, _) = SsdWal::open(dev.clone(), REGION, 2, 0, 1).unwrap();
    write_synced(&wal);
    drop(wal);
    let bytes = image(&dev);
    let chunk = (REGION.start_byte() + 64 * 1024) as usize;
    let end = chunk
        + bytes[chunk..chunk + 64 * 1024]
            .iter()
            .rposition(|&b| b != 0)
            .unwrap();
    let recover = |at: usize| {
        let mut damaged = bytes.clone();
        damaged[at] ^= 0x5a;
        SsdWal::recover(device(damaged), REGION, 2, 0).unwrap().1
    };
    marks_verdicts(&recover(chunk + 512 + 1000), &recover(end));
}

#[test]
fn pmr_an_entry_a_later_one_says_was_durable_is_damage() {
    let pmr = Arc::new(Pmr::memory(2 * MIB, PmrOptions::default()).unwrap());
    let dev = device(vec![0; DEVICE_BYTES]);
    let (wal, _) = PmrWal::open(pmr.clone(), dev.clone(), REGION, 2, 0, 1).unwrap();
    write_synced(&wal);
    drop(wal);
    let bytes = pmr.crash_image_all_lost();
    let recover = |entry: usize| {
        let mut damaged = bytes.clone();
        damaged[8192 + entry * 384 + 100] ^= 0x5a;
        let pmr = Arc::new(Pmr::memory_from_image(&damaged, PmrOptions::default()).unwrap());
        PmrWal::recover(pmr, dev.clone(), REGION, 2, 0).unwrap().1
    };
    // Entries alternate lanes: entry 2 is lane 0's second, entry 28 its last.
    marks_verdicts(&recover(2), &recover(RECORDS as usize - 2));
}
