//! `augefs mount`, exercised with real programs through the kernel: cp -a, diff -r, tar,
//! find, du, mv, rm -r, stat, chmod, touch, sha256sum and python's xattr calls on a FUSE
//! mount of a fresh image; byte-identical after an unmount and a remount; a file removed
//! while open still read; SIGTERM leaving a clean, remountable image; clear errors.
//!
//! These tests need root (or a working fusermount3) and /dev/fuse, as CI has; a guard
//! unmounts and kills the daemon even when a test panics.

mod common;

use common::*;
use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;
use std::process::Command;
use testsupport::bytes::bytes;
use testsupport::fuse::{alive, daemons, is_mounted, mount_line};
use testsupport::process::{check, sh, wait_until};

/// A tree of files of many sizes (holes and block edges included), nested directories,
/// symlinks (relative, absolute, dangling, to a directory), hard links and odd modes.
fn make_tree(root: &Path) {
    const SIZES: [usize; 12] = [
        0, 1, 100, 4095, 4096, 4097, 8192, 65_536, 200_001, 1_048_576, 1_048_579, 3_000_001,
    ];
    for d in 0..4 {
        let dir = root.join(format!("dir{d}/sub{d}/deep"));
        fs::create_dir_all(&dir).expect("mkdir");
        for (i, &size) in SIZES.iter().enumerate() {
            let seed = (d * 100 + i) as u64;
            fs::write(dir.join(format!("f{i}")), bytes(seed, size)).expect("write");
            fs::write(
                root.join(format!("dir{d}/small{i}.txt")),
                format!("{d} {i}\n"),
            )
            .expect("write");
        }
    }
    fs::create_dir(root.join("empty")).expect("mkdir");
    fs::write(root.join("secret"), b"0600\n").expect("write");
    fs::set_permissions(root.join("secret"), fs::Permissions::from_mode(0o600)).expect("chmod");
    fs::write(root.join("tool"), b"#!/bin/sh\necho tool ran\n").expect("write");
    fs::set_permissions(root.join("tool"), fs::Permissions::from_mode(0o755)).expect("chmod");
    symlink("dir0/small0.txt", root.join("link-rel")).expect("symlink");
    symlink("/nonexistent/target", root.join("link-dangling")).expect("symlink");
    symlink("dir1", root.join("link-dir")).expect("symlink");
    fs::hard_link(root.join("dir2/small3.txt"), root.join("hard-a")).expect("link");
    fs::hard_link(root.join("dir2/small3.txt"), root.join("dir3/hard-b")).expect("link");
    // A sparse file: a hole in the middle.
    sh(
        "truncate -s 5000000 \"$T/sparse\" && printf end >> \"$T/sparse\"",
        &[("T", root)],
    );
}

