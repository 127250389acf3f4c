//! Real programs through the interposer (`augefs run`, docs/DESIGN.md §12): sqlite3,
//! db_bench, a Python script, bash with redirections into the prefix (forked children
//! reach the image through the owner's bridge), a C program calling most of what
//! the interposer covers, and programs started with posix_spawn, system, popen, vfork,
//! the exec family and Python's subprocess. After each, `augefs fsck` finds the image clean and a fresh
//! `augefs run` (a new attach) reads the data back.
//!
//! Needs `libaugefs_preload.so` next to the `augefs` binary (scripts/test builds it:
//! `cargo build -p augefs-preload`).

mod common;

use common::{fixture, log_of, preload_built, run, BIN};
use std::fs;
use std::path::Path;
use std::process::Command;
use testsupport::fuse::Fixture;
use testsupport::process::{check, checked_stdout};

/// Compiles tests/run_apps/`name`.c.
fn compile(fx: &Fixture, name: &str) -> std::path::PathBuf {
    common::compile_c(fx, "run_apps", name)
}

/// No bridge mount of this fixture's image is left behind (its source is the image).
fn no_bridge_left(fx: &Fixture) {
    let mounts = std::fs::read_to_string("/proc/mounts").expect("/proc/mounts");
    let image = fx.image.to_string_lossy();
    assert!(
        !mounts
            .lines()
            .any(|l| l.split(' ').next() == Some(image.as_ref())),
        "a bridge mount was left: {mounts}"
    );
}

#[test]
fn sqlite3_transactions_and_integrity() {
    let fx = fixture();
    let mut sql = String::from("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);\n");
    for _ in 0..10 {
        sql.push_str(
            "BEGIN;\nWITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x<10000) \
             INSERT INTO t(v) SELECT hex(randomblob(16)) FROM c;\nCOMMIT;\n",
        );
    }
    sql.push_str("SELECT count(*) FROM t;\nPRAGMA integrity_check;\n");
    let script = fx.host.join("load.sql");
    std::fs::write(&script, sql).unwrap();
    let read = format!(".read {}", script.display());
    let out = checked_stdout("sqlite3 load", &run(&fx, &["sqlite3", "/augefs/db", &read]));
    assert_eq!(out.trim(), "100000\nok");
    fx.fsck_clean();
    let again = run(
        &fx,
        &[
            "sqlite3",
            "/augefs/db",
            "SELECT count(*) FROM t; PRAGMA integrity_check;",
        ],
    );
    assert_eq!(
        checked_stdout("sqlite3 reopen", &again).trim(),
        "100000\nok"
    );
    no_bridge_left(&fx);
}

#[test]
fn db_bench_workloads() {
    let fx = fixture();
    let out = run(
        &fx,
        &[
            "db_bench",
            "--db=/augefs/rocks",
            "--benchmarks=fillseq,fillrandom,overwrite,readrandom,fillsync",
            "--num=2000",
            "--compression_type=none",
        ],
    );
    let text = checked_stdout("db_bench", &out);
    for b in [
        "fillseq",
        "fillrandom",
        "overwrite",
        "readrandom",
        "fillsync",
    ] {
        assert!(text.contains(&format!("{b} ")), "{b} missing from:\n{text}");
    }
    fx.fsck_clean();
    let check_db = run(
        &fx,
        &[
            "db_bench",
            "--db=/augefs/rocks",
            "--use_existing_db=1",
            "--benchmarks=readseq",
            "--num=2000",
        ],
    );
    assert!(checked_stdout("db_bench readseq", &check_db).contains("readseq"));
    no_bridge_left(&fx);
}

const PYTHON: &str = r#"
import os
os.makedirs('/augefs/py', exist_ok=True)
with open('/augefs/py/a.txt', 'w') as f:
    for i in range(1000):
        print(f"line {i}", file=f)
with open('/augefs/py/a.txt') as f:
    assert f.readline() == "line 0\n"
    assert len(f.readlines()) == 999
os.rename('/augefs/py/a.txt', '/augefs/py/b.txt')
st = os.stat('/augefs/py/b.txt')
assert st.st_size == sum(len(f"line {i}\n") for i in range(1000)), st
assert sorted(os.listdir('/augefs/py')) == ['b.txt'], os.listdir('/augefs/py')
data = os.urandom(300000)
with open('/augefs/py/bin', 'wb') as f:
    f.write(data)
with open('/augefs/py/bin', 'rb') as f:
    assert f.read() == data
os.chdir('/augefs/py')
assert os.getcwd() == '/augefs/py', os.getcwd()
assert sorted(os.listdir('.')) == ['b.txt', 'bin']
print("python ok")
"#;

