//! The instance: many processes using one mounted augefs without FUSE
//! (docs/DESIGN.md §12.5; augefs.txt §IV, kucofs.txt).
//!
//! The process that holds the image (`augefs mount`) serves a Unix socket beside its
//! mount ([`socket_path`]). A process attaches by connecting: the interposer of
//! `augefs run --mount DIR`, or any program with the preload library and
//! `AUGEFS_MOUNT=DIR`. Its posix layer then runs over a [`client::Remote`], which sends
//! each file-system call as one request ([`proto`]) and waits for the reply; the
//! instance ([`server`]) runs it against the vfs as the caller the kernel says it is.
//!
//! Invariants:
//! - The instance trusts nothing a client says about itself: its identity comes from
//!   the kernel (SO_PEERCRED, at connect), every request is decoded with bounds and
//!   answered with an errno if malformed, and a data or lock request names a handle
//!   the client's own session opened, in a mode that allows it.
//! - A client that dies (at any instruction) loses its connections; when its session's
//!   last connection goes, its locks are released and its files closed. Its
//!   acknowledged fsyncs were made durable before their replies.
//! - Changes a client makes are told to the kernel's FUSE caches of the same mount
//!   (`Notify`) before the client's call returns, so both views agree.

// Library code says why it cannot fail (`expect`) or returns an error; tests may unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod client;
pub mod datatable;
pub mod filecache;
mod forklock;
pub mod mailbox;
pub mod namecache;
pub mod peer;
pub mod pkey;
pub mod postring;
mod posts;
pub mod proto;
pub mod server;
mod session;
mod shm;
pub mod spin;
pub mod table;
pub mod wire;
pub mod workers;

use std::path::{Path, PathBuf};

/// Most data bytes one read or write request carries (a larger call is split).
pub const IO_BYTES_MAX: usize = 4 << 20;
/// Longest frame: a write's data and its fields.
pub const FRAME_BYTES_MAX: usize = IO_BYTES_MAX + 4096;
/// How long a thread that expects a message soon polls for it before sleeping
/// ([`spin`]): long enough for the reply to an fsync (a device write and flush, 150-300
/// us on a virtual machine's disk), so that a client of fsync-heavy work does not pay
/// the wake-up of an idle CPU (35 us each way there) on every sync, nor stop spinning
/// for its next requests because one spin ran out (docs/BENCHMARKS.md §7.7).
pub const SPIN: std::time::Duration = std::time::Duration::from_micros(500);
/// [`SPIN`], or AUGEFS_SPIN_US microseconds (0: never spin; for comparisons and
/// diagnosis), read once per process.
pub fn spin() -> std::time::Duration {
    static S: std::sync::OnceLock<std::time::Duration> = std::sync::OnceLock::new();
    *S.get_or_init(|| {
        std::env::var("AUGEFS_SPIN_US")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(SPIN, std::time::Duration::from_micros)
    })
}
/// Lowest number of the descriptors a client holds (its sockets and the shared memory it
/// was sent): programs, shells above all, `dup2` onto small numbers they believe free
/// (`exec 3>file`), which must never be one of ours, or a request would be written into
/// the program's file and a drop would close it.
pub const CLIENT_FD_MIN: i32 = 100;

/// `fd` renumbered to at least [`CLIENT_FD_MIN`] (close-on-exec), or as it is if the
/// process has no such number free.
pub(crate) fn high_fd(fd: std::os::fd::OwnedFd) -> std::os::fd::OwnedFd {
    use std::os::fd::{AsRawFd, FromRawFd};
    if fd.as_raw_fd() >= CLIENT_FD_MIN {
        return fd;
    }
    // SAFETY: duplicates a descriptor we own; the new one is owned below.
    let n = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, CLIENT_FD_MIN) };
    if n < 0 {
        return fd;
    }
    drop(fd);
    // SAFETY: `n` is a new descriptor nothing else owns.
    unsafe { std::os::fd::OwnedFd::from_raw_fd(n) }
}

/// Connections the instance serves at once (one thread each); more are refused and
/// those clients use the kernel's mount instead.
pub const CONNECTIONS_MAX: usize = 1024;

/// The directory of instance sockets: $AUGEFS_RUN_DIR, else /run/augefs for root and
/// $XDG_RUNTIME_DIR/augefs for other users (never a directory another user could
/// have made: a client must not talk to an impostor).
pub fn run_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("AUGEFS_RUN_DIR") {
        return PathBuf::from(d);
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return PathBuf::from("/run/augefs");
    }
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) => PathBuf::from(d).join("augefs"),
        // SAFETY: as above.
        None => PathBuf::from(format!("/tmp/augefs-{}", unsafe { libc::geteuid() })),
    }
}

/// The socket of the instance serving mount `dir` (an absolute path), named after it
/// in [`run_dir`]: the mount itself covers `dir`, so the socket cannot live there.
pub fn socket_path(dir: &Path) -> PathBuf {
    let name: String = dir
        .to_string_lossy()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    // sun_path holds 108 bytes: a long mount path is named by its hash.
    let name = if name.len() > 64 {
        let h = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        format!("{}-{h:016x}", &name[name.len() - 40..])
    } else {
        name
    };
    run_dir().join(format!("{name}.sock"))
}

/// A change a client made, to be told to the kernel's caches of the mount.
#[derive(Debug, Clone, Copy)]
pub enum Change<'a> {
    /// The name `name` in directory `parent` appeared, went or changed.
    Entry { parent: u64, name: &'a [u8] },
    /// The inode's attributes changed.
    Attrs { ino: u64 },
    /// The inode's data (and attributes) changed.
    Data { ino: u64 },
}

/// Tells the kernel's caches of a change (the FUSE mount's notifications).
#[derive(Clone)]
pub struct Notify(pub std::sync::Arc<dyn Fn(Change<'_>) + Send + Sync>);

impl std::fmt::Debug for Notify {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Notify")
    }
}
