//! The targets of `bench fs`: where a cell runs and how its device bytes are counted.
//!
//! - `api`: augefs through the vfs Rust API on the augefs image (opened with O_DIRECT),
//!   counted by the device layer's accounting; `api-view`: the same, reading by
//!   zero-copy views (`File::read_view`); `api-pmr`: the same with MetaDB's WAL on an
//!   emulated PMR (`crate::pmr`), whose persisted bytes are counted apart;
//! - `dir[:PATH]`: a directory through std::fs (whatever kernel file system is under
//!   it), not counted;
//! - `ext2`, `ext4`, `xfs`, `btrfs`: made afresh on the loop device (direct IO) over the
//!   kernel image, counted by `/sys/block/loopN/stat`;
//! - `fuse`: the augefs image mounted by `augefs mount -f` (the `augefs` next to this
//!   binary) in a child process, std::fs on the mount point; the daemon's CPU time is
//!   counted, its device bytes are not visible here;
//! - `interposer`: `interposer.rs`.
//!
//! Invariants:
//! - Every cell starts on an empty file system (`fresh`): a new format, mkfs or
//!   directory; `finish` unmounts or removes it, also after a failed run.
//! - A cold drop leaves no cache of the measured file system: augefs and FUSE are
//!   mounted again (a FUSE unmount drops its pages with its superblock), loop targets
//!   unmounted, the kernel's caches dropped and mounted again, `dir` has the kernel's
//!   caches dropped (root only).
//! - Mounts, daemons and loop devices are undone by guards on every path out.

use super::ops::{ApiFs, Fs, PosixFs};
use crate::augefs as bench_augefs;
use crate::cpu;
use crate::image::open_device_released;
use crate::interrupt::{is_mount_point, on_interrupt, Registered, Undo};
use crate::kernelfs::{self, MOUNT_OPTIONS};
use crate::loopdev::{command, have_program, KernelMount, LoopDevice};
use crate::scratch::{self, MountPoint};
use device::{BackendChoice, Device};
use platform::{Clock, SystemClock};
use pmr::Pmr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The images of `bench fs` carry a fixed uuid: they never outlive the command.
pub const BENCH_FS_UUID: [u8; 16] = *b"augefs-bench-fs1";

/// How long a previous holder of the image (a FUSE daemon, an interposed worker) may
/// take to let go of it after it exited.
const IMAGE_RELEASE_WAIT: Duration = Duration::from_secs(10);

/// How long a FUSE daemon may take to mount or to exit after its unmount.
const DAEMON_WAIT: Duration = Duration::from_secs(30);

/// Device bytes read and written so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceBytes {
    pub read: u64,
    pub written: u64,
    /// Bytes persisted to the PMR, for a target that has one (not part of `written`).
    pub pmr_written: Option<u64>,
}

/// A target whose file system this process drives.
pub trait InProcess {
    /// Makes an empty file system and mounts it.
    fn fresh(&mut self) -> Result<(), String>;
    fn fs(&self) -> &dyn Fs;
    /// Drops every cache of the file system (see the module's invariants).
    fn drop_caches(&mut self) -> Result<(), String>;
    /// The device's bytes so far, where this target can count them.
    fn device_bytes(&self) -> Result<Option<DeviceBytes>, String>;
    /// CPU time so far of the processes serving the file system, other than this one.
    fn helper_cpu_ns(&self) -> u64 {
        0
    }
    /// The file system's root directory, where other processes can work in it (None:
    /// it lives in this process).
    fn root(&self) -> Option<&Path> {
        None
    }
    /// Unmounts or removes the file system.
    fn finish(&mut self) -> Result<(), String>;
}

/// Formats the augefs image afresh (opened and closed again).
pub fn format_image(image: &Path, backend: BackendChoice) -> Result<(), String> {
    let device = open_device_released(image, backend, IMAGE_RELEASE_WAIT)?;
    bench_augefs::format(&device, None, &SystemClock::new(), BENCH_FS_UUID)
}

