//! The file-system calls the workloads of `bench fs` make, on one mounted file system
//! shared by all threads: augefs through its Rust API ([`ApiFs`]), or any directory
//! through std::fs ([`PosixFs`]: a kernel file system, a FUSE mount, or augefs through
//! the interposer when this process runs under it).
//!
//! Invariants:
//! - Paths are relative to the file system's root and `/`-separated; each
//!   implementation resolves them the way its front end does (the API by path, std::fs
//!   through the kernel or the interposer), so path resolution is part of every figure.
//! - A call does what its name says and no more: no caching of handles across calls,
//!   no retry; errors name the path.

use crate::augefs::{err as api_err, fsync_dir};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use vfs::{FileSystem, OpenOptions, RenameMode};

/// An open file of a workload.
pub trait FileOps: Send {
    /// Writes all of `buf` at `offset`.
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<(), String>;
    /// Reads up to `buf.len()` bytes at `offset`; 0 at the end of the file.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize, String>;
    fn fsync(&self) -> Result<(), String>;
}

/// A mounted file system the workloads run on.
pub trait Fs: Sync {
    fn mkdir(&self, path: &str) -> Result<(), String>;
    fn rmdir(&self, path: &str) -> Result<(), String>;
    /// Creates `path`, which must not exist, open for writing.
    fn create(&self, path: &str) -> Result<Box<dyn FileOps>, String>;
    /// Opens the existing `path` for reading, and writing if `write`.
    fn open(&self, path: &str, write: bool) -> Result<Box<dyn FileOps>, String>;
    fn unlink(&self, path: &str) -> Result<(), String>;
    /// Renames `from` to `to`, replacing it.
    fn rename(&self, from: &str, to: &str) -> Result<(), String>;
    /// The size of `path`.
    fn stat(&self, path: &str) -> Result<u64, String>;
    /// The number of entries in the directory `path` (`.` and `..` not counted).
    fn readdir(&self, path: &str) -> Result<usize, String>;
    /// Makes the entries of directory `path` durable.
    fn fsync_dir(&self, path: &str) -> Result<(), String>;
    /// Makes everything durable (sync of the whole file system).
    fn sync(&self) -> Result<(), String>;
    /// Removes the directory `path` and everything under it.
    fn remove_all(&self, path: &str) -> Result<(), String>;
}

/// The tree under directory `dir` of another [`Fs`], as a file system of its own: how
/// a benchmark runs workloads side by side on one file system.
pub struct Within<'a> {
    pub fs: &'a dyn Fs,
    pub dir: String,
}

impl Within<'_> {
    fn at(&self, path: &str) -> String {
        if path.is_empty() {
            self.dir.clone()
        } else {
            format!("{}/{path}", self.dir)
        }
    }
}

impl Fs for Within<'_> {
    fn mkdir(&self, path: &str) -> Result<(), String> {
        self.fs.mkdir(&self.at(path))
    }
    fn rmdir(&self, path: &str) -> Result<(), String> {
        self.fs.rmdir(&self.at(path))
    }
    fn create(&self, path: &str) -> Result<Box<dyn FileOps>, String> {
        self.fs.create(&self.at(path))
    }
    fn open(&self, path: &str, write: bool) -> Result<Box<dyn FileOps>, String> {
        self.fs.open(&self.at(path), write)
    }
    fn unlink(&self, path: &str) -> Result<(), String> {
        self.fs.unlink(&self.at(path))
    }
    fn rename(&self, from: &str, to: &str) -> Result<(), String> {
        self.fs.rename(&self.at(from), &self.at(to))
    }
    fn stat(&self, path: &str) -> Result<u64, String> {
        self.fs.stat(&self.at(path))
    }
    fn readdir(&self, path: &str) -> Result<usize, String> {
        self.fs.readdir(&self.at(path))
    }
    fn fsync_dir(&self, path: &str) -> Result<(), String> {
        self.fs.fsync_dir(&self.at(path))
    }
    fn sync(&self) -> Result<(), String> {
        self.fs.sync()
    }
    fn remove_all(&self, path: &str) -> Result<(), String> {
        self.fs.remove_all(&self.at(path))
    }
}

/// augefs through the vfs Rust API.
#[derive(Debug)]
pub struct ApiFs {
    pub fs: Arc<FileSystem>,
    /// Reads by zero-copy views ([`vfs::File::read_view`]), not into the buffer.
    pub view: bool,
}

