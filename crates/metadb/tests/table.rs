//! Scenario tests of MetaDB's sorted tables (docs/FORMAT.md §5.3 Tables): builder ->
//! memory device at a pool segment -> `Table::open` -> lookups and scans against a
//! `BTreeMap` model; full segments; corruption of every structure; the bloom filter's
//! false-positive rate; the block cache; merging tables with an in-memory iterator.

use device::memory::MemoryBackend;
use device::{AlignedBuf, Device, IoCause};
use format::Geometry;
use metadb::iter::{InternalIterator, MergingIterator, VecIterator};
use metadb::table::builder::{TableBuilder, TableOptions};
use metadb::table::cache::BlockCache;
use metadb::table::layout::{Footer, FOOTER_BYTES};
use metadb::table::reader::{CacheFill, Table};
use metadb::table::{TableId, TableMeta};
use metadb::types::InternalKey;
use metadb::{MetaDbError, SegmentPool, Seq, TableStore, ValueKind};
use platform::Rng;
use std::collections::BTreeMap;
use std::sync::Arc;

const DEVICE_BYTES: u64 = 64 << 20;

type Model = BTreeMap<InternalKey, Vec<u8>>;

struct Env {
    device: Arc<Device>,
    pool: SegmentPool,
    cache: Arc<BlockCache>,
}

impl Env {
    fn new(logical_block_bytes: u32) -> Env {
        let geometry = Geometry::compute(DEVICE_BYTES, 1).unwrap();
        let device = Arc::new(Device::new(Box::new(MemoryBackend::new(
            DEVICE_BYTES,
            logical_block_bytes,
        ))));
        Env {
            device,
            pool: SegmentPool::whole(geometry),
            cache: Arc::new(BlockCache::new(8 << 20)),
        }
    }

    /// Writes a finished builder to a fresh segment; returns the manifest entry and the bytes.
    fn write(&self, builder: TableBuilder) -> (TableMeta, Vec<u8>) {
        let (buf, built) = builder.finish();
        assert!(buf.len() % 4096 == 0 && buf.len() <= 2 << 20);
        let segment = self.pool.allocate().unwrap();
        let bytes = buf.to_vec();
        self.device
            .write(self.pool.offset(segment), buf, IoCause::Table)
            .unwrap();
        (built.meta(segment), bytes)
    }

    fn open(&self, meta: &TableMeta) -> Result<Arc<Table>, MetaDbError> {
        let offset = self.pool.offset(meta.segment);
        Table::open(
            Arc::clone(&self.device),
            offset,
            meta.clone(),
            Arc::clone(&self.cache),
        )
        .map(Arc::new)
    }

    /// Overwrites one byte of a written table.
    fn flip(&self, meta: &TableMeta, at: usize) {
        let block = self.device.info().logical_block_bytes as u64;
        let byte = self.pool.offset(meta.segment) + at as u64;
        let start = byte / block * block;
        let mut buf = self
            .device
            .read(start, AlignedBuf::zeroed(block as usize), IoCause::Tool)
            .unwrap();
        buf[(byte - start) as usize] ^= 0x40;
        self.device.write(start, buf, IoCause::Tool).unwrap();
    }
}

/// The newest version of `key` at `snapshot` in the model.
fn model_get(model: &Model, key: &[u8], snapshot: Seq) -> Option<(Seq, ValueKind, Vec<u8>)> {
    let (k, v) = model.range(InternalKey::seek_key(key, snapshot)..).next()?;
    (k.user_key == key).then(|| (k.seq, k.kind, v.clone()))
}

fn random_key(rng: &mut Rng) -> Vec<u8> {
    // Shared directory-like prefixes (prefix compression), occasionally very long keys.
    let mut key = format!("m:{}:", rng.below(30)).into_bytes();
    let len = match rng.below(20) {
        0 => 900 + rng.below(124) as usize - key.len(),
        1 => 0,
        _ => 1 + rng.below(24) as usize,
    };
    key.extend((0..len).map(|_| b'a' + rng.below(26) as u8));
    key
}

