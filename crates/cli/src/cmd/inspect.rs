//! `augefs inspect IMAGE [--pmr FILE] [--json] [-v]`: the superblock, geometry and
//! checkpoints, then the usage table (`super::usage`). Read-only, also on a mounted
//! image.

use device::{BackendChoice, LockMode, OpenOptions};
use engine::image::{OwnerCheckpoint, SlotState};
use engine::inspect::InspectReport;
use format::geometry::CheckpointOwner;
use platform::units::human;
use platform::units::utc;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Image file or block device.
    pub image: PathBuf,
    /// The PMR file the image was formatted with.
    #[arg(long)]
    pub pmr: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// IO backend.
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: BackendChoice,
    /// Every domain's checkpoint slots and usage, a line each (otherwise one line sums
    /// up the domains whose checkpoints are in order, and one the domains holding no
    /// more than their log heads).
    #[arg(short, long)]
    pub verbose: bool,
}

pub fn run(args: Args) -> Result<(), String> {
    if !args.image.exists() {
        return Err(format!("{}: no such file or device", args.image.display()));
    }
    let opts = OpenOptions {
        backend: args.backend,
        read_only: true,
        lock: LockMode::Shared,
        ..OpenOptions::default()
    };
    let dev = match device::holder::open_waiting(
        &args.image,
        &opts,
        crate::ui::HOLDER_WAIT,
        &mut crate::ui::say_waiting(&args.image),
    ) {
        // Mounted (or attached): what it has made durable is read without a lock, as
        // dumpe2fs reads a mounted ext4, and the reader is told how old it may be.
        Err(device::DeviceError::InUse {
            holder: Some(h), ..
        }) if h.serving => {
            eprintln!(
                "augefs: {} is {h}: showing its last checkpoints, which may lag what it \
                 holds now",
                args.image.display()
            );
            let unlocked = OpenOptions {
                lock: LockMode::Unlocked,
                ..opts
            };
            device::open(&args.image, &unlocked).map_err(|e| e.to_string())?
        }
        other => other.map_err(|e| e.to_string())?,
    };
    let pmr = match &args.pmr {
        Some(p) => Some(pmr::Pmr::open(p, pmr::PmrOptions::default()).map_err(|e| e.to_string())?),
        None => None,
    };
    let report = engine::inspect::inspect(&dev, pmr.as_ref())
        .map_err(|e| format!("{}: {e}", args.image.display()))?;
    drop(pmr);
    // The image's structures are shown even when its contents cannot be read.
    let usage = super::usage::measure(dev, args.pmr.as_deref());
    if args.json {
        let mut value = serde_json::to_value(&report).map_err(|e| e.to_string())?;
        value["usage"] = match &usage {
            Ok(u) => serde_json::to_value(u).map_err(|e| e.to_string())?,
            Err(e) => serde_json::json!({ "error": e }),
        };
        println!(
            "{}",
            serde_json::to_string_pretty(&value).map_err(|e| e.to_string())?
        );
    } else {
        print_text(&args, &report);
        match &usage {
            Ok(u) => super::usage::print(u, args.verbose),
            Err(e) => println!("usage\n  UNAVAILABLE: {e}"),
        }
    }
    Ok(())
}

