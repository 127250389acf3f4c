//! `augefs mkfs IMAGE|DEVICE [--size] [--pmr FILE] [--pmr-size] [--domains N] [--force]`.

use crate::ui::Bar;
use device::{LockMode, OpenOptions};
use engine::mkfs::{self, MkfsOptions};
use format::constants::{GIB, PMR_SIZE_DEFAULT_BYTES};
use format::geometry::Geometry;
use format::pmr::PmrLayout;
use platform::units::{human, parse_size};
use platform::Clock;
use std::io::Read;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Image file (created if missing) or block device.
    pub image: PathBuf,
    /// Size of the image file, e.g. 4G. Default: the file's size, or 1G for a new file.
    #[arg(long, value_parser = parse_size)]
    pub size: Option<u64>,
    /// Persistent memory region file for MetaDB's WAL (created if missing).
    #[arg(long)]
    pub pmr: Option<PathBuf>,
    /// Size of a new PMR file, e.g. 64M.
    #[arg(long, value_parser = parse_size, requires = "pmr")]
    pub pmr_size: Option<u64>,
    /// Number of domains (default: 16, fewer on small devices).
    #[arg(long)]
    pub domains: Option<u32>,
    /// Format even if the device already holds a file system.
    #[arg(long)]
    pub force: bool,
    /// IO backend.
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: device::BackendChoice,
    /// The file system's label (up to 64 bytes; `augefs mount LABEL=NAME DIR` finds it).
    #[arg(short = 'L', long)]
    pub label: Option<String>,
    /// The file system's uuid instead of a random one.
    #[arg(long, value_parser = engine::inspect::parse_uuid)]
    pub uuid: Option<[u8; 16]>,
    /// Allocate an image file without writing it out: a faster mkfs of a large image, but
    /// until each block has been written once the host file system (ext4, xfs) converts
    /// its extent at augefs's first write there and commits its journal at the next
    /// fsync, which about doubles that fsync's latency.
    #[arg(long)]
    pub lazy: bool,
}

/// A random (version 4) uuid.
pub fn fs_uuid() -> Result<[u8; 16], String> {
    let mut uuid = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut uuid))
        .map_err(|e| format!("cannot read /dev/urandom for the file-system uuid: {e}"))?;
    uuid[6] = (uuid[6] & 0x0f) | 0x40; // RFC 4122 version 4
    uuid[8] = (uuid[8] & 0x3f) | 0x80;
    Ok(uuid)
}

fn is_block_device(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path)
        .map(|m| m.file_type().is_block_device())
        .unwrap_or(false)
}

/// Writes zeros over the image file's holes and unwritten extents (device::image), with
/// a progress bar. Changes no byte a reader sees, so it may run on a formatted image.
pub fn write_out(image: &Path) -> Result<(), String> {
    use engine::progress::Progress;
    let bar = Bar::new();
    let mut last = 0;
    device::write_holes(image, &mut |done, total| {
        if done == 0 {
            bar.step("writing the image out", total);
        }
        bar.advance(done - last);
        last = done;
    })
    .map_err(|e| format!("writing {} out: {e}", image.display()))?;
    bar.finish();
    Ok(())
}

/// Creates, resizes and writes out the image file as asked (a block device is only
/// opened), then opens it for mkfs.
fn open_image(
    args: &Args,
    exists: bool,
    open_opts: &OpenOptions,
) -> Result<device::Device, String> {
    if !exists {
        device::create_image(&args.image, args.size.unwrap_or(GIB)).map_err(|e| e.to_string())?;
    }
    let mut dev = device::open(&args.image, open_opts).map_err(|e| e.to_string())?;
    if let Some(size) = args.size.filter(|&s| exists && s != dev.size_bytes()) {
        // Resizing an existing image: refuse first if it holds a file system.
        if !args.force {
            if let Some(what) = mkfs::detect_existing(&dev).map_err(|e| e.to_string())? {
                return Err(engine::EngineError::ExistingFileSystem { what }.to_string());
            }
        }
        drop(dev);
        device::create_image(&args.image, size).map_err(|e| e.to_string())?;
        dev = device::open(&args.image, open_opts).map_err(|e| e.to_string())?;
    }
    if !args.lazy && !dev.info().is_block_device {
        drop(dev);
        write_out(&args.image)?;
        dev = device::open(&args.image, open_opts).map_err(|e| e.to_string())?;
    }
    Ok(dev)
}

pub fn run(args: Args) -> Result<(), String> {
    if let Some(l) = &args.label {
        // Before anything is created or written.
        format::superblock::Superblock::check_label(l)?;
    }
    let open_opts = OpenOptions {
        backend: args.backend,
        lock: LockMode::Exclusive,
        ..OpenOptions::default()
    };
    let exists = args.image.exists();
    if is_block_device(&args.image) && args.size.is_some() {
        return Err(format!(
            "--size applies to image files; {} is a block device",
            args.image.display()
        ));
    }
    // Check sizes before creating anything, so a bad size leaves no file behind.
    if let Some(size) = args.size {
        Geometry::compute(size, 1).map_err(|e| e.to_string())?;
    }
    let pmr_size = args.pmr_size.unwrap_or(PMR_SIZE_DEFAULT_BYTES);
    if args.pmr.is_some() {
        if let Some(p) = args
            .pmr
            .as_ref()
            .filter(|p| p.exists() && args.pmr_size.is_none())
        {
            let len = std::fs::metadata(p)
                .map_err(|e| format!("{}: {e}", p.display()))?
                .len();
            PmrLayout::compute(len).map_err(|e| format!("{}: {e}", p.display()))?;
        } else {
            PmrLayout::compute(pmr_size).map_err(|e| e.to_string())?;
        }
    }

    let dev = open_image(&args, exists, &open_opts)?;

    let pmr = match &args.pmr {
        Some(path) => {
            let opened = if !path.exists() || args.pmr_size.is_some() {
                pmr::Pmr::create(path, pmr_size, pmr::PmrOptions::default())
            } else {
                pmr::Pmr::open(path, pmr::PmrOptions::default())
            };
            Some(opened.map_err(|e| format!("{}: {e}", path.display()))?)
        }
        None => None,
    };

    let clock = platform::SystemClock::new();
    let opts = MkfsOptions {
        domain_count: args.domains,
        fs_uuid: match args.uuid {
            Some(u) => u,
            None => fs_uuid()?,
        },
        created_unix_ns: clock.wall_ns(),
        force: args.force,
        label: args.label.clone().unwrap_or_default(),
    };
    let bar = Bar::new();
    let sb = mkfs::format(&dev, pmr.as_ref(), &opts, &bar).map_err(|e| e.to_string())?;
    let g = &sb.geometry;
    let mode = match &pmr {
        Some(p) => format!(
            "pmr mode (WAL on {}, {}, persisted by {})",
            args.pmr.as_ref().expect("pmr path").display(),
            human(p.len()),
            p.persist_mode().name()
        ),
        None => "ssd mode (WAL on the device)".to_string(),
    };
    println!(
        "formatted {}: {}, {} domains, {} segments of 2 MiB ({} for data), {}, IO by {}",
        args.image.display(),
        human(g.device_size_bytes),
        g.domain_count,
        g.segment_count,
        human(g.segment_bytes()),
        mode,
        dev.info().backend.name()
    );
    Ok(())
}
