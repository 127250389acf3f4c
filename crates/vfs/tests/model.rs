//! The VFS against an in-memory model: random creates, writes (also unaligned and
//! sparse), reads, truncates, mkdirs, unlinks, rmdirs, renames (replacing, across
//! directories, NOREPLACE, EXCHANGE), hard links, symlinks, attribute changes and
//! remounts over a small tree. After every operation the result (value or errno)
//! matches the model; after every remount the whole tree does, and the engine's live
//! blocks never exceed what the files can hold.

use device::memory::MemoryBackend;
use device::Device;
use engine::log::{EngineConfig, EngineEnv};
use engine::mkfs::{format, MkfsOptions};
use engine::progress::NoProgress;
use format::constants::MIB;
use platform::{ManualClock, Rng};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use vfs::{FileSystem, Kind, OpenOptions, RenameMode};

#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    File(usize),
    Dir,
    /// Target and identity (hard links of a symlink share it).
    Symlink(String, usize),
}

/// Paths -> nodes; files point into `data` (hard links share an index).
#[derive(Debug, Clone, Default)]
struct Model {
    tree: BTreeMap<String, Node>,
    data: Vec<Vec<u8>>,
}

impl Model {
    fn parent(path: &str) -> String {
        match path.rfind('/') {
            Some(0) | None => "/".into(),
            Some(i) => path[..i].into(),
        }
    }

    fn is_dir(&self, path: &str) -> bool {
        path == "/" || self.tree.get(path) == Some(&Node::Dir)
    }

    fn children(&self, dir: &str) -> Vec<String> {
        self.tree
            .keys()
            .filter(|p| Model::parent(p) == dir && p.as_str() != dir)
            .cloned()
            .collect()
    }

    fn links(&self, file: usize) -> u32 {
        self.tree
            .values()
            .filter(|n| **n == Node::File(file))
            .count() as u32
    }
}

const NAMES: [&str; 5] = ["a", "b", "c", "dd", "e"];

fn random_path(rng: &mut Rng, model: &Model) -> String {
    let dirs: Vec<String> = std::iter::once("/".to_string())
        .chain(
            model
                .tree
                .iter()
                .filter(|(_, n)| **n == Node::Dir)
                .map(|(p, _)| p.clone()),
        )
        .collect();
    let dir = &dirs[rng.below(dirs.len() as u64) as usize];
    let name = NAMES[rng.below(NAMES.len() as u64) as usize];
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

fn image() -> Arc<Device> {
    let dev = Device::new(Box::new(MemoryBackend::new(128 * MIB, 512)));
    let opts = MkfsOptions {
        domain_count: Some(3),
        fs_uuid: [1; 16],
        created_unix_ns: 1,
        force: false,
    };
    format(&dev, None, &opts, &NoProgress).unwrap();
    Arc::new(dev)
}

fn mount(dev: &Arc<Device>) -> Arc<FileSystem> {
    mount_with(dev, vfs::CacheConfig::default())
}

fn mount_with(dev: &Arc<Device>, cache: vfs::CacheConfig) -> Arc<FileSystem> {
    let env = EngineEnv {
        device: dev.clone(),
        pmr: None,
        clock: Arc::new(ManualClock::new(1_000_000)),
    };
    let mut config = EngineConfig::default();
    config.metadb.background = false;
    config.metadb.memtable_bytes = 256 << 10;
    Arc::new(FileSystem::mount_with(env, config, cache).unwrap())
}

fn errno<T>(r: Result<T, vfs::VfsError>) -> Result<T, i32> {
    r.map_err(|e| e.errno())
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
                // Blocks the engine maps, and blocks of dirty pages not written back.
                let mut mapped: BTreeSet<u64> = fs.dirty_blocks(ino).unwrap().into_iter().collect();
                mapped.extend(
                    fs.engine()
                        .metadb()
                        .prefix(&engine::log::keys::mapping_prefix(ino), None)
                        .unwrap()
                        .map(|item| {
                            engine::log::keys::parse_mapping_key(&item.unwrap().0)
                                .unwrap()
                                .1
                                 .0
                        }),
                );
                assert_eq!(meta.blocks, 8 * mapped.len() as u64, "{path}: st_blocks");
                assert!(
                    mapped.iter().all(|&b| b < meta.size.div_ceil(4096)),
                    "{path}: a block mapped past the end"
                );
                out.insert(path, (Kind::File, buf));
            }
        }
    }
}

