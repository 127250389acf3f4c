//! What hangs off inodes: orphan records, xattrs, file block mappings (live regular
//! files, counted by the inode's `blocks`), the fields of special files and the inode
//! counter (docs/FORMAT.md §6.4).
//!
//! Invariants:
//! - A record of a missing inode is deleted by a safe repair (nothing can reach it).
//! - A special file (FIFO, socket, device) has size 0 and no mappings (those are
//!   [`Kind::MappingForNonFile`]); only a device has an `rdev`.
//! - The counter only ever rises.

use super::XATTR_VALUE_BYTES_MAX;
use super::{show, K};
use crate::blocks::BlockState;
use crate::problem::{Class, Kind, Objects};
use crate::scan::Records;
use crate::Fsck;
use format::InodeNo;
use std::collections::HashMap;
use vfs::records::{self, NAME_MAX, ROOT};

impl Fsck<'_> {
    pub(super) fn check_orphans(&mut self, r: &mut Records) {
        let orphans: Vec<InodeNo> = r.orphans.iter().copied().collect();
        for ino in orphans {
            if r.bad_inodes.contains(&ino) {
                continue;
            }
            let problem = match r.inodes.get(&ino) {
                None => Some((
                    Kind::OrphanWithoutInode,
                    format!("an orphan record names inode {ino}, which does not exist"),
                )),
                Some(i) if i.nlink > 0 => Some((
                    Kind::OrphanOfLinkedInode,
                    format!(
                        "an orphan record names inode {ino}, which has {} links",
                        i.nlink
                    ),
                )),
                Some(_) => None,
            };
            if let Some((kind, message)) = problem {
                if self.report(
                    kind,
                    Class::Safe,
                    Objects::ino(ino),
                    message,
                    Some("delete the orphan record"),
                ) {
                    r.orphans.remove(&ino);
                    self.delete(&records::orphan_key(ino));
                }
            }
        }
    }

    pub(super) fn check_xattrs(&mut self, r: &mut Records) {
        let xattrs = std::mem::take(&mut r.xattrs);
        for (ino, name, len) in &xattrs {
            let (ino, len) = (*ino, *len);
            if r.bad_inodes.contains(&ino) {
                continue;
            }
            let mut obj = Objects::ino(ino);
            obj.name = Some(show(name));
            let problem = if !r.inodes.contains_key(&ino) {
                Some((
                    Kind::StrayXattr,
                    Class::Safe,
                    format!(
                        "xattr {:?} belongs to inode {ino}, which does not exist",
                        show(name)
                    ),
                ))
            } else if ![&b"user."[..], b"trusted."]
                .iter()
                .any(|ns| name.len() > ns.len() && name.starts_with(ns))
                || name.len() > NAME_MAX
                || len > XATTR_VALUE_BYTES_MAX
            {
                Some((Kind::BadXattr, Class::Destructive, format!("xattr {:?} of inode {ino} ({len} bytes) has a name or size the VFS never writes", show(name))))
            } else {
                None
            };
            if let Some((kind, class, message)) = problem {
                if self.report(kind, class, obj, message, Some("delete the xattr")) {
                    self.delete(&records::xattr_key(ino, name));
                }
            }
        }
        r.xattrs = xattrs;
    }

    /// Kept mappings against their inodes: live and a regular file; then each file's
    /// `blocks` field against the mappings that stay.
    pub(super) fn check_file_mappings(&mut self, r: &mut Records, b: &mut BlockState) {
        for i in 0..r.mappings.len() {
            if !b.kept[i] {
                continue;
            }
            let m = r.mappings[i];
            if r.bad_inodes.contains(&m.ino) {
                continue;
            }
            let obj = Objects::block(m.ino, m.block.0, m.m.addr);
            let problem = match r.inodes.get(&m.ino) {
                None => Some((
                    Kind::MappingWithoutInode,
                    Class::Safe,
                    format!(
                        "block {} of inode {} is mapped, but the inode does not exist",
                        m.block.0, m.ino
                    ),
                )),
                Some(inode) if inode.kind != K::File => Some((
                    Kind::MappingForNonFile,
                    Class::Destructive,
                    format!(
                        "block {} of inode {} is mapped, but the inode is a {:?}",
                        m.block.0, m.ino, inode.kind
                    ),
                )),
                Some(_) => None,
            };
            if let Some((kind, class, message)) = problem {
                if self.report(kind, class, obj, message, Some("drop the mapping")) {
                    self.drop_mapping(r, b, i);
                }
            }
        }
        // Counts before and after fsck's own drops: a count that only a repair made
        // stale is rewritten without a report of its own.
        let mut mapped: HashMap<InodeNo, (u64, u64)> = HashMap::new();
        for (i, m) in r.mappings.iter().enumerate() {
            let e = mapped.entry(m.ino).or_insert((0, 0));
            e.0 += 1;
            e.1 += u64::from(b.kept[i]);
        }
        let inos: Vec<InodeNo> = r.inodes.keys().copied().collect();
        for ino in inos {
            let (found, want) = mapped.get(&ino).copied().unwrap_or((0, 0));
            let have = r.inodes[&ino].blocks;
            if have == want {
                continue;
            }
            if have == found
                || self.report(
                    Kind::WrongBlockCount,
                    Class::Safe,
                    Objects::ino(ino),
                    format!("inode {ino} counts {have} mapped blocks; {want} are mapped"),
                    Some("set the count"),
                )
            {
                if let Some(i) = r.inodes.get_mut(&ino) {
                    i.blocks = want;
                }
                self.put(&records::inode_key(ino), &r.inodes[&ino].encode());
            }
        }
    }

    /// Special files hold no data (size 0) and only devices carry a number; both
    /// repairs are safe: no reader sees a special file's size or a non-device's rdev.
    pub(super) fn check_special_files(&mut self, r: &mut Records) {
        let inos: Vec<InodeNo> = r.inodes.keys().copied().collect();
        for ino in inos {
            let i = r.inodes[&ino];
            let mut fixed = i;
            if i.kind.is_special()
                && i.size != 0
                && self.report(
                    Kind::SpecialFileWithSize,
                    Class::Safe,
                    Objects::ino(ino),
                    format!("inode {ino} is a {:?} of size {}", i.kind, i.size),
                    Some("set the size to 0"),
                )
            {
                fixed.size = 0;
            }
            if !i.kind.is_device()
                && i.rdev != 0
                && self.report(
                    Kind::DeviceNumberOnNonDevice,
                    Class::Safe,
                    Objects::ino(ino),
                    format!(
                        "inode {ino} is a {:?} with device number {:#x}",
                        i.kind, i.rdev
                    ),
                    Some("clear the device number"),
                )
            {
                fixed.rdev = 0;
            }
            if fixed != i {
                r.inodes.insert(ino, fixed);
                self.put(&records::inode_key(ino), &fixed.encode());
            }
        }
    }

    pub(super) fn check_counter(&mut self, r: &mut Records) {
        let above = r
            .inodes
            .keys()
            .chain(r.bad_inodes.iter())
            .chain(r.orphans.iter())
            .map(|i| i.0.saturating_add(1))
            .max()
            .unwrap_or(ROOT.0 + 1);
        let counter = r.counter.unwrap_or(ROOT.0 + 1);
        if counter < above
            && self.report(
                Kind::InodeCounterLow,
                Class::Safe,
                Objects::default(),
                format!(
                    "the inode counter is {counter}, but inode {} exists (numbers would be reused)",
                    above - 1
                ),
                Some("raise the counter"),
            )
        {
            r.counter = Some(above);
            self.put(records::COUNTER_KEY, &above.to_le_bytes());
        }
    }
}
