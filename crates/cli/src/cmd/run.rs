//! `augefs run [--image I] [--prefix /augefs] [--log FILE] -- CMD...`: runs CMD with the
//! interposer (`libaugefs_preload.so`, found next to this binary) so that paths under
//! the prefix reach the image without the kernel (docs/DESIGN.md §12).
//!
//! `augefs run --mount DIR -- CMD...` instead attaches CMD (and every process it starts)
//! to the instance serving the mount at DIR: paths under DIR are served by that
//! instance directly, without FUSE (env AUGEFS_MOUNT). It execs CMD: nothing is left
//! to clean up. `--image` on an image an `augefs mount` serves does the same (found in
//! the mount table: a FUSE mount whose source is the image), paths under the prefix
//! served by that instance.
//!
//! It creates a private bridge mount point (env AUGEFS_BRIDGE) that the first process
//! to attach the image serves, passes the configuration in the environment, waits for
//! CMD and exits with its status (128 + N when a signal N ended it). Afterwards it
//! lazily unmounts a bridge a crashed owner left and removes the mount point.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// The interposer's file name (a cdylib of crates/preload).
pub const PRELOAD_LIB: &str = "libaugefs_preload.so";

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Image file or block device (formatted by `augefs mkfs`); default: env AUGEFS_IMAGE.
    #[arg(long, conflicts_with = "mount")]
    pub image: Option<PathBuf>,
    /// Attach to the instance serving this `augefs mount` directory: paths under it
    /// are served directly, without FUSE.
    #[arg(long, value_name = "DIR")]
    pub mount: Option<PathBuf>,
    /// Paths under this prefix go to augefs.
    #[arg(long, default_value = "/augefs")]
    pub prefix: String,
    /// The PMR file the image was formatted with.
    #[arg(long)]
    pub pmr: Option<PathBuf>,
    /// Where the interposer logs (unsupported calls, attach errors); default: stderr.
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// The command and its arguments.
    #[arg(required = true, last = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

fn abs(p: &Path) -> Result<PathBuf, String> {
    std::fs::canonicalize(p).map_err(|e| format!("{}: {e}", p.display()))
}

/// The interposer next to this executable.
pub fn preload_lib() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find my executable: {e}"))?;
    let lib = exe.with_file_name(PRELOAD_LIB);
    if lib.exists() {
        return Ok(lib);
    }
    Err(format!(
        "{} not found next to {} (build it: cargo build -p augefs-preload, with the same \
         profile as augefs)",
        PRELOAD_LIB,
        exe.display()
    ))
}

