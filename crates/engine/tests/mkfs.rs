//! mkfs and inspect on in-memory devices and PMRs.

use device::{AlignedBuf, IoCause};
use engine::image::{read_checkpoints, read_superblock, SlotState};
use engine::mkfs::{detect_existing, format, MkfsOptions};
use engine::progress::NoProgress;
use engine::EngineError;
use format::constants::*;
use format::geometry::CheckpointOwner;
use format::geometry::Geometry;
use format::FormatError;
use pmr::{Pmr, PmrOptions};
use testsupport::image::memory_device;

fn opts() -> MkfsOptions {
    MkfsOptions {
        domain_count: None,
        fs_uuid: [0xab; 16],
        created_unix_ns: 1_700_000_000_000_000_000,
        force: false,
        label: String::new(),
    }
}

#[test]
fn formats_and_reads_back() {
    let dev = memory_device(256 * MIB);
    let sb = format(&dev, None, &opts(), &NoProgress).unwrap();
    assert_eq!(
        sb.geometry.domain_count,
        Geometry::default_domain_count(256 * MIB).unwrap()
    );
    let choice = read_superblock(&dev).unwrap();
    assert_eq!(choice.superblock, sb);
    assert!(choice.copy_errors.iter().all(Option::is_none));
    let cps = read_checkpoints(&dev, &sb.geometry).unwrap();
    assert_eq!(cps.len(), sb.geometry.domain_count as usize + 1);
    assert_eq!(cps[0].owner, CheckpointOwner::Global);
    for cp in &cps {
        assert!(matches!(
            cp.slots[0],
            SlotState::Valid {
                sequence: 1,
                payload_bytes: 0
            }
        ));
        assert!(matches!(cp.slots[1], SlotState::Empty));
        assert_eq!(cp.current_slot, Some(0));
    }
}

#[test]
fn io_is_accounted_by_cause() {
    let dev = memory_device(64 * MIB);
    let sb = format(
        &dev,
        None,
        &MkfsOptions {
            domain_count: Some(2),
            ..opts()
        },
        &NoProgress,
    )
    .unwrap();
    let io = dev.counters().snapshot();
    let g = sb.geometry;
    // Zeroing plus the initial checkpoints (3 owners x 16 KiB).
    assert_eq!(
        io.cause(IoCause::Checkpoint).write_bytes,
        g.checkpoints.size_bytes() + 3 * CHECKPOINT_SLOT_BYTES
    );
    assert_eq!(io.cause(IoCause::Wal).write_bytes, g.wal.size_bytes());
    assert_eq!(
        io.cause(IoCause::Manifest).write_bytes,
        g.manifest.size_bytes()
    );
    // Two invalidating blocks, then two copies; three flushes on the superblock's account.
    assert_eq!(
        io.cause(IoCause::Superblock).write_bytes,
        4 * BLOCK_SIZE_BYTES
    );
    assert_eq!(io.cause(IoCause::Superblock).flush_ops, 3);
    assert_eq!(
        io.total().write_ops,
        io.nonzero().iter().map(|(_, c)| c.write_ops).sum::<u64>()
    );
}

#[test]
fn refuses_existing_file_systems_without_force() {
    let dev = memory_device(64 * MIB);
    format(&dev, None, &opts(), &NoProgress).unwrap();
    let again = format(&dev, None, &opts(), &NoProgress);
    assert!(
        matches!(again, Err(EngineError::ExistingFileSystem { .. })),
        "{again:?}"
    );
    format(
        &dev,
        None,
        &MkfsOptions {
            force: true,
            fs_uuid: [1; 16],
            ..opts()
        },
        &NoProgress,
    )
    .unwrap();
    assert_eq!(read_superblock(&dev).unwrap().superblock.fs_uuid, [1; 16]);

    // An ext4 signature.
    let other = memory_device(64 * MIB);
    let mut block = AlignedBuf::zeroed(4096);
    block[1080] = 0x53;
    block[1081] = 0xEF;
    other.write(0, block, IoCause::Tool).unwrap();
    assert!(detect_existing(&other).unwrap().unwrap().contains("ext"));
    assert!(matches!(
        format(&other, None, &opts(), &NoProgress),
        Err(EngineError::ExistingFileSystem { .. })
    ));
}

#[test]
fn rejects_bad_geometry() {
    let small = memory_device(32 * MIB);
    let e = format(&small, None, &opts(), &NoProgress).unwrap_err();
    assert!(e.to_string().contains("too small"), "{e}");
    let dev = memory_device(64 * MIB);
    let e = format(
        &dev,
        None,
        &MkfsOptions {
            domain_count: Some(100),
            ..opts()
        },
        &NoProgress,
    )
    .unwrap_err();
    assert!(e.to_string().contains("domain count"), "{e}");
}

