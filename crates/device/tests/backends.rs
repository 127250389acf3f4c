//! Behaviour tests of the device layer: one suite, run against every backend (io_uring
//! and pread on an `O_DIRECT` image file, and memory), plus the file-opening rules
//! (locking, fallback, `O_DIRECT`, image creation).
//!
//! Images live under `CARGO_TARGET_TMPDIR` (the work tree's file system), because `/tmp`
//! may be a tmpfs that refuses `O_DIRECT`; [`scratch_dir`] checks and says so.

use device::memory::MemoryBackend;
use device::{
    create_image, open, AlignedBuf, BackendChoice, BackendKind, Device, DeviceError, IoCause, IoOp,
    IoRequest, LockMode, OpenOptions,
};
use std::collections::BTreeSet;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use tempfile::TempDir;

const DEVICE_BYTES: u64 = 64 << 20;

/// A device under test and the image behind it, if any.
struct Fixture {
    dev: Device,
    _dir: Option<TempDir>,
}

/// A temporary directory on a file system that accepts `O_DIRECT`.
fn scratch_dir() -> TempDir {
    let candidates = [
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")),
        std::env::temp_dir(),
    ];
    for base in &candidates {
        let Ok(dir) = tempfile::tempdir_in(base) else {
            continue;
        };
        let probe = dir.path().join("probe");
        let opened = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(libc::O_DIRECT)
            .open(&probe);
        if opened.is_ok() {
            return dir;
        }
        eprintln!("{} refuses O_DIRECT; trying elsewhere", base.display());
    }
    panic!("no scratch directory accepts O_DIRECT (tried {candidates:?})");
}

fn image(size_bytes: u64) -> (TempDir, PathBuf) {
    let dir = scratch_dir();
    let path = dir.path().join("image");
    create_image(&path, size_bytes).expect("create image");
    (dir, path)
}

fn file_fixture(backend: BackendChoice) -> Fixture {
    let (dir, path) = image(DEVICE_BYTES);
    let opts = OpenOptions {
        backend,
        queue_depth: 32,
        ..OpenOptions::default()
    };
    let dev = open(&path, &opts).expect("open image");
    let expected = match backend {
        BackendChoice::IoUring => BackendKind::IoUring,
        BackendChoice::Pread => BackendKind::Pread,
        BackendChoice::Auto => dev.info().backend,
    };
    assert_eq!(dev.info().backend, expected);
    Fixture {
        dev,
        _dir: Some(dir),
    }
}

fn memory_fixture() -> Fixture {
    Fixture {
        dev: Device::new(Box::new(MemoryBackend::new(DEVICE_BYTES, 512))),
        _dir: None,
    }
}