#[test]
fn python_open_stdio_listdir_rename_stat() {
    let fx = fixture();
    let script = fx.host.join("t.py");
    std::fs::write(&script, PYTHON).unwrap();
    let out = run(&fx, &["python3", script.to_str().unwrap()]);
    assert_eq!(checked_stdout("python", &out).trim(), "python ok");
    fx.fsck_clean();
    let back = run(
        &fx,
        &[
            "python3",
            "-c",
            "print(open('/augefs/py/b.txt').read().count('\\n'))",
        ],
    );
    assert_eq!(checked_stdout("python reopen", &back).trim(), "1000");
    no_bridge_left(&fx);
}

#[test]
fn bash_redirections_fork_and_exec() {
    let fx = fixture();
    let host = fx.host.join("in.txt");
    std::fs::write(&host, "l1\nl2\nl3\n").unwrap();
    let script = format!(
        "set -euo pipefail
         echo built-in > /augefs/echo
         cat {h} > /augefs/b
         wc -l < /augefs/b
         echo four >> /augefs/b
         cat /augefs/b | tr a-z A-Z > /augefs/c
         cat /augefs/c
         exec 3>/augefs/log
         echo first >&3
         ls /augefs >&3
         echo last >&3
         exec 3>&-
         wc -l < /augefs/log
         read x < /augefs/echo; echo \"read $x\"
         mkdir /augefs/d && cd /augefs/d && echo here > f && pwd && cat f
         echo done",
        h = host.display()
    );
    let out = checked_stdout("bash", &run(&fx, &["bash", "-c", &script]));
    assert_eq!(
        out,
        "3\nL1\nL2\nL3\nFOUR\n6\nread built-in\n/augefs/d\nhere\ndone\n"
    );
    fx.fsck_clean();
    let back = run(&fx, &["bash", "-c", "cat /augefs/log; cat /augefs/b"]);
    let text = checked_stdout("bash reopen", &back);
    assert!(
        text.starts_with("first\n") && text.contains("last\nl1\n"),
        "{text}"
    );
    no_bridge_left(&fx);
}

/// The holder's standard output made a file, then handed to the program it execs: the
/// new program writes where the shell did (a descriptor on the holder's bridge would
/// have died with the exec: ENOTCONN).
#[test]
fn a_redirected_stream_survives_the_holders_exec() {
    let fx = fixture();
    let script = "exec > /augefs/ex; echo before; exec /bin/echo after-exec";
    check("exec", &run(&fx, &["sh", "-c", script]));
    let back = run(&fx, &["cat", "/augefs/ex"]);
    assert_eq!(checked_stdout("cat", &back), "before\nafter-exec\n");
    no_bridge_left(&fx);
}

#[test]
fn c_program_calls_and_one_log_line_for_an_unsupported_call() {
    let fx = fixture();
    let exe = compile(&fx, "calls");
    let out = run(&fx, &[exe.to_str().unwrap()]);
    assert_eq!(checked_stdout("calls", &out).trim(), "calls ok");
    let log = std::fs::read_to_string(log_of(&fx)).unwrap_or_default();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("ioctl")).collect();
    assert_eq!(lines.len(), 1, "one log line names ioctl: {log}");
    assert!(lines[0].contains("ENOTSUP"), "{log}");
    fx.fsck_clean();
    no_bridge_left(&fx);
}

#[test]
fn c_program_libc_functions_built_on_inner_calls() {
    let fx = fixture();
    let exe = compile(&fx, "compat");
    let out = run(&fx, &[exe.to_str().unwrap()]);
    assert_eq!(checked_stdout("compat", &out).trim(), "compat ok");
    fx.fsck_clean();
    no_bridge_left(&fx);
}

/// POSIX aio on augefs descriptors (glibc runs it on threads whose inner pread and
/// pwrite no interposer sees: the requests failed with EBADF), and the same program on
/// the host's file system, which checks the program itself.
#[test]
fn c_program_posix_aio() {
    let fx = fixture();
    let exe = compile(&fx, "aio");
    let host_file = fx.host.join("aio-host");
    let plain = Command::new(&exe)
        .arg(&fx.host)
        .arg(&host_file)
        .output()
        .expect("run aio on the host");
    assert_eq!(checked_stdout("aio on the host", &plain).trim(), "aio ok");
    let out = run(
        &fx,
        &[
            exe.to_str().unwrap(),
            "/augefs",
            host_file.to_str().unwrap(),
        ],
    );
    assert_eq!(checked_stdout("aio", &out).trim(), "aio ok");
    fx.fsck_clean();
    no_bridge_left(&fx);
}

