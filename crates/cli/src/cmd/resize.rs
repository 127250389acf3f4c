//! `augefs resize IMAGE|DEVICE [SIZE]`: grows an unmounted file system (as resize2fs
//! offline): an image file is first extended to SIZE; without SIZE, into the whole
//! device (a grown partition, an image extended by hand). engine::resize grows in
//! place or by an added area, and refuses a grow too small for a segment, a ninth added
//! area and every shrink, saying why.

use device::{LockMode, OpenOptions};
use platform::units::{human, parse_size};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Image file or block device (not mounted).
    pub image: PathBuf,
    /// The new size, e.g. 512M (an image file is extended to it); default: the device's.
    #[arg(value_parser = parse_size)]
    pub size: Option<u64>,
    /// Allocate the file's new part without writing it out (as `mkfs --lazy`).
    #[arg(long)]
    pub lazy: bool,
}

pub fn run(args: Args) -> Result<(), String> {
    let path = &args.image;
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let opts = OpenOptions {
        lock: LockMode::Exclusive,
        ..OpenOptions::default()
    };
    let dev = match device::open(path, &opts) {
        Err(device::DeviceError::InUse { .. }) => {
            let h = device::holder::holder(path);
            return Err(format!(
                "{} is {h}: resize works on an unmounted file system (unmount it first)",
                path.display()
            ));
        }
        other => other.map_err(|e| format!("{}: {e}", path.display()))?,
    };
    let sb = engine::image::read_superblock(&dev)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .superblock;
    let old_size = sb.geometry.device_size_bytes;
    let want = args.size.unwrap_or(dev.size_bytes());
    // Refused before anything changes (a file is not extended for a grow that fails).
    engine::resize::plan(&sb.geometry, want).map_err(|e| format!("{}: {e}", path.display()))?;
    let dev = if meta.is_file() && want > meta.len() {
        // Extended before the grow: a crash leaves the old file system in a larger file,
        // which opens as it did.
        drop(dev);
        device::create_image(path, want)
            .map_err(|e| format!("{}: extending to {}: {e}", path.display(), human(want)))?;
        if !args.lazy {
            super::mkfs::write_out(path)?;
        }
        device::open(path, &opts).map_err(|e| format!("{}: {e}", path.display()))?
    } else {
        dev
    };
    let grown = engine::resize::grow(&dev, want).map_err(|e| format!("{}: {e}", path.display()))?;
    let g = &grown.new.geometry;
    println!(
        "{}: grown from {} to {}: {} segments of 2 MiB, {} before",
        path.display(),
        human(old_size),
        human(g.device_size_bytes),
        g.segment_count,
        grown.old_segment_count
    );
    Ok(())
}
