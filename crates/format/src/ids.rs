//! Newtypes for identifiers and addresses: no bare `u64` crosses a module boundary.

use serde::Serialize;
use std::fmt;

macro_rules! id_newtype {
    ($(#[$doc:meta])* $name:ident, $inner:ty) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize)]
        #[serde(transparent)]
        pub struct $name(pub $inner);

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({})", stringify!($name), self.0)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}", self.0)
            }
        }
    };
}

id_newtype!(
    /// Address of a 4 KiB block, counted from the start of the device.
    BlockAddr, u64
);
id_newtype!(
    /// Index of a 2 MiB segment inside the segment area.
    SegmentNo, u32
);
id_newtype!(
    /// A domain: a partition of files (by inode number) with its own space management.
    DomainId, u16
);
id_newtype!(
    /// An inode number. 0 is never a valid inode.
    InodeNo, u64
);
id_newtype!(
    /// A monotonically increasing sequence number (checkpoints, superblock, MetaDB).
    SeqNo, u64
);

impl BlockAddr {
    pub fn byte_offset(self) -> u64 {
        self.0 * crate::constants::BLOCK_SIZE_BYTES
    }
}
