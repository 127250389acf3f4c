//! The augefs FUSE front end: every process on the machine reaches an augefs image
//! through a kernel mount (docs/DESIGN.md §4d).
//!
//! - [`adapter`]: the [`fuser::Filesystem`] implementation, one vfs call per request.
//! - [`tables`]: the open-file and open-directory tables behind FUSE file handles.
//! - [`options`]: `-o` mount options.
//! - [`serve`]: mounting, serving until the kernel unmounts, and unmounting the vfs.
//!
//! Invariants:
//! - No file-system logic lives here: requests are converted, handed to `vfs`, and its
//!   errors are returned as the errno `VfsError::errno` names.
//! - Permissions are checked by the kernel (`default_permissions` is always set): the
//!   vfs does not check them yet (docs/SEMANTICS.md §4).

pub mod adapter;
pub mod options;
pub mod serve;
pub mod tables;

mod convert;

pub use adapter::AugeFuse;
pub use options::{MountOptions, OptionError};
pub use serve::{serve, Bridge, FuseError, Unmounter};
