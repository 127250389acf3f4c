//! File handles on a mount (FUSE_EXPORT_SUPPORT, docs/DESIGN.md §11.2): a C program
//! (`mount_handles/handles.c`) takes handles with name_to_handle_at and opens them with
//! open_by_handle_at, in the same mount once the kernel has forgotten the inodes (so
//! it must look them up by number, `.`, and reconnect directories through `..`), and
//! in a later mount of the image; a removed file's handle is stale.
//!
//! Needs root (CAP_DAC_READ_SEARCH, drop_caches), /dev/fuse and cc.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use testsupport::fuse::Fixture;
use testsupport::process::{check, sh};

/// Compiles `mount_handles/handles.c` into the fixture's host directory.
fn compile(fx: &Fixture) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mount_handles/handles.c");
    let exe = fx.host.join("handles");
    let cc = Command::new("cc")
        .args(["-O1", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("cc (install gcc: scripts/test does)");
    check("cc handles.c", &cc);
    exe
}

#[test]
fn file_handles_open_in_the_same_and_a_later_mount() {
    let fx = fixture();
    let exe = compile(&fx);
    fx.mount();
    let mut v = fx.vars();
    v.push(("EXE", &exe));
    sh(
        "mkdir -p \"$MNT/d/e\" && echo 'file f' > \"$MNT/f\" && echo 'file g' > \"$MNT/d/e/g\" && \
         echo gone > \"$MNT/gone\" && \"$EXE\" save \"$MNT\" \"$HOST/handles.bin\" && \
         rm \"$MNT/gone\" && echo 2 > /proc/sys/vm/drop_caches",
        &v,
    );
    let opened = |v: &[(&str, &Path)]| sh("\"$EXE\" open \"$MNT\" \"$HOST/handles.bin\"", v);
    assert_eq!(opened(&v), "handles ok\n", "the same mount");
    fx.unmount_with(&["umount"]);
    fx.mount();
    assert_eq!(opened(&v), "handles ok\n", "a later mount");
    fx.unmount_with(&["umount"]);
    fx.fsck_clean();
}