#[test]
fn real_programs_on_a_mount_and_the_copy_survives_a_remount() {
    let fx = fixture();
    let src = fx.host.join("src");
    fs::create_dir(&src).expect("src");
    make_tree(&src);
    fx.mount();
    let v = fx.vars();

    // cp -a in; diff -r, checksums, and the hard links' shared inode.
    sh(
        "cp -a \"$HOST/src\" \"$MNT/copy\" && diff -r --no-dereference \"$HOST/src\" \"$MNT/copy\"",
        &v,
    );
    let sums = |dir: &str| {
        sh(
            &format!("cd \"{dir}\" && find . -type f -print0 | sort -z | xargs -0 sha256sum"),
            &v,
        )
    };
    let want = sums(&src.to_string_lossy());
    assert_eq!(sums(&fx.mnt.join("copy").to_string_lossy()), want);
    let inode = |p: &str| sh(&format!("stat -c %i \"$MNT/copy/{p}\""), &v);
    assert_eq!(inode("hard-a"), inode("dir3/hard-b"));
    assert_eq!(sh("stat -c %h \"$MNT/copy/hard-a\"", &v).trim(), "3");
    assert_eq!(sh("stat -c %a \"$MNT/copy/secret\"", &v).trim(), "600");
    assert_eq!(
        sh("readlink \"$MNT/copy/link-dangling\"", &v).trim(),
        "/nonexistent/target"
    );
    assert_eq!(sh("\"$MNT/copy/tool\"", &v).trim(), "tool ran");
    // cp -a kept modification times.
    assert_eq!(
        sh("stat -c %Y \"$MNT/copy/dir1/sub1/deep/f7\"", &v),
        sh("stat -c %Y \"$HOST/src/dir1/sub1/deep/f7\"", &v)
    );

    // tar out of the mount and back into it.
    sh(
        "tar -C \"$MNT\" -cf \"$HOST/t.tar\" copy && mkdir \"$MNT/untar\" && \
         tar -C \"$MNT/untar\" -xf \"$HOST/t.tar\" && \
         diff -r --no-dereference \"$HOST/src\" \"$MNT/untar/copy\"",
        &v,
    );
    // find and du agree with the host.
    let listing = |d: &str| sh(&format!("cd \"{d}\" && find . | sort"), &v);
    assert_eq!(
        listing(&fx.mnt.join("copy").to_string_lossy()),
        listing(&src.to_string_lossy())
    );
    let du: u64 = sh("du -s --apparent-size -B1 \"$MNT/copy\" | cut -f1", &v)
        .trim()
        .parse()
        .expect("du prints a number");
    assert!(du > 4 * 5_000_000, "du {du}");

    // mv (also across directories and with -n: RENAME_NOREPLACE), rm -r.
    sh(
        "mv \"$MNT/untar/copy/dir0\" \"$MNT/moved\" && test -f \"$MNT/moved/sub0/deep/f11\" && \
         ! test -e \"$MNT/untar/copy/dir0\" && \
         mv \"$MNT/untar/copy/secret\" \"$MNT/untar/copy/tool2\" && \
         echo keep > \"$MNT/keep\" && mv -n \"$MNT/moved/small1.txt\" \"$MNT/keep\" && \
         test \"$(cat \"$MNT/keep\")\" = keep && \
         rm -r \"$MNT/untar\" \"$MNT/moved\" && test -z \"$(ls \"$MNT/\" | grep -v -e copy -e keep)\"",
        &v,
    );
    // stat, chmod, touch (explicit times and now), truncate, chown.
    sh(
        "f=\"$MNT/copy/dir1/small2.txt\"; chmod 640 \"$f\" && test $(stat -c %a \"$f\") = 640 && \
         touch -d '2001-02-03 04:05:06.789 UTC' \"$f\" && \
         test $(stat -c %Y \"$f\") = 981173106 && \
         touch -a -d '1999-01-01 UTC' \"$f\" && test $(stat -c %X \"$f\") = 915148800 && \
         test $(stat -c %Y \"$f\") = 981173106 && \
         touch \"$f\" && test $(( $(date +%s) - $(stat -c %Y \"$f\") )) -lt 60 && \
         chown 1234:5678 \"$f\" && test \"$(stat -c %u:%g \"$f\")\" = 1234:5678 && \
         truncate -s 3 \"$f\" && test $(stat -c %s \"$f\") = 3",
        &v,
    );
    // Extended attributes, and renameat2's EXCHANGE and NOREPLACE, through the kernel.
    let script = r#"
import ctypes, errno, os, sys
mnt = sys.argv[1]
p = mnt + '/keep'
os.setxattr(p, 'user.k', b'v' * 1000)
assert os.getxattr(p, 'user.k') == b'v' * 1000
assert os.listxattr(p) == ['user.k']
try:
    os.setxattr(p, 'user.k', b'w', os.XATTR_CREATE)
    raise SystemExit('XATTR_CREATE replaced an attribute')
except OSError as e:
    assert e.errno == errno.EEXIST, e
os.removexattr(p, 'user.k')
assert os.listxattr(p) == []
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, NOREPLACE, EXCHANGE = -100, 1, 2
a, b = (mnt + '/xa').encode(), (mnt + '/xb').encode()
open(a, 'w').write('A')
os.mkdir(b)
assert libc.renameat2(AT_FDCWD, a, AT_FDCWD, b, EXCHANGE) == 0, ctypes.get_errno()
assert os.path.isdir(a) and open(b).read() == 'A'
assert libc.renameat2(AT_FDCWD, b, AT_FDCWD, a, NOREPLACE) == -1
assert ctypes.get_errno() == errno.EEXIST
os.rmdir(a)
os.unlink(b)
"#;
    sh(&format!("python3 - \"$MNT\" <<'EOF'{script}EOF"), &v);
    let statfs = sh("stat -f -c '%b %S' \"$MNT\"", &v);
    assert_ne!(
        statfs.split(' ').next(),
        Some("0"),
        "statfs reports the size"
    );

    // Unmount, remount: byte-identical.
    fx.unmount_with(&["umount"]);
    fx.mount();
    sh(
        "diff -r --no-dereference -x small2.txt \"$HOST/src\" \"$MNT/copy\"",
        &v,
    );
    let after = sums(&fx.mnt.join("copy").to_string_lossy());
    let changed = "./dir1/small2.txt";
    let strip = |s: &str| {
        s.lines()
            .filter(|l| !l.ends_with(changed))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(strip(&after), strip(&want));
    assert_eq!(sh("cat \"$MNT/copy/dir1/small2.txt\"", &v), "1 2");
    assert_eq!(
        sh("stat -c %u:%g:%a \"$MNT/copy/dir1/small2.txt\"", &v).trim(),
        "1234:5678:640"
    );
    fx.unmount_with(&["fusermount3", "-u"]);
}

#[test]
fn a_file_removed_while_open_is_still_read_until_closed() {
    let fx = fixture();
    fx.mount();
    let v = fx.vars();
    let data = bytes(7, 300_000);
    fs::write(fx.mnt.join("f"), &data).expect("write");
    // Another process: opens, removes, reads through its descriptor.
    let out = sh(
        "exec 3< \"$MNT/f\"; rm \"$MNT/f\"; test ! -e \"$MNT/f\"; sha256sum <&3 | cut -d' ' -f1",
        &v,
    );
    fs::write(fx.host.join("d"), &data).expect("host copy");
    let want = sh("sha256sum \"$HOST/d\" | cut -d' ' -f1", &v);
    assert_eq!(out, want);
    // This process: writes to and reads an unlinked file.
    let mut f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(fx.mnt.join("g"))
        .expect("open g");
    fs::remove_file(fx.mnt.join("g")).expect("unlink g");
    use std::io::{Read, Seek, Write};
    f.write_all(&data).expect("write unlinked");
    f.rewind().expect("rewind");
    let mut back = Vec::new();
    f.read_to_end(&mut back).expect("read unlinked");
    assert!(
        back == data,
        "an unlinked open file reads back what was written"
    );
    drop(f);
    assert!(fs::read_dir(&fx.mnt).expect("readdir").next().is_none());
    fx.unmount_with(&["umount"]);
    fx.mount();
    assert!(fs::read_dir(&fx.mnt).expect("readdir").next().is_none());
}

#[test]
fn sigterm_unmounts_cleanly_and_the_image_remounts() {
    let fx = fixture();
    fx.mount();
    let v = fx.vars();
    sh(
        "mkdir \"$MNT/d\" && for i in $(seq 1 50); do echo $i > \"$MNT/d/$i\"; done",
        &v,
    );
    // A process holds a file open: the unmount is lazy and ends at its close.
    let mut holder = Command::new("bash")
        .arg("-c")
        .arg("exec 3< \"$MNT/d/1\"; read -r _ </dev/stdin || true")
        .env("MNT", &fx.mnt)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("holder");
    // Its fd 3 must be the file: bash holds other descriptors while it sets up the
    // redirection, and a holder still opening when the mount detaches opens nothing.
    let held = fx.mnt.join("d/1");
    wait_until("the holder opens its file", || {
        fs::read_link(format!("/proc/{}/fd/3", holder.id())).is_ok_and(|p| p == held)
    });
    let pids = daemons(&fx.mnt);
    assert_eq!(pids.len(), 1);
    sh(&format!("kill -TERM {}", pids[0]), &v);
    wait_until("the mount is detached", || !is_mounted(&fx.mnt));
    assert!(
        alive(pids[0]),
        "the daemon serves the open file until its close"
    );
    drop(holder.stdin.take());
    assert!(holder.wait().expect("holder").success());
    wait_until("the daemon exits", || !alive(pids[0]));

    fx.mount();
    let n = sh("ls \"$MNT/d\" | wc -l", &v);
    assert_eq!(n.trim(), "50");
    assert_eq!(sh("cat \"$MNT/d/37\"", &v), "37\n");
    let pids = daemons(&fx.mnt);
    sh(&format!("kill -INT {}", pids[0]), &v);
    wait_until("the daemon exits", || !alive(pids[0]));
    assert!(!is_mounted(&fx.mnt));
}

#[test]
fn bad_input_gives_clear_errors() {
    let fx = fixture();
    let fails = |args: &[&std::ffi::OsStr], says: &str| {
        let out = augefs(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} should fail");
        assert!(
            err.contains(says),
            "{args:?}: stderr {err:?} lacks {says:?}"
        );
    };
    let m = "mount".as_ref();
    let missing = fx.host.join("missing");
    fails(
        &[m, missing.as_os_str(), fx.mnt.as_os_str()],
        "no such image",
    );
    let junk = fx.host.join("junk");
    fs::write(&junk, vec![0u8; 1 << 20]).expect("junk");
    fails(
        &[m, junk.as_os_str(), fx.mnt.as_os_str()],
        "not an augefs image",
    );
    fails(
        &[m, fx.image.as_os_str(), junk.as_os_str()],
        "not a directory",
    );
    fails(
        &[m, fx.image.as_os_str(), missing.as_os_str()],
        "No such file",
    );
    fails(
        &[
            m,
            fx.image.as_os_str(),
            fx.mnt.as_os_str(),
            "-o".as_ref(),
            "bogus".as_ref(),
        ],
        "unknown mount option",
    );
    // Mounted once already: the image is locked.
    fx.mount();
    let second = fx.host.join("second");
    fs::create_dir(&second).expect("mkdir");
    let out = augefs(&[m, fx.image.as_os_str(), second.as_os_str()]);
    assert!(!out.status.success(), "a second mount of one image fails");
    assert!(!is_mounted(&second));
    fx.unmount_with(&["umount"]);
}

#[test]
fn writeback_cache_mount_keeps_data_intact() {
    let fx = fixture();
    let src = fx.host.join("src");
    fs::create_dir(&src).expect("src");
    make_tree(&src);
    fx.mount_with(BIN, &["mount"], &["-o", "writeback_cache,threads=2"]);
    let v = fx.vars();
    sh(
        "cp -a \"$HOST/src\" \"$MNT/copy\" && \
         printf abc | dd of=\"$MNT/copy/dir0/sub0/deep/f9\" bs=1 seek=5000 conv=notrunc && \
         printf abc | dd of=\"$HOST/src/dir0/sub0/deep/f9\" bs=1 seek=5000 conv=notrunc && \
         echo tail >> \"$MNT/copy/sparse\" && echo tail >> \"$HOST/src/sparse\" && \
         diff -r --no-dereference \"$HOST/src\" \"$MNT/copy\"",
        &v,
    );
    fx.unmount_with(&["umount"]);
    fx.mount();
    sh("diff -r --no-dereference \"$HOST/src\" \"$MNT/copy\"", &v);
    fx.unmount_with(&["umount"]);
}

#[test]
fn a_background_mount_reports_to_its_log() {
    let fx = fixture();
    let log = fx.host.join("daemon.log");
    fx.mount_with(
        BIN,
        &["mount"],
        &["--log", log.to_str().expect("utf-8 path")],
    );
    fx.unmount();
    let text = fs::read_to_string(&log).expect("the daemon wrote its log");
    assert!(text.contains("mounted on"), "{text}");
    assert!(text.contains("unmounted"), "{text}");
}

#[test]
fn the_mount_helper_takes_mount8_arguments() {
    // mount(8) runs /sbin/mount.fuse.augefs IMAGE DIR [-n] [-s] [-v] -o OPTS; a symlink
    // to the binary under that name is the helper (not installed here: a private one).
    let fx = fixture();
    let helper = fx.host.join("mount.fuse.augefs");
    symlink(BIN, &helper).expect("symlink the helper");
    fx.mount_with(
        &helper.to_string_lossy(),
        &[],
        &["-n", "-o", "rw,nosuid,noexec,noauto,_netdev"],
    );
    let line = mount_line(&fx.mnt).expect("the mount is listed");
    assert!(line.contains("noexec"), "{line}");
    fx.unmount_with(&["umount"]);
}

#[test]
fn foreground_mount_exits_zero_on_sigterm() {
    let fx = fixture();
    let mut child = Command::new(BIN)
        .arg("mount")
        .arg(&fx.image)
        .arg(&fx.mnt)
        .arg("-f")
        .spawn()
        .expect("augefs mount -f");
    wait_until("the foreground mount works", || is_mounted(&fx.mnt));
    fs::write(fx.mnt.join("f"), b"kept").expect("write");
    sh(&format!("kill -TERM {}", child.id()), &[]);
    let status = child.wait().expect("wait for augefs mount -f");
    assert!(
        status.success(),
        "augefs mount -f exits 0 on SIGTERM: {status}"
    );
    assert!(!is_mounted(&fx.mnt));
    fx.mount();
    assert_eq!(fs::read(fx.mnt.join("f")).expect("read"), b"kept");
    fx.unmount_with(&["umount"]);
}

#[test]
fn fallocate_and_seek_data_hole_work_through_the_mount() {
    let fx = fixture();
    fx.mount();
    let v = fx.vars();
    // util-linux's fallocate, and python's os.lseek with SEEK_DATA / SEEK_HOLE. Allocation
    // grows the size and maps nothing (docs/SEMANTICS.md, fallocate): 1 MiB written,
    // grown to 2 MiB, a hole punched, a preallocation past the end.
    let out = sh(
        "f=\"$MNT/sparse\" && head -c 1048576 /dev/zero > \"$f\" && \
         fallocate -l 2097152 \"$f\" && stat -c '%s %b' \"$f\" && \
         fallocate -p -o 4096 -l 8192 \"$f\" && stat -c '%s %b' \"$f\" && \
         fallocate -n -o 4194304 -l 4096 \"$f\" && stat -c '%s %b' \"$f\" && \
         python3 -c 'import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); \
print(os.lseek(fd, 0, os.SEEK_DATA), os.lseek(fd, 0, os.SEEK_HOLE), \
os.lseek(fd, 4096, os.SEEK_DATA), os.lseek(fd, 12288, os.SEEK_HOLE))' \"$f\"",
        &v,
    );
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "2097152 2048",
            "2097152 2032",
            "2097152 2032",
            "0 4096 12288 1048576"
        ],
        "{out}"
    );
    fx.unmount();
    fx.fsck_clean();
}

