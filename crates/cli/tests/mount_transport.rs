//! The mount's two transports (docs/DESIGN.md §11.1): FUSE over io_uring where the kernel
//! offers it, the /dev/fuse read/write loop otherwise. The same work (a tree copied in
//! and compared, multi-MiB writes and reads, every kind of lock with waits that end in
//! a deferred reply and a killed waiter) runs over io_uring, over /dev/fuse when the
//! module parameter `enable_uring` is off (the fallback), and over /dev/fuse when the
//! mount says `nouring`; the daemon's log names the transport that served. And an idle
//! mount costs no CPU and bounded memory.
//!
//! Needs root (it sets /sys/module/fuse/parameters/enable_uring for the duration and
//! restores it), /dev/fuse, python3, and a kernel with FUSE over io_uring compiled in.

mod common;

use common::*;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;
use testsupport::fuse::{daemons, Fixture};
use testsupport::process::sh;

const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";

/// The tests of this binary that depend on `enable_uring` take turns.
static PARAM: Mutex<()> = Mutex::new(());

/// Sets `enable_uring` and puts the previous value back when dropped.
struct UringParam {
    previous: String,
}

impl UringParam {
    fn set(on: bool) -> UringParam {
        let previous = fs::read_to_string(ENABLE_URING)
            .expect("this kernel has FUSE over io_uring (enable_uring)");
        fs::write(ENABLE_URING, if on { "Y" } else { "N" }).expect("set enable_uring");
        UringParam { previous }
    }
}

impl Drop for UringParam {
    fn drop(&mut self) {
        let _ = fs::write(ENABLE_URING, self.previous.trim());
    }
}

fn locks_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mount_locks/locks.py")
}

/// Mounts with `-o opts` and a log; the log's path.
fn mount_logged(fx: &Fixture, opts: &str) -> PathBuf {
    let log = fx.host.join(format!("daemon-{opts}.log"));
    fx.mount_with(
        BIN,
        &["mount"],
        &["-o", opts, "--log", log.to_str().expect("utf-8 path")],
    );
    log
}

/// The work every transport must serve alike.
fn work(fx: &Fixture) {
    let v = fx.vars();
    sh(
        "mkdir -p \"$HOST/src/d1/d2\" && cp -a /usr/include/linux \"$HOST/src/d1/\" && \
         head -c 3000000 /dev/urandom > \"$HOST/src/big\" && \
         ln -s big \"$HOST/src/d1/d2/link\" && ln \"$HOST/src/big\" \"$HOST/src/d1/hard\" && \
         cp -a \"$HOST/src\" \"$MNT/copy\" && diff -r --no-dereference \"$HOST/src\" \"$MNT/copy\" && \
         dd if=/dev/urandom of=\"$HOST/w\" bs=4M count=3 iflag=fullblock status=none && \
         dd if=\"$HOST/w\" of=\"$MNT/w\" bs=4M status=none && \
         echo 3 > /proc/sys/vm/drop_caches && cmp \"$HOST/w\" \"$MNT/w\" && \
         test $(stat -c %h \"$MNT/copy/big\") = 2 && \
         rm -r \"$MNT/copy/d1/linux\" && mv \"$MNT/copy/big\" \"$MNT/copy/moved\" && \
         test ! -e \"$MNT/copy/big\" && cmp \"$HOST/src/big\" \"$MNT/copy/moved\"",
        &v,
    );
    let out = sh(
        &format!("python3 {} \"$MNT\" main", locks_script().display()),
        &v,
    );
    assert!(out.ends_with("all ok\n"), "{out}");
}

