//! Programs an owner starts without becoming them: posix_spawn, posix_spawnp, system,
//! popen and vfork (docs/DESIGN.md §12.3, "Spawn").
//!
//! glibc's posix_spawn starts its child with `clone(CLONE_VM | CLONE_VFORK)` and execs
//! it with internal calls no interposer sees, and system and popen go through that
//! internal posix_spawn: no fork handler runs and the exec hand-over never happens. So
//! the owner prepares as it does before a fork (`convert::to_bridge_all`): pumped
//! output is drained and every augefs descriptor becomes a bridge descriptor at the
//! same number, so the child inherits kernel descriptors (file actions such as
//! `adddup2` then work on them) sharing the kernel's open file description and its
//! offset with the owner. A working directory inside augefs is lent to the child as
//! the owner's kernel working directory (the bridge's path of it) for the spawn call
//! only, so the child starts there before its file actions run. An environment of the
//! caller's own gets the tree's variables back (`exec::env_keeping_augefs`).
//!
//! vfork is a fork here: a vforked child shares the owner's memory and would run the
//! interposer in it (closing descriptors in the owner's table, starting threads);
//! POSIX allows vfork to be fork, and the fork handlers then make the child bridged.
//!
//! Invariants:
//! - Only the owner prepares (a bridged process's descriptors are kernel ones already).
//! - The owner's kernel working directory is put back before the call returns.
#![expect(
    clippy::undocumented_unsafe_blocks,
    reason = "each exported function runs under the C contract of the libc function it \
              replaces: its pointers are what that contract says"
)]

use crate::guard;
use crate::real::real;
use crate::state::{self, CWD_IN};
use libc::{c_char, c_int, pid_t, posix_spawn_file_actions_t, posix_spawnattr_t};
use std::ffi::CString;
use std::sync::atomic::Ordering;

/// The owner's kernel working directory while it is lent to a child: put back on drop.
struct LentCwd {
    saved: Option<c_int>,
}

impl Drop for LentCwd {
    fn drop(&mut self) {
        if let Some(fd) = self.saved {
            let fchdir = real!(fchdir: fn(c_int) -> c_int);
            unsafe { fchdir(fd) };
            state::real_close(fd);
        }
    }
}

/// Prepares the owner for a child that will not run its fork handlers; a no-op in any
/// other process. Keep the result until the child exists.
fn prepare() -> LentCwd {
    let mut lent = LentCwd { saved: None };
    if state::is_child() || !state::is_owner_process() {
        return lent;
    }
    let Some(px) = state::owner() else {
        return lent;
    };
    crate::pump::drain();
    let _g = guard::enter();
    crate::convert::to_bridge_all(px);
    if !CWD_IN.load(Ordering::Relaxed) {
        return lent;
    }
    let (Ok(cwd), Some(bridge)) = (px.try_cwd(), state::bridge_dir()) else {
        return lent;
    };
    let mut path = bridge.to_vec();
    if cwd.path != "/" {
        path.extend_from_slice(cwd.path.as_bytes());
    }
    let Ok(path) = CString::new(path) else {
        return lent;
    };
    let open = real!(open: fn(*const c_char, c_int, libc::mode_t) -> c_int);
    let chdir = real!(chdir: fn(*const c_char) -> c_int);
    let saved = unsafe {
        open(
            c".".as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            0,
        )
    };
    if saved < 0 {
        return lent;
    }
    if unsafe { chdir(path.as_ptr()) } != 0 {
        state::real_close(saved);
        return lent;
    }
    lent.saved = Some(saved);
    lent
}

#[no_mangle]
pub unsafe extern "C" fn posix_spawn(
    pid: *mut pid_t,
    path: *const c_char,
    actions: *const posix_spawn_file_actions_t,
    attr: *const posix_spawnattr_t,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
) -> c_int {
    let real = real!(posix_spawn: fn(*mut pid_t, *const c_char, *const posix_spawn_file_actions_t, *const posix_spawnattr_t, *const *mut c_char, *const *mut c_char) -> c_int);
    let _lent = prepare();
    if unsafe { crate::exec::env_complete(envp.cast()) } {
        return unsafe { real(pid, path, actions, attr, argv, envp) };
    }
    let env = unsafe { crate::exec::env_keeping_augefs(envp.cast()) };
    let mut ptrs: Vec<*mut c_char> = env.iter().map(|c| c.as_ptr().cast_mut()).collect();
    ptrs.push(std::ptr::null_mut());
    unsafe { real(pid, path, actions, attr, argv, ptrs.as_ptr()) }
}

#[no_mangle]
pub unsafe extern "C" fn posix_spawnp(
    pid: *mut pid_t,
    file: *const c_char,
    actions: *const posix_spawn_file_actions_t,
    attr: *const posix_spawnattr_t,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
) -> c_int {
    let real = real!(posix_spawnp: fn(*mut pid_t, *const c_char, *const posix_spawn_file_actions_t, *const posix_spawnattr_t, *const *mut c_char, *const *mut c_char) -> c_int);
    let _lent = prepare();
    if unsafe { crate::exec::env_complete(envp.cast()) } {
        return unsafe { real(pid, file, actions, attr, argv, envp) };
    }
    let env = unsafe { crate::exec::env_keeping_augefs(envp.cast()) };
    let mut ptrs: Vec<*mut c_char> = env.iter().map(|c| c.as_ptr().cast_mut()).collect();
    ptrs.push(std::ptr::null_mut());
    unsafe { real(pid, file, actions, attr, argv, ptrs.as_ptr()) }
}

/// system: the owner's working directory stays lent for the command's whole run (it
/// waits for it), so the owner's own kernel calls with relative paths meanwhile (there
/// are none from the program: a working directory inside augefs routes them to augefs)
/// would start there.
#[no_mangle]
pub unsafe extern "C" fn system(command: *const c_char) -> c_int {
    let real = real!(system: fn(*const c_char) -> c_int);
    let _lent = if command.is_null() {
        None
    } else {
        Some(prepare())
    };
    unsafe { real(command) }
}

#[no_mangle]
pub unsafe extern "C" fn popen(command: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    let real = real!(popen: fn(*const c_char, *const c_char) -> *mut libc::FILE);
    let _lent = prepare();
    unsafe { real(command, mode) }
}

/// vfork as fork (see the module comment): the fork handlers run, the child is bridged.
#[no_mangle]
pub unsafe extern "C" fn vfork() -> pid_t {
    let fork = real!(fork: fn() -> pid_t);
    unsafe { fork() }
}