fn random_value(rng: &mut Rng) -> Vec<u8> {
    let len = match rng.below(6) {
        0 => 0,
        1 => 1024,
        _ => rng.below(200) as usize,
    };
    let mut v = vec![0u8; len];
    rng.fill(&mut v);
    v
}

/// A random model (several versions per key, deletes, empty and 1 KiB values, keys up to
/// 1024 bytes) and a builder holding it, filled until `entries` or the table is full.
fn random_table(rng: &mut Rng, id: TableId, entries: usize) -> (TableBuilder, Model) {
    let mut model = Model::new();
    while model.len() < entries {
        let key = random_key(rng);
        for _ in 0..1 + rng.below(5) {
            let seq = 1 + rng.below(1_000_000);
            let kind = if rng.chance(1, 5) {
                ValueKind::Delete
            } else {
                ValueKind::Put
            };
            let value = if kind == ValueKind::Delete {
                Vec::new()
            } else {
                random_value(rng)
            };
            model.insert(InternalKey::new(key.clone(), seq, kind), value);
        }
    }
    let mut builder = TableBuilder::new(id, TableOptions::default());
    let mut added = Model::new();
    for (k, v) in model {
        if !builder.add_key(&k, &v) {
            break;
        }
        added.insert(k, v);
    }
    (builder, added)
}

fn collect(it: &mut dyn InternalIterator, limit: usize) -> Vec<(InternalKey, Vec<u8>)> {
    let mut out = Vec::new();
    while it.valid() && out.len() < limit {
        out.push((
            InternalKey::new(it.user_key(), it.seq(), it.kind()),
            it.value().to_vec(),
        ));
        it.next().unwrap();
    }
    out
}

fn check_against_model(table: &Arc<Table>, model: &Model, rng: &mut Rng) {
    let user_keys: Vec<&[u8]> = model.keys().map(|k| &k.user_key[..]).collect();
    // Lookups: every version's own seq, just below it, the newest, nothing, random.
    for k in model.keys() {
        for snapshot in [k.seq, k.seq - 1, Seq::MAX, 0, rng.below(1_100_000)] {
            let got = table.get(&k.user_key, snapshot).unwrap();
            assert_eq!(
                got,
                model_get(model, &k.user_key, snapshot),
                "key {:?} at {snapshot}",
                k.user_key
            );
        }
    }
    for _ in 0..2000 {
        let absent = random_key(rng);
        let got = table.get(&absent, Seq::MAX).unwrap();
        assert_eq!(got, model_get(model, &absent, Seq::MAX));
    }
    // Full scan.
    let mut it = table.iter();
    it.seek_to_first().unwrap();
    let all: Vec<(InternalKey, Vec<u8>)> =
        model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(collect(&mut it, usize::MAX), all);
    // Seeks to present and absent keys at random snapshots, then a few steps.
    for _ in 0..500 {
        let key = if rng.chance(1, 2) {
            user_keys[rng.below(user_keys.len() as u64) as usize].to_vec()
        } else {
            random_key(rng)
        };
        let target = InternalKey::seek_key(&key, rng.below(1_100_000));
        it.seek(&target).unwrap();
        let from = all.partition_point(|(k, _)| *k < target);
        let want: Vec<_> = all[from..].iter().take(20).cloned().collect();
        assert_eq!(collect(&mut it, 20), want, "seek {target:?}");
    }
}

#[test]
fn random_tables_round_trip_through_the_device() {
    for (seed, logical_block_bytes) in [(1u64, 512u32), (2, 4096), (3, 512)] {
        let env = Env::new(logical_block_bytes);
        let mut rng = Rng::from_seed(seed);
        let (builder, model) = random_table(&mut rng, TableId(seed), 4000);
        let (meta, _) = env.write(builder);
        assert_eq!(meta.entries as usize, model.len());
        assert_eq!(&meta.smallest, model.keys().next().unwrap());
        assert_eq!(&meta.largest, model.keys().next_back().unwrap());
        let table = env.open(&meta).unwrap();
        assert!(table.block_count() > 10);
        check_against_model(&table, &model, &mut rng);
    }
}

