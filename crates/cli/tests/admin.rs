//! What an administrator checks with the usual tools: `df -i` counts the inodes made
//! and removed (also after a remount), `df`'s size, used and available add up, and
//! directories show a size in `ls -l`; labels and uuids set at mkfs and by `tune`,
//! shown by inspect, and mounts by `LABEL=` and `UUID=`.
//!
//! These tests mount with FUSE (root, or a working fusermount3, and /dev/fuse, as CI
//! has); the fixture unmounts and kills the daemon even when a test panics.

mod common;

use common::*;
use std::fs;
use std::process::Command;
use testsupport::fuse::is_mounted;
use testsupport::process::{check, checked_stdout, fails_with, sh, wait_until};

/// `df --output=FIELDS DIR`'s figures (one line, no header).
fn df(fields: &str, dir: &std::path::Path) -> Vec<u64> {
    let out = sh(
        &format!("df -B1 --output={fields} \"$D\" | tail -n 1"),
        &[("D", dir)],
    );
    out.split_whitespace()
        .map(|f| {
            f.parse()
                .unwrap_or_else(|_| panic!("df field {f:?} in {out:?}"))
        })
        .collect()
}

#[test]
fn df_counts_inodes_and_its_space_adds_up() {
    let fx = fixture();
    fx.mount();
    let v = fx.vars();
    let before = df("iused,itotal,iavail", &fx.mnt);
    assert_eq!(before[0], 1, "a fresh image has its root directory only");
    assert_eq!(before[0] + before[2], before[1], "itotal = iused + iavail");
    sh(
        "mkdir \"$MNT/d\" && for i in $(seq 1 300); do echo $i > \"$MNT/d/f$i\"; done \
         && for i in $(seq 1 20); do mkdir \"$MNT/d/sub$i\"; done \
         && ln -s f1 \"$MNT/d/link\"",
        &v,
    );
    let made = df("iused", &fx.mnt)[0];
    assert_eq!(made, 1 + 1 + 300 + 20 + 1, "df -i counts every inode made");
    sh(
        "for i in $(seq 1 100); do rm \"$MNT/d/f$i\"; done && rmdir \"$MNT/d/sub1\"",
        &v,
    );
    assert_eq!(df("iused", &fx.mnt)[0], made - 101, "and those removed");

    // Space: size = used + available, and a directory's size is one block.
    let [size, used, avail] = df("size,used,avail", &fx.mnt)[..] else {
        panic!("three figures");
    };
    assert_eq!(size, used + avail, "df adds up");
    assert!(
        size > 400 << 20,
        "a 512 MiB image shows about 512 MiB: {size}"
    );
    let dir_size = sh("stat -c %s \"$MNT/d\"", &v);
    assert_eq!(dir_size.trim(), "4096", "a directory's size");

    // The count is the records', so a remount finds the same.
    fx.unmount();
    fx.mount();
    assert_eq!(
        df("iused", &fx.mnt)[0],
        made - 101,
        "counted again at mount"
    );
    // A big file: used grows by its size, and the figures still add up.
    sh(
        "head -c 200M /dev/zero > \"$MNT/big\" && sync \"$MNT/big\"",
        &v,
    );
    let [size2, used2, avail2] = df("size,used,avail", &fx.mnt)[..] else {
        panic!("three figures");
    };
    assert_eq!(
        (size2, size2),
        (size, used2 + avail2),
        "df adds up with data"
    );
    assert!(used2 >= used + (200 << 20), "{used} then {used2}");
    fx.unmount();
    fx.fsck_clean();
}