fn check_tree(fs: &FileSystem, model: &Model, seed: u64, step: usize) {
    let mut got = BTreeMap::new();
    snapshot(fs, "/", &mut got);
    let want: BTreeMap<String, (Kind, Vec<u8>)> = model
        .tree
        .iter()
        .map(|(p, n)| {
            let v = match n {
                Node::Dir => (Kind::Dir, Vec::new()),
                Node::Symlink(t, _) => (Kind::Symlink, t.as_bytes().to_vec()),
                Node::File(i) => (Kind::File, model.data[*i].clone()),
            };
            (p.clone(), v)
        })
        .collect();
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>(),
        "seed {seed} step {step}: paths"
    );
    for (p, w) in &want {
        assert!(got[p] == *w, "seed {seed} step {step}: {p} differs");
        if let Node::File(i) = model.tree[p] {
            assert_eq!(
                fs.metadata(p).unwrap().nlink,
                model.links(i),
                "seed {seed} step {step}: {p} links"
            );
        }
    }
    for (p, n) in &model.tree {
        if *n == Node::Dir {
            let subdirs = model.children(p).iter().filter(|c| model.is_dir(c)).count() as u32;
            assert_eq!(
                fs.metadata(p).unwrap().nlink,
                2 + subdirs,
                "seed {seed} step {step}: {p} nlink"
            );
        }
    }
}