/// The byte the tests store at `offset` when writing with `seed`.
fn pattern(seed: u64, offset: u64) -> u8 {
    let x = (offset ^ seed.rotate_left(17)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (x >> 56) as u8
}

fn patterned(seed: u64, offset: u64, len: usize) -> AlignedBuf {
    let mut buf = AlignedBuf::zeroed(len);
    for (i, b) in buf.iter_mut().enumerate() {
        *b = pattern(seed, offset + i as u64);
    }
    buf
}

fn assert_pattern(seed: u64, offset: u64, buf: &[u8]) {
    for (i, &b) in buf.iter().enumerate() {
        let at = offset + i as u64;
        assert_eq!(b, pattern(seed, at), "byte at {at} (seed {seed})");
    }
}

/// The suite every backend passes. Each case takes a fresh device.
mod cases {
    use super::*;

    pub fn write_then_read_back_at_many_offsets_and_sizes(dev: &Device) {
        let block = dev.info().logical_block_bytes as u64;
        let sizes = [512u64, 1024, 4096, 4608, 8192, 65536, 131_584, 1 << 20];
        let mut offset = 0u64;
        let mut extents = Vec::new();
        for (i, &len) in sizes.iter().filter(|&&len| len % block == 0).enumerate() {
            // Offsets that are aligned only to the block, then to 4 KiB, then to 1 MiB.
            offset = match i % 3 {
                0 => offset + block,
                1 => offset.next_multiple_of(4096) + 4096,
                _ => offset.next_multiple_of(1 << 20),
            };
            extents.push((offset, len));
            offset += len;
        }
        extents.push((dev.size_bytes() - (1 << 20), 1 << 20)); // the very end
        let writes = extents
            .iter()
            .map(|&(o, l)| IoRequest::write(o, patterned(1, o, l as usize), IoCause::UserData));
        for c in dev.run(writes.collect()).expect("writes") {
            c.result.expect("write");
        }
        let reads = extents
            .iter()
            .map(|&(o, l)| IoRequest::read(o, AlignedBuf::zeroed(l as usize), IoCause::UserData));
        let done = dev.run(reads.collect()).expect("reads");
        for (c, &(o, l)) in done.into_iter().zip(&extents) {
            c.result.expect("read");
            let buf = c.request.into_buf().expect("buffer back");
            assert_eq!(buf.len() as u64, l);
            assert_pattern(1, o, &buf);
        }
        // The blocking conveniences see the same bytes.
        let (o, l) = extents[1];
        let buf = dev
            .read(o, AlignedBuf::zeroed(l as usize), IoCause::UserData)
            .expect("read");
        assert_pattern(1, o, &buf);
    }

    pub fn many_in_flight_keep_their_tags(dev: &Device) {
        let queue = dev.queue().expect("queue");
        let depth = queue.depth();
        assert!(depth >= 2);
        let slot_bytes = 8192u64;
        // Seed the device so that each read has its own expected contents.
        let seeded: Vec<_> = (0..depth as u64)
            .map(|t| {
                IoRequest::write(
                    t * slot_bytes,
                    patterned(7, t * slot_bytes, 8192),
                    IoCause::Tool,
                )
            })
            .collect();
        drop(queue);
        dev.run(seeded)
            .expect("seed writes")
            .into_iter()
            .for_each(|c| c.result.expect("write"));
        let mut queue = dev.queue().expect("queue");
        let tag_base = 1000u64;
        for t in 0..depth as u64 {
            let r = IoRequest::read(t * slot_bytes, AlignedBuf::zeroed(8192), IoCause::Tool)
                .with_tag(tag_base + t);
            queue.push(r).expect("room below depth");
        }
        assert_eq!(queue.outstanding(), depth);
        let refused =
            queue.push(IoRequest::read(0, AlignedBuf::zeroed(4096), IoCause::Tool).with_tag(77));
        let refused = refused.expect_err("a full queue refuses");
        assert_eq!(refused.tag, 77, "a refused request comes back whole");
        let mut seen = BTreeSet::new();
        while queue.outstanding() > 0 {
            queue.submit(1).expect("submit");
            let mut popped = 0;
            while let Some(c) = queue.pop() {
                c.result.expect("read");
                let t = c.request.tag - tag_base;
                assert!(seen.insert(t), "tag {t} completed twice");
                let IoOp::Read { offset, buf } = c.request.op else {
                    panic!("not a read")
                };
                assert_eq!(offset, t * slot_bytes, "tag travels with its request");
                assert_pattern(7, offset, &buf);
                popped += 1;
            }
            assert!(popped >= 1, "submit(1) leaves a completion");
        }
        assert_eq!(seen, (0..depth as u64).collect());
        assert!(queue.pop().is_none());
    }

    pub fn run_orders_phases_across_flushes(dev: &Device) {
        let at = 4 << 20;
        let requests = vec![
            IoRequest::write(at, patterned(1, at, 4096), IoCause::UserData).with_tag(10),
            IoRequest::flush(IoCause::UserData).with_tag(11),
            IoRequest::write(at, patterned(2, at, 4096), IoCause::UserData).with_tag(12),
            IoRequest::write(at + 4096, patterned(2, at + 4096, 4096), IoCause::UserData)
                .with_tag(13),
            IoRequest::flush(IoCause::UserData).with_tag(14),
            IoRequest::read(at, AlignedBuf::zeroed(8192), IoCause::UserData).with_tag(15),
        ];
        let done = dev.run(requests).expect("run");
        let tags: Vec<u64> = done.iter().map(|c| c.request.tag).collect();
        assert_eq!(
            tags,
            [10, 11, 12, 13, 14, 15],
            "completions in request order, tags restored"
        );
        let names: Vec<&str> = done.iter().map(|c| c.request.op.name()).collect();
        assert_eq!(names, ["write", "flush", "write", "write", "flush", "read"]);
        let read = done
            .into_iter()
            .last()
            .expect("six")
            .request
            .into_buf()
            .expect("buffer");
        assert_pattern(2, at, &read);
    }

    pub fn flush_succeeds_and_keeps_data(dev: &Device) {
        let buf = dev
            .write(0, patterned(3, 0, 65536), IoCause::Wal)
            .expect("write");
        assert_eq!(buf.len(), 65536, "the buffer comes back");
        dev.flush(IoCause::Wal).expect("flush");
        dev.flush(IoCause::Wal).expect("a second flush");
        let back = dev
            .read(0, AlignedBuf::zeroed(65536), IoCause::Wal)
            .expect("read");
        assert_pattern(3, 0, &back);
    }

    pub fn discard_reads_back_as_zeros(dev: &Device) {
        if !dev.info().discard_supported {
            eprintln!("discard unsupported on this device; skipping");
            return;
        }
        let at = 8 << 20;
        dev.write(at, patterned(4, at, 3 << 20), IoCause::Gc)
            .expect("write");
        let mut queue = dev.queue().expect("queue");
        queue
            .push(IoRequest::discard(at + (1 << 20), 1 << 20, IoCause::Gc).with_tag(5))
            .expect("push");
        queue.submit(1).expect("submit");
        let c = queue.pop().expect("completion");
        assert_eq!(c.request.tag, 5);
        c.result.expect("discard");
        drop(queue);
        let back = dev
            .read(at, AlignedBuf::zeroed(3 << 20), IoCause::Gc)
            .expect("read");
        let (before, rest) = back.split_at(1 << 20);
        let (hole, after) = rest.split_at(1 << 20);
        assert_pattern(4, at, before);
        // Files and memory read discarded ranges back as zeros (block devices need not).
        assert!(hole.iter().all(|&b| b == 0), "discarded range reads zeros");
        assert_pattern(4, at + (2 << 20), after);
    }

    pub fn counters_are_exact_per_cause(dev: &Device) {
        let before = dev.counters().snapshot();
        for i in 0..3 {
            dev.write(i * 4096, AlignedBuf::zeroed(4096), IoCause::UserData)
                .expect("write");
        }
        dev.write(1 << 20, AlignedBuf::zeroed(1 << 20), IoCause::Node)
            .expect("write");
        for _ in 0..2 {
            dev.read(0, AlignedBuf::zeroed(8192), IoCause::Table)
                .expect("read");
        }
        dev.flush(IoCause::Wal).expect("flush");
        let requests = vec![
            IoRequest::write(0, AlignedBuf::zeroed(512), IoCause::Wal),
            IoRequest::flush(IoCause::Wal),
            IoRequest::flush(IoCause::Checkpoint),
        ];
        dev.run(requests).expect("run");
        let discarded = dev.info().discard_supported;
        if discarded {
            dev.discard(2 << 20, 1 << 20, IoCause::Gc).expect("discard");
        }
        let d = dev.counters().snapshot().since(&before);
        let user = d.cause(IoCause::UserData);
        assert_eq!(
            (
                user.write_ops,
                user.write_bytes,
                user.read_ops,
                user.flush_ops
            ),
            (3, 12288, 0, 0)
        );
        let node = d.cause(IoCause::Node);
        assert_eq!((node.write_ops, node.write_bytes), (1, 1 << 20));
        let table = d.cause(IoCause::Table);
        assert_eq!(
            (table.read_ops, table.read_bytes, table.write_ops),
            (2, 16384, 0)
        );
        let wal = d.cause(IoCause::Wal);
        assert_eq!((wal.write_ops, wal.write_bytes, wal.flush_ops), (1, 512, 2));
        assert_eq!(d.cause(IoCause::Checkpoint).flush_ops, 1);
        let gc = d.cause(IoCause::Gc);
        assert_eq!(
            (gc.discard_ops, gc.discard_bytes),
            if discarded { (1, 1 << 20) } else { (0, 0) }
        );
        let total = d.total();
        assert_eq!(
            (total.write_ops, total.read_ops, total.flush_ops),
            (5, 2, 3)
        );
        assert_eq!(total.write_bytes, 12288 + (1 << 20) + 512);
    }

    pub fn read_past_the_end_panics(dev: &Device) {
        let _ = dev.read(
            dev.size_bytes() - 512,
            AlignedBuf::zeroed(4096),
            IoCause::Tool,
        );
    }

    pub fn dropping_a_queue_waits_for_its_requests(dev: &Device) {
        {
            let mut queue = dev.queue().expect("queue");
            for i in 0..8u64 {
                let at = (16 << 20) + i * 65536;
                queue
                    .push(IoRequest::write(at, patterned(5, at, 65536), IoCause::Tool))
                    .expect("push");
            }
            queue.submit(0).expect("submit without waiting");
        }
        let back = dev
            .read(16 << 20, AlignedBuf::zeroed(8 * 65536), IoCause::Tool)
            .expect("read");
        assert_pattern(5, 16 << 20, &back);
        // Queues come and go (rings are pooled) and several live at once.
        let a = dev.queue().expect("queue a");
        let b = dev.queue().expect("queue b");
        drop(a);
        drop(b);
    }

    pub fn threads_with_their_own_queues_write_disjoint_ranges(dev: &Device) {
        const THREADS: u64 = 4;
        const WRITES: u64 = 64;
        const BYTES: u64 = 16384;
        let region = WRITES * BYTES;
        std::thread::scope(|s| {
            for t in 0..THREADS {
                s.spawn(move || {
                    let mut queue = dev.queue().expect("queue");
                    let mut next = 0u64;
                    let mut done = 0u64;
                    while done < WRITES {
                        while next < WRITES && queue.outstanding() < queue.depth().min(8) {
                            let at = t * region + next * BYTES;
                            let r = IoRequest::write(
                                at,
                                patterned(100 + t, at, BYTES as usize),
                                IoCause::UserData,
                            );
                            queue.push(r).expect("room");
                            next += 1;
                        }
                        queue.submit(1).expect("submit");
                        while let Some(c) = queue.pop() {
                            c.result.expect("write");
                            done += 1;
                        }
                    }
                });
            }
        });
        for t in 0..THREADS {
            let back = dev
                .read(
                    t * region,
                    AlignedBuf::zeroed(region as usize),
                    IoCause::UserData,
                )
                .expect("read");
            assert_pattern(100 + t, t * region, &back);
        }
        assert_eq!(
            dev.counters().snapshot().cause(IoCause::UserData).write_ops,
            THREADS * WRITES
        );
    }
}

macro_rules! backend_suite {
    ($($backend:ident => $fixture:expr;)*) => {$(
        mod $backend {
            use super::*;

            fn fixture() -> Fixture {
                $fixture
            }

            #[test]
            fn write_then_read_back_at_many_offsets_and_sizes() {
                cases::write_then_read_back_at_many_offsets_and_sizes(&fixture().dev);
            }

            #[test]
            fn many_in_flight_keep_their_tags() {
                cases::many_in_flight_keep_their_tags(&fixture().dev);
            }

            #[test]
            fn run_orders_phases_across_flushes() {
                cases::run_orders_phases_across_flushes(&fixture().dev);
            }

            #[test]
            fn flush_succeeds_and_keeps_data() {
                cases::flush_succeeds_and_keeps_data(&fixture().dev);
            }

            #[test]
            fn discard_reads_back_as_zeros() {
                cases::discard_reads_back_as_zeros(&fixture().dev);
            }

            #[test]
            fn counters_are_exact_per_cause() {
                cases::counters_are_exact_per_cause(&fixture().dev);
            }

            #[test]
            #[should_panic(expected = "past device end")]
            fn read_past_the_end_panics() {
                cases::read_past_the_end_panics(&fixture().dev);
            }

            #[test]
            fn dropping_a_queue_waits_for_its_requests() {
                cases::dropping_a_queue_waits_for_its_requests(&fixture().dev);
            }

            #[test]
            fn threads_with_their_own_queues_write_disjoint_ranges() {
                cases::threads_with_their_own_queues_write_disjoint_ranges(&fixture().dev);
            }
        }
    )*};
}

backend_suite! {
    io_uring => file_fixture(BackendChoice::IoUring);
    pread => file_fixture(BackendChoice::Pread);
    memory => memory_fixture();
}

// ---- Opening files: rules that only file-backed devices have. ----

fn opts(backend: BackendChoice, lock: LockMode) -> OpenOptions {
    OpenOptions {
        backend,
        lock,
        ..OpenOptions::default()
    }
}

#[test]
fn a_second_exclusive_open_is_in_use() {
    let (_dir, path) = image(1 << 20);
    for backend in [BackendChoice::IoUring, BackendChoice::Pread] {
        let first = open(&path, &opts(backend, LockMode::Exclusive)).expect("first open");
        let err = open(&path, &opts(backend, LockMode::Exclusive)).expect_err("second open");
        assert!(matches!(err, DeviceError::InUse { .. }), "{err}");
        assert_eq!(err.errno(), libc::EBUSY);
        drop(first);
        open(&path, &opts(backend, LockMode::Exclusive)).expect("open after the first closed");
    }
}

#[test]
fn shared_opens_coexist_and_exclude_exclusive_ones() {
    let (_dir, path) = image(1 << 20);
    let a = open(&path, &opts(BackendChoice::Auto, LockMode::Shared)).expect("shared a");
    let b = open(&path, &opts(BackendChoice::Pread, LockMode::Shared)).expect("shared b");
    let err = open(&path, &opts(BackendChoice::Auto, LockMode::Exclusive))
        .expect_err("exclusive while shared");
    assert!(matches!(err, DeviceError::InUse { .. }), "{err}");
    drop((a, b));
    let x = open(&path, &opts(BackendChoice::Auto, LockMode::Exclusive)).expect("exclusive alone");
    let err = open(&path, &opts(BackendChoice::Auto, LockMode::Shared))
        .expect_err("shared while exclusive");
    assert!(matches!(err, DeviceError::InUse { .. }), "{err}");
    drop(x);
}

#[test]
fn pread_backend_when_asked() {
    let (_dir, path) = image(4 << 20);
    let dev = open(&path, &opts(BackendChoice::Pread, LockMode::Exclusive)).expect("open");
    assert_eq!(dev.info().backend, BackendKind::Pread);
    assert_eq!(dev.info().notice, None, "asked for, so no fallback notice");
    dev.write(4096, patterned(9, 4096, 4096), IoCause::Tool)
        .expect("write");
    assert_pattern(
        9,
        4096,
        &dev.read(4096, AlignedBuf::zeroed(4096), IoCause::Tool)
            .expect("read"),
    );
}

#[test]
fn auto_uses_io_uring_or_says_why_not() {
    let (_dir, path) = image(4 << 20);
    let dev = open(&path, &OpenOptions::default()).expect("open");
    // Independent of the backend: can this process set up a ring at all?
    let uring_enabled = ::io_uring::IoUring::new(8).is_ok();
    match dev.info().backend {
        BackendKind::IoUring => assert_eq!(dev.info().notice, None),
        BackendKind::Pread => {
            let notice = dev
                .info()
                .notice
                .as_deref()
                .expect("a fallback carries its notice");
            assert!(
                notice.starts_with("io_uring unavailable (")
                    && notice.ends_with("); using pread/pwrite"),
                "{notice}"
            );
            assert!(
                !uring_enabled,
                "a ring can be set up here, yet Auto fell back: {notice}"
            );
        }
        other => panic!("unexpected backend {other:?}"),
    }
}

#[test]
fn io_uring_when_unavailable_is_a_typed_error() {
    // Only checkable where io_uring is off; elsewhere check that asking for it works.
    let (_dir, path) = image(1 << 20);
    match open(&path, &opts(BackendChoice::IoUring, LockMode::Exclusive)) {
        Ok(dev) => assert_eq!(dev.info().backend, BackendKind::IoUring),
        Err(e) => assert!(matches!(e, DeviceError::UringUnavailable { .. }), "{e}"),
    }
}

/// The open flags of this process's descriptors of `path`, from /proc/self/fdinfo.
fn open_flags_of(path: &Path) -> Vec<i32> {
    let target = std::fs::canonicalize(path).expect("canonical path");
    let mut flags = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fd").expect("fd dir") {
        let entry = entry.expect("fd entry");
        if std::fs::read_link(entry.path()).ok().as_deref() != Some(target.as_path()) {
            continue;
        }
        let info = std::fs::read_to_string(format!(
            "/proc/self/fdinfo/{}",
            entry.file_name().to_string_lossy()
        ));
        let Ok(info) = info else { continue };
        let line = info
            .lines()
            .find(|l| l.starts_with("flags:"))
            .expect("flags line");
        flags.push(i32::from_str_radix(line["flags:".len()..].trim(), 8).expect("octal flags"));
    }
    flags
}

