//! A sync of many small files, cut at every crash state (docs/DESIGN.md §10.7 and §9.4
//! "Many files at once"): the sync writes each domain's small files with one engine
//! call, one reservation and one device write per run for the group but a batch of its
//! own per file. So at every crash state each file is as the setup left it (old
//! contents, mode and attributes) or whole (all its new contents with its new mode and
//! attributes), never part of its write-back, another file's blocks or bytes never
//! written; and every file is new once the sync's flushes are in the state. A larger
//! file (more than one batch, written back alone beside the groups) is some prefix of
//! its write-backs. 1 and 3 domains on the recording device.

use device::recording::{CrashPolicy, RecordingBackend};
use device::Device;
use platform::{IoCause, ManualClock};
use std::sync::Arc;
use testsupport::image::{from_bytes, image_bytes, memory_image, SECTOR_BYTES};
use testsupport::mount::{foreground_config, mount_cached};
use vfs::{CacheConfig, FileSystem, OpenOptions, XattrMode};

/// Small files, in two directories.
const FILES: usize = 48;
/// The larger file's new size: more than one write-back batch (1 MiB).
const BIG_BYTES: usize = 1_300_000;

/// Mounted with the write-back cache and no flusher: pages reach the log only at the
/// sync, so a run is deterministic. MetaDB's memtable holds the whole workload, so no
/// memtable flush makes the data durable before the sync's own device flush: the
/// batches' WAL records and their data reach the device between the same two flushes.
fn mount(dev: &Arc<Device>) -> Arc<FileSystem> {
    let cache = CacheConfig {
        flush_interval: None,
        ..CacheConfig::default()
    };
    let clock = Arc::new(ManualClock::new(1_000_000));
    let mut config = foreground_config();
    config.metadb.memtable_bytes = 8 << 20;
    mount_cached(dev, config, cache, clock)
}

fn path(i: usize) -> String {
    format!("/{}/f{i:02}", if i % 2 == 0 { "d" } else { "e" })
}

/// What a crash may show of a file: mode, contents, extended attributes.
type FileState = (u32, Vec<u8>, Vec<(Vec<u8>, Vec<u8>)>);

fn state_of(fs: &FileSystem, path: &str) -> FileState {
    let meta = fs.metadata(path).unwrap();
    let mut data = vec![0u8; meta.size as usize];
    let ino = fs.resolve(path, true).unwrap();
    let read = fs
        .read_at(ino, 0, &mut data)
        .unwrap_or_else(|e| panic!("reading {path}: {e}"));
    assert_eq!(read, data.len(), "{path}");
    let xattrs = fs
        .list_xattr(path)
        .unwrap()
        .into_iter()
        .map(|n| {
            let v = fs.get_xattr(path, &n).unwrap();
            (n, v)
        })
        .collect();
    (meta.mode & 0o7777, data, xattrs)
}

/// A file's state in a line: mode, size, a digest of the contents, attributes.
fn describe(f: &FileState) -> String {
    let digest = f.1.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    let names: Vec<String> =
        f.2.iter()
            .map(|(n, v)| {
                format!(
                    "{}={}",
                    String::from_utf8_lossy(n),
                    String::from_utf8_lossy(v)
                )
            })
            .collect();
    format!(
        "mode {:o}, {} bytes (digest {digest:x}), attributes {names:?}",
        f.0,
        f.1.len()
    )
}

/// `len` bytes of a pattern of `seed` (different for every file and round).
fn bytes(len: usize, seed: usize) -> Vec<u8> {
    (0..len).map(|i| (seed * 37 + i % 251) as u8).collect()
}

fn write(fs: &Arc<FileSystem>, path: &str, offset: u64, data: &[u8]) {
    let f = OpenOptions::new().write(true).open(fs, path).unwrap();
    f.write_at(data, offset).unwrap();
}

/// The unrecorded setup: every file created, every other one with old contents, and
/// the larger file with 300 KB.
fn set_up(domains: u32) -> Vec<u8> {
    let setup = memory_image(96 << 20, domains);
    let fs = mount(&setup);
    fs.create_dir("/d", 0o755).unwrap();
    fs.create_dir("/e", 0o755).unwrap();
    for i in 0..FILES {
        OpenOptions::new()
            .write(true)
            .create(true)
            .open(&fs, &path(i))
            .unwrap();
        if i % 2 == 0 {
            write(&fs, &path(i), 0, &bytes(2_000 + 900 * (i % 7), i));
        }
    }
    OpenOptions::new()
        .write(true)
        .create(true)
        .open(&fs, "/big")
        .unwrap();
    write(&fs, "/big", 0, &bytes(300_000, 99));
    Arc::into_inner(fs).unwrap().unmount().unwrap();
    image_bytes(&setup)
}

