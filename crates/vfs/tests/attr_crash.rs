//! Attribute changes of a file with dirty pages (chmod, utimens, extended attributes),
//! at every crash state:
//! the file is always in a state it had, its mode and times included, and an
//! acknowledged fsync or sync keeps what it covered. A chmod or utimens of a file with
//! dirty pages writes nothing back and logs nothing: its record rides with the
//! write-back of those pages (docs/DESIGN.md §10.7 "Attributes of a file with dirty
//! pages"), so a record claiming data the log lacks (a size past the written blocks) or
//! new attributes beside old data would each be a state the file never had.
//! (crates/crashtest checks mode and data with its generic rules,
//! tests/crash/attrs-of-a-dirty-file.crash; times are this test's.)

use device::recording::{CrashPolicy, RecordingBackend};
use device::Device;
use platform::ManualClock;
use std::sync::Arc;
use testsupport::image::{image_bytes, memory_image, SECTOR_BYTES};
use testsupport::mount::{foreground_config, mount_cached};
use vfs::{CacheConfig, FileSystem, OpenOptions, XattrMode};

/// Mounted with the write-back cache and no flusher: pages reach the log only when an
/// operation writes them back, so a run is deterministic.
fn mount(dev: &Arc<Device>, clock: &Arc<ManualClock>) -> Arc<FileSystem> {
    let cache = CacheConfig {
        flush_interval: None,
        ..CacheConfig::default()
    };
    mount_cached(dev, foreground_config(), cache, clock.clone())
}

/// What a crash may show of a file: mode, mtime, contents, extended attributes.
type FileState = (u32, i64, Vec<u8>, Vec<(Vec<u8>, Vec<u8>)>);

fn state_of(fs: &FileSystem, path: &str) -> FileState {
    let meta = fs.metadata(path).unwrap();
    let mut data = vec![0u8; meta.size as usize];
    let ino = fs.resolve(path, true).unwrap();
    assert_eq!(fs.read_at(ino, 0, &mut data).unwrap(), data.len());
    let xattrs = fs
        .list_xattr(path)
        .unwrap()
        .into_iter()
        .map(|n| {
            let v = fs.get_xattr(path, &n).unwrap();
            (n, v)
        })
        .collect();
    (meta.mode & 0o7777, meta.mtime_ns, data, xattrs)
}

fn write(fs: &Arc<FileSystem>, path: &str, offset: u64, len: usize, seed: u8) {
    let f = OpenOptions::new().write(true).open(fs, path).unwrap();
    let bytes: Vec<u8> = (0..len).map(|i| seed ^ (i % 251) as u8).collect();
    f.write_at(&bytes, offset).unwrap();
}

/// One recorded step: the states of /a and /b after it, and, for a persistence point,
/// the device writes its flushes had made durable and which files it covers.
struct Step {
    a: FileState,
    b: FileState,
    acked: Option<(u64, bool, bool)>,
}