#[test]
fn a_table_fills_its_segment_and_refuses_the_next_entry() {
    let env = Env::new(512);
    let mut builder = TableBuilder::new(TableId(7), TableOptions::default());
    let mut model = Model::new();
    let value = vec![0x5a; 1024];
    let mut i = 0u64;
    loop {
        let key = InternalKey::new(format!("inode:{i:010}").into_bytes(), 1 + i, ValueKind::Put);
        if !builder.add_key(&key, &value) {
            break;
        }
        model.insert(key, value.clone());
        i += 1;
        assert!(
            i < 10_000,
            "a 2 MiB table holds fewer than 10k 1 KiB entries"
        );
    }
    let len = builder.estimated_len();
    assert!(
        len <= 2 << 20 && len > (2 << 20) - 8192,
        "full: {len} bytes"
    );
    // The refused entry opens the next table.
    let mut next = TableBuilder::new(TableId(8), TableOptions::default());
    let refused = InternalKey::new(format!("inode:{i:010}").into_bytes(), 1 + i, ValueKind::Put);
    assert!(next.add_key(&refused, &value));
    let (meta, bytes) = env.write(builder);
    assert_eq!(bytes.len(), len);
    let table = env.open(&meta).unwrap();
    let mut rng = Rng::from_seed(9);
    for _ in 0..500 {
        let k = model
            .keys()
            .nth(rng.below(model.len() as u64) as usize)
            .unwrap();
        assert_eq!(
            table.get(&k.user_key, Seq::MAX).unwrap(),
            Some((k.seq, k.kind, value.clone()))
        );
    }
    let mut it = table.iter();
    it.seek_to_first().unwrap();
    assert_eq!(collect(&mut it, usize::MAX).len(), model.len());
}

/// Where each structure lies in a written table.
fn footer_of(bytes: &[u8], meta: &TableMeta) -> Footer {
    Footer::decode(
        &bytes[bytes.len() - FOOTER_BYTES..],
        meta.id,
        meta.len_bytes,
    )
    .unwrap()
}

fn is_table_corruption(e: &MetaDbError, id: TableId, what: &str) -> bool {
    matches!(e, MetaDbError::Corruption { what: w, .. } if w.contains(&format!("table {}", id.0)) && w.contains(what))
}

#[test]
fn a_flipped_byte_in_any_structure_is_reported_never_served() {
    let mut rng = Rng::from_seed(21);
    let (_, model) = random_table(&mut rng, TableId(30), 1500);
    let build = || {
        let mut b = TableBuilder::new(TableId(30), TableOptions::default());
        for (k, v) in &model {
            assert!(b.add_key(k, v));
        }
        b
    };
    let (probe_meta, bytes) = Env::new(512).write(build());
    let footer = footer_of(&bytes, &probe_meta);
    let cases: [(&str, usize); 6] = [
        ("data block", 10),
        ("data block", footer.index.offset as usize - 3),
        ("index block", footer.index.offset as usize + 2),
        ("bloom block", footer.bloom.offset as usize + 1),
        ("bloom block", footer.bloom.end() as usize - 1),
        ("footer", bytes.len() - FOOTER_BYTES + 20),
    ];
    for (what, at) in cases {
        let env = Env::new(512);
        let (meta, _) = env.write(build());
        env.flip(&meta, at);
        let table = match env.open(&meta) {
            Err(e) => {
                assert!(
                    is_table_corruption(&e, meta.id, what),
                    "{what} at {at}: {e}"
                );
                continue;
            }
            Ok(t) => t,
        };
        assert_eq!(what, "data block", "only data blocks are read lazily");
        // Every lookup returns the right answer or a corruption error; some fail.
        let mut failures = 0;
        for k in model.keys() {
            match table.get(&k.user_key, Seq::MAX) {
                Ok(got) => assert_eq!(got, model_get(&model, &k.user_key, Seq::MAX)),
                Err(e) => {
                    assert!(
                        is_table_corruption(&e, meta.id, "data block at offset"),
                        "{e}"
                    );
                    failures += 1;
                }
            }
        }
        assert!(failures > 0, "{what} at {at}: the corrupted block was read");
        let mut it = table.iter();
        let scan = it.seek_to_first().and_then(|_| {
            while it.valid() {
                it.next()?;
            }
            Ok(())
        });
        assert!(scan.is_err_and(|e| is_table_corruption(&e, meta.id, "data block")));
        assert!(!it.valid(), "an iterator is invalid after an error");
    }
}