fn abs(path: &str) -> String {
    format!("/{path}")
}

struct ApiFile {
    file: vfs::File,
    view: bool,
}

impl FileOps for ApiFile {
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<(), String> {
        let mut done = 0;
        while done < buf.len() {
            let n = self.file.write_at(&buf[done..], offset + done as u64);
            let n = n.map_err(|e| api_err("write", e))?;
            assert!(n > 0, "a write makes progress");
            done += n;
        }
        Ok(())
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize, String> {
        if !self.view {
            return self
                .file
                .read_at(buf, offset)
                .map_err(|e| api_err("read", e));
        }
        // A view lends the bytes: a reader that uses them touches each block (one byte
        // of each, so the figure is the interface's, not a copy's).
        let view = self
            .file
            .read_view(offset, buf.len())
            .map_err(|e| api_err("read", e))?;
        let touched = view.slices().fold(0u8, |x, s| x ^ s[0]);
        std::hint::black_box(touched);
        Ok(view.len())
    }

    fn fsync(&self) -> Result<(), String> {
        self.file.sync_all().map_err(|e| api_err("fsync", e))
    }
}

impl ApiFs {
    fn open_with(&self, path: &str, opts: &OpenOptions) -> Result<Box<dyn FileOps>, String> {
        let file = opts
            .open(&self.fs, &abs(path))
            .map_err(|e| api_err(path, e))?;
        Ok(Box::new(ApiFile {
            file,
            view: self.view,
        }))
    }
}

impl Fs for ApiFs {
    fn mkdir(&self, path: &str) -> Result<(), String> {
        self.fs
            .create_dir(&abs(path), 0o755)
            .map_err(|e| api_err(path, e))
    }

    fn rmdir(&self, path: &str) -> Result<(), String> {
        self.fs.remove_dir(&abs(path)).map_err(|e| api_err(path, e))
    }

    fn create(&self, path: &str) -> Result<Box<dyn FileOps>, String> {
        self.open_with(path, OpenOptions::new().write(true).create_new(true))
    }

    fn open(&self, path: &str, write: bool) -> Result<Box<dyn FileOps>, String> {
        self.open_with(path, OpenOptions::new().read(true).write(write))
    }

    fn unlink(&self, path: &str) -> Result<(), String> {
        self.fs
            .remove_file(&abs(path))
            .map_err(|e| api_err(path, e))
    }

    fn rename(&self, from: &str, to: &str) -> Result<(), String> {
        self.fs
            .rename_path(&abs(from), &abs(to), RenameMode::Replace)
            .map_err(|e| api_err(from, e))
    }

    fn stat(&self, path: &str) -> Result<u64, String> {
        let meta = self.fs.metadata(&abs(path)).map_err(|e| api_err(path, e))?;
        Ok(meta.size)
    }

    fn readdir(&self, path: &str) -> Result<usize, String> {
        let entries = self.fs.read_dir(&abs(path)).map_err(|e| api_err(path, e))?;
        Ok(entries
            .iter()
            .filter(|e| e.name != b"." && e.name != b"..")
            .count())
    }

    fn fsync_dir(&self, path: &str) -> Result<(), String> {
        fsync_dir(&self.fs, &abs(path))
    }

    fn sync(&self) -> Result<(), String> {
        self.fs.sync().map_err(|e| api_err("sync", e))
    }

    fn remove_all(&self, path: &str) -> Result<(), String> {
        let mut dirs = vec![abs(path)];
        // Directories in the order met: removed deepest first once emptied.
        let mut met = Vec::new();
        while let Some(dir) = dirs.pop() {
            for entry in self.fs.read_dir(&dir).map_err(|e| api_err(&dir, e))? {
                if entry.name == b"." || entry.name == b".." {
                    continue;
                }
                let child = format!("{dir}/{}", String::from_utf8_lossy(&entry.name));
                if entry.kind == vfs::Kind::Dir {
                    dirs.push(child);
                } else {
                    self.fs
                        .remove_file(&child)
                        .map_err(|e| api_err(&child, e))?;
                }
            }
            met.push(dir);
        }
        for dir in met.iter().rev() {
            self.fs.remove_dir(dir).map_err(|e| api_err(dir, e))?;
        }
        Ok(())
    }
}

/// A directory tree through std::fs.
#[derive(Debug)]
pub struct PosixFs {
    pub root: PathBuf,
}

struct PosixFile(std::fs::File);

impl FileOps for PosixFile {
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<(), String> {
        self.0
            .write_all_at(buf, offset)
            .map_err(|e| format!("write: {e}"))
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize, String> {
        FileExt::read_at(&self.0, buf, offset).map_err(|e| format!("read: {e}"))
    }

    fn fsync(&self) -> Result<(), String> {
        self.0.sync_all().map_err(|e| format!("fsync: {e}"))
    }
}

impl PosixFs {
    fn at(&self, path: &str) -> PathBuf {
        self.root.join(path)
    }

