//! `libaugefs_preload.so`: the LD_PRELOAD interposer (docs/DESIGN.md §12.2). It defines
//! the libc functions programs call on files; each routes its call (`route`): paths
//! under the prefix (env AUGEFS_PREFIX, default /augefs), relative paths while the
//! working directory is inside it, and augefs descriptors go to augefs, everything else
//! to libc's own function unchanged (`real`).
//!
//! - [`state`]: attach on first use (env AUGEFS_IMAGE), owner or bridged, fork, exit.
//! - [`route`]: where a path or descriptor goes.
//! - [`fds`]: open family, close, dup family, fcntl, data calls, sendfile.
//! - [`names`]: calls on names, attributes, xattrs, chdir, getcwd, realpath.
//! - [`compat`]: the functions glibc builds on its own inner calls (utime, remove,
//!   lockf, statvfs, sync, pathconf, the mkstemp family), written over the others.
//! - [`aio`]: POSIX asynchronous IO on augefs descriptors, run at once.
//! - [`dirs`]: directory streams. [`stdio`]: fopen and friends via fopencookie.
//! - [`mmap`]: mappings of augefs files. [`exec`]: handing descriptors over at exec.
//! - [`spawn`]: posix_spawn, system, popen and vfork: children that inherit bridge
//!   descriptors.
//! - [`convert`]: augefs descriptors to bridge descriptors in a forked child.
//! - [`special`]: FIFOs, sockets and device nodes: opened, bound and connected on the
//!   bridge, where the kernel provides them.
//! - [`ident`]: the set*id family: augefs follows the program's identity.
//! - [`pump`]: standard streams on augefs files, through a pipe and a pump thread.
//! - [`uaccess`]: reading the program's path strings without trusting its pointers.
//! - [`wrap`]: the shape most exported calls share (route, guard, posix layer or
//!   libc's own), written once as the `interpose!` macro.
//!
//! Invariants:
//! - Augefs descriptor numbers are reserved by kernel placeholders (O_PATH), so they
//!   never collide with kernel descriptors; a stray kernel call on one fails (EBADF).
//! - A thread inside augefs (`guard`) reaches only the kernel: no reentrancy.
//! - A call this library does not support on an augefs path or descriptor fails with
//!   ENOTSUP and one log line per call name (`log::unsupported`); nothing aborts.
//! - A bad path pointer is EFAULT, never a crash (`uaccess`).
//!
//! The variadic functions (open, openat, fcntl, ioctl) are defined with their optional
//! argument as a fixed one: on x86-64 (System V) the register carrying it is the same.
// Library code says why it cannot fail (`expect`) or returns an error; tests may unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

/// The library's own allocations: mimalloc in a holder, the system's allocator in an
/// attached process (`alloc`).
#[global_allocator]
static ALLOCATOR: alloc::Chosen = alloc::Chosen::new();

mod aio;
mod alloc;
mod compat;
mod convert;
mod dirs;
mod exec;
mod fds;
mod guard;
mod ident;
mod log;
mod mmap;
mod names;
mod pump;
mod real;
mod route;
mod spawn;
mod special;
mod state;
mod stdio;
mod uaccess;
mod wrap;
mod xattr;
