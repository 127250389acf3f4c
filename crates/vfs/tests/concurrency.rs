//! The VFS under many threads (correctness, not speed: this machine has 2 cores): 32
//! threads in one directory, 16 writers of disjoint ranges of one file beside readers,
//! and directory renames across a small tree racing creates and removals (the lock
//! order's deadlock check). Afterwards the tree is consistent: every entry names a live
//! inode of its kind, link counts are right, and every thread's last write is there.
//! Also statfs beside writers that keep taking segments.

use device::Device;
use engine::log::EngineConfig;
use format::constants::MIB;
use platform::{Rng, SystemClock};
use std::sync::Arc;
use testsupport::image::memory_image;
use testsupport::mount::mount_cached;
use vfs::{CacheConfig, FileSystem, Kind, OpenOptions, RenameMode};

/// `dev` mounted with the real clock.
fn mount(dev: &Arc<Device>) -> Arc<FileSystem> {
    let clock = Arc::new(SystemClock::new());
    mount_cached(dev, EngineConfig::default(), CacheConfig::default(), clock)
}

/// A fresh image, mounted with the real clock.
fn mounted(domains: u32) -> (Arc<Device>, Arc<FileSystem>) {
    let dev = memory_image(256 * MIB, domains);
    let fs = mount(&dev);
    (dev, fs)
}

/// Every entry under `dir` names a live inode of the entry's kind; directory link
/// counts are 2 + subdirectories. Returns the number of entries seen.
fn check_consistent(fs: &FileSystem, dir: &str) -> usize {
    let mut seen = 0;
    let mut subdirs = 0;
    for e in fs.read_dir(dir).unwrap() {
        let name = String::from_utf8(e.name).unwrap();
        let path = if dir == "/" {
            format!("/{name}")
        } else {
            format!("{dir}/{name}")
        };
        let meta = fs
            .symlink_metadata(&path)
            .unwrap_or_else(|err| panic!("{path}: {err}"));
        assert_eq!(meta.kind, e.kind, "{path}");
        assert_eq!(meta.ino, e.ino, "{path}");
        seen += 1;
        if e.kind == Kind::Dir {
            subdirs += 1;
            seen += check_consistent(fs, &path);
        }
    }
    assert_eq!(
        fs.metadata(dir).unwrap().nlink,
        2 + subdirs,
        "{dir} link count"
    );
    seen
}

#[test]
fn thirty_two_threads_in_one_directory() {
    let (_dev, fs) = mounted(4);
    fs.create_dir("/d", 0o755).unwrap();
    let threads: Vec<_> = (0..32u64)
        .map(|t| {
            let fs = fs.clone();
            std::thread::spawn(move || {
                let mut rng = Rng::from_seed(t);
                let mut mine = std::collections::BTreeMap::new();
                for i in 0..150u64 {
                    // Private names (checked at the end) and shared ones (racing).
                    let private = format!("/d/t{t}-{}", rng.below(6));
                    let shared = format!("/d/s{}", rng.below(8));
                    match rng.below(6) {
                        0 | 1 => {
                            let f = OpenOptions::new()
                                .write(true)
                                .create(true)
                                .open(&fs, &private)
                                .unwrap();
                            let v = vec![(i % 250) as u8 + 1; 1 + rng.below(5000) as usize];
                            f.set_len(0).unwrap();
                            f.write_at(&v, 0).unwrap();
                            mine.insert(private, v);
                        }
                        2 => {
                            if fs.remove_file(&private).is_ok() {
                                mine.remove(&private);
                            }
                        }
                        3 => {
                            let _ = OpenOptions::new()
                                .write(true)
                                .create_new(true)
                                .open(&fs, &shared);
                        }
                        4 => {
                            let _ = fs.remove_file(&shared);
                        }
                        _ => {
                            let to = format!("/d/s{}", rng.below(8));
                            let _ = fs.rename_path(&shared, &to, RenameMode::Replace);
                        }
                    }
                }
                mine
            })
        })
        .collect();
    let results: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    check_consistent(&fs, "/");
    for mine in results {
        for (path, want) in mine {
            let f = OpenOptions::new().read(true).open(&fs, &path).unwrap();
            let mut got = vec![0u8; want.len() + 10];
            let n = f.read_at(&mut got, 0).unwrap();
            assert_eq!(&got[..n], &want[..], "{path}");
        }
    }
}

