//! Who this process is to augefs, and the transitions: attach on first use, fork,
//! exec and exit (docs/DESIGN.md §12.3).
//!
//! - **Owner**: this process calls a posix layer directly. Either it mounted the image
//!   (env AUGEFS_IMAGE; with env AUGEFS_BRIDGE it also serves a FUSE bridge of the
//!   same file system there), or it is attached to the instance serving the mount at
//!   env AUGEFS_MOUNT, whose posix layer sends each call to that instance (the mount
//!   directory is then both the prefix and the bridge).
//! - **Bridged**: the image is held by another process of the tree (or this is a forked
//!   child of the owner): prefix paths are rewritten to the bridge and the kernel
//!   serves them, so descriptors are real kernel ones that survive fork and exec.
//! - **Off**: no image configured: prefix paths go to the kernel unchanged.
//! - **Refused**: the image could not be attached (held with no bridge, or an error):
//!   prefix calls fail with EBUSY/EIO, said once in the log.
//!
//! Invariants:
//! - A forked child never calls into the owner's in-memory file system: the fork
//!   handler marks it a child first ([`CHILD`]) and every route checks that mark.
//! - The owner's last act is a sync: at exit (the library destructor) and before exec.

use crate::guard;
use crate::log;
use crate::real::real;
use posix::Posix;
use std::ffi::{CString, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

#[derive(Debug, Clone)]
pub enum Mode {
    Unset,
    Off,
    Owner(&'static Posix),
    Bridged(&'static [u8]),
    Refused(i32),
}

static MODE: RwLock<Mode> = RwLock::new(Mode::Unset);
/// The owner's posix layer, set once when this process attaches as the owner (MODE
/// then holds the same). It lives as long as the process: a forked child must never
/// release it, and at exit the kernel takes the image after the last sync. Read on
/// every call, so it is one atomic load, with no lock and no reference count.
static OWNER: OnceLock<&'static Posix> = OnceLock::new();
/// The owner's file system (for its page cache's counters in the log at exit).
static OWNER_FS: OnceLock<Arc<vfs::FileSystem>> = OnceLock::new();
/// The instance this process is attached to (env AUGEFS_MOUNT).
static REMOTE: OnceLock<Arc<instance::client::Remote>> = OnceLock::new();
/// Set in a forked child of the owner (by the fork handler): never use MODE's posix.
static CHILD: AtomicBool = AtomicBool::new(false);
/// The working directory is inside augefs (owner: the posix layer's cwd).
pub static CWD_IN: AtomicBool = AtomicBool::new(false);
/// The working directory was handed over inside augefs (an exec) but augefs could not
/// be reached: relative paths fail with ENOTCONN instead of meeting the kernel's
/// working directory, until a chdir outside augefs.
pub static CWD_LOST: AtomicBool = AtomicBool::new(false);
static OWNER_PID: AtomicI32 = AtomicI32::new(0);
/// The bridge this process serves: it lives as long as the process (its threads end
/// with it; see `detach`).
static BRIDGE: Mutex<Option<augefs_fuse::Bridge>> = Mutex::new(None);
static ATFORK: std::sync::Once = std::sync::Once::new();
/// The process's umask (read at attach, followed through `umask`), applied to the
/// modes of files and directories augefs creates, as the kernel does.
static UMASK: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0o022);

/// `mode` with the umask applied.
pub fn masked(mode: u32) -> u32 {
    mode & !UMASK.load(Ordering::Relaxed)
}

fn read_umask() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("Umask:"))?;
            u32::from_str_radix(line.split_whitespace().nth(1)?, 8).ok()
        })
        .unwrap_or(0o022)
}

#[no_mangle]
pub extern "C" fn umask(mask: libc::mode_t) -> libc::mode_t {
    let real = real!(umask: fn(libc::mode_t) -> libc::mode_t);
    UMASK.store(mask & 0o777, Ordering::Relaxed);
    // SAFETY: umask has no pointer arguments.
    unsafe { real(mask) }
}

/// The FUSE magic `statfs` reports for a live FUSE mount.
const FUSE_SUPER_MAGIC: i64 = 0x6573_5546;
/// How long a process that finds the image held waits for the owner's bridge.
const BRIDGE_WAIT_MS: u64 = 10_000;