fn print_text(args: &Args, r: &InspectReport) {
    let sb = &r.superblock;
    let g = &r.geometry;
    println!("augefs image {}", args.image.display());
    println!("  format version    {}", sb.format_version);
    println!("  uuid              {}", sb.fs_uuid);
    let label = if sb.label.is_empty() {
        "(none)"
    } else {
        &sb.label
    };
    println!("  label             {label}");
    println!("  created           {}", utc(sb.created_unix_ns));
    println!(
        "  superblock        copy {} used (sequence {}); copy 0: {}; copy 1: {}",
        sb.copy_used, sb.sequence, sb.copies[0], sb.copies[1]
    );
    println!(
        "  size              {} ({} bytes)",
        human(g.device_size_bytes),
        g.device_size_bytes
    );
    println!("  domains           {}", g.domain_count);
    println!(
        "  segments          {} x 2 MiB = {}",
        g.segment_count,
        human(g.segment_bytes())
    );
    match &r.pmr {
        None => println!("  mode              ssd (MetaDB WAL on the device)"),
        Some(p) => {
            println!(
                "  mode              pmr (MetaDB WAL on a {} PMR)",
                human(p.size_bytes)
            );
            if let Some(mode) = &p.persist_mode {
                println!("  PMR persist       {mode}");
            }
            if let Some(note) = &p.note {
                println!("  PMR               {note}");
            }
        }
    }
    let d = &r.device;
    println!(
        "  device            {} backend, logical block {} B, {}, discard {}",
        d.backend.name(),
        d.logical_block_bytes,
        if d.is_block_device {
            "block device"
        } else {
            "image file"
        },
        if d.discard_supported {
            "supported"
        } else {
            "unsupported"
        }
    );
    if let Some(notice) = &d.notice {
        println!("  notice            {notice}");
    }
    println!("regions (4 KiB blocks)");
    let mut regions = vec![
        ("superblocks".to_string(), g.superblocks),
        ("checkpoints".into(), g.checkpoints),
        ("manifest".into(), g.manifest),
        ("wal".into(), g.wal),
        ("summaries".into(), g.summaries),
        ("segments".into(), g.segments),
    ];
    // Areas added by `augefs resize`, each after the device's end before it.
    for (i, a) in g.grown_areas().iter().enumerate() {
        regions.push((format!("summaries+{}", i + 1), a.summaries));
        regions.push((format!("segments+{}", i + 1), a.segments));
    }
    for (name, region) in regions {
        println!(
            "  {name:<12} start {:>10}  blocks {:>10}  ({})",
            region.start_block,
            region.block_count,
            human(region.size_bytes())
        );
    }
    println!("checkpoints");
    print_checkpoints(&r.checkpoints, args.verbose);
}

/// One line per checkpoint owner with `verbose`; otherwise the global owner and any
/// domain whose slots are not in order (no valid slot, or an invalid one) a line each,
/// and one line for the rest of the domains.
fn print_checkpoints(checkpoints: &[OwnerCheckpoint], verbose: bool) {
    let slot = |s: &SlotState| match s {
        SlotState::Empty => "empty".to_string(),
        SlotState::Valid {
            sequence,
            payload_bytes,
        } => format!("sequence {sequence} ({payload_bytes} B)"),
        SlotState::Invalid { reason } => format!("INVALID: {reason}"),
    };
    let in_order = |cp: &OwnerCheckpoint| {
        cp.current_slot.is_some()
            && !cp
                .slots
                .iter()
                .any(|s| matches!(s, SlotState::Invalid { .. }))
    };
    let mut summed: Vec<u64> = Vec::new();
    for cp in checkpoints {
        let owner = match cp.owner {
            CheckpointOwner::Global => "global".to_string(),
            CheckpointOwner::Domain(d) => format!("domain {d}"),
        };
        let domain = matches!(cp.owner, CheckpointOwner::Domain(_));
        if domain && !verbose && in_order(cp) {
            let current = cp.current_slot.and_then(|s| cp.slots.get(s as usize));
            if let Some(SlotState::Valid { sequence, .. }) = current {
                summed.push(*sequence);
            }
            continue;
        }
        let current = match cp.current_slot {
            Some(s) => format!("current: slot {s}"),
            None => "NO VALID CHECKPOINT".to_string(),
        };
        println!(
            "  {owner:<10} slot 0 {:<24} slot 1 {:<24} {current}",
            slot(&cp.slots[0]),
            slot(&cp.slots[1])
        );
    }
    if let (Some(lo), Some(hi)) = (summed.iter().min(), summed.iter().max()) {
        let sequences = if lo == hi {
            format!("sequence {lo}")
        } else {
            format!("sequences {lo}-{hi}")
        };
        println!(
            "  domains    {} in order: a valid current slot each ({sequences}; -v lists them)",
            summed.len()
        );
    }
}