#[test]
fn descriptors_are_o_direct() {
    let (_dir, path) = image(1 << 20);
    for backend in [
        BackendChoice::IoUring,
        BackendChoice::Pread,
        BackendChoice::Auto,
    ] {
        let dev = open(&path, &opts(backend, LockMode::Exclusive)).expect("open");
        let flags = open_flags_of(&path);
        assert!(
            !flags.is_empty(),
            "the device holds a descriptor of the image"
        );
        for f in flags {
            assert_ne!(
                f & libc::O_DIRECT,
                0,
                "{backend:?}: flags {f:o} lack O_DIRECT"
            );
            assert_eq!(
                f & libc::O_ACCMODE,
                libc::O_RDWR,
                "{backend:?}: flags {f:o}"
            );
        }
        drop(dev);
        assert!(
            open_flags_of(&path).is_empty(),
            "closing the device closes its descriptors"
        );
    }
}

#[test]
fn read_only_devices_refuse_writes_with_the_errno() {
    let (_dir, path) = image(1 << 20);
    for backend in [BackendChoice::IoUring, BackendChoice::Pread] {
        let o = OpenOptions {
            read_only: true,
            lock: LockMode::Shared,
            ..opts(backend, LockMode::Shared)
        };
        let dev = open(&path, &o).expect("open read-only");
        assert!(open_flags_of(&path)
            .iter()
            .all(|f| f & libc::O_ACCMODE == libc::O_RDONLY));
        assert!(!dev.info().discard_supported);
        dev.read(0, AlignedBuf::zeroed(4096), IoCause::Tool)
            .expect("reads work");
        let err = dev
            .write(0, AlignedBuf::zeroed(4096), IoCause::Tool)
            .expect_err("write on a read-only device");
        assert!(
            matches!(
                err,
                DeviceError::Io {
                    op: "write",
                    offset: 0,
                    ..
                }
            ),
            "{backend:?}: {err}"
        );
        assert_eq!(err.errno(), libc::EBADF, "{backend:?}: {err}");
    }
}