/// `umount` returns while the daemon still writes back what the kernel handed it (the
/// kernel does not wait for a FUSE daemon); the next command on the image waits for
/// that daemon (one line saying so) instead of failing "in use". A live mount is
/// refused at once, naming where it is mounted.
#[test]
fn commands_right_after_umount_wait_for_the_finishing_daemon() {
    let fx = fixture();
    fx.mount();
    let v = fx.vars();
    let out = augefs(&["fsck".as_ref(), fx.image.as_os_str(), "-n".as_ref()]);
    assert_eq!(out.status.code(), Some(8), "a mounted image is refused");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("mounted at {}", fx.mnt.display())),
        "{err}"
    );
    // inspect reads a mounted image (its last checkpoints, unlocked) and says so.
    let out = augefs(&["inspect".as_ref(), fx.image.as_os_str()]);
    check("augefs inspect of a mounted image", &out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("mounted at {}", fx.mnt.display()))
            && err.contains("last checkpoints"),
        "{err}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("checkpoints\n"));
    for round in 0..3 {
        // 48 MiB of buffered writes: the daemon's unmount writes them back.
        sh(
            &format!(
                "for i in 1 2 3; do dd if=/dev/urandom of=\"$MNT/r{round}-$i\" bs=1M count=16 status=none; done; \
                 (cd \"$MNT\" && sha256sum r{round}-*) > \"$HOST/sums{round}\""
            ),
            &v,
        );
        let pids = daemons(&fx.mnt);
        let out = Command::new("umount")
            .arg(&fx.mnt)
            .output()
            .expect("umount");
        check("umount", &out);
        // At once: no wait for the daemon.
        let out = augefs(&["fsck".as_ref(), fx.image.as_os_str(), "-n".as_ref()]);
        check("augefs fsck -n right after umount", &out);
        wait_until("the old daemon exits", || pids.iter().all(|&p| !alive(p)));
        fx.mount();
        for r in 0..=round {
            let sums = fs::read_to_string(fx.host.join(format!("sums{r}"))).expect("sums");
            let now = sh(&format!("cd \"$MNT\" && sha256sum r{r}-*"), &v);
            assert_eq!(now, sums, "round {r}'s files after remount {round}");
        }
    }
    fx.unmount();
    fx.fsck_clean();
}

