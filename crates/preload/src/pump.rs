//! Standard streams on augefs files. libc's own stdio writes standard output and error
//! (and reads input) with internal calls no interposer sees, so an augefs description
//! that becomes descriptor 0, 1 or 2 is served through a pipe: the descriptor is the
//! pipe's end and a pump thread moves the bytes between the pipe and the description
//! (the same description, so its offset stays shared with the other descriptors).
//! Forked children inherit the pipe and reach the file through the parent's pump.
//!
//! Invariants:
//! - Before a fork, an exec and at exit, pending output is drained into the file, so a
//!   child or the next program continues at the right offset.
//! - A pump runs inside augefs (the guard) with every signal blocked.
//! - Input is read ahead by up to a pipe's worth (64 KiB): the description's offset may
//!   be past what the program consumed (docs/SEMANTICS.md §4).

use crate::guard;
use crate::real::real;
use posix::desc::Description;
use posix::Posix;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// One pump: `fd` is the program's end of a pipe whose other end (`ours`) the thread
/// holds.
struct Pump {
    fd: i32,
    ours: i32,
    output: bool,
    busy: Arc<AtomicBool>,
    /// Input read from the file and not yet in the pipe.
    inflight: Arc<AtomicUsize>,
    desc: Arc<Description>,
}

static PUMPS: Mutex<Vec<Pump>> = Mutex::new(Vec::new());

/// How long a drain waits for the pipe to empty.
const DRAIN_WAIT_MS: u32 = 2000;

fn block_signals() {
    // SAFETY: sigset_t is plain data, filled by sigfillset; blocks this thread's signals.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, std::ptr::null_mut());
    }
}

/// Serves `desc` at standard descriptor `fd` through a pipe and a pump thread.
pub fn start(px: &'static Posix, desc: Arc<Description>, fd: i32, cloexec: bool) -> bool {
    let mut ends = [0i32; 2];
    // SAFETY: pipe2 fills the two descriptors.
    if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return false;
    }
    // The ends go above the program's numbers: with `fd` closed (a shell saves and
    // closes it before `>&N`), the pipe would otherwise get `fd` itself as an end, and
    // putting the other end there would close it.
    for end in &mut ends {
        let fcntl = real!(fcntl: fn(libc::c_int, libc::c_int, usize) -> libc::c_int);
        // SAFETY: duplicates a descriptor this function owns.
        let high = unsafe {
            fcntl(
                *end,
                libc::F_DUPFD_CLOEXEC,
                crate::state::INTERNAL_FD_MIN as usize,
            )
        };
        if high < 0 {
            crate::state::real_close(ends[0]);
            crate::state::real_close(ends[1]);
            return false;
        }
        crate::state::real_close(*end);
        *end = high;
    }
    let output = fd != 0;
    let (theirs, ours) = if output {
        (ends[1], ends[0])
    } else {
        (ends[0], ends[1])
    };
    let dup3 = real!(dup3: fn(libc::c_int, libc::c_int, libc::c_int) -> libc::c_int);
    // SAFETY: replaces `fd`, which the caller is giving this description.
    unsafe { dup3(theirs, fd, if cloexec { libc::O_CLOEXEC } else { 0 }) };
    crate::state::real_close(theirs);
    let busy = Arc::new(AtomicBool::new(false));
    let inflight = Arc::new(AtomicUsize::new(0));
    let (p, d, b, i) = (px, desc.clone(), busy.clone(), inflight.clone());
    let spawned = std::thread::Builder::new()
        .name("augefs-pump".into())
        .spawn(move || {
            let _g = guard::enter();
            block_signals();
            run(p, &d, ours, output, &b, &i);
        });
    if spawned.is_err() {
        return false;
    }
    if let Ok(mut pumps) = PUMPS.lock() {
        pumps.push(Pump {
            fd,
            ours,
            output,
            busy,
            inflight,
            desc,
        });
    }
    true
}

fn run(
    px: &Posix,
    d: &Description,
    ours: i32,
    output: bool,
    busy: &AtomicBool,
    inflight: &AtomicUsize,
) {
    let read = real!(read: fn(libc::c_int, *mut libc::c_void, usize) -> isize);
    let write = real!(write: fn(libc::c_int, *const libc::c_void, usize) -> isize);
    let mut buf = vec![0u8; 1 << 16];
    loop {
        if output {
            // SAFETY: reads into `buf`.
            let n = unsafe { read(ours, buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                break;
            }
            busy.store(true, Ordering::Release);
            let mut at = 0;
            while at < n as usize {
                match px.write_to(d, &buf[at..n as usize]) {
                    Ok(k) => at += k,
                    Err(_) => break,
                }
            }
            busy.store(false, Ordering::Release);
        } else {
            // The offset and the in-flight count move together (the offset lock), so
            // `handed_offset` never sees one without the other.
            let n = {
                let mut off = d.offset();
                let n = match d.file().and_then(|f| px.fs().read(f, *off, &mut buf)) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                *off += n as u64;
                inflight.store(n, Ordering::Release);
                n
            };
            let mut at = 0;
            while at < n {
                // SAFETY: writes the bytes read.
                let k = unsafe { write(ours, buf[at..n].as_ptr().cast(), n - at) };
                if k <= 0 {
                    inflight.store(0, Ordering::Release);
                    crate::state::real_close(ours);
                    return;
                }
                at += k as usize;
                inflight.fetch_sub(k as usize, Ordering::AcqRel);
            }
        }
    }
    crate::state::real_close(ours);
}

fn pending(ours: i32) -> i32 {
    let mut n: libc::c_int = 0;
    let ioctl = real!(ioctl: fn(libc::c_int, libc::c_ulong, *mut libc::c_int) -> libc::c_int);
    // SAFETY: FIONREAD writes one int.
    if unsafe { ioctl(ours, libc::FIONREAD, &mut n) } != 0 {
        return 0;
    }
    n
}

/// Waits (bounded) until every output pump has written what is in its pipe.
pub fn drain() {
    let Ok(pumps) = PUMPS.lock() else { return };
    for p in pumps.iter().filter(|p| p.output) {
        for _ in 0..DRAIN_WAIT_MS * 10 {
            if pending(p.ours) == 0 && !p.busy.load(Ordering::Acquire) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
    }
}

/// The pumped standard descriptors: (fd, its description, the offset the program has
/// reached: for input, the description's offset less what the pump read ahead).
pub fn pumped() -> Vec<(i32, Arc<Description>, u64)> {
    let Ok(pumps) = PUMPS.lock() else {
        return Vec::new();
    };
    pumps
        .iter()
        .map(|p| {
            let off = p.desc.offset();
            let ahead = if p.output {
                0
            } else {
                pending(p.fd).max(0) as u64 + p.inflight.load(Ordering::Acquire) as u64
            };
            (p.fd, p.desc.clone(), off.saturating_sub(ahead))
        })
        .collect()
}

/// `fd` no longer refers to its pump's pipe (closed or replaced): drain and forget it.
pub fn forget(fd: i32) {
    drain();
    if let Ok(mut pumps) = PUMPS.lock() {
        pumps.retain(|p| p.fd != fd);
    }
}

/// Whether `fd` is a pumped standard descriptor.
pub fn is_pumped(fd: i32) -> bool {
    PUMPS
        .lock()
        .map(|p| p.iter().any(|p| p.fd == fd))
        .unwrap_or(false)
}
