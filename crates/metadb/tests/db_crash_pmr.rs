//! MetaDB under crashes in PMR mode: at operation boundaries the PMR loses a random subset
//! of its unpersisted 64-byte lines (the PMR crash model) while the device keeps what it
//! holds; recovery must equal the model after some prefix of the operations that includes
//! every acknowledged sync write.

use device::memory::MemoryBackend;
use device::recording::RecordingBackend;
use device::Device;
use format::constants::MIB;
use format::Geometry;
use metadb::{Durability, MetaDb, MetaDbConfig, MetaDbEnv, SegmentPool, WriteBatch};
use platform::Rng;
use pmr::{Pmr, PmrOptions};
use std::collections::BTreeMap;
use std::sync::Arc;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

const IMAGE_BYTES: u64 = 64 * MIB;
const PMR_BYTES: u64 = 2 * MIB;

fn open(device: Arc<Device>, pmr: Arc<Pmr>, geometry: Geometry) -> MetaDb {
    let env = MetaDbEnv {
        device,
        pmr: Some(pmr),
        geometry,
        table_store: Arc::new(SegmentPool::whole(geometry)),
        hooks: None,
    };
    let config = MetaDbConfig {
        lanes: 2,
        memtable_bytes: 48 << 10,
        background: false,
        ..MetaDbConfig::default()
    };
    MetaDb::open(env, config).expect("recovery succeeds")
}

fn contents(db: &MetaDb) -> Model {
    db.range(b"", None, None)
        .unwrap()
        .map(|r| r.unwrap())
        .collect()
}

#[test]
fn pmr_mode_recovers_a_prefix_with_every_acknowledged_sync_write() {
    let geometry = Geometry::compute(IMAGE_BYTES, 1).unwrap();
    for seed in [21u64, 22, 23] {
        let (backend, handle) = RecordingBackend::new(vec![0; IMAGE_BYTES as usize], 512);
        let device = Arc::new(Device::new(Box::new(backend)));
        let pmr = Arc::new(Pmr::memory(PMR_BYTES, PmrOptions::default()).unwrap());
        pmr::format_region(&pmr, [7; 16]).unwrap();
        let db = open(device.clone(), pmr.clone(), geometry);
        let mut rng = Rng::from_seed(seed);
        let mut models = vec![Model::new()];
        let mut last_sync = 0;
        let mut checked = 0;
        for op in 1..=220 {
            let mut model = models.last().unwrap().clone();
            let sync = rng.chance(1, 3);
            let mut batch = WriteBatch::new();
            for _ in 0..1 + rng.below(3) {
                let key = format!("m:{}:{}", rng.below(3), rng.below(80)).into_bytes();
                if rng.chance(1, 4) {
                    batch.delete(key.clone());
                    model.remove(&key);
                } else {
                    let value = vec![op as u8; 1 + rng.below(400) as usize];
                    batch.put(key.clone(), value.clone());
                    model.insert(key, value);
                }
            }
            db.write(
                &batch,
                if sync {
                    Durability::Sync
                } else {
                    Durability::Buffered
                },
            )
            .unwrap();
            if sync {
                last_sync = op;
            }
            models.push(model);
            if rng.chance(1, 30) {
                db.flush().unwrap();
            }
            if op % 7 == 0 {
                // Crash here: the device keeps everything it was given, the PMR loses a
                // random subset of its unpersisted lines.
                let image = handle.current_image();
                let pmr_image = pmr.crash_image(&mut rng);
                let crashed_dev =
                    Arc::new(Device::new(Box::new(MemoryBackend::from_image(image, 512))));
                let crashed_pmr =
                    Arc::new(Pmr::memory_from_image(&pmr_image, PmrOptions::default()).unwrap());
                let recovered = open(crashed_dev, crashed_pmr, geometry);
                let got = contents(&recovered);
                assert!(
                    (last_sync..=op).any(|k| models[k] == got),
                    "seed {seed} op {op}: recovered {} keys, equal to no model from op {last_sync} to {op}",
                    got.len()
                );
                drop(recovered);
                checked += 1;
            }
        }
        assert!(checked >= 30);
        db.close().unwrap();
    }
}