/// augefs through the vfs Rust API; with a PMR, MetaDB's WAL on it (pmr mode).
pub struct Api {
    image: PathBuf,
    backend: BackendChoice,
    clock: Arc<dyn Clock>,
    /// Formatted with the image for every cell; open for the target's lifetime.
    pmr: Option<Arc<Pmr>>,
    device: Option<Arc<Device>>,
    fs: Option<ApiFs>,
    /// Reads by zero-copy views (the api-view target).
    view: bool,
}

impl Api {
    pub fn new(image: &Path, backend: BackendChoice, pmr: Option<Arc<Pmr>>) -> Api {
        Api {
            image: image.to_path_buf(),
            backend,
            clock: Arc::new(SystemClock::new()),
            pmr,
            device: None,
            fs: None,
            view: false,
        }
    }

    /// Reads by zero-copy views (`File::read_view`) instead of copying reads.
    pub fn reading_views(mut self, view: bool) -> Api {
        self.view = view;
        self
    }

    fn device(&self) -> &Arc<Device> {
        self.device.as_ref().expect("opened by fresh")
    }

    fn mount(&mut self) -> Result<(), String> {
        let fs = bench_augefs::mount(self.device(), self.pmr.as_ref(), &self.clock)?;
        self.fs = Some(ApiFs {
            fs,
            view: self.view,
        });
        Ok(())
    }

    fn unmount(&mut self) -> Result<(), String> {
        match self.fs.take() {
            Some(api) => bench_augefs::unmount(api.fs),
            None => Ok(()),
        }
    }
}

impl InProcess for Api {
    fn fresh(&mut self) -> Result<(), String> {
        self.unmount()?;
        let device = open_device_released(&self.image, self.backend, IMAGE_RELEASE_WAIT)?;
        let pmr = self.pmr.as_deref();
        bench_augefs::format(&device, pmr, self.clock.as_ref(), BENCH_FS_UUID)?;
        self.device = Some(device);
        self.mount()
    }

    fn fs(&self) -> &dyn Fs {
        self.fs.as_ref().expect("mounted by fresh")
    }

    fn drop_caches(&mut self) -> Result<(), String> {
        self.unmount()?;
        self.mount()
    }

    fn device_bytes(&self) -> Result<Option<DeviceBytes>, String> {
        let total = self.device().counters().snapshot().total();
        let pmr = self.pmr.as_ref().map(|p| p.counters().snapshot().total());
        Ok(Some(DeviceBytes {
            read: total.read_bytes,
            written: total.write_bytes,
            pmr_written: pmr.map(|p| p.write_bytes),
        }))
    }

    fn finish(&mut self) -> Result<(), String> {
        let unmounted = self.unmount();
        // Closed, so that the FUSE and interposer targets can open the image.
        self.device = None;
        unmounted
    }
}

impl Drop for Api {
    fn drop(&mut self) {
        if let Err(e) = self.finish() {
            eprintln!("augefs bench fs: {e}");
        }
    }
}

/// A directory through std::fs; each cell in a new subdirectory.
pub struct Dir {
    base: PathBuf,
    cells: u32,
    fs: Option<PosixFs>,
}

impl Dir {
    pub fn new(base: &Path) -> Result<Dir, String> {
        std::fs::create_dir_all(base).map_err(|e| format!("{}: {e}", base.display()))?;
        Ok(Dir {
            base: base.to_path_buf(),
            cells: 0,
            fs: None,
        })
    }
}

impl InProcess for Dir {
    fn fresh(&mut self) -> Result<(), String> {
        self.finish()?;
        self.cells += 1;
        let root = self
            .base
            .join(format!("bench-fs-{}-{}", std::process::id(), self.cells));
        std::fs::create_dir(&root).map_err(|e| format!("{}: {e}", root.display()))?;
        self.fs = Some(PosixFs { root });
        Ok(())
    }

    fn fs(&self) -> &dyn Fs {
        self.fs.as_ref().expect("made by fresh")
    }

    fn root(&self) -> Option<&Path> {
        self.fs.as_ref().map(|f| f.root.as_path())
    }

    fn drop_caches(&mut self) -> Result<(), String> {
        if !kernelfs::is_root() {
            return Err("cold reads on dir need root (to drop the kernel's caches)".to_string());
        }
        kernelfs::drop_caches()
    }