/// The mount this process attaches to (env AUGEFS_MOUNT, read once), without a
/// trailing slash.
pub fn mount_dir() -> Option<&'static [u8]> {
    static M: OnceLock<Option<Vec<u8>>> = OnceLock::new();
    M.get_or_init(|| {
        let mut m = std::env::var_os("AUGEFS_MOUNT")?.into_encoded_bytes();
        while m.len() > 1 && m.ends_with(b"/") {
            m.pop();
        }
        (m.len() > 1 && m[0] == b'/').then_some(m)
    })
    .as_deref()
}

/// The prefix (env AUGEFS_PREFIX; else, attached, the mount's directory; else
/// /augefs), without a trailing slash. Attached with a prefix of its own (`augefs run
/// --image` on a mounted image), paths under the prefix go to the instance and paths
/// under the mount's directory to the kernel's mount of the same instance, as a
/// bridged process's paths under the bridge do.
pub fn prefix() -> &'static [u8] {
    static P: OnceLock<Vec<u8>> = OnceLock::new();
    P.get_or_init(|| {
        let own = std::env::var_os("AUGEFS_PREFIX");
        if let (Some(m), None) = (mount_dir(), &own) {
            return m.to_vec();
        }
        let mut p = own
            .map(OsString::into_encoded_bytes)
            .unwrap_or_else(|| b"/augefs".to_vec());
        while p.len() > 1 && p.ends_with(b"/") {
            p.pop();
        }
        p
    })
}

/// The bridge's mount point (env AUGEFS_BRIDGE, read once: it is fixed for the life
/// of the process tree).
pub fn bridge_dir() -> Option<&'static [u8]> {
    if let Some(m) = mount_dir() {
        return Some(m);
    }
    static B: OnceLock<Option<Vec<u8>>> = OnceLock::new();
    B.get_or_init(|| std::env::var_os("AUGEFS_BRIDGE").map(OsString::into_encoded_bytes))
        .as_deref()
}

/// The current mode without attaching (a forked child is bridged).
pub fn mode() -> Mode {
    if CHILD.load(Ordering::Acquire) {
        return bridged_or_refused();
    }
    if let Some(&px) = OWNER.get() {
        return Mode::Owner(px);
    }
    // Locked for writing: another thread is attaching (its engine threads meet this
    // too, for their own kernel calls): undecided, so `attach` waits for it.
    match MODE.try_read() {
        Ok(m) => m.clone(),
        Err(std::sync::TryLockError::WouldBlock) => Mode::Unset,
        Err(std::sync::TryLockError::Poisoned(_)) => Mode::Refused(libc::EIO),
    }
}

fn bridged_or_refused() -> Mode {
    match bridge_dir() {
        Some(b) => Mode::Bridged(b),
        None => Mode::Refused(libc::EBUSY),
    }
}

/// The owner's posix layer, if this process is the owner (and not inside augefs).
/// While the image is being attached it is None: no augefs descriptor exists yet (the
/// engine's threads starting up get here for their own kernel calls).
pub fn owner() -> Option<&'static Posix> {
    let px = *OWNER.get()?;
    usable().then_some(px)
}

/// Whether this thread may call the owner's posix layer now: not from inside augefs
/// (no reentrancy) and never in a forked child.
pub fn usable() -> bool {
    !guard::inside() && !CHILD.load(Ordering::Acquire)
}

/// The owner's posix layer if `fd` is one of its descriptors: the descriptor call's
/// route. A kernel descriptor costs one atomic load and one bit test.
pub fn owner_of(fd: i32) -> Option<&'static Posix> {
    let px = *OWNER.get()?;
    (px.is_open(fd) && usable()).then_some(px)
}

/// The mode, attaching the image first if nothing was decided yet.
pub fn attach() -> Mode {
    let m = mode();
    if !matches!(m, Mode::Unset) {
        return m;
    }
    let _g = guard::enter();
    let Ok(mut w) = MODE.write() else {
        return Mode::Refused(libc::EIO);
    };
    if matches!(*w, Mode::Unset) {
        // An attached client numbers its own descriptors out of the way (sockets and
        // memfds, instance::CLIENT_FD_MIN); a holder's image, ring and PMR are opened
        // with every lower number taken (io_uring_setup has no such option).
        *w = if mount_dir().is_some() {
            decide()
        } else {
            above(INTERNAL_FD_MIN, decide)
        };
        if let Mode::Owner(px) = *w {
            let _ = OWNER.set(px);
        }
    }
    w.clone()
}