#[test]
fn geometry_is_measured() {
    let (_dir, path) = image((8 << 20) + 512);
    let dev = open(&path, &OpenOptions::default()).expect("open");
    let info = dev.info();
    assert!(
        matches!(info.logical_block_bytes, 512 | 1024 | 2048 | 4096),
        "{}",
        info.logical_block_bytes
    );
    let len = (8 << 20) + 512;
    assert_eq!(
        info.size_bytes,
        len - len % info.logical_block_bytes as u64,
        "size rounded down to blocks"
    );
    assert_eq!(info.path.as_deref(), Some(path.as_path()));
    assert!(!info.is_block_device);
    assert!(
        !info.discard_supported,
        "an image file is never punched: it stays written (device::image)"
    );
}

#[test]
fn create_image_sets_the_length_and_allocates_every_byte() {
    use std::os::unix::fs::MetadataExt;
    let dir = scratch_dir();
    let path = dir.path().join("image");
    create_image(&path, 3 << 20).expect("create");
    let meta = std::fs::metadata(&path).expect("stat");
    assert_eq!(meta.len(), 3 << 20);
    assert!(
        meta.blocks() * 512 >= 3 << 20,
        "only {} sectors allocated",
        meta.blocks()
    );
    create_image(&path, 5 << 20).expect("grow");
    assert!(std::fs::metadata(&path).expect("stat").blocks() * 512 >= 5 << 20);
    create_image(&path, 1 << 20).expect("shrink");
    assert_eq!(std::fs::metadata(&path).expect("stat").len(), 1 << 20);
}

