//! What fsck reports: each problem has a kind (a stable snake_case name for scripts),
//! the objects involved, a sentence for people, and whether it was fixed.
//!
//! Invariants:
//! - A kind's name never changes meaning (scripts match on it); retired kinds stay
//!   retired.
//! - `fixed` is true only once the repair is in the batch fsck writes; if writing the
//!   repairs fails, fsck fails with an operational error instead of reporting fixes.

use format::{BlockAddr, DomainId, InodeNo, SegmentNo};
use serde::Serialize;

/// Every kind of problem fsck knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    // MetaDB records that cannot be decoded or have no known tag.
    BadRecord,
    UnknownRecord,
    // Segment information and ownership.
    SeginfoOutOfRange,
    SeginfoUndecodable,
    SeginfoMissing,
    SeginfoCountMismatch,
    SegmentOwnerConflict,
    ValidBlockUnclaimed,
    // Block index.
    MappingOutsideDomain,
    MappingToInvalidBlock,
    BlockOwnedTwice,
    ReverseMismatch,
    DataChecksumMismatch,
    MappingWithoutInode,
    MappingForNonFile,
    // Namespace.
    RootMissing,
    RootNotDirectory,
    BadDentryName,
    DentryInNonDirectory,
    DanglingDentry,
    DentryNamesRoot,
    DentryKindMismatch,
    DirectoryMultipleLinks,
    WrongParent,
    UnreachableInode,
    UnlinkedInode,
    WrongLinkCount,
    WrongBlockCount,
    SymlinkWithoutTarget,
    StraySymlinkTarget,
    StrayXattr,
    BadXattr,
    OrphanWithoutInode,
    OrphanOfLinkedInode,
    InodeCounterLow,
    /// A FIFO, socket or device node with a size (they hold no data).
    SpecialFileWithSize,
    /// A device number on an inode that is not a device.
    DeviceNumberOnNonDevice,
    // Checksums of metadata structures (docs/FORMAT.md "what proves damage").
    SuperblockCopyInvalid,
    SummaryInvalid,
    /// Damage to MetaDB's WAL or manifest that recovery refuses.
    MetadbDamaged,
    /// A MetaDB table block (or other structure) that fails its checksum when read.
    MetadbUnreadable,
    /// A file whose acknowledged changes were in the damaged log and are lost.
    AcknowledgedChangesLost,
}

/// How much a repair may change. `-p` (preen) applies [`Class::Safe`] repairs only: they
/// lose nothing a reader could see. `-y` applies both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Class {
    /// Recomputes what other records determine (counts, link counts, reverse entries,
    /// parent fields) or removes records nothing can reach.
    Safe,
    /// Removes or moves something a user could have seen (a dangling name, an unreadable
    /// mapping, a disconnected inode linked into /lost+found).
    Destructive,
    /// Never repaired: fsck cannot tell which side is right.
    None,
}

/// The objects a problem involves (absent fields do not apply).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Objects {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ino: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub block: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub addr: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub segment: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub domain: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A path of the inode (or of the parent directory), when it is reachable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Every path of the inode, when it has more than one name (hard links).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
    /// The MetaDB key involved, in hex, for records fsck cannot otherwise name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

impl Objects {
    pub fn ino(ino: InodeNo) -> Objects {
        Objects {
            ino: Some(ino.0),
            ..Objects::default()
        }
    }

    pub fn block(ino: InodeNo, block: u64, addr: BlockAddr) -> Objects {
        Objects {
            ino: Some(ino.0),
            block: Some(block),
            addr: Some(addr.0),
            ..Objects::default()
        }
    }

    pub fn segment(domain: DomainId, segment: SegmentNo) -> Objects {
        Objects {
            segment: Some(segment.0),
            domain: Some(domain.0),
            ..Objects::default()
        }
    }

    pub fn entry(parent: InodeNo, name: &[u8]) -> Objects {
        Objects {
            parent: Some(parent.0),
            name: Some(String::from_utf8_lossy(name).into_owned()),
            ..Objects::default()
        }
    }

    pub fn key(key: &[u8]) -> Objects {
        Objects {
            key: Some(key.iter().map(|b| format!("{b:02x}")).collect()),
            ..Objects::default()
        }
    }

    pub fn with_path(mut self, path: Option<&String>) -> Objects {
        self.path = path.cloned();
        self
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    pub kind: Kind,
    pub objects: Objects,
    pub message: String,
    /// What the repair does (or would do).
    pub repair: Option<String>,
    pub fixed: bool,
}