/// A user other than the owner writes to, truncates and O_TRUNC-opens set-id files on a
/// mount (allow_other): each succeeds and drops the bits as on ext4 (S_ISUID always,
/// S_ISGID when group-executable or the writer is outside the file's group); root's
/// write keeps them.
#[test]
fn a_non_owner_write_drops_set_id_bits_through_the_mount() {
    let fx = fixture();
    fx.mount_with(BIN, &["mount"], &["-o", "allow_other"]);
    let v = fx.vars();
    sh("chmod 1777 \"$MNT\"", &v);
    let ops = [
        ("append", "echo more >> \"$F\""),
        ("truncate", "truncate -s 1 \"$F\""),
        ("o_trunc", "echo new > \"$F\""),
    ];
    for (op, cmd) in ops {
        for mode in ["4777", "2777", "6777", "2767"] {
            let f = fx.mnt.join(format!("{op}-{mode}"));
            sh(
                &format!(
                    "echo x > \"{0}\" && chmod {mode} \"{0}\" && echo root >> \"{0}\"",
                    f.display()
                ),
                &v,
            );
            let kept = sh(&format!("stat -c %a \"{}\"", f.display()), &v);
            assert_eq!(
                kept.trim(),
                mode,
                "{op} {mode}: root's write keeps the bits"
            );
            let out = Command::new("setpriv")
                .args([
                    "--reuid=65534",
                    "--regid=65534",
                    "--clear-groups",
                    "sh",
                    "-c",
                    cmd,
                ])
                .env("F", &f)
                .output()
                .expect("setpriv");
            check(&format!("{op} of a {mode} file by nobody"), &out);
            let now = sh(&format!("stat -c %a \"{}\"", f.display()), &v);
            let want = if mode == "2767" { "767" } else { "777" };
            assert_eq!(now.trim(), want, "{op} of a {mode} file by nobody");
        }
    }
    fx.unmount();
    fx.fsck_clean();
}

