//! One pass over every MetaDB record, decoded leniently into an in-memory picture of the
//! image that the checks work on. Records that cannot be decoded are problems, never
//! panics.
//!
//! Invariants:
//! - Every key is visited once, in key order; each lands in exactly one of the maps
//!   below or becomes a [`Kind::BadRecord`] / [`Kind::UnknownRecord`] problem.
//! - Memory: about 100 bytes per mapped block (mapping, reverse entry, verdicts) and a
//!   few hundred per inode; fsck holds the whole index (docs/DESIGN.md §13.3 gives the limit),
//!   extents expanded to one mapping per block.

use crate::problem::{Class, Kind, Objects};
use crate::Fsck;
use engine::log::keys::{
    self, DomainRecord, Extent, FileBlock, Mapping, Reverse, ReverseExtent, DOMAIN_TAG, EXTENT_TAG,
    MAPPING_TAG, REVERSE_EXTENT_TAG, REVERSE_TAG, SEGINFO_TAG,
};
use engine::space::seginfo::{ENTRY_BYTES, E_BITMAP, E_KIND, E_MODIFIED, E_SEGMENT, E_VALID_COUNT};
use format::{DomainId, InodeNo, SegmentNo};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use vfs::records::{
    Dentry, Inode, COUNTER_KEY, DENTRY_TAG, INODE_TAG, ORPHAN_TAG, SYMLINK_TAG, XATTR_TAG,
};

/// One segment information entry, decoded without the engine's strictness.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegEntry {
    /// False when the value could not be decoded: its bitmap is unknown (empty here).
    pub decoded: bool,
    pub kind: u8,
    pub count: u16,
    pub modified_ns: u64,
    pub bitmap: [u64; 8],
}

impl SegEntry {
    pub fn is_valid(&self, block: u32) -> bool {
        self.bitmap[block as usize / 64] & (1 << (block % 64)) != 0
    }

    pub fn popcount(&self) -> u32 {
        self.bitmap.iter().map(|w| w.count_ones()).sum()
    }

    pub fn encode(&self, segment: SegmentNo) -> [u8; ENTRY_BYTES] {
        let mut e = [0u8; ENTRY_BYTES];
        E_SEGMENT.put_u32(&mut e, segment.0);
        E_KIND.put_u8(&mut e, self.kind);
        E_VALID_COUNT.put_u16(&mut e, self.count);
        E_MODIFIED.put_u64(&mut e, self.modified_ns);
        for (w, word) in self.bitmap.iter().enumerate() {
            let at = E_BITMAP.offset + w * 8;
            e[at..at + 8].copy_from_slice(&word.to_le_bytes());
        }
        e
    }
}

/// Decodes one `s` value; `Err` says why it cannot be used.
fn decode_seginfo(segment: SegmentNo, v: &[u8]) -> Result<SegEntry, String> {
    if v.len() != ENTRY_BYTES {
        return Err(format!("{} bytes, expected {ENTRY_BYTES}", v.len()));
    }
    let kind = E_KIND.get_u8(v);
    if kind != 1 && kind != 2 {
        return Err(format!("kind {kind}, expected 1 (data) or 2 (node)"));
    }
    if E_SEGMENT.get_u32(v) != segment.0 {
        return Err(format!(
            "entry names segment {}, its key segment {segment}",
            E_SEGMENT.get_u32(v)
        ));
    }
    let mut bitmap = [0u64; 8];
    for (w, word) in bitmap.iter_mut().enumerate() {
        let at = E_BITMAP.offset + w * 8;
        *word = u64::from_le_bytes(v[at..at + 8].try_into().expect("8 bytes"));
    }
    Ok(SegEntry {
        decoded: true,
        kind,
        count: E_VALID_COUNT.get_u16(v),
        modified_ns: E_MODIFIED.get_u64(v),
        bitmap,
    })
}

/// A file block's mapping: its `x` record, or the extent covering it when it has none.
#[derive(Debug, Clone, Copy)]
pub struct MapRec {
    pub ino: InodeNo,
    pub block: FileBlock,
    pub m: Mapping,
    /// The last block of the extent the mapping comes from (`None`: an `x` record).
    pub extent: Option<FileBlock>,
}

/// A directory entry (`m` record) that decoded.
#[derive(Debug, Clone)]
pub struct DentryRec {
    pub parent: InodeNo,
    pub name: Vec<u8>,
    pub d: Dentry,
}