/// telldir, seekdir and readdir_r on an augefs directory stream (glibc's own read
/// and wrote its private fields in ours); the program checked on the host first.
#[test]
fn c_program_seeks_in_directories() {
    let fx = fixture();
    let exe = compile(&fx, "seekdir");
    let plain = Command::new(&exe)
        .arg(&fx.host)
        .output()
        .expect("run seekdir on the host");
    assert_eq!(
        checked_stdout("seekdir on the host", &plain).trim(),
        "seekdir ok"
    );
    let out = run(&fx, &[exe.to_str().unwrap(), "/augefs"]);
    assert_eq!(checked_stdout("seekdir", &out).trim(), "seekdir ok");
    fx.fsck_clean();
    no_bridge_left(&fx);
}

#[test]
fn c_program_spawns_with_augefs_descriptors_and_working_directory() {
    let fx = fixture();
    let exe = compile(&fx, "spawn");
    let out = run(&fx, &[exe.to_str().unwrap()]);
    assert_eq!(
        checked_stdout("spawn", &out),
        "from execle\nthrough popen\nvforked\nspawn ok\n"
    );
    fx.fsck_clean();
    let back = run(
        &fx,
        &[
            "cat",
            "/augefs/sp/out",
            "/augefs/sp/s.txt",
            "/augefs/sp/lp.txt",
        ],
    );
    assert_eq!(
        checked_stdout("spawn reopen", &back),
        "parent\nspawned\nafter\nsys\ninherited\nexeclp\n"
    );
    no_bridge_left(&fx);
}

#[test]
fn python_subprocess_and_os_system() {
    let fx = fixture();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/run_apps/spawn.py");
    let out = run(&fx, &["python3", script.to_str().unwrap()]);
    assert_eq!(
        checked_stdout("python spawn", &out).trim(),
        "python spawn ok"
    );
    fx.fsck_clean();
    no_bridge_left(&fx);
}

#[test]
fn run_reports_usage_errors() {
    let fx = fixture();
    let missing = Command::new(BIN)
        .args(["run", "--image", "/nonexistent/img", "--", "true"])
        .output()
        .unwrap();
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no such image"));
    let no_cmd = Command::new(BIN)
        .args(["run", "--image"])
        .arg(&fx.image)
        .output()
        .unwrap();
    assert!(!no_cmd.status.success());
    let status = run(&fx, &["sh", "-c", "exit 7"]);
    assert_eq!(status.status.code(), Some(7));
}

/// While `augefs run` holds an image, other commands are refused at once and told by
/// whom (its program holds the serving mark), instead of waiting as for a finishing
/// unmount.
#[test]
fn an_attached_image_is_refused_at_once_naming_its_holder() {
    preload_built();
    let fx = fixture();
    let mut held = Command::new(BIN)
        .arg("run")
        .arg("--image")
        .arg(&fx.image)
        .arg("--log")
        .arg(log_of(&fx))
        .arg("--")
        .args([
            "sh",
            "-c",
            "echo x > /augefs/f && echo ready && { read -r _ || true; }",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("augefs run");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(held.stdout.as_mut().expect("stdout")),
        &mut line,
    )
    .expect("ready line");
    assert_eq!(line.trim(), "ready");
    let started = std::time::Instant::now();
    let out = common::augefs(&["fsck".as_ref(), fx.image.as_os_str(), "-n".as_ref()]);
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(8));
    let err = String::from_utf8_lossy(&out.stderr);
    // "mounted at" its bridge, or "in use" (the serving mark) without one.
    assert!(
        err.contains(&format!("by process {}", held.id())) || err.contains("(sh -c echo x"),
        "{err}"
    );
    drop(held.stdin.take());
    assert!(held.wait().expect("augefs run").success());
    fx.fsck_clean();
}

/// A bad path pointer is EFAULT for every path-taking call, never a crash (the
/// interposer reads paths as the kernel does: crates/preload/src/uaccess.rs).
#[test]
fn bad_path_pointers_are_efault() {
    let fx = fixture();
    let exe = compile(&fx, "badptr");
    let out = run(&fx, &[exe.to_str().unwrap()]);
    assert_eq!(checked_stdout("badptr", &out).trim(), "badptr ok");
    fx.fsck_clean();
}