fn run(seed: u64, steps: usize) {
    let dev = image();
    let mut fs = mount(&dev);
    let mut rng = Rng::from_seed(seed);
    let mut m = Model::default();
    for step in 0..steps {
        let path = random_path(&mut rng, &m);
        let node = m.tree.get(&path).cloned();
        let parent_ok = m.is_dir(&Model::parent(&path));
        assert!(parent_ok);
        let op = rng.below(16);
        if std::env::var_os("VFS_MODEL_TRACE").is_some() {
            eprintln!("step {step}: op {op} on {path}");
        }
        match op {
            0 | 1 => {
                // create_new
                let r = errno(
                    OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .open(&fs, &path),
                );
                match node {
                    Some(_) => assert_eq!(r.err(), Some(libc::EEXIST), "seed {seed} step {step}"),
                    None => {
                        r.unwrap();
                        m.data.push(Vec::new());
                        m.tree.insert(path, Node::File(m.data.len() - 1));
                    }
                }
            }
            2..=4 => {
                let offset = rng.below(3 * 4096 + 100);
                let len = 1 + rng.below(9000) as usize;
                let byte = 1 + rng.below(255) as u8;
                let r = OpenOptions::new()
                    .write(true)
                    .open(&fs, &path)
                    .and_then(|f| f.write_at(&vec![byte; len], offset));
                if let Err(e) = &r {
                    if e.errno() == libc::ENOSPC {
                        panic!(
                            "seed {seed} step {step}: {e}; {:?}; {:?}",
                            fs.engine().space_report(),
                            fs.engine().metadb().stats()
                        );
                    }
                }
                let r = errno(r);
                match node {
                    Some(Node::File(i)) => {
                        assert_eq!(r, Ok(len), "seed {seed} step {step}");
                        let d = &mut m.data[i];
                        let end = offset as usize + len;
                        if d.len() < end {
                            d.resize(end, 0);
                        }
                        d[offset as usize..end].fill(byte);
                    }
                    Some(Node::Dir) => assert_eq!(r.err(), Some(libc::EISDIR)),
                    Some(Node::Symlink(..)) | None => assert!(r.is_err()),
                }
            }
            5 => {
                let size = rng.below(4 * 4096 + 50);
                let r = errno(OpenOptions::new().write(true).open(&fs, &path))
                    .and_then(|f| errno(f.set_len(size)));
                if let Some(Node::File(i)) = node {
                    r.unwrap();
                    m.data[i].resize(size as usize, 0);
                } else {
                    assert!(r.is_err());
                }
            }
            6 => {
                let r = errno(fs.create_dir(&path, 0o755));
                match node {
                    Some(_) => assert_eq!(r.err(), Some(libc::EEXIST)),
                    None => {
                        r.unwrap();
                        m.tree.insert(path, Node::Dir);
                    }
                }
            }
            7 => {
                let r = errno(fs.remove_file(&path));
                match node {
                    Some(Node::Dir) => assert_eq!(r.err(), Some(libc::EISDIR)),
                    Some(_) => {
                        r.unwrap();
                        m.tree.remove(&path);
                    }
                    None => assert_eq!(r.err(), Some(libc::ENOENT)),
                }
            }
            8 => {
                let r = errno(fs.remove_dir(&path));
                match node {
                    Some(Node::Dir) if m.children(&path).is_empty() => {
                        r.unwrap();
                        m.tree.remove(&path);
                    }
                    Some(Node::Dir) => assert_eq!(r.err(), Some(libc::ENOTEMPTY)),
                    Some(_) => assert_eq!(r.err(), Some(libc::ENOTDIR)),
                    None => assert_eq!(r.err(), Some(libc::ENOENT)),
                }
            }
            9 | 10 => {
                let to = random_path(&mut rng, &m);
                let mode = match rng.below(6) {
                    0 => RenameMode::NoReplace,
                    1 => RenameMode::Exchange,
                    _ => RenameMode::Replace,
                };
                let r = errno(fs.rename_path(&path, &to, mode));
                if std::env::var_os("VFS_MODEL_TRACE").is_some() {
                    eprintln!("  rename -> {to} {mode:?}: {r:?}; model {:?} -> {:?}; children of to: {:?}", m.tree.get(&path), m.tree.get(&to), m.children(&to));
                }
                let expect = model_rename(&m, &path, &to, mode);
                match expect {
                    Ok(next) => {
                        assert_eq!(
                            r,
                            Ok(()),
                            "seed {seed} step {step}: rename {path} -> {to} {mode:?}"
                        );
                        m = next;
                    }
                    Err(e) => assert_eq!(
                        r.err(),
                        Some(e),
                        "seed {seed} step {step}: rename {path} -> {to} {mode:?}"
                    ),
                }
            }
            11 => {
                let to = random_path(&mut rng, &m);
                let r = errno(fs.hard_link(&path, &to));
                match (&node, m.tree.get(&to)) {
                    (None, _) => assert_eq!(r.err(), Some(libc::ENOENT)),
                    (Some(Node::Dir), _) => assert_eq!(r.err(), Some(libc::EPERM)),
                    (Some(_), Some(_)) => assert_eq!(r.err(), Some(libc::EEXIST)),
                    (Some(n), None) => {
                        r.unwrap();
                        m.tree.insert(to, n.clone());
                    }
                }
            }
            12 => {
                let target = format!("/t{}", rng.below(4));
                let r = errno(fs.symlink(&target, &path));
                match node {
                    Some(_) => assert_eq!(r.err(), Some(libc::EEXIST)),
                    None => {
                        r.unwrap();
                        m.data.push(Vec::new());
                        m.tree.insert(path, Node::Symlink(target, m.data.len() - 1));
                    }
                }
            }
            13 => {
                if let Some(Node::File(i)) = node {
                    let f = OpenOptions::new().read(true).open(&fs, &path).unwrap();
                    let offset = rng.below(4 * 4096);
                    let mut buf = vec![0u8; 1 + rng.below(10_000) as usize];
                    let n = f.read_at(&mut buf, offset).unwrap();
                    let d = &m.data[i];
                    let want = d.len().saturating_sub(offset as usize).min(buf.len());
                    assert_eq!(n, want, "seed {seed} step {step}: read length");
                    if n > 0 {
                        assert_eq!(&buf[..n], &d[offset as usize..offset as usize + n]);
                    }
                    if rng.chance(1, 2) {
                        f.sync_all().unwrap();
                    }
                }
            }
            14 => {
                if node.is_some() {
                    fs.set_permissions(&path, 0o600).ok();
                }
            }
            _ => {
                if rng.chance(1, 3) {
                    check_tree(&fs, &m, seed, step);
                    Arc::into_inner(fs).unwrap().unmount().unwrap();
                    fs = mount(&dev);
                    check_tree(&fs, &m, seed, step);
                } else {
                    fs.sync().unwrap();
                }
            }
        }
        if std::env::var_os("VFS_MODEL_TRACE").is_some() {
            check_tree(&fs, &m, seed, step);
        }
    }
    check_tree(&fs, &m, seed, steps);
    let live: u64 = fs.engine().valid_blocks().iter().sum();
    let bound: u64 = m.data.iter().map(|d| (d.len() as u64).div_ceil(4096)).sum();
    assert!(
        live <= bound,
        "seed {seed}: {live} live blocks, files hold at most {bound}"
    );
    Arc::into_inner(fs).unwrap().unmount().unwrap();
}

