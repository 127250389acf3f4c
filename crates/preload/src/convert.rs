//! Turning augefs descriptors into bridge descriptors (kernel descriptors on the FUSE
//! bridge) at the same numbers, when the owner forks: the parent converts its own
//! descriptors just before the fork, so parent and child share the kernel's open file
//! descriptions (one offset, as POSIX wants across fork). The owner is then a client of
//! its own bridge for those descriptors (slower, but coherent: the bridge caches
//! nothing); the bridge answers FLUSH with ENOSYS so no close waits on it.
//!
//! A converted descriptor reopens the path its description was opened by, with its
//! flags and its offset at that moment; descriptors that shared the description still
//! share the new one, but the offset is no longer shared with the other process
//! (docs/SEMANTICS.md §4). A file unlinked meanwhile cannot be reopened: its descriptor
//! stays a placeholder (EBADF), and the log says so.

use crate::log;
use crate::real::real;
use crate::state::{self, CWD_IN};
use posix::Posix;
use std::ffi::CString;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The bridge path of `rel` (a path from augefs's root), if this process has a bridge.
pub(crate) fn bridge_path(rel: &str) -> Option<CString> {
    let mut b = state::bridge_dir()?.to_vec();
    if rel != "/" {
        b.extend_from_slice(rel.as_bytes());
    }
    CString::new(b).ok()
}

/// Reopens description `d` on the bridge and puts it at each of `fds` (with their
/// close-on-exec flags). Returns whether it worked.
fn reopen(d: &posix::desc::Description, fds: &[(i32, bool)], offset: u64) -> bool {
    let Some(path) = bridge_path(d.path()) else {
        return false;
    };
    let mut flags = d.flags() & !(libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC);
    if d.kind() == vfs::Kind::Dir && flags & libc::O_PATH == 0 {
        flags = libc::O_RDONLY | libc::O_DIRECTORY;
    }
    let open = real!(open: fn(*const libc::c_char, libc::c_int, libc::mode_t) -> libc::c_int);
    // SAFETY: a NUL-terminated path.
    let new = unsafe { open(path.as_ptr(), flags | libc::O_CLOEXEC, 0) };
    if new < 0 {
        log::line(&format!(
            "cannot hand {} over to the bridge ({}; descriptors {:?} now fail with EBADF)",
            d.path(),
            std::io::Error::last_os_error(),
            fds.iter().map(|f| f.0).collect::<Vec<_>>()
        ));
        return false;
    }
    if d.kind() == vfs::Kind::File {
        let lseek = real!(lseek: fn(libc::c_int, libc::off_t, libc::c_int) -> libc::off_t);
        // SAFETY: our descriptor.
        unsafe { lseek(new, offset as i64, libc::SEEK_SET) };
    }
    let dup3 = real!(dup3: fn(libc::c_int, libc::c_int, libc::c_int) -> libc::c_int);
    for &(fd, cloexec) in fds {
        // SAFETY: replaces the placeholder at `fd`, which this process owns.
        unsafe { dup3(new, fd, if cloexec { libc::O_CLOEXEC } else { 0 }) };
    }
    state::real_close(new);
    true
}

/// Groups `which` (all descriptors if None) by description.
type Group = (Arc<posix::desc::Description>, Vec<(i32, bool)>);

fn groups(all: Vec<posix::desc::Entry>) -> Vec<Group> {
    let mut out: Vec<Group> = Vec::new();
    for (fd, d, cloexec) in all {
        match out.iter_mut().find(|(o, _)| Arc::ptr_eq(o, &d)) {
            Some((_, fds)) => fds.push((fd, cloexec)),
            None => out.push((d, vec![(fd, cloexec)])),
        }
    }
    out
}

/// Before a fork, in the owner: every augefs descriptor becomes a bridge descriptor and
/// leaves the table. Takes no lock another thread may hold for long (a busy table skips
/// the conversion, and the child's copies fail with EBADF).
pub fn to_bridge_all(px: &Posix) {
    let Some(all) = px.try_descriptors() else {
        log::line("forked while the descriptor table was busy: inherited augefs descriptors fail with EBADF");
        return;
    };
    for (d, fds) in groups(all) {
        let offset = d.try_offset().unwrap_or(0);
        if reopen(&d, &fds, offset) {
            for (fd, _) in fds {
                let _ = px.detach_fd(fd);
            }
        }
    }
}

/// In a forked child: its working directory inside augefs becomes the bridge's.
pub fn cwd_to_bridge(px: &Posix) {
    if CWD_IN.load(Ordering::Relaxed) {
        let Ok(cwd) = px.try_cwd() else { return };
        if let Some(p) = bridge_path(&cwd.path) {
            let chdir = real!(chdir: fn(*const libc::c_char) -> libc::c_int);
            // SAFETY: a NUL-terminated path.
            unsafe { chdir(p.as_ptr()) };
        }
    }
}
