//! Reading the fixed structures of an image: superblock copies and checkpoint slots
//! (docs/FORMAT.md §3, §4).
//!
//! Invariants:
//! - Reads go through the device with cause Superblock or Checkpoint.
//! - A slot that fails validation is reported, never used.

use crate::error::EngineError;
use device::{AlignedBuf, Device, IoCause, IoRequest};
use format::checkpoint::CheckpointSlot;
use format::constants::{BLOCK_SIZE_BYTES, CHECKPOINT_SLOT_BYTES};
use format::geometry::{CheckpointOwner, Geometry};
use format::superblock::{self, SuperblockChoice};
use serde::Serialize;

/// Adds the feature flags `add` to the image's superblock, if it lacks any of them,
/// before this build writes structures older code would misread: both copies are
/// rewritten with the next sequence number, copy 1 first and each flushed, as mkfs
/// writes them, so a crash leaves one copy with the flags or the old pair.
pub fn add_features(
    device: &Device,
    choice: &SuperblockChoice,
    add: u32,
) -> Result<superblock::Superblock, EngineError> {
    let mut sb = choice.superblock.clone();
    if sb.feature_flags & add == add {
        return Ok(sb);
    }
    sb.feature_flags |= add;
    sb.sequence += 1;
    write_superblock(device, &sb)?;
    Ok(sb)
}

/// Gives the image a new label and/or uuid (`augefs tune`, offline): both superblock
/// copies rewritten with the next sequence number, copy 1 first and each flushed, so a
/// crash leaves the old identity or the new one, never a mix. The uuid of an image
/// with a PMR stays (the PMR's header carries it).
pub fn set_identity(
    device: &Device,
    label: Option<&str>,
    uuid: Option<[u8; 16]>,
) -> Result<superblock::Superblock, EngineError> {
    let mut sb = read_superblock(device)?.superblock;
    if let Some(l) = label {
        superblock::Superblock::check_label(l).map_err(EngineError::BadIdentity)?;
        sb.label = l.to_string();
    }
    if let Some(u) = uuid {
        if sb.has_pmr() && u != sb.fs_uuid {
            return Err(EngineError::BadIdentity(
                "the uuid of an image with a PMR cannot change (the PMR's header names it)".into(),
            ));
        }
        sb.fs_uuid = u;
    }
    sb.sequence += 1;
    write_superblock(device, &sb)?;
    Ok(sb)
}

/// Writes `sb` over both superblock copies, copy 1 first and each flushed before the
/// next: a crash leaves at least one copy whole, the old or the new, and a reader picks
/// the valid one with the highest sequence.
pub(crate) fn write_superblock(
    device: &Device,
    sb: &format::superblock::Superblock,
) -> Result<(), EngineError> {
    for copy in [1u32, 0] {
        device.run(vec![
            IoRequest::write(
                u64::from(copy) * BLOCK_SIZE_BYTES,
                AlignedBuf::from_slice(&sb.encode(copy)),
                IoCause::Superblock,
            ),
            IoRequest::flush(IoCause::Superblock),
        ])?;
    }
    Ok(())
}

/// Reads both superblock copies and picks the valid one with the highest sequence.
///
/// Every open of an image passes here (mount, fsck, inspect, the C ABI and the
/// interposer through the engine), so this is where a device shorter than the file
/// system its superblock describes is refused: nothing after it reads or writes past
/// the device's end. A device larger than the superblock says is fine (FORMAT.md §3).
pub fn read_superblock(device: &Device) -> Result<SuperblockChoice, EngineError> {
    let block = BLOCK_SIZE_BYTES as usize;
    if device.size_bytes() < 2 * BLOCK_SIZE_BYTES {
        // An image cut inside its superblocks is still recognised by copy 0.
        if device.size_bytes() >= BLOCK_SIZE_BYTES {
            let buf = device.read(0, AlignedBuf::zeroed(block), IoCause::Superblock)?;
            if let Ok(sb) = superblock::Superblock::decode(&buf, 0) {
                return Err(EngineError::DeviceTooShort {
                    device_size_bytes: device.size_bytes(),
                    fs_size_bytes: sb.geometry.device_size_bytes,
                });
            }
        }
        return Err(format::FormatError::NotAugefs { what: "image" }.into());
    }
    let buf = device.read(0, AlignedBuf::zeroed(2 * block), IoCause::Superblock)?;
    let choice = superblock::choose(&buf[..block], &buf[block..])?;
    let fs_size_bytes = choice.superblock.geometry.device_size_bytes;
    if device.size_bytes() < fs_size_bytes {
        return Err(EngineError::DeviceTooShort {
            device_size_bytes: device.size_bytes(),
            fs_size_bytes,
        });
    }
    Ok(choice)
}