#[test]
fn the_manifest_entry_must_match_the_table() {
    let env = Env::new(512);
    let mut rng = Rng::from_seed(4);
    let (builder, _) = random_table(&mut rng, TableId(40), 300);
    let (meta, _) = env.write(builder);
    let wrong_id = TableMeta {
        id: TableId(41),
        ..meta.clone()
    };
    assert!(env
        .open(&wrong_id)
        .is_err_and(|e| is_table_corruption(&e, TableId(41), "footer")));
    let wrong_entries = TableMeta {
        entries: meta.entries + 1,
        ..meta.clone()
    };
    assert!(env
        .open(&wrong_entries)
        .is_err_and(|e| is_table_corruption(&e, meta.id, "footer")));
    let wrong_len = TableMeta {
        len_bytes: meta.len_bytes + 4096,
        ..meta.clone()
    };
    assert!(env.open(&wrong_len).is_err());
    let odd_len = TableMeta {
        len_bytes: 1000,
        ..meta.clone()
    };
    assert!(env
        .open(&odd_len)
        .is_err_and(|e| is_table_corruption(&e, meta.id, "manifest entry")));
    let mut largest = meta.largest.clone();
    largest.seq += 1;
    let wrong_largest = TableMeta {
        largest,
        ..meta.clone()
    };
    assert!(env.open(&wrong_largest).is_err_and(|e| is_table_corruption(
        &e,
        meta.id,
        "index block"
    )));
    // An older table left in a reused segment does not pass as the new one.
    let (builder, _) = random_table(&mut rng, TableId(42), 300);
    let (newer, _) = env.write(builder);
    let stale = TableMeta {
        segment: meta.segment,
        ..newer
    };
    assert!(env.open(&stale).is_err());
    assert!(env.open(&meta).is_ok());
}

#[test]
fn bloom_filter_false_positives_stay_under_two_percent() {
    let env = Env::new(512);
    let mut builder = TableBuilder::new(TableId(50), TableOptions::default());
    let keys = 50_001u64;
    for i in 0..keys {
        // Multiples of 3 present; the 100k numbers between them, inside the range, absent.
        assert!(builder.add(format!("k{:09}", 3 * i).as_bytes(), 1, ValueKind::Put, b"v"));
    }
    let (meta, _) = env.write(builder);
    let table = env.open(&meta).unwrap();
    let absent = 100_000u64;
    for i in 0..absent {
        let key = format!("k{:09}", 3 * (i / 2) + 1 + i % 2);
        assert_eq!(table.get(key.as_bytes(), Seq::MAX).unwrap(), None);
    }
    let stats = table.stats();
    assert_eq!(stats.bloom_skips + stats.bloom_false_positives, absent);
    println!(
        "bloom: {} false positives in {absent} absent keys",
        stats.bloom_false_positives
    );
    assert!(
        stats.bloom_false_positives < absent / 50,
        "{} false positives in {absent}",
        stats.bloom_false_positives
    );
    assert!(stats.bloom_false_positives > 0);
}