/// A program with the interposer that cannot reach its image fails every call under
/// the prefix (and relative to a working directory handed over inside augefs) with an
/// errno; nothing it does lands on the host. The prefix and the working directory are
/// host directories here, so any leak would show as a file in them.
#[test]
fn an_unreachable_image_fails_closed() {
    preload_built();
    let fx = fixture();
    let lib = Path::new(BIN).with_file_name("libaugefs_preload.so");
    let (pfx, cwd) = (fx.host.join("pfx"), fx.host.join("cwd"));
    std::fs::create_dir(&pfx).unwrap();
    std::fs::create_dir(&cwd).unwrap();
    let script = "touch \"$PFX/a\" 2>/dev/null; echo \"touch=$?\"; \
                  mkdir \"$PFX/d\" 2>/dev/null; echo \"mkdir=$?\"; \
                  echo x > \"$PFX/e\" 2>/dev/null; echo \"redirect=$?\"; \
                  touch rel 2>/dev/null; echo \"relative=$?\"; \
                  (cd \"$PFX\" && touch b) 2>/dev/null; echo \"cd=$?\"";
    let attempt = |image: &Path, handed_cwd: bool| -> String {
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg(script)
            .current_dir(&cwd)
            .env("LD_PRELOAD", &lib)
            .env("AUGEFS_IMAGE", image)
            .env("AUGEFS_PREFIX", &pfx)
            .env("AUGEFS_LOG", log_of(&fx))
            .env("PFX", &pfx)
            .env_remove("AUGEFS_BRIDGE");
        if handed_cwd {
            // What an owner's exec hands over: no descriptors, the cwd "/" (hex).
            c.env("AUGEFS_FDS", "").env("AUGEFS_CWD", "2f");
        }
        let out = c.output().expect("sh");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let leaked = |what: &str| {
        let mut names: Vec<String> = std::fs::read_dir(&pfx)
            .unwrap()
            .chain(std::fs::read_dir(&cwd).unwrap())
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert!(names.is_empty(), "{what}: created on the host: {names:?}");
    };
    let all_failed = |what: &str, out: &str, relative_fails: bool| {
        for step in ["touch", "mkdir", "redirect", "cd"] {
            assert!(
                out.contains(&format!("{step}=")) && !out.contains(&format!("{step}=0")),
                "{what}: {step} succeeded: {out}"
            );
        }
        if relative_fails {
            assert!(!out.contains("relative=0"), "{what}: {out}");
        } else {
            // The working directory is the host's, as asked: `touch rel` made it there.
            std::fs::remove_file(cwd.join("rel")).expect("rel in the host cwd");
        }
        leaked(what);
    };

    // 1. No such image.
    let out = attempt(&fx.host.join("missing.img"), false);
    all_failed("missing image", &out, false);

    // 2. The image is served by a mount (no bridge to reach it through).
    fx.mount();
    let out = attempt(&fx.image, false);
    all_failed("held image", &out, false);

    // 3. A handed-over working directory inside augefs that cannot be taken over:
    // relative paths fail too, in the program and in the children it starts.
    let out = attempt(&fx.image, true);
    all_failed("lost working directory", &out, true);
    fx.unmount();
    let log = std::fs::read_to_string(log_of(&fx)).unwrap_or_default();
    assert!(log.contains("could not take over the image"), "{log}");
}

/// A program that changes its identity reaches augefs as its new self (the set*id
/// family is followed: crates/preload/src/ident.rs).
#[test]
fn a_program_that_drops_root_is_checked_as_its_new_self() {
    let fx = fixture();
    let exe = compile(&fx, "setuid");
    let out = run(&fx, &[exe.to_str().unwrap()]);
    assert_eq!(checked_stdout("setuid", &out).trim(), "setuid ok");
    fx.fsck_clean();
}

/// `augefs run --image` on an image a mount serves attaches to the mount's instance
/// (found in the mount table) instead of starting a program whose every call under the
/// prefix would fail: what it writes under the prefix is on the mount at once, and
/// what the mount has it reads.
#[test]
fn run_on_a_mounted_image_attaches_to_the_mount() {
    let fx = fixture();
    fx.mount();
    fs::write(fx.mnt.join("from-mount"), b"mounted\n").expect("write on the mount");
    let out = run(
        &fx,
        &[
            "sh",
            "-c",
            "cat /augefs/from-mount && echo attached > /augefs/from-run && ls /augefs",
        ],
    );
    let text = checked_stdout("augefs run on a mounted image", &out);
    assert!(text.starts_with("mounted\n"), "{text}");
    assert!(text.contains("from-run"), "{text}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("is mounted at {}", fx.mnt.display())),
        "says where it attached: {err}"
    );
    assert_eq!(
        fs::read(fx.mnt.join("from-run")).expect("the file on the mount"),
        b"attached\n"
    );
    fx.unmount();
    fx.fsck_clean();
}