#[test]
fn sixteen_writers_of_one_file_beside_readers() {
    let (_dev, fs) = mounted(2);
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .open(&fs, "/big")
        .unwrap();
    file.set_len(16 * 20_000).unwrap();
    drop(file);
    let writers: Vec<_> = (0..16u64)
        .map(|t| {
            let fs = fs.clone();
            std::thread::spawn(move || {
                let f = OpenOptions::new().write(true).open(&fs, "/big").unwrap();
                let mut last = 0u8;
                for i in 0..60u64 {
                    last = ((t * 60 + i) % 251) as u8 + 1;
                    // Unaligned range of its own: neighbours share 4 KiB blocks.
                    f.write_at(&vec![last; 20_000], t * 20_000).unwrap();
                }
                last
            })
        })
        .collect();
    let readers: Vec<_> = (0..4u64)
        .map(|r| {
            let fs = fs.clone();
            std::thread::spawn(move || {
                let f = OpenOptions::new().read(true).open(&fs, "/big").unwrap();
                let mut rng = Rng::from_seed(100 + r);
                let mut buf = vec![0u8; 20_000];
                for _ in 0..100 {
                    let t = rng.below(16);
                    f.read_at(&mut buf, t * 20_000).unwrap();
                    // One writer's range: one value throughout (writes are atomic).
                    assert!(buf.iter().all(|&x| x == buf[0]), "a torn range");
                }
            })
        })
        .collect();
    let lasts: Vec<u8> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    for r in readers {
        r.join().unwrap();
    }
    let f = OpenOptions::new().read(true).open(&fs, "/big").unwrap();
    let mut buf = vec![0u8; 16 * 20_000];
    assert_eq!(f.read_at(&mut buf, 0).unwrap(), buf.len());
    for (t, want) in lasts.iter().enumerate() {
        assert!(
            buf[t * 20_000..(t + 1) * 20_000].iter().all(|x| x == want),
            "writer {t}"
        );
    }
}