/// The recorded changes: new contents for every file (1-5 blocks, some in two writes),
/// new modes and attributes for some (which wait for the write-back, the pages being
/// dirty), the larger file grown.
fn change(fs: &Arc<FileSystem>) {
    for i in 0..FILES {
        let p = path(i);
        write(fs, &p, 0, &bytes(500 + 4096 * (i % 4) + 77 * i, 100 + i));
        if i % 3 == 0 {
            write(fs, &p, 9_000, &bytes(3_000, 200 + i));
        }
        if i % 4 == 1 {
            fs.set_permissions(&p, 0o600).unwrap();
        }
        if i % 5 == 2 {
            fs.set_xattr(&p, b"user.k", format!("v{i}").as_bytes(), XattrMode::Either)
                .unwrap();
        }
    }
    write(fs, "/big", 0, &bytes(BIG_BYTES, 300));
}

/// The sync, on `dev`.
fn sync(fs: &FileSystem, dev: &Device) {
    let before = dev.counters().snapshot();
    fs.sync().unwrap();
    let io = dev.counters().snapshot().since(&before);
    let writes = io.cause(IoCause::UserData).write_ops;
    // One device write per domain's group (two where a head's segment fills) and the
    // larger file's two batches, not one per file.
    assert!(
        writes <= 2 * u64::from(fs.engine().geometry().domain_count) + 4,
        "the sync wrote the small files one by one: {writes} data writes"
    );
}

fn run(domains: u32) {
    let image = set_up(domains);
    let (old, old_big) = {
        let fs = mount(&from_bytes(image.clone()));
        let old: Vec<FileState> = (0..FILES).map(|i| state_of(&fs, &path(i))).collect();
        (old, state_of(&fs, "/big").1)
    };
    let (backend, handle) = RecordingBackend::new(image, 512);
    let dev = Arc::new(Device::new(Box::new(backend)));
    let fs = mount(&dev);
    change(&fs);
    // The files as the changes left them, before anything was written back.
    let new: Vec<FileState> = (0..FILES).map(|i| state_of(&fs, &path(i))).collect();
    let big = state_of(&fs, "/big").1;
    sync(&fs, &dev);
    let synced = handle.durable_writes();
    for (i, file) in new.iter().enumerate() {
        let got = state_of(&fs, &path(i));
        assert!(
            &got == file,
            "{} after the sync: {}, was {}",
            path(i),
            describe(&got),
            describe(file)
        );
    }
    Arc::into_inner(fs).unwrap().unmount().unwrap();

    let recording = handle.snapshot();
    let states = recording.crash_states(&CrashPolicy {
        states_max: usize::MAX,
        ..CrashPolicy::with_seed(17)
    });
    assert_eq!(states.skipped_count, 0);
    let (mut whole, mut partly) = (0, 0);
    for state in &states.states {
        let fs = mount(&Arc::new(recording.device(state, SECTOR_BYTES)));
        let acked = state.durable_writes() >= synced;
        let mut news = 0;
        for i in 0..FILES {
            let got = state_of(&fs, &path(i));
            let is_new = got == new[i];
            assert!(
                is_new || (!acked && got == old[i]),
                "{domains} domains, state {state}: {} is neither {}new: {}",
                path(i),
                if acked { "" } else { "old nor " },
                describe(&got),
            );
            news += usize::from(is_new);
        }
        // The larger file: old, or a prefix of its new contents (its first batch).
        let got = state_of(&fs, "/big").1;
        assert!(
            (got == old_big && !acked) || got == big || (!acked && big.starts_with(&got)),
            "{domains} domains, state {state}: /big ({} bytes) is not one of its write-backs",
            got.len()
        );
        if news == FILES {
            whole += 1;
        } else if news > 0 {
            partly += 1;
        }
    }
    // The states cover a sync cut short: some files new and others old.
    assert!(
        partly > 0,
        "no state with the sync cut short ({whole} whole)"
    );
    eprintln!(
        "{domains} domains: {} crash states checked ({whole} with every file new, {partly} \
         with some)",
        states.states.len()
    );
}

#[test]
fn a_sync_of_many_small_files_leaves_each_old_or_whole_at_every_crash_state() {
    for domains in [1, 3] {
        run(domains);
    }
}
