//! The data log on a failing device: a data write or a device flush failing with EIO
//! fails the write or fsync in progress, turns the engine read-only (EROFS for every
//! later change), and the image recovers on the next mount with every write that an
//! fsync acknowledged before the failure.

mod common;

use common::{mount, read_values, small_config, write_block};
use device::recording::{FaultPlan, RecordingBackend};
use device::Device;
use engine::log::{Durability, FsyncPath};
use format::constants::MIB;
use std::sync::Arc;
use testsupport::image::{image_bytes, memory_image};

fn formatted_recording() -> (Arc<Device>, device::recording::RecordingHandle) {
    let bytes = image_bytes(&memory_image(96 * MIB, 1));
    let (backend, handle) = RecordingBackend::new(bytes, 512);
    (Arc::new(Device::new(Box::new(backend))), handle)
}

fn fault_case(path: FsyncPath, plan: FaultPlan) {
    let (dev, handle) = formatted_recording();
    let config = small_config(path, 256 << 10, false);
    let engine = mount(&dev, None, &config);
    for b in 0..8 {
        write_block(&engine, 1, b, b as u8 + 1, Durability::Fsync).unwrap();
    }
    handle.set_fault(plan);
    let failed = write_block(&engine, 1, 8, 99, Durability::Fsync);
    let e = failed.expect_err("the write or fsync that met the failure reports it");
    assert_eq!(e.errno(), 5 /* EIO */, "{plan:?}: {e}");
    handle.set_fault(FaultPlan::None);
    let after = write_block(&engine, 1, 9, 7, Durability::Buffered).expect_err("read-only");
    assert_eq!(after.errno(), 30 /* EROFS */, "{plan:?}: {after}");
    drop(engine);
    // Remount what the device holds: every acknowledged block is there.
    let again = mount(&dev, None, &config);
    let values = read_values(&again, 1, 10);
    for b in 0..8 {
        assert_eq!(values[b as usize], Some(b as u8 + 1), "{plan:?}: block {b}");
    }
    assert!(
        values[9].is_none(),
        "{plan:?}: the refused write is not there"
    );
    let live: u64 = again.valid_blocks().iter().sum();
    assert_eq!(
        live,
        values.iter().flatten().count() as u64,
        "{plan:?}: accounting"
    );
    again.close().unwrap();
}

#[test]
fn a_failed_data_write_fails_the_fsync_and_turns_the_engine_read_only() {
    for path in [FsyncPath::Async, FsyncPath::Ordered] {
        fault_case(path, FaultPlan::FailWrite { nth: 1 });
    }
}

#[test]
fn a_failed_flush_fails_the_fsync_and_turns_the_engine_read_only() {
    for path in [FsyncPath::Async, FsyncPath::Ordered] {
        fault_case(path, FaultPlan::FailFlush { nth: 1 });
    }
}
