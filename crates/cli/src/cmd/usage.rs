//! `augefs inspect`'s usage table: space, inodes by kind and each domain's share,
//! read from a read-only mount of the image behind a copy-on-write overlay
//! (vfs::image::mount_snapshot), so a mounted image is read as it is durable now and
//! nothing is written.

use format::constants::{BLOCKS_PER_SEGMENT, BLOCK_SIZE_BYTES};
use platform::units::human;
use serde::Serialize;
use vfs::Kind;

/// One domain's row.
#[derive(Debug, Clone, Serialize)]
pub struct DomainUsage {
    pub domain: usize,
    pub segments: u64,
    pub live_bytes: u64,
}

/// What the image holds.
#[derive(Debug, Clone, Serialize)]
pub struct Usage {
    pub size_bytes: u64,
    pub used_bytes: u64,
    pub free_bytes: u64,
    pub live_data_bytes: u64,
    pub table_segments: u32,
    pub free_segments: u32,
    pub reserved_segments: u32,
    pub inodes: u64,
    pub files: u64,
    pub directories: u64,
    pub symlinks: u64,
    pub special: u64,
    pub domains: Vec<DomainUsage>,
}

/// The usage of the image on `dev`.
pub fn measure(dev: device::Device, pmr: Option<&std::path::Path>) -> Result<Usage, String> {
    let fs = vfs::image::mount_snapshot(dev, pmr).map_err(|e| e.to_string())?;
    let st = fs.statfs();
    let space = fs.engine().space_report();
    let kinds = fs.inode_kinds().map_err(|e| e.to_string())?;
    let count = |want: &[Kind]| -> u64 {
        kinds
            .iter()
            .filter(|(k, _)| want.contains(k))
            .map(|(_, n)| n)
            .sum()
    };
    let block = u64::from(st.block_size);
    let domains = fs
        .engine()
        .domain_segments()
        .into_iter()
        .zip(fs.engine().valid_blocks())
        .enumerate()
        .map(|(domain, (segments, live))| DomainUsage {
            domain,
            segments: segments as u64,
            live_bytes: live * BLOCK_SIZE_BYTES,
        })
        .collect();
    let usage = Usage {
        size_bytes: st.blocks * block,
        used_bytes: (st.blocks - st.blocks_free) * block,
        free_bytes: st.blocks_free * block,
        live_data_bytes: space.live_blocks * BLOCK_SIZE_BYTES,
        table_segments: space.table_segments,
        free_segments: space.free,
        reserved_segments: space.gc_reserve + space.metadb_headroom,
        inodes: kinds.iter().map(|(_, n)| n).sum(),
        files: count(&[Kind::File]),
        directories: count(&[Kind::Dir]),
        symlinks: count(&[Kind::Symlink]),
        special: count(&[Kind::Fifo, Kind::Socket, Kind::CharDev, Kind::BlockDev]),
        domains,
    };
    assert_eq!(usage.size_bytes, usage.used_bytes + usage.free_bytes);
    Ok(usage)
}

/// The table: totals, then a row per domain holding more than its log heads (all of
/// them with `verbose`), and one row summing up the others.
pub fn print(u: &Usage, verbose: bool) {
    let pct = |part: u64, whole: u64| {
        if whole == 0 {
            0.0
        } else {
            100.0 * part as f64 / whole as f64
        }
    };
    println!("usage");
    println!(
        "  space             {} size, {} used ({:.0}%), {} free; {} of it live file data",
        human(u.size_bytes),
        human(u.used_bytes),
        pct(u.used_bytes, u.size_bytes),
        human(u.free_bytes),
        human(u.live_data_bytes)
    );
    println!(
        "  segments          {} free, {} MetaDB tables, {} reserved (GC, MetaDB headroom)",
        u.free_segments, u.table_segments, u.reserved_segments
    );
    println!(
        "  inodes            {} ({} files, {} directories, {} symlinks, {} special)",
        u.inodes, u.files, u.directories, u.symlinks, u.special
    );
    println!("    domain  segments  live data   utilization");
    let row = |name: &str, segments: u64, live: u64| {
        let capacity = segments * BLOCKS_PER_SEGMENT * BLOCK_SIZE_BYTES;
        println!(
            "  {name:>8}  {segments:>8}  {:>9}   {:>10.0}%",
            human(live),
            pct(live, capacity)
        );
    };
    let (mut rest, mut rest_segments, mut rest_live) = (0, 0, 0);
    for d in &u.domains {
        if verbose || d.segments > 2 {
            row(&d.domain.to_string(), d.segments, d.live_bytes);
        } else {
            rest += 1;
            rest_segments += d.segments;
            rest_live += d.live_bytes;
        }
    }
    if rest > 0 {
        row(&format!("{rest} more"), rest_segments, rest_live);
        println!("  (domains with at most their two log heads are summed up; -v lists them)");
    }
}
