//! The kernel's (libc's) own functions, found with `dlsym(RTLD_NEXT)` on first use and
//! cached.

/// `real!(name: fn(args) -> ret)`: libc's `name`, as a function pointer.
macro_rules! real {
    ($name:ident : fn($($t:ty),*) -> $r:ty) => {{
        use std::sync::atomic::{AtomicUsize, Ordering};
        static PTR: AtomicUsize = AtomicUsize::new(0);
        let mut p = PTR.load(Ordering::Relaxed);
        if p == 0 {
            let sym = concat!(stringify!($name), "\0");
            // SAFETY: dlsym with a NUL-terminated name; RTLD_NEXT finds the definition
            // after this library (libc's).
            p = unsafe { libc::dlsym(libc::RTLD_NEXT, sym.as_ptr().cast()) } as usize;
            assert!(p != 0, "augefs: libc has no {}", stringify!($name));
            PTR.store(p, Ordering::Relaxed);
        }
        // SAFETY: `p` is libc's definition of the function, whose C prototype the
        // caller spells out.
        unsafe { std::mem::transmute::<usize, unsafe extern "C" fn($($t),*) -> $r>(p) }
    }};
}

pub(crate) use real;
