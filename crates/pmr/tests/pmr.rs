//! Scenario tests of the PMR layer: file-backed regions across reopen, locking, DAX
//! detection, the line-granular crash model, concurrent 8-byte atomics, injected latency
//! and the header.

use format::constants::{MIB, PMR_SIZE_MIN_BYTES};
use format::pmr::PmrLayout;
use platform::{Clock, Rng};
use pmr::{
    format_region, read_header, read_header_for, IoCause, PersistMode, Pmr, PmrError, PmrOptions,
    LINE_BYTES,
};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// A fresh path under the target's temporary directory; any old file is removed.
fn temp_path(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("pmr-tests");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{name}.pmr"));
    let _ = std::fs::remove_file(&path);
    path
}

fn memory(size_bytes: u64) -> Pmr {
    Pmr::memory(size_bytes, PmrOptions::default()).unwrap()
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; len];
    Rng::from_seed(seed).fill(&mut bytes);
    bytes
}

// ---------------------------------------------------------------------------------------
// File-backed regions.

#[test]
fn file_round_trip_across_close_and_reopen() {
    let path = temp_path("round_trip");
    let data = pattern(1, 1000);
    {
        let pmr = Pmr::create(&path, 4 * MIB, PmrOptions::default()).unwrap();
        assert_eq!(pmr.len(), 4 * MIB);
        assert_eq!(pmr.path(), Some(path.as_path()));
        pmr.write(8192 + 3, &data);
        pmr.store_u64(3 * MIB, 0xDEAD_BEEF);
        pmr.persist(8192 + 3, data.len() as u64, IoCause::Wal)
            .unwrap();
        pmr.persist(3 * MIB, 8, IoCause::Wal).unwrap();
    }
    let pmr = Pmr::open(&path, PmrOptions::default()).unwrap();
    assert_eq!(pmr.len(), 4 * MIB);
    let mut back = vec![0u8; data.len()];
    pmr.read(8192 + 3, &mut back, IoCause::Wal);
    assert_eq!(back, data);
    assert_eq!(pmr.load_u64(3 * MIB), 0xDEAD_BEEF);
    // A fresh region reads as zero elsewhere.
    let mut rest = vec![0xFFu8; 4096];
    pmr.read(MIB, &mut rest, IoCause::Wal);
    assert!(rest.iter().all(|&b| b == 0));
    drop(pmr);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn create_discards_old_contents() {
    let path = temp_path("recreate");
    {
        let pmr = Pmr::create(&path, 2 * MIB, PmrOptions::default()).unwrap();
        pmr.write(0, &[7; 64]);
        pmr.persist(0, 64, IoCause::Tool).unwrap();
    }
    let pmr = Pmr::create(&path, 2 * MIB, PmrOptions::default()).unwrap();
    let mut back = [1u8; 64];
    pmr.read(0, &mut back, IoCause::Tool);
    assert_eq!(back, [0; 64]);
}

#[test]
fn second_open_is_in_use_until_the_first_closes() {
    let path = temp_path("lock");
    let first = Pmr::create(&path, 2 * MIB, PmrOptions::default()).unwrap();
    let err = Pmr::open(&path, PmrOptions::default()).unwrap_err();
    assert!(
        matches!(&err, PmrError::InUse { path: p } if *p == path),
        "{err}"
    );
    assert_eq!(err.errno(), libc::EBUSY);
    // Re-creating a region in use must not resize or truncate it under its owner.
    let err = Pmr::create(&path, 4 * MIB, PmrOptions::default()).unwrap_err();
    assert!(matches!(err, PmrError::InUse { .. }), "{err}");
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 2 * MIB);
    drop(first);
    let again = Pmr::open(&path, PmrOptions::default()).unwrap();
    assert_eq!(again.len(), 2 * MIB);
}

