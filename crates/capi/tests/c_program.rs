//! A C program compiled against include/augefs.h and linked with libaugefs.so (built by
//! `cargo build -p augefs-capi`, next to the test binaries' directory) writes, reads,
//! lists and renames in a fresh image. Skipped with a note if the library is not built.

use std::path::Path;
use std::process::Command;

const PROGRAM: &str = r#"
#include <augefs.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
    int err = 0;
    augefs_t *h = augefs_mount(argv[1], NULL, &err);
    if (!h) { printf("mount %d\n", err); return 1; }
    if (augefs_mkdir(h, "/d", 0755) != 0) return 2;
    int fd = augefs_open(h, "/d/f", O_RDWR | O_CREAT, 0644);
    if (fd < 0) return 3;
    if (augefs_write(h, fd, "hello", 5) != 5) return 4;
    char buf[16] = {0};
    if (augefs_pread(h, fd, buf, sizeof buf, 0) != 5 || strcmp(buf, "hello")) return 5;
    augefs_view_t *view = NULL;
    const struct iovec *iov = NULL;
    if (augefs_pread_view(h, fd, 16, 1, &view) != 4 || !view) return 12;
    if (augefs_view_iov(view, &iov) != 1 || iov[0].iov_len != 4) return 13;
    /* A write and a truncate do not change what the view lends. */
    if (augefs_pwrite(h, fd, "HELLO", 5, 0) != 5) return 14;
    int t = augefs_open(h, "/d/f", O_WRONLY | O_TRUNC, 0);
    if (t < 0 || augefs_close(h, t) != 0) return 15;
    if (memcmp(iov[0].iov_base, "ello", 4)) return 16;
    augefs_view_release(view);
    if (augefs_pread_view(h, fd, 16, 0, &view) != 0) return 17;
    augefs_view_release(view);
    if (augefs_pread_view(h, 999, 16, 0, &view) >= 0 || view) return 18;
    if (augefs_pwrite(h, fd, "hello", 5, 0) != 5) return 19;
    if (augefs_fsync(h, fd) != 0 || augefs_close(h, fd) != 0) return 6;
    if (augefs_rename(h, "/d/f", "/d/g") != 0) return 7;
    struct stat st;
    if (augefs_stat(h, "/d/g", &st) != 0 || st.st_size != 5) return 8;
    if (augefs_stat(h, "/d/f", &st) != -ENOENT_VALUE) return 9;
    int dir = augefs_open(h, "/d", O_RDONLY | O_DIRECTORY, 0);
    char name[256]; int n = 0;
    while (augefs_readdir(h, dir, name, sizeof name) == 1) n++;
    if (n != 3) return 10;
    augefs_close(h, dir);
    if (augefs_unmount(h) != 0) return 11;
    printf("capi ok\n");
    return 0;
}
"#;

#[test]
fn c_program_against_the_header_and_library() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let exe = std::env::current_exe().unwrap();
    let target = exe.parent().unwrap().parent().unwrap();
    let lib = target.join("libaugefs.so");
    if !lib.exists() {
        eprintln!(
            "skipped: {} not built (cargo build -p augefs-capi)",
            lib.display()
        );
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("p.c");
    std::fs::write(
        &src,
        PROGRAM.replace("ENOENT_VALUE", &libc::ENOENT.to_string()),
    )
    .unwrap();
    let bin = tmp.path().join("p");
    let cc = Command::new("cc")
        .arg("-I")
        .arg(dir.join("include"))
        .arg(&src)
        .arg("-o")
        .arg(&bin)
        .arg("-L")
        .arg(target)
        .arg("-laugefs")
        .output()
        .expect("cc");
    assert!(
        cc.status.success(),
        "{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let image = tmp.path().join("img");
    let augefs = target.join("augefs");
    if !augefs.exists() {
        eprintln!("skipped: {} not built", augefs.display());
        return;
    }
    let mkfs = Command::new(&augefs)
        .args(["mkfs", image.to_str().unwrap(), "--size", "256M"])
        .output()
        .unwrap();
    assert!(mkfs.status.success());
    let out = Command::new(&bin)
        .arg(&image)
        .env("LD_LIBRARY_PATH", target)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "capi ok",
        "{out:?}"
    );
}
