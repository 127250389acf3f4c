//! exec: the owner hands its augefs descriptors to the program it becomes.
//!
//! Before the owner execs (execve, execv, execvp, execvpe, fexecve) it syncs the file
//! system and adds to the new program's environment `AUGEFS_FDS`, one
//! `fd:flags:offset:path` (path in hex) per descriptor without close-on-exec:
//! augefs ones and pumped standard descriptors (their pipes die with this process's
//! pump threads: each is drained and replaced by a placeholder). The exec
//! releases the image (its descriptor is close-on-exec). The new program attaches at
//! load ([`take_over`]) and reopens each at its number; one that cannot be reopened
//! stays a placeholder, so using it fails with EBADF, and the log names it. If the exec
//! fails, the pumped descriptors are put back and nothing else changed.
//! `AUGEFS_CWD` carries a working directory inside augefs the same way.
#![expect(
    clippy::undocumented_unsafe_blocks,
    reason = "each exported function runs under the C contract of the libc function it \
              replaces: its pointers are what that contract says"
)]

use crate::guard;
use crate::log;
use crate::real::real;
use crate::route::bytes;
use crate::state::{self, CWD_IN};
use libc::{c_char, c_int};
use posix::At;
use std::ffi::CString;
use std::sync::atomic::Ordering;

/// Descriptors at or above this hold the pipe ends an exec set aside.
const SAVED_FD_MIN: c_int = 900;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// What an exec must undo if it fails: (descriptor, its saved bridge descriptor).
struct Prepared {
    env: Vec<CString>,
    restore: Vec<(c_int, c_int)>,
}

/// Builds the new program's environment from `envp` plus the hand-over, or None when
/// this process is not the owner (nothing to hand over).
unsafe fn prepare(envp: *const *const c_char) -> Option<Prepared> {
    let px = state::owner()?;
    let _g = guard::enter();
    let mut items = Vec::new();
    for (fd, d, cloexec) in px.descriptors() {
        if !cloexec {
            let off = *d.offset();
            items.push(format!(
                "{fd}:{}:{off}:{}",
                d.flags(),
                hex(d.path().as_bytes())
            ));
        }
    }
    let mut restore = Vec::new();
    let fcntl = real!(fcntl: fn(c_int, c_int, usize) -> c_int);
    let dup2 = real!(dup2: fn(c_int, c_int) -> c_int);
    let open = real!(open: fn(*const c_char, c_int, libc::mode_t) -> c_int);
    crate::pump::drain();
    for (fd, d, off) in crate::pump::pumped() {
        let saved = unsafe { fcntl(fd, libc::F_DUPFD_CLOEXEC, SAVED_FD_MIN as usize) };
        let ph = unsafe { open(c"/".as_ptr(), libc::O_PATH, 0) };
        if saved < 0 || ph < 0 {
            continue;
        }
        unsafe { dup2(ph, fd) };
        state::real_close(ph);
        restore.push((fd, saved));
        items.push(format!(
            "{fd}:{}:{off}:{}",
            d.flags(),
            hex(d.path().as_bytes())
        ));
    }
    state::detach(true);
    let mut env: Vec<CString> = Vec::new();
    if !envp.is_null() {
        let mut i = 0;
        loop {
            let p = unsafe { *envp.add(i) };
            if p.is_null() {
                break;
            }
            let e = unsafe { bytes(p) };
            if !e.starts_with(b"AUGEFS_FDS=") && !e.starts_with(b"AUGEFS_CWD=") {
                env.push(CString::new(e).unwrap_or_default());
            }
            i += 1;
        }
    }
    env.push(CString::new(format!("AUGEFS_FDS={}", items.join(","))).unwrap_or_default());
    if CWD_IN.load(Ordering::Relaxed) {
        env.push(
            CString::new(format!("AUGEFS_CWD={}", hex(px.cwd().path.as_bytes())))
                .unwrap_or_default(),
        );
    }
    Some(Prepared { env, restore })
}

fn undo(p: &Prepared) {
    let dup2 = real!(dup2: fn(c_int, c_int) -> c_int);
    for &(fd, saved) in &p.restore {
        unsafe { dup2(saved, fd) };
        state::real_close(saved);
    }
}

/// Runs `exec` with the hand-over environment if this is the owner, else with `envp`.
unsafe fn with_handover(
    envp: *const *const c_char,
    exec: impl FnOnce(*const *const c_char) -> c_int,
) -> c_int {
    let Some(p) = (unsafe { prepare(envp) }) else {
        return exec(envp);
    };
    let mut ptrs: Vec<*const c_char> = p.env.iter().map(|c| c.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    let r = exec(ptrs.as_ptr());
    let e = std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO);
    undo(&p);
    crate::route::set_errno(e);
    r
}

extern "C" {
    static environ: *const *const c_char;
}

#[no_mangle]
pub unsafe extern "C" fn execve(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let real =
        real!(execve: fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int);
    unsafe { with_handover(envp, |env| real(path, argv, env)) }
}

#[no_mangle]
pub unsafe extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    unsafe { execve(path, argv, environ) }
}

#[no_mangle]
pub unsafe extern "C" fn execvpe(
    file: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let real =
        real!(execvpe: fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int);
    unsafe { with_handover(envp, |env| real(file, argv, env)) }
}

#[no_mangle]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    unsafe { execvpe(file, argv, environ) }
}

#[no_mangle]
pub unsafe extern "C" fn fexecve(
    fd: c_int,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let real = real!(fexecve: fn(c_int, *const *const c_char, *const *const c_char) -> c_int);
    unsafe { with_handover(envp, |env| real(fd, argv, env)) }
}

/// At load: take over the descriptors and working directory an owner handed over.
pub fn take_over() {
    let Some(list) = std::env::var_os("AUGEFS_FDS") else {
        return;
    };
    let cwd = std::env::var("AUGEFS_CWD").ok();
    let _g = guard::enter();
    // SAFETY: at load, before the program's threads exist.
    unsafe {
        std::env::remove_var("AUGEFS_FDS");
        std::env::remove_var("AUGEFS_CWD");
    }
    drop(_g);
    let state::Mode::Owner(px) = state::attach() else {
        log::line("could not take over the image: handed-over descriptors fail with EBADF");
        return;
    };
    let _g = guard::enter();
    let list = list.to_string_lossy().into_owned();
    for item in list.split(',').filter(|s| !s.is_empty()) {
        let parts: Vec<&str> = item.splitn(4, ':').collect();
        let parsed = (|| {
            Some((
                parts.first()?.parse::<c_int>().ok()?,
                parts.get(1)?.parse::<c_int>().ok()?,
                parts.get(2)?.parse::<u64>().ok()?,
                unhex(parts.get(3)?)?,
            ))
        })();
        let Some((fd, flags, off, path)) = parsed else {
            continue;
        };
        let reopen = flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC | libc::O_CLOEXEC);
        match px.open(At::Cwd, &path, reopen, 0) {
            Ok(d) => {
                *d.offset() = off;
                if fd <= 2 {
                    crate::pump::start(&px, d, fd, false);
                } else {
                    px.install(fd, d, false);
                }
            }
            Err(e) => log::line(&format!(
                "descriptor {fd} ({}) could not be handed over: {e}; it fails with EBADF",
                String::from_utf8_lossy(&path)
            )),
        }
    }
    if let Some(c) = cwd.and_then(|c| unhex(&c)) {
        if px.chdir(At::Cwd, &c).is_ok() {
            CWD_IN.store(true, Ordering::Relaxed);
        }
    }
}
