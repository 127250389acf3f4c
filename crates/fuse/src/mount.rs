//! Mounting and unmounting a FUSE file system: as root with mount(2) on a /dev/fuse
//! descriptor of our own; otherwise through the setuid `fusermount3`, which mounts and
//! hands the descriptor back over a socket (its `_FUSE_COMMFD` protocol: one byte of
//! data with the descriptor as SCM_RIGHTS ancillary data).
//!
//! Invariants:
//! - `default_permissions` is always set: the kernel checks permissions
//!   (docs/SEMANTICS.md §4), before the vfs checks them again.
//! - The file-system type is `fuse.augefs` (a subtype of fuse, as /proc/mounts shows it).
//! - `nosuid` and `nodev` are on unless `suid`/`dev` were asked for (as fusermount3
//!   does for every user).

use crate::options::MountOptions;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

/// The kernel mount's flags and its fuse options (`fd=` aside) for `opts`.
fn kernel_options(opts: &MountOptions) -> (libc::c_ulong, Vec<String>) {
    let mut flags = libc::MS_NOATIME;
    let has = |f: &str| opts.flags.iter().any(|x| x == f);
    if !has("dev") {
        flags |= libc::MS_NODEV;
    }
    if !has("suid") {
        flags |= libc::MS_NOSUID;
    }
    if has("noexec") {
        flags |= libc::MS_NOEXEC;
    }
    if opts.read_only {
        flags |= libc::MS_RDONLY;
    }
    let mut fuse = vec!["default_permissions".to_string()];
    // allow_root is allow_other for the kernel; the session turns away everyone but
    // root and the owner.
    if opts.allow_other || opts.allow_root {
        fuse.push("allow_other".to_string());
    }
    (flags, fuse)
}

/// Mounts on `dir`; the session's /dev/fuse descriptor. Root mounts with mount(2)
/// and, if refused that (a container without CAP_SYS_ADMIN, a /dev/fuse it may not
/// open), through fusermount3 as other users do. A failure says what was missing and
/// the fix, naming /dev/fuse or fusermount3, not only the errno.
pub fn mount(dir: &Path, fsname: &str, opts: &MountOptions) -> io::Result<OwnedFd> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let root = match mount_as_root(dir, fsname, opts) {
            Ok(fd) => return Ok(fd),
            Err(e) => e,
        };
        let refused = root.kind() == io::ErrorKind::PermissionDenied; // EPERM, EACCES
        if !refused || !fusermount_installed() {
            return Err(root);
        }
    }
    mount_with_fusermount(dir, fsname, opts).map_err(|e| explain_fusermount(e, dir))
}

/// Sets the kernel's read-ahead of the FUSE mount at `point` (a canonical path) to `kib`
/// KiB, through the mount's backing device info in sysfs, named after the superblock's
/// device as the mount table gives it (a stat of the mount point would wait for a
/// request thread). Only root may write it; the INIT reply cannot raise it past the
/// kernel's 128 KiB, and the kernel clamps it to that at INIT, so this comes after.
pub fn set_read_ahead(point: &Path, kib: u32) -> io::Result<()> {
    let entry = platform::mountinfo::mounts()
        .into_iter()
        .rev()
        .find(|m| m.point == point && m.fstype.starts_with("fuse"))
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("no FUSE mount on {} in the mount table", point.display()),
            )
        })?;
    let path = format!("/sys/class/bdi/{}/read_ahead_kb", entry.dev);
    std::fs::write(&path, format!("{kib}\n"))
        .map_err(|e| io::Error::new(e.kind(), format!("{path}: {e}")))
}

/// Whether `fusermount3` is on the PATH.
fn fusermount_installed() -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|d| d.join("fusermount3").is_file()))
}

/// `e`, a failure of the fusermount3 path, with what to do about it; the mount point,
/// which the caller names, is not repeated.
fn explain_fusermount(e: io::Error, dir: &Path) -> io::Error {
    if e.kind() == io::ErrorKind::NotFound {
        return io::Error::new(
            e.kind(),
            "fusermount3 is not installed: users other than root mount through it \
             (Debian/Ubuntu: apt install fuse3), or mount as root",
        );
    }
    let text = e.to_string().replace(&format!(" {}", dir.display()), "");
    if text.contains("/dev/fuse") {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata("/dev/fuse")
            .map(|m| format!("{:o}", m.permissions().mode() & 0o777))
            .unwrap_or_else(|_| "missing".into());
        return io::Error::other(format!(
            "{text} (/dev/fuse mode {mode}: let users open it, `chmod 0666 /dev/fuse` as \
             fuse3's udev rule does; check that fusermount3 is setuid root and its file \
             system is not mounted nosuid; or mount as root)"
        ));
    }
    io::Error::other(text)
}

fn cstr(b: &[u8]) -> io::Result<CString> {
    CString::new(b).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in a name"))
}

fn mount_as_root(dir: &Path, fsname: &str, opts: &MountOptions) -> io::Result<OwnedFd> {
    use std::os::unix::fs::MetadataExt;
    let fd = crate::channel::open_dev_fuse().map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot open /dev/fuse: {e} (load the fuse module: modprobe fuse)"),
        )
    })?;
    let mode = std::fs::metadata(dir)?.mode() & libc::S_IFMT;
    let (flags, fuse) = kernel_options(opts);
    // SAFETY: getuid and getgid have no preconditions.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let data = format!(
        "fd={},rootmode={mode:o},user_id={uid},group_id={gid},{}",
        fd.as_raw_fd(),
        fuse.join(",")
    );
    let (source, target) = (cstr(fsname.as_bytes())?, cstr(dir.as_os_str().as_bytes())?);
    let (fstype, data) = (c"fuse.augefs", cstr(data.as_bytes())?);
    // SAFETY: every pointer is a NUL-terminated string alive for the call.
    let r = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            flags,
            data.as_ptr().cast(),
        )
    };
    if r != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("mount(2) of a FUSE file system: {e}"),
        ));
    }
    Ok(fd)
}

