//! Mounting: [`serve`] mounts a vfs at a directory, serves requests on several threads
//! until the kernel ends the mount (`umount`, `fusermount3 -u`, or an [`Unmounter`]
//! called on a signal), then unmounts the vfs so everything is durable.
//!
//! Invariants:
//! - `FileSystem::unmount` runs on every path out of [`serve`] once the vfs was handed
//!   in, including a failed kernel mount; its error is [`serve`]'s error. (The one
//!   exception, said as an error: a request thread panicked and fuser stopped waiting
//!   for the others, which still hold the vfs.)
//! - The mount is ready (the kernel's INIT exchange is done) when `on_ready` runs.

use crate::adapter::AugeFuse;
use crate::options::MountOptions;
use fuser::{Config, MountOption, Session, SessionACL, SessionUnmounter};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
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
    session: Arc<Mutex<SessionUnmounter>>,
    dir: PathBuf,
}

impl Unmounter {
    pub fn unmount(&self) -> Result<(), FuseError> {
        let plain = self.session.lock().expect("unmounter lock").unmount();
        if plain.is_ok() {
            return Ok(());
        }
        // Busy: detach now, finish when the last user goes.
        let out = Command::new("fusermount3")
            .arg("-u")
            .arg("-z")
            .arg(&self.dir)
            .output()
            .map_err(|e| FuseError::Unmount {
                dir: self.dir.clone(),
                why: format!("running fusermount3: {e}"),
            })?;
        if out.status.success() {
            Ok(())
        } else {
            Err(FuseError::Unmount {
                dir: self.dir.clone(),
                why: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            })
        }
    }
}

fn config(opts: &MountOptions, fsname: &str) -> Config {
    let mut c = Config::default();
    c.mount_options = vec![
        MountOption::FSName(opts.fsname.clone().unwrap_or_else(|| fsname.to_string())),
        MountOption::Subtype("augefs".to_string()),
        // The vfs checks no permissions (docs/SEMANTICS.md §4): the kernel must.
        MountOption::DefaultPermissions,
        MountOption::NoAtime,
    ];
    for f in &opts.flags {
        c.mount_options.push(match f.as_str() {
            "dev" => MountOption::Dev,
            "nodev" => MountOption::NoDev,
            "suid" => MountOption::Suid,
            "nosuid" => MountOption::NoSuid,
            "exec" => MountOption::Exec,
            "noexec" => MountOption::NoExec,
            other => unreachable!("options.rs admits no flag {other}"),
        });
    }
    c.acl = if opts.allow_other {
        SessionACL::All
    } else if opts.allow_root {
        SessionACL::RootAndOwner
    } else {
        SessionACL::Owner
    };
    c.n_threads = Some(opts.threads);
    // One /dev/fuse descriptor per thread: no contention on one queue.
    c.clone_fd = true;
    c
}

/// A bridge mount served from background threads of the calling process (the
/// interposer's owner, docs/DESIGN.md §4f); [`Bridge::stop`] unmounts it. The vfs stays
/// the caller's: stopping leaves it mounted.
#[derive(Debug)]
pub struct Bridge {
    session: fuser::BackgroundSession,
    dir: PathBuf,
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
        let opts = MountOptions {
            threads,
            ..MountOptions::default()
        };
        let mut c = config(&opts, fsname);
        // Every descriptor of the bridge is opened here, synchronously (no per-thread
        // clones opened later): the interposer numbers them out of programs' way.
        c.clone_fd = false;
        let session = Session::new(AugeFuse::bridge(fs), dir, &c)
            .and_then(Session::spawn)
            .map_err(|source| FuseError::Mount {
                dir: dir.to_path_buf(),
                source,
            })?;
        Ok(Bridge {
            session,
            dir: dir.to_path_buf(),
        })
    }

    /// Unmounts the bridge and waits for its threads.
    pub fn stop(self) -> Result<(), FuseError> {
        self.session
            .umount_and_join()
            .map_err(|source| FuseError::Serve {
                dir: self.dir,
                source,
            })
    }
}

/// Mounts `fs` on `dir`, calls `on_ready` once the mount works, serves until the kernel
/// ends the mount, and unmounts `fs`. `fsname` names the source in /proc/mounts.
pub fn serve(
    fs: FileSystem,
    dir: &Path,
    fsname: &str,
    opts: &MountOptions,
    on_ready: impl FnOnce(Unmounter),
) -> Result<(), FuseError> {
    let fs = Arc::new(fs);
    let adapter = AugeFuse::new(fs.clone(), opts.writeback_cache);
    let served = match Session::new(adapter, dir, &config(opts, fsname)) {
        Err(source) => Err(FuseError::Mount {
            dir: dir.to_path_buf(),
            source,
        }),
        Ok(mut session) => {
            on_ready(Unmounter {
                session: Arc::new(Mutex::new(session.unmount_callable())),
                dir: dir.to_path_buf(),
            });
            session.run().map_err(|source| FuseError::Serve {
                dir: dir.to_path_buf(),
                source,
            })
        }
    };
    // Commands that find the image locked now wait for this unmount instead of refusing.
    fs.stop_serving();
    // The session and its adapter are gone, so this is the last reference, unless a
    // request thread panicked and fuser returned before joining the others.
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
