//! Processes attached to a mount's instance (`augefs run --mount DIR`, docs/DESIGN.md
//! §12.5): unrelated processes share files and locks directly; children started by
//! fork, exec, system, popen and posix_spawn attach themselves; what they change is
//! what the kernel's view of the mount shows at once; a client killed at any moment
//! loses none of its acknowledged fsyncs.
//!
//! Needs `libaugefs_preload.so` next to the `augefs` binary (scripts/test builds it).

mod common;

use common::{fixture, preload_built, BIN};
use std::io::BufRead;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use testsupport::fuse::{alive, daemons, Fixture};
use testsupport::process::{check, checked_stdout, wait_until};

fn script(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/attach/{name}"))
}

/// `augefs run --mount MNT --log LOG -- args...` as a command to start.
fn attached(fx: &Fixture, args: &[&std::ffi::OsStr]) -> Command {
    preload_built();
    let mut c = Command::new(BIN);
    c.arg("run")
        .arg("--mount")
        .arg(&fx.mnt)
        .arg("--log")
        .arg(fx.host.join("attach.log"))
        .arg("--")
        .args(args);
    c
}

fn run_attached(fx: &Fixture, args: &[&std::ffi::OsStr]) -> Output {
    attached(fx, args).output().expect("run augefs run --mount")
}

/// The processes that attached directly, by the log's pids.
fn attached_pids(fx: &Fixture) -> std::collections::BTreeSet<String> {
    let log = std::fs::read_to_string(fx.host.join("attach.log")).unwrap_or_default();
    log.lines()
        .filter(|l| l.contains("attached to the instance"))
        .filter_map(|l| Some(l.split_once('[')?.1.split_once(']')?.0.to_string()))
        .collect()
}

#[test]
fn unrelated_processes_share_files_and_locks() {
    let fx = fixture();
    fx.mount();
    let (mnt, host) = (fx.mnt.as_os_str(), fx.host.as_os_str());
    let locker = script("locker.py");
    let mut a = attached(&fx, &["python3".as_ref(), locker.as_os_str(), mnt, host])
        .spawn()
        .expect("start A");
    wait_until("A holds its locks", || fx.host.join("a-locked").exists());
    let waiter = script("waiter.py");
    let b = run_attached(&fx, &["python3".as_ref(), waiter.as_os_str(), mnt, host]);
    assert_eq!(checked_stdout("B", &b).trim(), "B ok");
    assert!(a.wait().expect("A").success(), "A failed");
    assert_eq!(attached_pids(&fx).len(), 2, "A and B attached directly");
    fx.unmount();
    fx.fsck_clean();
}

#[test]
fn children_of_every_kind_attach() {
    let fx = fixture();
    fx.mount();
    let family = script("family.py");
    let out = run_attached(
        &fx,
        &["python3".as_ref(), family.as_os_str(), fx.mnt.as_os_str()],
    );
    assert_eq!(checked_stdout("family", &out).trim(), "family ok");
    // The parent, and each exec'd program (sh, cat, cp), attached.
    assert!(attached_pids(&fx).len() >= 4, "{:?}", attached_pids(&fx));
    fx.unmount();
    fx.fsck_clean();
}