/// `mkfs -L --uuid`, `inspect`, `tune -L` (refused while mounted), and mounts by
/// `LABEL=` and `UUID=` found through AUGEFS_IMAGE_PATH.
#[test]
fn labels_and_uuids_round_trip_and_mount_by_label() {
    let fx = fixture();
    let uuid = "0f1e2d3c-4b5a-4697-8877-665544332211";
    check(
        "mkfs -L",
        &mkfs(
            &fx.image,
            "256M",
            &["--force", "-L", "first", "--uuid", uuid],
        ),
    );
    let shown = checked_stdout(
        "inspect",
        &augefs(&["inspect".as_ref(), fx.image.as_os_str()]),
    );
    assert!(shown.contains("label             first"), "{shown}");
    assert!(
        shown.contains(&format!("uuid              {uuid}")),
        "{shown}"
    );
    fails_with(
        mkfs(&fx.host.join("bad.img"), "256M", &["-L", "two words"]),
        "space",
    );
    assert!(
        !fx.host.join("bad.img").exists(),
        "a bad label creates nothing"
    );

    let tuned = augefs(&[
        "tune".as_ref(),
        fx.image.as_os_str(),
        "-L".as_ref(),
        "second".as_ref(),
    ]);
    check("tune -L", &tuned);
    let shown = checked_stdout(
        "inspect",
        &augefs(&["inspect".as_ref(), fx.image.as_os_str()]),
    );
    assert!(shown.contains("label             second"), "{shown}");
    assert!(shown.contains(uuid), "tune -L keeps the uuid: {shown}");

    // Mount by label: the image's directory on AUGEFS_IMAGE_PATH.
    let dir = fx.image.parent().expect("image dir");
    let by_label = Command::new(BIN)
        .args(["mount", "LABEL=second"])
        .arg(&fx.mnt)
        .env("AUGEFS_IMAGE_PATH", dir)
        .output()
        .expect("augefs mount LABEL=");
    check("mount LABEL=second", &by_label);
    assert!(is_mounted(&fx.mnt));
    fs::write(fx.mnt.join("by-label"), b"x").expect("write");
    fails_with(
        augefs(&[
            "tune".as_ref(),
            fx.image.as_os_str(),
            "-L".as_ref(),
            "third".as_ref(),
        ]),
        "mounted",
    );
    fx.unmount();
    let missing = Command::new(BIN)
        .args(["mount", "LABEL=nowhere"])
        .arg(&fx.mnt)
        .env("AUGEFS_IMAGE_PATH", dir)
        .output()
        .expect("augefs mount LABEL=");
    fails_with(missing, "LABEL=nowhere: no augefs image has it");

    check(
        "tune --uuid",
        &augefs(&[
            "tune".as_ref(),
            fx.image.as_os_str(),
            "--uuid".as_ref(),
            "random".as_ref(),
        ]),
    );
    let shown = checked_stdout(
        "inspect",
        &augefs(&["inspect".as_ref(), fx.image.as_os_str()]),
    );
    assert!(!shown.contains(uuid), "a new uuid: {shown}");
    let new_uuid = shown
        .lines()
        .find_map(|l| l.trim().strip_prefix("uuid"))
        .expect("a uuid line")
        .trim()
        .to_string();
    let by_uuid = Command::new(BIN)
        .arg("mount")
        .arg(format!("UUID={new_uuid}"))
        .arg(&fx.mnt)
        .env("AUGEFS_IMAGE_PATH", dir)
        .output()
        .expect("augefs mount UUID=");
    check("mount UUID=", &by_uuid);
    assert_eq!(fs::read(fx.mnt.join("by-label")).expect("read"), b"x");
    fx.unmount();
    fx.fsck_clean();
}

/// `inspect` counts inodes by kind and sums up space in one table, also on a mounted
/// image (read-only: the image is byte-identical afterwards), and in its JSON.
#[test]
fn inspect_shows_usage_also_of_a_mounted_image() {
    let fx = fixture();
    fx.mount();
    sh(
        "mkdir \"$MNT/a\" \"$MNT/b\" && for i in $(seq 1 30); do echo $i > \"$MNT/a/f$i\"; done \
         && ln -s a \"$MNT/s\" && head -c 20M /dev/zero > \"$MNT/b/big\" && sync \"$MNT\"",
        &fx.vars(),
    );
    let inspect = || augefs(&["inspect".as_ref(), fx.image.as_os_str()]);
    let shown = checked_stdout("inspect of a mounted image", &inspect());
    assert!(
        shown.contains("inodes            35 (31 files, 3 directories, 1 symlinks, 0 special)"),
        "{shown}"
    );
    assert!(shown.contains("of it live file data"), "{shown}");
    assert!(
        shown.lines().filter(|l| l.contains("slot 0")).count() <= 2,
        "checkpoints summed up: {shown}"
    );
    fx.unmount();
    let before = fs::read(&fx.image).expect("image");
    let json = checked_stdout(
        "inspect --json",
        &augefs(&["inspect".as_ref(), fx.image.as_os_str(), "--json".as_ref()]),
    );
    let v: serde_json::Value = serde_json::from_str(&json).expect("json");
    assert_eq!(v["usage"]["inodes"], 35, "{json}");
    assert_eq!(v["usage"]["directories"], 3, "{json}");
    let u = &v["usage"];
    assert_eq!(
        u["size_bytes"].as_u64(),
        Some(u["used_bytes"].as_u64().unwrap() + u["free_bytes"].as_u64().unwrap())
    );
    assert!(u["live_data_bytes"].as_u64().unwrap() >= 20 << 20, "{json}");
    assert!(
        fs::read(&fx.image).expect("image") == before,
        "inspect wrote nothing"
    );
    fx.fsck_clean();
}

