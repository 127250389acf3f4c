//! What a FUSE mount makes durable without a clean unmount, and its other mount options:
//! the background commit (`-o commit=N`: written data survives a SIGKILL of the daemon
//! once N seconds passed, and an idle mount writes nothing), `writeback_cache` with
//! files removed or replaced while the kernel still holds their inodes (a syncfs must
//! not fail), and `-o ro` (a read-only kernel mount).
//!
//! Needs root and /dev/fuse, as CI has; a guard unmounts and kills the daemon even when
//! a test panics.

mod common;

use common::*;
use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

/// Deterministic bytes (xorshift64*).
fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8
        })
        .collect()
}

/// 200 small files in `d/` and three large buffered writes (several MiB each) at the top.
fn write_workload(mnt: &Path) {
    fs::create_dir(mnt.join("d")).expect("mkdir");
    for i in 0..200 {
        fs::write(mnt.join(format!("d/f{i}")), format!("file {i}\n")).expect("write");
    }
    for (i, len) in [(0u64, 6_000_001usize), (1, 4 << 20), (2, 3_333_333)] {
        fs::write(mnt.join(format!("big{i}")), bytes(i, len)).expect("write big");
    }
}

/// Every file of [`write_workload`] is there with its contents.
fn check_workload(mnt: &Path) {
    let names = fs::read_dir(mnt.join("d")).expect("readdir").count();
    assert_eq!(names, 200, "files in d/ after the remount");
    for i in 0..200 {
        let got = fs::read_to_string(mnt.join(format!("d/f{i}"))).expect("read");
        assert_eq!(got, format!("file {i}\n"), "d/f{i}");
    }
    for (i, len) in [(0u64, 6_000_001usize), (1, 4 << 20), (2, 3_333_333)] {
        let got = fs::read(mnt.join(format!("big{i}"))).expect("read big");
        assert!(got == bytes(i, len), "big{i} differs after the remount");
    }
}

/// SIGKILLs the daemon (nothing is unmounted or synced), detaches the dead mount and
/// mounts the image again.
fn kill_and_remount(fx: &Fixture) {
    let pids = daemons(&fx.mnt);
    assert_eq!(pids.len(), 1);
    sh(&format!("kill -KILL {}", pids[0]), &[]);
    wait_until("the daemon dies", || !alive(pids[0]));
    sh("umount -l \"$MNT\"", &fx.vars());
    fx.mount();
}

#[test]
fn background_commit_makes_writes_durable_without_sync() {
    let fx = Fixture::new();
    fx.mount_with(BIN, &["mount"], &["-o", "commit=1"]);
    write_workload(&fx.mnt);
    // Past the interval (and the commit it starts): no fsync, no sync, no unmount.
    std::thread::sleep(Duration::from_secs(4));
    kill_and_remount(&fx);
    check_workload(&fx.mnt);
    fx.unmount();
    fx.fsck_clean();
}

/// The image's modification time, to the nanosecond (every device write sets it).
fn image_mtime(fx: &Fixture) -> String {
    sh("stat -c %y \"$IMG\"", &[("IMG", &fx.image)])
}

#[test]
fn an_idle_mount_commits_nothing() {
    let fx = Fixture::new();
    fx.mount_with(BIN, &["mount"], &["-o", "commit=1"]);
    fs::write(fx.mnt.join("f"), b"once").expect("write");
    // The write is committed within a second or two; after that nothing changes, so
    // nothing may be written however many intervals pass.
    let start = Instant::now();
    let mut last = image_mtime(&fx);
    loop {
        std::thread::sleep(Duration::from_millis(2500));
        let now = image_mtime(&fx);
        if now == last {
            break;
        }
        last = now;
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the image keeps changing"
        );
    }
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(image_mtime(&fx), last, "an idle mount wrote to its image");
    fx.unmount();
}

#[test]
fn syncfs_with_writeback_cache_after_removing_and_replacing_files() {
    let fx = Fixture::new();
    fx.mount_with(BIN, &["mount"], &["-o", "writeback_cache,commit=0"]);
    let v = fx.vars();
    // The kernel writes the times of f (and of the replaced g) after their last name is
    // gone; the daemon must not fail that with ENOENT (syncfs would report it).
    sh("cd \"$MNT\" && echo a > f && rm f && sync -f \"$MNT\"", &v);
    sh(
        "cd \"$MNT\" && echo a > g && echo b > h && mv h g && sync -f \"$MNT\" && \
         test \"$(cat g)\" = b",
        &v,
    );
    sh(
        "cd \"$MNT\" && exec 3> k && echo x >&3 && rm k && sync -f \"$MNT\" && echo y >&3 && \
         exec 3>&- && sync -f \"$MNT\" && test ! -e k",
        &v,
    );
    fx.unmount();
    fx.fsck_clean();
}

#[test]
fn a_read_only_mount_reads_and_refuses_changes() {
    let fx = Fixture::new();
    fx.mount();
    fs::write(fx.mnt.join("f"), b"kept").expect("write");
    fx.unmount();
    let before = fs::read(&fx.image).expect("the image");
    fx.mount_with(BIN, &["mount"], &["-o", "ro"]);
    // Readers share the image with a read-only mount.
    let out = augefs(&["inspect".as_ref(), fx.image.as_os_str()]);
    check("augefs inspect beside a read-only mount", &out);
    let mounts = fs::read_to_string("/proc/mounts").expect("/proc/mounts");
    let dir = fx.mnt.to_string_lossy();
    let line = mounts
        .lines()
        .find(|l| l.split(' ').nth(1) == Some(dir.as_ref()))
        .expect("the mount is listed");
    let opts = line.split(' ').nth(3).expect("options");
    assert!(opts.split(',').any(|o| o == "ro"), "{line}");
    assert_eq!(fs::read(fx.mnt.join("f")).expect("read"), b"kept");
    let err = fs::write(fx.mnt.join("g"), b"x").expect_err("a write on a ro mount");
    assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{err}");
    let err = fs::remove_file(fx.mnt.join("f")).expect_err("an unlink on a ro mount");
    assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{err}");
    fx.unmount();
    assert!(
        fs::read(&fx.image).expect("the image") == before,
        "a read-only mount changed the image"
    );
}
