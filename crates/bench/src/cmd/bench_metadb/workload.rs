//! The workloads of `augefs bench metadb`, driven identically against MetaDB and fjall:
//! parallel puts for a fixed time, a single-threaded load that notes its pace as the
//! store grows, and timed random gets.
//!
//! Invariants:
//! - Every thread writes keys of its own index range ([`THREAD_STRIDE`]), so no two
//!   threads ever write the same key (the file system's locking guarantees the same,
//!   docs/DESIGN.md §6).
//! - A put run is timed as `crate::threads` times every run; work to make
//!   buffered writes durable afterwards is not in it.
//! - Every get must find the value the load wrote; anything else is an error, not a
//!   sample.

use super::keys::{key_into, value_into, THREAD_STRIDE, VALUE_BYTES};
use crate::threads::{self, Limit, Run};
use platform::Rng;
use std::time::Instant;

/// A key-value store under test.
pub trait Store: Sync {
    /// One put; `sync`: durable when the call returns.
    fn put(&self, key: &[u8], value: &[u8], sync: bool) -> Result<(), String>;
    /// Brings background work up to date (memtables flushed, compaction done), untimed,
    /// so that one run's debt does not slow the next.
    fn settle(&self) -> Result<(), String>;
}

/// Buffered puts check the deadline once per this many puts (a clock read costs about
/// 2% of a buffered put); synchronous puts check before every put.
const DEADLINE_CHECK_PUTS: u64 = 16;

/// Puts from `threads` threads until `limit`; thread `t` writes key indexes from
/// `t * THREAD_STRIDE + first_index` on.
pub fn put_throughput(
    store: &dyn Store,
    threads: usize,
    sync: bool,
    limit: Limit,
    first_index: u64,
) -> Result<Run, String> {
    // No thread comes near 10^11 puts in a run; the cap keeps key ranges disjoint.
    let stride_left = THREAD_STRIDE - first_index % THREAD_STRIDE;
    let limit = Limit {
        ops_per_thread: Some(limit.ops_per_thread.unwrap_or(u64::MAX).min(stride_left)),
        ..limit
    };
    let check_every = if sync { 1 } else { DEADLINE_CHECK_PUTS };
    threads::timed(threads, limit, check_every, |thread| {
        let base = thread as u64 * THREAD_STRIDE + first_index;
        let mut key = Vec::with_capacity(32);
        let mut value = [0u8; VALUE_BYTES];
        Ok(move |i: u64| {
            key_into(base + i, &mut key);
            value_into(base + i, &mut value);
            store.put(&key, &value, sync)
        })
    })
}

/// Parts of a load the pace is noted for.
pub const LOAD_PARTS: u64 = 10;

/// The pace of a load: `part_rates[i]` is puts per second over keys
/// `[i * keys / 10, (i + 1) * keys / 10)`.
#[derive(Debug, Clone)]
pub struct LoadRun {
    pub keys: u64,
    pub elapsed_ns: u64,
    pub part_rates: Vec<f64>,
}

impl LoadRun {
    pub fn ops_per_sec(&self) -> f64 {
        self.keys as f64 * 1e9 / self.elapsed_ns.max(1) as f64
    }

    /// Pace over the first tenth of the keys (a store of up to keys / 10).
    pub fn first_part_rate(&self) -> f64 {
        self.part_rates[0]
    }

    /// Pace over the last tenth of the keys (a store of up to `keys`).
    pub fn last_part_rate(&self) -> f64 {
        self.part_rates[self.part_rates.len() - 1]
    }
}

/// Puts keys `0..keys` (buffered) from one thread; `progress` hears of every tenth.
pub fn load(
    store: &dyn Store,
    keys: u64,
    mut progress: impl FnMut(u64, f64),
) -> Result<LoadRun, String> {
    assert!(keys >= LOAD_PARTS, "a load of at least {LOAD_PARTS} keys");
    let mut key = Vec::with_capacity(32);
    let mut value = [0u8; VALUE_BYTES];
    let mut part_rates = Vec::with_capacity(LOAD_PARTS as usize);
    let started = Instant::now();
    let mut part_started = started;
    let mut index = 0;
    for part in 1..=LOAD_PARTS {
        let end = keys * part / LOAD_PARTS;
        let part_keys = end - index;
        while index < end {
            key_into(index, &mut key);
            value_into(index, &mut value);
            store.put(&key, &value, false)?;
            index += 1;
        }
        let now = Instant::now();
        let rate = part_keys as f64 / now.duration_since(part_started).as_secs_f64().max(1e-9);
        part_rates.push(rate);
        progress(end, rate);
        part_started = now;
    }
    Ok(LoadRun {
        keys,
        elapsed_ns: started.elapsed().as_nanos() as u64,
        part_rates,
    })
}

