//! Crash consistency of the namespace and data with one domain: at every crash state of a
//! recorded workload the tree equals the tree after a prefix of the operations that
//! includes every acknowledged fsync and sync. (Random operations against a model, with
//! several threads, are the simulator's: tests/simulator.)

mod common;

use device::Device;
use engine::log::EngineConfig;
use platform::Rng;
use std::collections::BTreeMap;
use std::sync::Arc;
use testsupport::image::{image_bytes, memory_image, SECTOR_BYTES};
use testsupport::mount::mount_cached;
use vfs::{FileSystem, Kind, OpenOptions, RenameMode};

/// `dev` mounted with small memtables, no background jobs (a deterministic device write
/// order) and a write-through page cache: every write reaches the log when made, so with
/// one domain the whole history is ordered. (With write-back, unsynced data may follow
/// later operations of other files, docs/SEMANTICS.md §2; crates/crashtest checks that
/// each file is still in a state it had.)
fn mount(dev: &Arc<Device>) -> Arc<FileSystem> {
    let mut config = EngineConfig::default();
    config.metadb.background = false;
    config.metadb.memtable_bytes = 256 << 10;
    let clock = Arc::new(platform::ManualClock::new(1_000_000));
    mount_cached(dev, config, vfs::CacheConfig::write_through(), clock)
}

/// The whole tree as the file system has it.
fn snapshot(fs: &FileSystem, dir: &str, out: &mut BTreeMap<String, (Kind, Vec<u8>)>) {
    for e in fs.read_dir(dir).unwrap() {
        let name = String::from_utf8(e.name).unwrap();
        let path = if dir == "/" {
            format!("/{name}")
        } else {
            format!("{dir}/{name}")
        };
        let meta = fs.symlink_metadata(&path).unwrap();
        assert_eq!(meta.kind, e.kind, "{path}: entry kind");
        match e.kind {
            Kind::Dir => {
                out.insert(path.clone(), (Kind::Dir, Vec::new()));
                snapshot(fs, &path, out);
            }
            Kind::Symlink => {
                out.insert(path.clone(), (Kind::Symlink, fs.read_link(&path).unwrap()));
            }
            Kind::File => {
                let mut buf = vec![0u8; meta.size as usize];
                let ino = fs.resolve(&path, false).unwrap();
                assert_eq!(fs.read_at(ino, 0, &mut buf).unwrap(), buf.len());
                // st_blocks is exact: 8 sectors per mapped block, no block past the end.
                let mapped = common::mapped_block_list(fs, ino.0);
                assert_eq!(meta.blocks, 8 * mapped.len() as u64, "{path}: st_blocks");
                assert!(
                    mapped.iter().all(|&b| b < meta.size.div_ceil(4096)),
                    "{path}: a block mapped past the end"
                );
                out.insert(path, (Kind::File, buf));
            }
            k => {
                // A special file: its kind and device number are all it holds.
                assert_eq!(meta.size, 0, "{path}");
                out.insert(path, (k, meta.rdev.to_le_bytes().to_vec()));
            }
        }
    }
}

/// The tree as a comparable value: path -> (kind, contents or link target).
type Tree = BTreeMap<String, (Kind, Vec<u8>)>;

fn tree_of(fs: &FileSystem) -> Tree {
    let mut t = Tree::new();
    snapshot(fs, "/", &mut t);
    t
}