#[test]
fn the_second_read_of_a_block_comes_from_the_cache() {
    let env = Env::new(512);
    let mut rng = Rng::from_seed(60);
    let (builder, model) = random_table(&mut rng, TableId(60), 2000);
    let (meta, _) = env.write(builder);
    let table = env.open(&meta).unwrap();
    let reads = || {
        env.device
            .counters()
            .snapshot()
            .cause(IoCause::Table)
            .read_ops
    };
    let key = model.keys().nth(model.len() / 2).unwrap();
    let before = reads();
    assert!(table.get(&key.user_key, Seq::MAX).unwrap().is_some());
    assert_eq!(reads(), before + 1, "first lookup reads one block");
    for _ in 0..10 {
        assert!(table.get(&key.user_key, Seq::MAX).unwrap().is_some());
    }
    assert_eq!(reads(), before + 1, "later lookups hit the cache");
    assert_eq!(table.stats().block_reads, 1);
    let s = env.cache.stats();
    assert_eq!((s.hits, s.misses), (10, 1));
    // A scan reads each block once and leaves them all cached.
    let mut it = table.iter();
    it.seek_to_first().unwrap();
    assert_eq!(collect(&mut it, usize::MAX).len(), model.len());
    assert_eq!(reads(), before + table.block_count() as u64);
    it.seek_to_first().unwrap();
    collect(&mut it, usize::MAX);
    assert_eq!(reads(), before + table.block_count() as u64);
    // After invalidation the block is read again.
    env.cache.invalidate_table(meta.id);
    assert!(table.get(&key.user_key, Seq::MAX).unwrap().is_some());
    assert_eq!(reads(), before + table.block_count() as u64 + 1);
}

#[test]
fn a_small_table_is_read_whole_at_open_and_its_lookups_read_nothing() {
    let env = Env::new(512);
    let mut rng = Rng::from_seed(61);
    let (builder, model) = random_table(&mut rng, TableId(61), 100);
    let (meta, bytes) = env.write(builder);
    assert!(bytes.len() <= metadb::table::reader::SMALL_TABLE_BYTES && bytes.len() > 4096);
    let reads = || env.device.counters().snapshot().cause(IoCause::Table);
    let before = reads();
    let table = env.open(&meta).unwrap();
    let opened = reads();
    assert_eq!(opened.read_ops, before.read_ops + 1, "one read at open");
    assert_eq!(opened.read_bytes, before.read_bytes + bytes.len() as u64);
    check_against_model(&table, &model, &mut rng);
    assert_eq!(
        reads().read_ops,
        opened.read_ops,
        "lookups and scans read nothing"
    );
    assert_eq!(table.stats().block_reads, 0);

    // A bad data block does not fail the open: the lookups that need it fail, others
    // are served from the cache.
    let env = Env::new(512);
    let mut rng = Rng::from_seed(61);
    let (builder, model) = random_table(&mut rng, TableId(61), 100);
    let (meta, _) = env.write(builder);
    env.flip(&meta, 10);
    let table = env.open(&meta).expect("opens despite a bad data block");
    let mut failures = 0;
    for k in model.keys() {
        match table.get(&k.user_key, Seq::MAX) {
            Ok(got) => assert_eq!(got, model_get(&model, &k.user_key, Seq::MAX)),
            Err(e) => {
                assert!(is_table_corruption(&e, meta.id, "data block"), "{e}");
                failures += 1;
            }
        }
    }
    assert!(
        failures > 0 && failures < model.len(),
        "{failures} failures"
    );
}

