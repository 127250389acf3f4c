//! Shuttle explores interleavings of MetaDB's lock-free gates. Run with
//! `cargo test -p metadb --features shuttle --test shuttle_gates`.
#![cfg(feature = "shuttle")]

use metadb::gate::{InFlightGate, SeqGate};
use shuttle::sync::atomic::{AtomicU64, Ordering};
use shuttle::sync::Arc;
use shuttle::thread;

const ITERATIONS: usize = 2000;

/// No writer is inside a memtable after its switch drained it, and none that entered is
/// lost: every entered write is counted before drain returns.
#[test]
fn drain_waits_for_every_entered_writer() {
    shuttle::check_random(
        || {
            let gate = Arc::new(InFlightGate::new());
            let inserted = Arc::new(AtomicU64::new(0));
            let writers: Vec<_> = (0..3)
                .map(|_| {
                    let (gate, inserted) = (gate.clone(), inserted.clone());
                    thread::spawn(move || {
                        if gate.enter() {
                            inserted.fetch_add(1, Ordering::SeqCst);
                            gate.exit();
                            true
                        } else {
                            false
                        }
                    })
                })
                .collect();
            gate.seal();
            gate.drain();
            let at_drain = inserted.load(Ordering::SeqCst);
            let entered = writers
                .into_iter()
                .map(|w| w.join().unwrap())
                .filter(|e| *e)
                .count() as u64;
            assert_eq!(at_drain, entered, "a writer inserted after drain returned");
            assert!(!gate.enter());
        },
        ITERATIONS,
    );
}

/// A snapshot never includes a sequence number whose batch is still being inserted.
#[test]
fn snapshot_waits_for_in_flight_batches() {
    shuttle::check_random(
        || {
            let gate = Arc::new(SeqGate::new(0, 2));
            let done = Arc::new([
                AtomicU64::new(0),
                AtomicU64::new(0),
                AtomicU64::new(0),
                AtomicU64::new(0),
            ]);
            let writers: Vec<_> = (0..3)
                .map(|w| {
                    let (gate, done) = (gate.clone(), done.clone());
                    thread::spawn(move || {
                        let t = gate.begin(1, w);
                        done[t.first_seq as usize].store(1, Ordering::SeqCst);
                        gate.finish(t);
                    })
                })
                .collect();
            let s = gate.snapshot();
            for seq in 1..=s {
                assert_eq!(
                    done[seq as usize].load(Ordering::SeqCst),
                    1,
                    "snapshot {s} taken before seq {seq} was inserted"
                );
            }
            for w in writers {
                w.join().unwrap();
            }
        },
        ITERATIONS,
    );
}
