//! `augefs tune IMAGE [-L LABEL] [--uuid UUID|random]`: changes an unmounted image's
//! label or uuid (as `tune2fs -L`, `xfs_admin -L`), by rewriting both superblock
//! copies (engine::image::set_identity; docs/FORMAT.md §3).

use device::{LockMode, OpenOptions};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Image file or block device (not mounted).
    pub image: PathBuf,
    /// The new label (up to 64 bytes; "" removes it).
    #[arg(short = 'L', long)]
    pub label: Option<String>,
    /// The new uuid, or `random`.
    #[arg(long)]
    pub uuid: Option<String>,
}

pub fn run(args: Args) -> Result<(), String> {
    if args.label.is_none() && args.uuid.is_none() {
        return Err("nothing to change: give -L LABEL and/or --uuid UUID|random".into());
    }
    let uuid = match args.uuid.as_deref() {
        None => None,
        Some("random") => Some(super::mkfs::fs_uuid()?),
        Some(text) => Some(engine::inspect::parse_uuid(text)?),
    };
    let opts = OpenOptions {
        lock: LockMode::Exclusive,
        ..OpenOptions::default()
    };
    // Offline only: a mount or another command holding the image is named and refused.
    let dev = match device::open(&args.image, &opts) {
        Err(device::DeviceError::InUse { .. }) => {
            let h = device::holder::holder(&args.image);
            return Err(format!(
                "{} is {h}: tune changes an unmounted image (unmount it first)",
                args.image.display()
            ));
        }
        other => other.map_err(|e| format!("{}: {e}", args.image.display()))?,
    };
    let sb = engine::image::set_identity(&dev, args.label.as_deref(), uuid)
        .map_err(|e| format!("{}: {e}", args.image.display()))?;
    let label = if sb.label.is_empty() {
        "(none)"
    } else {
        &sb.label
    };
    println!(
        "{}: label {label}, uuid {}",
        args.image.display(),
        engine::inspect::uuid_string(&sb.fs_uuid)
    );
    Ok(())
}
