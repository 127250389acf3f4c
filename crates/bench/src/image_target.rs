//! The targets of `augefs bench files` and `augefs bench aged`: augefs through its API
//! on an image file, or a kernel file system on a loop device over an image file, each
//! made fresh, synced, remounted with cold caches and torn down.
//!
//! Invariants:
//! - A remount starts cold: augefs's caches go with the unmounted instance (the image is
//!   opened with direct IO); the kernel's are dropped between its unmount and mount.
//! - Guards undo the kernel mount, then the mount point, then the loop device, in that
//!   order, on every path out.

use crate::augefs;
use crate::cmd::bench_fs::ops::{ApiFs, Fs, PosixFs};
use crate::image;
use crate::kernelfs::{self, MOUNT_OPTIONS};
use crate::loopdev::{have_program, KernelMount, LoopDevice};
use crate::scratch::{MountPoint, Scratch};
use device::{BackendChoice, Device};
use platform::{Clock, SystemClock};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// The benchmark's images carry a fixed uuid: they never outlive the run.
const FS_UUID: [u8; 16] = *b"augefs-bench-fil";

/// `measure` of each of `targets` in turn, each given an image file of its own in
/// `scratch` (removed after it unless `keep`); the first error ends the run.
pub fn each_target<T>(
    scratch: &Scratch,
    stem: &str,
    targets: &[String],
    keep: bool,
    mut measure: impl FnMut(&str, &Path) -> Result<T, String>,
) -> Result<Vec<T>, String> {
    let mut all = Vec::new();
    let mut failed = None;
    for name in targets {
        let image = scratch.named(&format!("{stem}-{name}"), ".img");
        let measured = measure(name, &image);
        if keep {
            eprintln!("augefs: kept {}", image.display());
        } else {
            scratch.remove(&[&image], &[]);
        }
        match measured {
            Ok(m) => all.push(m),
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    scratch.remove(&[], &[]);
    failed.map_or(Ok(all), Err)
}

/// Why a target cannot be measured here.
#[derive(Debug)]
pub struct Skip(pub String);

impl From<String> for Skip {
    fn from(e: String) -> Skip {
        Skip(e)
    }
}

pub enum Target {
    Augefs {
        image: PathBuf,
        clock: Arc<dyn Clock>,
        device: Option<Arc<Device>>,
        api: Option<ApiFs>,
    },
    Kernel {
        fs_type: String,
        mount: Option<KernelMount>,
        posix: PosixFs,
        _mount_point: MountPoint,
        device: LoopDevice,
    },
}

impl Target {
    /// Makes `name` fresh on an image file of `bytes` at `image`.
    pub fn make(name: &str, image: &Path, bytes: u64, files: u64) -> Result<Target, Skip> {
        if name == "augefs" {
            image::prepare(image, bytes, BackendChoice::Auto)?;
            let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
            let device = image::open_device(image, BackendChoice::Auto)?;
            augefs::format(&device, None, clock.as_ref(), FS_UUID)?;
            let fs = augefs::mount(&device, None, &clock)?;
            return Ok(Target::Augefs {
                image: image.to_path_buf(),
                clock,
                device: Some(device),
                api: Some(ApiFs { fs, view: false }),
            });
        }
        if let Some(why) = kernelfs::obstacle() {
            return Err(Skip(why));
        }
        if !have_program(&kernelfs::mkfs_program(name)) {
            return Err(Skip(format!("{} not found", kernelfs::mkfs_program(name))));
        }
        // ext2/ext4 get an inode per 4 KiB: room for every file plus a tenth.
        let bytes = bytes.max((((files + files / 10) * kernelfs::EXT_INODE_BYTES) >> 20) << 20);
        let file = std::fs::File::create(image).map_err(|e| format!("{}: {e}", image.display()))?;
        file.set_len(bytes)
            .map_err(|e| format!("{}: {e}", image.display()))?;
        drop(file);
        let device = LoopDevice::attach(image)?;
        kernelfs::mkfs(name, device.path(), true)?;
        let dir = image.with_extension("mnt");
        let mount_point = MountPoint::create(&dir)?;
        let mount = KernelMount::mount(name, device.path(), &dir, MOUNT_OPTIONS)?;
        Ok(Target::Kernel {
            fs_type: name.to_string(),
            mount: Some(mount),
            posix: PosixFs { root: dir },
            _mount_point: mount_point,
            device,
        })
    }

    pub fn fs(&self) -> Result<&dyn Fs, String> {
        match self {
            Target::Augefs { api: Some(api), .. } => Ok(api),
            Target::Kernel {
                mount: Some(_),
                posix,
                ..
            } => Ok(posix),
            _ => Err("the target is not mounted".into()),
        }
    }

    pub fn sync(&self) -> Result<(), String> {
        self.fs()?.sync()
    }

    /// Unmounts and mounts again with cold caches; how long the mount took, in ns.
    pub fn remount_cold(&mut self) -> Result<u64, String> {
        match self {
            Target::Augefs {
                image,
                clock,
                device,
                api,
            } => {
                if let Some(api) = api.take() {
                    augefs::unmount(api.fs)?;
                }
                drop(device.take());
                let opened = image::open_device(image, BackendChoice::Auto)?;
                let started = Instant::now();
                let fs = augefs::mount(&opened, None, clock)?;
                let ns = started.elapsed().as_nanos() as u64;
                let t = fs.engine().mount_report().timings;
                eprintln!(
                    "augefs: augefs: mounted in {:.1} ms: superblock {:.1}, MetaDB replay {:.1}, domains {:.1}, MetaDB finish {:.1}, orphans {:.1}",
                    ns as f64 / 1e6,
                    t.superblock_ns as f64 / 1e6,
                    t.replay_ns as f64 / 1e6,
                    t.domains_ns as f64 / 1e6,
                    t.finish_ns as f64 / 1e6,
                    fs.mount_facts().orphans_ns as f64 / 1e6
                );
                *device = Some(opened);
                *api = Some(ApiFs { fs, view: false });
                Ok(ns)
            }
            Target::Kernel {
                fs_type,
                mount,
                posix,
                device,
                ..
            } => {
                if let Some(m) = mount.take() {
                    m.unmount()?;
                }
                kernelfs::drop_caches()?;
                let started = Instant::now();
                *mount = Some(KernelMount::mount(
                    fs_type,
                    device.path(),
                    &posix.root,
                    MOUNT_OPTIONS,
                )?);
                Ok(started.elapsed().as_nanos() as u64)
            }
        }
    }

    /// Read requests its device has served so far.
    pub fn device_reads(&self) -> Result<u64, String> {
        match self {
            Target::Augefs {
                device: Some(d), ..
            } => Ok(d.counters().snapshot().total().read_ops),
            Target::Kernel { device, .. } => Ok(device.stat()?.read_requests),
            Target::Augefs { .. } => Err("the target is not mounted".into()),
        }
    }

    /// The file system's size and the bytes writers may still take, as statfs says.
    pub fn space(&self) -> Result<(u64, u64), String> {
        match self {
            Target::Augefs { api: Some(api), .. } => {
                let st = api.fs.statfs();
                let unit = u64::from(st.block_size);
                Ok((st.blocks * unit, st.blocks_free * unit))
            }
            Target::Kernel { posix, .. } => kernelfs::space(&posix.root),
            Target::Augefs { .. } => Err("the target is not mounted".into()),
        }
    }

    /// Bytes the file system says are in use.
    pub fn used_bytes(&self) -> Result<u64, String> {
        match self {
            Target::Augefs { api: Some(api), .. } => {
                let st = api.fs.statfs();
                Ok((st.blocks - st.blocks_free) * u64::from(st.block_size))
            }
            Target::Kernel { posix, .. } => kernelfs::used_bytes(&posix.root),
            Target::Augefs { .. } => Err("the target is not mounted".into()),
        }
    }

    /// Unmounts (augefs: durably; the kernel's: and detaches its loop device).
    pub fn finish(self) -> Result<(), String> {
        match self {
            Target::Augefs { api, .. } => api.map_or(Ok(()), |api| augefs::unmount(api.fs)),
            Target::Kernel { mount, .. } => mount.map_or(Ok(()), KernelMount::unmount),
        }
    }
}