pub fn run(args: Args) -> ExitCode {
    match run_inner(args) {
        Ok(code) => code,
        Err(message) => {
            eprintln!("augefs: error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// The directory of the `augefs mount` serving `image`, if one does; an image another
/// process serves otherwise (another `augefs run`) cannot be attached: say so at once,
/// and who, instead of starting a program whose every call under the prefix would
/// fail. A holder that is only finishing is waited for by the program.
fn mount_serving(image: &Path) -> Result<Option<PathBuf>, String> {
    let opts = device::OpenOptions {
        read_only: true,
        lock: device::LockMode::Shared,
        ..device::OpenOptions::default()
    };
    match device::open(image, &opts) {
        Err(device::DeviceError::InUse { .. }) => {
            let h = device::holder::holder(image);
            match h.mounted_at {
                Some(dir) => Ok(Some(dir)),
                None if h.serving => Err(format!("{} is {h}", image.display())),
                None => Ok(None),
            }
        }
        _ => Ok(None),
    }
}

/// The environment that attaches a program to the instance serving `dir`.
fn attach_env(cmd: &mut Command, dir: &Path) -> Result<(), String> {
    let dir = abs(dir)?;
    let socket = instance::socket_path(&dir);
    if !socket.exists() {
        return Err(format!(
            "{}: no augefs instance serves this directory (no {}): mount it with \
             `augefs mount IMAGE {}` first",
            dir.display(),
            socket.display(),
            dir.display()
        ));
    }
    let auto = std::env::var("AUGEFS_MAILBOX").map_or(true, |m| m != "off" && m != "unprotected");
    if auto && !instance::pkey::available() {
        eprintln!("augefs: {}", instance::pkey::UNAVAILABLE);
    }
    cmd.env("AUGEFS_MOUNT", &dir)
        .env_remove("AUGEFS_IMAGE")
        .env_remove("AUGEFS_BRIDGE")
        .env_remove("AUGEFS_PREFIX");
    Ok(())
}

/// Runs `cmd` as system(3) would and returns its exit status as ours.
fn wait_for(mut cmd: Command, name: &OsString) -> Result<ExitCode, String> {
    // Like system(3): Ctrl-C and Ctrl-\ are the command's; this process waits.
    // SAFETY: setting the disposition of two signals to "ignore" touches no memory.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGQUIT, libc::SIG_IGN);
    }
    let status = cmd
        .status()
        .map_err(|e| format!("cannot run {}: {e}", Path::new(name).display()))?;
    Ok(exit_code(status))
}

fn exit_code(status: std::process::ExitStatus) -> ExitCode {
    let code = match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        (None, None) => 1,
    };
    ExitCode::from(code.clamp(0, 255) as u8)
}

fn preload_var() -> Result<OsString, String> {
    let mut preload = preload_lib()?.into_os_string();
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|o| !o.is_empty()) {
        preload.push(" ");
        preload.push(old);
    }
    Ok(preload)
}

/// Execs the command attached to the instance serving `dir`; with `prefix`, paths
/// under it (not under `dir`) are the ones served directly.
fn exec_attached(args: &Args, dir: &Path, prefix: Option<&str>) -> Result<ExitCode, String> {
    let mut cmd = Command::new(&args.command[0]);
    cmd.args(&args.command[1..])
        .env("LD_PRELOAD", preload_var()?)
        .env_remove("AUGEFS_FDS")
        .env_remove("AUGEFS_CWD");
    attach_env(&mut cmd, dir)?;
    if let Some(p) = prefix {
        cmd.env("AUGEFS_PREFIX", p);
    }
    log_env(&mut cmd, args.log.as_deref())?;
    // Nothing to clean up afterwards: become the program (its pid, its signals).
    let err = std::os::unix::process::CommandExt::exec(&mut cmd);
    Err(format!(
        "cannot run {}: {err}",
        Path::new(&args.command[0]).display()
    ))
}

fn run_inner(args: Args) -> Result<ExitCode, String> {
    if let Some(dir) = &args.mount {
        return exec_attached(&args, dir, None);
    }
    let image = args
        .image
        .clone()
        .or_else(|| std::env::var_os("AUGEFS_IMAGE").map(PathBuf::from))
        .ok_or("no image: give --image IMAGE (or set AUGEFS_IMAGE)")?;
    if !image.exists() {
        return Err(format!("{}: no such image file or device", image.display()));
    }
    if !args.prefix.starts_with('/') || args.prefix.len() < 2 {
        return Err(format!(
            "--prefix {:?}: must be an absolute path other than /",
            args.prefix
        ));
    }
    if let Some(dir) = mount_serving(&image)? {
        // The mount's instance holds the image: attach to it, coherent with the mount.
        eprintln!(
            "augefs: {} is mounted at {}: attaching to its instance",
            image.display(),
            dir.display()
        );
        return exec_attached(&args, &dir, Some(&args.prefix));
    }
    let preload = preload_var()?;
    let scratch = tempfile_dir()?;
    let bridge = scratch.join("bridge");
    std::fs::create_dir(&bridge).map_err(|e| format!("{}: {e}", bridge.display()))?;
    let mut cmd = Command::new(&args.command[0]);
    cmd.args(&args.command[1..])
        .env("LD_PRELOAD", preload)
        .env("AUGEFS_IMAGE", abs(&image)?)
        .env("AUGEFS_PREFIX", &args.prefix)
        .env("AUGEFS_BRIDGE", &bridge)
        .env_remove("AUGEFS_FDS")
        .env_remove("AUGEFS_CWD");
    if let Some(p) = &args.pmr {
        cmd.env("AUGEFS_PMR", abs(p)?);
    }
    log_env(&mut cmd, args.log.as_deref())?;
    let status = wait_for(cmd, &args.command[0]);
    clean_up(&bridge, &scratch);
    status
}

fn log_env(cmd: &mut Command, log: Option<&Path>) -> Result<(), String> {
    if let Some(l) = log {
        let here = std::env::current_dir().map_err(|e| format!("current directory: {e}"))?;
        cmd.env("AUGEFS_LOG", here.join(l));
    }
    Ok(())
}

/// A fresh private directory for the bridge mount point.
fn tempfile_dir() -> Result<PathBuf, String> {
    let base = std::env::temp_dir();
    let template = base.join("augefs-run-XXXXXX");
    let mut bytes = template.into_os_string().into_encoded_bytes();
    bytes.push(0);
    // SAFETY: `bytes` is a NUL-terminated template that mkdtemp rewrites in place.
    let p = unsafe { libc::mkdtemp(bytes.as_mut_ptr().cast()) };
    if p.is_null() {
        return Err(format!(
            "cannot create a directory in {}: {}",
            base.display(),
            std::io::Error::last_os_error()
        ));
    }
    bytes.pop();
    // SAFETY: mkdtemp left the bytes a path of the same length.
    Ok(PathBuf::from(unsafe {
        OsString::from_encoded_bytes_unchecked(bytes)
    }))
}

/// Detaches a bridge still mounted (its owner crashed or still runs in the background)
/// and removes the scratch directory.
fn clean_up(bridge: &Path, scratch: &Path) {
    let mounted = platform::mountinfo::mounts()
        .iter()
        .any(|m| m.point == bridge);
    if mounted {
        let _ = Command::new("fusermount3")
            .arg("-u")
            .arg("-z")
            .arg(bridge)
            .output();
        if let Ok(c) = std::ffi::CString::new(bridge.as_os_str().as_encoded_bytes()) {
            // SAFETY: a NUL-terminated path; failure (already gone) is fine.
            unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        }
    }
    let _ = std::fs::remove_dir(bridge);
    let _ = std::fs::remove_dir(scratch);
}
