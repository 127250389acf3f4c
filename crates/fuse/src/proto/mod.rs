//! The FUSE protocol, written from the kernel's include/uapi/linux/fuse.h and
//! Documentation/filesystems/fuse*.rst: the ABI structs ([`abi`]), request decoding
//! ([`request`]) and reply encoding ([`reply`]). Transport-free: the session
//! (`crate::session`) moves the bytes over /dev/fuse; a second transport (FUSE over
//! io_uring) would reuse these unchanged (docs/DESIGN.md §11.1).

pub mod abi;
pub mod reply;
pub mod request;
