//! Memory protection keys for the memory an attached process shares with the instance
//! and may write (its connections' mailboxes, `crate::mailbox`; augefs.txt §IV-B).
//!
//! The process allocates one key, with access disabled, and tags every mailbox with
//! it. The key's rights are enabled only inside augefs's own code, for the span of a
//! call ([`Window`]), and put back as they were after: a stray load or store of the
//! application (any thread; a thread starts with every key but the default one
//! disabled) faults with SIGSEGV instead of corrupting a request.
//!
//! Invariants:
//! - A [`Window`] restores the thread's PKRU to exactly what it was when it opened,
//!   whatever happened in between (nested windows restore in turn).
//! - Without keys (no CPU or kernel support, or all 15 in use) there is no key, and
//!   callers must not share writable memory: they use the socket only.

use std::sync::OnceLock;

const PKEY_DISABLE_ACCESS: libc::c_ulong = 1;

/// The process's key for shared memory, allocated at first need (None: unavailable).
pub fn key() -> Option<u32> {
    static KEY: OnceLock<Option<u32>> = OnceLock::new();
    *KEY.get_or_init(|| {
        if !cfg!(target_arch = "x86_64") {
            return None;
        }
        // SAFETY: pkey_alloc takes flags (0) and the key's initial rights in this
        // thread; other threads start with the key's access disabled.
        let k = unsafe { libc::syscall(libc::SYS_pkey_alloc, 0, PKEY_DISABLE_ACCESS) };
        u32::try_from(k).ok().filter(|&k| k > 0 && k < 16)
    })
}

/// Whether this machine gives a process protection keys (allocates one and frees it):
/// what the front ends say once, where a process would not have them.
pub fn available() -> bool {
    if !cfg!(target_arch = "x86_64") {
        return false;
    }
    // SAFETY: as in `key`; the key is freed at once.
    let k = unsafe { libc::syscall(libc::SYS_pkey_alloc, 0, PKEY_DISABLE_ACCESS) };
    if k < 0 {
        return false;
    }
    // SAFETY: frees the key just allocated, which tags no memory.
    unsafe { libc::syscall(libc::SYS_pkey_free, k) };
    true
}

/// What the front ends say once where [`available`] is false.
pub const UNAVAILABLE: &str = "no memory protection keys on this machine (pkey_alloc \
    fails): attached processes send every request over the instance's socket; \
    AUGEFS_MAILBOX=unprotected uses shared memory without them";

/// Tags `len` bytes at address `at` (page-aligned, mapped read-write) with `key`.
pub fn protect(at: usize, len: usize, key: u32) -> std::io::Result<()> {
    let prot = libc::PROT_READ | libc::PROT_WRITE;
    // SAFETY: pkey_mprotect only changes the protection of the caller's mapping (the
    // kernel refuses addresses not mapped).
    let r = unsafe { libc::syscall(libc::SYS_pkey_mprotect, at, len, prot, key) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(target_arch = "x86_64")]
fn rdpkru() -> u32 {
    let pkru: u32;
    // SAFETY: RDPKRU reads this thread's PKRU (ecx must be 0); the CPU has it, or
    // pkey_alloc would have failed and no window would open.
    unsafe {
        std::arch::asm!("rdpkru", in("ecx") 0u32, out("eax") pkru, out("edx") _,
            options(nomem, nostack, preserves_flags));
    }
    pkru
}

#[cfg(target_arch = "x86_64")]
fn wrpkru(pkru: u32) {
    // SAFETY: WRPKRU sets this thread's PKRU (ecx and edx must be 0); it changes which
    // memory this thread may touch, which is its whole point.
    unsafe {
        std::arch::asm!("wrpkru", in("eax") pkru, in("ecx") 0u32, in("edx") 0u32,
            options(nostack, preserves_flags));
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn rdpkru() -> u32 {
    0
}

#[cfg(not(target_arch = "x86_64"))]
fn wrpkru(_: u32) {}

/// The key's rights enabled in this thread until dropped.
#[derive(Debug)]
pub struct Window {
    saved: Option<u32>,
}

impl Window {
    /// Opens the window for `key` (None: nothing to do).
    pub fn open(key: Option<u32>) -> Window {
        let Some(k) = key else {
            return Window { saved: None };
        };
        let saved = rdpkru();
        let open = saved & !(0b11 << (2 * k));
        if open != saved {
            wrpkru(open);
        }
        Window { saved: Some(saved) }
    }
}

impl Drop for Window {
    fn drop(&mut self) {
        if let Some(saved) = self.saved {
            if rdpkru() != saved {
                wrpkru(saved);
            }
        }
    }
}
