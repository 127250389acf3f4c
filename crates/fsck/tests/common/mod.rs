//! What the fsck tests share beside testsupport: an image file made by a real VFS
//! workload (built once per test binary and copied for each test), raw MetaDB edits,
//! and running fsck on an image file.
#![allow(dead_code)] // each test file uses its own subset

use engine::log::keys::{self, FileBlock, Mapping};
use format::InodeNo;
use fsck::{Mode, Report};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use testsupport::check::run_fsck;
use testsupport::image::mkfs_file;
use testsupport::mount::{foreground_config, open_file, unmount};
use vfs::{FileSystem, OpenOptions, RenameMode, XattrMode};

pub const IMAGE_BYTES: u64 = 128 << 20;
pub const DOMAINS: u32 = 2;

/// The image file at `path`, mounted without background jobs.
pub fn mount(path: &Path) -> Arc<FileSystem> {
    open_file(path, foreground_config())
}

fn write_file(fs: &Arc<FileSystem>, path: &str, len: usize, seed: u8) {
    let f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(fs, path)
        .expect("create");
    let data: Vec<u8> = (0..len)
        .map(|i| seed.wrapping_add((i / 4096) as u8))
        .collect();
    if !data.is_empty() {
        f.write_at(&data, 0).expect("write");
    }
}

/// Files of several sizes (empty, partial block, multi-block, sparse), directories,
/// hard links, symlinks, renames across directories, xattrs, and overwrites enough to
/// make GC clean segments.
pub fn workload(fs: &Arc<FileSystem>) {
    fs.create_dir("/d1", 0o755).unwrap();
    fs.create_dir("/d1/sub", 0o700).unwrap();
    fs.create_dir("/d2", 0o755).unwrap();
    write_file(fs, "/empty", 0, 1);
    write_file(fs, "/d1/small", 100, 2);
    write_file(fs, "/d1/two", 8192, 3);
    write_file(fs, "/d1/sub/big", 3 << 20, 4);
    write_file(fs, "/d2/mid", 200_000, 5);
    let sparse = OpenOptions::new()
        .write(true)
        .create(true)
        .open(fs, "/d2/sparse")
        .unwrap();
    sparse.write_at(&[9u8; 5000], 10 << 20).unwrap();
    // A preallocation past the end (fallocate KEEP_SIZE maps nothing) and a punched hole.
    let pre = OpenOptions::new()
        .write(true)
        .create(true)
        .open(fs, "/d1/prealloc")
        .unwrap();
    pre.write_at(&[8u8; 64 << 10], 0).unwrap();
    pre.fallocate(vfs::Fallocate::Allocate { keep_size: true }, 0, 128 << 10)
        .unwrap();
    pre.fallocate(vfs::Fallocate::PunchHole, 8192, 8192)
        .unwrap();
    drop(pre);
    fs.hard_link("/d1/two", "/d2/two-link").unwrap();
    fs.hard_link("/d1/two", "/two-link").unwrap();
    fs.symlink("/d1/small", "/d2/to-small").unwrap();
    fs.symlink("dangling/target", "/d1/broken").unwrap();
    fs.rename_path("/d2/mid", "/d1/sub/mid", RenameMode::Replace)
        .unwrap();
    fs.rename_path("/d1/sub", "/d2/sub", RenameMode::Replace)
        .unwrap();
    fs.set_xattr("/d2/sub/mid", b"user.color", b"blue", XattrMode::Create)
        .unwrap();
    fs.set_xattr("/d1", b"trusted.x", &[1u8; 300], XattrMode::Create)
        .unwrap();
    write_file(fs, "/gone", 50_000, 6);
    fs.remove_file("/gone").unwrap();
    // Strided overwrites leave segments part valid; GC then moves the live halves.
    write_file(fs, "/churn", 6 << 20, 7);
    let churn = OpenOptions::new().write(true).open(fs, "/churn").unwrap();
    for round in 0..8u8 {
        for chunk in 0..48u64 {
            churn
                .write_at(
                    &[round; 64 << 10],
                    chunk * (128 << 10) + u64::from(round % 2) * (64 << 10),
                )
                .unwrap();
        }
    }
    drop(churn);
    fs.sync().unwrap();
    for _ in 0..4 {
        fs.engine()
            .gc_pass(engine::space::victim::Policy::CostBenefit)
            .unwrap();
    }
    fs.sync().unwrap();
}

static TEMPLATE: OnceLock<(tempfile::TempDir, PathBuf, u64)> = OnceLock::new();

fn template() -> &'static (tempfile::TempDir, PathBuf, u64) {
    TEMPLATE.get_or_init(|| {
        let dir = testsupport::scratch!();
        let path = dir.path().join("template.img");
        mkfs_file(&path, IMAGE_BYTES, DOMAINS);
        let fs = mount(&path);
        workload(&fs);
        let cleaned = fs
            .engine()
            .counters()
            .gc_segments_cleaned
            .load(std::sync::atomic::Ordering::Relaxed);
        unmount(fs);
        (dir, path, cleaned)
    })
}

