//! Reading the strings a program hands over (paths) without trusting its pointers, as
//! the kernel's `strncpy_from_user` does: a bad pointer is EFAULT for the call, never a
//! crash of the program.
//!
//! The one load that touches the program's memory is an instruction at a known address
//! (`augefs_uaccess_load`, in [`cstr`]'s scan below). A SIGSEGV or SIGBUS handler,
//! installed at load, moves a fault at exactly that instruction to a fixup address
//! that returns "fault" (the kernel's exception-table idea); every other fault goes to
//! the handler that was there before (the program's), or to the default action, as if
//! this handler did not exist. The scan costs nothing beyond the bytes it reads: no
//! system call per path.
//!
//! Invariants:
//! - Only the scan's load is ever fixed up; any other fault keeps its meaning.
//! - A string is read at most `PATH_MAX` bytes far; longer is ENAMETOOLONG (the
//!   kernel's answer too).
//! - A program that installs its own SIGSEGV handler after this library replaces this
//!   one: a bad pointer then faults into the program's handler, as without augefs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

std::arch::global_asm!(
    ".pushsection .text.augefs_uaccess,\"ax\",@progbits",
    ".globl augefs_uaccess_strnlen",
    ".hidden augefs_uaccess_strnlen",
    ".type augefs_uaccess_strnlen,@function",
    // rdi: the string, rsi: the most bytes to read. rax: its length, rsi if no NUL
    // was found that far, or -1 if the read faulted.
    "augefs_uaccess_strnlen:",
    "xor eax, eax",
    "2:",
    "cmp rax, rsi",
    "jae 3f",
    ".globl augefs_uaccess_load",
    ".hidden augefs_uaccess_load",
    "augefs_uaccess_load:",
    "movzx ecx, byte ptr [rdi + rax]",
    "test ecx, ecx",
    "jz 3f",
    "inc rax",
    "jmp 2b",
    ".globl augefs_uaccess_fixup",
    ".hidden augefs_uaccess_fixup",
    "augefs_uaccess_fixup:",
    "mov rax, -1",
    "3:",
    "ret",
    ".size augefs_uaccess_strnlen, . - augefs_uaccess_strnlen",
    ".popsection",
);

extern "C" {
    fn augefs_uaccess_strnlen(p: *const u8, max: usize) -> isize;
    static augefs_uaccess_load: u8;
    static augefs_uaccess_fixup: u8;
}

/// The handlers of SIGSEGV and SIGBUS before ours (index: 0 SIGSEGV, 1 SIGBUS).
static PREVIOUS: OnceLock<[libc::sigaction; 2]> = OnceLock::new();
/// Our handlers are in place: the scan may meet a bad pointer.
static INSTALLED: AtomicBool = AtomicBool::new(false);

fn load_address() -> usize {
    std::ptr::addr_of!(augefs_uaccess_load) as usize
}

fn fixup_address() -> usize {
    std::ptr::addr_of!(augefs_uaccess_fixup) as usize
}

/// Installs the fault handlers (once; at the library's load).
pub fn install() {
    PREVIOUS.get_or_init(|| {
        let mut prev: [libc::sigaction; 2] =
            // SAFETY: sigaction is plain data; all zeros is SIG_DFL with no flags.
            unsafe { std::mem::zeroed() };
        for (i, sig) in [libc::SIGSEGV, libc::SIGBUS].into_iter().enumerate() {
            // SAFETY: as above.
            let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
            act.sa_sigaction = on_fault as *const () as usize;
            act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_NODEFER;
            // SAFETY: a valid handler and valid pointers to our own structs.
            unsafe {
                libc::sigemptyset(&mut act.sa_mask);
                libc::sigaction(sig, &act, &mut prev[i]);
            }
        }
        INSTALLED.store(true, Ordering::Release);
        prev
    });
}

