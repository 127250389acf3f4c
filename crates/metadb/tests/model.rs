//! MetaDB against a BTreeMap model: random puts, deletes, batches, gets, range and prefix
//! scans, snapshots, memtable switches, flushes, compactions and reopens.

use device::memory::MemoryBackend;
use device::Device;
use format::constants::MIB;
use format::Geometry;
use metadb::compaction::policy::CompactionConfig;
use metadb::table::builder::TableOptions;
use metadb::{Durability, MetaDb, MetaDbConfig, MetaDbEnv, SegmentPool, WriteBatch};
use platform::{IoCause, Rng};
use std::collections::BTreeMap;
use std::sync::Arc;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn env(device: Arc<Device>, geometry: Geometry) -> MetaDbEnv {
    MetaDbEnv {
        device,
        pmr: None,
        geometry,
        table_store: Arc::new(SegmentPool::whole(geometry)),
        hooks: None,
    }
}

fn small_config() -> MetaDbConfig {
    MetaDbConfig {
        lanes: 4,
        memtable_bytes: 64 << 10,
        block_cache_bytes: 1 << 20,
        table: TableOptions {
            table_bytes_max: 16 << 10,
            ..TableOptions::default()
        },
        compaction: CompactionConfig {
            level0_file_trigger: 4,
            level_base_bytes: 32 << 10,
            level_size_multiplier: 4,
            ..CompactionConfig::default()
        },
        background: false,
        ..MetaDbConfig::default()
    }
}

fn key(rng: &mut Rng) -> Vec<u8> {
    format!("m:{}:{}", rng.below(8), rng.below(1500)).into_bytes()
}

fn value(rng: &mut Rng) -> Vec<u8> {
    let len = rng.below(200) as usize;
    let mut v = vec![0u8; len];
    rng.fill(&mut v);
    v
}

fn scan(
    db: &MetaDb,
    start: &[u8],
    end: Option<&[u8]>,
    snap: Option<&metadb::Snapshot>,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    db.range(start, end, snap)
        .unwrap()
        .map(|r| r.unwrap())
        .collect()
}