/// A copy of the workload image (built once per test binary) in `dir`.
pub fn workload_image(dir: &Path) -> PathBuf {
    let copy = dir.join("image.img");
    std::fs::copy(&template().1, &copy).unwrap();
    copy
}

/// Segments GC cleaned while the template was made.
pub fn template_gc_cleaned() -> u64 {
    template().2
}

/// fsck of the image file at `path` (opened writable to repair).
pub fn run(path: &Path, mode: Mode, verify_data: bool) -> Report {
    let dev = fsck::open_image(path, mode != Mode::Check).expect("open");
    run_fsck(dev, mode, verify_data)
}

pub fn kinds(r: &Report) -> Vec<fsck::Kind> {
    r.problems.iter().map(|p| p.kind).collect()
}

/// FNV-1a of a file's bytes.
pub fn hash(path: &Path) -> u64 {
    std::fs::read(path)
        .unwrap()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        })
}

pub fn ino(fs: &FileSystem, path: &str) -> InodeNo {
    fs.resolve(path, false).unwrap()
}

pub fn put(fs: &FileSystem, key: &[u8], value: &[u8]) {
    fs.engine()
        .metadb()
        .put(key, value, metadb::Durability::Sync)
        .unwrap();
}

pub fn delete(fs: &FileSystem, key: &[u8]) {
    fs.engine()
        .metadb()
        .delete(key, metadb::Durability::Sync)
        .unwrap();
}

/// Unmaps one block behind the engine's back: deletes its `x` record and takes it out of
/// the extent covering it (the rest of the extent stays).
pub fn unmap(fs: &FileSystem, ino: InodeNo, block: u64) {
    let b = FileBlock(block);
    delete(fs, &keys::mapping_key(ino, b));
    let db = fs.engine().metadb();
    let covering = db
        .prefix(&keys::extent_prefix(ino), None)
        .unwrap()
        .map(|item| item.unwrap())
        .map(|(key, value)| {
            let last = keys::parse_extent_key(&key).unwrap().1;
            keys::Extent::decode(last, &value).unwrap()
        })
        .find(|e| e.contains(b));
    if let Some(e) = covering {
        delete(fs, &e.key(ino));
        let pieces = [
            e.slice(e.first, b),
            e.slice(FileBlock(block + 1), FileBlock(e.last().0 + 1)),
        ];
        for p in pieces.into_iter().flatten() {
            put(fs, &p.key(ino), &p.encode());
        }
    }
}

/// The mapping of a block: its `x` record, else the extent covering it.
pub fn mapping(fs: &FileSystem, ino: InodeNo, block: u64) -> Mapping {
    let db = fs.engine().metadb();
    let b = FileBlock(block);
    if let Some(v) = db.get(&keys::mapping_key(ino, b)).unwrap() {
        return Mapping::decode(&v).unwrap();
    }
    let (key, value) = db
        .prefix(&keys::extent_prefix(ino), None)
        .unwrap()
        .map(|item| item.unwrap())
        .find(|(key, _)| keys::parse_extent_key(key).unwrap().1 >= b)
        .expect("block mapped");
    let e = keys::Extent::decode(keys::parse_extent_key(&key).unwrap().1, &value).unwrap();
    e.mapping(b)
}

pub fn inode(fs: &FileSystem, ino: InodeNo) -> vfs::records::Inode {
    let v = fs
        .engine()
        .metadb()
        .get(&vfs::records::inode_key(ino))
        .unwrap()
        .unwrap();
    vfs::records::Inode::decode(ino, &v).unwrap()
}

/// Mounts and reads every file and directory: the VFS accepts the image.
pub fn walk_all(path: &Path) -> usize {
    let fs = mount(path);
    let mut seen = 0;
    let mut dirs = vec!["/".to_string()];
    while let Some(d) = dirs.pop() {
        for e in fs.read_dir(&d).unwrap() {
            seen += 1;
            let p = format!(
                "{}/{}",
                d.trim_end_matches('/'),
                String::from_utf8_lossy(&e.name)
            );
            match e.kind {
                vfs::Kind::Dir => dirs.push(p),
                vfs::Kind::Symlink => {
                    fs.read_link(&p).unwrap();
                }
                vfs::Kind::File => {
                    let f = OpenOptions::new().read(true).open(&fs, &p).unwrap();
                    let len = f.metadata().unwrap().size as usize;
                    let mut buf = vec![0u8; len.min(16 << 20)];
                    f.read_at(&mut buf, 0).unwrap();
                }
                k => {
                    assert!(k.is_special(), "{k:?}");
                    let m = fs.symlink_metadata(&p).unwrap();
                    assert_eq!((m.kind, m.size), (k, 0), "{p}");
                }
            }
        }
    }
    unmount(fs);
    seen
}
