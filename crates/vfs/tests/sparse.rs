//! Sparse files: SEEK_DATA/SEEK_HOLE, fallocate's modes, exact st_blocks (across a
//! remount), ENOSPC before an allocation writes, and a 1 TiB sparse file.

use format::constants::MIB;
use std::sync::Arc;
use testsupport::image::memory_image;
use testsupport::mount::{errno, mount};
use vfs::{Fallocate, File, FileSystem, OpenOptions};

const B: u64 = 4096;

fn open(fs: &Arc<FileSystem>, path: &str) -> File {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .open(fs, path)
        .unwrap()
}

fn content(f: &File, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    let n = f.read_at(&mut buf, 0).unwrap();
    buf.truncate(n);
    buf
}

#[test]
fn seek_data_and_hole_walk_a_sparse_file() {
    let dev = memory_image(128 * MIB, 2);
    let fs = mount(&dev);
    let mut f = open(&fs, "/s");
    f.write_at(&[1u8; 4096], 0).unwrap();
    f.write_at(&[2u8; 8192], MIB).unwrap();
    let size = MIB + 8192;
    assert_eq!(f.metadata().unwrap().blocks, 3 * 8);
    assert_eq!(f.seek_data(0).unwrap(), 0);
    assert_eq!(f.seek_data(100).unwrap(), 100);
    assert_eq!(f.seek_hole(0).unwrap(), B);
    assert_eq!(f.seek_data(B).unwrap(), MIB);
    assert_eq!(f.seek_data(B + 7).unwrap(), MIB);
    assert_eq!(f.seek_hole(MIB + 5).unwrap(), size);
    assert_eq!(errno(f.seek_data(size)), libc::ENXIO);
    assert_eq!(errno(f.seek_hole(size)), libc::ENXIO);
    // A hole at the end of the file: SEEK_DATA finds nothing after the last block.
    f.set_len(2 * MIB).unwrap();
    assert_eq!(errno(f.seek_data(size)), libc::ENXIO);
    assert_eq!(f.seek_hole(size).unwrap(), size);
    // A file without holes has its only hole at the end.
    let mut g = open(&fs, "/dense");
    g.write_at(&[3u8; 10_000], 0).unwrap();
    assert_eq!(g.seek_hole(0).unwrap(), 10_000);
    assert_eq!(g.seek_data(9_999).unwrap(), 9_999);
}

#[test]
fn punch_hole_zeroes_the_range_and_frees_whole_blocks() {
    let dev = memory_image(128 * MIB, 2);
    let fs = mount(&dev);
    let f = open(&fs, "/p");
    f.write_at(&[7u8; 3 * 4096], 0).unwrap();
    f.fallocate(Fallocate::PunchHole, 1000, 8000).unwrap();
    let got = content(&f, 3 * 4096);
    assert_eq!(got.len(), 3 * 4096, "the size does not change");
    for (i, &b) in got.iter().enumerate() {
        let want = if (1000..9000).contains(&i) { 0 } else { 7 };
        assert_eq!(b, want, "byte {i}");
    }
    // Block 1 (4096..8192) is gone; blocks 0 and 2 were zeroed in part.
    assert_eq!(f.metadata().unwrap().blocks, 2 * 8);
    // A punch inside one block and one past the end change no size either.
    f.fallocate(Fallocate::PunchHole, 10, 20).unwrap();
    f.fallocate(Fallocate::PunchHole, 100_000, 4096).unwrap();
    let got = content(&f, 3 * 4096);
    assert!(got[10..30].iter().all(|&b| b == 0) && got[9] == 7 && got[30] == 7);
    assert_eq!(f.metadata().unwrap().size, 3 * 4096);
}

#[test]
fn allocate_grows_the_size_and_maps_nothing() {
    let dev = memory_image(128 * MIB, 2);
    let fs = mount(&dev);
    let f = open(&fs, "/a");
    f.write_at(b"hello", 0).unwrap();
    f.sync_all().unwrap();
    let before = dev.counters().snapshot();
    f.fallocate(Fallocate::Allocate { keep_size: false }, 0, 10 * B)
        .unwrap();
    let m = f.metadata().unwrap();
    assert_eq!((m.size, m.blocks), (10 * B, 8));
    let got = content(&f, (10 * B) as usize);
    assert_eq!(&got[..5], b"hello");
    assert!(got[5..].iter().all(|&b| b == 0));
    // Keep size: nothing changes past the end.
    f.fallocate(Fallocate::Allocate { keep_size: true }, 10 * B, 6 * B)
        .unwrap();
    let m = f.metadata().unwrap();
    assert_eq!((m.size, m.blocks), (10 * B, 8));
    f.fallocate(Fallocate::Allocate { keep_size: false }, 0, 16 * B)
        .unwrap();
    f.sync_all().unwrap();
    // Only the size reached the device: no zero blocks (16 of them are 64 KiB).
    let cost = dev.counters().snapshot().since(&before).total().write_bytes;
    assert!(cost < 16 * B, "fallocate wrote {cost} bytes");
    drop(f);
    Arc::into_inner(fs).unwrap().unmount().unwrap();
    let fs = mount(&dev);
    let m = fs.metadata("/a").unwrap();
    assert_eq!((m.size, m.blocks), (16 * B, 8));
}

