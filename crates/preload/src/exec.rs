//! exec: the owner hands its augefs descriptors to the program it becomes.
//!
//! Before the owner execs (execve, execv, execvp, execvpe, fexecve, execveat, and the
//! variadic execl, execlp, execle) it syncs the file
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
    let mut env = unsafe { env_keeping_augefs(envp) };
    env.push(CString::new(format!("AUGEFS_FDS={}", items.join(","))).unwrap_or_default());
    if CWD_IN.load(Ordering::Relaxed) {
        env.push(
            CString::new(format!("AUGEFS_CWD={}", hex(px.cwd().path.as_bytes())))
                .unwrap_or_default(),
        );
    }
    Some(Prepared { env, restore })
}

/// The variables that make a program part of `augefs run`'s tree, as they were when
/// this library loaded: a program that execs or spawns with an environment of its own
/// (`execle`, `env -i`, subprocess's `env=`) must not drop its child out of the tree
/// (the child would meet placeholders and a prefix the kernel does not know).
const TREE_VARS: [&str; 7] = [
    "LD_PRELOAD",
    "AUGEFS_IMAGE",
    "AUGEFS_PREFIX",
    "AUGEFS_MOUNT",
    "AUGEFS_BRIDGE",
    "AUGEFS_PMR",
    "AUGEFS_LOG",
];

fn tree_vars() -> &'static [CString] {
    static VARS: std::sync::OnceLock<Vec<CString>> = std::sync::OnceLock::new();
    VARS.get_or_init(|| {
        TREE_VARS
            .iter()
            .filter_map(|k| {
                let v = std::env::var_os(k)?;
                let mut kv = format!("{k}=").into_bytes();
                kv.extend_from_slice(v.as_encoded_bytes());
                CString::new(kv).ok()
            })
            .collect()
    })
}

/// Records [`TREE_VARS`] (at load, before the program can change its environment).
pub fn remember_tree_vars() {
    tree_vars();
}

/// `envp` without a previous hand-over (AUGEFS_FDS, AUGEFS_CWD), with each of
/// [`TREE_VARS`] it lacks added back.
///
/// # Safety
/// `envp` is NULL or a NULL-terminated array of NUL-terminated strings.
pub unsafe fn env_keeping_augefs(envp: *const *const c_char) -> Vec<CString> {
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
    for var in tree_vars() {
        let key = &var.as_bytes()[..=var.as_bytes().iter().position(|&b| b == b'=').unwrap_or(0)];
        if !env.iter().any(|e| e.as_bytes().starts_with(key)) {
            env.push(var.clone());
        }
    }
    env
}

/// Whether `envp` already has every one of [`TREE_VARS`] this process had.
///
/// # Safety
/// As [`env_keeping_augefs`].
pub unsafe fn env_complete(envp: *const *const c_char) -> bool {
    if envp.is_null() {
        return tree_vars().is_empty();
    }
    tree_vars().iter().all(|var| {
        let key = &var.as_bytes()[..=var.as_bytes().iter().position(|&b| b == b'=').unwrap_or(0)];
        let mut i = 0;
        loop {
            let p = unsafe { *envp.add(i) };
            if p.is_null() {
                return false;
            }
            if unsafe { bytes(p) }.starts_with(key) {
                return true;
            }
            i += 1;
        }
    })
}

fn undo(p: &Prepared) {
    let dup2 = real!(dup2: fn(c_int, c_int) -> c_int);
    for &(fd, saved) in &p.restore {
        unsafe { dup2(saved, fd) };
        state::real_close(saved);
    }
}

