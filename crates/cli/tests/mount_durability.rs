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
use testsupport::bytes::bytes;
use testsupport::fuse::{alive, daemons, Fixture};
use testsupport::process::{check, sh, wait_until};

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

/// SIGKILLs the daemon (nothing is unmounted or synced) and detaches the dead mount.
fn kill_daemon(fx: &Fixture) {
    let pids = daemons(&fx.mnt);
    assert_eq!(pids.len(), 1);
    sh(&format!("kill -KILL {}", pids[0]), &[]);
    wait_until("the daemon dies", || !alive(pids[0]));
    sh("umount -l \"$MNT\"", &fx.vars());
}

/// [`kill_daemon`], then mounts the image again.
fn kill_and_remount(fx: &Fixture) {
    kill_daemon(fx);
    fx.mount();
}

/// `sync DIR` of the mount point (an fsync of the root directory) makes everything
/// written before it durable: a SIGKILL of the daemon right after loses nothing, with
/// the background commit off (Linux passes sync(2) and syncfs(2) to no /dev/fuse
/// server, so this is the call that reaches one).
#[test]
fn an_fsync_of_the_mount_root_makes_everything_durable() {
    let fx = fixture();
    fx.mount_with(BIN, &["mount"], &["-o", "commit=0"]);
    write_workload(&fx.mnt);
    sh("sync \"$MNT\"", &fx.vars());
    kill_and_remount(&fx);
    check_workload(&fx.mnt);
    fx.unmount();
    fx.fsck_clean();
}

/// An rm -rf made durable (`sync DIR`) and a SIGKILL right after, before the files'
/// blocks were freed in the background (vfs::reap): the crash image checks clean (the
/// unlinked files are orphans), the next mount frees them, and the rest is intact.
#[test]
fn an_rm_rf_made_durable_then_a_kill_frees_its_files_at_the_next_mount() {
    let fx = fixture();
    fx.mount_with(BIN, &["mount"], &["-o", "commit=0"]);
    write_workload(&fx.mnt);
    sh("sync \"$MNT\"", &fx.vars());
    sh(
        "rm -rf \"$MNT/d\" \"$MNT/big1\" && sync \"$MNT\"",
        &fx.vars(),
    );
    kill_daemon(&fx);
    fx.fsck_clean();
    fx.mount();
    assert!(!fx.mnt.join("d").exists() && !fx.mnt.join("big1").exists());
    for (i, len) in [(0u64, 6_000_001usize), (2, 3_333_333)] {
        let got = fs::read(fx.mnt.join(format!("big{i}"))).expect("read big");
        assert!(got == bytes(i, len), "big{i} differs after the remount");
    }
    fx.unmount();
    // What is left: the root and the two files, mapping exactly their blocks.
    let out = sh(
        "\"$BIN\" fsck \"$IMG\" -n",
        &[("BIN", Path::new(BIN)), ("IMG", &fx.image)],
    );
    let blocks = 6_000_001u64.div_ceil(4096) + 3_333_333u64.div_ceil(4096);
    assert!(
        out.contains("clean") && out.contains(": 3 files ("),
        "{out}"
    );
    assert!(
        out.contains(&format!(", {blocks}/")),
        "{blocks} blocks mapped: {out}"
    );
}

#[test]
fn background_commit_makes_writes_durable_without_sync() {
    let fx = fixture();
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
    let fx = fixture();
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
    let fx = fixture();
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
    let fx = fixture();
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

/// A tmpfs the test mounts and always unmounts (its holder is the image of a mount).
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn new(size: &str) -> Tmpfs {
        let dir = tempfile::TempDir::new().expect("tempdir");
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .expect("mount tmpfs");
        check("mount -t tmpfs", &out);
        Tmpfs { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .output();
    }
}

/// A device failure (the host file system under a sparse image, made by `mkfs --lazy`,
/// runs full, so the daemon's writes fail with ENOSPC) turns the mount read-only, and that is said where
/// users look: the daemon's log, the kernel's log and the mount's flags (/proc/mounts
/// `ro`, statfs ST_RDONLY). What was fsync'd before is intact after a remount.
#[test]
fn a_device_failure_turns_the_mount_read_only_and_says_so() {
    let host = Tmpfs::new("300m");
    let fx = fixture();
    let image = host.path().join("img");
    let log = fx.host.join("daemon.log");
    sh(
        "truncate -s 256M \"$IMG\" && \"$AUGEFS\" mkfs \"$IMG\" --size 256M --lazy >/dev/null",
        &[("IMG", &image), ("AUGEFS", Path::new(BIN))],
    );
    let out = std::process::Command::new(BIN)
        .arg("mount")
        .arg(&image)
        .arg(&fx.mnt)
        .arg("--log")
        .arg(&log)
        .output()
        .expect("augefs mount");
    check("augefs mount", &out);
    let v = [("MNT", fx.mnt.as_path()), ("HOST", host.path())];
    sh(
        "head -c 3000000 /dev/urandom > \"$MNT/kept\" && sync \"$MNT/kept\" && \
         sha256sum < \"$MNT/kept\" > \"$HOST/kept.sum\"",
        &v,
    );
    // Fill the host file system: the image's holes can no longer be written.
    sh(
        "dd if=/dev/zero of=\"$HOST/filler\" bs=1M status=none 2>/dev/null || true",
        &v,
    );
    let failed = sh(
        "dd if=/dev/urandom of=\"$MNT/big\" bs=1M count=60 conv=fsync status=none 2>/dev/null \
         && echo 0 || echo $?",
        &v,
    );
    assert_ne!(
        failed.trim(),
        "0",
        "a write that cannot reach the device succeeded"
    );
    let erofs = sh("(echo x > \"$MNT/after\") 2>&1 || true", &v);
    assert!(erofs.contains("Read-only file system"), "{erofs}");
    let dir = fx.mnt.to_string_lossy().into_owned();
    wait_until("the mount shows ro", || {
        let mounts = fs::read_to_string("/proc/mounts").expect("/proc/mounts");
        mounts.lines().any(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            f.get(1) == Some(&dir.as_str())
                && f.get(3).is_some_and(|o| o.split(',').any(|x| x == "ro"))
        })
    });
    let statfs = sh(
        "stat -f -c %a \"$MNT\" >/dev/null; findmnt -no OPTIONS \"$MNT\"",
        &v,
    );
    assert!(statfs.split(',').any(|o| o.trim() == "ro"), "{statfs}");
    let said = fs::read_to_string(&log).expect("daemon log");
    assert!(said.contains("read-only from now on"), "{said}");
    let dmesg = sh("dmesg 2>/dev/null | tail -n 50 || true", &v);
    if !dmesg.is_empty() {
        assert!(dmesg.contains("read-only from now on"), "{dmesg}");
    }
    // Reads still work; unmount, give the host room, remount: the fsync'd file is intact.
    let sum = sh("sha256sum < \"$MNT/kept\"", &v);
    assert_eq!(
        sum,
        fs::read_to_string(host.path().join("kept.sum")).unwrap()
    );
    fx.unmount();
    fs::remove_file(host.path().join("filler")).expect("filler");
    let out = augefs(&["fsck".as_ref(), image.as_os_str(), "-n".as_ref()]);
    check("augefs fsck -n after the failure", &out);
    let out = std::process::Command::new(BIN)
        .arg("mount")
        .arg(&image)
        .arg(&fx.mnt)
        .output()
        .expect("augefs mount");
    check("augefs mount again", &out);
    assert_eq!(
        sh("sha256sum < \"$MNT/kept\"", &v),
        fs::read_to_string(host.path().join("kept.sum")).unwrap()
    );
    fx.unmount();
}