    /// The whole device under the directory (other processes' IO included: on a busy
    /// machine an over-estimate), if it has one.
    fn device_bytes(&self) -> Result<Option<DeviceBytes>, String> {
        Ok(
            crate::loopdev::device_stat_of(&self.base).map(|stat| DeviceBytes {
                read: stat.read_bytes,
                written: stat.write_bytes,
                pmr_written: None,
            }),
        )
    }

    fn finish(&mut self) -> Result<(), String> {
        match self.fs.take() {
            Some(fs) => scratch::remove_dir(&fs.root),
            None => Ok(()),
        }
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        if let Err(e) = self.finish() {
            eprintln!("augefs bench fs: {e}");
        }
    }
}

/// A kernel file system on the shared loop device.
pub struct Kernel {
    fs_type: &'static str,
    /// Unmounted on drop (by `KernelMount`, lazily if need be), before the mount point
    /// goes.
    mount: Option<KernelMount>,
    fs: PosixFs,
    device: Rc<LoopDevice>,
    _mount_point: MountPoint,
}

impl Kernel {
    /// `fs_type` on `device`, mounted on `dir` (created now, removed on drop).
    pub fn new(
        fs_type: &'static str,
        device: Rc<LoopDevice>,
        dir: &Path,
    ) -> Result<Kernel, String> {
        let mount_point = MountPoint::create(dir)?;
        Ok(Kernel {
            fs_type,
            mount: None,
            fs: PosixFs {
                root: dir.to_path_buf(),
            },
            device,
            _mount_point: mount_point,
        })
    }

    fn mount(&mut self) -> Result<(), String> {
        let mount = KernelMount::mount(
            self.fs_type,
            self.device.path(),
            &self.fs.root,
            MOUNT_OPTIONS,
        )?;
        self.mount = Some(mount);
        Ok(())
    }
}

impl InProcess for Kernel {
    fn fresh(&mut self) -> Result<(), String> {
        self.finish()?;
        kernelfs::mkfs(self.fs_type, self.device.path(), true)?;
        self.mount()
    }

    fn fs(&self) -> &dyn Fs {
        &self.fs
    }

    fn root(&self) -> Option<&Path> {
        Some(&self.fs.root)
    }

    fn drop_caches(&mut self) -> Result<(), String> {
        self.finish()?;
        kernelfs::drop_caches()?;
        self.mount()
    }

    fn device_bytes(&self) -> Result<Option<DeviceBytes>, String> {
        let stat = self.device.stat()?;
        Ok(Some(DeviceBytes {
            read: stat.read_bytes,
            written: stat.write_bytes,
            pmr_written: None,
        }))
    }

    fn finish(&mut self) -> Result<(), String> {
        self.mount.take().map_or(Ok(()), KernelMount::unmount)
    }
}

/// An `augefs mount -f` child serving the image on a directory.
struct FuseDaemon {
    child: Child,
    mnt: PathBuf,
    mounted: bool,
    /// End the daemon, then unmount lazily, if a signal interrupts the process
    /// (dropped after `Drop` has reaped the child).
    _on_interrupt: [Registered; 2],
}