/// What a rename does to the model, or the errno it must fail with.
fn model_rename(m: &Model, from: &str, to: &str, mode: RenameMode) -> Result<Model, i32> {
    let src = m.tree.get(from).cloned().ok_or(libc::ENOENT)?;
    let dst = m.tree.get(to).cloned();
    let inside = |a: &str, b: &str| b == a || b.starts_with(&format!("{a}/"));
    if from == to {
        return match (mode, &dst) {
            (RenameMode::NoReplace, Some(_)) => Err(libc::EEXIST),
            _ => Ok(m.clone()),
        };
    }
    let mut next = m.clone();
    let move_subtree = |next: &mut Model, a: &str, b: &str, base: &Model| {
        let keys: Vec<String> = base.tree.keys().filter(|p| inside(a, p)).cloned().collect();
        for k in &keys {
            next.tree.remove(k);
        }
        for k in keys {
            let rest = &k[a.len()..];
            next.tree
                .insert(format!("{b}{rest}"), base.tree[&k].clone());
        }
    };
    match mode {
        RenameMode::NoReplace if dst.is_some() => return Err(libc::EEXIST),
        RenameMode::Exchange => {
            let d = dst.ok_or(libc::ENOENT)?;
            if (src == Node::Dir && inside(from, to)) || (d == Node::Dir && inside(to, from)) {
                return Err(libc::EINVAL);
            }
            let mut tmp = m.clone();
            for k in m.tree.keys().filter(|p| inside(from, p) || inside(to, p)) {
                tmp.tree.remove(k);
            }
            let mut out = tmp;
            for (k, v) in m.tree.iter().filter(|(p, _)| inside(from, p)) {
                out.tree
                    .insert(format!("{to}{}", &k[from.len()..]), v.clone());
            }
            for (k, v) in m.tree.iter().filter(|(p, _)| inside(to, p)) {
                out.tree
                    .insert(format!("{from}{}", &k[to.len()..]), v.clone());
            }
            return Ok(out);
        }
        _ => {}
    }
    if src == Node::Dir && inside(from, to) {
        return Err(libc::EINVAL);
    }
    if let Some(d) = &dst {
        if src == *d && !matches!(src, Node::Dir) {
            return Ok(m.clone()); // two links of one file: nothing happens
        }
        match (src == Node::Dir, *d == Node::Dir) {
            (false, true) => return Err(libc::EISDIR),
            (true, false) => return Err(libc::ENOTDIR),
            (true, true) if !m.children(to).is_empty() => return Err(libc::ENOTEMPTY),
            _ => {}
        }
        next.tree.remove(to);
    }
    let base = next.clone();
    move_subtree(&mut next, from, to, &base);
    Ok(next)
}

