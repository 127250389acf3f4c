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

/// Opens `path` with `flags` as a kernel descriptor above the program's numbers (a
/// shell that saved and closed descriptor 1 before `>&N` would otherwise get 1 itself,
/// which the caller then overwrites), at `offset` for a regular file. None if it cannot
/// be opened, or, given `ino`, if the path names another inode now.
fn open_kernel(
    path: &std::ffi::CStr,
    flags: i32,
    file: bool,
    offset: u64,
    ino: Option<u64>,
) -> Option<i32> {
    let open = real!(open: fn(*const libc::c_char, libc::c_int, libc::mode_t) -> libc::c_int);
    // SAFETY: a NUL-terminated path.
    let first = unsafe { open(path.as_ptr(), flags | libc::O_CLOEXEC, 0) };
    if first < 0 {
        return None;
    }
    let fcntl = real!(fcntl: fn(libc::c_int, libc::c_int, usize) -> libc::c_int);
    // SAFETY: duplicates our descriptor.
    let kernel = unsafe { fcntl(first, libc::F_DUPFD_CLOEXEC, 100) };
    state::real_close(first);
    if kernel < 0 {
        return None;
    }
    if let Some(ino) = ino {
        // The mount's inode numbers are augefs's: another number is another file.
        // SAFETY: stat is plain data, filled by fstat on our descriptor.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        let fstat = real!(fstat: fn(libc::c_int, *mut libc::stat) -> libc::c_int);
        // SAFETY: our descriptor and a stat buffer.
        if unsafe { fstat(kernel, &mut st) } != 0 || st.st_ino != ino {
            state::real_close(kernel);
            return None;
        }
    }
    if file {
        let lseek = real!(lseek: fn(libc::c_int, libc::off_t, libc::c_int) -> libc::off_t);
        // SAFETY: our descriptor.
        unsafe { lseek(kernel, offset as i64, libc::SEEK_SET) };
    }
    Some(kernel)
}

/// Puts kernel descriptor `kernel` at each of `fds` (with their close-on-exec flags),
/// then closes it.
fn place(kernel: i32, fds: &[(i32, bool)]) {
    let dup3 = real!(dup3: fn(libc::c_int, libc::c_int, libc::c_int) -> libc::c_int);
    for &(fd, cloexec) in fds {
        // SAFETY: replaces what is at `fd` (an augefs placeholder, or the standard
        // descriptor being replaced), a number this process owns.
        unsafe { dup3(kernel, fd, if cloexec { libc::O_CLOEXEC } else { 0 }) };
    }
    state::real_close(kernel);
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
    let file = d.kind() == vfs::Kind::File;
    let Some(kernel) = open_kernel(&path, flags, file, offset, None) else {
        log::line(&format!(
            "cannot hand {} over to the bridge ({}; descriptors {:?} now fail with EBADF)",
            d.path(),
            std::io::Error::last_os_error(),
            fds.iter().map(|f| f.0).collect::<Vec<_>>()
        ));
        return false;
    };
    place(kernel, fds);
    true
}

/// In an attached process, makes standard descriptor `new` (0, 1 or 2) refer to regular
/// file `d` as a kernel descriptor on the mount, and every descriptor of `d` with it, so
/// that all keep sharing one offset. libc reads and writes its standard streams
/// with internal calls no interposer sees; a kernel descriptor of the file gives them a
/// regular file (lseek, fstat, whole reads, a static child inheriting it) where a pipe
/// would not. This process's posted requests run first, so the mount serves what they
/// wrote. False, with nothing changed, when not attached, for another kind of file, or
/// when the path no longer names the file (renamed over, unlinked).
pub fn std_to_kernel(
    px: &Posix,
    d: &Arc<posix::desc::Description>,
    new: i32,
    cloexec: bool,
) -> bool {
    // Attached only: the mount outlives every process, where a holder's bridge goes
    // with the holder (and with its exec), leaving a descriptor on it dead.
    let Some(remote) = state::remote() else {
        return false;
    };
    if d.kind() != vfs::Kind::File || d.is_path_only() {
        return false;
    }
    let Some(path) = bridge_path(d.path()) else {
        return false;
    };
    if remote.settle().is_err() {
        return false;
    }
    let flags = d.flags() & !(libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC);
    let offset = *d.offset();
    let Some(kernel) = open_kernel(&path, flags, true, offset, Some(d.ino().0)) else {
        return false;
    };
    let mut fds: Vec<(i32, bool)> = px
        .descriptors()
        .into_iter()
        .filter(|(_, o, _)| Arc::ptr_eq(o, d))
        .map(|(fd, _, c)| (fd, c))
        .collect();
    fds.push((new, cloexec));
    place(kernel, &fds);
    for &(fd, _) in &fds {
        if fd != new {
            let _ = px.detach_fd(fd);
        }
    }
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