fn model_range(model: &Model, start: &[u8], end: Option<&[u8]>) -> Vec<(Vec<u8>, Vec<u8>)> {
    model
        .range(start.to_vec()..)
        .take_while(|(k, _)| end.is_none_or(|e| k.as_slice() < e))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn run(seed: u64, steps: usize) {
    let geometry = Geometry::compute(512 * MIB, 1).unwrap();
    let device = Arc::new(Device::new(Box::new(MemoryBackend::new(512 * MIB, 512))));
    let mut db = MetaDb::open(env(device.clone(), geometry), small_config()).unwrap();
    let mut rng = Rng::from_seed(seed);
    let mut model = Model::new();
    let mut snapshots: Vec<(metadb::Snapshot, Model)> = Vec::new();
    for step in 0..steps {
        let ctx = format!("seed {seed} step {step}");
        match rng.below(100) {
            0..=39 => {
                let (k, v) = (key(&mut rng), value(&mut rng));
                db.put(&k, &v, Durability::Buffered).unwrap();
                model.insert(k, v);
            }
            40..=54 => {
                let k = key(&mut rng);
                db.delete(&k, Durability::Buffered).unwrap();
                model.remove(&k);
            }
            55..=62 => {
                let mut batch = WriteBatch::new();
                for _ in 0..1 + rng.below(5) {
                    let k = key(&mut rng);
                    if rng.chance(1, 3) {
                        batch.delete(k.clone());
                        model.remove(&k);
                    } else {
                        let v = value(&mut rng);
                        batch.put(k.clone(), v.clone());
                        model.insert(k, v);
                    }
                }
                db.write(&batch, Durability::Sync).unwrap();
            }
            63..=79 => {
                let k = key(&mut rng);
                assert_eq!(
                    db.get(&k).unwrap(),
                    model.get(&k).cloned(),
                    "{ctx} get {k:?}"
                );
            }
            80..=84 => {
                let p = format!("m:{}:", rng.below(8)).into_bytes();
                let got: Vec<_> = db.prefix(&p, None).unwrap().map(|r| r.unwrap()).collect();
                let mut end = p.clone();
                *end.last_mut().unwrap() += 1;
                assert_eq!(got, model_range(&model, &p, Some(&end)), "{ctx} prefix");
            }
            85..=87 => {
                let (a, b) = (key(&mut rng), key(&mut rng));
                let (a, b) = if a <= b { (a, b) } else { (b, a) };
                let (got, want) = (
                    scan(&db, &a, Some(&b), None),
                    model_range(&model, &a, Some(&b)),
                );
                assert!(
                    got == want,
                    "{ctx} range [{}, {}): got {} keys {:?}.., want {} keys {:?}..",
                    String::from_utf8_lossy(&a),
                    String::from_utf8_lossy(&b),
                    got.len(),
                    got.first()
                        .map(|(k, _)| String::from_utf8_lossy(k).into_owned()),
                    want.len(),
                    want.first()
                        .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
                );
            }
            88..=90 => {
                if snapshots.len() < 4 {
                    snapshots.push((db.snapshot(), model.clone()));
                } else {
                    snapshots.remove(rng.below(4) as usize);
                }
            }
            91..=93 => {
                for (snap, old) in &snapshots {
                    let k = key(&mut rng);
                    assert_eq!(
                        db.get_at(&k, snap).unwrap(),
                        old.get(&k).cloned(),
                        "{ctx} snapshot get"
                    );
                    assert_eq!(
                        scan(&db, b"m:3:", Some(b"m:4:"), Some(snap)),
                        model_range(old, b"m:3:", Some(b"m:4:")),
                        "{ctx} snapshot scan"
                    );
                }
            }
            94..=95 => db.flush().unwrap(),
            96..=97 => db.compact().unwrap(),
            _ => {
                snapshots.clear();
                db.close().unwrap();
                db = MetaDb::open(env(device.clone(), geometry), small_config()).unwrap();
                assert_eq!(
                    scan(&db, b"", None, None),
                    model_range(&model, b"", None),
                    "{ctx} after reopen"
                );
            }
        }
    }
    assert_eq!(
        scan(&db, b"", None, None),
        model_range(&model, b"", None),
        "seed {seed} final"
    );
    let stats = db.stats();
    eprintln!("seed {seed}: {stats:?}");
    assert!(
        stats.tables_per_level[2] > 0,
        "seed {seed}: some tables were written: {stats:?}"
    );
    db.close().unwrap();
}

#[test]
fn random_operations_match_the_model() {
    for seed in 1..=4 {
        run(seed, 4000);
    }
}

/// A snapshot keeps the versions it sees through flushes and compactions that merge them
/// with newer versions and tombstones; once it is dropped, compaction discards them.
#[test]
fn snapshots_survive_compaction() {
    let geometry = Geometry::compute(512 * MIB, 1).unwrap();
    let device = Arc::new(Device::new(Box::new(MemoryBackend::new(512 * MIB, 512))));
    let db = MetaDb::open(env(device, geometry), small_config()).unwrap();
    let keys: Vec<Vec<u8>> = (0..300).map(|i| format!("k{i:04}").into_bytes()).collect();
    for k in &keys {
        db.put(k, b"old", Durability::Buffered).unwrap();
    }
    db.flush().unwrap();
    let snap = db.snapshot();
    for round in 0..6 {
        for (i, k) in keys.iter().enumerate() {
            if i % 3 == 0 {
                db.delete(k, Durability::Buffered).unwrap();
            } else {
                db.put(k, format!("new{round}").as_bytes(), Durability::Buffered)
                    .unwrap();
            }
        }
        db.flush().unwrap();
        db.compact().unwrap();
    }
    let levels = db.stats().tables_per_level;
    assert!(
        levels.iter().skip(1).sum::<usize>() > 0,
        "compaction moved data down: {levels:?}"
    );
    for k in &keys {
        assert_eq!(
            db.get_at(k, &snap).unwrap().as_deref(),
            Some(&b"old"[..]),
            "{k:?} at the snapshot"
        );
    }
    assert_eq!(
        db.range(b"", None, Some(&snap)).unwrap().count(),
        keys.len()
    );
    let live: Vec<_> = db
        .range(b"", None, None)
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(live.len(), keys.len() - keys.len().div_ceil(3));
    assert!(live.iter().all(|(_, v)| v == b"new5"));
    drop(snap);
    db.compact().unwrap();
    for (i, k) in keys.iter().enumerate() {
        let expected = (i % 3 != 0).then(|| b"new5".to_vec());
        assert_eq!(db.get(k).unwrap(), expected);
    }
    db.close().unwrap();
}

/// Many versions of few keys, kept alive by a snapshot, across small tables: every
/// output table holds all versions of its keys (levels stay disjoint by user key).
#[test]
fn versions_of_one_key_never_straddle_tables() {
    let geometry = Geometry::compute(512 * MIB, 1).unwrap();
    let device = Arc::new(Device::new(Box::new(MemoryBackend::new(512 * MIB, 512))));
    let mut config = small_config();
    config.table.table_bytes_max = 8 << 10;
    let db = MetaDb::open(env(device, geometry), config).unwrap();
    let mut snaps = Vec::new();
    for round in 0..12u32 {
        for k in 0..40u32 {
            db.put(
                format!("key{k:03}").as_bytes(),
                &[round as u8; 150],
                Durability::Buffered,
            )
            .unwrap();
        }
        snaps.push(db.snapshot());
        db.flush().unwrap();
        db.compact().unwrap();
    }
    for (round, snap) in snaps.iter().enumerate() {
        for k in 0..40u32 {
            assert_eq!(
                db.get_at(format!("key{k:03}").as_bytes(), snap).unwrap(),
                Some(vec![round as u8; 150])
            );
        }
    }
    db.close().unwrap();
}

/// One key rewritten far more times than a table holds, within one memtable (an
/// inode's size at each append + fsync): the flush keeps the versions a reader can see
/// (the newest, and the newest each snapshot sees), not all of them, so it fits a table;
/// every snapshot still reads its version. Keeping every version made the flush panic.
#[test]
fn a_key_rewritten_many_times_in_one_memtable_flushes_into_one_table() {
    let geometry = Geometry::compute(512 * MIB, 1).unwrap();
    let device = Arc::new(Device::new(Box::new(MemoryBackend::new(512 * MIB, 512))));
    let mut config = small_config();
    config.memtable_bytes = 4 << 20;
    config.table.table_bytes_max = 16 << 10;
    let db = MetaDb::open(env(device, geometry), config).unwrap();
    let mut snaps = Vec::new();
    // 2,000 versions of 100 bytes: about 260 KiB, sixteen tables' worth.
    for i in 0..2000u32 {
        db.put(b"inode:7", &[(i % 251) as u8; 100], Durability::Buffered)
            .unwrap();
        if i % 500 == 0 {
            snaps.push((i, db.snapshot()));
        }
    }
    db.flush().unwrap();
    assert_eq!(
        db.get(b"inode:7").unwrap(),
        Some(vec![(1999 % 251) as u8; 100])
    );
    for (i, snap) in &snaps {
        assert_eq!(
            db.get_at(b"inode:7", snap).unwrap(),
            Some(vec![(i % 251) as u8; 100]),
            "the version snapshot {i} saw"
        );
    }
    drop(snaps);
    db.close().unwrap();
}

/// Eight threads write their own keys (and shared keys under a lock, as the file system
/// does with inode locks) while background flush and compaction run and readers scan;
/// afterwards, and after a reopen, the database equals the merged model.
#[test]
fn concurrent_writers_with_background_jobs() {
    let geometry = Geometry::compute(512 * MIB, 1).unwrap();
    let device = Arc::new(Device::new(Box::new(MemoryBackend::new(512 * MIB, 512))));
    let mut config = small_config();
    config.background = true;
    let db = Arc::new(MetaDb::open(env(device.clone(), geometry), config.clone()).unwrap());
    let shared = Arc::new(std::sync::Mutex::new(Model::new()));
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let (db, shared) = (db.clone(), shared.clone());
            std::thread::spawn(move || {
                let mut rng = Rng::from_seed(100 + t);
                let mut mine = Model::new();
                for i in 0..1500u64 {
                    let key = format!("t{t}:{}", rng.below(300)).into_bytes();
                    if rng.chance(1, 5) {
                        db.delete(&key, Durability::Buffered).unwrap();
                        mine.remove(&key);
                    } else {
                        let value = format!("{t}-{i}").into_bytes();
                        let durability = if i % 50 == 0 {
                            Durability::Sync
                        } else {
                            Durability::Buffered
                        };
                        db.put(&key, &value, durability).unwrap();
                        mine.insert(key, value);
                    }
                    if i % 10 == 0 {
                        // A shared key, changed only under its lock.
                        let mut guard = shared.lock().unwrap();
                        let key = format!("shared:{}", rng.below(20)).into_bytes();
                        let value = format!("{t}-{i}").into_bytes();
                        db.put(&key, &value, Durability::Buffered).unwrap();
                        guard.insert(key, value);
                    }
                    if i % 200 == 0 {
                        let prefix = format!("t{t}:");
                        let seen = db.prefix(prefix.as_bytes(), None).unwrap().count();
                        assert_eq!(seen, mine.len(), "thread {t} sees its own writes");
                    }
                }
                mine
            })
        })
        .collect();
    let mut model = Model::new();
    for t in threads {
        model.extend(t.join().unwrap());
    }
    model.extend(shared.lock().unwrap().clone());
    assert_eq!(scan(&db, b"", None, None), model_range(&model, b"", None));
    let db = Arc::into_inner(db).expect("threads are done");
    db.close().unwrap();
    let db = MetaDb::open(env(device, geometry), config).unwrap();
    assert_eq!(
        scan(&db, b"", None, None),
        model_range(&model, b"", None),
        "after reopen"
    );
    db.close().unwrap();
}