#[test]
fn with_pmr() {
    let dev = memory_device(128 * MIB);
    let p = Pmr::memory(4 * MIB, PmrOptions::default()).unwrap();
    let sb = format(&dev, Some(&p), &opts(), &NoProgress).unwrap();
    assert!(sb.has_pmr());
    assert_eq!(sb.pmr_size_bytes, 4 * MIB);
    let report = engine::inspect::inspect(&dev, Some(&p)).unwrap();
    assert_eq!(report.mode, "pmr");
    let pr = report.pmr.unwrap();
    assert_eq!(pr.size_bytes, 4 * MIB);
    assert!(pr.persist_mode.is_some());

    // The PMR header survives a crash that loses every unpersisted line.
    let rebooted =
        Pmr::memory_from_image(&p.crash_image_all_lost(), PmrOptions::default()).unwrap();
    assert!(engine::inspect::inspect(&dev, Some(&rebooted)).is_ok());

    // A PMR of another file system is refused.
    let stranger = Pmr::memory(4 * MIB, PmrOptions::default()).unwrap();
    pmr::format_region(&stranger, [9; 16]).unwrap();
    assert!(matches!(
        engine::inspect::inspect(&dev, Some(&stranger)),
        Err(EngineError::PmrMismatch { .. })
    ));
    // Without the PMR, inspect still reports it is needed.
    let report = engine::inspect::inspect(&dev, None).unwrap();
    assert!(report.pmr.unwrap().note.is_some());

    let too_small = Pmr::memory(MIB, PmrOptions::default());
    if let Ok(too_small) = too_small {
        let e = format(
            &memory_device(64 * MIB),
            Some(&too_small),
            &opts(),
            &NoProgress,
        )
        .unwrap_err();
        assert!(e.to_string().contains("PMR too small"), "{e}");
    }
}

#[test]
fn corrupted_and_foreign_images() {
    let dev = memory_device(64 * MIB);
    assert!(matches!(
        read_superblock(&dev),
        Err(EngineError::Format(FormatError::NotAugefs { .. }))
    ));
    format(&dev, None, &opts(), &NoProgress).unwrap();
    // Damage copy 0: copy 1 is used and copy 0 reported.
    let mut b = dev
        .read(0, AlignedBuf::zeroed(4096), IoCause::Tool)
        .unwrap();
    b[70] ^= 0xff;
    dev.write(0, b, IoCause::Tool).unwrap();
    let choice = read_superblock(&dev).unwrap();
    assert_eq!(choice.copy_index, 1);
    assert!(matches!(
        choice.copy_errors[0],
        Some(FormatError::Corruption(_))
    ));
    // Damage copy 1 too: corruption, not "foreign".
    let mut b = dev
        .read(4096, AlignedBuf::zeroed(4096), IoCause::Tool)
        .unwrap();
    b[70] ^= 0xff;
    dev.write(4096, b, IoCause::Tool).unwrap();
    assert!(matches!(
        read_superblock(&dev),
        Err(EngineError::Format(FormatError::Corruption(_)))
    ));
}

#[test]
fn damaged_checkpoint_slot_is_reported_and_other_slot_used() {
    let dev = memory_device(64 * MIB);
    let sb = format(&dev, None, &opts(), &NoProgress).unwrap();
    let g = sb.geometry;
    let off = g.checkpoint_slot_offset(CheckpointOwner::Global, 0);
    // Write a valid newer checkpoint into slot 1, then tear slot 0.
    let newer = format::checkpoint::CheckpointSlot {
        owner: CheckpointOwner::Global,
        payload_version: 0,
        sequence: 2,
        payload: vec![],
    };
    dev.write(
        g.checkpoint_slot_offset(CheckpointOwner::Global, 1),
        AlignedBuf::from_slice(&newer.encode()),
        IoCause::Tool,
    )
    .unwrap();
    let mut slot0 = dev
        .read(
            off,
            AlignedBuf::zeroed(CHECKPOINT_SLOT_BYTES as usize),
            IoCause::Tool,
        )
        .unwrap();
    slot0[CHECKPOINT_SLOT_BYTES as usize - 10] ^= 1;
    dev.write(off, slot0, IoCause::Tool).unwrap();
    let cps = read_checkpoints(&dev, &g).unwrap();
    assert!(matches!(cps[0].slots[0], SlotState::Invalid { .. }));
    assert_eq!(cps[0].current_slot, Some(1));
    assert_eq!(cps[0].current.as_ref().unwrap().sequence, 2);
}

/// An image made before WAL records carried `lane_durable` gets the feature flag at its
/// first open, before any record of the new form is written (so older code refuses it
/// instead of taking the log for empty); images made since have it from mkfs.
#[test]
fn the_first_open_of_an_older_image_adds_the_lane_durable_feature() {
    use format::superblock::FEATURE_LANE_DURABLE;
    let dev = memory_device(128 * MIB);
    let sb = format(&dev, None, &opts(), &NoProgress).unwrap();
    assert_ne!(sb.feature_flags & FEATURE_LANE_DURABLE, 0, "mkfs sets it");
    // Make it an older image: the flag cleared in both copies.
    let mut old = sb.clone();
    old.feature_flags &= !FEATURE_LANE_DURABLE;
    for copy in [0u32, 1] {
        dev.write(
            u64::from(copy) * BLOCK_SIZE_BYTES,
            AlignedBuf::from_slice(&old.encode(copy)),
            IoCause::Tool,
        )
        .unwrap();
    }
    let dev = std::sync::Arc::new(dev);
    let engine = engine::log::Engine::open(
        engine::log::EngineEnv {
            device: dev.clone(),
            pmr: None,
            clock: std::sync::Arc::new(platform::ManualClock::new(1)),
        },
        engine::log::EngineConfig::default(),
    )
    .unwrap();
    engine.close().unwrap();
    let choice = read_superblock(&dev).unwrap();
    assert_ne!(choice.superblock.feature_flags & FEATURE_LANE_DURABLE, 0);
    assert_eq!(choice.superblock.sequence, old.sequence + 1);
    assert!(
        choice.copy_errors.iter().all(Option::is_none),
        "both copies rewritten"
    );
}