#[test]
fn each_transport_serves_the_same_work() {
    let _turn = PARAM.lock().unwrap_or_else(|e| e.into_inner());
    // (enable_uring, mount options, the transport the log must name)
    let cases = [
        (true, "uring", "io_uring"),
        (false, "uring", "/dev/fuse"),
        (true, "nouring", "/dev/fuse"),
    ];
    for (on, opts, transport) in cases {
        let _param = UringParam::set(on);
        let fx = fixture();
        let log = mount_logged(&fx, opts);
        work(&fx);
        fx.unmount_with(&["umount"]);
        let text = fs::read_to_string(&log).expect("the daemon's log");
        assert!(
            text.contains(&format!("serving FUSE requests over {transport}\n")),
            "enable_uring {on}, -o {opts}: {text}"
        );
        // Asked for the ring while the kernel's switch is off: the log says how to turn
        // it on; not when the ring serves or `nouring` declined it.
        let hint = text.contains("FUSE over io_uring is off in this kernel");
        assert_eq!(
            hint,
            !on && opts == "uring",
            "enable_uring {on}, -o {opts}: {text}"
        );
        fx.fsck_clean();
        // What one transport wrote, the other reads.
        fx.mount();
        sh(
            "cmp \"$HOST/w\" \"$MNT/w\" && cmp \"$HOST/src/big\" \"$MNT/copy/moved\"",
            &fx.vars(),
        );
        fx.unmount_with(&["umount"]);
    }
}

/// utime + stime of `pid` in clock ticks, all its threads.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).expect("daemon stat");
    let (_, rest) = stat.rsplit_once(") ").expect("stat format");
    let fields: Vec<&str> = rest.split(' ').collect();
    // Fields 14 and 15 of stat(5), counted from the state (field 3).
    fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime")
}

/// The times the daemon's threads went to sleep so far (voluntary context switches):
/// a thread that polls shows here long before it shows in clock ticks.
fn sleeps(pid: u32) -> u64 {
    let mut n = 0;
    for t in fs::read_dir(format!("/proc/{pid}/task")).expect("daemon threads") {
        let status = fs::read_to_string(t.expect("thread").path().join("status"));
        n += status
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0);
    }
    n
}

fn rss_kib(pid: u32) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).expect("daemon status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// Idle: no thread polls (each waits in the kernel for a request or its timer), so a
/// mount left alone for longer than one commit interval uses at most one clock tick
/// of CPU and wakes its threads at most 30 times in 6 s, over either transport, and
/// its resident memory stays under 64 MiB after a workload touched every ring entry.
#[test]
fn an_idle_mount_uses_no_cpu() {
    let _turn = PARAM.lock().unwrap_or_else(|e| e.into_inner());
    for (on, transport) in [(true, "io_uring"), (false, "/dev/fuse")] {
        let _param = UringParam::set(on);
        let fx = fixture();
        let log = mount_logged(&fx, "uring");
        // The copy's write-back is over when `sync DIR` (an fsync of the root)
        // returns, however slow a loaded machine makes it.
        sh(
            "cp -a /usr/include/linux \"$MNT/\" && cat \"$MNT\"/linux/*.h > /dev/null \
             && sync \"$MNT\"",
            &fx.vars(),
        );
        let pid = daemons(&fx.mnt)[0];
        // Past one commit interval (5 s by default): the background commit's first
        // round after the copy (a whole sync, a few milliseconds of CPU, more on a
        // loaded machine) is over before the idle time is measured.
        std::thread::sleep(Duration::from_secs(6));
        let (before, slept) = (cpu_ticks(pid), sleeps(pid));
        std::thread::sleep(Duration::from_secs(6));
        let used = cpu_ticks(pid) - before;
        let woke = sleeps(pid) - slept;
        let rss = rss_kib(pid);
        fx.unmount_with(&["umount"]);
        let text = fs::read_to_string(&log).expect("the daemon's log");
        assert!(text.contains(&format!("over {transport}\n")), "{text}");
        assert!(
            used <= 1,
            "{transport}: {used} ticks of CPU in 6 idle seconds"
        );
        // The flusher's timer wakes it twice a second, the commit's once per interval;
        // a thread polling every 50 ms would add 120.
        assert!(woke <= 30, "{transport}: {woke} wake-ups in 6 idle seconds");
        assert!(rss < 64 * 1024, "{transport}: {rss} KiB resident when idle");
        eprintln!("{transport}: {used} ticks and {woke} wake-ups in 6 idle s, {rss} KiB resident");
    }
}
