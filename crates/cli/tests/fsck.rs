//! `augefs fsck` through the real binary: e2fsck's exit codes (0, 1, 4, 8, 16), `-n`
//! leaving the image untouched, and the `--json` report.

mod common;

use common::{augefs, mkfs};
use engine::log::EngineConfig;
use std::path::Path;
use std::process::Output;
use testsupport::mount::{open_file, unmount};
use testsupport::process::{check, s};
use testsupport::scratch;

fn code(o: &Output) -> i32 {
    o.status.code().expect("exited")
}

/// An image with a few files, and a directory entry naming a missing inode.
fn corrupted_image(path: &Path) {
    check("mkfs", &mkfs(path, "128M", &[]));
    let fs = open_file(path, EngineConfig::default());
    fs.create_dir("/d", 0o755).unwrap();
    let f = vfs::OpenOptions::new()
        .write(true)
        .create(true)
        .open(&fs, "/d/f")
        .unwrap();
    f.write_at(&[3u8; 10_000], 0).unwrap();
    drop(f);
    let ghost = vfs::records::Dentry {
        ino: format::InodeNo(424_242),
        kind: vfs::Kind::File,
    };
    fs.engine()
        .metadb()
        .put(
            &vfs::records::dentry_key(vfs::records::ROOT, b"ghost"),
            &ghost.encode(),
            metadb::Durability::Sync,
        )
        .unwrap();
    unmount(fs);
}

#[test]
fn exit_codes_and_json() {
    let dir = scratch!();
    let image = dir.path().join("img");
    corrupted_image(&image);
    let before = std::fs::read(&image).unwrap();

    let o = augefs(&["fsck", s(&image), "-n", "--json"]);
    assert_eq!(code(&o), 4, "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["exit_code"], 4);
    let problems = v["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{v}");
    assert_eq!(problems[0]["kind"], "dangling_dentry");
    assert_eq!(problems[0]["objects"]["name"], "ghost");
    assert_eq!(problems[0]["objects"]["parent"], 1);
    assert_eq!(problems[0]["fixed"], false);
    assert!(
        std::fs::read(&image).unwrap() == before,
        "-n changed the image"
    );

    // Without -p or -y: report only, also untouched.
    let o = augefs(&["fsck", s(&image)]);
    assert_eq!(code(&o), 4);
    assert!(String::from_utf8_lossy(&o.stdout).contains("[NOT FIXED] dangling_dentry"));
    assert!(std::fs::read(&image).unwrap() == before);

    // -p leaves a dropped name to -y.
    assert_eq!(code(&augefs(&["fsck", s(&image), "-p"])), 4);
    let o = augefs(&["fsck", s(&image), "-y", "--json"]);
    assert_eq!(code(&o), 1, "{}", String::from_utf8_lossy(&o.stdout));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["problems"][0]["fixed"], true);
    let o = augefs(&["fsck", s(&image), "--verify-data"]);
    assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stdout));
    assert!(String::from_utf8_lossy(&o.stdout).contains("clean"));
}

#[test]
fn operational_and_usage_errors() {
    let dir = scratch!();
    let zeros = dir.path().join("zeros");
    std::fs::write(&zeros, vec![0u8; 4 << 20]).unwrap();
    let o = augefs(&["fsck", s(&zeros)]);
    assert_eq!(code(&o), 8);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("not an augefs image"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = augefs(&["fsck", s(&dir.path().join("missing"))]);
    assert_eq!(code(&o), 8);
    assert!(String::from_utf8_lossy(&o.stderr).contains("no such file"));
    assert_eq!(code(&augefs(&["fsck", s(&zeros), "-n", "-y"])), 16);
    assert_eq!(code(&augefs(&["fsck"])), 16);
    assert_eq!(code(&augefs(&["fsck", s(&zeros), "--bogus"])), 16);
    assert_eq!(code(&augefs(&["fsck", "--help"])), 0);
}