/// Every record of the image, by kind.
#[derive(Debug, Default)]
pub struct Records {
    pub seginfo: BTreeMap<(DomainId, SegmentNo), SegEntry>,
    pub domains: BTreeMap<DomainId, DomainRecord>,
    /// Every mapped block (shadowed extent claims are not mappings).
    pub mappings: Vec<MapRec>,
    /// Extents, by (inode, last block).
    pub extents: BTreeMap<(InodeNo, FileBlock), Extent>,
    pub reverse: HashMap<(SegmentNo, u16), Reverse>,
    /// Reverse extents per segment: (first device block in the segment, entry).
    pub reverse_extents: HashMap<SegmentNo, Vec<(u16, ReverseExtent)>>,
    pub inodes: BTreeMap<InodeNo, Inode>,
    /// Inodes whose record exists but cannot be decoded (left alone by other checks).
    pub bad_inodes: BTreeSet<InodeNo>,
    pub dentries: Vec<DentryRec>,
    pub symlinks: BTreeMap<InodeNo, Vec<u8>>,
    /// (inode, name, value length).
    pub xattrs: Vec<(InodeNo, Vec<u8>, usize)>,
    pub orphans: BTreeSet<InodeNo>,
    pub counter: Option<u64>,
}

fn ino_at(key: &[u8]) -> Option<InodeNo> {
    key.get(1..9)
        .map(|b| InodeNo(u64::from_be_bytes(b.try_into().expect("8 bytes"))))
}

impl Records {
    /// Whether the reverse map names (`ino`, `block`) for device block `at` (an `r`
    /// entry, or a `q` entry covering it).
    pub fn reverse_names(&self, at: (SegmentNo, u16), ino: InodeNo, block: FileBlock) -> bool {
        let want = Reverse { ino, block };
        self.reverse.get(&at) == Some(&want)
            || self.reverse_extents.get(&at.0).is_some_and(|qs| {
                qs.iter()
                    .any(|(start, q)| q.owner_of(*start, at.1) == Some(want))
            })
    }
}

