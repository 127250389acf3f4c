//! The augefs FUSE front end: every process on the machine reaches an augefs image
//! through a kernel mount (docs/DESIGN.md §11). The FUSE protocol is our own
//! ([`proto`]), written from the kernel's header; no libfuse, no FUSE crate.
//!
//! - [`proto`]: the kernel ABI, request decoding, reply encoding.
//! - [`channel`], [`session`]: /dev/fuse descriptors and the request threads;
//!   [`uring`]: FUSE over io_uring, the queue threads.
//! - [`mount`]: mount(2) as root, `fusermount3` otherwise; unmounting.
//! - [`adapter`], [`files`], [`lockops`]: requests to vfs calls.
//! - [`tables`], [`nodes`]: file handles, directory cursors, the kernel's lookup counts.
//! - [`notify`]: telling the kernel what it caches went stale.
//! - [`options`]: `-o` mount options.
//! - [`stats`]: per-opcode request counts and times (`-o stats`).
//! - [`serve`]: mounting, serving until the kernel unmounts, and unmounting the vfs.
//!
//! Invariants:
//! - No file-system logic lives here: requests are converted, handed to `vfs`, and its
//!   errors are returned as the errno `VfsError::errno` names.
//! - Permissions are checked by the kernel (`default_permissions` is always set) and
//!   again by the vfs with each request's caller.
// Library code says why it cannot fail (`expect`) or returns an error; tests may unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod adapter;
pub mod channel;
pub mod constants;
pub mod files;
pub mod lockops;
pub mod mount;
pub mod nodes;
pub mod notify;
pub mod options;
pub mod proto;
pub mod serve;
pub mod session;
pub mod stats;
pub mod tables;
pub mod uring;

mod convert;

pub use adapter::{AugeFuse, ReadTap};
pub use options::{MountOptions, OptionError};
pub use serve::{serve, Bridge, FuseError, KernelCaches, Ready, Unmounter};