/// Lowest number of the descriptors augefs itself holds (the image, the io_uring ring,
/// the PMR, the bridge's /dev/fuse, the pumps' pipes): programs (shells above all)
/// `dup2` onto small numbers they consider free, which must never be ours.
pub const INTERNAL_FD_MIN: i32 = instance::CLIENT_FD_MIN;

/// Runs `f` with every free descriptor below `min` taken, so what `f` opens (including
/// by raw syscalls such as io_uring_setup) is numbered at or above `min`.
pub fn above<T>(min: i32, f: impl FnOnce() -> T) -> T {
    let open = real!(open: fn(*const libc::c_char, libc::c_int, libc::mode_t) -> libc::c_int);
    let mut fillers = Vec::new();
    loop {
        // SAFETY: a NUL-terminated path; the descriptor is ours.
        let fd = unsafe { open(c"/".as_ptr(), libc::O_PATH | libc::O_CLOEXEC, 0) };
        if fd < 0 {
            break;
        }
        if fd >= min {
            real_close(fd);
            break;
        }
        fillers.push(fd);
    }
    let r = f();
    for fd in fillers {
        real_close(fd);
    }
    r
}

fn decide() -> Mode {
    if let Some(dir) = mount_dir() {
        return attach_instance(dir);
    }
    let Some(image) = std::env::var_os("AUGEFS_IMAGE") else {
        return Mode::Off;
    };
    let image = PathBuf::from(image);
    let pmr = std::env::var_os("AUGEFS_PMR").map(PathBuf::from);
    // A program an owner exec'd finds the image still held by its own old incarnation
    // for a moment (the kernel tears its io_uring down after the exec): wait for that.
    let wait = std::time::Duration::from_millis(BRIDGE_WAIT_MS);
    let fs = match posix::mount::mount_image(&image, pmr.as_deref(), wait) {
        Ok(fs) => fs,
        Err(posix::mount::MountError::InUse) => return wait_for_bridge(),
        Err(e) => {
            log::line(&format!("cannot attach: {e}"));
            return Mode::Refused(e.errno());
        }
    };
    let pid = started();
    if let Some(dir) = bridge_dir() {
        start_bridge(&fs, dir, &image);
    }
    let _ = OWNER_FS.set(fs.clone());
    Mode::Owner(Box::leak(Box::new(Posix::new(
        fs,
        vfs::Creds::of_process(),
        pid,
    ))))
}

/// What every process that calls a posix layer directly sets up: its umask, its pid,
/// the fork handlers. Returns the pid.
fn started() -> i32 {
    UMASK.store(read_umask(), Ordering::Relaxed);
    let pid = std::process::id() as i32;
    OWNER_PID.store(pid, Ordering::Relaxed);
    ATFORK.call_once(|| {
        // SAFETY: registers plain functions as the fork handlers.
        unsafe { libc::pthread_atfork(Some(before_fork), Some(after_fork), Some(forked_child)) };
    });
    pid
}

/// Attaches to the instance serving the mount at `dir`. If it cannot (no instance, too
/// many clients), the process uses the mount through the kernel, as without the
/// interposer: said once in the log.
fn attach_instance(dir: &'static [u8]) -> Mode {
    let path = std::path::Path::new(std::ffi::OsStr::from_bytes(dir));
    let socket = instance::socket_path(path);
    let remote = match instance::client::Remote::connect(&socket) {
        Ok(r) => Arc::new(r),
        Err(e) => {
            log::line(&format!(
                "cannot attach to the instance at {} ({e}): using the mount through the kernel",
                socket.display()
            ));
            return Mode::Off;
        }
    };
    log::note(&format!("attached to the instance at {}", socket.display()));
    let _ = REMOTE.set(remote.clone());
    let pid = started();
    let px: &'static Posix = Box::leak(Box::new(Posix::new(remote, vfs::Creds::of_process(), pid)));
    if let Ok(cwd) = std::env::current_dir() {
        enter_kernel_cwd(px, dir, &cwd.into_os_string().into_encoded_bytes());
    }
    Mode::Owner(px)
}