impl FuseDaemon {
    fn start(
        image: &Path,
        mnt: &Path,
        backend: &str,
        options: Option<&str>,
    ) -> Result<FuseDaemon, String> {
        let mut command = Command::new(crate::siblings::augefs()?);
        command.arg("mount").arg("-f");
        if let Some(o) = options {
            command.args(["-o", o]);
        }
        let child = command
            .arg(image)
            .arg(mnt)
            .args(["--backend", backend])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start augefs mount: {e}"))?;
        let undo = [
            on_interrupt(Undo::Unmount(mnt.to_path_buf())),
            on_interrupt(Undo::Terminate(child.id())),
        ];
        let mut daemon = FuseDaemon {
            child,
            mnt: mnt.to_path_buf(),
            mounted: true,
            _on_interrupt: undo,
        };
        let started = Instant::now();
        while !is_mount_point(mnt) {
            if let Ok(Some(status)) = daemon.child.try_wait() {
                daemon.mounted = false;
                return Err(format!("augefs mount exited ({status}) before mounting"));
            }
            if started.elapsed() > DAEMON_WAIT {
                return Err(format!(
                    "augefs mount did not mount {} in time",
                    mnt.display()
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(daemon)
    }

    fn cpu_ns(&self) -> u64 {
        cpu::process_ns(self.child.id()).unwrap_or(0)
    }

    /// Unmounts and waits for the daemon to exit (it unmounts augefs, all durable).
    fn stop(mut self) -> Result<(), String> {
        self.mounted = false;
        let mnt = self.mnt.to_string_lossy().into_owned();
        let program = if have_program("fusermount3") {
            "fusermount3"
        } else {
            "fusermount"
        };
        command(program, &["-u", &mnt])?;
        let started = Instant::now();
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) if status.success() => return Ok(()),
                Ok(Some(status)) => return Err(format!("augefs mount exited with {status}")),
                Ok(None) if started.elapsed() > DAEMON_WAIT => {
                    return Err("augefs mount did not exit after its unmount".to_string())
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(e) => return Err(format!("waiting for augefs mount: {e}")),
            }
        }
    }
}

impl Drop for FuseDaemon {
    fn drop(&mut self) {
        if self.mounted && is_mount_point(&self.mnt) {
            let mnt = self.mnt.to_string_lossy().into_owned();
            if let Err(e) = command("fusermount3", &["-u", "-z", &mnt]) {
                eprintln!("augefs bench fs: unmounting {mnt}: {e}");
            }
        }
        if let Ok(None) = self.child.try_wait() {
            // SAFETY: kill(2) with the pid of our own child, which has not been reaped
            // (try_wait just said it runs), so the pid cannot name another process.
            unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
            let started = Instant::now();
            while matches!(self.child.try_wait(), Ok(None)) && started.elapsed() < DAEMON_WAIT {
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// The augefs image through FUSE.
pub struct Fuse {
    image: PathBuf,
    backend: BackendChoice,
    /// `augefs mount -o` options, if any.
    options: Option<String>,
    /// Unmounted and ended on drop, before the mount point goes.
    daemon: Option<FuseDaemon>,
    fs: PosixFs,
    _mount_point: MountPoint,
}

impl Fuse {
    /// Mounts on `mnt` (created now, removed on drop).
    pub fn new(image: &Path, backend: BackendChoice, mnt: &Path) -> Result<Fuse, String> {
        if !Path::new("/dev/fuse").exists() {
            return Err("/dev/fuse is missing".to_string());
        }
        crate::siblings::augefs()?;
        let mount_point = MountPoint::create(mnt)?;
        let root = std::fs::canonicalize(mnt).map_err(|e| format!("{}: {e}", mnt.display()))?;
        Ok(Fuse {
            image: image.to_path_buf(),
            backend,
            options: None,
            daemon: None,
            fs: PosixFs { root },
            _mount_point: mount_point,
        })
    }

    /// Mounts with these `augefs mount -o` options.
    pub fn with_options(mut self, options: Option<String>) -> Fuse {
        self.options = options.filter(|o| !o.is_empty());
        self
    }

    /// The mount point.
    pub fn root(&self) -> &Path {
        &self.fs.root
    }

    fn mount(&mut self) -> Result<(), String> {
        let daemon = FuseDaemon::start(
            &self.image,
            &self.fs.root,
            self.backend.name(),
            self.options.as_deref(),
        )?;
        self.daemon = Some(daemon);
        Ok(())
    }
}

impl InProcess for Fuse {
    fn fresh(&mut self) -> Result<(), String> {
        self.finish()?;
        format_image(&self.image, self.backend)?;
        self.mount()
    }

    fn fs(&self) -> &dyn Fs {
        &self.fs
    }

    fn root(&self) -> Option<&Path> {
        Some(&self.fs.root)
    }

    fn drop_caches(&mut self) -> Result<(), String> {
        self.finish()?;
        self.mount()
    }

    fn device_bytes(&self) -> Result<Option<DeviceBytes>, String> {
        Ok(None)
    }

    fn helper_cpu_ns(&self) -> u64 {
        self.daemon.as_ref().map_or(0, FuseDaemon::cpu_ns)
    }

    fn finish(&mut self) -> Result<(), String> {
        self.daemon.take().map_or(Ok(()), FuseDaemon::stop)
    }
}
