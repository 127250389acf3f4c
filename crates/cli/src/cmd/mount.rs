//! `augefs mount IMAGE DIR [-f] [-o OPT,...] [--pmr FILE]`: the FUSE mount
//! (crates/fuse, docs/DESIGN.md §11).
//!
//! Without `-f` the command starts itself again as a daemon (`--daemon-child`, a new
//! session, cwd `/`) and exits 0 only once the daemon says the mount works; otherwise it
//! prints the daemon's error and exits non-zero. The daemon (or `-f`) serves until the
//! kernel ends the mount, through `umount DIR`, `fusermount3 -u DIR` or SIGTERM, SIGINT
//! or SIGHUP (which unmount, lazily if files are still open), then unmounts the file
//! system so everything is durable, and exits 0.
//!
//! Invoked as `mount.fuse.augefs IMAGE DIR [-o OPTS]` (a symlink to the binary, the
//! helper `mount -t fuse.augefs` and /etc/fstab run), it behaves as `augefs mount`.

use augefs_fuse::{serve, MountOptions};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// What a daemon prints on stdout once its mount works.
const READY: &str = "augefs-mount-ready";

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Image file or block device (formatted by `augefs mkfs`), or LABEL=NAME or
    /// UUID=U: the block device, or image file in a directory of env
    /// AUGEFS_IMAGE_PATH, with that label or uuid.
    pub image: PathBuf,
    /// Directory to mount on.
    pub dir: PathBuf,
    /// Stay in the foreground (otherwise: a daemon, once the mount works).
    #[arg(short = 'f', long)]
    pub foreground: bool,
    /// Mount options, comma-separated: ro, commit=SECS (seconds between background
    /// commits, default 5; 0: only fsync and unmount), allow_other, allow_root,
    /// writeback_cache, threads=N (request threads; default two per CPU), nouring (serve
    /// through /dev/fuse even where the kernel offers FUSE over io_uring), stats
    /// (per-request counts and times in the log at unmount, of FUSE's requests and of
    /// attached processes' requests and posts), shared_pages=MIB (the most file data
    /// each user's shared data table keeps for attached processes, default a
    /// thirty-second of memory up to 512; 0: none), read_ahead=KIB (the kernel's
    /// read-ahead for the mount, default 2048; 0: the kernel's 128), fsname=NAME, pmr=FILE,
    /// nosuid, nodev, noexec (and suid, dev, exec); fstab's defaults, noauto, nofail,
    /// _netdev, rw, noatime are accepted. Permissions are always checked by the kernel
    /// (default_permissions).
    #[arg(short = 'o', value_name = "OPT,...")]
    pub options: Vec<String>,
    /// The PMR file the image was formatted with (as -o pmr=FILE).
    #[arg(long)]
    pub pmr: Option<PathBuf>,
    /// IO backend.
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: device::BackendChoice,
    /// Where a background mount's daemon reports, once the mount is up: its start, its
    /// unmount and anything that goes wrong (appended; default: nowhere).
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// Internal: this process is the daemon of a background mount.
    #[arg(long, hide = true)]
    pub daemon_child: bool,
}

pub fn run(mut args: Args) -> Result<(), String> {
    args.image = super::find::resolve(&args.image)?;
    let mut opts = MountOptions::parse(&args.options).map_err(|e| e.to_string())?;
    if args.pmr.is_some() {
        opts.pmr.clone_from(&args.pmr);
    }
    check_paths(&args)?;
    if !args.foreground && !args.daemon_child {
        return start_daemon(&args);
    }
    // The source in /proc/mounts is the image's full path: other commands find the
    // mount by it (device::holder).
    let image_path =
        std::fs::canonicalize(&args.image).map_err(|e| format!("{}: {e}", args.image.display()))?;
    let image = image_path.display().to_string();
    let image_opts = vfs::image::ImageOptions {
        pmr: opts.pmr.clone(),
        read_only: opts.read_only,
        backend: args.backend,
        wait_for_holder: crate::ui::HOLDER_WAIT,
        ..vfs::image::ImageOptions::default()
    };
    let fs = vfs::image::open_image(
        &image_path,
        &image_opts,
        &mut crate::ui::say_waiting(&args.image),
    )
    .map_err(|e| e.to_string())?;
    let dir = std::fs::canonicalize(&args.dir).unwrap_or_else(|_| args.dir.clone());
    let (img, at) = (image.clone(), dir.clone());
    fs.on_read_only(Box::new(move |why| say_read_only(&img, &at, why)));
    let mut signals = Signals::new([SIGTERM, SIGINT, SIGHUP])
        .map_err(|e| format!("cannot install signal handlers: {e}"))?;
    let daemon = args.daemon_child;
    let log = args.log.clone();
    let mounted = format!("augefs: {image} mounted on {}", args.dir.display());
    let at = dir.clone();
    let stats = opts.stats;
    let settings = instance::server::Settings {
        timing: stats,
        shared_pages: opts
            .shared_pages_mib
            .map_or_else(instance::datatable::default_bytes, |mib| mib << 20),
    };
    let served = serve(fs, &args.dir, &image, &opts, move |ready| {
        let unmounter = ready.unmounter;
        std::thread::spawn(move || {
            for _ in signals.forever() {
                if let Err(e) = unmounter.unmount() {
                    eprintln!("augefs: {e}");
                }
            }
        });
        let instance = start_instance(&at, ready.fs, ready.caches, settings);
        if daemon {
            announce_ready(log.as_deref());
            eprintln!("{mounted}");
        }
        Box::new(move || {
            if let Some(i) = instance {
                let report = i.stop();
                if stats {
                    eprint!("{report}");
                }
            }
        })
    })
    .map_err(|e| e.to_string());
    if daemon && served.is_ok() {
        eprintln!("augefs: {} unmounted", args.image.display());
    }
    served
}