/// The kernel's working directory `cwd`, if inside the attached mount, becomes the
/// posix layer's (`route::kernel_cwd_changed`).
pub fn kernel_cwd_in_mount(cwd: &[u8]) {
    if let (Some(dir), Some(px)) = (mount_dir(), remote().and(owner())) {
        let _g = guard::enter();
        enter_kernel_cwd(px, dir, cwd);
    }
}

/// A working directory `cwd` inside the mount `dir` (the kernel's) becomes the posix
/// layer's.
fn enter_kernel_cwd(px: &Posix, dir: &[u8], cwd: &[u8]) {
    let Some(rest) = cwd.strip_prefix(dir) else {
        return;
    };
    let rel: &[u8] = match rest {
        b"" => b"/",
        r if r[0] == b'/' => r,
        _ => return,
    };
    if px.chdir(posix::At::Cwd, rel).is_ok() {
        CWD_IN.store(true, Ordering::Relaxed);
    }
}

/// The instance this process is attached to, if any.
pub fn remote() -> Option<&'static Arc<instance::client::Remote>> {
    REMOTE.get()
}

/// Serves the bridge from background threads with every signal blocked (the program's
/// handlers must run on its own threads). A dead bridge a previous owner left (it
/// exec'd or crashed) is detached first.
fn start_bridge(fs: &Arc<vfs::FileSystem>, dir: &[u8], image: &std::path::Path) {
    let c = CString::new(dir).unwrap_or_default();
    // SAFETY: a NUL-terminated path; failure (nothing mounted) is expected.
    unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    // SAFETY: sigset_t is plain data, filled by sigfillset.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid sigset pointers; restores this thread's mask below.
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
    }
    let path = PathBuf::from(OsString::from_vec(dir.to_vec()));
    match augefs_fuse::Bridge::spawn(fs.clone(), &path, &image.display().to_string(), 2) {
        Ok(b) => *BRIDGE.lock().expect("bridge lock") = Some(b),
        Err(e) => log::line(&format!("bridge: {e}")),
    }
    // SAFETY: restores the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
}

fn wait_for_bridge() -> Mode {
    let Some(dir) = bridge_dir() else {
        log::line(
            "the image is held by another process and no bridge is set (run under `augefs run`)",
        );
        return Mode::Refused(libc::EBUSY);
    };
    let c = CString::new(dir).unwrap_or_default();
    for _ in 0..BRIDGE_WAIT_MS {
        // SAFETY: statfs fills the struct; a NUL-terminated path.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::statfs(c.as_ptr(), &mut st) } == 0 && st.f_type == FUSE_SUPER_MAGIC {
            return Mode::Bridged(dir);
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    log::line("the image is held by another process and its bridge did not come up");
    Mode::Refused(libc::EBUSY)
}

/// The fork prepare handler: pumped output reaches the file first, so the child's
/// converted descriptors start at the right offsets.
extern "C" fn before_fork() {
    if is_child() {
        return;
    }
    crate::pump::drain();
    if let Some(p) = owner() {
        let _g = guard::enter();
        crate::convert::to_bridge_all(p);
    }
    if let Some(r) = remote() {
        r.before_fork();
    }
}

/// The fork parent handler.
extern "C" fn after_fork() {
    if let Some(r) = remote() {
        r.after_fork_parent();
    }
}

/// The fork child handler: the descriptors it inherited are bridge descriptors at the
/// same numbers (the prepare handler converted them). An attached child attaches
/// itself (a session of its own, at its first call); the child of an image's owner is
/// bridged from now on.
extern "C" fn forked_child() {
    if let Some(r) = remote() {
        r.forked();
        OWNER_PID.store(std::process::id() as i32, Ordering::Relaxed);
        return;
    }
    CHILD.store(true, Ordering::Release);
    if let Some(&p) = OWNER.get() {
        crate::convert::cwd_to_bridge(p);
    }
}

/// Whether this process is a forked child of an owner.
pub fn is_child() -> bool {
    CHILD.load(Ordering::Acquire)
}

/// Whether this process is the one that attached as the owner (not a child that shares
/// its memory without its fork handlers having run).
pub fn is_owner_process() -> bool {
    OWNER_PID.load(Ordering::Relaxed) == std::process::id() as i32
}

/// Syncs before the image is let go: at exit (`for_exec` false) and before exec. At
/// exit, stdio is flushed, the pumps drained and this process's own descriptors on the
/// bridge closed while the bridge still serves (a close then never waits on a server
/// that is gone); the bridge's threads and the image go with the process (the kernel
/// ends the FUSE connection and releases the image's lock), and `augefs run` detaches
/// the dead mount. Everything acknowledged is durable after the sync; an unlinked file
/// still open is freed by the next mount. With AUGEFS_LOG set, the page cache's
/// counters go to the log at exit.
pub fn detach(for_exec: bool) {
    if is_child() || OWNER_PID.load(Ordering::Relaxed) != std::process::id() as i32 {
        return;
    }
    let _g = guard::enter();
    let Some(p) = owner_posix() else { return };
    // stdio flushes its buffers after the library destructors: flush now, so pumped
    // output is in the file before the sync.
    // SAFETY: fflush(NULL) flushes every stream.
    unsafe { libc::fflush(std::ptr::null_mut()) };
    crate::pump::drain();
    if remote().is_some() {
        // The instance holds the file system: nothing of it is this process's to sync.
        return;
    }
    if !for_exec {
        close_bridge_fds();
    }
    if let Err(e) = p.fs().sync() {
        log::line(&format!("sync: {e}"));
    }
    if !for_exec && std::env::var_os("AUGEFS_LOG").is_some() {
        // For diagnosis: how this process used the page cache.
        if let Some(fs) = OWNER_FS.get() {
            log::line(&format!("exit: page cache {:?}", fs.cache_stats()));
        }
    }
}

/// Closes this process's kernel descriptors on its own bridge.
fn close_bridge_fds() {
    let Some(bridge) = bridge_dir() else { return };
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let fds: Vec<i32> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    for fd in fds {
        let Ok(target) = std::fs::read_link(format!("/proc/self/fd/{fd}")) else {
            continue;
        };
        if target.as_os_str().as_encoded_bytes().starts_with(bridge) {
            real_close(fd);
        }
    }
}

fn owner_posix() -> Option<&'static Posix> {
    OWNER.get().copied()
}

