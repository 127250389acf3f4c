//! The damage campaign (docs/TESTING.md §1b): a small image with a known tree, cleanly
//! unmounted; then, for every block that holds metadata (superblocks, checkpoint slots,
//! manifest, WAL, summaries, MetaDB table blocks) and a sample of data blocks, one copy
//! with that block replaced by random bytes and one with zeros. Each copy must mount or
//! be refused with a message, never panic, never return wrong bytes (every read is right
//! or fails with EIO/EUCLEAN; names and sizes right or an error), and fsck must detect
//! every case that changed what a read returns.
//!
//! `AUGEFS_DAMAGE_LONG=1` damages every block of the image's metadata regions and every
//! data block, then 40 combinations of 8 random blocks in the first 35% of the image (the
//! report's 64 random blocks in the first 350 MiB of 1 GiB, scaled to 96 MiB).
//! `AUGEFS_DAMAGE_SEED=S` changes the random bytes.

use device::cow::CowBackend;
use device::Device;
use engine::space::Owner;
use format::constants::BLOCK_SIZE_BYTES;
use format::SegmentNo;
use fsck::Mode;
use platform::Rng;
use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use testsupport::bytes::bytes;
use testsupport::check::try_fsck;
use testsupport::image::{from_bytes, image_bytes, memory_image, SECTOR_BYTES};
use testsupport::mount::{foreground_config, manual_clock, try_mount, unmount};
use vfs::{CacheConfig, FileSystem, Kind, OpenOptions, XattrMode};

const IMAGE_BYTES: u64 = 96 << 20;
const BLOCK: usize = BLOCK_SIZE_BYTES as usize;
const EUCLEAN: i32 = 117;

/// What the tree holds after the workload.
#[derive(Debug, Clone, PartialEq)]
enum Obj {
    Dir(Vec<Vec<u8>>),
    File(Vec<u8>),
    Link(Vec<u8>),
}

fn mount(dev: &Arc<Device>) -> Result<FileSystem, vfs::VfsError> {
    try_mount(
        dev,
        foreground_config(),
        CacheConfig::default(),
        manual_clock(),
    )
}

/// Files of several sizes written with large buffered writes, directories, a symlink,
/// hard links, xattrs, some files fsync'd, a clean unmount. Returns the image and the
/// tree (path -> object) with each file's xattrs.
fn build() -> (Vec<u8>, BTreeMap<String, Obj>) {
    let dev = memory_image(IMAGE_BYTES, 2);
    let fs = Arc::new(mount(&dev).unwrap());
    let mut tree = BTreeMap::new();
    for d in ["/a", "/a/b", "/c"] {
        fs.create_dir(d, 0o755).unwrap();
    }
    let files: [(&str, usize, bool); 6] = [
        ("/a/small", 100, true),
        ("/a/b/mid", 300_000, false),
        ("/c/big", 3 << 20, true),
        ("/c/f4k", 4096, false),
        ("/empty", 0, false),
        ("/c/tail", 70_000, true),
    ];
    for (i, (path, len, sync)) in files.iter().enumerate() {
        let f = OpenOptions::new()
            .write(true)
            .create(true)
            .open(&fs, path)
            .unwrap();
        let data = bytes(i as u64 + 1, *len);
        for (n, chunk) in data.chunks(1 << 20).enumerate() {
            f.write_at(chunk, (n << 20) as u64).unwrap();
        }
        if *sync {
            f.sync_all().unwrap();
        }
        tree.insert(path.to_string(), Obj::File(data));
    }
    // Enough empty files that MetaDB's table has data blocks a mount does not read.
    fs.create_dir("/many", 0o755).unwrap();
    for i in 0..150u32 {
        let path = format!("/many/file-{i:03}");
        OpenOptions::new()
            .write(true)
            .create(true)
            .open(&fs, &path)
            .unwrap();
        fs.set_xattr(&path, b"user.n", &i.to_le_bytes(), XattrMode::Create)
            .unwrap();
        tree.insert(path, Obj::File(Vec::new()));
    }
    // What came before goes to tables (and the manifest); what follows stays in the WAL.
    fs.engine().metadb().flush().unwrap();
    fs.hard_link("/a/b/mid", "/c/mid-link").unwrap();
    tree.insert("/c/mid-link".into(), tree["/a/b/mid"].clone());
    fs.symlink("/a/small", "/c/to-small").unwrap();
    tree.insert("/c/to-small".into(), Obj::Link(b"/a/small".to_vec()));
    fs.set_xattr("/a/small", b"user.colour", b"blue", XattrMode::Create)
        .unwrap();
    fs.set_xattr("/c", b"user.big", &[3u8; 2000], XattrMode::Create)
        .unwrap();
    for d in ["/", "/a", "/a/b", "/c", "/many"] {
        let mut names: Vec<Vec<u8>> = fs
            .read_dir(d)
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        names.sort();
        tree.insert(d.to_string(), Obj::Dir(names));
    }
    unmount(fs);
    (image_bytes(&dev), tree)
}