/// fsck names the path of a file whose data is damaged, and ends with e2fsck's kind
/// of summary: files, how many are not contiguous in the log, blocks used of all.
#[test]
fn fsck_names_the_damaged_file_and_sums_up() {
    let fx = fixture();
    fx.mount();
    sh(
        "mkdir -p \"$MNT/home/ann\" && for i in $(seq 1 9); do echo $i > \"$MNT/home/f$i\"; done \
         && python3 -c 'import sys; open(sys.argv[1], \"wb\").write(b\"DAMAGE-ME-\" * 4096)' \
            \"$MNT/home/ann/notes.txt\" && sync \"$MNT\"",
        &fx.vars(),
    );
    fx.unmount();
    let out = augefs(&["fsck".as_ref(), fx.image.as_os_str(), "-n".as_ref()]);
    let clean = checked_stdout("fsck -n", &out);
    let summary = clean
        .lines()
        .find(|l| l.contains("non-contiguous"))
        .unwrap_or_else(|| panic!("a summary line: {clean}"));
    assert!(summary.contains(": 13 files ("), "{summary}");
    let json = checked_stdout(
        "fsck --json",
        &augefs(&[
            "fsck".as_ref(),
            fx.image.as_os_str(),
            "-n".as_ref(),
            "--json".as_ref(),
        ]),
    );
    let v: serde_json::Value = serde_json::from_str(&json).expect("json");
    assert_eq!(v["stats"]["files_mapped"], 10, "{json}");
    assert!(v["stats"]["fragments"].as_u64() >= Some(10), "{json}");

    // Damage one block of the file's data on the image.
    let mut image = fs::read(&fx.image).expect("image");
    let at = image
        .windows(20)
        .position(|w| w == b"DAMAGE-ME-DAMAGE-ME-")
        .expect("the file's data on the image");
    image[at + 100] ^= 0xff;
    fs::write(&fx.image, &image).expect("damage");
    let out = augefs(&[
        "fsck".as_ref(),
        fx.image.as_os_str(),
        "-n".as_ref(),
        "--verify-data".as_ref(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        testsupport::process::describe(&out)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.contains("data_checksum_mismatch"))
        .unwrap_or_else(|| panic!("the damage found: {text}"));
    assert!(line.contains("/home/ann/notes.txt"), "{line}");
}

/// `augefs mount` as a user other than root goes through fusermount3: where /dev/fuse
/// is closed to users (mode 0600, as on this kind of machine) it says what is missing
/// and the fix, naming /dev/fuse and the mount point once; opened as fuse3's udev rule
/// opens it (0666, for the test only) the user mounts, uses and unmounts; without
/// fusermount3 it names the package.
#[test]
fn a_user_mounts_through_fusermount3_or_is_told_the_fix() {
    use std::os::unix::fs::{chown, PermissionsExt};
    let fx = fixture();
    let root = fx.image.parent().expect("fixture dir");
    let open = |p: &std::path::Path, mode| {
        fs::set_permissions(p, fs::Permissions::from_mode(mode)).expect("chmod")
    };
    // A directory the user may write in (the root is root's).
    fx.mount();
    fs::create_dir(fx.mnt.join("shared")).expect("mkdir");
    open(&fx.mnt.join("shared"), 0o777);
    fs::write(fx.mnt.join("hello"), b"from root\n").expect("write");
    fx.unmount();
    open(root, 0o755);
    open(&fx.mnt, 0o777);
    chown(&fx.image, Some(65534), Some(65534)).expect("chown the image");
    // The binary where that user may run it.
    let bin = fx.host.join("augefs");
    fs::copy(BIN, &bin).expect("copy the binary");
    open(&fx.host, 0o755);
    let as_nobody = |path: &str, args: &[&std::ffi::OsStr]| {
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .args(["env", &format!("PATH={path}")])
            .args(args)
            .output()
            .expect("setpriv (util-linux)")
    };
    let path = std::env::var("PATH").unwrap_or_default();
    let mount = [
        bin.as_os_str(),
        "mount".as_ref(),
        fx.image.as_os_str(),
        fx.mnt.as_os_str(),
    ];
    let fuse = std::path::Path::new("/dev/fuse");
    let mode = fs::metadata(fuse).expect("/dev/fuse").permissions().mode() & 0o7777;
    if mode & 0o006 != 0o006 {
        let out = as_nobody(&path, &mount);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(
            err.contains("/dev/fuse") && err.contains("chmod 0666 /dev/fuse"),
            "{err}"
        );
        let mnt = fx.mnt.display().to_string();
        assert!(
            err.matches(&mnt).count() <= 1,
            "the mount point once: {err}"
        );
    }
    {
        /// Puts /dev/fuse's mode back, even when the test fails.
        struct Restore(u32);
        impl Drop for Restore {
            fn drop(&mut self) {
                let p = fs::Permissions::from_mode(self.0);
                fs::set_permissions("/dev/fuse", p).expect("restore /dev/fuse's mode");
            }
        }
        let _restore = Restore(mode);
        open(fuse, 0o666);
        let out = as_nobody(&path, &mount);
        check("mount by a user", &out);
        assert!(is_mounted(&fx.mnt));
        // Only the user reaches a mount without allow_other: it writes and reads.
        let script = format!(
            "cat {m}/hello && echo u > {m}/shared/by-user && cat {m}/shared/by-user && \
             fusermount3 -u {m}",
            m = fx.mnt.display()
        );
        let out = as_nobody(&path, &["sh".as_ref(), "-c".as_ref(), script.as_ref()]);
        assert_eq!(checked_stdout("the user's mount", &out), "from root\nu\n");
    }
    wait_until("the user's daemon to end", || !is_mounted(&fx.mnt));
    fx.fsck_clean();
    let out = as_nobody("/nonexistent", &mount);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("fusermount3 is not installed"), "{err}");
    assert!(err.contains("apt install fuse3"), "{err}");
}

/// scripts/install (staged with DESTDIR, from the binaries built for the tests) puts the
/// command, the interposer beside it, a man page per command generated from the
/// command-line definitions, and the mount helper's link.
#[test]
fn install_stages_the_command_man_pages_and_the_mount_helper() {
    preload_built();
    let stage = tempfile::TempDir::new().expect("stage");
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let bin_dir = std::path::Path::new(BIN).parent().expect("bin dir");
    let out = Command::new(repo.join("scripts/install"))
        .env("DESTDIR", stage.path())
        .env("PREFIX", "/opt/augefs")
        .env("AUGEFS_BIN_DIR", bin_dir)
        .output()
        .expect("scripts/install");
    check("scripts/install", &out);
    let root = stage.path();
    for f in [
        "opt/augefs/bin/augefs",
        "opt/augefs/bin/libaugefs_preload.so",
    ] {
        assert!(root.join(f).is_file(), "{f}");
    }
    let man = root.join("opt/augefs/share/man/man1");
    for cmd in [
        "augefs",
        "augefs-mkfs",
        "augefs-tune",
        "augefs-mount",
        "augefs-fsck",
    ] {
        let page = fs::read_to_string(man.join(format!("{cmd}.1"))).expect(cmd);
        assert!(
            page.starts_with(".ie") || page.contains(".TH"),
            "{cmd}: {page}"
        );
    }
    let tune = fs::read_to_string(man.join("augefs-tune.1")).expect("tune page");
    assert!(tune.contains("label"), "{tune}");
    assert!(
        !man.join("augefs-man.1").exists(),
        "the hidden command has no page"
    );
    let link = fs::read_link(root.join("sbin/mount.fuse.augefs")).expect("mount helper");
    assert_eq!(link, std::path::Path::new("/opt/augefs/bin/augefs"));
}

/// A full 64 MiB image of two files, on the recording device, grown in place to
/// 128 MiB by `engine::resize::grow`: every crash state mounts with both files intact
/// and checks clean, and the grown ones take data the full image refused.
#[test]
fn resize_grows_a_full_image_crash_states_included() {
    grow_a_full_image(128 << 20, 0);
}

/// As above, grown to 320 MiB, where the layout for the larger size would move the WAL:
/// the grow adds an area after the old end (docs/FORMAT.md §2 "Grown areas").
#[test]
fn resize_adds_an_area_to_a_full_image_crash_states_included() {
    grow_a_full_image(320 << 20, 1);
}

/// Fills a 64 MiB image, grows it to `new_size` on the recording device (adding
/// `areas` areas), and checks every crash state.
fn grow_a_full_image(new_size: u64, areas: u32) {
    use device::recording::{CrashPolicy, RecordingBackend};
    use std::sync::Arc;
    use testsupport::image::{image_bytes, memory_image};
    use testsupport::mount::{mount, unmount};
    const MIB: u64 = 1 << 20;
    let dev = memory_image(64 * MIB, 2);
    let fs = mount(&dev);
    let small = testsupport::bytes::bytes(1, 100_000);
    let f = vfs::OpenOptions::new()
        .write(true)
        .create(true)
        .open(&fs, "/small")
        .unwrap();
    f.write_at(&small, 0).unwrap();
    drop(f);
    // Fill: 1 MiB writes until the device is full.
    let f = vfs::OpenOptions::new()
        .write(true)
        .create(true)
        .open(&fs, "/fill")
        .unwrap();
    let mut filled = 0u64;
    while f.write_at(&[7u8; 1 << 20], filled).is_ok() && filled < 256 * MIB {
        filled += MIB;
    }
    let filled = f.metadata().unwrap().size.min(filled);
    drop(f);
    fs.sync().unwrap();
    unmount(fs);
    assert!(filled < 64 * MIB, "the image filled up: {filled}");
    let g = engine::image::read_superblock(&dev)
        .unwrap()
        .superblock
        .geometry;
    let mut bytes = image_bytes(&dev);
    bytes.resize(new_size as usize, 0xee); // a larger device, its new bytes not zero
                                           // What a block device may hold between the summaries and the segment area.
    bytes[g.summaries.end_block() as usize * 4096..g.segments.start_byte() as usize].fill(0xee);
    let (backend, handle) = RecordingBackend::new(bytes, 512);
    let grown =
        engine::resize::grow(&device::Device::new(Box::new(backend)), new_size).expect("grow");
    assert!(grown.new.geometry.segment_count > grown.old_segment_count);
    assert_eq!(grown.new.geometry.grown_count, areas);
    let recording = handle.snapshot();
    let states = recording.crash_states(&CrashPolicy {
        states_max: 200,
        ..CrashPolicy::with_seed(3)
    });
    assert!(states.states.len() >= 3, "{} states", states.states.len());
    let mut saw_grown = 0;
    for state in &states.states {
        let dev = Arc::new(recording.device(state, testsupport::image::SECTOR_BYTES));
        let problems = testsupport::check::fsck_problems(&dev);
        assert!(problems.is_empty(), "state {state}: {problems:?}");
        let fs = mount(&dev);
        let read = |path: &str, len: usize| {
            let f = vfs::OpenOptions::new().read(true).open(&fs, path).unwrap();
            let mut buf = vec![0u8; len];
            assert_eq!(
                f.read_at(&mut buf, 0).unwrap(),
                len,
                "state {state}: {path}"
            );
            buf
        };
        assert!(
            read("/small", small.len()) == small,
            "state {state}: /small"
        );
        assert!(
            read("/fill", filled as usize).iter().all(|&b| b == 7),
            "state {state}"
        );
        if fs.statfs().blocks > 64 * MIB / 4096 {
            saw_grown += 1;
            let f = vfs::OpenOptions::new()
                .write(true)
                .create(true)
                .open(&fs, "/more")
                .unwrap();
            f.write_at(&[9u8; 20 << 20], 0)
                .expect("the grown image takes 20 MiB more");
            f.sync_all().unwrap();
        }
        unmount(fs);
        let problems = testsupport::check::fsck_problems(&dev);
        assert!(problems.is_empty(), "state {state} after use: {problems:?}");
    }
    assert!(saw_grown > 0, "some crash state is the grown file system");
    eprintln!(
        "{} crash states, {saw_grown} of them grown",
        states.states.len()
    );
}

/// `augefs mkfs` writes a new image file out (no hole, no unwritten extent left for the
/// host to convert under a later fsync), also over an allocated file it formats again;
/// `--lazy` leaves the host's unwritten extents as they are.
#[test]
fn mkfs_writes_an_image_file_out_unless_lazy() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let image = dir.path().join("a.img");
    check("mkfs", &mkfs(&image, "64M", &[]));
    assert_eq!(device::unwritten_bytes(&image).unwrap(), 0, "written out");
    let lazy = dir.path().join("lazy.img");
    check("mkfs --lazy", &mkfs(&lazy, "64M", &["--lazy"]));
    let left = device::unwritten_bytes(&lazy).unwrap();
    if left == 0 {
        eprintln!("this host file system reports no unwritten extents; the lazy half is moot");
        return;
    }
    assert!(
        left > 32 << 20,
        "--lazy leaves most of the image unwritten: {left}"
    );
    check("mkfs again", &mkfs(&lazy, "64M", &["--force"]));
    assert_eq!(
        device::unwritten_bytes(&lazy).unwrap(),
        0,
        "written out at the next mkfs"
    );
    check(
        "fsck",
        &augefs(&["fsck".as_ref(), "-n".as_ref(), lazy.as_os_str()]),
    );
}

