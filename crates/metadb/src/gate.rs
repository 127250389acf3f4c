//! The two lock-free gates of parallel request processing (augefs.txt §V-A).
//!
//! [`InFlightGate`]: the per-memtable in-flight counter, the only barrier between writers.
//! A writer `enter`s before logging and inserting and `exit`s after; the switching thread
//! `seal`s the memtable and `drain`s it, waiting until every writer that entered has left.
//! A writer that enters after the seal sees it and backs off (it retries on the new
//! memtable), so no insert can land in a memtable that is being flushed.
//!
//! [`SeqGate`]: makes snapshots consistent despite out-of-order insertion. Writers hold a
//! slot while their batch, whose sequence numbers they took with one atomic add, is not
//! yet fully inserted; a snapshot at S waits until no slot holds a sequence number `<= S`.
//!
//! Invariants (checked under shuttle in tests/shuttle_gates.rs):
//! - After `drain` returns, no writer is inside and none will enter (`enter` returns false).
//! - A snapshot at S is taken only when every batch with a first sequence `<= S` is
//!   fully inserted.
//!
//! Both use SeqCst on the flag/counter pair (a Dekker-style handshake: writer "increment,
//! then read sealed"; sealer "set sealed, then read counter"): at least one side sees the
//! other.

use crate::sync::{yield_now, AtomicBool, AtomicU64, Condvar, Mutex, Ordering};

#[derive(Debug, Default)]
pub struct InFlightGate {
    in_flight: AtomicU64,
    sealed: AtomicBool,
    lock: Mutex<()>,
    drained: Condvar,
}

impl InFlightGate {
    pub fn new() -> InFlightGate {
        InFlightGate::default()
    }

    /// Registers a writer. Returns false (and registers nothing) if the gate is sealed.
    pub fn enter(&self) -> bool {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        if self.sealed.load(Ordering::SeqCst) {
            self.exit();
            return false;
        }
        true
    }

    pub fn exit(&self) {
        let before = self.in_flight.fetch_sub(1, Ordering::SeqCst);
        assert!(before > 0, "exit without enter");
        if before == 1 && self.sealed.load(Ordering::SeqCst) {
            let _guard = self.lock.lock().expect("gate lock");
            self.drained.notify_all();
        }
    }

    pub fn seal(&self) {
        self.sealed.store(true, Ordering::SeqCst);
    }

    pub fn is_sealed(&self) -> bool {
        self.sealed.load(Ordering::SeqCst)
    }

    /// Waits until every writer that entered has exited. Requires `seal` first.
    pub fn drain(&self) {
        assert!(self.is_sealed(), "drain before seal");
        let mut guard = self.lock.lock().expect("gate lock");
        while self.in_flight.load(Ordering::SeqCst) != 0 {
            guard = self.drained.wait(guard).expect("gate lock");
        }
    }

    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::SeqCst)
    }
}

/// Slot value meaning "free".
const IDLE: u64 = u64::MAX;
/// Slot value meaning "taking a sequence number": its value is not known yet.
const PENDING: u64 = u64::MAX - 1;
/// The highest sequence number a batch may hold: the gate's slot values sit above it.
/// Decoders of numbers read from the device (WAL batches, manifest edits) refuse more.
pub const SEQ_MAX: u64 = PENDING - 2;

/// Sequence numbers and the writer slots that make snapshots consistent.
#[derive(Debug)]
pub struct SeqGate {
    /// The next sequence number to hand out (sequence numbers start at 1).
    next: AtomicU64,
    slots: Vec<AtomicU64>,
}

/// A writer's hold on a slot; give it back with [`SeqGate::finish`].
#[derive(Debug)]
#[must_use]
pub struct SeqTicket {
    slot: usize,
    pub first_seq: u64,
}

impl SeqGate {
    /// `slots` bounds the number of batches being inserted at once (writers beyond it
    /// wait for a free slot).
    pub fn new(last_seq: u64, slots: usize) -> SeqGate {
        assert!(slots > 0);
        assert!(last_seq <= SEQ_MAX);
        SeqGate {
            next: AtomicU64::new(last_seq + 1),
            slots: (0..slots).map(|_| AtomicU64::new(IDLE)).collect(),
        }
    }

    /// Takes `count` consecutive sequence numbers. `hint` spreads writers over slots.
    pub fn begin(&self, count: u64, hint: usize) -> SeqTicket {
        assert!(count > 0);
        let n = self.slots.len();
        let mut i = hint % n;
        loop {
            if self.slots[i]
                .compare_exchange(IDLE, PENDING, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                break;
            }
            i = (i + 1) % n;
            if i == hint % n {
                yield_now();
            }
        }
        let first_seq = self.next.fetch_add(count, Ordering::SeqCst);
        self.slots[i].store(first_seq, Ordering::SeqCst);
        SeqTicket { slot: i, first_seq }
    }

    /// The batch is fully inserted.
    pub fn finish(&self, ticket: SeqTicket) {
        let prev = self.slots[ticket.slot].swap(IDLE, Ordering::SeqCst);
        assert_eq!(prev, ticket.first_seq, "slot held by someone else");
    }

    /// The last sequence number handed out.
    pub fn last_issued(&self) -> u64 {
        self.next.load(Ordering::SeqCst) - 1
    }

    /// A sequence number S such that every batch with first sequence `<= S` is fully
    /// inserted and none with a larger one is visible at S: a consistent snapshot.
    pub fn snapshot(&self) -> u64 {
        let s = self.last_issued();
        for slot in &self.slots {
            loop {
                let v = slot.load(Ordering::SeqCst);
                // PENDING may end up <= s only if its fetch_add preceded our read of
                // `next`; we cannot tell, so wait until it is known.
                if v == IDLE || (v != PENDING && v > s) {
                    break;
                }
                yield_now();
            }
        }
        s
    }

    /// Restarts numbering after recovery found sequence numbers up to `last_seq`.
    pub fn advance_to(&self, last_seq: u64) {
        self.next.fetch_max(last_seq + 1, Ordering::SeqCst);
    }
}

#[cfg(all(test, not(feature = "shuttle")))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn sealed_gate_refuses_and_drains() {
        let gate = Arc::new(InFlightGate::new());
        assert!(gate.enter());
        let g2 = gate.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            g2.exit();
        });
        gate.seal();
        assert!(!gate.enter());
        gate.drain();
        assert_eq!(gate.in_flight(), 0);
        t.join().unwrap();
    }

    #[test]
    fn seq_gate_numbers_batches_consecutively() {
        let gate = SeqGate::new(10, 4);
        let a = gate.begin(3, 0);
        let b = gate.begin(1, 0);
        assert_eq!((a.first_seq, b.first_seq), (11, 14));
        assert_eq!(gate.last_issued(), 14);
        gate.finish(a);
        gate.finish(b);
        assert_eq!(gate.snapshot(), 14);
        gate.advance_to(100);
        assert_eq!(gate.begin(1, 3).first_seq, 101);
    }
}
