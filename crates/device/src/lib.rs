//! The device layer: everything augefs writes to or reads from an SSD, a partition or an
//! image file passes through here (docs/DESIGN.md §4).
//!
//! A [`Device`] wraps one [`backend::Backend`]:
//! - [`uring::UringBackend`]: io_uring on an `O_DIRECT` file descriptor, many requests in
//!   flight per queue, a pool of rings shared by threads;
//! - [`sync::PreadBackend`]: `pread`/`pwrite`/`fdatasync`, chosen automatically (with a
//!   one-line notice) when io_uring cannot be set up;
//! - [`memory::MemoryBackend`]: a byte vector, for tests and the simulator;
//! - [`recording::RecordingBackend`]: records every write and flush and produces crash
//!   images; can fail a chosen write or flush with EIO.
//!
//! Work is submitted through a [`Queue`]: push requests (each owns its aligned buffer and
//! names its [`IoCause`]), submit, and pop completions in any order. The `Device`
//! counts every request by cause before handing it to the backend.
//!
//! Invariants:
//! - Offsets and lengths are multiples of the device's logical block size; buffers are
//!   4096-byte aligned ([`AlignedBuf`]). Violations are bugs and panic.
//! - A flush makes durable every write that *completed* before the flush was submitted.
//!   Writes in flight at the same time as a flush are not covered by it.
//! - A completed request returns its buffer to the caller; a request that failed
//!   returns it too, with the error.
// Library code says why it cannot fail (`expect`) or returns an error; tests may unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod backend;
pub mod buf;
pub mod cow;
pub mod device;
pub mod error;
pub mod file;
pub mod holder;
pub mod image;
pub mod memory;
pub mod recording;
pub mod request;
pub mod sync;
pub mod uring;

pub use backend::{Backend, BackendKind, BackendQueue, DeviceInfo};
pub use buf::{AlignedBuf, BufPool, BUF_ALIGN_BYTES};
pub use device::{Device, Queue};
pub use error::DeviceError;
pub use file::{open, BackendChoice, LockMode, OpenOptions};
pub use image::{create_image, unwritten_bytes, write_holes};

pub use platform::IoCause;
pub use request::{IoCompletion, IoOp, IoRequest};