extern "C" fn on_fault(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let uc = ctx.cast::<libc::ucontext_t>();
    // SAFETY: the kernel hands a SA_SIGINFO handler its interrupted context.
    let ip = unsafe { &mut (*uc).uc_mcontext.gregs[libc::REG_RIP as usize] };
    if *ip as usize == load_address() {
        *ip = fixup_address() as i64;
        return;
    }
    let prev = PREVIOUS.get().map(|p| p[usize::from(sig == libc::SIGBUS)]);
    match prev {
        Some(p) if p.sa_sigaction != libc::SIG_DFL && p.sa_sigaction != libc::SIG_IGN => {
            if p.sa_flags & libc::SA_SIGINFO != 0 {
                // SAFETY: the program installed this three-argument handler.
                let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                    unsafe { std::mem::transmute(p.sa_sigaction) };
                f(sig, info, ctx);
            } else {
                // SAFETY: the program installed this one-argument handler.
                let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(p.sa_sigaction) };
                f(sig);
            }
        }
        _ => {
            // The default action: restore it and return; the faulting instruction runs
            // again and the kernel ends the process as it would have.
            // SAFETY: sigaction is plain data; zero is SIG_DFL.
            let mut dfl: libc::sigaction = unsafe { std::mem::zeroed() };
            dfl.sa_sigaction = libc::SIG_DFL;
            // SAFETY: valid pointers; async-signal-safe.
            unsafe { libc::sigaction(sig, &dfl, std::ptr::null_mut()) };
        }
    }
}

/// The bytes of the C string at `p` (without its NUL), or the errno of a bad one:
/// EFAULT for NULL or unreadable memory, ENAMETOOLONG past `PATH_MAX` bytes.
///
/// # Safety
/// The returned slice borrows the program's memory: the caller must not keep it past
/// the call it serves (as the kernel copies, the program may change it afterwards).
pub unsafe fn cstr<'a>(p: *const libc::c_char) -> Result<&'a [u8], i32> {
    if p.is_null() {
        return Err(libc::EFAULT);
    }
    let max = libc::PATH_MAX as usize;
    let len = if INSTALLED.load(Ordering::Acquire) {
        // SAFETY: the scan reads at most `max` bytes and a fault is fixed up.
        unsafe { augefs_uaccess_strnlen(p.cast(), max) }
    } else {
        // Before the handlers are in place (a call from another library's
        // constructor), read as libc would.
        // SAFETY: the caller's pointer, trusted as libc trusts it.
        unsafe { libc::strnlen(p, max) as isize }
    };
    match len {
        -1 => Err(libc::EFAULT),
        n if n as usize >= max => Err(libc::ENAMETOOLONG),
        // SAFETY: `n` bytes were just read without a fault.
        n => Ok(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), n as usize) }),
    }
}

#[cfg(test)]
#[expect(
    clippy::undocumented_unsafe_blocks,
    reason = "cstr takes any pointer; that is what these tests give it"
)]
mod tests {
    use super::*;

    #[test]
    fn good_and_bad_pointers() {
        install();
        let s = c"/augefs/x";
        assert_eq!(unsafe { cstr(s.as_ptr()) }, Ok(&b"/augefs/x"[..]));
        assert_eq!(unsafe { cstr(c"".as_ptr()) }, Ok(&b""[..]));
        assert_eq!(unsafe { cstr(std::ptr::null()) }, Err(libc::EFAULT));
        assert_eq!(
            unsafe { cstr(0xDEAD_C0DE as *const libc::c_char) },
            Err(libc::EFAULT)
        );
        let long = vec![b'a'; libc::PATH_MAX as usize + 10];
        let mut long = long;
        long.push(0);
        assert_eq!(
            unsafe { cstr(long.as_ptr().cast()) },
            Err(libc::ENAMETOOLONG)
        );
    }

    #[test]
    fn a_string_running_into_an_unmapped_page_faults_cleanly() {
        install();
        // Two pages, the second made inaccessible: a string without a NUL in the
        // first runs into it.
        let page = 4096;
        // SAFETY: an anonymous private mapping of two pages.
        let m = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                2 * page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(m, libc::MAP_FAILED);
        // SAFETY: inside the mapping.
        unsafe {
            std::ptr::write_bytes(m.cast::<u8>(), b'x', page);
            libc::mprotect(m.cast::<u8>().add(page).cast(), page, libc::PROT_NONE);
        }
        let at = unsafe { m.cast::<u8>().add(page - 10) };
        assert_eq!(unsafe { cstr(at.cast()) }, Err(libc::EFAULT));
        // SAFETY: our mapping.
        unsafe { libc::munmap(m, 2 * page) };
    }
}
