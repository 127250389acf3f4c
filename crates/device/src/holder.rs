//! Who holds an image, and whether it still serves it.
//!
//! Every open of an image holds an `flock` on it (crates/device/src/file.rs). A process
//! that keeps an image for a long time and serves others from it (the `augefs mount`
//! daemon, the interposer's owner) also holds a *mark*: an open-file-description read
//! lock on one byte of the image file. Byte 0 while it serves ([`Mark::serving`]); when
//! it stops serving (the kernel ended the mount) and goes on to make everything
//! durable and close the image, it moves the mark to byte 1 ([`Mark::finishing`]). So
//! a command that finds the image locked can tell apart:
//! - a holder that serves: the image is in use (mounted at a directory, or attached by a
//!   program); waiting would not help, so the open fails at once and says by whom;
//! - a holder that finishes, has exited (the kernel tears its io_uring down, which
//!   keeps the lock a moment), or is this very process before an exec: it lets go by
//!   itself, so [`open_waiting`] waits a bounded time, saying so in one line;
//! - any other holder (an fsck, a `mkfs`, a program using the library): in use.
//!
//! Invariants:
//! - The marks and the image's flock are independent locks (Linux keeps OFD record
//!   locks and flocks apart), so a mark never changes who may open the image.
//! - A mark moves from serving to finishing without a moment of neither.
//! - [`Holder`] is best effort: it reads /proc/locks and /proc/self/mountinfo, and a
//!   field it cannot learn is None; the lock itself is the only authority.

use crate::error::DeviceError;
use crate::file::{open, OpenOptions};
use crate::Device;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How often [`open_waiting`] tries again while a holder finishes.
const RETRY_INTERVAL: Duration = Duration::from_millis(20);

/// What is known of the process that holds an image.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Holder {
    /// From /proc/locks (the process that took the flock).
    pub pid: Option<u32>,
    /// Its command line, space-separated.
    pub command: Option<String>,
    /// It holds the serving mark: a mount or an attached program.
    pub serving: bool,
    /// It holds the finishing mark: it no longer serves and lets go soon.
    pub finishing: bool,
    /// Where the image is mounted (an `augefs` FUSE mount whose source is the image).
    pub mounted_at: Option<PathBuf>,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.mounted_at {
            Some(dir) => write!(f, "mounted at {}", dir.display())?,
            None if self.finishing => write!(f, "still held, while its unmount finishes,")?,
            None => write!(f, "in use")?,
        }
        match (self.pid, &self.command) {
            (Some(pid), Some(cmd)) => write!(f, " by process {pid} ({cmd})"),
            (Some(pid), None) => write!(f, " by process {pid}"),
            _ => write!(f, " by another process"),
        }
    }
}

/// The byte of the image file a mark locks.
const SERVING_BYTE: i64 = 0;
const FINISHING_BYTE: i64 = 1;

/// Held while a process serves an image, then while it finishes (see the module doc);
/// dropping it (or the process's death) ends the mark.
#[derive(Debug)]
pub struct Mark {
    file: File,
}

impl Mark {
    /// Takes the serving mark on `path` (which the caller has opened and locked).
    pub fn serving(path: &Path) -> io::Result<Mark> {
        let file = File::open(path)?;
        set_lock(&file, SERVING_BYTE, libc::F_RDLCK)?;
        Ok(Mark { file })
    }

    /// Moves the mark from serving to finishing: others now wait for this holder.
    pub fn finishing(&self) -> io::Result<()> {
        set_lock(&self.file, FINISHING_BYTE, libc::F_RDLCK)?;
        set_lock(&self.file, SERVING_BYTE, libc::F_UNLCK)
    }
}

fn one_byte(at: i64, kind: i32) -> libc::flock {
    libc::flock {
        l_type: kind as i16,
        l_whence: libc::SEEK_SET as i16,
        l_start: at,
        l_len: 1,
        l_pid: 0,
    }
}

fn set_lock(file: &File, at: i64, kind: i32) -> io::Result<()> {
    let mut l = one_byte(at, kind);
    // SAFETY: fcntl reads the flock struct we own, for this call only.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &mut l) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether some process holds the lock on byte `at` of `path`.
fn is_marked(path: &Path, at: i64) -> bool {
    let Ok(file) = File::open(path) else {
        return false;
    };
    let mut l = one_byte(at, libc::F_WRLCK);
    // SAFETY: fcntl reads and writes the flock struct we own, for this call only.
    let r = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_GETLK, &mut l) };
    r == 0 && i32::from(l.l_type) != libc::F_UNLCK
}

/// Whether some process holds the serving mark on `path`.
pub fn is_served(path: &Path) -> bool {
    is_marked(path, SERVING_BYTE)
}

/// What can be learnt of whoever holds `path`'s flock.
pub fn holder(path: &Path) -> Holder {
    let pid = flock_holder_pid(path);
    let command = pid.and_then(|p| {
        let raw = std::fs::read(format!("/proc/{p}/cmdline")).ok()?;
        let words: Vec<String> = raw
            .split(|&b| b == 0)
            .filter(|w| !w.is_empty())
            .map(|w| String::from_utf8_lossy(w).into_owned())
            .collect();
        (!words.is_empty()).then(|| words.join(" "))
    });
    Holder {
        pid,
        command,
        serving: is_served(path),
        finishing: is_marked(path, FINISHING_BYTE),
        mounted_at: mounted_at(path),
    }
}