#[test]
fn too_small_and_misaligned_regions_are_refused() {
    let path = temp_path("too_small");
    let err = Pmr::create(&path, MIB, PmrOptions::default()).unwrap_err();
    match err {
        PmrError::TooSmall { size, min } => {
            assert_eq!(size, MIB);
            assert_eq!(min, PMR_SIZE_MIN_BYTES);
        }
        other => panic!("expected TooSmall, got {other}"),
    }
    // The size is checked before the file is touched.
    assert!(!path.exists());
    let err = Pmr::create(&path, 2 * MIB + 100, PmrOptions::default()).unwrap_err();
    assert!(
        matches!(err, PmrError::Misaligned { size } if size == 2 * MIB + 100),
        "{err}"
    );

    // An existing file that is too small is refused on open.
    std::fs::write(&path, vec![0u8; 8192]).unwrap();
    let err = Pmr::open(&path, PmrOptions::default()).unwrap_err();
    assert!(
        matches!(err, PmrError::TooSmall { size: 8192, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("8192"), "{err}");
}

#[test]
fn missing_file_is_an_open_error() {
    let path = temp_path("missing");
    let err = Pmr::open(&path, PmrOptions::default()).unwrap_err();
    assert!(matches!(&err, PmrError::Open { .. }), "{err}");
    assert_eq!(err.errno(), libc::ENOENT);
}

#[test]
fn dax_is_detected_not_assumed_on_a_normal_file() {
    // The target directory is on ext4/tmpfs/overlayfs here, none of which is DAX: the
    // MAP_SYNC mapping is refused and the region falls back to msync.
    let path = temp_path("dax_detect");
    let pmr = Pmr::create(&path, 2 * MIB, PmrOptions::default()).unwrap();
    assert_eq!(
        pmr.persist_mode(),
        PersistMode::Msync,
        "is the target dir on a DAX file system?"
    );
    assert!(pmr.persist_mode().is_emulated());
    assert!(pmr.persist_mode().name().starts_with("msync"));
}

#[test]
fn file_persist_counts_lines_and_flushes() {
    let path = temp_path("counts");
    let pmr = Pmr::create(&path, 2 * MIB, PmrOptions::default()).unwrap();
    pmr.write(4096 + 60, &[3; 10]);
    let before = pmr.counters().snapshot();
    // Bytes 4156..4166 straddle two lines.
    pmr.persist(4096 + 60, 10, IoCause::Wal).unwrap();
    pmr.persist(0, 3 * LINE_BYTES, IoCause::Superblock).unwrap();
    let delta = pmr.counters().snapshot().since(&before);
    let wal = delta.cause(IoCause::Wal);
    assert_eq!(
        (wal.write_ops, wal.write_bytes, wal.flush_ops),
        (1, 2 * LINE_BYTES, 1)
    );
    let sb = delta.cause(IoCause::Superblock);
    assert_eq!((sb.write_bytes, sb.flush_ops), (3 * LINE_BYTES, 1));
}

#[test]
fn header_survives_reopen_and_names_its_file_system() {
    let path = temp_path("header");
    let header = {
        let pmr = Pmr::create(&path, 4 * MIB, PmrOptions::default()).unwrap();
        format_region(&pmr, [0x5A; 16]).unwrap()
    };
    let pmr = Pmr::open(&path, PmrOptions::default()).unwrap();
    assert_eq!(read_header(&pmr).unwrap(), header);
    assert_eq!(header.layout, PmrLayout::compute(4 * MIB).unwrap());
    assert_eq!(read_header_for(&pmr, [0x5A; 16]).unwrap(), header);
    let err = read_header_for(&pmr, [0xA5; 16]).unwrap_err();
    assert!(matches!(err, PmrError::ForeignFileSystem { .. }), "{err}");
    assert!(err.to_string().contains("5a5a5a5a-5a5a"), "{err}");
}

// ---------------------------------------------------------------------------------------
// Crash model.

const SEEDS: u64 = 64;

#[test]
fn persisted_lines_always_survive() {
    let pmr = memory(2 * MIB);
    let data = pattern(2, 64 * 10);
    pmr.write(8192, &data);
    pmr.persist(8192, data.len() as u64, IoCause::Wal).unwrap();
    // Unpersisted noise elsewhere, some of it in lines next to the persisted ones.
    pmr.write(8192 + 64 * 10, &[0xEE; 200]);
    pmr.write(MIB, &[0xEE; 4096]);
    for seed in 0..SEEDS {
        let image = pmr.crash_image(&mut Rng::from_seed(seed));
        assert_eq!(&image[8192..8192 + data.len()], &data[..], "seed {seed}");
    }
    assert_eq!(
        &pmr.crash_image_all_lost()[8192..8192 + data.len()],
        &data[..]
    );
}

#[test]
fn unpersisted_lines_sometimes_survive_and_sometimes_not() {
    let pmr = memory(2 * MIB);
    pmr.write(8192, &[0xCC; 64]);
    let (mut kept, mut lost) = (0, 0);
    for seed in 0..SEEDS {
        let image = pmr.crash_image(&mut Rng::from_seed(seed));
        match &image[8192..8192 + 64] {
            line if line == [0xCC; 64] => kept += 1,
            line if line == [0; 64] => lost += 1,
            line => panic!("seed {seed}: torn line {line:?}"),
        }
    }
    assert!(
        kept > 0 && lost > 0,
        "kept {kept} lost {lost} over {SEEDS} seeds"
    );
    assert_eq!(&pmr.crash_image_all_kept()[8192..8192 + 64], &[0xCC; 64]);
    assert_eq!(&pmr.crash_image_all_lost()[8192..8192 + 64], &[0; 64]);
}

#[test]
fn a_torn_multi_line_write_mixes_whole_lines() {
    const LINES: usize = 6;
    let pmr = memory(2 * MIB);
    let base = 16384u64;
    let old = pattern(3, 64 * LINES);
    let new = pattern(4, 64 * LINES);
    pmr.write(base, &old);
    pmr.persist(base, old.len() as u64, IoCause::Wal).unwrap();
    pmr.write(base, &new);
    assert_eq!(pmr.dirty_lines_count(), LINES);
    let mut mixed = 0;
    for seed in 0..SEEDS {
        let image = pmr.crash_image(&mut Rng::from_seed(seed));
        let region = &image[base as usize..][..64 * LINES];
        let mut from_new = 0;
        for line in 0..LINES {
            let got = &region[line * 64..][..64];
            if got == &new[line * 64..][..64] {
                from_new += 1;
            } else {
                assert_eq!(
                    got,
                    &old[line * 64..][..64],
                    "seed {seed} line {line} is torn"
                );
            }
        }
        if from_new > 0 && from_new < LINES {
            mixed += 1;
        }
    }
    assert!(
        mixed > 0,
        "no seed produced a line-granular mix of old and new"
    );
}

#[test]
fn rebooting_from_a_crash_image_starts_clean() {
    let pmr = memory(2 * MIB);
    pmr.write(4096, &[1; 64]);
    pmr.persist(4096, 64, IoCause::Wal).unwrap();
    pmr.write(8192, &[2; 64]);
    let image = pmr.crash_image_all_kept();
    let rebooted = Pmr::memory_from_image(&image, PmrOptions::default()).unwrap();
    assert_eq!(rebooted.dirty_lines_count(), 0);
    let mut line = [0u8; 64];
    rebooted.read(8192, &mut line, IoCause::Wal);
    assert_eq!(line, [2; 64]);
    // After the reboot both images agree, so any further crash keeps everything.
    assert_eq!(rebooted.crash_image_all_lost(), image);
}

#[test]
fn eight_byte_stores_are_atomic_across_a_crash() {
    let pmr = memory(2 * MIB);
    pmr.store_u64(4096 + 8, u64::MAX);
    pmr.persist(4096, 64, IoCause::Wal).unwrap();
    pmr.store_u64(4096 + 8, 0x1111_2222_3333_4444);
    for seed in 0..SEEDS {
        let image = pmr.crash_image(&mut Rng::from_seed(seed));
        let word = u64::from_le_bytes(image[4096 + 8..4096 + 16].try_into().unwrap());
        assert!(
            word == u64::MAX || word == 0x1111_2222_3333_4444,
            "seed {seed}: {word:#x}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Concurrency.

#[test]
fn threads_hammering_distinct_slots_see_untorn_values() {
    const THREADS: u64 = 6;
    const ROUNDS: u64 = 20_000;
    let pmr = memory(2 * MIB);
    // Slots 8 bytes apart: several share a line, so persists overlap on lines.
    let slot = |t: u64| 4096 + t * 8;
    let done = AtomicBool::new(false);
    // The writers start once the reader has made a pass, so that it runs beside them
    // however the threads are scheduled.
    let reading = AtomicBool::new(false);
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut last = [0u64; THREADS as usize];
            let mut loads = 0u64;
            while !done.load(Ordering::Relaxed) {
                for t in 0..THREADS {
                    let value = pmr.load_u64(slot(t));
                    loads += 1;
                    if value == 0 {
                        continue;
                    }
                    assert_eq!(value >> 56, t, "slot {t} holds another thread's value");
                    let round = value & ((1 << 56) - 1);
                    assert!(round >= last[t as usize], "slot {t} went back");
                    last[t as usize] = round;
                }
                reading.store(true, Ordering::Release);
            }
            loads
        });
        let writers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (pmr, reading) = (&pmr, &reading);
                s.spawn(move || {
                    while !reading.load(Ordering::Acquire) {
                        std::thread::yield_now();
                    }
                    for round in 1..=ROUNDS {
                        pmr.store_u64(slot(t), (t << 56) | round);
                        pmr.persist(slot(t), 8, IoCause::Wal).unwrap();
                    }
                })
            })
            .collect();
        // Join every writer before stopping the reader, even if one panicked.
        let joined: Vec<bool> = writers.into_iter().map(|w| w.join().is_ok()).collect();
        let writers_ok = joined.iter().all(|&ok| ok);
        done.store(true, Ordering::Relaxed);
        assert!(reader.join().expect("reader saw a torn or foreign value") > 0);
        assert!(writers_ok, "a writer panicked");
    });
    let flushes = pmr.counters().snapshot().cause(IoCause::Wal);
    assert_eq!(flushes.flush_ops, THREADS * ROUNDS);
    assert_eq!(flushes.write_bytes, THREADS * ROUNDS * LINE_BYTES);
    // Every final value was persisted, so even the worst crash keeps all of them.
    let image = pmr.crash_image_all_lost();
    for t in 0..THREADS {
        let at = slot(t) as usize;
        let word = u64::from_le_bytes(image[at..at + 8].try_into().unwrap());
        assert_eq!(word, (t << 56) | ROUNDS);
        assert_eq!(pmr.load_u64(slot(t)), (t << 56) | ROUNDS);
    }
    assert_eq!(pmr.dirty_lines_count(), 0);
}

