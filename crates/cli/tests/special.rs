//! Special files and mmap through the kernel (docs/SEMANTICS.md §4 "Special files"):
//! a C program (tests/special/special.c) makes, stats, renames, links, chmods, chowns
//! and removes a FIFO, sockets and device nodes, and passes bytes through the FIFO and
//! a Unix socket, on a FUSE mount and through the interposer (`augefs run`, where the
//! owner opens them on its bridge); the nodes survive a remount and fsck finds the image
//! clean. Without a bridge the interposer refuses to open a FIFO (ENXIO, one log line).
//! A bridged child maps an augefs file MAP_SHARED, stores and msyncs
//! (tests/special/bridged_mmap.c), and the owner reads its bytes.
//!
//! Needs root, /dev/fuse, cc and `libaugefs_preload.so` next to the `augefs` binary
//! (scripts/test builds it); a guard unmounts and kills the daemon even when a test
//! panics.

mod common;

use common::*;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;
use std::process::Command;
use testsupport::process::{checked_stdout, sh};

/// The nodes special.c leaves: a FIFO and the character device (1, 5).
fn kept_nodes_are_there(dir: &Path) {
    let fifo = std::fs::symlink_metadata(dir.join("sp/keep-fifo")).expect("keep-fifo");
    assert!(fifo.file_type().is_fifo(), "{fifo:?}");
    assert_eq!(
        (fifo.mode() & 0o7777, fifo.rdev(), fifo.len()),
        (0o600, 0, 0)
    );
    let chr = std::fs::symlink_metadata(dir.join("sp/keep-chr")).expect("keep-chr");
    assert!(chr.file_type().is_char_device(), "{chr:?}");
    assert_eq!(
        (chr.mode() & 0o7777, chr.rdev()),
        (0o644, libc::makedev(1, 5))
    );
}

#[test]
fn special_files_on_a_fuse_mount() {
    let fx = fixture();
    let exe = compile_c(&fx, "special", "special");
    // `dev`: the kernel opens device nodes on this mount (augefs never does).
    fx.mount_with(BIN, &["mount"], &["-o", "dev"]);
    let out = Command::new(&exe)
        .arg(&fx.mnt)
        .arg("dev")
        .output()
        .expect("run special");
    assert_eq!(checked_stdout("special", &out).trim(), "special ok");
    // A shell's FIFO on the mount: a writer and a reader pass bytes.
    let piped = sh(
        "mkfifo \"$MNT/pipe\"; (echo through the mount > \"$MNT/pipe\") & \
         cat \"$MNT/pipe\"; wait; rm \"$MNT/pipe\"",
        &fx.vars(),
    );
    assert_eq!(piped, "through the mount\n");
    kept_nodes_are_there(&fx.mnt);
    fx.unmount();
    fx.fsck_clean();
    // The default mount is nodev: the nodes are there, the device does not open.
    fx.mount();
    kept_nodes_are_there(&fx.mnt);
    let denied = std::fs::OpenOptions::new()
        .read(true)
        .open(fx.mnt.join("sp/keep-chr"))
        .unwrap_err();
    assert_eq!(denied.raw_os_error(), Some(libc::EACCES));
    fx.unmount();
}

#[test]
fn special_files_through_the_interposer() {
    let fx = fixture();
    let exe = compile_c(&fx, "special", "special");
    // The bridge is mounted nodev: a device node opens with EACCES there.
    let out = run(
        &fx,
        &[exe.to_str().expect("utf-8 path"), "/augefs", "nodev"],
    );
    assert_eq!(checked_stdout("special", &out).trim(), "special ok");
    fx.fsck_clean();
    let again = run(
        &fx,
        &[
            "stat",
            "-c",
            "%F %t:%T %a %s",
            "/augefs/sp/keep-chr",
            "/augefs/sp/keep-fifo",
        ],
    );
    assert_eq!(
        checked_stdout("stat", &again),
        "character special file 1:5 644 0\nfifo 0:0 600 0\n"
    );
    let log = std::fs::read_to_string(log_of(&fx)).unwrap_or_default();
    assert!(!log.contains("ENOTSUP"), "nothing refused: {log}");
    // Through FUSE the image shows the same nodes.
    fx.mount();
    kept_nodes_are_there(&fx.mnt);
    fx.unmount();
}

/// The interposer loaded without `augefs run` has no bridge: mkfifo works (the node is
/// in the image), opening the FIFO fails with ENXIO and one log line.
#[test]
fn without_a_bridge_a_fifo_does_not_open() {
    let fx = fixture();
    preload_built();
    let lib = Path::new(BIN).with_file_name("libaugefs_preload.so");
    let script = "import os, stat\n\
                  os.mkfifo('/augefs/f', 0o600)\n\
                  assert stat.S_ISFIFO(os.stat('/augefs/f').st_mode)\n\
                  for _ in range(2):\n\
                  \x20   try:\n\
                  \x20       os.open('/augefs/f', os.O_RDONLY | os.O_NONBLOCK)\n\
                  \x20       raise SystemExit('opened')\n\
                  \x20   except OSError as e:\n\
                  \x20       assert e.errno == 6, e\n\
                  print('refused')\n";
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .env("LD_PRELOAD", &lib)
        .env("AUGEFS_IMAGE", &fx.image)
        .env("AUGEFS_LOG", log_of(&fx))
        .env_remove("AUGEFS_BRIDGE")
        .output()
        .expect("python3");
    assert_eq!(checked_stdout("python3", &out).trim(), "refused");
    let log = std::fs::read_to_string(log_of(&fx)).unwrap_or_default();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("ENXIO")).collect();
    assert_eq!(lines.len(), 1, "one log line: {log}");
    assert!(lines[0].contains("/f"), "{log}");
    fx.fsck_clean();
}

#[test]
fn a_bridged_child_maps_an_augefs_file_shared() {
    let fx = fixture();
    let exe = compile_c(&fx, "special", "bridged_mmap");
    let out = run(&fx, &[exe.to_str().expect("utf-8 path")]);
    assert_eq!(checked_stdout("bridged_mmap", &out).trim(), "mmap ok");
    fx.fsck_clean();
    let back = run(
        &fx,
        &[
            "dd",
            "if=/augefs/m",
            "bs=1",
            "skip=5000",
            "count=25",
            "status=none",
        ],
    );
    assert_eq!(checked_stdout("dd", &back), "stored by a bridged child");
}
