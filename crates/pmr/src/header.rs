//! Formatting a PMR and reading its header (docs/FORMAT.md §7; the byte layout is
//! `format::pmr`).
//!
//! Invariants:
//! - `format_region` zeroes and persists the WAL slot area and the write-version area
//!   *before* it writes and persists the header, so a crash during formatting leaves
//!   either no valid header or a valid header over zeroed areas, never a header over
//!   stale slots. (The WAL data area is zeroed by the WAL itself when it initialises or
//!   reclaims a range, augefs.txt §V-B "Log Recovery".)
//! - `read_header` accepts a header only if it decodes (magic, CRC, version, layout)
//!   and its recorded size equals the region's size.

use crate::error::{PmrError, Uuid};
use crate::region::Pmr;
use format::constants::PMR_HEADER_BYTES;
use format::pmr::{PmrHeader, PmrLayout};
use format::FormatError;
use platform::IoCause;

/// Zero-fills `offset .. offset + len` in block-sized stores.
fn zero(pmr: &Pmr, offset: u64, len: u64) {
    const CHUNK_BYTES: u64 = 4096;
    let zeros = [0u8; CHUNK_BYTES as usize];
    let mut done = 0;
    while done < len {
        let take = (len - done).min(CHUNK_BYTES);
        pmr.write(offset + done, &zeros[..take as usize]);
        done += take;
    }
}

/// Formats `pmr` for the file system `fs_uuid`: zeroes the slot and write-version
/// areas, writes the header, and persists each (IO cause: `Tool`).
pub fn format_region(pmr: &Pmr, fs_uuid: [u8; 16]) -> Result<PmrHeader, PmrError> {
    let layout = PmrLayout::compute(pmr.len()).map_err(FormatError::from)?;
    zero(pmr, layout.slot_area_offset, layout.slot_area_bytes);
    zero(pmr, layout.write_ver_offset, layout.write_ver_bytes);
    pmr.persist(
        layout.slot_area_offset,
        layout.slot_area_bytes,
        IoCause::Tool,
    )?;
    pmr.persist(
        layout.write_ver_offset,
        layout.write_ver_bytes,
        IoCause::Tool,
    )?;
    let header = PmrHeader { fs_uuid, layout };
    let encoded = header.encode();
    assert_eq!(encoded.len() as u64, PMR_HEADER_BYTES);
    pmr.write(0, &encoded);
    pmr.persist(0, PMR_HEADER_BYTES, IoCause::Tool)?;
    Ok(header)
}

/// Reads and checks the header (IO cause: `Superblock`, the PMR's superblock).
pub fn read_header(pmr: &Pmr) -> Result<PmrHeader, PmrError> {
    let mut buf = vec![0u8; PMR_HEADER_BYTES as usize];
    pmr.read(0, &mut buf, IoCause::Superblock);
    let header = PmrHeader::decode(&buf)?;
    if header.layout.size_bytes != pmr.len() {
        return Err(FormatError::corruption(
            "PMR header",
            "PMR byte 0 (pmr_size_bytes)",
            format!("the region's size {}", pmr.len()),
            header.layout.size_bytes,
        )
        .into());
    }
    Ok(header)
}

/// Fails unless `header` belongs to the file system `fs_uuid` (mount refuses the PMR
/// of another file system).
pub fn check_fs_uuid(header: &PmrHeader, fs_uuid: [u8; 16]) -> Result<(), PmrError> {
    if header.fs_uuid != fs_uuid {
        return Err(PmrError::ForeignFileSystem {
            expected: Uuid(fs_uuid),
            found: Uuid(header.fs_uuid),
        });
    }
    Ok(())
}

/// [`read_header`] then [`check_fs_uuid`]: what mount does.
pub fn read_header_for(pmr: &Pmr, fs_uuid: [u8; 16]) -> Result<PmrHeader, PmrError> {
    let header = read_header(pmr)?;
    check_fs_uuid(&header, fs_uuid)?;
    Ok(header)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::region::PmrOptions;
    use format::constants::MIB;

    #[test]
    fn format_then_read_round_trip() {
        let pmr = Pmr::memory(2 * MIB, PmrOptions::default()).unwrap();
        let header = format_region(&pmr, [7; 16]).unwrap();
        assert_eq!(read_header(&pmr).unwrap(), header);
        assert_eq!(read_header_for(&pmr, [7; 16]).unwrap(), header);
        // Everything format wrote is durable.
        assert_eq!(pmr.dirty_lines_count(), 0);
        let rebooted =
            Pmr::memory_from_image(&pmr.crash_image_all_lost(), PmrOptions::default()).unwrap();
        assert_eq!(read_header(&rebooted).unwrap(), header);
    }

    #[test]
    fn format_zeroes_slots_and_write_versions() {
        let pmr = Pmr::memory(2 * MIB, PmrOptions::default()).unwrap();
        let layout = PmrLayout::compute(pmr.len()).unwrap();
        pmr.write(layout.slot_area_offset, &[0xFF; 4096]);
        pmr.store_u64(layout.write_ver_line(3), 42);
        pmr.persist_all(IoCause::Tool).unwrap();
        format_region(&pmr, [1; 16]).unwrap();
        let image = pmr.crash_image_all_lost();
        let slots = &image[layout.slot_area_offset as usize..][..4096];
        assert!(slots.iter().all(|&b| b == 0));
        assert_eq!(pmr.load_u64(layout.write_ver_line(3)), 0);
    }

    #[test]
    fn unformatted_region_is_not_augefs() {
        let pmr = Pmr::memory(2 * MIB, PmrOptions::default()).unwrap();
        let err = read_header(&pmr).unwrap_err();
        assert!(
            matches!(err, PmrError::Format(FormatError::NotAugefs { .. })),
            "{err}"
        );
    }

    #[test]
    fn header_of_another_size_is_corruption() {
        let small = Pmr::memory(2 * MIB, PmrOptions::default()).unwrap();
        format_region(&small, [2; 16]).unwrap();
        let mut image = small.crash_image_all_lost();
        image.resize(4 * MIB as usize, 0);
        let grown = Pmr::memory_from_image(&image, PmrOptions::default()).unwrap();
        let err = read_header(&grown).unwrap_err();
        assert!(
            matches!(err, PmrError::Format(FormatError::Corruption(_))),
            "{err}"
        );
    }

    #[test]
    fn wrong_fs_uuid_is_refused() {
        let pmr = Pmr::memory(2 * MIB, PmrOptions::default()).unwrap();
        let header = format_region(&pmr, [7; 16]).unwrap();
        assert!(check_fs_uuid(&header, [7; 16]).is_ok());
        let err = read_header_for(&pmr, [8; 16]).unwrap_err();
        match err {
            PmrError::ForeignFileSystem { expected, found } => {
                assert_eq!(expected, Uuid([8; 16]));
                assert_eq!(found, Uuid([7; 16]));
            }
            other => panic!("expected ForeignFileSystem, got {other}"),
        }
    }
}