/// What one checkpoint slot holds.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum SlotState {
    /// Never written.
    Empty,
    Valid {
        sequence: u64,
        payload_bytes: usize,
    },
    Invalid {
        reason: String,
    },
}

/// Both slots of one owner and which of them is current.
#[derive(Debug, Clone, Serialize)]
pub struct OwnerCheckpoint {
    pub owner: CheckpointOwner,
    pub slots: [SlotState; 2],
    /// The slot with the newest valid checkpoint, if any.
    pub current_slot: Option<u32>,
    #[serde(skip)]
    pub current: Option<CheckpointSlot>,
}

/// Reads every checkpoint slot of every owner in one batch.
pub fn read_checkpoints(
    device: &Device,
    geometry: &Geometry,
) -> Result<Vec<OwnerCheckpoint>, EngineError> {
    let owners = geometry.checkpoint_owners();
    let mut requests = Vec::with_capacity(owners.len() * 2);
    for owner in &owners {
        for slot in 0..2 {
            let offset = geometry.checkpoint_slot_offset(*owner, slot);
            requests.push(IoRequest::read(
                offset,
                AlignedBuf::zeroed(CHECKPOINT_SLOT_BYTES as usize),
                IoCause::Checkpoint,
            ));
        }
    }
    let completions = device.run(requests)?;
    let mut out = Vec::with_capacity(owners.len());
    for (owner, pair) in owners.iter().zip(completions.chunks(2)) {
        let mut states = [SlotState::Empty, SlotState::Empty];
        let mut best: Option<(u32, CheckpointSlot)> = None;
        for (slot, completion) in pair.iter().enumerate() {
            let bytes = match &completion.request.op {
                device::IoOp::Read { buf, .. } => &buf[..],
                _ => unreachable!("only reads were queued"),
            };
            let location = format!("{owner:?} slot {slot}");
            states[slot] = match CheckpointSlot::decode(bytes, &location) {
                Ok(None) => SlotState::Empty,
                Ok(Some(cp)) if cp.owner != *owner => SlotState::Invalid {
                    reason: format!(
                        "slot holds the checkpoint of {:?} (misdirected write)",
                        cp.owner
                    ),
                },
                Ok(Some(cp)) => {
                    let state = SlotState::Valid {
                        sequence: cp.sequence,
                        payload_bytes: cp.payload.len(),
                    };
                    if best.as_ref().is_none_or(|(_, b)| cp.sequence > b.sequence) {
                        best = Some((slot as u32, cp));
                    }
                    state
                }
                Err(e) => SlotState::Invalid {
                    reason: e.to_string(),
                },
            };
        }
        out.push(OwnerCheckpoint {
            owner: *owner,
            slots: states,
            current_slot: best.as_ref().map(|(s, _)| *s),
            current: best.map(|(_, cp)| cp),
        });
    }
    Ok(out)
}

/// Checks that `pmr` is the image's PMR (or that none is given for an image without
/// one); returns its header when one is given.
pub fn check_pmr(
    sb: &format::superblock::Superblock,
    pmr: Option<&pmr::Pmr>,
) -> Result<Option<format::pmr::PmrHeader>, EngineError> {
    match (sb.has_pmr(), pmr) {
        (false, None) => Ok(None),
        (false, Some(_)) => Err(EngineError::PmrUnexpected),
        (true, None) => Err(EngineError::PmrRequired),
        (true, Some(p)) => {
            let header = pmr::read_header(p)?;
            if header.fs_uuid != sb.fs_uuid {
                return Err(EngineError::PmrMismatch {
                    pmr_uuid: crate::inspect::uuid_string(&header.fs_uuid),
                    image_uuid: crate::inspect::uuid_string(&sb.fs_uuid),
                });
            }
            if p.len() != sb.pmr_size_bytes {
                return Err(EngineError::PmrSizeMismatch {
                    expected: sb.pmr_size_bytes,
                    got: p.len(),
                });
            }
            Ok(Some(header))
        }
    }
}