fn run(domains: u32) {
    let clock = Arc::new(ManualClock::new(1_000_000));
    // The setup, unrecorded: two empty files.
    let setup = memory_image(64 << 20, domains);
    let fs = mount(&setup, &clock);
    for p in ["/a", "/b"] {
        OpenOptions::new()
            .write(true)
            .create(true)
            .open(&fs, p)
            .unwrap();
    }
    Arc::into_inner(fs).unwrap().unmount().unwrap();
    let (backend, handle) = RecordingBackend::new(image_bytes(&setup), 512);
    let dev = Arc::new(Device::new(Box::new(backend)));
    let fs = mount(&dev, &clock);
    let mut steps: Vec<Step> = Vec::new();
    let mut note = |fs: &FileSystem, acked: Option<(bool, bool)>| {
        clock.advance_ns(1_000_000_000);
        steps.push(Step {
            a: state_of(fs, "/a"),
            b: state_of(fs, "/b"),
            acked: acked.map(|(a, b)| (handle.durable_writes(), a, b)),
        });
    };
    note(&fs, Some((true, true)));
    // Writes, then attribute changes while the pages are dirty (what tar does).
    write(&fs, "/a", 0, 20_000, 1);
    note(&fs, None);
    fs.set_times("/a", 7_000_000_000, 111_000_000_000).unwrap();
    note(&fs, None);
    fs.set_permissions("/a", 0o600).unwrap();
    note(&fs, None);
    // Extended attributes too (what GlusterFS sets on every file it writes).
    fs.set_xattr("/a", b"user.k", b"one", XattrMode::Either)
        .unwrap();
    note(&fs, None);
    fs.set_xattr("/a", b"user.gone", b"x", XattrMode::Create)
        .unwrap();
    note(&fs, None);
    // Another file's fsync: in one domain it makes the lane durable, which must not
    // hold /a's new attributes without /a's data.
    write(&fs, "/b", 0, 4096, 2);
    fs.resolve("/b", true)
        .and_then(|ino| fs.fsync_ino(ino, false))
        .unwrap();
    note(&fs, Some((false, true)));
    write(&fs, "/a", 20_000, 10_000, 3);
    note(&fs, None);
    fs.set_times("/a", 8_000_000_000, 222_000_000_000).unwrap();
    note(&fs, None);
    fs.set_xattr("/a", b"user.k", b"two", XattrMode::Replace)
        .unwrap();
    note(&fs, None);
    fs.remove_xattr("/a", b"user.gone").unwrap();
    note(&fs, None);
    fs.resolve("/a", true)
        .and_then(|ino| fs.fsync_ino(ino, true))
        .unwrap();
    note(&fs, Some((true, false)));
    // A clean file: logged at once.
    fs.set_times("/a", 9_000_000_000, 333_000_000_000).unwrap();
    note(&fs, None);
    fs.set_permissions("/a", 0o640).unwrap();
    note(&fs, None);
    fs.set_xattr("/a", b"user.k", b"three", XattrMode::Either)
        .unwrap();
    note(&fs, None);
    write(&fs, "/a", 0, 100, 4);
    note(&fs, None);
    fs.set_permissions("/a", 0o604).unwrap();
    note(&fs, None);
    fs.set_xattr("/a", b"user.late", b"4", XattrMode::Create)
        .unwrap();
    note(&fs, None);
    fs.sync().unwrap();
    note(&fs, Some((true, true)));
    Arc::into_inner(fs).unwrap().unmount().unwrap();

    let recording = handle.snapshot();
    let states = recording.crash_states(&CrashPolicy {
        states_max: usize::MAX,
        ..CrashPolicy::with_seed(31)
    });
    assert!(states.states.len() > 20, "{} states", states.states.len());
    for state in &states.states {
        let durable = state.durable_writes();
        // The last acknowledged step covering each file.
        let since = |which: fn(&(u64, bool, bool)) -> bool| {
            steps
                .iter()
                .rposition(|s| s.acked.is_some_and(|a| a.0 <= durable && which(&a)))
                .unwrap_or(0)
        };
        let (from_a, from_b) = (since(|a| a.1), since(|a| a.2));
        let crashed = Arc::new(recording.device(state, SECTOR_BYTES));
        let fs = mount(&crashed, &Arc::new(ManualClock::new(1_000_000)));
        let (a, b) = (state_of(&fs, "/a"), state_of(&fs, "/b"));
        let had = |from: usize, got: &FileState, of: fn(&Step) -> &FileState| {
            steps[from..].iter().any(|s| of(s) == got)
        };
        assert!(
            had(from_a, &a, |s| &s.a),
            "{domains} domains, state {state}: /a is (mode {:o}, mtime {}, {} bytes), a \
             state it never had since step {from_a}",
            a.0,
            a.1,
            a.2.len()
        );
        assert!(
            had(from_b, &b, |s| &s.b),
            "{domains} domains, state {state}: /b has {} bytes, a state it never had \
             since step {from_b}",
            b.2.len()
        );
        drop(fs);
    }
    eprintln!(
        "{domains} domains: {} crash states checked",
        states.states.len()
    );
}

#[test]
fn a_dirty_files_mode_and_times_ride_with_its_data_at_every_crash_state() {
    for domains in [1, 3] {
        run(domains);
    }
}