fn unwritten(path: &std::path::Path) -> u64 {
    device::unwritten_bytes(path).expect("seek the holes")
}

#[test]
fn write_holes_writes_every_hole_once_and_keeps_the_data() {
    use std::os::unix::fs::FileExt;
    let dir = scratch_dir();
    let path = dir.path().join("image");
    let f = std::fs::File::create(&path).expect("create");
    f.set_len(6 << 20).expect("sparse file");
    f.write_all_at(&[7u8; 4096], 2 << 20)
        .expect("data in the middle");
    f.sync_all().expect("sync");
    drop(f);
    assert!(unwritten(&path) >= 5 << 20, "a sparse file has holes");
    let mut calls = 0;
    let written = device::write_holes(&path, &mut |done, total| {
        calls += 1;
        assert!(done <= total, "{done} of {total}");
    })
    .expect("write the holes");
    assert!((5 << 20..6 << 20).contains(&written), "wrote {written}");
    assert!(calls > 0, "progress heard");
    assert_eq!(unwritten(&path), 0, "no hole left");
    let mut block = [0u8; 4096];
    let f = std::fs::File::open(&path).expect("open");
    f.read_exact_at(&mut block, 2 << 20).expect("read");
    assert_eq!(block, [7u8; 4096], "the data is kept");
    f.read_exact_at(&mut block, 5 << 20).expect("read");
    assert_eq!(block, [0u8; 4096], "a hole reads zeros");
    drop(f);
    assert_eq!(
        device::write_holes(&path, &mut |_, _| {}).expect("again"),
        0
    );
    // An allocated image: ext4 and xfs keep fallocate's extents unwritten, and report
    // them as holes until written.
    create_image(&path, 8 << 20).expect("grow");
    let never_written = unwritten(&path);
    assert_eq!(
        device::write_holes(&path, &mut |_, _| {}).expect("grown part"),
        never_written
    );
    assert_eq!(unwritten(&path), 0);
}