/// `augefs resize`: grows an image file in place and then twice by added areas (fsck
/// clean, files intact, more room, inspect shows the areas), refuses a shrink, a grow
/// too small for a segment (leaving the file as it was), and a mounted image.
#[test]
fn resize_cli_grows_refuses_and_names_why() {
    let fx = fixture();
    check(
        "mkfs",
        &mkfs(&fx.image, "64M", &["--force", "--domains", "2"]),
    );
    fx.mount();
    sh("head -c 3M /dev/urandom > \"$MNT/keep\" && sha256sum \"$MNT/keep\" | cut -c1-64 > \"$HOST/sum\"", &fx.vars());
    fails_with(
        augefs(&["resize".as_ref(), fx.image.as_os_str(), "128M".as_ref()]),
        "resize works on an unmounted file system",
    );
    fx.unmount();
    let grew = augefs(&["resize".as_ref(), fx.image.as_os_str(), "192M".as_ref()]);
    assert!(checked_stdout("resize", &grew).contains("grown from 64.0 MiB to 192.0 MiB"));
    assert_eq!(
        device::unwritten_bytes(&fx.image).unwrap(),
        0,
        "the part a grow adds is written out"
    );
    fx.fsck_clean();
    fails_with(
        augefs(&["resize".as_ref(), fx.image.as_os_str(), "100M".as_ref()]),
        "shrinking",
    );
    fails_with(
        augefs(&["resize".as_ref(), fx.image.as_os_str(), "193M".as_ref()]),
        "adds no whole segment",
    );
    assert_eq!(
        fs::metadata(&fx.image).unwrap().len(),
        192 << 20,
        "a refused grow extends nothing"
    );
    // The layout for 1 GiB would move the WAL: each of these grows adds an area.
    for (size, shown) in [("1G", "1.0 GiB"), ("1536M", "1.5 GiB")] {
        let grew = augefs(&["resize".as_ref(), fx.image.as_os_str(), size.as_ref()]);
        assert!(
            checked_stdout("resize", &grew).contains(&format!("to {shown}")),
            "{grew:?}"
        );
        fx.fsck_clean();
    }
    let inspect = checked_stdout(
        "inspect",
        &augefs(&["inspect".as_ref(), fx.image.as_os_str()]),
    );
    assert!(
        inspect.contains("segments+1") && inspect.contains("segments+2"),
        "{inspect}"
    );
    fx.mount();
    let v = fx.vars();
    let sum = sh("sha256sum \"$MNT/keep\" | cut -c1-64", &v);
    assert_eq!(sum, fs::read_to_string(fx.host.join("sum")).unwrap());
    // More than the first two areas hold: the last area's segments take data.
    sh(
        "head -c 1100M /dev/zero > \"$MNT/more\" && sync \"$MNT\" && \
         test $(stat -c %s \"$MNT/more\") = 1153433600",
        &v,
    );
    fx.unmount();
    fx.fsck_clean();
    fx.mount();
    assert_eq!(
        sh("sha256sum \"$MNT/keep\" | cut -c1-64", &v),
        fs::read_to_string(fx.host.join("sum")).unwrap()
    );
    sh("cmp -n 1153433600 \"$MNT/more\" /dev/zero", &v);
    fx.unmount();
}