#[test]
fn concurrent_writers_of_disjoint_ranges_in_a_file() {
    const THREADS: usize = 4;
    let path = temp_path("concurrent_file");
    let pmr = Pmr::create(&path, 2 * MIB, PmrOptions::default()).unwrap();
    // Entries of 100 bytes packed back to back, as the WAL's CAS tail hands them out:
    // neighbours share lines and words.
    let tail = AtomicU64::new(8192);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (pmr, tail) = (&pmr, &tail);
            s.spawn(move || {
                for _ in 0..50 {
                    let at = tail.fetch_add(100, Ordering::Relaxed);
                    pmr.write(at, &[t as u8 + 1; 100]);
                    pmr.persist(at, 100, IoCause::Wal).unwrap();
                }
            });
        }
    });
    drop(pmr);
    let pmr = Pmr::open(&path, PmrOptions::default()).unwrap();
    let mut entries = vec![0u8; THREADS * 50 * 100];
    pmr.read(8192, &mut entries, IoCause::Wal);
    let mut per_thread = [0usize; THREADS];
    for entry in entries.chunks(100) {
        assert!(
            entry.iter().all(|&b| b == entry[0]),
            "an entry mixes writers"
        );
        per_thread[entry[0] as usize - 1] += 1;
    }
    assert_eq!(per_thread, [50; THREADS]);
}

