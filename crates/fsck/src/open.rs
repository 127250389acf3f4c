//! fsck's own recovery: MetaDB opened exactly as a mount opens it (the manifest, then the
//! WAL replayed through the engine's replay filter, so records whose data never reached
//! the device are dropped as a mount would drop them), but without the engine's strict
//! rebuild of the domains, which refuses an image with one bad segment information
//! entry. Every segment an `s` key names is claimed for its domain before MetaDB's
//! recovery flush allocates tables, conflicts are noted, never fatal; so is every
//! segment a mapping points into that no `s` key names (a lost entry: its data must not
//! be overwritten by a table before the checks decide what to do with it).
//!
//! Invariants:
//! - Before MetaDB's recovery flush, every segment named by the manifest, by an `s` key
//!   or by a mapping is claimed in the pool, so no table fsck's writes create lands on a
//!   segment that any structure names.
//! - Only what stops MetaDB itself from opening is an error; everything else is data
//!   for the checks.

use crate::error::FsckError;
use device::Device;
use engine::image::{add_features, check_pmr, read_superblock};
use engine::log::hooks::EngineHooks;
use engine::log::keys::{
    parse_extent_key, parse_mapping_key, Extent, FileBlock, Mapping, EXTENT_TAG, MAPPING_TAG,
    SEGINFO_TAG,
};
use engine::space::pool::{MetaDbSpace, PoolConfig, SpacePool};
use engine::space::Owner;
use format::{BlockAddr, DomainId, Geometry, InodeNo, SegmentNo};
use metadb::{MetaDb, MetaDbConfig, MetaDbEnv};
use pmr::Pmr;
use std::sync::Arc;

/// A segment an `s` key named that the pool had already given to another owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimConflict {
    pub segment: SegmentNo,
    pub domain: DomainId,
    /// Who held it first (MetaDB's manifest is claimed before any domain).
    pub holder: Option<Owner>,
}

/// A recovered MetaDB and the pool that knows who owns which segment.
pub struct Recovered {
    pub db: MetaDb,
    pub pool: Arc<SpacePool>,
    pub geometry: Geometry,
    pub conflicts: Vec<ClaimConflict>,
    /// Segments mappings point into that no `s` key names and no one else owned:
    /// claimed for the domain of the first such mapping.
    pub lost: Vec<(DomainId, SegmentNo)>,
    /// WAL records the replay filter dropped (their data never reached the device).
    pub replay_dropped: u64,
}

/// Whether recovery keeps the log up to damage it proves (fsck -y, and -n on its
/// overlay) or refuses it as a mount does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Damage {
    Refuse,
    Salvage,
}

impl std::fmt::Debug for Recovered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recovered")
            .field("geometry", &self.geometry)
            .field("conflicts", &self.conflicts)
            .finish()
    }
}

/// MetaDB's configuration for fsck: no background jobs, small memtables (fsck writes
/// only its repairs), one pinned lane per domain as the engine mounts it.
fn config(geometry: &Geometry) -> MetaDbConfig {
    let mut c = MetaDbConfig {
        background: false,
        memtable_bytes: 1 << 20,
        pinned_lanes: geometry.domain_count as usize,
        ..MetaDbConfig::default()
    };
    c.block_cache_bytes = 8 << 20;
    c.level0_stop_tables = c.level0_stop_tables.min(4);
    c.compaction.level0_file_trigger = c.compaction.level0_file_trigger.min(2);
    c
}

