//! The scratch directory of one benchmark invocation and the files in it.
//!
//! Invariants:
//! - Every file name carries the process id, so invocations sharing a directory never
//!   touch (or clean up) each other's files.
//! - The directory is removed at the end only if this invocation created it and it is
//!   empty by then (another invocation may still use it).
//! - Removal reports what it could not remove on stderr and goes on: cleaning up never
//!   hides the result or the error of the measurement.

use crate::interrupt::{on_interrupt, Registered, Undo};
use std::path::{Path, PathBuf};

#[derive(Debug)]
pub struct Scratch {
    pub dir: PathBuf,
    /// File-system type of `dir`, for the header.
    pub dir_fs: Option<String>,
    /// `dir` did not exist before: remove it at the end too.
    created_dir: bool,
    pid: u32,
    /// Removes this invocation's files if a signal interrupts it.
    on_interrupt: Option<Registered>,
}

impl Scratch {
    /// Creates `dir` if missing.
    pub fn create(dir: &Path) -> Result<Scratch, String> {
        let created_dir = !dir.exists();
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let pid = std::process::id();
        Ok(Scratch {
            dir: dir.to_path_buf(),
            dir_fs: fs_type(dir),
            created_dir,
            pid,
            on_interrupt: Some(on_interrupt(Undo::ScratchFiles {
                dir: dir.to_path_buf(),
                pid,
                created_dir,
            })),
        })
    }

    /// With `keep` (`--keep`), leaves this invocation's files in place also when a
    /// signal interrupts it.
    pub fn keeping(mut self, keep: bool) -> Scratch {
        if keep {
            self.on_interrupt = None;
        }
        self
    }

    /// `<dir>/<stem>-<pid><rest>`, e.g. `named("metadb", ".img")`.
    pub fn named(&self, stem: &str, rest: &str) -> PathBuf {
        self.dir.join(format!("{stem}-{}{rest}", self.pid))
    }

    /// Removes `files` and `dirs` (with their contents) where they exist, then the
    /// scratch directory if this invocation created it and nothing else is left in it.
    pub fn remove(&self, files: &[&Path], dirs: &[&Path]) {
        let mut failures = Vec::new();
        for file in files {
            if let Err(e) = remove_file(file) {
                failures.push(e);
            }
        }
        for dir in dirs {
            if let Err(e) = remove_dir(dir) {
                failures.push(e);
            }
        }
        if self.created_dir {
            match std::fs::remove_dir(&self.dir) {
                // Another invocation still uses it; it removes what is left.
                Err(e) if e.kind() == std::io::ErrorKind::DirectoryNotEmpty => {}
                Err(e) => failures.push(format!("{}: {e}", self.dir.display())),
                Ok(()) => {}
            }
        }
        for failure in failures {
            eprintln!("augefs: could not remove a bench file: {failure}");
        }
    }
}

/// Removes the file `path`, if it exists.
pub fn remove_file(path: &Path) -> Result<(), String> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(format!("removing {}: {e}", path.display()))
        }
        _ => Ok(()),
    }
}

/// Removes `dir` and everything in it, if it exists.
pub fn remove_dir(dir: &Path) -> Result<(), String> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("removing {}: {e}", dir.display())),
    }
}

/// A mount point made for a benchmark, removed on drop: a struct holding it declares it
/// after its mount, so that the mount is undone first.
#[derive(Debug)]
pub struct MountPoint(pub PathBuf);

impl MountPoint {
    /// Creates `dir` (and its parents) if missing.
    pub fn create(dir: &Path) -> Result<MountPoint, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        Ok(MountPoint(dir.to_path_buf()))
    }
}

impl Drop for MountPoint {
    fn drop(&mut self) {
        remove_mount_point(&self.0);
    }
}

/// Removes the mount point `dir` once nothing is mounted on it (it is empty by then),
/// reporting on stderr what it could not remove: called from `Drop`s.
pub fn remove_mount_point(dir: &Path) {
    if let Err(e) = std::fs::remove_dir(dir) {
        if e.kind() != std::io::ErrorKind::NotFound {
            eprintln!("augefs: removing {}: {e}", dir.display());
        }
    }
}

/// The mount holding a path: a line of /proc/self/mounts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// The device or other source, e.g. `/dev/vda1`, `tmpfs`.
    pub source: String,
    pub target: String,
    pub fs_type: String,
    pub options: String,
}

/// The mount holding `path`, from /proc/self/mounts (the longest matching mount point).
pub fn mount_of(path: &Path) -> Option<Mount> {
    let path = path.canonicalize().ok()?;
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let mount = Mount {
                source: fields.next()?.to_string(),
                target: fields.next()?.to_string(),
                fs_type: fields.next()?.to_string(),
                options: fields.next().unwrap_or_default().to_string(),
            };
            path.starts_with(&mount.target).then_some(mount)
        })
        .max_by_key(|m| m.target.len())
}

/// The file-system type holding `path`.
pub fn fs_type(path: &Path) -> Option<String> {
    mount_of(path).map(|m| m.fs_type)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_carry_the_pid_and_removal_leaves_a_used_dir() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("bench");
        let scratch = Scratch::create(&dir).unwrap();
        let file = scratch.named("engine", ".img");
        assert!(file
            .to_str()
            .unwrap()
            .ends_with(&format!("engine-{}.img", std::process::id())));
        std::fs::write(&file, b"x").unwrap();
        let sub = scratch.named("fjall", "");
        std::fs::create_dir_all(sub.join("a")).unwrap();
        let other = dir.join("someone-else");
        std::fs::write(&other, b"y").unwrap();
        scratch.remove(&[&file, &dir.join("missing")], &[&sub]);
        assert!(!file.exists() && !sub.exists());
        assert!(
            dir.exists(),
            "another invocation's file keeps the directory"
        );
        std::fs::remove_file(&other).unwrap();
        scratch.remove(&[], &[]);
        assert!(!dir.exists());
    }

    #[test]
    fn fs_type_of_root_is_known() {
        assert!(fs_type(Path::new("/")).is_some());
        assert_eq!(mount_of(Path::new("/")).unwrap().target, "/");
    }
}
