//! The augefs VFS: POSIX files and directories over MetaDB (inodes, directory entries,
//! symlink targets) and the engine (file blocks), and the Rust API shaped like `std::fs`.
//!
//! - [`image`]: opening an image (device, PMR, mount; read-only; waiting for a
//!   finishing holder): the one front door of every front end.
//! - [`fs`]: the `FileSystem`, mount and unmount, inode numbers; it starts the
//!   background threads (flusher, commit, read-ahead).
//! - `shared`: the state the file system shares with those threads (`Core`) and the
//!   block and file size constants.
//! - `handle`: an inode in memory (its state, locks and pages).
//! - `attr`: stat, access, chmod/chown/utimensat, statfs.
//! - `namespace`: lookups, creates, mknod, hard links, readlink, readdir.
//! - `remove`: unlink and rmdir, orphans.
//! - `reap`: deleting inodes, and the reaper that frees unlinked files' blocks after
//!   their unlinks return.
//! - `rename`: renames (move, replace, exchange).
//! - `lanes`: which WAL lanes name operations went to, and the orderings between them.
//! - `caches`: the inode table and the name (dentry) cache.
//! - [`path`]: path resolution (symlinks, `.`/`..`, ELOOP) and path-level calls.
//! - [`file`]: `OpenOptions` and `File` (Read, Write, Seek, read_at, write_at, set_len,
//!   sync_all, sync_data).
//! - [`data`]: file data through the page cache: write, read, truncate, write-back
//!   with fsync and sync, the background flusher, blocks to and from the engine.
//! - [`pagecache`]: cached blocks per inode, the cache's budget and dirty limit.
//! - [`records`]: the VFS's records in MetaDB (docs/FORMAT.md §6.4).
//! - `store`: the one way the vfs reads MetaDB (records, scans, its sequence number).
//! - [`xattr`]: extended attributes (`user.`, `trusted.`).
//! - [`sparse`]: fallocate, SEEK_DATA and SEEK_HOLE.
//! - [`locks`]: POSIX record locks and flock within one instance.
//! - `setid`: set-user-ID and set-group-ID bits dropped by writes and truncates.
//! - [`commit`]: background commit (everything durable within an interval).
//! - [`inode_api`]: inode-level calls for front ends that hold inode numbers (FUSE).
//! - [`tmpfile`]: O_TMPFILE (nameless files, named later by `link`).
//!
//! - [`creds`]: who is asking, and the POSIX permission rules.
//!
//! Name operations take the caller's [`Creds`] and check permissions; operations on an
//! open file (read, write, truncate, fsync) were checked when it was opened. The
//! path-level API and `File` act as the identity `FileSystem::set_creds` gave (default:
//! the mounting process's). File data goes through a write-back page cache
//! ([`data`]); docs/SEMANTICS.md says what is durable when.
//!
//! Invariants:
//! - Every operation is atomic after a crash (one MetaDB batch; see `fs`).
//! - Inode numbers are never reused.

// Library code says why it cannot fail (`expect`) or returns an error; tests may unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod at;
mod attr;
mod caches;
pub mod changes;
pub mod commit;
pub mod creds;
pub mod data;
pub mod error;
pub mod file;
pub mod fs;
mod handle;
pub mod image;
pub mod inode_api;
mod inode_count;
mod lanes;
pub mod leases;
pub mod locks;
mod namespace;
pub mod pagecache;
pub mod path;
mod rangelock;
mod readahead;
mod reap;
pub mod records;
mod remove;
mod rename;
mod setid;
mod shared;
mod slab;
pub mod sparse;
mod store;
pub mod tmpfile;
pub mod xattr;

pub use attr::{AttrChanges, Metadata, StatFs, TimeChange};
pub use creds::Creds;
pub use data::view::ReadView;
pub use error::VfsError;
pub use file::{File, OpenOptions};
pub use fs::{FileSystem, MountFacts};
pub use inode_api::OpenInode;
pub use namespace::DirEntry;
pub use pagecache::{CacheConfig, CacheStats};
pub use records::Kind;
pub use rename::RenameMode;
pub use sparse::Fallocate;
pub use xattr::XattrMode;