fn mount_with_fusermount(dir: &Path, fsname: &str, opts: &MountOptions) -> io::Result<OwnedFd> {
    let (flags, mut list) = kernel_options(opts);
    list.push(format!("fsname={}", fsname.replace(',', "\\,")));
    list.push("subtype=augefs".to_string());
    for (bit, name) in [
        (libc::MS_NODEV, "nodev"),
        (libc::MS_NOSUID, "nosuid"),
        (libc::MS_NOEXEC, "noexec"),
        (libc::MS_NOATIME, "noatime"),
    ] {
        if flags & bit != 0 {
            list.push(name.to_string());
        }
    }
    list.push(if opts.read_only { "ro" } else { "rw" }.to_string());
    let mut pair = [0; 2];
    // SAFETY: `pair` has room for the two descriptors socketpair returns.
    if unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, pair.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nothing else.
    let (ours, theirs) = unsafe { (OwnedFd::from_raw_fd(pair[0]), OwnedFd::from_raw_fd(pair[1])) };
    let keep = theirs.as_raw_fd();
    let mut cmd = Command::new("fusermount3");
    cmd.arg("-o")
        .arg(list.join(","))
        .arg("--")
        .arg(dir)
        .env("_FUSE_COMMFD", keep.to_string())
        .stdin(Stdio::null())
        .stderr(Stdio::piped());
    let our_raw = ours.as_raw_fd();
    // SAFETY: between fork and exec only async-signal-safe calls: close our end (the
    // child must not hold it, or EOF never comes) and keep theirs open across exec.
    unsafe {
        cmd.pre_exec(move || {
            libc::close(our_raw);
            let fl = libc::fcntl(keep, libc::F_GETFD);
            libc::fcntl(keep, libc::F_SETFD, fl & !libc::FD_CLOEXEC);
            Ok(())
        });
    }
    let child = cmd.spawn()?;
    drop(theirs);
    let received = receive_fd(&ours);
    let out = child.wait_with_output()?;
    match received {
        Ok(Some(fd)) if out.status.success() => Ok(fd),
        Ok(_) => Err(io::Error::other(format!(
            "fusermount3 failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))),
        Err(e) => Err(e),
    }
}

/// Receives one descriptor sent as SCM_RIGHTS on `sock`; None at EOF.
fn receive_fd(sock: &OwnedFd) -> io::Result<Option<OwnedFd>> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // Room for one cmsghdr carrying one int, 8-byte aligned.
    let mut control = [0u64; 4];
    // SAFETY: msghdr is plain data; zeroed is a valid empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control);
    // SAFETY: `msg` points at live buffers of the stated lengths.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: CMSG_FIRSTHDR reads the header recvmsg filled in.
    let cmsg = unsafe { libc::CMSG_FIRSTHDR(&msg) };
    if n == 0 || cmsg.is_null() {
        return Ok(None);
    }
    // SAFETY: `cmsg` points into `control`, which recvmsg filled with a whole header.
    let (level, kind) = unsafe { ((*cmsg).cmsg_level, (*cmsg).cmsg_type) };
    if level != libc::SOL_SOCKET || kind != libc::SCM_RIGHTS {
        return Ok(None);
    }
    // SAFETY: an SCM_RIGHTS message carries at least one int after its header.
    let fd = unsafe { std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::c_int>()) };
    // SAFETY: the kernel installed `fd` in this process for us.
    Ok(Some(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// Unmounts `dir`: plainly, or detached (`lazy`) so that it ends at its last close.
pub fn unmount(dir: &Path, lazy: bool) -> io::Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let target = cstr(dir.as_os_str().as_bytes())?;
        let flags = if lazy { libc::MNT_DETACH } else { 0 };
        // SAFETY: a NUL-terminated path.
        if unsafe { libc::umount2(target.as_ptr(), flags) } != 0 {
            return Err(io::Error::last_os_error());
        }
        return Ok(());
    }
    let mut cmd = Command::new("fusermount3");
    cmd.arg("-u");
    if lazy {
        cmd.arg("-z");
    }
    let out = cmd.arg("--").arg(dir).output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ))
    }
}

/// Marks the mount on `dir` read-only in the kernel: a bind remount changes the mount's
/// own flags, so /proc/mounts shows `ro`, statfs reports ST_RDONLY and the kernel
/// refuses writes with EROFS before they reach the daemon. The mount's other flags are
/// kept. EBUSY while a file there is open for writing (the caller retries).
pub fn remount_read_only(dir: &Path) -> io::Result<()> {
    let path = cstr(dir.as_os_str().as_bytes())?;
    // SAFETY: statvfs fills the struct for a NUL-terminated path.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let keep = [
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
    ];
    let mut flags = libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY;
    for (st_flag, ms_flag) in keep {
        if st.f_flag & st_flag != 0 {
            flags |= ms_flag;
        }
    }
    // SAFETY: NUL-terminated path; no source, type or data for a bind remount.
    let r = unsafe {
        libc::mount(
            std::ptr::null(),
            path.as_ptr(),
            std::ptr::null(),
            flags,
            std::ptr::null(),
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
