//! A real kernel mount (root or fusermount3, and /dev/fuse, as CI has) served in the
//! background, whose kernel caches attributes, names, pages and the absence of names
//! for an hour ([`Bridge::spawn_caching`]): changes made through the vfs directly stay
//! unseen until a notification, and are seen right after it; a stream read through the
//! kernel's page cache does not fill the vfs's cache behind it.

use augefs_fuse::Bridge;
use format::InodeNo;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use testsupport::mount::{mount, mounted, unmount};
use vfs::{Creds, Kind};

/// Unmounts (lazily) and joins the bridge, also when the test panics.
struct Mounted {
    bridge: Option<Bridge>,
    dir: PathBuf,
}

impl Mounted {
    /// `fs` served on a fresh mount point (in `tmp`) by a bridge whose kernel caches.
    fn caching(
        fs: &std::sync::Arc<vfs::FileSystem>,
        tmp: &tempfile::TempDir,
        name: &str,
    ) -> Mounted {
        let dir = tmp.path().join("mnt");
        std::fs::create_dir(&dir).unwrap();
        let bridge = Bridge::spawn_caching(fs.clone(), &dir, name, 2).unwrap();
        Mounted {
            bridge: Some(bridge),
            dir,
        }
    }

    fn notifier(&self) -> augefs_fuse::notify::Notifier {
        self.bridge.as_ref().expect("serving").notifier()
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Some(b) = self.bridge.take() {
            if let Err(e) = b.stop() {
                eprintln!("unmounting {}: {e}", self.dir.display());
            }
        }
    }
}

#[test]
fn changes_beside_the_kernel_are_seen_once_notified() {
    let tmp = tempfile::tempdir().unwrap();
    let fs = mounted(256 << 20, 1);
    let mounted = Mounted::caching(&fs, &tmp, "augefs-notify-test");
    let (notifier, dir) = (mounted.notifier(), mounted.dir.clone());
    let root = Creds::root();

    // Written and read through the kernel: its size and pages are cached.
    let a = dir.join("a");
    std::fs::write(&a, b"one").unwrap();
    assert_eq!(std::fs::read(&a).unwrap(), b"one");
    let ino = std::fs::metadata(&a).unwrap().ino();
    fs.write_at(InodeNo(ino), 0, b"two!!").unwrap();
    assert_eq!(std::fs::metadata(&a).unwrap().len(), 3, "the cached size");
    notifier.inval_data(ino, 0, 0).unwrap();
    assert_eq!(std::fs::metadata(&a).unwrap().len(), 5);
    assert_eq!(std::fs::read(&a).unwrap(), b"two!!");

    // Looked up and not found: the kernel caches that there is no such name.
    let b = dir.join("b");
    assert!(!b.exists());
    fs.create(&root, InodeNo(1), b"b", Kind::File, 0o644, None)
        .unwrap();
    assert!(!b.exists(), "the cached absence of b");
    notifier.inval_entry(1, b"b").unwrap();
    assert!(b.exists());

    // Removed beside the kernel. (A read makes the kernel ask for the access time at
    // the next stat: one stat first, so that the attributes are cached.)
    std::fs::metadata(&a).unwrap();
    fs.remove(&root, InodeNo(1), b"a", false).unwrap();
    assert!(a.exists(), "the cached entry of a");
    notifier.delete(1, ino, b"a").unwrap();
    assert!(!a.exists());
    // Notifications about what the kernel does not cache succeed.
    notifier.inval_entry(1, b"never-looked-up").unwrap();
    notifier.inval_attrs(999_999).unwrap();
    drop(mounted);
}

#[test]
fn a_stream_through_the_kernel_lets_the_cache_go_behind_it() {
    const MIB: usize = 1 << 20;
    let tmp = tempfile::tempdir().unwrap();
    // A 48 MiB file, written and then out of every cache (a remount).
    let dev = testsupport::image::memory_image(256 << 20, 1);
    let fs = mount(&dev);
    let ino = fs
        .create(&Creds::root(), InodeNo(1), b"f", Kind::File, 0o644, None)
        .unwrap();
    let data: Vec<u8> = (0..48 * MIB).map(|i| (i / 4096 % 251) as u8).collect();
    fs.write_at(ino, 0, &data).unwrap();
    unmount(fs);
    let fs = mount(&dev);
    let mounted = Mounted::caching(&fs, &tmp, "augefs-stream-test");
    let dir = mounted.dir.clone();
    // The mount reads ahead 2 MiB (the kernel's own is 128 KiB).
    let canonical = std::fs::canonicalize(&dir).unwrap();
    let entry = platform::mountinfo::mounts()
        .into_iter()
        .rev()
        .find(|m| m.point == canonical)
        .expect("the mount in the table");
    let ra = std::fs::read_to_string(format!("/sys/class/bdi/{}/read_ahead_kb", entry.dev));
    assert_eq!(ra.unwrap().trim(), "2048", "the mount's read-ahead");

    use std::io::Read;
    let mut f = std::fs::File::open(dir.join("f")).unwrap();
    let mut buf = vec![0u8; MIB];
    let mut most = 0;
    for i in 0..48 {
        f.read_exact(&mut buf).unwrap();
        assert!(buf == data[i * MIB..(i + 1) * MIB], "MiB {i} as written");
        most = most.max(fs.cache_stats().pages);
    }
    // Without letting go, all 12,288 blocks stay; kept are those the kernel's READs in
    // flight and the vfs's read-ahead (8 MiB) may still need.
    let stats = fs.cache_stats();
    assert!(most < 6144, "at most {most} pages cached during the stream");
    assert!(stats.evicted > 6000, "{stats:?}");
    // Closed before the unmount: a lazy unmount ends the mount at its last close.
    drop(f);
    drop(mounted);
}

#[test]
fn a_stream_written_through_the_kernel_is_written_behind_and_let_go() {
    const MIB: usize = 1 << 20;
    let tmp = tempfile::tempdir().unwrap();
    let fs = mounted(256 << 20, 1);
    let mounted = Mounted::caching(&fs, &tmp, "augefs-behind-test");
    let dir = mounted.dir.clone();
    use std::io::Write;
    let data: Vec<u8> = (0..48 * MIB).map(|i| (i / 4096 % 253) as u8).collect();
    let mut f = std::fs::File::create(dir.join("f")).unwrap();
    for chunk in data.chunks(MIB) {
        f.write_all(chunk).unwrap();
    }
    // The test's clock stands still, so nothing expires: only writing behind empties
    // the cache, down to the last write-back's remainder (under 16 MiB dirty).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while fs.cache_stats().pages >= 4096 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let stats = fs.cache_stats();
    assert!(stats.pages < 4096, "12,288 pages written: {stats:?}");
    assert!(stats.evicted >= 8192, "{stats:?}");
    f.sync_all().unwrap();
    // What went reads back from the device as written.
    let ino = InodeNo(f.metadata().unwrap().ino());
    let mut back = vec![0u8; data.len()];
    assert_eq!(fs.read_at(ino, 0, &mut back).unwrap(), data.len());
    assert!(back == data, "the file as written");
    drop(f);
    drop(mounted);
}