#[test]
fn a_table_opened_from_its_written_bytes_reads_nothing_and_serves_from_the_cache() {
    let env = Env::new(512);
    let mut rng = Rng::from_seed(61);
    let (builder, model) = random_table(&mut rng, TableId(61), 3000);
    let (meta, bytes) = env.write(builder);
    let reads = || {
        env.device
            .counters()
            .snapshot()
            .cause(IoCause::Table)
            .read_ops
    };
    let before = reads();
    let offset = env.pool.offset(meta.segment);
    let (device, cache) = (Arc::clone(&env.device), Arc::clone(&env.cache));
    let table = Table::open_written(
        device,
        offset,
        meta.clone(),
        cache,
        &bytes,
        CacheFill::Evicting,
    )
    .unwrap();
    let table = Arc::new(table);
    assert!(table.block_count() > 10);
    assert_eq!(env.cache.stats().blocks, table.block_count());
    check_against_model(&table, &model, &mut rng);
    assert_eq!(
        reads(),
        before,
        "everything came from the bytes and the cache"
    );
    assert_eq!(table.stats().block_reads, 0);
    // Without filling, blocks are read from the device as after `Table::open`.
    env.cache.invalidate_table(meta.id);
    let (device, cache) = (Arc::clone(&env.device), Arc::clone(&env.cache));
    let plain =
        Table::open_written(device, offset, meta.clone(), cache, &bytes, CacheFill::None).unwrap();
    assert_eq!(reads(), before);
    assert_eq!(env.cache.stats().blocks, 0);
    let key = model.keys().nth(model.len() / 3).unwrap();
    assert!(plain.get(&key.user_key, Seq::MAX).unwrap().is_some());
    assert_eq!(reads(), before + 1);
    // A damaged buffer is reported like a damaged table on the device.
    let mut bad = bytes.clone();
    bad[10] ^= 0x40;
    let (device, cache) = (Arc::clone(&env.device), Arc::clone(&env.cache));
    let Err(err) = Table::open_written(
        device,
        offset,
        meta.clone(),
        cache,
        &bad,
        CacheFill::Evicting,
    ) else {
        panic!("a flipped byte in a data block was served");
    };
    assert!(is_table_corruption(&err, meta.id, "data block"), "{err}");
}

#[test]
fn compaction_reads_bypass_the_cache() {
    use metadb::table::reader::ReadOptions;
    let env = Env::new(512);
    let mut rng = Rng::from_seed(61);
    let (builder, model) = random_table(&mut rng, TableId(61), 1000);
    let (meta, _) = env.write(builder);
    let table = env.open(&meta).unwrap();
    let mut it = table.iter_with(ReadOptions::COMPACTION);
    it.seek_to_first().unwrap();
    assert_eq!(collect(&mut it, usize::MAX).len(), model.len());
    let io = env.device.counters().snapshot().cause(IoCause::Compaction);
    // Read-ahead: the whole table's data blocks in one device read, not one per block.
    assert!(table.block_count() > 1);
    assert_eq!(io.read_ops, 1);
    assert_eq!(env.cache.stats().blocks, 0);
}

#[test]
fn merging_three_tables_and_a_memory_iterator_yields_the_sorted_union() {
    let env = Env::new(512);
    let mut rng = Rng::from_seed(70);
    let mut union = Model::new();
    let mut children: Vec<Box<dyn InternalIterator + Send>> = Vec::new();
    // Three tables and a memtable-like vector over overlapping keys, distinct seqs, so
    // each user key has versions in several sources.
    let mut seq = 1;
    for source in 0..4u64 {
        let mut part = Model::new();
        for _ in 0..1500 {
            let key = format!("k{:04}", rng.below(800)).into_bytes();
            let kind = if rng.chance(1, 6) {
                ValueKind::Delete
            } else {
                ValueKind::Put
            };
            let value = if kind == ValueKind::Put {
                random_value(&mut rng)
            } else {
                Vec::new()
            };
            part.insert(InternalKey::new(key, seq, kind), value);
            seq += 1;
        }
        union.extend(part.clone());
        if source < 3 {
            let mut b = TableBuilder::new(TableId(70 + source), TableOptions::default());
            for (k, v) in &part {
                assert!(b.add_key(k, v));
            }
            let (meta, _) = env.write(b);
            children.push(Box::new(env.open(&meta).unwrap().iter()));
        } else {
            children.push(Box::new(VecIterator::new(part.into_iter().collect())));
        }
    }
    let all: Vec<(InternalKey, Vec<u8>)> = union.into_iter().collect();
    let mut m = MergingIterator::new(children);
    m.seek_to_first().unwrap();
    assert_eq!(collect(&mut m, usize::MAX), all);
    for _ in 0..300 {
        let target = InternalKey::seek_key(
            format!("k{:04}", rng.below(820)).as_bytes(),
            rng.below(seq + 10),
        );
        m.seek(&target).unwrap();
        let from = all.partition_point(|(k, _)| *k < target);
        let want: Vec<_> = all[from..].iter().take(30).cloned().collect();
        assert_eq!(collect(&mut m, 30), want, "seek {target:?}");
    }
}