/// Whether process `pid` exists and has not exited (a zombie has).
fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name, which is in parentheses.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// The pid /proc/locks gives for a FLOCK on `path`'s inode.
fn flock_holder_pid(path: &Path) -> Option<u32> {
    let meta = std::fs::metadata(path).ok()?;
    let table = std::fs::read_to_string("/proc/locks").ok()?;
    flock_pid_in(&table, meta.dev(), meta.ino())
}

/// Parses /proc/locks lines like `1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF`
/// (waiters are the lines with `->`).
fn flock_pid_in(table: &str, dev: u64, ino: u64) -> Option<u32> {
    let want = format!(
        "{:02x}:{:02x}:{ino}",
        libc::major(dev as libc::dev_t),
        libc::minor(dev as libc::dev_t)
    );
    table.lines().find_map(|line| {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.get(1) != Some(&"FLOCK") || words.get(4..6).is_none() {
            return None;
        }
        (words[5] == want).then(|| words[4].parse().ok()).flatten()
    })
}

/// The mount point of an `augefs` FUSE mount whose source is `path`.
fn mounted_at(path: &Path) -> Option<PathBuf> {
    let want = std::fs::canonicalize(path).ok()?;
    mount_point_in(&platform::mountinfo::mounts(), &want)
}

/// The mount point of the FUSE mount of `image` in a mount table.
fn mount_point_in(table: &[platform::mountinfo::MountEntry], image: &Path) -> Option<PathBuf> {
    table.iter().find_map(|m| {
        // "fuse" when mount(2) made it (the subtype is fusermount3's), "fuse.augefs"
        // otherwise; the source, the image's full path, is what identifies it.
        let fuse = matches!(m.fstype.as_str(), "fuse" | "fuse.augefs" | "fuseblk");
        (fuse && Path::new(&m.source) == image).then(|| m.point.clone())
    })
}

/// [`open`], but while the image is held by a process that is letting go of it (it
/// finishes, has exited, or is this process before an exec), waits up to `wait` for
/// it, calling `on_wait` once with the holder when the wait begins. Any other holder,
/// or one still there after `wait`, is `InUse` with what is known of it.
pub fn open_waiting(
    path: &Path,
    opts: &OpenOptions,
    wait: Duration,
    on_wait: &mut dyn FnMut(&Holder),
) -> Result<Device, DeviceError> {
    let started = Instant::now();
    let mut told = false;
    loop {
        match open(path, opts) {
            Err(DeviceError::InUse { path: p, .. }) => {
                let h = holder(path);
                // Once waiting, a holder that lets go is waited for to the end (it may
                // have exited meanwhile, leaving the lock to its io_uring a moment).
                if (!told && !lets_go(&h)) || started.elapsed() >= wait {
                    return Err(DeviceError::InUse {
                        path: p,
                        holder: Some(h),
                    });
                }
                if !told {
                    on_wait(&h);
                    told = true;
                }
                std::thread::sleep(RETRY_INTERVAL);
            }
            other => return other,
        }
    }
}