/// Runs `exec` with the hand-over environment if this is the owner, else with `envp`
/// (the tree's variables added back if it dropped them).
unsafe fn with_handover(
    envp: *const *const c_char,
    exec: impl FnOnce(*const *const c_char) -> c_int,
) -> c_int {
    let Some(p) = (unsafe { prepare(envp) }) else {
        if unsafe { env_complete(envp) } {
            return exec(envp);
        }
        let env = unsafe { env_keeping_augefs(envp) };
        let mut ptrs: Vec<*const c_char> = env.iter().map(|c| c.as_ptr()).collect();
        ptrs.push(std::ptr::null());
        return exec(ptrs.as_ptr());
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

#[no_mangle]
pub unsafe extern "C" fn execveat(
    dirfd: c_int,
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
    flags: c_int,
) -> c_int {
    let real = real!(execveat: fn(c_int, *const c_char, *const *const c_char, *const *const c_char, c_int) -> c_int);
    unsafe { with_handover(envp, |env| real(dirfd, path, argv, env, flags)) }
}

/// The execl family is variadic, which stable Rust cannot define: each is defined with
/// this many pointer arguments after the first, which on x86-64 (System V) are where a
/// variadic caller put its arguments (five in registers, the rest on its stack, in
/// order). The list ends at the first NULL; slots past the caller's arguments are
/// never used. A longer list fails with E2BIG.
const EXECL_ARGS_MAX: usize = 32;

/// The argument vector (NULL included) and what follows its NULL (execle's envp), or
/// None when no NULL ends it within [`EXECL_ARGS_MAX`].
fn execl_split(
    args: &[*const c_char; EXECL_ARGS_MAX],
) -> Option<(&[*const c_char], *const c_char)> {
    let end = args.iter().position(|a| a.is_null())?;
    let after = args.get(end + 1).copied().unwrap_or(std::ptr::null());
    Some((&args[..=end], after))
}

/// Declares `$name(first, a0 .. a31)` collecting the 32 pointers into an array.
macro_rules! execl_like {
    ($(#[$doc:meta])* $name:ident, |$first:ident, $args:ident| $body:expr) => {
        $(#[$doc])*
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            $first: *const c_char,
            a0: *const c_char, a1: *const c_char, a2: *const c_char, a3: *const c_char,
            a4: *const c_char, a5: *const c_char, a6: *const c_char, a7: *const c_char,
            a8: *const c_char, a9: *const c_char, a10: *const c_char, a11: *const c_char,
            a12: *const c_char, a13: *const c_char, a14: *const c_char, a15: *const c_char,
            a16: *const c_char, a17: *const c_char, a18: *const c_char, a19: *const c_char,
            a20: *const c_char, a21: *const c_char, a22: *const c_char, a23: *const c_char,
            a24: *const c_char, a25: *const c_char, a26: *const c_char, a27: *const c_char,
            a28: *const c_char, a29: *const c_char, a30: *const c_char, a31: *const c_char,
        ) -> c_int {
            let $args: [*const c_char; EXECL_ARGS_MAX] = [
                a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16,
                a17, a18, a19, a20, a21, a22, a23, a24, a25, a26, a27, a28, a29, a30, a31,
            ];
            $body
        }
    };
}

fn too_long() -> c_int {
    crate::route::set_errno(libc::E2BIG);
    -1
}

execl_like!(
    /// `execl(path, arg0, ..., NULL)`: execve with this environment.
    execl,
    |path, args| match execl_split(&args) {
        Some((argv, _)) => unsafe { execve(path, argv.as_ptr(), environ) },
        None => too_long(),
    }
);

execl_like!(
    /// `execlp(file, arg0, ..., NULL)`: execvp.
    execlp,
    |file, args| match execl_split(&args) {
        Some((argv, _)) => unsafe { execvp(file, argv.as_ptr()) },
        None => too_long(),
    }
);

execl_like!(
    /// `execle(path, arg0, ..., NULL, envp)`: execve with `envp`.
    execle,
    |path, args| match execl_split(&args) {
        Some((argv, envp)) if argv.len() < EXECL_ARGS_MAX => unsafe {
            execve(path, argv.as_ptr(), envp.cast())
        },
        _ => too_long(),
    }
);

/// At load: take over the descriptors and working directory an owner handed over.
pub fn take_over() {
    remember_tree_vars();
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
        if cwd.is_some() {
            // Never resolve the handed-over working directory against the host: not
            // in this program (CWD_LOST), nor in the children it starts (they inherit
            // the parked kernel working directory).
            state::CWD_LOST.store(true, Ordering::Relaxed);
            state::park_kernel_cwd();
        }
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
                    crate::pump::start(px, d, fd, false);
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
            drop(_g);
            state::park_kernel_cwd();
        } else {
            log::line(
                "the handed-over working directory is gone: relative paths fail with ENOTCONN",
            );
            state::CWD_LOST.store(true, Ordering::Relaxed);
            drop(_g);
            state::park_kernel_cwd();
        }
    }
}