/// Writers faster than compaction stall at `level0_stop_tables` instead of piling up
/// level-0 tables without bound, and leveled compaction keeps write amplification
/// modest (a level-0 job never rewrites a level 1 far over its target).
#[test]
fn compaction_debt_stays_bounded() {
    let geometry = Geometry::compute(512 * MIB, 1).unwrap();
    let device = Arc::new(Device::new(Box::new(MemoryBackend::new(512 * MIB, 512))));
    let config = MetaDbConfig {
        background: true,
        level0_stop_tables: 8,
        immutables_max: 2,
        table: TableOptions {
            // One table per flush, so the level-0 bound below is in flushes.
            table_bytes_max: 256 << 10,
            ..TableOptions::default()
        },
        compaction: CompactionConfig {
            level_base_bytes: 256 << 10,
            level_size_multiplier: 4,
            job_input_bytes_max: 4 << 20,
            ..CompactionConfig::default()
        },
        ..small_config()
    };
    let db = Arc::new(MetaDb::open(env(device.clone(), geometry), config.clone()).unwrap());
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (db, done) = (db.clone(), done.clone());
        std::thread::spawn(move || {
            let mut level0_max = 0;
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                level0_max = level0_max.max(db.stats().tables_per_level[0]);
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
            level0_max
        })
    };
    let before = device.counters().snapshot();
    let user_bytes: u64 = (0..4u64)
        .map(|t| {
            let db = db.clone();
            std::thread::spawn(move || {
                let mut rng = Rng::from_seed(7 + t);
                let mut bytes = 0;
                for _ in 0..20_000 {
                    let key = format!("{:016x}", rng.next_u64()).into_bytes();
                    let value = vec![b'v'; 100];
                    db.put(&key, &value, Durability::Buffered).unwrap();
                    bytes += (key.len() + value.len()) as u64;
                }
                bytes
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .sum();
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let level0_max = sampler.join().unwrap();
    let bound = config.level0_stop_tables + config.immutables_max;
    assert!(
        level0_max <= bound,
        "level 0 reached {level0_max} tables (bound {bound})"
    );
    db.flush().unwrap();
    db.compact().unwrap();
    let io = device.counters().snapshot().since(&before);
    let written = io.cause(IoCause::Table).write_bytes + io.cause(IoCause::Compaction).write_bytes;
    let amplification = written as f64 / user_bytes as f64;
    // About 8 MiB of user data over levels of 256 KiB x4: a leveled tree rewrites each
    // byte about (levels x multiplier / 2) times; the runaway this guards against was
    // over 100x.
    assert!(
        amplification < 25.0,
        "table write amplification {amplification:.1}"
    );
    let db = Arc::into_inner(db).expect("threads are done");
    db.close().unwrap();
}

/// A compaction's tables go to the block cache where it has room: after a load and its
/// compactions, every key reads without a device read, as from a store over the
/// kernel's page cache (tables above the size read whole at open, so the cache holds
/// only what the flushes and compactions put there).
#[test]
fn compacted_tables_fill_a_block_cache_with_room() {
    let geometry = Geometry::compute(256 * MIB, 1).unwrap();
    let device = Arc::new(Device::new(Box::new(MemoryBackend::new(256 * MIB, 512))));
    let config = MetaDbConfig {
        memtable_bytes: 256 << 10,
        block_cache_bytes: 32 << 20,
        table: TableOptions {
            table_bytes_max: 512 << 10,
            ..TableOptions::default()
        },
        compaction: CompactionConfig {
            level0_file_trigger: 2,
            level_base_bytes: 1 << 20,
            level_size_multiplier: 4,
            ..CompactionConfig::default()
        },
        ..small_config()
    };
    let db = MetaDb::open(env(device.clone(), geometry), config).unwrap();
    let mut rng = Rng::from_seed(31);
    let mut keys = Vec::new();
    for round in 0..12 {
        for _ in 0..2_000 {
            let key = format!("{:016x}", rng.next_u64()).into_bytes();
            db.put(&key, &[round as u8; 200], Durability::Buffered)
                .unwrap();
            keys.push(key);
        }
        db.flush().unwrap();
    }
    db.compact().unwrap();
    let stats = db.stats();
    assert_eq!(stats.tables_per_level[0], 0, "{stats:?}");
    assert!(
        stats.bytes_per_level[1..].iter().sum::<u64>() > 4 << 20,
        "{stats:?}"
    );
    let before = device.counters().snapshot();
    for key in &keys {
        assert!(db.get(key).unwrap().is_some());
    }
    let reads = device.counters().snapshot().since(&before).total().read_ops;
    assert_eq!(reads, 0, "gets of compacted keys read the device");
}
