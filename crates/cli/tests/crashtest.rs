//! `augefs crashtest` through the real binary: the example workloads pass, a workload
//! that does not parse is refused with its line, `--domains` runs a file with each
//! count, a step's unexpected outcome fails, and no workload is an error.

use std::process::Command;

fn augefs() -> Command {
    Command::new(env!("CARGO_BIN_EXE_augefs"))
}

#[test]
fn example_workloads_pass_and_bad_ones_are_refused() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/crash");
    let mut files: Vec<_> = std::fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "crash"))
        .collect();
    files.sort();
    assert!(files.len() >= 3);
    let out = augefs().arg("crashtest").args(&files).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("0 failing"), "{stdout}");

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.crash");
    std::fs::write(&bad, "create /a\nwrite /a 0\n").unwrap();
    let out = augefs().arg("crashtest").arg(&bad).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("bad.crash:2: usage: write TARGET OFFSET LEN"),
        "{stderr}"
    );

    let two = dir.path().join("two.crash");
    std::fs::write(&two, "domains 2\nbegin\ncreate /a\nfsync /a\n").unwrap();
    let out = augefs()
        .args(["crashtest", "--domains", "1,3"])
        .arg(&two)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("two.crash@d1") && stdout.contains("two.crash@d3"),
        "{stdout}"
    );
    assert!(stdout.contains("2 workloads"), "{stdout}");

    let failing = dir.path().join("failing.crash");
    std::fs::write(&failing, "begin\nunlink /missing\nsync\n").unwrap();
    let out = augefs().arg("crashtest").arg(&failing).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success());
    assert!(
        stdout.contains("line 2 (unlink /missing): ENOENT, expected success"),
        "{stdout}"
    );

    let out = augefs().arg("crashtest").output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no workload"));
}