/// Cached point lookups against a `BTreeMap` lookup of the same keys, in the same run.
/// `cargo test -p metadb --release --test table -- --ignored --nocapture get_latency`
#[test]
#[ignore = "benchmark: prints figures, asserts nothing about speed"]
fn get_latency_from_cache() {
    let env = Env::new(512);
    let mut builder = TableBuilder::new(TableId(80), TableOptions::default());
    let mut model = BTreeMap::new();
    for i in 0..20_000u64 {
        let key = format!("m:{}:name-{i:08}", i % 97).into_bytes();
        model.insert(key, vec![1u8; 64]);
    }
    for (k, v) in &model {
        assert!(builder.add(k, 7, ValueKind::Put, v));
    }
    let (meta, _) = env.write(builder);
    let table = env.open(&meta).unwrap();
    let keys: Vec<&Vec<u8>> = model.keys().collect();
    for k in &keys {
        table.get(k, Seq::MAX).unwrap();
    }
    let rounds = 20;
    let start = std::time::Instant::now();
    let mut found = 0;
    for _ in 0..rounds {
        for k in &keys {
            found += table.get(k, Seq::MAX).unwrap().is_some() as usize;
        }
    }
    let table_ns = start.elapsed().as_nanos() as f64 / (rounds * keys.len()) as f64;
    let start = std::time::Instant::now();
    for _ in 0..rounds {
        for k in &keys {
            found += model.get(*k).map(|v| v.to_vec()).is_some() as usize;
        }
    }
    let btree_ns = start.elapsed().as_nanos() as f64 / (rounds * keys.len()) as f64;
    let absent_start = std::time::Instant::now();
    for i in 0..rounds * keys.len() {
        found += table
            .get(format!("m:{}:zz{i}", i % 97).as_bytes(), Seq::MAX)
            .unwrap()
            .is_some() as usize;
    }
    let absent_ns = absent_start.elapsed().as_nanos() as f64 / (rounds * keys.len()) as f64;
    assert_eq!(found, 2 * rounds * keys.len());
    println!(
        "cached table get: {table_ns:.0} ns; BTreeMap get+clone: {btree_ns:.0} ns (ratio {:.1}); absent key (bloom, incl. key formatting): {absent_ns:.0} ns",
        table_ns / btree_ns
    );
}

/// The default block cache is a sixteenth of memory, 64 MiB to 2 GiB.
#[test]
fn the_block_cache_is_sized_from_memory() {
    use metadb::MetaDbConfig;
    const MIB: u64 = 1 << 20;
    assert_eq!(MetaDbConfig::block_cache_for_memory(0), 64 << 20);
    assert_eq!(MetaDbConfig::block_cache_for_memory(512 * MIB), 64 << 20);
    assert_eq!(MetaDbConfig::block_cache_for_memory(24 << 30), 1536 << 20);
    assert_eq!(MetaDbConfig::block_cache_for_memory(1 << 40), 2 << 30);
}
