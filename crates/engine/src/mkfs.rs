//! mkfs: lay out a device and write a fresh file system (docs/FORMAT.md §8 "mkfs").
//!
//! Order of writes, chosen so that a crash at any point leaves either the old file
//! system intact (before step 2) or an image that does not open (until step 6):
//! 1. refuse if the device holds a file system, unless forced;
//! 2. zero both superblock copies, flush;
//! 3. zero the checkpoint, manifest and WAL regions (discard the segment area on block
//!    devices that support it);
//! 4. write checkpoint slot 0 of every owner with sequence 1 and an empty payload
//!    ("freshly formatted"), flush;
//! 5. format the PMR header, if any, and persist it;
//! 6. write superblock copy 1, flush; copy 0, flush.

use crate::error::EngineError;
use crate::progress::Progress;
use device::{AlignedBuf, Device, IoCause, IoRequest};
use format::checkpoint::CheckpointSlot;
use format::constants::*;
use format::geometry::{Geometry, Region};
use format::superblock::Superblock;
use pmr::Pmr;

/// Zeroing writes are issued in chunks of this size, several in flight.
const ZERO_CHUNK_BYTES: usize = MIB as usize;
const ZERO_CHUNKS_IN_FLIGHT: usize = 8;

#[derive(Debug, Clone)]
pub struct MkfsOptions {
    /// Domains; `None` picks the default for the device size.
    pub domain_count: Option<u32>,
    /// From the OS at the tools layer; tests pass a fixed one.
    pub fs_uuid: [u8; 16],
    pub created_unix_ns: u64,
    /// Format even if the device holds a file system.
    pub force: bool,
    /// The file system's label (docs/FORMAT.md §3), empty for none.
    pub label: String,
}

/// Names the file system found on the device, if any: augefs (valid or damaged), or a
/// kernel file system augefs knows the signature of.
pub fn detect_existing(device: &Device) -> Result<Option<String>, EngineError> {
    if device.size_bytes() < 128 * KIB {
        return Ok(None);
    }
    let head = device.read(0, AlignedBuf::zeroed(128 * KIB as usize), IoCause::Tool)?;
    match format::superblock::choose(&head[..4096], &head[4096..8192]) {
        Ok(choice) => {
            return Ok(Some(format!(
                "an augefs file system (format version {}, {} domains)",
                choice.superblock.format_version, choice.superblock.geometry.domain_count
            )))
        }
        Err(format::FormatError::NotAugefs { .. }) => {}
        Err(e) => return Ok(Some(format!("a damaged augefs file system ({e})"))),
    }
    // ext2/3/4: magic 0xEF53 at byte 1080. xfs: "XFSB" at 0. btrfs: "_BHRfS_M" at 65600.
    if head[1080..1082] == [0x53, 0xEF] {
        return Ok(Some("an ext2/ext3/ext4 file system".into()));
    }
    if &head[0..4] == b"XFSB" {
        return Ok(Some("an xfs file system".into()));
    }
    if &head[65600..65608] == b"_BHRfS_M" {
        return Ok(Some("a btrfs file system".into()));
    }
    Ok(None)
}