/// Supplementary groups reach the vfs's own checks: a user whose only tie to a
/// directory and file (mode 0770 and 0640, group 4242) is a supplementary group reads
/// the file and creates a file there, and without the group is refused. The daemon
/// reads the groups from /proc only when a decision depends on them.
#[test]
fn supplementary_groups_grant_access_through_the_mount() {
    let fx = fixture();
    fx.mount_with(BIN, &["mount"], &["-o", "allow_other"]);
    let v = fx.vars();
    sh(
        "mkdir \"$MNT/g\" && chown 0:4242 \"$MNT/g\" && chmod 0770 \"$MNT/g\" && \
         echo group > \"$MNT/g/f\" && chown 0:4242 \"$MNT/g/f\" && chmod 0640 \"$MNT/g/f\"",
        &v,
    );
    let as_nobody = |groups: &[&str], cmd: &str| {
        let mut args = vec!["--reuid=65534", "--regid=65534"];
        args.extend_from_slice(groups);
        args.extend_from_slice(&["sh", "-c", cmd]);
        Command::new("setpriv")
            .args(&args)
            .env("MNT", &fx.mnt)
            .output()
            .expect("setpriv")
    };
    let member = ["--groups=4242"];
    let out = as_nobody(&member, "cat \"$MNT/g/f\"");
    check("read through a supplementary group", &out);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "group");
    let out = as_nobody(&member, "echo new > \"$MNT/g/new\"");
    check("create through a supplementary group", &out);
    assert_eq!(sh("stat -c %u \"$MNT/g/new\"", &v).trim(), "65534");
    let out = as_nobody(&["--clear-groups"], "cat \"$MNT/g/f\"");
    assert!(!out.status.success(), "read without the group succeeded");
    fx.unmount();
    fx.fsck_clean();
}
