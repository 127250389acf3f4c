//! The binary on bad input: an image shorter than its file system is refused by every
//! command that opens images, with both sizes and the documented exit code and no
//! panic; a reader that goes away ends the command quietly (docs/TESTING.md §1).

mod common;

use common::{augefs, mkfs, BIN};
use engine::log::EngineConfig;
use std::ffi::OsStr;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use testsupport::fuse::is_mounted;
use testsupport::mount::{open_file, unmount};
use testsupport::process::{check, describe};
use testsupport::scratch;

const FS_BYTES: u64 = 256 << 20;
const CUT_BYTES: u64 = 128 << 20;

/// A fresh 64 MiB image at `image`.
fn mkfs_64m(image: &Path) {
    check("mkfs", &mkfs(image, "64M", &[]));
}

/// Cuts or grows the image file to `len` bytes.
fn set_len(image: &Path, len: u64) {
    let file = std::fs::OpenOptions::new().write(true).open(image).unwrap();
    file.set_len(len).unwrap();
}

/// A 256 MiB image with a file in it (so recovery has a WAL to replay), cut to half.
fn truncated_image(path: &Path) {
    check("mkfs", &mkfs(path, "256M", &[]));
    let fs = open_file(path, EngineConfig::default());
    let f = vfs::OpenOptions::new()
        .write(true)
        .create(true)
        .open(&fs, "/f")
        .unwrap();
    f.write_at(&[7u8; 100_000], 0).unwrap();
    drop(f);
    unmount(fs);
    set_len(path, CUT_BYTES);
}

/// The refusal every command must print: the reason and both sizes, and no panic.
fn assert_refused(what: &str, o: &Output, exit: i32) {
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(exit), "{what}: {}", describe(o));
    assert!(
        stderr.contains("shorter than its file system")
            && stderr.contains(&CUT_BYTES.to_string())
            && stderr.contains(&FS_BYTES.to_string()),
        "{what} does not say the image is shorter than its file system, with both sizes: {}",
        describe(o)
    );
    assert!(
        !stderr.contains("panicked"),
        "{what} panicked: {}",
        describe(o)
    );
}

#[test]
fn a_truncated_image_is_refused_by_every_command() {
    let dir = scratch!();
    let image = dir.path().join("img");
    truncated_image(&image);
    let img = image.as_os_str();
    let run = |args: &[&str]| {
        let mut all: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
        all.push(img);
        augefs(&all)
    };
    // fsck: e2fsck's operational error (8) in every mode; -n changes nothing.
    let before = std::fs::read(&image).unwrap();
    for mode in [
        &["fsck", "-n"][..],
        &["fsck"],
        &["fsck", "-p"],
        &["fsck", "-y"],
        &["fsck", "--json"],
    ] {
        assert_refused(&mode.join(" "), &run(mode), 8);
    }
    assert!(
        std::fs::read(&image).unwrap() == before,
        "fsck changed the image"
    );
    assert_refused("inspect", &run(&["inspect"]), 1);
    assert_refused("inspect --json", &run(&["inspect", "--json"]), 1);

    // mount, as a daemon (the parent prints the daemon's error) and in the foreground.
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    for fg in [false, true] {
        let mut args = vec![OsStr::new("mount"), img, mnt.as_os_str()];
        if fg {
            args.push(OsStr::new("-f"));
        }
        let o = augefs(&args);
        if is_mounted(&mnt) {
            let _ = Command::new("umount").arg("-l").arg(&mnt).status();
        }
        assert_refused(if fg { "mount -f" } else { "mount" }, &o, 1);
    }

    // run: the interposer's owner cannot attach; the program sees the errno (EUCLEAN)
    // and the log line says why.
    let preload = Path::new(BIN).with_file_name("libaugefs_preload.so");
    if preload.exists() {
        let o = Command::new(BIN)
            .args([
                OsStr::new("run"),
                OsStr::new("--image"),
                img,
                OsStr::new("--"),
            ])
            .args(["stat", "/augefs"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "run: {}", describe(&o));
        assert!(
            stderr.contains("shorter than its file system")
                && stderr.contains(&CUT_BYTES.to_string())
                && stderr.contains(&FS_BYTES.to_string())
                && stderr.contains("Structure needs cleaning"),
            "run: {}",
            describe(&o)
        );
        assert!(
            !stderr.contains("panicked"),
            "run panicked: {}",
            describe(&o)
        );
    } else {
        eprintln!(
            "note: {} not built; `augefs run` not checked here",
            preload.display()
        );
    }
}

/// An image cut inside its superblocks (copy 0 whole) is still called a cut augefs
/// image, not a foreign file.
#[test]
fn an_image_cut_inside_its_superblocks_is_recognised() {
    let dir = scratch!();
    let image = dir.path().join("img");
    mkfs_64m(&image);
    set_len(&image, 4608);
    let o = augefs(&[OsStr::new("fsck"), OsStr::new("-n"), image.as_os_str()]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(8), "{}", describe(&o));
    assert!(
        stderr.contains("shorter than its file system")
            && stderr.contains("4608")
            && stderr.contains(&(64u64 << 20).to_string()),
        "{}",
        describe(&o)
    );
}

/// A larger device than the superblock says is fine (docs/FORMAT.md §3).
#[test]
fn a_grown_image_still_opens() {
    let dir = scratch!();
    let image = dir.path().join("img");
    mkfs_64m(&image);
    set_len(&image, 80 << 20);
    let o = augefs(&[OsStr::new("fsck"), OsStr::new("-n"), image.as_os_str()]);
    assert_eq!(o.status.code(), Some(0), "{}", describe(&o));
    let o = augefs(&[OsStr::new("inspect"), image.as_os_str()]);
    assert!(o.status.success(), "{}", describe(&o));
}

/// `augefs inspect img | head -1`: the reader goes away before the command writes; the
/// command ends by SIGPIPE (what a shell reports as 141) or exit 0, never a panic.
#[test]
fn a_closed_pipe_ends_the_command_quietly() {
    let dir = scratch!();
    let image = dir.path().join("img");
    mkfs_64m(&image);
    for args in [
        &["inspect"][..],
        &["inspect", "--json"],
        &["fsck", "-n"],
        &["fsck", "-n", "--json"],
    ] {
        let mut child = Command::new(BIN)
            .args(args)
            .arg(&image)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Close the read end at once: the command has not printed yet (it is still
        // opening the image), so its first write meets a pipe without a reader.
        drop(child.stdout.take());
        let mut stderr = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        let status = child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert!(
            status.success() || status.signal() == Some(libc::SIGPIPE),
            "{args:?}: {status}, stderr: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{args:?} panicked: {stderr}");
    }
}

/// A mount point in the kernel's own file systems (a process's /proc entry, a sysfs
/// directory) is refused before anything is opened, naming the file system; nothing
/// gets mounted there.
#[test]
fn a_mount_on_proc_or_sys_is_refused() {
    let dir = scratch!();
    let image = dir.path().join("img");
    mkfs_64m(&image);
    for target in ["/proc/1", "/sys/kernel"] {
        let o = augefs(&["mount".as_ref(), image.as_os_str(), target.as_ref()]);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{target}: {}", describe(&o));
        assert!(
            stderr.contains("the kernel's") && stderr.contains(target),
            "{target}: {}",
            describe(&o)
        );
        assert!(!is_mounted(Path::new(target)), "{target} was mounted");
    }
}
