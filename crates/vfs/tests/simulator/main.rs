//! The reference-model simulator: actors (threads) run random operations against one
//! mounted augefs, each on its own names in a private directory and in a shared one,
//! each checked exactly against its own model as it goes (model.rs, actor.rs). Between
//! epochs, with every actor stopped and every file closed, the whole tree is compared
//! with the merged models (check.rs); every few epochs and at the end the file system is
//! unmounted, fsck must find the image clean (data verified), and after a remount the
//! whole tree, data and attributes included, must equal the models. Every other remount
//! is of a crash image taken right after a sync with files open (orphans to reap).
//!
//! Sizes (docs/TESTING.md §1a): `SIM_SEEDS` seeds (from `SIM_FIRST`, default 1) of
//! `SIM_OPS` operations each, `SIM_ACTORS` threads, `SIM_DOMAINS` domains (default 3);
//! `SIM_SEED=S` runs seed S alone (to replay a failure, whose message prints the
//! command); `SIM_TRACE=1` prints every operation. Default (CI): 8 seeds x 128,000
//! operations, 4 actors (under a minute in the test profile on 2 cores).

mod actor;
mod check;
mod model;

use actor::{private_dir, Actor, SHARED};
use engine::log::EngineConfig;
use std::sync::Arc;
use std::time::Instant;
use testsupport::check::fsck_problems;
use testsupport::image::{crash_copy, memory_image};
use testsupport::mount::mount_with;
use vfs::{Creds, FileSystem};

/// Operations per actor between quiescent checks.
const EPOCH_OPS: u64 = 500;
/// Epochs between remounts (each with fsck).
const REMOUNT_EPOCHS: u64 = 10;

struct Config {
    seeds: Vec<u64>,
    ops: u64,
    actors: usize,
    domains: u32,
}

fn env(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name}={v} is not a number"))
    })
}

impl Config {
    fn from_env() -> Config {
        let seeds = match env("SIM_SEED") {
            Some(s) => vec![s],
            None => {
                let first = env("SIM_FIRST").unwrap_or(1);
                (first..first + env("SIM_SEEDS").unwrap_or(8)).collect()
            }
        };
        Config {
            seeds,
            ops: env("SIM_OPS").unwrap_or(128_000),
            actors: env("SIM_ACTORS").unwrap_or(4) as usize,
            domains: env("SIM_DOMAINS").unwrap_or(3) as u32,
        }
    }
}

fn mount(dev: &Arc<device::Device>) -> Arc<FileSystem> {
    let mut config = EngineConfig::default();
    // Small memtables: flushes and compactions happen often.
    config.metadb.memtable_bytes = 256 << 10;
    let fs = mount_with(dev, config);
    fs.set_creds(Creds::root());
    fs
}

/// fsck (check only, data verified) of the unmounted image finds nothing.
fn fsck_clean(dev: &Arc<device::Device>) -> Result<(), String> {
    let problems = fsck_problems(dev);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!("fsck: {}", problems.join("; ")))
    }
}