fn fill(rng: &mut Rng, buf: &mut [u8]) {
    for chunk in buf.chunks_mut(8) {
        let v = rng.next_u64().to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}

fn is_damage(errno: i32) -> bool {
    errno == libc::EIO || errno == EUCLEAN
}

/// Reads everything the tree names through `fs`. Returns (wrong answers, whether any
/// read failed). A read that fails with EIO/EUCLEAN is allowed; a wrong answer is not.
#[derive(Default)]
struct Seen {
    wrong: Vec<String>,
    failed: bool,
}

impl Seen {
    fn err(&mut self, path: &str, errno: i32, what: &str) {
        if is_damage(errno) {
            self.failed = true;
        } else {
            self.wrong
                .push(format!("{path}: {what} failed with errno {errno}"));
        }
    }
}

fn read_all(fs: &Arc<FileSystem>, tree: &BTreeMap<String, Obj>) -> (Vec<String>, bool) {
    let mut seen = Seen::default();
    for (path, obj) in tree {
        match obj {
            Obj::Dir(names) => match fs.read_dir(path) {
                Ok(entries) => {
                    let mut got: Vec<Vec<u8>> = entries.into_iter().map(|e| e.name).collect();
                    got.sort();
                    if &got != names {
                        seen.wrong.push(format!("{path}: entries differ"));
                    }
                }
                Err(e) => seen.err(path, e.errno(), "readdir"),
            },
            Obj::Link(target) => match fs.read_link(path) {
                Ok(t) if &t == target => {}
                Ok(_) => seen.wrong.push(format!("{path}: wrong target")),
                Err(e) => seen.err(path, e.errno(), "readlink"),
            },
            Obj::File(data) => {
                match fs.metadata(path) {
                    Ok(m) if m.kind == Kind::File && m.size == data.len() as u64 => {}
                    Ok(m) => seen
                        .wrong
                        .push(format!("{path}: size {} kind {:?}", m.size, m.kind)),
                    Err(e) => {
                        seen.err(path, e.errno(), "stat");
                        continue;
                    }
                }
                let f = match OpenOptions::new().read(true).open(fs, path) {
                    Ok(f) => f,
                    Err(e) => {
                        seen.err(path, e.errno(), "open");
                        continue;
                    }
                };
                for (n, want) in data.chunks(64 << 10).enumerate() {
                    let mut buf = vec![0u8; want.len()];
                    match f.read_at(&mut buf, (n << 16) as u64) {
                        Ok(got) if got == want.len() && buf == want => {}
                        Ok(got) => seen
                            .wrong
                            .push(format!("{path}: wrong bytes at {} ({got})", n << 16)),
                        Err(e) => seen.err(path, e.errno(), "read"),
                    }
                }
            }
        }
    }
    for (path, value) in [("/a/small", &b"blue"[..]), ("/c", &[3u8; 2000][..])] {
        let name: &[u8] = if path == "/c" {
            b"user.big"
        } else {
            b"user.colour"
        };
        match fs.get_xattr(path, name) {
            Ok(v) if v == value => {}
            Ok(_) => seen.wrong.push(format!("{path}: wrong xattr")),
            Err(e) => seen.err(path, e.errno(), "getxattr"),
        }
    }
    (seen.wrong, seen.failed)
}

/// What one damaged copy did.
#[derive(Debug, Default, Clone, Copy)]
struct Outcome {
    panicked: bool,
    refused: bool,
    reads_failed: bool,
    wrong: bool,
    detected: bool,
}

fn run_case(
    image: &Arc<[u8]>,
    damage: &[(usize, Vec<u8>)],
    tree: &BTreeMap<String, Obj>,
) -> (Outcome, Vec<String>) {
    // A copy-on-write device over the shared image per attempt: the damaged blocks only
    // are copied, and each attempt starts from the same bytes.
    let damaged = || {
        let cow = CowBackend::new(Arc::clone(image), SECTOR_BYTES);
        for (block, bytes) in damage {
            cow.put((block * BLOCK) as u64, Some(bytes), BLOCK as u64);
        }
        Arc::new(Device::new(Box::new(cow)))
    };
    let mut out = Outcome::default();
    let mut notes = Vec::new();
    let fsck = catch_unwind(AssertUnwindSafe(|| try_fsck(damaged(), Mode::Check, true)));
    match fsck {
        Err(_) => out.panicked = true,
        Ok(Ok(report)) => out.detected = !report.problems.is_empty(),
        Ok(Err(_)) => out.detected = true,
    }
    let mounted = catch_unwind(AssertUnwindSafe(|| match mount(&damaged()) {
        Ok(fs) => {
            let fs = Arc::new(fs);
            let (wrong, failed) = read_all(&fs, tree);
            drop(fs);
            Ok((wrong, failed))
        }
        Err(e) => Err(e.to_string()),
    }));
    match mounted {
        Err(_) => out.panicked = true,
        Ok(Err(message)) => {
            assert!(!message.is_empty());
            out.refused = true;
        }
        Ok(Ok((wrong, failed))) => {
            out.reads_failed = failed;
            out.wrong = !wrong.is_empty();
            notes = wrong;
        }
    }
    (out, notes)
}

/// The blocks to damage: every non-zero block of the metadata regions (and a sample of
/// zero ones), every block of MetaDB's table segments up to its last non-zero block, and
/// every `data_stride`-th non-zero block of the domains' segments.
fn targets(image: &[u8], data_stride: usize, long: bool) -> Vec<(String, usize)> {
    let dev = from_bytes(image.to_vec());
    let recovered = fsck::open::recover(dev, None, fsck::open::Damage::Refuse).unwrap();
    let g = recovered.geometry;
    let nonzero = |b: usize| image[b * BLOCK..(b + 1) * BLOCK].iter().any(|&x| x != 0);
    let mut out = Vec::new();
    let regions = [
        ("superblock", 0, g.checkpoints.start_block),
        (
            "checkpoint",
            g.checkpoints.start_block,
            g.checkpoints.end_block(),
        ),
        ("manifest", g.manifest.start_block, g.manifest.end_block()),
        ("wal", g.wal.start_block, g.wal.end_block()),
        ("summary", g.summaries.start_block, g.summaries.end_block()),
    ];
    for (name, start, end) in regions {
        for b in start as usize..end as usize {
            if long || nonzero(b) || b % 257 == 0 {
                out.push((name.to_string(), b));
            }
        }
    }
    let mut data_seen = 0usize;
    for s in 0..g.segment_count {
        let segment = SegmentNo(s);
        let first = g.segment_start(segment).0 as usize;
        let blocks = (format::constants::BLOCKS_PER_SEGMENT) as usize;
        match recovered.pool.owner(segment) {
            Some(Owner::MetaDb) => {
                let last = (first..first + blocks).rev().find(|&b| nonzero(b));
                for b in first..=last.unwrap_or(first) {
                    out.push(("table".to_string(), b));
                }
            }
            Some(Owner::Domain(_)) => {
                for b in (first..first + blocks).filter(|&b| long || nonzero(b)) {
                    if long || data_seen % data_stride == 0 {
                        out.push(("data".to_string(), b));
                    }
                    data_seen += 1;
                }
            }
            None => {}
        }
    }
    recovered.db.close().unwrap();
    out
}

#[derive(Debug, Default)]
struct Counts {
    cases: u64,
    detected: u64,
    refused: u64,
    reads_failed: u64,
    visible_undetected: Vec<String>,
    silent: u64,
    wrong: Vec<String>,
    panics: Vec<String>,
    per_region: BTreeMap<String, (u64, u64)>,
}

impl Counts {
    fn add(&mut self, label: String, region: &str, out: Outcome, notes: Vec<String>) {
        self.cases += 1;
        let e = self.per_region.entry(region.to_string()).or_default();
        e.0 += 1;
        e.1 += u64::from(out.detected);
        self.detected += u64::from(out.detected);
        self.refused += u64::from(out.refused);
        self.reads_failed += u64::from(out.reads_failed);
        if out.panicked {
            self.panics.push(label.clone());
        }
        if out.wrong {
            self.wrong.push(format!("{label}: {}", notes.join("; ")));
        }
        if (out.refused || out.reads_failed || out.wrong) && !out.detected {
            self.visible_undetected.push(label.clone());
        }
        if !out.detected && !out.refused && !out.reads_failed {
            self.silent += 1;
        }
    }

    fn print(&self, title: &str) {
        println!(
            "{title}: {} cases, detected by fsck {}, mount refused {}, reads failed {}, \
             wrong reads {}, panics {}, visible but undetected {}, no effect seen {}",
            self.cases,
            self.detected,
            self.refused,
            self.reads_failed,
            self.wrong.len(),
            self.panics.len(),
            self.visible_undetected.len(),
            self.silent
        );
        for (region, (n, d)) in &self.per_region {
            println!("  {region}: {n} cases, {d} detected");
        }
        for w in self
            .wrong
            .iter()
            .chain(&self.panics)
            .chain(&self.visible_undetected)
            .take(20)
        {
            println!("  {w}");
        }
    }

    fn assert_sound(&self) {
        assert!(self.panics.is_empty(), "panics: {:?}", self.panics);
        assert!(self.wrong.is_empty(), "wrong reads: {:?}", self.wrong);
        assert!(
            self.visible_undetected.is_empty(),
            "damage a reader saw that fsck missed: {:?}",
            self.visible_undetected
        );
    }
}

#[test]
fn every_metadata_block_damaged_is_refused_or_read_right_and_fsck_sees_it() {
    let long = std::env::var_os("AUGEFS_DAMAGE_LONG").is_some();
    let seed = std::env::var("AUGEFS_DAMAGE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1u64);
    println!(
        "damage campaign seed {seed} (AUGEFS_DAMAGE_SEED={seed} to replay){}",
        if long { ", long mode" } else { "" }
    );
    let (image, tree) = build();
    let image: Arc<[u8]> = image.into();
    let (clean, _) = run_case(&image, &[], &tree);
    assert!(
        !clean.detected && !clean.refused && !clean.reads_failed && !clean.wrong,
        "the undamaged image: {clean:?}"
    );
    let mut rng = Rng::from_seed(seed);
    let mut counts = Counts::default();
    let targets = targets(&image, 16, long);
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    for (region, block) in &targets {
        let mut random = vec![0u8; BLOCK];
        fill(&mut rng, &mut random);
        for (variant, bytes) in [("random", random), ("zeros", vec![0u8; BLOCK])] {
            if bytes == image[block * BLOCK..(block + 1) * BLOCK] {
                continue;
            }
            let (out, notes) = run_case(&image, &[(*block, bytes)], &tree);
            if std::env::var_os("AUGEFS_DAMAGE_VERBOSE").is_some() && region != "data" {
                println!("  {region} block {block} {variant}: {out:?}");
            }
            counts.add(
                format!("{region} block {block} {variant}"),
                region,
                out,
                notes,
            );
        }
    }
    if long {
        let mut combos = Counts::default();
        let span = IMAGE_BYTES as usize / BLOCK * 35 / 100;
        for c in 0..40 {
            let damage: Vec<(usize, Vec<u8>)> = (0..8)
                .map(|_| {
                    let mut bytes = vec![0u8; BLOCK];
                    fill(&mut rng, &mut bytes);
                    (rng.below(span as u64) as usize, bytes)
                })
                .collect();
            let blocks: Vec<usize> = damage.iter().map(|d| d.0).collect();
            let (out, notes) = run_case(&image, &damage, &tree);
            combos.add(
                format!("combination {c} blocks {blocks:?}"),
                "combination",
                out,
                notes,
            );
        }
        std::panic::set_hook(default_hook);
        counts.print("single blocks");
        combos.print("8 random blocks in the first 35%");
        counts.assert_sound();
        combos.assert_sound();
        return;
    }
    std::panic::set_hook(default_hook);
    counts.print("single blocks");
    counts.assert_sound();
    // Damage to the log a mount replays must be refused, never taken for a torn tail.
    let wal = &counts.per_region["wal"];
    assert!(wal.1 > 0, "no WAL damage detected: {wal:?}");
    // Superblock copies and summaries are never left invalid by a crash: all damage.
    for region in ["superblock", "summary"] {
        let (n, detected) = counts.per_region[region];
        assert_eq!(
            n, detected,
            "{region}: {detected} of {n} damaged blocks detected"
        );
    }
}