/// Whether `h` lets go of the image by itself soon.
fn lets_go(h: &Holder) -> bool {
    // No process in /proc/locks: the lock outlives its process (an io_uring being torn
    // down after its exit).
    let dead = h.pid.is_none_or(|p| !process_alive(p));
    // A killed server's serving mark can outlast it a moment too (its files are
    // released after it is reaped): only a live one serves.
    if h.serving {
        return dead;
    }
    // An exited holder (its io_uring still holds the image a moment) or this very
    // process before an exec (its marks were closed with it) serves nothing, whatever
    // dead mount it left in mountinfo.
    let own = h.pid == Some(std::process::id());
    h.finishing || dead || own
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_locks_lines_name_the_flock_holder() {
        let dev = libc::makedev(0xfd, 0x01);
        let table = "1: POSIX  ADVISORY  WRITE 77 fd:01:5678 0 EOF\n\
                     2: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF\n\
                     2: -> FLOCK  ADVISORY  WRITE 99 fd:01:5678 0 EOF\n\
                     3: FLOCK  ADVISORY  READ 55 fd:01:9 0 EOF\n";
        assert_eq!(flock_pid_in(table, dev, 5678), Some(1234));
        assert_eq!(flock_pid_in(table, dev, 9), Some(55));
        assert_eq!(flock_pid_in(table, dev, 10), None);
    }

    #[test]
    fn this_process_is_alive_and_a_reaped_child_is_not() {
        assert!(process_alive(std::process::id()));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(!process_alive(pid));
    }

    /// A live server is waited for by nobody; a dead one's serving mark (released a
    /// moment after it was reaped) and a finishing or exited holder are waited for.
    #[test]
    fn only_a_live_server_is_in_use_for_good() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let holder = |pid: Option<u32>, serving: bool, finishing: bool| Holder {
            pid,
            command: None,
            serving,
            finishing,
            mounted_at: None,
        };
        let live = Some(std::process::id());
        assert!(!lets_go(&holder(live, true, false)), "a live server serves");
        assert!(
            lets_go(&holder(Some(dead), true, false)),
            "a dead server lets go"
        );
        assert!(
            lets_go(&holder(None, true, false)),
            "a lock with no process lets go"
        );
        assert!(
            lets_go(&holder(Some(dead), false, false)),
            "an exited holder"
        );
        assert!(lets_go(&holder(live, false, true)), "a finishing holder");
        let mut other = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        assert!(
            !lets_go(&holder(Some(other.id()), false, false)),
            "another live program (an fsck) holds it"
        );
        other.kill().unwrap();
        other.wait().unwrap();
    }

    #[test]
    fn mountinfo_lines_name_the_mount_point() {
        let table = &platform::mountinfo::parse(
            "36 35 98:0 / /mnt/a\\040b rw,nosuid - fuse.augefs /img/x\\040y.img rw\n\
             37 35 98:0 / /mnt/c rw - ext4 /img/x\\040y.img rw\n\
             38 35 98:0 / /mnt/d rw shared:1 - fuse /img/z rw\n\
             39 35 98:0 / /mnt/e rw - fusectl /img/q rw\n",
        );
        assert_eq!(
            mount_point_in(table, Path::new("/img/x y.img")),
            Some(PathBuf::from("/mnt/a b"))
        );
        assert_eq!(
            mount_point_in(table, Path::new("/img/z")),
            Some(PathBuf::from("/mnt/d"))
        );
        assert_eq!(mount_point_in(table, Path::new("/img/q")), None);
    }

    #[test]
    fn a_mark_moves_from_serving_to_finishing_and_ends_with_its_holder() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("img");
        std::fs::write(&path, [0u8; 4096]).unwrap();
        let finishing = || is_marked(&path, FINISHING_BYTE);
        assert!(!is_served(&path) && !finishing());
        let mark = Mark::serving(&path).unwrap();
        assert!(is_served(&path) && !finishing());
        mark.finishing().unwrap();
        assert!(!is_served(&path) && finishing());
        drop(mark);
        assert!(!is_served(&path) && !finishing());
    }

    #[test]
    fn an_open_waits_for_a_finishing_holder() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("img");
        crate::image::create_image(&path, 1 << 20).unwrap();
        let opts = OpenOptions::default();
        let first = open(&path, &opts).unwrap();
        let mark = Mark::serving(&path).unwrap();
        mark.finishing().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let releaser = std::thread::spawn(move || {
            rx.recv().unwrap();
            std::thread::sleep(Duration::from_millis(100));
            drop(first);
            drop(mark);
        });
        let mut waited = Vec::new();
        let second = open_waiting(&path, &opts, Duration::from_secs(30), &mut |h| {
            waited.push(h.clone());
            tx.send(()).unwrap();
        });
        releaser.join().unwrap();
        assert!(second.is_ok(), "{second:?}");
        assert_eq!(waited.len(), 1, "one line for the wait");
        assert_eq!(waited[0].pid, Some(std::process::id()));
        assert!(!waited[0].serving && waited[0].finishing);
    }

    #[test]
    fn an_open_refuses_a_holder_without_a_mark_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("img");
        crate::image::create_image(&path, 1 << 20).unwrap();
        let opts = OpenOptions::default();
        // Another process holds it (a shell with the image open and flocked).
        let mut child = std::process::Command::new("flock")
            .arg("-x")
            .arg(&path)
            .args(["sleep", "30"])
            .spawn()
            .unwrap();
        let started = Instant::now();
        let got = loop {
            match open_waiting(&path, &opts, Duration::from_secs(30), &mut |_| {
                panic!("no wait for a holder without a mark")
            }) {
                Ok(_) if started.elapsed() < Duration::from_secs(5) => {
                    // flock(1) has not taken the lock yet.
                    std::thread::sleep(Duration::from_millis(10));
                }
                other => break other,
            }
        };
        let _ = child.kill();
        let _ = child.wait();
        match got {
            Err(DeviceError::InUse {
                holder: Some(h), ..
            }) => {
                assert!(!h.serving && !h.finishing, "{h:?}");
                assert!(h.to_string().starts_with("in use by process"), "{h}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_open_does_not_wait_for_a_serving_holder() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("img");
        crate::image::create_image(&path, 1 << 20).unwrap();
        let opts = OpenOptions::default();
        let _first = open(&path, &opts).unwrap();
        let _mark = Mark::serving(&path).unwrap();
        let started = Instant::now();
        let second = open_waiting(&path, &opts, Duration::from_secs(30), &mut |_| {
            panic!("no wait for a serving holder")
        });
        assert!(started.elapsed() < Duration::from_secs(5));
        match second {
            Err(DeviceError::InUse {
                holder: Some(h), ..
            }) => {
                assert!(h.serving);
                assert_eq!(h.pid, Some(std::process::id()));
            }
            other => panic!("{other:?}"),
        }
    }
}