/// One seed: returns the operations run and the remounts done.
fn run(seed: u64, config: &Config) -> (u64, u64) {
    let dev = memory_image(256 << 20, config.domains);
    let mut fs = mount(&dev);
    fs.create_dir(SHARED, 0o777).unwrap();
    for i in 0..config.actors {
        fs.create_dir(&private_dir(i), 0o755).unwrap();
    }
    let mut actors: Vec<Actor> = (0..config.actors).map(|i| Actor::new(seed, i)).collect();
    let per_actor = config.ops.div_ceil(config.actors as u64);
    let (mut done, mut epoch, mut remounts) = (0, 0, 0);
    let mut dev = dev;
    while done < per_actor {
        let n = EPOCH_OPS.min(per_actor - done);
        epoch += 1;
        let remount = epoch % REMOUNT_EPOCHS == 0 || done + n == per_actor;
        // Every other remount (not the last) is a crash right after a sync, with the
        // actors' files still open: some nameless (unlinked, O_TMPFILE).
        let crash = remount && remounts % 2 == 1 && done + n < per_actor;
        std::thread::scope(|s| {
            for a in actors.iter_mut() {
                let fs = &fs;
                s.spawn(move || a.run(fs, n, crash));
            }
        });
        done += n;
        let at = format!("seed {seed} after epoch {epoch} ({done} operations per actor)");
        let crashed = crash.then(|| {
            fs.sync().unwrap_or_else(|e| panic!("{at}: sync: {e}"));
            crash_copy(&dev)
        });
        actors.iter_mut().for_each(Actor::close_all);
        let models: Vec<&model::Model> = actors.iter().map(|a| &a.model).collect();
        check::check_tree(&fs, &models, false).unwrap_or_else(|e| panic!("{at}: {e}"));
        if remount {
            Arc::into_inner(fs)
                .expect("no other reference")
                .unmount()
                .unwrap_or_else(|e| panic!("{at}: unmount: {e}"));
            // After a crash the nameless open files are orphans: fsck accepts them (their
            // records keep them), the mount frees them, and the block accounting of the
            // comparison shows it did.
            let what = if crash { "crash image" } else { "image" };
            dev = crashed.unwrap_or(dev);
            fsck_clean(&dev).unwrap_or_else(|e| panic!("{at}: {what}: {e}"));
            fs = mount(&dev);
            check::check_tree(&fs, &models, true)
                .unwrap_or_else(|e| panic!("{at}: {what} remounted: {e}"));
            remounts += 1;
        }
    }
    Arc::into_inner(fs).unwrap().unmount().unwrap();
    (done * config.actors as u64, remounts)
}

#[test]
fn simulator_matches_the_model() {
    let config = Config::from_env();
    let start = Instant::now();
    let mut total = 0;
    for &seed in &config.seeds {
        let t = Instant::now();
        let r = std::panic::catch_unwind(|| run(seed, &config));
        let (ops, remounts) = r.unwrap_or_else(|e| {
            eprintln!(
                "simulator: seed {seed} failed. Replay (each actor repeats its operations; \
                 the interleaving may differ): SIM_SEED={seed} SIM_OPS={} SIM_ACTORS={} \
                 SIM_DOMAINS={} cargo test -p vfs --test simulator (SIM_ACTORS=1 for one \
                 thread)",
                config.ops, config.actors, config.domains
            );
            std::panic::resume_unwind(e)
        });
        total += ops;
        let secs = t.elapsed().as_secs_f64();
        eprintln!(
            "simulator: seed {seed}: {ops} operations, {} actors, {remounts} remounts \
             with fsck, {secs:.1} s ({:.0} operations/s)",
            config.actors,
            ops as f64 / secs
        );
    }
    let secs = start.elapsed().as_secs_f64();
    eprintln!(
        "simulator: {total} operations over {} seeds in {secs:.1} s ({:.0} operations/s)",
        config.seeds.len(),
        total as f64 / secs
    );
}

/// A regression the single-threaded model found: RENAME_EXCHANGE of a file and a
/// directory in different parents moves one link count between the parents.
#[test]
fn exchange_of_a_file_and_a_directory_moves_one_link_between_parents() {
    for src_is_dir in [false, true] {
        let fs = mount(&memory_image(128 << 20, 3));
        fs.create_dir("/a", 0o755).unwrap();
        fs.create_dir("/a/dd", 0o755).unwrap();
        let (file, dir) = if src_is_dir {
            ("/a/dd/x", "/a/b")
        } else {
            ("/a/b", "/a/dd/x")
        };
        fs.create_dir(dir, 0o755).unwrap();
        vfs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&fs, file)
            .unwrap();
        fs.rename_path("/a/b", "/a/dd/x", vfs::RenameMode::Exchange)
            .unwrap();
        let a = fs.metadata("/a").unwrap().nlink;
        let dd = fs.metadata("/a/dd").unwrap().nlink;
        let want = if src_is_dir { (3, 3) } else { (4, 2) };
        assert_eq!((a, dd), want, "src is a directory: {src_is_dir}");
        Arc::into_inner(fs).unwrap().unmount().unwrap();
    }
}
