//! Engine records that check out (CRC-valid in MetaDB) but name blocks outside the
//! device: a read and a recovery return typed corruption, never a read past the
//! device's end (a panic in the device layer).

mod common;

use common::{small_config, try_mount};
use engine::log::keys::{mapping_key, FileBlock, Mapping};
use engine::log::FsyncPath;
use engine::EngineError;
use format::{BlockAddr, InodeNo};
use metadb::{Durability, WriteBatch};
use platform::ManualClock;
use std::sync::Arc;
use testsupport::image::memory_image;

const MIB: u64 = 1 << 20;

fn far_addresses(device_blocks: u64) -> [BlockAddr; 3] {
    [
        BlockAddr(device_blocks + 100),
        BlockAddr(u64::MAX / 4096 + 1),
        BlockAddr(u64::MAX),
    ]
}

#[test]
fn a_mapping_past_the_device_reads_as_corruption() {
    let dev = memory_image(96 * MIB, 1);
    let config = small_config(FsyncPath::Async, 1 << 20, false);
    let engine = try_mount(&dev, None, &config, Arc::new(ManualClock::new(1))).unwrap();
    for (i, addr) in far_addresses(dev.size_bytes() / 4096)
        .into_iter()
        .enumerate()
    {
        let ino = InodeNo(10 + i as u64);
        let m = Mapping {
            addr,
            crc: 0,
            write_seq: 1,
        };
        engine
            .metadb()
            .put(
                &mapping_key(ino, FileBlock(0)),
                &m.encode(),
                Durability::Sync,
            )
            .unwrap();
        let mut buf = vec![0u8; 4096];
        let r = engine.read(ino, FileBlock(0), &mut buf);
        assert!(
            matches!(r, Err(EngineError::Corruption(_))),
            "{addr:?}: {r:?}"
        );
    }
}

#[test]
fn recovery_of_a_mapping_past_the_device_is_corruption() {
    for addr in far_addresses(96 * MIB / 4096) {
        let dev = memory_image(96 * MIB, 1);
        let config = small_config(FsyncPath::Async, 1 << 20, false);
        let engine = try_mount(&dev, None, &config, Arc::new(ManualClock::new(1))).unwrap();
        // In the domain's own lane, numbered above any watermark: recovery checks its data.
        let m = Mapping {
            addr,
            crc: 0,
            write_seq: u64::MAX,
        };
        let mut batch = WriteBatch::new();
        batch.put(
            mapping_key(InodeNo(7), FileBlock(3)).to_vec(),
            m.encode().to_vec(),
        );
        engine
            .metadb()
            .write_pinned(0, &batch, Durability::Sync)
            .unwrap();
        drop(engine); // a crash: no unmount
        let r = try_mount(&dev, None, &config, Arc::new(ManualClock::new(2)));
        let Err(e) = r else {
            panic!("{addr:?}: a mapping past the device mounted");
        };
        assert!(e.to_string().contains("past the device"), "{addr:?}: {e}");
    }
}