/// Formats `device` (and `pmr`, if given). Returns the superblock written.
pub fn format(
    device: &Device,
    pmr: Option<&Pmr>,
    opts: &MkfsOptions,
    progress: &dyn Progress,
) -> Result<Superblock, EngineError> {
    Superblock::check_label(&opts.label).map_err(EngineError::BadIdentity)?;
    let size = device.size_bytes();
    let domain_count = match opts.domain_count {
        Some(n) => n,
        None => Geometry::default_domain_count(size).map_err(format::FormatError::from)?,
    };
    let geometry = Geometry::compute(size, domain_count).map_err(format::FormatError::from)?;
    let pmr_size = match pmr {
        Some(p) => {
            format::pmr::PmrLayout::compute(p.len()).map_err(format::FormatError::from)?;
            p.len()
        }
        None => 0,
    };
    if !opts.force {
        if let Some(what) = detect_existing(device)? {
            return Err(EngineError::ExistingFileSystem { what });
        }
    }

    progress.step("invalidating old superblocks", 2 * BLOCK_SIZE_BYTES);
    device.run(vec![
        IoRequest::write(
            0,
            AlignedBuf::zeroed(2 * BLOCK_SIZE_BYTES as usize),
            IoCause::Superblock,
        ),
        IoRequest::flush(IoCause::Superblock),
    ])?;
    progress.advance(2 * BLOCK_SIZE_BYTES);

    let zeroed = [
        (geometry.checkpoints, IoCause::Checkpoint),
        (geometry.manifest, IoCause::Manifest),
        (geometry.wal, IoCause::Wal),
    ];
    let zero_total: u64 = zeroed.iter().map(|(r, _)| r.size_bytes()).sum();
    progress.step("zeroing metadata regions", zero_total);
    for (region, cause) in zeroed {
        zero_region(device, region, cause, progress)?;
    }
    if device.info().is_block_device && device.info().discard_supported {
        progress.step(
            "discarding the segment area",
            geometry.segments.size_bytes(),
        );
        device.discard(
            geometry.segments.start_byte(),
            geometry.segments.size_bytes(),
            IoCause::Tool,
        )?;
        progress.advance(geometry.segments.size_bytes());
    }

    write_initial_checkpoints(device, &geometry, progress)?;

    if let Some(p) = pmr {
        progress.step("formatting the PMR", p.len());
        pmr::format_region(p, opts.fs_uuid)?;
        progress.advance(p.len());
    }

    let mut superblock = Superblock::new(geometry, opts.fs_uuid, opts.created_unix_ns, pmr_size);
    superblock.label = opts.label.clone();
    progress.step("writing superblocks", 2 * BLOCK_SIZE_BYTES);
    device.run(vec![
        IoRequest::write(
            BLOCK_SIZE_BYTES,
            AlignedBuf::from_slice(&superblock.encode(1)),
            IoCause::Superblock,
        ),
        IoRequest::flush(IoCause::Superblock),
        IoRequest::write(
            0,
            AlignedBuf::from_slice(&superblock.encode(0)),
            IoCause::Superblock,
        ),
        IoRequest::flush(IoCause::Superblock),
    ])?;
    progress.advance(2 * BLOCK_SIZE_BYTES);
    progress.finish();
    Ok(superblock)
}

/// Writes sequence 1 of every checkpoint owner's first slot, empty, and flushes.
fn write_initial_checkpoints(
    device: &Device,
    geometry: &Geometry,
    progress: &dyn Progress,
) -> Result<(), EngineError> {
    let owners = geometry.checkpoint_owners();
    progress.step(
        "writing initial checkpoints",
        owners.len() as u64 * CHECKPOINT_SLOT_BYTES,
    );
    let mut requests: Vec<IoRequest> = owners
        .iter()
        .map(|&owner| {
            let slot = CheckpointSlot {
                owner,
                payload_version: 0,
                sequence: 1,
                payload: Vec::new(),
            };
            let offset = geometry.checkpoint_slot_offset(owner, 0);
            IoRequest::write(
                offset,
                AlignedBuf::from_slice(&slot.encode()),
                IoCause::Checkpoint,
            )
        })
        .collect();
    requests.push(IoRequest::flush(IoCause::Checkpoint));
    device.run(requests)?;
    progress.advance(owners.len() as u64 * CHECKPOINT_SLOT_BYTES);
    Ok(())
}

fn zero_region(
    device: &Device,
    region: Region,
    cause: IoCause,
    progress: &dyn Progress,
) -> Result<(), EngineError> {
    let mut queue = device.queue()?;
    let mut free: Vec<AlignedBuf> = (0..ZERO_CHUNKS_IN_FLIGHT)
        .map(|_| AlignedBuf::zeroed(ZERO_CHUNK_BYTES))
        .collect();
    let mut offset = region.start_byte();
    let end = region.end_byte();
    let mut first_error = None;
    while offset < end || queue.outstanding() > 0 {
        while offset < end && first_error.is_none() {
            let Some(mut buf) = free.pop() else { break };
            let len = (end - offset).min(ZERO_CHUNK_BYTES as u64) as usize;
            buf.set_len(len);
            buf.fill(0);
            if let Err(r) = queue.push(IoRequest::write(offset, buf, cause)) {
                free.push(r.into_buf().expect("write carries a buffer"));
                break;
            }
            offset += len as u64;
        }
        if queue.outstanding() == 0 {
            break;
        }
        queue.submit(1)?;
        while let Some(c) = queue.pop() {
            if let Err(e) = c.result {
                first_error.get_or_insert(e);
            }
            let buf = c.request.into_buf().expect("write carries a buffer");
            progress.advance(buf.len() as u64);
            free.push(buf);
        }
    }
    match first_error {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}