#[test]
fn directories_and_missing_paths_are_refused() {
    let dir = scratch_dir();
    let err = open(dir.path(), &OpenOptions::default()).expect_err("a directory");
    assert!(matches!(err, DeviceError::NotADevice { .. }), "{err}");
    let err =
        open(&dir.path().join("missing"), &OpenOptions::default()).expect_err("a missing file");
    assert!(matches!(err, DeviceError::Open { .. }), "{err}");
    assert_eq!(err.errno(), libc::ENOENT);
}

/// Makes `io_uring_setup` fail with ENOSYS on the calling thread only (a seccomp filter
/// without TSYNC), the way container runtimes' default profiles do.
fn forbid_io_uring_on_this_thread() {
    let nr = libc::SYS_io_uring_setup as u32;
    let ret_errno = libc::SECCOMP_RET_ERRNO | (libc::ENOSYS as u32 & libc::SECCOMP_RET_DATA);
    let stmt = |code: u32, k: u32| libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    };
    let filter = [
        // A = seccomp_data.nr (offset 0).
        stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0),
        libc::sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
            jt: 0,
            jf: 1,
            k: nr,
        },
        stmt(libc::BPF_RET | libc::BPF_K, ret_errno),
        stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW),
    ];
    let program = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr().cast_mut(),
    };
    // SAFETY: prctl with integer arguments only.
    let r = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
    assert_eq!(r, 0, "no_new_privs: {}", std::io::Error::last_os_error());
    // SAFETY: `program` points at `filter`, both alive for the call; the kernel copies them.
    let r = unsafe { libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &program) };
    assert_eq!(r, 0, "seccomp: {}", std::io::Error::last_os_error());
}

#[test]
fn auto_falls_back_to_pread_where_io_uring_is_forbidden() {
    let (_dir, path) = image(4 << 20);
    // The filter stays with the thread, so give it a thread of its own.
    std::thread::spawn(move || {
        forbid_io_uring_on_this_thread();
        let err = open(&path, &opts(BackendChoice::IoUring, LockMode::Exclusive))
            .expect_err("io_uring asked for, and forbidden");
        assert!(matches!(err, DeviceError::UringUnavailable { .. }), "{err}");
        assert_eq!(err.errno(), libc::ENOSYS);
        let dev = open(&path, &OpenOptions::default()).expect("Auto falls back");
        assert_eq!(dev.info().backend, BackendKind::Pread);
        let notice = dev.info().notice.as_deref().expect("a fallback notice");
        assert!(
            notice.starts_with("io_uring unavailable (io_uring_setup: ")
                && notice.ends_with("; using pread/pwrite"),
            "{notice}"
        );
        dev.write(0, patterned(8, 0, 8192), IoCause::Tool)
            .expect("write");
        assert_pattern(
            8,
            0,
            &dev.read(0, AlignedBuf::zeroed(8192), IoCause::Tool)
                .expect("read"),
        );
    })
    .join()
    .expect("fallback thread");
}