/// Recovers the MetaDB of the image on `device`.
pub fn recover(
    device: Arc<Device>,
    pmr: Option<Arc<Pmr>>,
    damage: Damage,
) -> Result<Recovered, FsckError> {
    // This build writes WAL records older code would take for an empty log: make such
    // code refuse the image first (a no-op on images made since; memory under -n).
    let sb = add_features(
        &device,
        &read_superblock(&device)?,
        format::superblock::FEATURE_LANE_DURABLE,
    )?;
    check_pmr(&sb, pmr.as_deref())?;
    let geometry = sb.geometry;
    let pool_config = PoolConfig::for_geometry(&geometry, false);
    let pool = Arc::new(SpacePool::new(geometry, pool_config));
    let space = Arc::new(MetaDbSpace::new(pool.clone()));
    let slots = engine::image::read_checkpoints(&device, &geometry)?;
    let hooks = Arc::new(EngineHooks::new(
        device.clone(),
        engine::log::checkpoint_watermarks(&slots, geometry.domain_count)?,
    ));
    let mut conflicts = Vec::new();
    let mut lost = Vec::new();
    let db = MetaDb::open_then(
        MetaDbEnv {
            device: device.clone(),
            pmr,
            geometry,
            table_store: space.clone(),
            hooks: Some(hooks.clone()),
        },
        MetaDbConfig {
            wal_durable: engine::log::wal_durable(&slots)?,
            salvage_damage: damage == Damage::Salvage,
            ..config(&geometry)
        },
        &mut |db| {
            claim_domain_segments(db, &geometry, &pool, &mut conflicts)?;
            claim_lost_segments(db, &geometry, &pool, &mut lost)
        },
    )
    .map_err(|e| match e {
        e @ (metadb::MetaDbError::Damaged(_) | metadb::MetaDbError::Corruption { .. }) => {
            FsckError::MetaDb(e)
        }
        e => FsckError::Unrecoverable(e.to_string()),
    })?;
    if let Err(e) = space.claim_result() {
        return Err(FsckError::Unrecoverable(format!(
            "MetaDB's manifest names a segment twice: {e}"
        )));
    }
    let stats = db.stats();
    Ok(Recovered {
        db,
        pool,
        geometry,
        conflicts,
        lost,
        replay_dropped: stats.replay_dropped,
    })
}

/// Claims every segment an `s` key names for the key's domain; keys out of range are
/// left to the checks.
fn claim_domain_segments(
    db: &MetaDb,
    geometry: &Geometry,
    pool: &SpacePool,
    conflicts: &mut Vec<ClaimConflict>,
) -> Result<(), metadb::MetaDbError> {
    for item in db.prefix(&[SEGINFO_TAG], None)? {
        let (key, _) = item?;
        let Some((domain, segment)) = parse_seginfo_key(&key) else {
            continue;
        };
        if u32::from(domain.0) >= geometry.domain_count || segment.0 >= geometry.segment_count {
            continue;
        }
        if pool.claim(Owner::Domain(domain), &[segment]).is_err() {
            conflicts.push(ClaimConflict {
                segment,
                domain,
                holder: pool.owner(segment),
            });
        }
    }
    Ok(())
}

/// Claims every free segment a mapping points into for the mapping's domain (one pass
/// over the block index; undecodable mappings are left to the checks).
fn claim_lost_segments(
    db: &MetaDb,
    geometry: &Geometry,
    pool: &SpacePool,
    lost: &mut Vec<(DomainId, SegmentNo)>,
) -> Result<(), metadb::MetaDbError> {
    let mut used: Vec<(InodeNo, BlockAddr)> = Vec::new();
    let mut shadowed = std::collections::HashSet::new();
    for item in db.prefix(&[MAPPING_TAG], None)? {
        let (key, value) = item?;
        if let (Ok((ino, block)), Ok(m)) = (parse_mapping_key(&key), Mapping::decode(&value)) {
            used.push((ino, m.addr));
            shadowed.insert((ino, block));
        }
    }
    // An extent lies inside one segment; one whose blocks all have `x` records is a
    // stale claim (its segment may be free).
    for item in db.prefix(&[EXTENT_TAG], None)? {
        let (key, value) = item?;
        let Ok((ino, last)) = parse_extent_key(&key) else {
            continue;
        };
        let Ok(e) = Extent::decode(last, &value) else {
            continue;
        };
        if let Some(b) = (e.first.0..=last.0).find(|&b| !shadowed.contains(&(ino, FileBlock(b)))) {
            used.push((ino, e.mapping(FileBlock(b)).addr));
        }
    }
    for (ino, addr) in used {
        let Some(segment) = geometry.segment_of(addr) else {
            continue;
        };
        if pool.owner(segment).is_none() {
            let domain = DomainId((ino.0 % u64::from(geometry.domain_count)) as u16);
            if pool.claim(Owner::Domain(domain), &[segment]).is_ok() {
                lost.push((domain, segment));
            }
        }
    }
    Ok(())
}

/// (domain, segment) of an `s` key (FORMAT.md §6.2), if it has the right shape.
pub fn parse_seginfo_key(key: &[u8]) -> Option<(DomainId, SegmentNo)> {
    if key.len() != 7 || key[0] != SEGINFO_TAG {
        return None;
    }
    let domain = u16::from_be_bytes([key[1], key[2]]);
    let segment = u32::from_be_bytes([key[3], key[4], key[5], key[6]]);
    Some((DomainId(domain), SegmentNo(segment)))
}