#[test]
fn the_kernel_view_sees_attached_changes_at_once() {
    let fx = fixture();
    fx.mount();
    let m = fx.mnt.display().to_string();
    // The kernel caches these: the file's data and attributes, and that `new` is absent.
    std::fs::write(fx.mnt.join("f"), "old\n").unwrap();
    assert_eq!(std::fs::read_to_string(fx.mnt.join("f")).unwrap(), "old\n");
    assert!(!fx.mnt.join("new").exists());
    std::fs::create_dir(fx.mnt.join("d")).unwrap();
    std::fs::write(fx.mnt.join("d/gone"), "x").unwrap();
    assert!(fx.mnt.join("d/gone").exists());
    let change = format!(
        "printf 'changed!\\n' > {m}/f && echo made > {m}/new && mv {m}/d/gone {m}/moved && chmod 600 {m}/new"
    );
    check(
        "attached change",
        &run_attached(&fx, &["sh".as_ref(), "-c".as_ref(), change.as_ref()]),
    );
    assert_eq!(
        std::fs::read_to_string(fx.mnt.join("f")).unwrap(),
        "changed!\n"
    );
    assert_eq!(
        std::fs::read_to_string(fx.mnt.join("new")).unwrap(),
        "made\n"
    );
    assert!(
        !fx.mnt.join("d/gone").exists(),
        "the kernel still finds a moved name"
    );
    assert_eq!(std::fs::read_to_string(fx.mnt.join("moved")).unwrap(), "x");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(fx.mnt.join("new")).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
    // And the other way: what the kernel's view changes, attached processes see, also
    // through the attribute table they stat from and the pages they read without
    // asking. One attached process stats and reads a file it holds open, waits for
    // the kernel's view to change the file, and stats and reads again.
    let f = fx.mnt.join("f").display().to_string();
    let flag = fx.host.join("changed").display().to_string();
    let ready = fx.host.join("ready");
    let ready = ready.display();
    let watcher = format!(
        "import os, time\n\
         fd = os.open('{f}', os.O_RDONLY)\n\
         print(os.stat('{f}').st_size)\n\
         os.pread(fd, 100, 0)\n\
         open('{ready}', 'w').close()\n\
         while not os.path.exists('{flag}'):\n\
         \x20   os.stat('{f}'); os.pread(fd, 100, 0); time.sleep(0.01)\n\
         print(os.stat('{f}').st_size)\n\
         print(os.pread(fd, 100, 0).decode(), end='')\n"
    );
    let child = attached(&fx, &["python3".as_ref(), "-c".as_ref(), watcher.as_ref()])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the watcher");
    let t = std::time::Instant::now();
    while !fx.host.join("ready").exists() {
        assert!(t.elapsed().as_secs() < 20, "the watcher did not start");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    std::fs::write(fx.mnt.join("f"), "from the kernel\n").unwrap();
    std::fs::write(fx.host.join("changed"), "").unwrap();
    let out = child.wait_with_output().expect("the watcher");
    assert_eq!(checked_stdout("watcher", &out), "9\n16\nfrom the kernel\n");
    fx.unmount();
    fx.fsck_clean();
}

#[test]
fn killed_clients_lose_no_acknowledged_fsync() {
    let fx = fixture();
    fx.mount();
    let acker = script("acker.py");
    let mut acked = Vec::new();
    // ATTACH_KILL_TRIALS: more trials by hand (the 100).
    let trials = std::env::var("ATTACH_KILL_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8u64);
    for trial in 0..trials {
        let dir = fx.mnt.join(format!("t{trial}"));
        std::fs::create_dir(&dir).unwrap();
        let mut child = attached(
            &fx,
            &["python3".as_ref(), acker.as_os_str(), dir.as_os_str()],
        )
        // Half the trials through mailboxes (without keys where the machine has none).
        .env(
            "AUGEFS_MAILBOX",
            if trial % 2 == 1 {
                "unprotected"
            } else {
                "auto"
            },
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start acker");
        let mut errors = child.stderr.take().unwrap();
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        // Kill after a trial-dependent number of acknowledgements, at once.
        let mut last = None;
        for _ in 0..(3 + (trial % 8) * 5) {
            match lines.next() {
                Some(Ok(l)) => last = Some(l.parse::<u64>().unwrap()),
                _ => break,
            }
        }
        // SAFETY: kill with a pid of our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        let _ = child.wait();
        // Anything printed before the kill was acknowledged too.
        for l in lines.map_while(Result::ok) {
            last = l.parse().ok().or(last);
        }
        let Some(last) = last else {
            let mut text = String::new();
            let _ = std::io::Read::read_to_string(&mut errors, &mut text);
            panic!("trial {trial}: the acker acknowledged nothing: {text}");
        };
        acked.push((dir, last));
    }
    // The instance dies too, without a sync: what survives is what the device has.
    for pid in daemons(&fx.mnt) {
        // SAFETY: kill with the pid of the mount's daemon.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        wait_until("the daemon is gone", || !alive(pid));
    }
    // A killed instance leaves its socket; the next mount replaces it, but a test
    // leaves nothing behind.
    let _ = std::fs::remove_file(instance::socket_path(&fx.mnt));
    check(
        "fusermount3 -u -z",
        &Command::new("fusermount3")
            .arg("-u")
            .arg("-z")
            .arg(&fx.mnt)
            .output()
            .unwrap(),
    );
    fx.mount();
    for (dir, last) in &acked {
        let dir = fx.mnt.join(dir.file_name().unwrap());
        for i in 0..=*last {
            let got = std::fs::read(dir.join(format!("k{i:06}"))).unwrap_or_default();
            let want = format!("{i:06}").repeat(700).into_bytes();
            assert!(
                got == want,
                "{} k{i:06}: {} bytes read, {} acknowledged",
                dir.display(),
                got.len(),
                want.len()
            );
        }
    }
    fx.unmount();
    fx.fsck_clean();
}

#[test]
fn relative_paths_into_the_mount_are_served_directly() {
    let fx = fixture();
    fx.mount();
    let parent = fx.mnt.parent().expect("the mount's parent");
    let name = fx.mnt.file_name().expect("the mount's name");
    let host_file = fx.host.strip_prefix(parent).unwrap().join("on-host");
    std::fs::write(fx.host.join("on-host"), "on the host\n").unwrap();
    // A file of the same name at the mount's root: a ".." that stayed inside would
    // read it instead of the host's.
    let decoy = fx.mnt.join(&host_file);
    std::fs::create_dir_all(decoy.parent().unwrap()).unwrap();
    std::fs::write(&decoy, "the decoy inside\n").unwrap();
    let script = script("relative.py");
    let out = attached(
        &fx,
        &[
            "python3".as_ref(),
            script.as_os_str(),
            name,
            host_file.as_os_str(),
        ],
    )
    .current_dir(parent)
    .output()
    .expect("run augefs run --mount");
    assert_eq!(checked_stdout("relative", &out).trim(), "relative ok");
    fx.unmount();
    fx.fsck_clean();
}

/// Runs `cmd` to its end, failing the test if it takes over `secs` seconds (a hang is
/// what these tests guard against).
fn output_within(mut cmd: Command, secs: u64) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let started = std::time::Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if started.elapsed() > std::time::Duration::from_secs(secs) {
            let _ = child.kill();
            panic!("still running after {secs} s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

/// Threads of a fresh attached process all write their first file at once: each may
/// find no posting connection and open one; a second one waited for the first to close
/// and hung its thread for good.
#[test]
fn threads_writing_at_once_never_hang() {
    let fx = fixture();
    fx.mount();
    let dir = std::fs::canonicalize(&fx.mnt).unwrap().join("th");
    std::fs::create_dir(&dir).unwrap();
    let script = script("threads.py");
    for _ in 0..5 {
        let args = [
            "python3".as_ref(),
            script.as_os_str(),
            dir.as_os_str(),
            "8".as_ref(),
        ];
        let out = output_within(attached(&fx, &args), 60);
        assert_eq!(checked_stdout("threads", &out).trim(), "threads ok");
    }
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 40);
    fx.unmount();
    fx.fsck_clean();
}

/// A file of the mount made a standard stream by a redirection is a regular file to the
/// program: whole reads (dd would see 64 KiB pieces of a pipe), lseek and fstat work,
/// and descriptors that share it keep one offset.
#[test]
fn redirected_standard_streams_are_regular_files() {
    let fx = fixture();
    fx.mount();
    let data: Vec<u8> = (0..(4u32 << 20)).map(|i| (i % 251) as u8).collect();
    std::fs::write(fx.mnt.join("data"), &data).unwrap();
    let script = "cd \"$1\" && dd if=data of=/dev/null bs=1M count=4 2>&1 | grep 'records in'; \
                  stat -L -c %F /dev/stdin < data; \
                  wc -c < data; \
                  tail -c 3 < data | od -An -tu1; \
                  exec 3>log; echo one >&3; echo two >&3; exec 3>&-; cat log; \
                  { echo three; echo four; } >> log";
    let mnt = std::fs::canonicalize(&fx.mnt).unwrap();
    let args = [
        "sh".as_ref(),
        "-c".as_ref(),
        script.as_ref(),
        "sh".as_ref(),
        mnt.as_os_str(),
    ];
    // A pump that deadlocked a forked child hung this script once: a deadline, not a hang.
    let out = output_within(attached(&fx, &args), 120);
    assert!(
        !attached_pids(&fx).is_empty(),
        "the shell and its children attached: {}",
        std::fs::read_to_string(fx.host.join("attach.log")).unwrap_or_default()
    );
    let tail: Vec<String> = data[data.len() - 3..].iter().map(u8::to_string).collect();
    assert_eq!(
        checked_stdout("redirections", &out)
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" "),
        format!(
            "4+0 records in regular file {} {} one two",
            data.len(),
            tail.join(" ")
        )
    );
    assert_eq!(
        std::fs::read_to_string(fx.mnt.join("log")).unwrap(),
        "one\ntwo\nthree\nfour\n"
    );
    fx.unmount();
    fx.fsck_clean();
}

/// POSIX aio in an attached process (tests/run_apps/aio.c): GlusterFS's brick health
/// check writes with aio_write, and a failed check shut every attached brick down.
#[test]
fn posix_aio_works_attached() {
    let fx = fixture();
    fx.mount();
    let exe = common::compile_c(&fx, "run_apps", "aio");
    let mnt = std::fs::canonicalize(&fx.mnt).unwrap();
    let host_file = fx.host.join("aio-host");
    let out = run_attached(
        &fx,
        &[exe.as_os_str(), mnt.as_os_str(), host_file.as_os_str()],
    );
    assert_eq!(checked_stdout("aio", &out).trim(), "aio ok");
    assert_eq!(
        std::fs::metadata(fx.mnt.join("aio-file")).unwrap().len(),
        8192 + 100,
        "the FUSE view sees what aio wrote"
    );
    fx.unmount();
    fx.fsck_clean();
}

/// telldir and seekdir in an attached process (tests/run_apps/seekdir.c): a GlusterFS
/// brick steps its directory stream back one entry when a reply is full.
#[test]
fn directory_seeks_work_attached() {
    let fx = fixture();
    fx.mount();
    let exe = common::compile_c(&fx, "run_apps", "seekdir");
    let mnt = std::fs::canonicalize(&fx.mnt).unwrap();
    let out = run_attached(&fx, &[exe.as_os_str(), mnt.as_os_str()]);
    assert_eq!(checked_stdout("seekdir", &out).trim(), "seekdir ok");
    fx.unmount();
    fx.fsck_clean();
}

/// The rows of one section of a mount's `-o stats` report: `title`'s table, by
/// opcode, with its request counts.
fn stats_rows(log: &str, title: &str) -> Vec<(String, u64)> {
    let mut rows = Vec::new();
    let mut inside = false;
    for line in log.lines() {
        if line.starts_with("augefs:") {
            inside = line.contains(title);
            continue;
        }
        let mut words = line.split_whitespace();
        if let (true, Some(op), Some(n)) = (inside, words.next(), words.next()) {
            if let Ok(n) = n.parse() {
                rows.push((op.to_string(), n));
            }
        }
    }
    rows
}

/// A file read through the kernel's view of the mount (here `dd`, not attached) is
/// warm for attached processes of the reader's user: their reads of it need no
/// request (the data table the mount's reads fill, docs/DESIGN.md §12.5).
#[test]
fn reads_through_the_mount_are_warm_for_attached_processes() {
    let fx = fixture();
    let log = fx.host.join("mount.log");
    let log_s = log.display().to_string();
    fx.mount_with(BIN, &["mount", "-o", "stats"], &["--log", &log_s]);
    let f = fx.mnt.join("big").display().to_string();
    // Written attached: the kernel holds none of its pages, so dd's reads reach the
    // daemon.
    let write = format!("open('{f}', 'wb').write(bytes(range(256)) * 4096)");
    check(
        "attached write",
        &run_attached(&fx, &["python3".as_ref(), "-c".as_ref(), write.as_ref()]),
    );
    let dd = Command::new("dd")
        .arg(format!("if={f}"))
        .args(["of=/dev/null", "bs=128k"])
        .output()
        .expect("run dd");
    check("dd through the kernel", &dd);
    // A thread of low priority keeps the mount's reads (about a millisecond of work
    // here; even at nice 19 on a loaded machine it gets that within this pause).
    std::thread::sleep(std::time::Duration::from_secs(2));
    let read = format!(
        "d = open('{f}', 'rb').read()\nassert d == bytes(range(256)) * 4096, len(d)\nprint('read')"
    );
    let out = run_attached(&fx, &["python3".as_ref(), "-c".as_ref(), read.as_ref()]);
    assert_eq!(checked_stdout("attached read", &out), "read\n");
    fx.unmount();
    let text = std::fs::read_to_string(&log).unwrap();
    // The tap the FUSE session holds let go of the file system in time.
    assert!(
        text.contains(" unmounted") && !text.contains("cannot unmount"),
        "the unmount failed:\n{text}"
    );
    let rows = stats_rows(&text, "attached processes' requests");
    assert!(
        rows.iter().any(|(op, _)| op == "OPEN"),
        "no attached requests in the report:\n{text}"
    );
    let reads: u64 = rows
        .iter()
        .filter(|(op, _)| op == "READ")
        .map(|r| r.1)
        .sum();
    assert_eq!(reads, 0, "attached reads asked:\n{text}");
    fx.fsck_clean();
}

#[test]
fn git_works_attached() {
    let fx = fixture();
    fx.mount();
    let repo = fx.mnt.join("repo").display().to_string();
    // git's own fopen fstats fileno(fp): a stream the interposer makes must have one.
    let script = format!(
        "set -e; git init -q {repo}; cd {repo}; for i in 1 2 3; do echo $i > f$i; done; \
         git add -A; git -c user.name=t -c user.email=t@t commit -qm one; \
         git config core.bare false; git fsck --full --strict 2>&1; git status --short; \
         git log --oneline | wc -l"
    );
    let out = run_attached(&fx, &["sh".as_ref(), "-c".as_ref(), script.as_ref()]);
    assert_eq!(checked_stdout("git", &out).trim(), "1");
    fx.unmount();
    fx.fsck_clean();
}

#[test]
fn an_unmount_keeps_what_attached_writers_were_told_was_written() {
    let fx = fixture();
    fx.mount();
    let dir = fx.mnt.join("w");
    std::fs::create_dir(&dir).unwrap();
    let writer = script("writer.py");
    let mut child = attached(
        &fx,
        &["python3".as_ref(), writer.as_os_str(), dir.as_os_str()],
    )
    .stdout(Stdio::piped())
    .spawn()
    .expect("start the writer");
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    // The last write the writer was told was written (its lines before the unmount
    // count too: a loaded machine may let it write nothing more before the unmount).
    let mut last = None;
    for _ in 0..50 {
        let l = lines.next().expect("the writer writes").unwrap();
        last = Some(l.parse::<u64>().expect("a written file's number"));
    }
    // The unmount takes the instance away under the writer.
    fx.unmount();
    let mut failed = None;
    for l in lines.map_while(Result::ok) {
        match l.strip_prefix("failed ") {
            Some(e) => failed = Some(e.to_string()),
            None => last = l.parse::<u64>().ok().or(last),
        }
    }
    assert!(child.wait().unwrap().success());
    assert!(
        failed.is_some(),
        "the writer's calls fail once the instance is gone"
    );
    fx.mount();
    let dir = fx.mnt.join("w");
    for i in 0..=last.expect("acknowledged writes") {
        let got = std::fs::read(dir.join(format!("w{i:06}"))).unwrap_or_default();
        assert!(
            got == format!("{i:06}").repeat(1000).into_bytes(),
            "w{i:06}: {} bytes after the remount",
            got.len()
        );
    }
    fx.unmount();
    fx.fsck_clean();
}

#[test]
fn the_kernel_view_sees_posted_writes_once_they_returned() {
    // An attached writer's small writes are posted (acknowledged before they run,
    // docs/DESIGN.md §12.5 "Posted requests"); the kernel's view, read the moment the
    // writer says its writes returned, must show every one of them. Each post waits
    // 200 us in the instance before it runs, so they lag far behind the writer.
    let fx = fixture();
    fx.mount_with(
        "env",
        &["AUGEFS_POST_DELAY_US=200", common::BIN, "mount"],
        &[],
    );
    let f = fx.mnt.join("posted");
    std::fs::write(&f, "").unwrap();
    // Cached by the kernel before the writer starts: attributes and (empty) data.
    assert_eq!(std::fs::metadata(&f).unwrap().len(), 0);
    let writer = "import os, sys\n\
         fd = os.open(sys.argv[1], os.O_WRONLY)\n\
         for r in range(8):\n\
         \x20   for i in range(500):\n\
         \x20       os.write(fd, b'%04d:%06d|' % (r, i))\n\
         \x20   print(os.lseek(fd, 0, os.SEEK_CUR), flush=True)\n\
         \x20   sys.stdin.readline()\n";
    let mut child = attached(
        &fx,
        &[
            "python3".as_ref(),
            "-c".as_ref(),
            writer.as_ref(),
            f.as_os_str(),
        ],
    )
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .spawn()
    .expect("start the writer");
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    for r in 0..8u64 {
        let said: u64 = lines.next().expect("a round").unwrap().parse().unwrap();
        assert_eq!(said, (r + 1) * 500 * 12);
        let size = std::fs::metadata(&f).unwrap().len();
        let data = std::fs::read(&f).unwrap();
        assert_eq!(
            (size, data.len() as u64),
            (said, said),
            "round {r}: the kernel's view lags the writes that returned"
        );
        let last = format!("{r:04}:{:06}|", 499);
        assert!(data.ends_with(last.as_bytes()), "round {r}: last record");
        std::io::Write::write_all(&mut stdin, b"\n").unwrap();
    }
    drop(stdin);
    assert!(child.wait().unwrap().success());
    fx.unmount();
    fx.fsck_clean();
}

#[test]
fn a_programs_small_descriptors_are_never_the_instances() {
    // Shells `dup2` onto small numbers they believe free (`exec 3>file`): the sockets
    // and shared memory of an attached process live at 100 and above, so such a
    // redirection neither cuts the process off nor receives its requests.
    let fx = fixture();
    fx.mount();
    let m = fx.mnt.display().to_string();
    let h = fx.host.display().to_string();
    let script = format!(
        "echo one > {m}/a && cat {m}/a >/dev/null && \
         for f in /proc/$$/fd/*; do n=${{f##*/}}; \
           case $(readlink $f) in socket:*|/memfd:*) echo \"ours at $n\";; esac; done; \
         exec 3>{h}/h3 4>{h}/h4 5>{h}/h5; echo two > {m}/b && cat {m}/a {m}/b && echo x >&3"
    );
    let out = run_attached(&fx, &["bash".as_ref(), "-c".as_ref(), script.as_ref()]);
    let stdout = checked_stdout("bash", &out);
    let numbers: Vec<u32> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("ours at ")?.parse().ok())
        .collect();
    assert!(
        !numbers.is_empty(),
        "no socket of the instance seen: {stdout}"
    );
    assert!(
        numbers.iter().all(|&n| n >= 100),
        "the instance's descriptors at {numbers:?}"
    );
    assert!(stdout.ends_with("one\ntwo\n"), "{stdout}");
    assert_eq!(std::fs::read_to_string(fx.host.join("h3")).unwrap(), "x\n");
    for f in ["h4", "h5"] {
        assert_eq!(std::fs::read(fx.host.join(f)).unwrap(), b"", "{f}");
    }
    fx.unmount();
    fx.fsck_clean();
}

/// What the instance's process holds now: open descriptors, threads and resident KiB.
fn holdings(pid: u32) -> (usize, usize, u64) {
    let count = |dir: &str| {
        std::fs::read_dir(format!("/proc/{pid}/{dir}"))
            .expect("the daemon's /proc")
            .count()
    };
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS");
    (count("fd"), count("task"), rss)
}

#[test]
fn attach_and_detach_cycles_leave_the_instance_as_it_was() {
    let fx = fixture();
    fx.mount();
    let pid = daemons(&fx.mnt)[0];
    std::fs::write(fx.mnt.join("f"), b"x").expect("write f");
    let f = fx.mnt.join("f").display().to_string();
    // Each `cat` is a process of its own that attaches, reads and exits.
    let cycles = |n: u32| {
        let script = format!("for i in $(seq {n}); do cat {f} >/dev/null || exit 1; done");
        let out = run_attached(&fx, &["sh".as_ref(), "-c".as_ref(), script.as_ref()]);
        check("the attached loop", &out);
    };
    cycles(200);
    let before = holdings(pid);
    cycles(1000);
    // The instance closes a connection once its thread sees the end of it, which may
    // come after the process is gone; a leak never comes back.
    wait_until("descriptors: every connection's closed", || {
        holdings(pid).0 <= before.0
    });
    let after = holdings(pid);
    eprintln!("descriptors, threads, resident KiB: before {before:?}, after {after:?}");
    assert_eq!(after.0, before.0, "descriptors: every connection's closed");
    assert!(
        after.1 <= before.1 + instance::workers::IDLE_MAX,
        "threads: at most the pool's idle ones more ({before:?} -> {after:?})"
    );
    assert!(
        after.2 <= before.2 + 4096,
        "resident memory grew by more than 4 MiB over 1,000 attached processes \
         ({before:?} -> {after:?})"
    );
    assert!(
        attached_pids(&fx).len() >= 1200,
        "every cat attached directly"
    );
    fx.unmount();
    fx.fsck_clean();
}