/// The mount's reads, kept for the attached processes that may read them
/// (`instance::server::KernelReads`).
struct KernelReads(instance::server::KernelReads);

impl augefs_fuse::ReadTap for KernelReads {
    fn before(&self, uid: u32, gid: u32, ino: u64) -> Option<u64> {
        self.0.before(uid, gid, ino)
    }

    #[allow(clippy::too_many_arguments)]
    fn after(
        &self,
        uid: u32,
        gid: u32,
        ino: u64,
        token: u64,
        offset: u64,
        data: vfs::ReadView,
        asked: usize,
    ) {
        self.0.after(uid, gid, ino, token, offset, data, asked);
    }
}

/// Serves processes that attach to the mount at `dir` directly (`augefs run --mount`,
/// docs/DESIGN.md §12.5), telling the kernel's caches of each change they make. Without
/// it (no socket directory) the mount still serves everyone through the kernel.
fn start_instance(
    dir: &Path,
    fs: std::sync::Arc<vfs::FileSystem>,
    caches: augefs_fuse::KernelCaches,
    settings: instance::server::Settings,
) -> Option<instance::server::Instance> {
    let kernel = caches.clone();
    let notify = instance::Notify(std::sync::Arc::new(move |c| match c {
        instance::Change::Entry { parent, name } => caches.entry_changed(parent, name),
        instance::Change::Attrs { ino } => caches.attrs_changed(ino),
        instance::Change::Data { ino } => caches.data_changed(ino),
    }));
    let socket = instance::socket_path(dir);
    match instance::server::Instance::start_with(fs, &socket, Some(notify), settings) {
        Ok(i) => {
            kernel.set_read_tap(std::sync::Arc::new(KernelReads(i.kernel_reads())));
            if !instance::pkey::available() {
                eprintln!("augefs: {}", instance::pkey::UNAVAILABLE);
            }
            Some(i)
        }
        Err(e) => {
            eprintln!(
                "augefs: {}: processes cannot attach directly ({e}); they use the mount",
                socket.display()
            );
            None
        }
    }
}

/// A device failure turned the file system read-only: says so where users look. The
/// daemon's standard error (its `--log`), the kernel's log (dmesg, as a kernel file
/// system reports "remounting read-only"), and the mount's own flags: a bind remount
/// read-only, retried each second while files are open for writing there (EBUSY), so
/// /proc/mounts and statfs show `ro`.
fn say_read_only(image: &str, dir: &Path, why: &str) {
    let line = format!(
        "augefs: {image} on {}: the file system is read-only from now on: {why}",
        dir.display()
    );
    eprintln!("{line}");
    if let Ok(mut kmsg) = std::fs::OpenOptions::new().write(true).open("/dev/kmsg") {
        // "<3>": error level. Best effort: only root may write the kernel's log.
        let _ = kmsg.write_all(format!("<3>{line}\n").as_bytes());
    }
    let dir = dir.to_path_buf();
    std::thread::spawn(move || loop {
        match augefs_fuse::mount::remount_read_only(&dir) {
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                std::thread::sleep(std::time::Duration::from_secs(1));
            }
            Err(e) => {
                eprintln!("augefs: cannot mark {} read-only: {e}", dir.display());
                return;
            }
            Ok(()) => return,
        }
    });
}