/// The library destructor: the owner detaches at exit.
extern "C" fn at_exit() {
    detach(false);
}

#[used]
#[link_section = ".fini_array"]
static FINI: extern "C" fn() = at_exit;

/// The library constructor: a program exec'd by an owner takes over its descriptors.
extern "C" fn at_load() {
    crate::uaccess::install();
    crate::exec::take_over();
}

#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = at_load;

/// While the working directory is inside augefs, the kernel's is (for an attached
/// process) the same directory of the mount, else an empty directory that no longer
/// exists: a relative path that reaches the kernel anyway (a raw system
/// call; a program whose exec'd successor cannot reach augefs) can create nothing and
/// finds nothing (ENOENT), instead of acting on the host directory the program left.
/// Best effort: without a writable temporary directory the kernel's stays as it was.
pub fn park_kernel_cwd() {
    let chdir = real!(chdir: fn(*const libc::c_char) -> libc::c_int);
    let rmdir = real!(rmdir: fn(*const libc::c_char) -> libc::c_int);
    let _g = guard::enter();
    if let (Some(dir), Some(px)) = (mount_dir(), remote().and(OWNER.get())) {
        // Attached: the kernel's working directory is the same directory of the mount,
        // so what reaches the kernel (raw system calls, children not yet attached)
        // finds what the posix layer would.
        if let Ok(c) = px.try_cwd() {
            let mut full = dir.to_vec();
            full.extend_from_slice(c.path.as_bytes());
            if let Ok(c) = CString::new(full) {
                // SAFETY: a NUL-terminated path.
                unsafe { chdir(c.as_ptr()) };
            }
        }
        return;
    }
    let base = std::env::var_os("TMPDIR").unwrap_or_else(|| "/tmp".into());
    let mut template = base.into_encoded_bytes();
    template.extend_from_slice(b"/.augefs-cwd-XXXXXX\0");
    // SAFETY: a writable, NUL-terminated template; chdir and rmdir take the path
    // mkdtemp filled in.
    unsafe {
        let dir = libc::mkdtemp(template.as_mut_ptr().cast());
        if dir.is_null() {
            return;
        }
        chdir(dir);
        rmdir(dir);
    }
}

/// The kernel's close, for callers outside this module.
pub fn real_close(fd: i32) -> i32 {
    let close = real!(close: fn(libc::c_int) -> libc::c_int);
    // SAFETY: closes a descriptor number; a bad one is EBADF.
    unsafe { close(fd) }
}
