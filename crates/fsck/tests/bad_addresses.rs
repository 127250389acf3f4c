//! A mapping (CRC-valid in MetaDB) that names a block past the device's end: fsck in
//! every mode, with data verification, reports it and never reads past the end.

mod common;

use common::*;
use engine::log::keys::{self, FileBlock, Mapping};
use format::BlockAddr;
use fsck::Mode;
use testsupport::mount::unmount;
use testsupport::scratch;

#[test]
fn a_mapping_past_the_device_is_reported_not_read() {
    let dir = scratch!();
    let path = workload_image(dir.path());
    let fs = mount(&path);
    let file = ino(&fs, "/d1/two");
    let device_blocks = std::fs::metadata(&path).unwrap().len() / 4096;
    for (i, addr) in [device_blocks + 7, u64::MAX / 4096 + 1]
        .into_iter()
        .enumerate()
    {
        let m = Mapping {
            addr: BlockAddr(addr),
            crc: 0,
            write_seq: 1,
        };
        fs.engine()
            .metadb()
            .put(
                &keys::mapping_key(file, FileBlock(1 + i as u64)),
                &m.encode(),
                metadb::Durability::Sync,
            )
            .unwrap();
    }
    unmount(fs);
    let found = run(&path, Mode::Check, true);
    assert_eq!(found.exit_code(), 4, "{:#?}", found.problems);
    let _ = run(&path, Mode::Preen, true);
    let fixed = run(&path, Mode::Repair, true);
    assert!(
        fixed.problems.iter().any(|p| p.fixed),
        "{:#?}",
        fixed.problems
    );
    let again = run(&path, Mode::Check, true);
    assert_eq!(again.problems, vec![], "second check after repair");
}
