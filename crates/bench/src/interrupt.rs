//! Undoing a benchmark's mounts, loop devices, daemons and files when it is
//! interrupted (SIGINT, SIGTERM, SIGHUP).
//!
//! Guards undo all of these by `Drop` on every other way out, errors and panics
//! included, but a signal's default action ends the process without unwinding: a
//! Ctrl-C during `augefs bench report` left an xfs file system mounted on a loop device
//! over an image in the user's directory. Each guard also registers what undoes it
//! here; the first of these signals runs the registered undos, newest first (an
//! unmount before the detach of its loop device, both before the files go), and ends
//! the process with status 128 + the signal.
//!
//! Invariants:
//! - An undo is registered for as long as its guard lives ([`Registered`] unregisters
//!   on drop), so a signal undoes only what is still in place.
//! - Undos run on the signal thread while the benchmark's threads may still use the
//!   mounts: unmounts are lazy, and a busy loop device is detached when its last user
//!   goes (the kernel's autoclear), which the process's exit brings about.
//! - Files are removed only by name pattern `<stem>-<pid><rest>` in the scratch
//!   directory, so another invocation's files are never touched, and a directory is
//!   removed with its contents only when nothing is mounted on it.

use crate::loopdev::command;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Mutex, OnceLock};

/// What undoes one guard's work.
#[derive(Debug, Clone)]
pub enum Undo {
    /// A file system mounted on this directory.
    Unmount(PathBuf),
    /// A loop device (`/dev/loopN`).
    Detach(String),
    /// A child process (sent SIGTERM).
    Terminate(u32),
    /// The files and directories of this process (`*-<pid>*`) in a scratch directory,
    /// and the directory itself if this process created it and it is left empty.
    ScratchFiles {
        dir: PathBuf,
        pid: u32,
        created_dir: bool,
    },
    /// A file of this process outside its scratch directory (an emulated PMR in
    /// /dev/shm).
    File(PathBuf),
}

struct Pending {
    next: u64,
    undos: Vec<(u64, Undo)>,
}

/// Held by the signal thread from the signal on (it ends the process holding it).
static UNDOING: Mutex<()> = Mutex::new(());
/// The signal that interrupted the process, once the signal thread holds `UNDOING`.
static SIGNAL: AtomicI32 = AtomicI32::new(0);

static PENDING: Mutex<Pending> = Mutex::new(Pending {
    next: 0,
    undos: Vec::new(),
});

fn pending() -> std::sync::MutexGuard<'static, Pending> {
    PENDING.lock().unwrap_or_else(|e| e.into_inner())
}

/// An undo registered until dropped.
#[derive(Debug)]
pub struct Registered(u64);

impl Drop for Registered {
    fn drop(&mut self) {
        pending().undos.retain(|(id, _)| *id != self.0);
    }
}

/// Registers `undo` to run if a signal interrupts the process while the returned
/// guard lives (the signal handler is installed on first use).
pub fn on_interrupt(undo: Undo) -> Registered {
    static HANDLER: OnceLock<()> = OnceLock::new();
    HANDLER.get_or_init(install_handler);
    let mut p = pending();
    p.next += 1;
    let id = p.next;
    p.undos.push((id, undo));
    Registered(id)
}

fn install_handler() {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    match signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) {
        Ok(mut signals) => {
            std::thread::Builder::new()
                .name("bench-interrupt".to_string())
                .spawn(move || {
                    if let Some(signal) = signals.forever().next() {
                        let _undoing = UNDOING.lock().unwrap_or_else(|e| e.into_inner());
                        SIGNAL.store(signal, Ordering::SeqCst);
                        eprintln!("\naugefs: interrupted (signal {signal}); undoing mounts, loop devices and bench files");
                        undo_all();
                        std::process::exit(128 + signal);
                    }
                })
                .map(|_| ())
                .unwrap_or_else(|e| eprintln!("augefs: cannot watch for interrupts: {e}"));
        }
        Err(e) => eprintln!("augefs: cannot install interrupt handlers: {e}"),
    }
}

/// Called by the main thread before it reports a command's outcome: if a signal
/// interrupted the process, waits for the signal thread, which undoes and ends the
/// process with 128 + the signal (the command's own outcome, failed by the undoing, is
/// not reported).
pub fn wait_if_interrupted() {
    if SIGNAL.load(Ordering::SeqCst) != 0 {
        let _never = UNDOING.lock();
        unreachable!("the signal thread ends the process holding the lock");
    }
}

