//! The set*id family: a program that changes its identity keeps reaching augefs as its
//! new self. Each call runs libc's own (which applies it to every thread), then hands
//! the owner's posix layer the identity the kernel now checks files with: the
//! file-system uid and gid (which follow the effective ones unless `setfsuid` and
//! `setfsgid` moved them) and the supplementary groups.
#![expect(
    clippy::undocumented_unsafe_blocks,
    reason = "each exported function runs under the C contract of the libc function it \
              replaces"
)]

use crate::guard;
use crate::real::real;
use crate::state;
use libc::{c_int, gid_t, size_t, uid_t};

/// The identity the kernel checks file access with, now.
fn file_creds() -> vfs::Creds {
    // setfsuid(-1) and setfsgid(-1) change nothing and return the current values
    // (libc's, not ours below: this library's own definitions come first).
    let fsuid = real!(setfsuid: fn(uid_t) -> c_int);
    let fsgid = real!(setfsgid: fn(gid_t) -> c_int);
    let uid = unsafe { fsuid(uid_t::MAX) } as u32;
    let gid = unsafe { fsgid(gid_t::MAX) } as u32;
    let mut creds = vfs::Creds::of_process();
    creds.uid = uid;
    creds.gid = gid;
    creds
}

/// After a successful identity change: the owner's posix layer follows.
fn follow(r: c_int) -> c_int {
    if r == 0 {
        if let Some(px) = state::owner() {
            let _g = guard::enter();
            px.set_creds(file_creds());
        }
    }
    r
}

macro_rules! id_call {
    ($name:ident ( $($arg:ident : $ty:ty),* )) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> c_int {
            let real = real!($name: fn($($ty),*) -> c_int);
            follow(unsafe { real($($arg),*) })
        }
    };
}

id_call!(setuid(uid: uid_t));
id_call!(setgid(gid: gid_t));
id_call!(seteuid(uid: uid_t));
id_call!(setegid(gid: gid_t));
id_call!(setreuid(ruid: uid_t, euid: uid_t));
id_call!(setregid(rgid: gid_t, egid: gid_t));
id_call!(setresuid(ruid: uid_t, euid: uid_t, suid: uid_t));
id_call!(setresgid(rgid: gid_t, egid: gid_t, sgid: gid_t));
id_call!(setgroups(n: size_t, list: *const gid_t));

/// `setfsuid` returns the previous value, not a status: follow whenever it may have
/// changed.
#[no_mangle]
pub unsafe extern "C" fn setfsuid(uid: uid_t) -> c_int {
    let real = real!(setfsuid: fn(uid_t) -> c_int);
    let r = unsafe { real(uid) };
    follow(0);
    r
}

#[no_mangle]
pub unsafe extern "C" fn setfsgid(gid: gid_t) -> c_int {
    let real = real!(setfsgid: fn(gid_t) -> c_int);
    let r = unsafe { real(gid) };
    follow(0);
    r
}
