//! Zero-copy reads (`File::read_view`, docs/DESIGN.md §10.7 "Views"): a view shows the
//! file as it was at one moment of the read (each write whole or not at all, never
//! older than a write that finished before the read began), and its bytes never change
//! and stay valid while it is held, whatever happens to the file: overwrites,
//! truncates, unlink, the reuse of the freed memory by other files, unmount.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use testsupport::image::memory_image;
use testsupport::mount::mount;
use vfs::{FileSystem, OpenOptions, ReadView};

const MIB: u64 = 1 << 20;
const BLOCK: usize = 4096;

fn open_rw(fs: &Arc<FileSystem>, path: &str) -> vfs::File {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .open(fs, path)
        .unwrap()
}

/// `blocks` blocks, block `b` filled with `b ^ seed`.
fn pattern(blocks: usize, seed: u8) -> Vec<u8> {
    (0..blocks * BLOCK)
        .map(|i| (i / BLOCK) as u8 ^ seed)
        .collect()
}

#[test]
fn a_view_outlives_overwrites_truncate_unlink_reuse_and_unmount() {
    let dev = memory_image(64 * MIB, 1);
    let fs = mount(&dev);
    let f = open_rw(&fs, "/f");
    let old = pattern(64, 0x11);
    f.write_at(&old, 0).unwrap();
    // Unaligned at both ends: 10 bytes into block 2 to 20 bytes into block 41.
    let (at, len) = (2 * BLOCK + 10, 39 * BLOCK + 10);
    let view = f.read_view(at as u64, len).unwrap();
    assert_eq!(view.len(), len);
    assert_eq!(view.to_vec(), &old[at..at + len]);
    let lens: Vec<usize> = view.slices().map(<[u8]>::len).collect();
    assert_eq!((lens.len(), lens[0], lens[39]), (40, BLOCK - 10, 20));
    // The file changes every way it can, and its freed memory is taken by other files.
    f.write_at(&pattern(64, 0x22), 0).unwrap();
    f.set_len(0).unwrap();
    drop(f);
    fs.remove_file("/f").unwrap();
    for i in 0..8 {
        open_rw(&fs, &format!("/g{i}"))
            .write_at(&pattern(64, 0x33 + i), 0)
            .unwrap();
    }
    fs.sync().unwrap();
    assert_eq!(view.to_vec(), &old[at..at + len], "the view changed");
    Arc::into_inner(fs).unwrap().unmount().unwrap();
    assert_eq!(
        view.to_vec(),
        &old[at..at + len],
        "the view changed at unmount"
    );
}

#[test]
fn views_at_and_past_the_end_and_of_a_cold_file() {
    let dev = memory_image(64 * MIB, 1);
    let fs = mount(&dev);
    let data = pattern(300, 0x5a);
    open_rw(&fs, "/f")
        .write_at(&data[..300 * BLOCK - 7], 0)
        .unwrap();
    Arc::into_inner(fs).unwrap().unmount().unwrap();
    let fs = mount(&dev);
    let f = OpenOptions::new().read(true).open(&fs, "/f").unwrap();
    let size = 300 * BLOCK - 7;
    // Cold, sequential: read from the device and ahead, as a copying read.
    let mut got = Vec::new();
    let mut off = 0;
    while off < size {
        let v = f.read_view(off as u64, MIB as usize).unwrap();
        assert!(!v.is_empty());
        got.extend(v.to_vec());
        off += v.len();
    }
    assert_eq!(got, &data[..size]);
    assert!(fs.cache_stats().readahead > 0, "{:?}", fs.cache_stats());
    assert!(f.read_view(size as u64, 10).unwrap().is_empty());
    assert!(f.read_view(size as u64 + 5, 10).unwrap().is_empty());
    assert!(f.read_view(0, 0).unwrap().is_empty());
    assert_eq!(f.read_view(size as u64 - 3, 10).unwrap().len(), 3);
    let w = OpenOptions::new().write(true).open(&fs, "/f").unwrap();
    assert!(w.read_view(0, 10).is_err(), "a file not open for reading");
}

/// A writer rewrites the same 16 blocks whole with ever larger versions while a reader
/// takes views of them: every view holds one version in all its blocks (each write
/// whole or not at all), never older than the last write that finished before the
/// view began, and still the same bytes after more writes while held.
#[test]
fn views_see_whole_fresh_writes_and_never_change_while_held() {
    let dev = memory_image(64 * MIB, 1);
    let fs = mount(&dev);
    let blocks = 16;
    open_rw(&fs, "/f")
        .write_at(&vec![0u8; blocks * BLOCK], 0)
        .unwrap();
    let done = Arc::new(AtomicU64::new(0));
    let last: u64 = 400;
    let writer = {
        let (fs, done) = (fs.clone(), done.clone());
        std::thread::spawn(move || {
            let f = OpenOptions::new().write(true).open(&fs, "/f").unwrap();
            for v in 1..=last {
                let mut data = vec![v as u8; blocks * BLOCK];
                data[..8].copy_from_slice(&v.to_le_bytes());
                f.write_at(&data, 0).unwrap();
                done.store(v, Ordering::SeqCst);
            }
        })
    };
    let f = OpenOptions::new().read(true).open(&fs, "/f").unwrap();
    let mut held: Vec<(ReadView, Vec<u8>)> = Vec::new();
    // Until the writer is done, and at least 3,000 views.
    let mut i = 0;
    while i < 3000 || done.load(Ordering::SeqCst) < last {
        i += 1;
        let before = done.load(Ordering::SeqCst);
        let view = f.read_view(0, blocks * BLOCK).unwrap();
        let bytes = view.to_vec();
        let v = u64::from_le_bytes(bytes[..8].try_into().unwrap());
        assert!(
            v >= before,
            "view of version {v} after version {before} was written"
        );
        assert!(
            bytes[8..].iter().all(|&b| b == v as u8),
            "a torn view of version {v}"
        );
        held.push((view, bytes));
        if i % 64 == 0 {
            for (view, bytes) in held.drain(..) {
                assert_eq!(&view.to_vec(), &bytes, "a held view changed");
            }
        }
    }
    writer.join().unwrap();
    assert_eq!(done.load(Ordering::SeqCst), last, "the writer wrote");
}