/// Crash consistency of the namespace and data, one domain (so every operation is in one
/// lane and a crash keeps a prefix of them): creates, writes, renames, unlinks, mkdirs,
/// mknods of a device node and a FIFO,
/// fsyncs (of files and directories) and syncs on the recording device; at every crash
/// state (none skipped) the mount
/// succeeds and the tree equals the tree after some prefix of the operations that
/// includes every operation an fsync or sync acknowledged.
#[test]
fn crash_states_recover_a_prefix_with_every_fsynced_operation() {
    use device::recording::{CrashPolicy, RecordingBackend};
    // One domain: every operation in one lane.
    let raw = image_bytes(&memory_image(128 << 20, 1));
    let (backend, handle) = RecordingBackend::new(raw, 512);
    let dev = Arc::new(Device::new(Box::new(backend)));
    let fs = mount(&dev);
    let mut rng = Rng::from_seed(77);
    let mut trees = vec![tree_of(&fs)];
    let mut acked: Vec<(bool, u64)> = Vec::new();
    let files = ["/f1", "/f2", "/d/f3", "/d/f4"];
    fs.create_dir("/d", 0o755).unwrap();
    trees.push(tree_of(&fs));
    acked.push((false, handle.write_count()));
    // A device node and a FIFO, outside the random operations' names.
    fs.make_node("/d/null", libc::S_IFCHR | 0o666, libc::makedev(1, 3))
        .unwrap();
    trees.push(tree_of(&fs));
    acked.push((false, handle.write_count()));
    fs.make_node("/fifo", libc::S_IFIFO | 0o600, 0).unwrap();
    trees.push(tree_of(&fs));
    acked.push((false, handle.write_count()));
    for step in 0..45 {
        let path = files[rng.below(files.len() as u64) as usize];
        let mut ack = false;
        match rng.below(8) {
            0..=3 => {
                let exists = fs.metadata(path).is_ok();
                let f = OpenOptions::new()
                    .write(true)
                    .create(true)
                    .open(&fs, path)
                    .unwrap();
                if !exists {
                    // The create is an operation of its own (its own batch).
                    trees.push(tree_of(&fs));
                    acked.push((false, handle.write_count()));
                }
                let len = 1 + rng.below(6000) as usize;
                f.write_at(&vec![step as u8 + 1; len], rng.below(5000))
                    .unwrap();
                if rng.chance(1, 2) {
                    f.sync_all().unwrap();
                    ack = true;
                }
            }
            4 => {
                let to = files[rng.below(files.len() as u64) as usize];
                let _ = fs.rename_path(path, to, RenameMode::Replace);
            }
            5 => {
                let _ = fs.remove_file(path);
            }
            6 => {
                if let Ok(f) = OpenOptions::new().write(true).open(&fs, path) {
                    f.set_len(rng.below(7000)).unwrap();
                }
            }
            _ => {
                if rng.chance(1, 2) {
                    fs.sync().unwrap();
                } else {
                    // fsync of a directory: with one domain it covers every operation so far.
                    let dir = fs
                        .resolve(["/", "/d"][rng.below(2) as usize], true)
                        .unwrap();
                    fs.fsync_ino(dir, false).unwrap();
                }
                ack = true;
            }
        }
        trees.push(tree_of(&fs));
        acked.push((ack, handle.write_count()));
    }
    Arc::into_inner(fs).unwrap().unmount().unwrap();
    let recording = handle.snapshot();
    let states = recording.crash_states(&CrashPolicy {
        states_max: usize::MAX,
        ..CrashPolicy::with_seed(77)
    });
    for state in &states.states {
        let durable = state.durable_writes();
        let required = acked
            .iter()
            .rposition(|(ack, writes)| *ack && *writes <= durable)
            .map_or(0, |i| i + 1);
        let crashed = Arc::new(recording.device(state, SECTOR_BYTES));
        let fs = mount(&crashed);
        let got = tree_of(&fs);
        assert!(
            (required..trees.len()).any(|k| trees[k] == got),
            "state {state}: the recovered tree {:?} equals no tree from operation {required} on (first trees: {:?})", got.keys().collect::<Vec<_>>(), trees.iter().take(3).map(|t| t.keys().cloned().collect::<Vec<_>>()).collect::<Vec<_>>()
        );
    }
    eprintln!(
        "VFS crash states: {} checked ({} skipped)",
        states.states.len(),
        states.skipped_count
    );
}