/// Errors a user can fix, found before anything is opened.
fn check_paths(args: &Args) -> Result<(), String> {
    if !args.image.exists() {
        return Err(format!(
            "{}: no such image file or device",
            args.image.display()
        ));
    }
    match std::fs::metadata(&args.dir) {
        Ok(m) if m.is_dir() => kernel_owned(&args.dir),
        Ok(_) => Err(format!("{}: not a directory", args.dir.display())),
        Err(e) => Err(format!("{}: {e}", args.dir.display())),
    }
}

/// Refuses a directory of the kernel's own file systems (/proc, /sys and the like):
/// a mount there hides what the system reads (a process's /proc entry, a device's
/// attributes).
fn kernel_owned(dir: &Path) -> Result<(), String> {
    use std::os::unix::ffi::OsStrExt;
    const KERNEL: [(i64, &str); 5] = [
        (0x9fa0, "proc"),
        (0x6265_6572, "sysfs"),
        (0x6462_6720, "debugfs"),
        (0x7472_6163, "tracefs"),
        (0x6367_7270, "cgroup2"),
    ];
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| format!("{}: a path with a NUL byte", dir.display()))?;
    // SAFETY: statfs is plain data; all zero is a valid value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: statfs writes one struct into `st`, which is live; `c` is NUL-terminated.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return Ok(()); // Whatever stops the mount says so itself.
    }
    match KERNEL.iter().find(|(magic, _)| *magic == st.f_type as i64) {
        Some((_, name)) => Err(format!(
            "{}: a directory of the kernel's {name} file system: mount on a directory of \
             an ordinary file system",
            dir.display()
        )),
        None => Ok(()),
    }
}

/// Tells the waiting parent the mount works, then lets go of its pipes (they would
/// keep a caller that reads the parent's output waiting for the daemon's exit); standard
/// error goes to `log` (appended) if given.
fn announce_ready(log: Option<&Path>) {
    let mut out = std::io::stdout();
    // A parent that died meanwhile changes nothing: the mount is up either way.
    let _ = writeln!(out, "{READY}").and_then(|()| out.flush());
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        use std::os::fd::AsRawFd;
        let log = log.and_then(|p| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .ok()
        });
        for fd in 0..=2 {
            let to = match (&log, fd) {
                (Some(l), 2) => l.as_raw_fd(),
                _ => null.as_raw_fd(),
            };
            // SAFETY: dup2 onto the standard descriptors, which this process owns; Rust's
            // handles for them stay valid (they now refer to /dev/null or the log).
            unsafe { libc::dup2(to, fd) };
        }
    }
}

/// Starts the daemon and waits until it reports the mount working or fails.
fn start_daemon(args: &Args) -> Result<(), String> {
    let abs = |p: &Path| std::fs::canonicalize(p).map_err(|e| format!("{}: {e}", p.display()));
    let exe = std::env::current_exe().map_err(|e| format!("cannot find my executable: {e}"))?;
    let mut cmd = Command::new(exe);
    cmd.arg("mount")
        .arg(abs(&args.image)?)
        .arg(abs(&args.dir)?)
        .arg("--daemon-child")
        .arg("--backend")
        .arg(args.backend.name());
    for o in &args.options {
        cmd.arg("-o").arg(o);
    }
    if let Some(p) = &args.pmr {
        cmd.arg("--pmr").arg(abs(p)?);
    }
    if let Some(l) = &args.log {
        // The daemon runs in /; the log may not exist yet.
        let here = std::env::current_dir().map_err(|e| format!("current directory: {e}"))?;
        cmd.arg("--log").arg(here.join(l));
    }
    cmd.current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: setsid is async-signal-safe and touches no memory of this process; the
    // daemon leaves the terminal's session so hangups and Ctrl-C there do not reach it.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start the mount daemon: {e}"))?;
    let mut line = String::new();
    if let Some(out) = child.stdout.take() {
        // EOF (the daemon exited) leaves `line` empty.
        let _ = BufReader::new(out).read_line(&mut line);
    }
    if line.trim() == READY {
        return Ok(());
    }
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    let status = child
        .wait()
        .map_err(|e| format!("waiting for the mount daemon: {e}"))?;
    let err = err.trim();
    let err = err.strip_prefix("augefs: error: ").unwrap_or(err);
    Err(if err.is_empty() {
        format!("the mount daemon failed ({status})")
    } else {
        err.to_string()
    })
}
