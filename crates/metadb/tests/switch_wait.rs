//! A writer that meets a memtable sealed for a switch waits for the switch without
//! using the CPU (docs/DESIGN.md §6.1): the switch rotates the WAL, which takes a
//! device flush, and on a machine of few CPUs a writer spinning meanwhile takes the CPU
//! the switch needs.

use device::memory::MemoryBackend;
use device::{
    Backend, BackendQueue, Device, DeviceError, DeviceInfo, IoCompletion, IoOp, IoRequest,
};
use format::constants::MIB;
use format::Geometry;
use metadb::{Durability, MetaDb, MetaDbConfig, MetaDbEnv, SegmentPool, WriteBatch};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

const IMAGE_BYTES: u64 = 64 * MIB;

/// Flushes that wait while `held` (counting those that wait).
#[derive(Debug, Default)]
struct Hold {
    held: Mutex<bool>,
    released: Condvar,
    waiting: AtomicUsize,
    armed: AtomicBool,
}

#[derive(Debug)]
struct HeldFlushes {
    inner: MemoryBackend,
    hold: Arc<Hold>,
}

struct HeldQueue<'a> {
    inner: Box<dyn BackendQueue + 'a>,
    hold: &'a Hold,
    flush: bool,
}

impl Backend for HeldFlushes {
    fn info(&self) -> &DeviceInfo {
        self.inner.info()
    }

    fn queue(&self) -> Result<Box<dyn BackendQueue + '_>, DeviceError> {
        Ok(Box::new(HeldQueue {
            inner: self.inner.queue()?,
            hold: &self.hold,
            flush: false,
        }))
    }
}

impl BackendQueue for HeldQueue<'_> {
    fn depth(&self) -> usize {
        self.inner.depth()
    }

    fn push(&mut self, request: IoRequest) -> Result<(), IoRequest> {
        self.flush |= matches!(request.op, IoOp::Flush);
        self.inner.push(request)
    }

    fn submit(&mut self, min_complete: usize) -> Result<(), DeviceError> {
        if std::mem::take(&mut self.flush) && self.hold.armed.load(Ordering::SeqCst) {
            self.hold.waiting.fetch_add(1, Ordering::SeqCst);
            let mut held = self.hold.held.lock().unwrap();
            while *held {
                held = self.hold.released.wait(held).unwrap();
            }
        }
        self.inner.submit(min_complete)
    }

    fn pop(&mut self) -> Option<IoCompletion> {
        self.inner.pop()
    }

    fn outstanding(&self) -> usize {
        self.inner.outstanding()
    }
}

/// The CPU time thread `tid` of this process has used, in ms.
fn thread_cpu_ms(tid: i32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
    // Fields after the command's closing parenthesis: utime and stime are 14 and 15.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    ticks * 1000 / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64
}

fn batch(i: u32) -> WriteBatch {
    let mut b = WriteBatch::new();
    b.put(format!("key{i:08}").into_bytes(), vec![7u8; 200]);
    b
}

#[test]
fn a_writer_waits_for_a_switch_without_spinning() {
    let hold = Arc::new(Hold::default());
    let backend = HeldFlushes {
        inner: MemoryBackend::new(IMAGE_BYTES, 512),
        hold: hold.clone(),
    };
    let geometry = Geometry::compute(IMAGE_BYTES, 1).unwrap();
    let env = MetaDbEnv {
        device: Arc::new(Device::new(Box::new(backend))),
        pmr: None,
        geometry,
        table_store: Arc::new(SegmentPool::whole(geometry)),
        hooks: None,
    };
    let config = MetaDbConfig {
        lanes: 2,
        memtable_bytes: 32 << 10,
        background: false,
        ..MetaDbConfig::default()
    };
    let db = Arc::new(MetaDb::open(env, config).unwrap());
    // From now on a flush waits while held: the next switch's rotation holds.
    *hold.held.lock().unwrap() = true;
    hold.armed.store(true, Ordering::SeqCst);
    // Writes until one of them switches the memtable and holds in the rotation.
    let switcher = {
        let (db, hold) = (db.clone(), hold.clone());
        std::thread::spawn(move || {
            let mut i = 0;
            while hold.waiting.load(Ordering::SeqCst) == 0 {
                db.write(&batch(i), Durability::Buffered).unwrap();
                i += 1;
            }
        })
    };
    while hold.waiting.load(Ordering::SeqCst) == 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    // A switch is held in its rotation: this writer meets the sealed memtable.
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let writer = {
        let db = db.clone();
        std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tid_tx.send(unsafe { libc::gettid() }).unwrap();
            db.write(&batch(1_000_000), Durability::Buffered).unwrap();
        })
    };
    let tid = tid_rx.recv().unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let before = thread_cpu_ms(tid);
    std::thread::sleep(Duration::from_millis(400));
    let used = thread_cpu_ms(tid) - before;
    assert!(
        !writer.is_finished(),
        "the writer did not wait for the switch"
    );
    *hold.held.lock().unwrap() = false;
    hold.armed.store(false, Ordering::SeqCst);
    hold.released.notify_all();
    writer.join().unwrap();
    switcher.join().unwrap();
    assert!(
        used < 100,
        "a writer waiting 400 ms for a switch used {used} ms of CPU (spinning)"
    );
    assert!(db.get(b"key01000000").unwrap().is_some());
}
