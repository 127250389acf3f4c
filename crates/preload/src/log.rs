//! Log lines of the interposer: to the file env AUGEFS_LOG names (appended), else to
//! standard error; written with the kernel's calls under the guard.

use crate::guard;
use crate::real::real;
use std::collections::HashSet;
use std::sync::Mutex;

pub fn line(msg: &str) {
    let _g = guard::enter();
    let text = format!("augefs[{}]: {msg}\n", std::process::id());
    let fd = match std::env::var_os("AUGEFS_LOG") {
        Some(p) => {
            let c = std::ffi::CString::new(p.into_encoded_bytes()).unwrap_or_default();
            let open =
                real!(open: fn(*const libc::c_char, libc::c_int, libc::mode_t) -> libc::c_int);
            // SAFETY: a NUL-terminated path.
            unsafe {
                open(
                    c.as_ptr(),
                    libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT | libc::O_CLOEXEC,
                    0o644,
                )
            }
        }
        None => 2,
    };
    let write = real!(write: fn(libc::c_int, *const libc::c_void, usize) -> isize);
    // SAFETY: writes the bytes of `text`.
    unsafe { write(fd.max(2), text.as_ptr().cast(), text.len()) };
    if fd > 2 {
        let close = real!(close: fn(libc::c_int) -> libc::c_int);
        // SAFETY: our own descriptor.
        unsafe { close(fd) };
    }
}

static UNSUPPORTED: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);

/// ENOTSUP for `call` on an augefs path or descriptor, with one log line per call name.
pub fn unsupported(call: &'static str) -> i32 {
    let first = UNSUPPORTED
        .lock()
        .map(|mut s| s.get_or_insert_with(HashSet::new).insert(call))
        .unwrap_or(false);
    if first {
        line(&format!("{call}: not supported on augefs files (ENOTSUP)"));
    }
    libc::ENOTSUP
}

static ONCE: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);

/// `msg` as a log line, the first time only for `key`.
/// A line for the log file only (env AUGEFS_LOG): what is routine, never standard
/// error.
pub fn note(msg: &str) {
    if std::env::var_os("AUGEFS_LOG").is_some() {
        line(msg);
    }
}

pub fn once(key: &'static str, msg: &str) {
    let first = ONCE
        .lock()
        .map(|mut s| s.get_or_insert_with(HashSet::new).insert(key))
        .unwrap_or(false);
    if first {
        line(msg);
    }
}
