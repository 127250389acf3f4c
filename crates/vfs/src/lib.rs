//! The augefs VFS: POSIX files and directories over MetaDB (inodes, directory entries,
//! symlink targets) and the engine (file blocks), and the Rust API shaped like `std::fs`.
//!
//! - [`fs`]: mount, the inode table, and the operations on inodes and names.
//! - [`path`]: path resolution (symlinks, `.`/`..`, ELOOP) and path-level calls.
//! - [`file`]: `OpenOptions` and `File` (Read, Write, Seek, read_at, write_at, set_len,
//!   sync_all, sync_data).
//! - [`records`]: the VFS's records in MetaDB (docs/FORMAT.md §6.4).
//! - [`xattr`]: extended attributes (`user.`, `trusted.`).
//! - [`inode_api`]: inode-level calls for front ends that hold inode numbers (FUSE).
//!
//! This first slice writes file data through to the engine (no page cache yet) and
//! checks no permissions (every caller is root); docs/SEMANTICS.md says what is durable
//! when.
//!
//! Invariants:
//! - Every operation is atomic after a crash (one MetaDB batch; see `fs`).
//! - Inode numbers are never reused.

pub mod error;
pub mod file;
pub mod fs;
pub mod inode_api;
pub mod path;
pub mod records;
pub mod xattr;

pub use error::VfsError;
pub use file::{File, OpenOptions};
pub use fs::{DirEntry, FileSystem, Metadata, RenameMode, StatFs};
pub use inode_api::{OpenInode, SetAttr, SetTime};
pub use records::Kind;
pub use xattr::XattrMode;
