//! MetaDB under crashes (ssd mode): at every crash state of a random single-threaded
//! workload, recovery succeeds and the database equals the model after some prefix of
//! the operations that includes every sync write acknowledged before the crash.

use device::recording::{CrashPolicy, RecordingBackend};
use device::Device;
use format::constants::MIB;
use format::Geometry;
use metadb::{Durability, MetaDb, MetaDbConfig, MetaDbEnv, SegmentPool, WriteBatch};
use platform::Rng;
use std::collections::BTreeMap;
use std::sync::Arc;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

const IMAGE_BYTES: u64 = 64 * MIB;

fn config() -> MetaDbConfig {
    MetaDbConfig {
        lanes: 2,
        memtable_bytes: 24 << 10,
        background: false,
        ..MetaDbConfig::default()
    }
}

fn open(device: Arc<Device>, geometry: Geometry) -> Result<MetaDb, metadb::MetaDbError> {
    let env = MetaDbEnv {
        device,
        pmr: None,
        geometry,
        table_store: Arc::new(SegmentPool::whole(geometry)),
        hooks: None,
    };
    MetaDb::open(env, config())
}

fn contents(db: &MetaDb) -> Model {
    db.range(b"", None, None)
        .unwrap()
        .map(|r| r.unwrap())
        .collect()
}

struct Run {
    /// Model after each operation (index 0: before any).
    models: Vec<Model>,
    /// For each operation: was it a sync write, and how many device writes had completed
    /// when it returned.
    ops: Vec<(bool, u64)>,
}

fn workload(
    seed: u64,
    dev: &Arc<Device>,
    geometry: Geometry,
    handle: &device::recording::RecordingHandle,
) -> Run {
    let db = open(dev.clone(), geometry).unwrap();
    let mut rng = Rng::from_seed(seed);
    let mut model = Model::new();
    let mut run = Run {
        models: vec![model.clone()],
        ops: Vec::new(),
    };
    for _ in 0..160 {
        let sync = rng.chance(1, 4);
        let durability = if sync {
            Durability::Sync
        } else {
            Durability::Buffered
        };
        let mut batch = WriteBatch::new();
        for _ in 0..1 + rng.below(3) {
            let key = format!("m:{}:{}", rng.below(3), rng.below(60)).into_bytes();
            if rng.chance(1, 4) {
                batch.delete(key.clone());
                model.remove(&key);
            } else {
                let value = vec![rng.below(256) as u8; 1 + rng.below(300) as usize];
                batch.put(key.clone(), value.clone());
                model.insert(key, value);
            }
        }
        db.write(&batch, durability).unwrap();
        match rng.below(40) {
            0 => db.flush().unwrap(),
            1 => db.compact().unwrap(),
            _ => {}
        }
        run.models.push(model.clone());
        run.ops.push((sync, handle.write_count()));
    }
    db.close().unwrap();
    run
}

#[test]
fn recovery_at_every_crash_state_keeps_a_prefix_with_all_acknowledged_sync_writes() {
    let geometry = Geometry::compute(IMAGE_BYTES, 1).unwrap();
    for seed in [11, 12] {
        let (backend, handle) = RecordingBackend::new(vec![0; IMAGE_BYTES as usize], 512);
        let dev = Arc::new(Device::new(Box::new(backend)));
        let run = workload(seed, &dev, geometry, &handle);
        let recording = handle.snapshot();
        let states = recording.crash_states(&CrashPolicy {
            states_max: 250,
            ..CrashPolicy::with_seed(seed)
        });
        for state in &states.states {
            let durable = state.durable_writes();
            // Every sync write whose device writes were all durable must be present.
            let required = run
                .ops
                .iter()
                .rposition(|(sync, writes)| *sync && *writes <= durable)
                .map_or(0, |i| i + 1);
            let crashed = Arc::new(recording.device(state, 512));
            let db = open(crashed, geometry)
                .unwrap_or_else(|e| panic!("seed {seed} state {state}: recovery failed: {e}"));
            let got = contents(&db);
            let matched = (required..run.models.len()).find(|&k| run.models[k] == got);
            assert!(
                matched.is_some(),
                "seed {seed} state {state}: recovered {} keys, equal to no model state from op {required} on",
                got.len()
            );
            drop(db);
        }
        eprintln!(
            "seed {seed}: {} crash states checked ({} skipped)",
            states.states.len(),
            states.skipped_count
        );
    }
}