#[test]
fn zero_range_can_grow_the_file() {
    let dev = memory_image(128 * MIB, 2);
    let fs = mount(&dev);
    let f = open(&fs, "/z");
    f.write_at(&[5u8; 8192], 0).unwrap();
    f.fallocate(Fallocate::ZeroRange { keep_size: false }, 4000, 10_000)
        .unwrap();
    let got = content(&f, 20_000);
    assert_eq!(got.len(), 14_000);
    assert!(got[..4000].iter().all(|&b| b == 5));
    assert!(got[4000..].iter().all(|&b| b == 0));
    f.fallocate(Fallocate::ZeroRange { keep_size: true }, 0, 50_000)
        .unwrap();
    assert_eq!(f.metadata().unwrap().size, 14_000);
}

#[test]
fn fallocate_modes_map_to_errnos_like_linux() {
    use libc::{
        EBADF, EFBIG, EINVAL, EOPNOTSUPP, FALLOC_FL_COLLAPSE_RANGE, FALLOC_FL_INSERT_RANGE,
        FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE,
    };
    assert_eq!(
        Fallocate::from_mode(0).unwrap(),
        Fallocate::Allocate { keep_size: false }
    );
    assert_eq!(
        Fallocate::from_mode(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE).unwrap(),
        Fallocate::PunchHole
    );
    assert_eq!(
        errno(Fallocate::from_mode(FALLOC_FL_PUNCH_HOLE)),
        EOPNOTSUPP
    );
    assert_eq!(
        errno(Fallocate::from_mode(FALLOC_FL_COLLAPSE_RANGE)),
        EOPNOTSUPP
    );
    assert_eq!(
        errno(Fallocate::from_mode(FALLOC_FL_INSERT_RANGE)),
        EOPNOTSUPP
    );
    assert_eq!(errno(Fallocate::from_mode(0x4000)), EINVAL);
    let dev = memory_image(128 * MIB, 2);
    let fs = mount(&dev);
    let f = open(&fs, "/e");
    let alloc = Fallocate::Allocate { keep_size: false };
    assert_eq!(errno(f.fallocate(alloc, 0, 0)), EINVAL);
    assert_eq!(errno(f.fallocate(alloc, u64::MAX, 2)), EINVAL);
    assert_eq!(errno(f.fallocate(alloc, 1 << 50, 1)), EFBIG);
    let ro = OpenOptions::new().read(true).open(&fs, "/e").unwrap();
    assert_eq!(errno(ro.fallocate(alloc, 0, 1)), EBADF);
}

#[test]
fn allocation_beyond_free_space_fails_before_writing() {
    let dev = memory_image(96 * MIB, 2);
    let fs = mount(&dev);
    let f = open(&fs, "/big");
    let free = fs.statfs().blocks_free;
    assert_eq!(
        errno(f.fallocate(Fallocate::Allocate { keep_size: true }, 0, (free + 1) * B)),
        libc::ENOSPC
    );
    assert_eq!(f.metadata().unwrap().blocks, 0);
}

#[test]
fn one_tebibyte_sparse_file() {
    let dev = memory_image(128 * MIB, 2);
    let fs = mount(&dev);
    let mut f = open(&fs, "/huge");
    let tib = 1u64 << 40;
    f.write_at(b"end", tib - 3).unwrap();
    let m = f.metadata().unwrap();
    assert_eq!((m.size, m.blocks), (tib, 8));
    assert_eq!(f.seek_data(0).unwrap(), tib - B);
    assert_eq!(f.seek_hole(0).unwrap(), 0);
    let mut buf = [0u8; 6];
    assert_eq!(f.read_at(&mut buf, tib - 6).unwrap(), 6);
    assert_eq!(&buf, b"\0\0\0end");
    f.set_len(tib / 2).unwrap();
    assert_eq!(f.metadata().unwrap().blocks, 0);
}