/// A get of a key: its value, if any.
pub type Getter<'a> = dyn Fn(&[u8]) -> Result<Option<Vec<u8>>, String> + 'a;

/// Latencies of timed random gets.
#[derive(Debug, Clone)]
pub struct GetRun {
    /// Nanoseconds per get, ascending.
    pub latencies_ns: Vec<u64>,
    pub elapsed_ns: u64,
}

impl GetRun {
    pub fn ops_per_sec(&self) -> f64 {
        self.latencies_ns.len() as f64 * 1e9 / self.elapsed_ns.max(1) as f64
    }
}

/// `count` gets of keys drawn uniformly from `0..keys`, each timed; every one must
/// return the loaded value.
pub fn random_gets(get: &Getter<'_>, keys: u64, count: u64, seed: u64) -> Result<GetRun, String> {
    let mut rng = Rng::from_seed(seed);
    let mut key = Vec::with_capacity(32);
    let mut expected = [0u8; VALUE_BYTES];
    let mut latencies_ns = Vec::with_capacity(count as usize);
    let started = Instant::now();
    for _ in 0..count {
        let index = rng.below(keys);
        key_into(index, &mut key);
        let before = Instant::now();
        let found = get(&key)?;
        latencies_ns.push(before.elapsed().as_nanos() as u64);
        value_into(index, &mut expected);
        if found.as_deref() != Some(&expected[..]) {
            return Err(format!(
                "get of loaded key {} returned {}",
                String::from_utf8_lossy(&key),
                match found {
                    None => "nothing".to_string(),
                    Some(v) => format!("a wrong {}-byte value", v.len()),
                }
            ));
        }
    }
    let elapsed_ns = started.elapsed().as_nanos() as u64;
    latencies_ns.sort_unstable();
    Ok(GetRun {
        latencies_ns,
        elapsed_ns,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    #[derive(Default)]
    struct MapStore {
        map: Mutex<BTreeMap<Vec<u8>, Vec<u8>>>,
    }

    impl Store for MapStore {
        fn put(&self, key: &[u8], value: &[u8], _sync: bool) -> Result<(), String> {
            let old = self
                .map
                .lock()
                .unwrap()
                .insert(key.to_vec(), value.to_vec());
            assert!(old.is_none(), "a key was written twice");
            Ok(())
        }

        fn settle(&self) -> Result<(), String> {
            Ok(())
        }
    }

    #[test]
    fn threads_write_disjoint_keys_up_to_the_cap() {
        let store = MapStore::default();
        let limit = Limit {
            duration: std::time::Duration::from_secs(60),
            ops_per_thread: Some(500),
        };
        let run = put_throughput(&store, 4, true, limit, 0).unwrap();
        assert_eq!(run.ops, 2000);
        assert_eq!(store.map.lock().unwrap().len(), 2000);
        assert!(run.ops_per_sec() > 0.0);
    }

    #[test]
    fn load_then_gets_find_every_value() {
        let store = MapStore::default();
        let mut heard = Vec::new();
        let run = load(&store, 1000, |keys, _| heard.push(keys)).unwrap();
        assert_eq!(heard, (1..=10).map(|i| i * 100).collect::<Vec<_>>());
        assert_eq!(run.part_rates.len(), 10);
        let get = |k: &[u8]| Ok(store.map.lock().unwrap().get(k).cloned());
        let gets = random_gets(&get, 1000, 300, 7).unwrap();
        assert_eq!(gets.latencies_ns.len(), 300);
        let missing = |_: &[u8]| Ok(None);
        assert!(random_gets(&missing, 1000, 1, 7).is_err());
    }
}
