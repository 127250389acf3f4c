//! The FUSE front end's limits and timings, in one place (units last).

use std::time::Duration;

/// How long the kernel may cache attributes, names and the absence of names. Only this
/// process changes the image (the device is locked exclusively), and every change
/// passes through the kernel, which updates or drops its cache for it; a change that
/// does not (a set-id bit a write dropped; changes made through the vfs directly) is
/// told to the kernel by a notification ([`crate::notify::Notifier`]). An hour only
/// bounds the damage of a missed invalidation: nothing is refetched in between.
pub const TTL: Duration = Duration::from_secs(3600);
/// Most pages per request asked of the kernel even where its limit
/// (fs.fuse.max_pages_limit, 256 by default) is higher: 8 MiB writes, two buffers of
/// that per request thread.
pub const MAX_PAGES_CAP: u32 = 2048;
/// The page size requests are counted in.
pub const PAGE_BYTES: u32 = 4096;
/// Room in a request buffer beyond a WRITE's data (header, argument struct) and the
/// largest request that is not a WRITE (a SETXATTR: 64 KiB value and a 255-byte name).
pub const REQUEST_SLACK_BYTES: usize = 64 * 1024 + 4096;
/// Entries asked of the vfs per step of a readdir (one reply holds about a page).
pub const READDIR_BATCH: usize = 128;
/// Background requests the kernel may have in flight (readahead, writeback).
pub const MAX_BACKGROUND: u16 = 16;
/// SETLKW requests waiting at once (each waits on a thread of its own, not on a request
/// thread); beyond this a SETLKW that must wait fails with ENOLCK.
pub const LOCK_WAITERS_MAX: usize = 256;
/// INTERRUPTs remembered for requests not (yet) known to be waiting: the kernel may
/// send one before the SETLKW it interrupts has registered its wait.
pub const EARLY_INTERRUPTS_MAX: usize = 256;
/// Ring entries each FUSE-over-io_uring queue thread registers: while it serves one
/// request the kernel can hand it the next (one more per deferred reply, see
/// `crate::uring`).
pub const RING_ENTRIES_PER_THREAD: usize = 2;
/// Submission queue entries of a queue thread's io_uring: one per entry it may hold
/// (the registered ones and one per SETLKW that waits) and one for its mailbox.
pub const RING_DEPTH: u32 = 512;
const _: () = assert!(RING_ENTRIES_PER_THREAD + LOCK_WAITERS_MAX < RING_DEPTH as usize);