    fn call<T>(
        &self,
        path: &str,
        f: impl FnOnce(&Path) -> std::io::Result<T>,
    ) -> Result<T, String> {
        let path = self.at(path);
        f(&path).map_err(|e| format!("{}: {e}", path.display()))
    }

    fn open_with(
        &self,
        path: &str,
        opts: &std::fs::OpenOptions,
    ) -> Result<Box<dyn FileOps>, String> {
        let file = self.call(path, |p| opts.open(p))?;
        Ok(Box::new(PosixFile(file)))
    }
}

impl Fs for PosixFs {
    fn mkdir(&self, path: &str) -> Result<(), String> {
        self.call(path, |p| std::fs::create_dir(p))
    }

    fn rmdir(&self, path: &str) -> Result<(), String> {
        self.call(path, |p| std::fs::remove_dir(p))
    }

    fn create(&self, path: &str) -> Result<Box<dyn FileOps>, String> {
        self.open_with(
            path,
            std::fs::OpenOptions::new().write(true).create_new(true),
        )
    }

    fn open(&self, path: &str, write: bool) -> Result<Box<dyn FileOps>, String> {
        self.open_with(path, std::fs::OpenOptions::new().read(true).write(write))
    }

    fn unlink(&self, path: &str) -> Result<(), String> {
        self.call(path, |p| std::fs::remove_file(p))
    }

    fn rename(&self, from: &str, to: &str) -> Result<(), String> {
        let to = self.at(to);
        self.call(from, |from| std::fs::rename(from, &to))
    }

    fn stat(&self, path: &str) -> Result<u64, String> {
        self.call(path, |p| std::fs::metadata(p).map(|m| m.len()))
    }

    fn readdir(&self, path: &str) -> Result<usize, String> {
        self.call(path, |p| {
            let mut n = 0;
            for entry in std::fs::read_dir(p)? {
                entry?;
                n += 1;
            }
            Ok(n)
        })
    }

    fn fsync_dir(&self, path: &str) -> Result<(), String> {
        self.call(path, |p| std::fs::File::open(p)?.sync_all())
    }

    fn sync(&self) -> Result<(), String> {
        self.call("", |root| {
            let dir = std::fs::File::open(root)?;
            // SAFETY: syncfs on a descriptor this function owns for the whole call.
            let rc = unsafe { libc::syncfs(std::os::fd::AsRawFd::as_raw_fd(&dir)) };
            if rc == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        })
    }

    fn remove_all(&self, path: &str) -> Result<(), String> {
        self.call(path, |p| std::fs::remove_dir_all(p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn posix_calls_do_what_they_say() {
        let tmp = tempfile::tempdir().unwrap();
        let fs = PosixFs {
            root: tmp.path().to_path_buf(),
        };
        fs.mkdir("d").unwrap();
        let f = fs.create("d/a").unwrap();
        f.write_at(b"hello", 3).unwrap();
        f.fsync().unwrap();
        assert!(fs.create("d/a").is_err(), "create refuses an existing file");
        assert_eq!(fs.stat("d/a").unwrap(), 8);
        let mut buf = [0u8; 16];
        assert_eq!(
            fs.open("d/a", false).unwrap().read_at(&mut buf, 3).unwrap(),
            5
        );
        fs.rename("d/a", "d/b").unwrap();
        assert_eq!(fs.readdir("d").unwrap(), 1);
        fs.fsync_dir("d").unwrap();
        fs.sync().unwrap();
        fs.unlink("d/b").unwrap();
        fs.rmdir("d").unwrap();
        assert!(fs.stat("d").unwrap_err().contains("/d"));
    }
}