#[test]
fn directory_renames_race_creates_and_removals() {
    let (_dev, fs) = mounted(3);
    for d in ["/a", "/b", "/c", "/a/x", "/b/y"] {
        fs.create_dir(d, 0o755).unwrap();
    }
    let dirs = ["/a", "/b", "/c", "/a/x", "/b/y", "/c/z"];
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let fs = fs.clone();
            std::thread::spawn(move || {
                let mut rng = Rng::from_seed(500 + t);
                for _ in 0..300 {
                    let from = dirs[rng.below(dirs.len() as u64) as usize];
                    let to = format!(
                        "{}/m{}",
                        dirs[rng.below(dirs.len() as u64) as usize],
                        rng.below(3)
                    );
                    match rng.below(4) {
                        0 => {
                            let _ = fs.create_dir(&to, 0o755);
                        }
                        1 => {
                            let _ = fs.remove_dir(&to);
                        }
                        2 => {
                            let _ = fs.rename_path(
                                &format!("{from}/m{}", rng.below(3)),
                                &to,
                                RenameMode::Replace,
                            );
                        }
                        _ => {
                            let _ = fs.rename_path(from, &to, RenameMode::Exchange);
                        }
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let entries = check_consistent(&fs, "/");
    assert!(
        entries >= 3,
        "the tree kept its directories ({entries} entries)"
    );
}

/// Regression (found by the simulator): statfs read the pool's in-use count and then the
/// domains' segment counts, and a domain taking a segment in between made the second
/// larger than the first: the subtraction overflowed (a panic in debug builds; in release
/// a capacity of zero, so `fallocate` failed with ENOSPC). statfs during writes that keep
/// taking segments must give sane figures.
#[test]
fn statfs_is_sane_while_writers_take_segments() {
    use std::sync::atomic::{AtomicU64, Ordering};
    let (_dev, fs) = mounted(3);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let written = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..3 {
            let (fs, stop, written) = (&fs, &stop, &written);
            s.spawn(move || {
                let f = OpenOptions::new()
                    .write(true)
                    .create(true)
                    .open(fs, &format!("/w{t}"))
                    .unwrap();
                let block = vec![t as u8; 64 << 10];
                let mut at = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    // Overwrites within 16 MiB: segments are taken and freed all along.
                    f.write_at(&block, at).unwrap();
                    at = (at + block.len() as u64) % (16 * MIB);
                    written.fetch_add(block.len() as u64, Ordering::Relaxed);
                }
            });
        }
        let (fs, written) = (&fs, &written);
        let checker = s.spawn(move || {
            // Until the writers have been through their files several times.
            while written.load(Ordering::Relaxed) < 3 * 48 * MIB {
                let st = fs.statfs();
                assert!(st.blocks > 0 && st.blocks_free <= st.blocks, "{st:?}");
            }
        });
        let r = checker.join();
        stop.store(true, Ordering::Relaxed);
        r.unwrap();
    });
    Arc::into_inner(fs).unwrap().unmount().unwrap();
}

/// Creates in one directory share it (its lock in read mode): 16 threads make files and
/// directories there, racing for shared names, while another stats the directory. Each
/// shared name is created exactly once; the directory's link count, entry count and
/// mtime are right in memory and, after a remount, on the device.
#[test]
fn parallel_creates_in_one_directory() {
    let (dev, fs) = mounted(2);
    fs.create_dir("/d", 0o755).unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let statter = {
        let (fs, stop) = (fs.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut last = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let m = fs.metadata("/d").unwrap();
                assert!(
                    m.nlink >= last,
                    "link count went back: {} < {last}",
                    m.nlink
                );
                last = m.nlink;
            }
        })
    };
    let threads: Vec<_> = (0..16u64)
        .map(|t| {
            let fs = fs.clone();
            std::thread::spawn(move || {
                let (mut dirs, mut won) = (0u32, 0u32);
                for i in 0..100u64 {
                    if i % 3 == 0 {
                        fs.create_dir(&format!("/d/dir-{t}-{i}"), 0o755).unwrap();
                        dirs += 1;
                    } else {
                        fs.symlink("target", &format!("/d/link-{t}-{i}")).unwrap();
                    }
                    // Every thread tries every shared name: one wins each.
                    let shared = format!("/d/shared-{}", (i + t) % 40);
                    match fs.create_dir(&shared, 0o700) {
                        Ok(()) => won += 1,
                        Err(e) => assert_eq!(e.errno(), libc::EEXIST, "{shared}: {e}"),
                    }
                }
                (dirs, won)
            })
        })
        .collect();
    let (mut dirs, mut won) = (0, 0);
    for t in threads {
        let (d, w) = t.join().unwrap();
        dirs += d;
        won += w;
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    statter.join().unwrap();
    assert_eq!(won, 40, "each shared name created once");
    let entries = 16 * 100 + 40;
    let newest = fs
        .read_dir("/d")
        .unwrap()
        .iter()
        .map(|e| {
            let path = format!("/d/{}", String::from_utf8_lossy(&e.name));
            fs.symlink_metadata(&path).unwrap().ctime_ns
        })
        .max()
        .unwrap();
    let check = |fs: &FileSystem| {
        assert_eq!(check_consistent(fs, "/d"), entries as usize);
        let m = fs.metadata("/d").unwrap();
        assert_eq!(m.nlink, 2 + dirs + 40);
        assert!(
            m.mtime_ns >= newest,
            "directory mtime older than its newest entry"
        );
    };
    check(&fs);
    Arc::into_inner(fs).unwrap().unmount().unwrap();
    let fs = mount(&dev);
    check(&fs);
}
