//! `augefs inspect`: a structured report of an image, for people and for `--json`.

use crate::error::EngineError;
use crate::image::{check_pmr, read_checkpoints, read_superblock, OwnerCheckpoint};
use device::{Device, DeviceInfo};
use format::geometry::Geometry;
use format::pmr::PmrLayout;
use pmr::Pmr;
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct SuperblockReport {
    pub format_version: u32,
    pub sequence: u64,
    pub fs_uuid: String,
    /// Empty for none.
    pub label: String,
    pub created_unix_ns: u64,
    pub copy_used: u32,
    /// Per copy: "valid" or why it was rejected.
    pub copies: [String; 2],
}

#[derive(Debug, Clone, Serialize)]
pub struct PmrReport {
    pub size_bytes: u64,
    /// How persistence is achieved: clwb/clflushopt/clflush on DAX, msync, or memory.
    pub persist_mode: Option<String>,
    pub layout: Option<PmrLayout>,
    /// Why the PMR could not be examined (not given, or a mismatch).
    pub note: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct InspectReport {
    pub superblock: SuperblockReport,
    pub mode: &'static str,
    pub geometry: Geometry,
    pub checkpoints: Vec<OwnerCheckpoint>,
    pub device: DeviceInfo,
    pub pmr: Option<PmrReport>,
}

/// Parses a uuid as [`uuid_string`] writes it (hyphens optional, any case).
pub fn parse_uuid(text: &str) -> Result<[u8; 16], String> {
    let hex: String = text.chars().filter(|c| *c != '-').collect();
    let bad = || format!("{text:?} is not a uuid (32 hex digits, e.g. 0f1e2d3c-...)");
    if hex.len() != 32 || !hex.is_ascii() {
        return Err(bad());
    }
    let mut out = [0u8; 16];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    Ok(out)
}

pub fn uuid_string(uuid: &[u8; 16]) -> String {
    let hex: String = uuid.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// Builds the report. `pmr` is the PMR file the user named, if any.
pub fn inspect(device: &Device, pmr: Option<&Pmr>) -> Result<InspectReport, EngineError> {
    let choice = read_superblock(device)?;
    let sb = &choice.superblock;
    let copies = choice.copy_errors.clone().map(|e| match e {
        None => "valid".to_string(),
        Some(e) => e.to_string(),
    });
    let checkpoints = read_checkpoints(device, &sb.geometry)?;
    let pmr_report = match (sb.has_pmr(), pmr) {
        (false, None) => None,
        (false, Some(_)) => return Err(EngineError::PmrUnexpected),
        (true, None) => Some(PmrReport {
            size_bytes: sb.pmr_size_bytes,
            persist_mode: None,
            layout: None,
            note: Some("PMR not given (use --pmr FILE to examine it)".into()),
        }),
        (true, Some(p)) => {
            let header = check_pmr(sb, Some(p))?.expect("a PMR was given");
            Some(PmrReport {
                size_bytes: p.len(),
                persist_mode: Some(p.persist_mode().name().to_string()),
                layout: Some(header.layout),
                note: None,
            })
        }
    };
    Ok(InspectReport {
        superblock: SuperblockReport {
            format_version: sb.format_version,
            sequence: sb.sequence,
            fs_uuid: uuid_string(&sb.fs_uuid),
            label: sb.label.clone(),
            created_unix_ns: sb.created_unix_ns,
            copy_used: choice.copy_index,
            copies,
        },
        mode: if sb.has_pmr() { "pmr" } else { "ssd" },
        geometry: sb.geometry,
        checkpoints,
        device: device.info().clone(),
        pmr: pmr_report,
    })
}