/// Runs every registered undo, newest first, reporting failures on stderr.
fn undo_all() {
    let undos: Vec<Undo> = std::mem::take(&mut pending().undos)
        .into_iter()
        .rev()
        .map(|(_, undo)| undo)
        .collect();
    for undo in undos {
        if let Err(e) = run(&undo) {
            eprintln!("augefs: {e}");
        }
    }
}

fn run(undo: &Undo) -> Result<(), String> {
    match undo {
        Undo::Unmount(dir) => {
            if is_mount_point(dir) {
                // A FUSE daemon ended just before unmounts itself meanwhile.
                if let Err(e) = command("umount", &["-l", &dir.to_string_lossy()]) {
                    if is_mount_point(dir) {
                        return Err(e);
                    }
                }
            }
            Ok(())
        }
        Undo::Detach(device) => command("losetup", &["-d", device]).map(|_| ()),
        Undo::Terminate(pid) => {
            // SAFETY: kill(2) has no memory-safety preconditions; the pid is our own
            // child's, which the benchmark reaps only after unregistering this undo.
            unsafe { libc::kill(*pid as libc::pid_t, libc::SIGTERM) };
            Ok(())
        }
        Undo::ScratchFiles {
            dir,
            pid,
            created_dir,
        } => remove_scratch(dir, *pid, *created_dir),
        Undo::File(path) => match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(format!("{}: {e}", path.display()))
            }
            _ => Ok(()),
        },
    }
}

/// Whether `dir` is a mount point now (`/proc/self/mountinfo`, field 5).
pub fn is_mount_point(dir: &Path) -> bool {
    let dir = dir.to_string_lossy();
    std::fs::read_to_string("/proc/self/mountinfo")
        .map(|m| m.lines().any(|l| l.split(' ').nth(4) == Some(&*dir)))
        .unwrap_or(false)
}

/// Whether `name` is one of process `pid`'s scratch names (`<stem>-<pid><rest>`, the
/// rest empty or starting with a character that cannot continue a number).
fn is_ours(name: &str, pid: u32) -> bool {
    let tag = format!("-{pid}");
    name.match_indices(&tag).any(|(at, _)| {
        name[at + tag.len()..]
            .chars()
            .next()
            .is_none_or(|c| !c.is_ascii_digit())
    })
}

fn remove_scratch(dir: &Path, pid: u32, created_dir: bool) -> Result<(), String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries.flatten() {
        let path = entry.path();
        if !is_ours(&entry.file_name().to_string_lossy(), pid) {
            continue;
        }
        let removed = if path.is_dir() {
            if is_mount_point(&path) {
                Err(format!("{} is still mounted: left", path.display()))
            } else {
                std::fs::remove_dir_all(&path).map_err(|e| e.to_string())
            }
        } else {
            std::fs::remove_file(&path).map_err(|e| e.to_string())
        };
        if let Err(e) = removed {
            eprintln!("augefs: removing {}: {e}", path.display());
        }
    }
    if created_dir {
        // Another invocation may still use it.
        let _ = std::fs::remove_dir(dir);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scratch_names_match_their_own_pid_only() {
        assert!(is_ours("bench-fs-augefs-42.img", 42));
        assert!(is_ours("fjall-42", 42));
        assert!(is_ours("amplify-xfs-42.mnt", 42));
        assert!(!is_ours("bench-fs-augefs-421.img", 42));
        assert!(!is_ours("bench-fs-augefs-4.img", 42));
        assert!(!is_ours("someone-else", 42));
    }

    #[test]
    fn undos_run_newest_first_and_dropped_guards_unregister() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("scratch");
        std::fs::create_dir(&dir).unwrap();
        let pid = 7;
        std::fs::write(dir.join("a-7.img"), b"x").unwrap();
        std::fs::create_dir_all(dir.join("fjall-7/sub")).unwrap();
        std::fs::write(dir.join("a-77.img"), b"y").unwrap();
        let scratch = on_interrupt(Undo::ScratchFiles {
            dir: dir.clone(),
            pid,
            created_dir: true,
        });
        let gone = on_interrupt(Undo::Terminate(u32::MAX));
        drop(gone);
        let gone_id = scratch.0 + 1;
        let ids: Vec<u64> = pending().undos.iter().map(|(id, _)| *id).collect();
        assert!(ids.contains(&scratch.0), "registered while its guard lives");
        assert!(!ids.contains(&gone_id), "unregistered when dropped");
        run(&Undo::ScratchFiles {
            dir: dir.clone(),
            pid,
            created_dir: true,
        })
        .unwrap();
        drop(scratch);
        let left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            left,
            vec!["a-77.img".to_string()],
            "another pid's file stays"
        );
    }
}
