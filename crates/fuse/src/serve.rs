//! Mounting: [`serve`] mounts a vfs at a directory, serves requests on several threads
//! until the kernel ends the mount (`umount`, `fusermount3 -u`, or an [`Unmounter`]
//! called on a signal), then unmounts the vfs so everything is durable. [`Bridge`] is
//! the interposer's mount of a vfs it keeps.
//!
//! Invariants:
//! - `FileSystem::unmount` runs on every path out of [`serve`] once the vfs was handed
//!   in, including a failed kernel mount or INIT; its error is [`serve`]'s error. (The
//!   one exception, said as an error: a request thread panicked and still holds the
//!   vfs.)
//! - The mount is ready (the kernel's INIT exchange is done) when `on_ready` runs and
//!   when [`Bridge::spawn`] returns.
//! - The background commit (`commit=`) runs from the mount until the vfs unmounts.

use crate::adapter::{Admit, AugeFuse};
use crate::channel::Channel;
use crate::mount::{mount, set_read_ahead, unmount};
use crate::notify::Notifier;
use crate::options::{MountOptions, READ_AHEAD_DEFAULT_KIB};
use crate::session::{Running, Session, SessionOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use thiserror::Error;
use vfs::{FileSystem, VfsError};

#[derive(Debug, Error)]
#[non_exhaustive]
pub enum FuseError {
    #[error("cannot mount on {dir}: {source}")]
    Mount {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("serving the mount on {dir} failed: {source}")]
    Serve {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot unmount {dir}: {why}")]
    Unmount { dir: PathBuf, why: String },
    /// The vfs's unmount failed: something may not be durable.
    #[error("unmounting the file system: {0}")]
    Vfs(#[from] VfsError),
}

/// Ends a mount from another thread (a signal handler's): a plain unmount, or a lazy
/// one when files are still open there (the mount then ends at their last close).
#[derive(Debug, Clone)]
pub struct Unmounter {
    dir: PathBuf,
}

impl Unmounter {
    pub fn unmount(&self) -> Result<(), FuseError> {
        if unmount(&self.dir, false).is_ok() {
            return Ok(());
        }
        // Busy: detach now, finish when the last user goes.
        unmount(&self.dir, true).map_err(|e| FuseError::Unmount {
            dir: self.dir.clone(),
            why: e.to_string(),
        })
    }
}

/// Mounts `fs` on `dir` and completes INIT; `threads` request threads, each with its
/// own /dev/fuse descriptor if `clone_fd`.
fn start(
    adapter: Arc<AugeFuse>,
    dir: &Path,
    fsname: &str,
    opts: &MountOptions,
    clone_fd: bool,
) -> Result<Session, FuseError> {
    let err = |source| FuseError::Mount {
        dir: dir.to_path_buf(),
        source,
    };
    // Canonical before the mount: resolving the mount point afterwards would ask the
    // mount, which nobody serves yet.
    let point = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let fd = mount(dir, fsname, opts).map_err(err)?;
    let session_opts = SessionOptions {
        threads: opts.threads,
        clone_fd,
        stats: opts.stats,
        // A background session shares the process with its owner's descriptors
        // (the interposer numbers them): /dev/fuse alone, opened here.
        uring: opts.uring && clone_fd,
    };
    let session = Session::init(adapter, Channel::new(fd), session_opts).map_err(|e| {
        // The kernel mount exists but cannot be served: take it away again.
        let _ = unmount(dir, true);
        err(e)
    })?;
    let kib = opts.read_ahead_kib.unwrap_or(READ_AHEAD_DEFAULT_KIB);
    if kib > 0 {
        if let Err(e) = set_read_ahead(&point, kib) {
            // The default is a gain where it can be had (root); asked for, it is said.
            if opts.read_ahead_kib.is_some() {
                eprintln!("augefs: read_ahead={kib} not set ({e}): the kernel's stays");
            }
        }
    }
    Ok(session)
}

/// A bridge mount served from background threads of the calling process (the
/// interposer's owner, docs/DESIGN.md §12.3); [`Bridge::stop`] unmounts it. The vfs stays
/// the caller's: stopping leaves it mounted.
#[derive(Debug)]
pub struct Bridge {
    running: Running,
    dir: PathBuf,
    notifier: Notifier,
}

impl Bridge {
    /// Mounts `fs` on `dir` with [`AugeFuse::bridge`] (no kernel caching) and serves it
    /// on `threads` request threads; returns once the kernel's INIT exchange is done.
    pub fn spawn(
        fs: Arc<FileSystem>,
        dir: &Path,
        fsname: &str,
        threads: usize,
    ) -> Result<Bridge, FuseError> {
        Bridge::spawn_adapter(AugeFuse::bridge(fs), dir, fsname, threads)
    }

    /// As [`Bridge::spawn`], but the kernel caches attributes, names and pages as on a
    /// mount of its own: the caller tells it of every change it makes through `fs`
    /// directly, through [`Bridge::notifier`].
    pub fn spawn_caching(
        fs: Arc<FileSystem>,
        dir: &Path,
        fsname: &str,
        threads: usize,
    ) -> Result<Bridge, FuseError> {
        let adapter = AugeFuse::new(fs, false, crate::adapter::Admit::Kernel);
        Bridge::spawn_adapter(adapter, dir, fsname, threads)
    }

    fn spawn_adapter(
        adapter: AugeFuse,
        dir: &Path,
        fsname: &str,
        threads: usize,
    ) -> Result<Bridge, FuseError> {
        let opts = MountOptions {
            threads,
            ..MountOptions::default()
        };
        // Every descriptor of the bridge is opened here, synchronously (no per-thread
        // clones opened later): the interposer numbers them out of programs' way.
        let session = start(Arc::new(adapter), dir, fsname, &opts, false)?;
        let notifier = session.notifier();
        let running = session.spawn().map_err(|source| FuseError::Serve {
            dir: dir.to_path_buf(),
            source,
        })?;
        Ok(Bridge {
            running,
            dir: dir.to_path_buf(),
            notifier,
        })
    }

    /// Notifications to the kernel about this mount (for changes made through the vfs
    /// directly; [`crate::notify`] says from where they may be sent).
    pub fn notifier(&self) -> Notifier {
        self.notifier.clone()
    }

    /// Unmounts the bridge and waits for its threads.
    pub fn stop(self) -> Result<(), FuseError> {
        let unmounted = unmount(&self.dir, true).map_err(|e| FuseError::Unmount {
            dir: self.dir.clone(),
            why: e.to_string(),
        });
        let joined = self
            .running
            .join_and_shutdown()
            .map_err(|source| FuseError::Serve {
                dir: self.dir,
                source,
            });
        unmounted.and(joined)
    }
}

/// What [`serve`] hands its caller once the mount works.
#[derive(Debug)]
pub struct Ready {
    /// Ends the mount (from a signal handler's thread).
    pub unmounter: Unmounter,
    /// The mounted file system, for other front ends of the same process (the
    /// instance's attached clients): they must let go of it in `serve`'s `at_end`.
    pub fs: Arc<FileSystem>,
    /// The kernel's caches of this mount, to tell of changes made beside it.
    pub caches: KernelCaches,
}

/// The kernel's caches of a mount: changes made through the vfs directly (not through
/// the kernel) are told to them, for the nodes, names and pages the kernel may hold.
#[derive(Debug, Clone)]
pub struct KernelCaches {
    notifier: Notifier,
    adapter: Arc<AugeFuse>,
}

impl KernelCaches {
    fn holds(&self, ino: u64) -> bool {
        ino == crate::proto::abi::ROOT_ID || self.adapter.nodes().lookups(ino) > 0
    }

    /// The name `name` in directory `parent` appeared, went or now names another inode.
    pub fn entry_changed(&self, parent: u64, name: &[u8]) {
        if self.holds(parent) {
            let _ = self.notifier.inval_entry(parent, name);
        }
    }

    /// The attributes of `ino` changed.
    pub fn attrs_changed(&self, ino: u64) {
        if self.holds(ino) {
            let _ = self.notifier.inval_attrs(ino);
        }
    }

    /// The data (and attributes) of `ino` changed.
    pub fn data_changed(&self, ino: u64) {
        if self.holds(ino) {
            let _ = self.notifier.inval_data(ino, 0, 0);
        }
    }

    /// Tells `tap` of every read the kernel asks for from now on (once).
    pub fn set_read_tap(&self, tap: Arc<dyn crate::adapter::ReadTap>) -> bool {
        self.adapter.set_read_tap(tap)
    }
}

/// Mounts `fs` on `dir`, calls `on_ready` once the mount works, serves until the kernel
/// ends the mount, runs what `on_ready` returned (which must let go of the file system
/// it was handed), and unmounts `fs`. `fsname` names the source in /proc/mounts.
pub fn serve(
    fs: FileSystem,
    dir: &Path,
    fsname: &str,
    opts: &MountOptions,
    on_ready: impl FnOnce(Ready) -> Box<dyn FnOnce()>,
) -> Result<(), FuseError> {
    fs.set_commit_interval(opts.commit);
    let fs = Arc::new(fs);
    let admit = if opts.allow_root {
        // SAFETY: getuid has no preconditions.
        Admit::RootAnd(unsafe { libc::getuid() })
    } else {
        Admit::Kernel
    };
    let adapter = Arc::new(AugeFuse::new(fs.clone(), opts.writeback_cache, admit));
    let name = opts.fsname.clone().unwrap_or_else(|| fsname.to_string());
    let served = start(adapter.clone(), dir, &name, opts, true).and_then(|session| {
        let at_end = on_ready(Ready {
            unmounter: Unmounter {
                dir: dir.to_path_buf(),
            },
            fs: fs.clone(),
            caches: KernelCaches {
                notifier: session.notifier(),
                adapter,
            },
        });
        let stats = session.stats();
        let served = session.run().map_err(|source| FuseError::Serve {
            dir: dir.to_path_buf(),
            source,
        });
        at_end();
        if opts.stats {
            eprint!("{}", stats.report());
        }
        served
    });
    // Commands that find the image locked now wait for this unmount instead of refusing.
    fs.stop_serving();
    // The session and its adapter are gone, so this is the last reference, unless a
    // request thread panicked.
    let unmounted = match Arc::into_inner(fs) {
        Some(fs) => fs.unmount().map_err(FuseError::from),
        None => Err(FuseError::Unmount {
            dir: dir.to_path_buf(),
            why: "request threads still hold the file system; it was not unmounted \
                  (what was not fsync'd may be lost)"
                .to_string(),
        }),
    };
    served.and(unmounted)
}
