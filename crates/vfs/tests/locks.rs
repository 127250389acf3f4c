//! Advisory locks through the Rust API (`File::lock` and friends, flock semantics) and the
//! record-lock table front ends use: conflicts, conversion, waiting, release on drop.

use format::constants::MIB;
use std::time::Duration;
use testsupport::mount::{errno, mounted};
use vfs::locks::{range, LockKind, LockOwner};
use vfs::OpenOptions;

#[test]
fn flock_like_std() {
    let fs = mounted(96 * MIB, 1);
    let open = || {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .open(&fs, "/f")
            .unwrap()
    };
    let (a, b, c) = (open(), open(), open());
    a.lock().unwrap();
    assert_eq!(errno(b.try_lock()), libc::EAGAIN);
    assert_eq!(errno(b.try_lock_shared()), libc::EAGAIN);
    // Converting one's own lock is allowed.
    a.lock_shared().unwrap();
    b.try_lock_shared().unwrap();
    c.lock_shared().unwrap();
    assert_eq!(errno(a.try_lock()), libc::EAGAIN);
    drop(b);
    c.unlock().unwrap();
    a.try_lock().unwrap();
    // A waiter gets the lock when the holder's file is dropped.
    let fs2 = fs.clone();
    let waiter = std::thread::spawn(move || {
        let d = OpenOptions::new().read(true).open(&fs2, "/f").unwrap();
        d.lock().unwrap();
        d
    });
    std::thread::sleep(Duration::from_millis(50));
    assert!(!waiter.is_finished(), "the waiter waits");
    drop(a);
    let d = waiter.join().unwrap();
    assert_eq!(errno(c.try_lock_shared()), libc::EAGAIN);
    drop(d);
    c.try_lock().unwrap();
}

#[test]
fn record_locks_of_one_instance() {
    let fs = mounted(96 * MIB, 1);
    let f = OpenOptions::new()
        .write(true)
        .create(true)
        .open(&fs, "/db")
        .unwrap();
    let ino = format::InodeNo(f.ino());
    let locks = fs.record_locks();
    let (p1, p2) = (LockOwner::Process(100), LockOwner::Process(200));
    // sqlite's pattern: a shared lock on a byte range, then a writer's exclusive one.
    locks
        .set(
            ino,
            range(1 << 30, 1).unwrap(),
            Some(LockKind::Read),
            p1,
            100,
            false,
        )
        .unwrap();
    let e = locks
        .set(
            ino,
            range(1 << 30, 512).unwrap(),
            Some(LockKind::Write),
            p2,
            200,
            false,
        )
        .unwrap_err();
    assert_eq!(e.errno(), libc::EAGAIN);
    let blocker = locks
        .conflicting(ino, range(1 << 30, 512).unwrap(), LockKind::Write, p2)
        .unwrap();
    assert_eq!(
        (blocker.pid, blocker.start, blocker.end),
        (100, 1 << 30, Some((1 << 30) + 1))
    );
    locks.release(ino, p1);
    locks
        .set(
            ino,
            range(1 << 30, 512).unwrap(),
            Some(LockKind::Write),
            p2,
            200,
            false,
        )
        .unwrap();
}
