//! mmap, munmap and msync of augefs files. A mapping is an anonymous one filled from
//! the file (MAP_PRIVATE, and MAP_SHARED read-only: a snapshot at mmap time). A
//! writable MAP_SHARED mapping is remembered and its bytes within the file's size are
//! written back on msync and on munmap (a write-back of the whole mapping, not of
//! dirty pages only; other processes and later writes do not see into it before then).
#![expect(
    clippy::undocumented_unsafe_blocks,
    reason = "each exported function runs under the C contract of the libc function it \
              replaces: its pointers are what that contract says"
)]

use crate::guard;
use crate::real::real;
use crate::route::{self, set_errno};
use libc::{c_int, c_void, off_t, size_t};
use posix::desc::Description;
use std::sync::{Arc, Mutex};

struct Shared {
    addr: usize,
    len: usize,
    desc: Arc<Description>,
    offset: u64,
}

static SHARED: Mutex<Vec<Shared>> = Mutex::new(Vec::new());

#[no_mangle]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    let real = real!(mmap: fn(*mut c_void, size_t, c_int, c_int, c_int, off_t) -> *mut c_void);
    let Some(px) = (flags & libc::MAP_ANONYMOUS == 0)
        .then(|| route::fd(fd))
        .flatten()
    else {
        return unsafe { real(addr, len, prot, flags, fd, off) };
    };
    let _g = guard::enter();
    let Ok(desc) = px.get(fd) else {
        set_errno(libc::EBADF);
        return libc::MAP_FAILED;
    };
    let shared = flags & libc::MAP_SHARED != 0;
    let writable = prot & libc::PROT_WRITE != 0;
    if !desc.readable() || (shared && writable && !desc.writable()) {
        set_errno(libc::EACCES);
        return libc::MAP_FAILED;
    }
    let anon = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | (flags & libc::MAP_FIXED);
    let p = unsafe { real(addr, len, libc::PROT_READ | libc::PROT_WRITE, anon, -1, 0) };
    if p == libc::MAP_FAILED {
        return p;
    }
    let buf = unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), len) };
    if let Err(e) = desc.file().and_then(|f| px.fs().read(f, off as u64, buf)) {
        unsafe { libc::munmap(p, len) };
        set_errno(e.0);
        return libc::MAP_FAILED;
    }
    unsafe { libc::mprotect(p, len, prot) };
    if shared && writable {
        if let Ok(mut s) = SHARED.lock() {
            s.push(Shared {
                addr: p as usize,
                len,
                desc,
                offset: off as u64,
            });
        }
    }
    p
}

#[no_mangle]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    unsafe { mmap(addr, len, prot, flags, fd, off) }
}

/// Writes back the part of `m` inside the file's size.
fn write_back(m: &Shared) -> c_int {
    let fs = m.desc_fs();
    let size = fs.stat(m.desc.ino()).map(|s| s.size).unwrap_or(0);
    let n = (size.saturating_sub(m.offset) as usize).min(m.len);
    let bytes = unsafe { std::slice::from_raw_parts(m.addr as *const u8, n) };
    match m.desc.file().and_then(|f| fs.write(f, m.offset, bytes)) {
        Ok(_) => 0,
        Err(e) => {
            set_errno(e.0);
            -1
        }
    }
}

impl Shared {
    fn desc_fs(&self) -> Arc<dyn posix::backend::Backend> {
        self.desc.fs().clone()
    }

    fn overlaps(&self, addr: usize, len: usize) -> bool {
        addr < self.addr + self.len && self.addr < addr + len
    }
}

#[no_mangle]
pub unsafe extern "C" fn msync(addr: *mut c_void, len: size_t, flags: c_int) -> c_int {
    if !guard::inside() {
        let _g = guard::enter();
        if let Ok(s) = SHARED.lock() {
            for m in s.iter().filter(|m| m.overlaps(addr as usize, len)) {
                if write_back(m) < 0 {
                    return -1;
                }
                if flags & libc::MS_SYNC != 0 {
                    let _ = m.desc.file().and_then(|f| m.desc.fs().fsync(f, true));
                }
            }
        }
    }
    let real = real!(msync: fn(*mut c_void, size_t, c_int) -> c_int);
    unsafe { real(addr, len, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: size_t) -> c_int {
    if !guard::inside() {
        let _g = guard::enter();
        let gone: Vec<Shared> = match SHARED.lock() {
            Ok(mut s) => {
                let (hit, keep): (Vec<Shared>, Vec<Shared>) =
                    s.drain(..).partition(|m| m.overlaps(addr as usize, len));
                *s = keep;
                hit
            }
            Err(_) => Vec::new(),
        };
        for m in &gone {
            write_back(m);
        }
    }
    let real = real!(munmap: fn(*mut c_void, size_t) -> c_int);
    unsafe { real(addr, len) }
}