// ---------------------------------------------------------------------------------------
// Injected latency.

/// A clock that moves `step_ns` every time it is read, so busy-waits end.
#[derive(Debug)]
struct TickingClock {
    now_ns: AtomicU64,
    step_ns: u64,
}

impl Clock for TickingClock {
    fn now_ns(&self) -> u64 {
        self.now_ns.fetch_add(self.step_ns, Ordering::SeqCst) + self.step_ns
    }

    fn wall_ns(&self) -> u64 {
        self.now_ns.load(Ordering::SeqCst)
    }
}

#[test]
fn latency_is_injected_per_persisted_line() {
    let clock = Arc::new(TickingClock {
        now_ns: AtomicU64::new(0),
        step_ns: 100,
    });
    let opts = PmrOptions {
        latency_ns_per_line: 900,
        clock: clock.clone(),
    };
    let pmr = Pmr::memory(2 * MIB, opts).unwrap();
    assert_eq!(pmr.latency_ns_per_line(), 900);
    pmr.write(4096, &[1; 150]);
    let before = clock.wall_ns();
    // 150 bytes from a line start: 3 lines, 2700 ns.
    pmr.persist(4096, 150, IoCause::Wal).unwrap();
    let waited = clock.wall_ns() - before;
    // One reading (+100 ns) sets the deadline 2700 ns later; readings then step 100 ns
    // at a time and the one that reaches the deadline ends the wait.
    assert_eq!(waited, 100 + 2700);

    // Without injected latency the clock is never read.
    let clock = Arc::new(TickingClock {
        now_ns: AtomicU64::new(0),
        step_ns: 100,
    });
    let opts = PmrOptions {
        latency_ns_per_line: 0,
        clock: clock.clone(),
    };
    let pmr = Pmr::memory(2 * MIB, opts).unwrap();
    pmr.persist(0, 64 * 100, IoCause::Wal).unwrap();
    assert_eq!(clock.wall_ns(), 0);
}