#[test]
fn random_operations_match_the_model() {
    // VFS_MODEL_SEEDS=N runs more (the long mode), VFS_MODEL_FIRST=S starts at seed S (to
    // replay a failure); VFS_MODEL_TRACE=1 checks the whole tree after every step and
    // prints each operation.
    let seeds: u64 = std::env::var("VFS_MODEL_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12);
    let first: u64 = std::env::var("VFS_MODEL_FIRST")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    for seed in first..first + seeds {
        eprintln!("seed {seed}");
        run(seed, 1500);
    }
}

#[test]
fn exchange_of_a_file_and_a_directory_moves_one_link_between_parents() {
    for src_is_dir in [false, true] {
        let dev = image();
        let fs = mount(&dev);
        fs.create_dir("/a", 0o755).unwrap();
        fs.create_dir("/a/dd", 0o755).unwrap();
        let (file, dir) = if src_is_dir {
            ("/a/dd/x", "/a/b")
        } else {
            ("/a/b", "/a/dd/x")
        };
        fs.create_dir(dir, 0o755).unwrap();
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&fs, file)
            .unwrap();
        fs.rename_path("/a/b", "/a/dd/x", RenameMode::Exchange)
            .unwrap();
        let a = fs.metadata("/a").unwrap().nlink;
        let dd = fs.metadata("/a/dd").unwrap().nlink;
        let want = if src_is_dir { (3, 3) } else { (4, 2) };
        assert_eq!((a, dd), want, "src is a directory: {src_is_dir}");
        Arc::into_inner(fs).unwrap().unmount().unwrap();
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
/// fsyncs (of files and directories) and syncs on the recording device; at every crash
/// state (none skipped) the mount
/// succeeds and the tree equals the tree after some prefix of the operations that
/// includes every operation an fsync or sync acknowledged.
#[test]
fn crash_states_recover_a_prefix_with_every_fsynced_operation() {
    use device::recording::{CrashPolicy, RecordingBackend};
    let formatted = image();
    let mut raw = vec![0u8; 128 * MIB as usize];
    let mut at = 0;
    while at < raw.len() {
        let len = (8 * MIB as usize).min(raw.len() - at);
        let buf = formatted
            .read(
                at as u64,
                device::AlignedBuf::zeroed(len),
                device::IoCause::Tool,
            )
            .unwrap();
        raw[at..at + len].copy_from_slice(&buf);
        at += len;
    }
    // One domain: reformat the copy with a single domain.
    let one = Device::new(Box::new(MemoryBackend::from_image(raw, 512)));
    let opts = MkfsOptions {
        domain_count: Some(1),
        fs_uuid: [2; 16],
        created_unix_ns: 1,
        force: true,
    };
    format(&one, None, &opts, &NoProgress).unwrap();
    let mut raw = vec![0u8; 128 * MIB as usize];
    let buf = one
        .read(
            0,
            device::AlignedBuf::zeroed(raw.len()),
            device::IoCause::Tool,
        )
        .unwrap();
    raw.copy_from_slice(&buf);
    let (backend, handle) = RecordingBackend::new(raw, 512);
    let dev = Arc::new(Device::new(Box::new(backend)));
    // Write-through: every write reaches the log when made, so with one domain the
    // whole history is ordered (with write-back, unsynced data may follow later
    // operations of other files: docs/SEMANTICS.md §2; crates/crashtest checks that).
    let fs = mount_with(&dev, vfs::CacheConfig::write_through());
    let mut rng = Rng::from_seed(77);
    let mut trees = vec![tree_of(&fs)];
    let mut acked: Vec<(bool, u64)> = Vec::new();
    let files = ["/f1", "/f2", "/d/f3", "/d/f4"];
    fs.create_dir("/d", 0o755).unwrap();
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
        let crashed = Arc::new(Device::new(Box::new(MemoryBackend::from_image(
            recording.image(state),
            512,
        ))));
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
