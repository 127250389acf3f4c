//! WAL records that check out but carry numbers at the end of their range: opening the
//! database reports corruption instead of overflowing (a panic with overflow checks, a
//! wrapped number and a broken assertion without).

use device::memory::MemoryBackend;
use device::Device;
use format::Geometry;
use metadb::gate::SEQ_MAX;
use metadb::manifest::{Manifest, VersionEdit};
use metadb::wal::ssd::SsdWal;
use metadb::wal::Wal;
use metadb::{MetaDb, MetaDbConfig, MetaDbEnv, MetaDbError, SegmentPool, WriteBatch};
use std::sync::Arc;

const MIB: u64 = 1 << 20;

/// A fresh 64 MiB device whose WAL holds one record: `batch` numbered from `first_seq`,
/// in generation `generation`.
fn device_with_record(generation: u64, first_seq: u64) -> (Arc<Device>, Geometry) {
    let geometry = Geometry::compute(64 * MIB, 1).unwrap();
    let device = Arc::new(Device::new(Box::new(MemoryBackend::new(64 * MIB, 512))));
    let lanes = MetaDbConfig::default().lanes;
    let (wal, _) = SsdWal::open(device.clone(), geometry.wal, lanes, 0, generation).unwrap();
    let mut batch = WriteBatch::new();
    batch.put(&b"key"[..], &b"value"[..]);
    let mut payload = Vec::new();
    batch.encode_into(first_seq, |_| true, &mut payload);
    wal.append(0, &payload).unwrap();
    wal.persist_all().unwrap();
    (device, geometry)
}

fn open(device: Arc<Device>, geometry: Geometry) -> Result<MetaDb, MetaDbError> {
    MetaDb::open(
        MetaDbEnv {
            device,
            pmr: None,
            geometry,
            table_store: Arc::new(SegmentPool::whole(geometry)),
            hooks: None,
        },
        MetaDbConfig::default(),
    )
}

#[test]
fn the_last_generation_leaves_no_next_one() {
    let (device, geometry) = device_with_record(u64::MAX, 1);
    let Err(e) = open(device, geometry) else {
        panic!("a WAL at generation u64::MAX opened")
    };
    assert!(matches!(e, MetaDbError::Corruption { .. }), "{e}");
}

#[test]
fn sequence_numbers_past_the_last_are_corruption() {
    let (device, geometry) = device_with_record(1, u64::MAX);
    let Err(e) = open(device, geometry) else {
        panic!("a batch numbered past u64::MAX opened")
    };
    assert!(matches!(e, MetaDbError::Corruption { .. }), "{e}");
    let (device, geometry) = device_with_record(1, SEQ_MAX + 1);
    assert!(open(device, geometry).is_err());
    // A batch holding the last number MetaDB hands out is valid.
    let (device, geometry) = device_with_record(1, SEQ_MAX);
    open(device, geometry).unwrap();
}

#[test]
fn a_manifest_past_the_last_sequence_number_is_corruption() {
    let geometry = Geometry::compute(64 * MIB, 1).unwrap();
    let device = Arc::new(Device::new(Box::new(MemoryBackend::new(64 * MIB, 512))));
    let (manifest, _) = Manifest::open(device.clone(), geometry.manifest).unwrap();
    let edit = VersionEdit {
        last_seq: Some(u64::MAX),
        ..VersionEdit::default()
    };
    manifest.apply(&edit).unwrap();
    drop(manifest);
    let Err(e) = open(device, geometry) else {
        panic!("a manifest at u64::MAX opened")
    };
    assert!(matches!(e, MetaDbError::Corruption { .. }), "{e}");
}