impl Fsck<'_> {
    /// Reads every record. Undecodable records are reported (repair: delete them).
    pub(crate) fn scan(&mut self) -> Result<Records, crate::FsckError> {
        let mut r = Records::default();
        self.progress.step("scanning MetaDB records", 0);
        let db = self.db;
        for (n, item) in db.range(&[], None, None)?.enumerate() {
            let (key, value) = item?;
            self.stats.records += 1;
            if n % 4096 == 4095 {
                self.progress.advance(4096);
            }
            if let Err(why) = self.scan_one(&mut r, &key, &value) {
                if self.report(
                    Kind::BadRecord,
                    Class::Destructive,
                    Objects::key(&key),
                    format!("MetaDB record cannot be decoded: {why}"),
                    Some("delete the record"),
                ) {
                    self.delete(&key);
                    // A deleted inode record is a missing inode for the checks that follow.
                    if let Some(ino) = ino_at(&key).filter(|_| key[0] == INODE_TAG) {
                        r.bad_inodes.remove(&ino);
                    }
                }
            }
        }
        self.extent_mappings(&mut r);
        Ok(r)
    }

    /// Adds the blocks extents map (those without an `x` record) to `r.mappings`; an
    /// extent overlapping an earlier one of its file is a bad record.
    fn extent_mappings(&mut self, r: &mut Records) {
        let singles: std::collections::HashSet<(InodeNo, FileBlock)> =
            r.mappings.iter().map(|m| (m.ino, m.block)).collect();
        let mut previous: Option<(InodeNo, FileBlock)> = None;
        let extents: Vec<((InodeNo, FileBlock), Extent)> =
            r.extents.iter().map(|(k, e)| (*k, e.clone())).collect();
        for ((ino, last), e) in extents {
            if let Some((p_ino, p_last)) = previous.filter(|(p, _)| *p == ino) {
                if e.first <= p_last {
                    let key = keys::extent_key(ino, last);
                    if self.report(
                        Kind::BadRecord,
                        Class::Destructive,
                        Objects::key(&key),
                        format!(
                            "extent of blocks {}..={} of inode {ino} overlaps the one ending at block {} of inode {p_ino}",
                            e.first.0, last.0, p_last.0
                        ),
                        Some("delete the record"),
                    ) {
                        self.delete(&key);
                    }
                    r.extents.remove(&(ino, last));
                    continue;
                }
            }
            previous = Some((ino, last));
            for b in e.first.0..=last.0 {
                let block = FileBlock(b);
                if !singles.contains(&(ino, block)) {
                    r.mappings.push(MapRec {
                        ino,
                        block,
                        m: e.mapping(block),
                        extent: Some(last),
                    });
                }
            }
        }
    }

    fn scan_one(&mut self, r: &mut Records, key: &[u8], value: &[u8]) -> Result<(), String> {
        let tag = key.first().copied().unwrap_or(0);
        match tag {
            MAPPING_TAG => {
                let (ino, block) = keys::parse_mapping_key(key).map_err(|e| e.to_string())?;
                let m = Mapping::decode(value).map_err(|e| e.to_string())?;
                r.mappings.push(MapRec {
                    ino,
                    block,
                    m,
                    extent: None,
                });
            }
            EXTENT_TAG => {
                let (ino, last) = keys::parse_extent_key(key).map_err(|e| e.to_string())?;
                let e = Extent::decode(last, value).map_err(|e| e.to_string())?;
                r.extents.insert((ino, last), e);
            }
            REVERSE_EXTENT_TAG => {
                let (segment, start) =
                    keys::parse_reverse_extent_key(key).map_err(|e| e.to_string())?;
                let q = ReverseExtent::decode(value).map_err(|e| e.to_string())?;
                r.reverse_extents
                    .entry(segment)
                    .or_default()
                    .push((start, q));
            }
            REVERSE_TAG => {
                let at = keys::parse_reverse_key(key).map_err(|e| e.to_string())?;
                r.reverse
                    .insert(at, Reverse::decode(value).map_err(|e| e.to_string())?);
            }
            SEGINFO_TAG => {
                let (domain, segment) =
                    crate::open::parse_seginfo_key(key).ok_or("segment information key length")?;
                let entry = decode_seginfo(segment, value).unwrap_or_else(|why| {
                    self.report(
                        Kind::SeginfoUndecodable,
                        Class::Safe,
                        Objects::segment(domain, segment),
                        format!("segment information of segment {segment} (domain {domain}) cannot be decoded: {why}"),
                        Some("rebuild it from the block index"),
                    );
                    SegEntry {
                        decoded: false,
                        kind: 1,
                        count: 0,
                        modified_ns: 0,
                        bitmap: [0; 8],
                    }
                });
                r.seginfo.insert((domain, segment), entry);
            }
            DOMAIN_TAG => {
                if key.len() != 3 {
                    return Err("domain record key length".into());
                }
                let d = DomainId(u16::from_be_bytes([key[1], key[2]]));
                r.domains
                    .insert(d, DomainRecord::decode(value).map_err(|e| e.to_string())?);
            }
            INODE_TAG => {
                let ino = ino_at(key)
                    .filter(|_| key.len() == 9)
                    .ok_or("inode key length")?;
                match Inode::decode(ino, value) {
                    Ok(i) => {
                        r.inodes.insert(ino, i);
                    }
                    Err(e) => {
                        r.bad_inodes.insert(ino);
                        return Err(e.to_string());
                    }
                }
            }
            DENTRY_TAG => {
                let parent = ino_at(key).ok_or("directory entry key length")?;
                let d = Dentry::decode(value).map_err(|e| e.to_string())?;
                r.dentries.push(DentryRec {
                    parent,
                    name: key[9..].to_vec(),
                    d,
                });
            }
            SYMLINK_TAG => {
                let ino = ino_at(key)
                    .filter(|_| key.len() == 9)
                    .ok_or("symlink key length")?;
                r.symlinks.insert(ino, value.to_vec());
            }
            XATTR_TAG => {
                let ino = ino_at(key).ok_or("xattr key length")?;
                r.xattrs.push((ino, key[9..].to_vec(), value.len()));
            }
            ORPHAN_TAG => {
                let ino = ino_at(key)
                    .filter(|_| key.len() == 9)
                    .ok_or("orphan key length")?;
                r.orphans.insert(ino);
            }
            _ if key == COUNTER_KEY => {
                let v: [u8; 8] = value.try_into().map_err(|_| "inode counter length")?;
                r.counter = Some(u64::from_le_bytes(v));
            }
            _ => {
                self.report(
                    Kind::UnknownRecord,
                    Class::None,
                    Objects::key(key),
                    "MetaDB record with an unknown key (left alone)".into(),
                    None,
                );
            }
        }
        Ok(())
    }
}
