//! The POSIX layer over a memory image: descriptor sharing, O_APPEND, directory
//! cursors, *at calls, locks and the errno of each failure class.

use posix::{At, Errno, Posix};
use testsupport::mount::mounted;
use vfs::Creds;

fn posix() -> Posix {
    Posix::new(mounted(64 << 20, 2), Creds::root(), 4242)
}

fn errno<T: std::fmt::Debug>(r: posix::Result<T>) -> i32 {
    r.map_or_else(|Errno(e)| e, |_| 0)
}

const RW_CREAT: i32 = libc::O_RDWR | libc::O_CREAT;

#[test]
fn dup_shares_one_offset_and_status_flags() {
    let p = posix();
    let a = p.open_fd(At::Cwd, b"/f", RW_CREAT, 0o644).unwrap();
    let b = p.dup_lowest(a, 0, false).unwrap();
    assert_ne!(a, b);
    p.write(a, b"hello ").unwrap();
    p.write(b, b"world").unwrap();
    assert_eq!(p.lseek(a, 0, libc::SEEK_CUR).unwrap(), 11);
    p.lseek(b, 0, libc::SEEK_SET).unwrap();
    let mut buf = [0u8; 32];
    let n = p.read(a, &mut buf).unwrap();
    assert_eq!(&buf[..n], b"hello world");
    p.get(a).unwrap().set_flags(libc::O_APPEND);
    assert_ne!(p.get(b).unwrap().flags() & libc::O_APPEND, 0);
    p.close(a).unwrap();
    assert_eq!(p.pread(b, &mut buf, 6).unwrap(), 5);
    assert_eq!(errno(p.read(a, &mut buf)), libc::EBADF);
}

#[test]
fn append_writes_land_at_the_end_whatever_the_offset() {
    let p = posix();
    let w = p.open_fd(At::Cwd, b"/log", RW_CREAT, 0o644).unwrap();
    let a = p
        .open_fd(At::Cwd, b"/log", libc::O_WRONLY | libc::O_APPEND, 0)
        .unwrap();
    p.write(w, b"0123456789").unwrap();
    p.write(a, b"AB").unwrap();
    assert_eq!(p.lseek(a, 0, libc::SEEK_CUR).unwrap(), 12);
    p.pwrite(a, b"CD", 0).unwrap();
    let mut buf = [0u8; 32];
    let n = p.pread(w, &mut buf, 0).unwrap();
    assert_eq!(&buf[..n], b"0123456789ABCD");
}

#[test]
fn open_flags_and_their_errors() {
    let p = posix();
    assert_eq!(
        errno(p.open(At::Cwd, b"/nope", libc::O_RDONLY, 0)),
        libc::ENOENT
    );
    let f = p.open_fd(At::Cwd, b"/f", RW_CREAT, 0o600).unwrap();
    p.write(f, b"data").unwrap();
    let excl = libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY;
    assert_eq!(errno(p.open(At::Cwd, b"/f", excl, 0)), libc::EEXIST);
    assert_eq!(
        errno(p.open(At::Cwd, b"/f", libc::O_RDONLY | libc::O_DIRECTORY, 0)),
        libc::ENOTDIR
    );
    p.mkdir(At::Cwd, b"/d", 0o755).unwrap();
    assert_eq!(
        errno(p.open(At::Cwd, b"/d", libc::O_WRONLY, 0)),
        libc::EISDIR
    );
    p.symlink(b"/f", At::Cwd, b"/l").unwrap();
    assert_eq!(
        errno(p.open(At::Cwd, b"/l", libc::O_RDONLY | libc::O_NOFOLLOW, 0)),
        libc::ELOOP
    );
    assert_eq!(
        errno(p.open(At::Cwd, b"/d", libc::O_TMPFILE | libc::O_RDWR, 0)),
        libc::EOPNOTSUPP
    );
    let t = p
        .open_fd(At::Cwd, b"/l", libc::O_WRONLY | libc::O_TRUNC, 0)
        .unwrap();
    assert_eq!(p.fstat(t).unwrap().size, 0);
    let o = p.open_fd(At::Cwd, b"/f", libc::O_RDONLY, 0).unwrap();
    assert_eq!(errno(p.write(o, b"x")), libc::EBADF);
    let path = p.open_fd(At::Cwd, b"/f", libc::O_PATH, 0).unwrap();
    assert_eq!(errno(p.read(path, &mut [0u8; 1])), libc::EBADF);
    assert_eq!(p.fstat(path).unwrap().size, 0);
}

#[test]
fn at_calls_resolve_from_a_directory_descriptor_and_the_cwd() {
    let p = posix();
    p.mkdir(At::Cwd, b"/a", 0o755).unwrap();
    p.mkdir(At::Cwd, b"/a/b", 0o755).unwrap();
    let d = p
        .open_fd(At::Cwd, b"/a", libc::O_RDONLY | libc::O_DIRECTORY, 0)
        .unwrap();
    let f = p.open_fd(At::Fd(d), b"b/x", RW_CREAT, 0o644).unwrap();
    assert_eq!(p.get(f).unwrap().path(), "/a/b/x");
    p.rename(At::Fd(d), b"b/x", At::Cwd, b"/a/y", 0).unwrap();
    assert_eq!(errno(p.stat(At::Cwd, b"/a/b/x", true, false)), libc::ENOENT);
    p.chdir(At::Cwd, b"/a/b").unwrap();
    assert_eq!(p.cwd().path, "/a/b");
    assert!(p.stat(At::Cwd, b"../y", true, false).is_ok());
    p.link(At::Cwd, b"../y", At::Cwd, b"z", false).unwrap();
    assert_eq!(p.stat(At::Cwd, b"z", true, false).unwrap().nlink, 2);
    assert_eq!(errno(p.unlink(At::Cwd, b"/a", true)), libc::ENOTEMPTY);
    assert_eq!(errno(p.unlink(At::Cwd, b"/a/b", false)), libc::EISDIR);
    assert_eq!(
        errno(p.rename(At::Cwd, b"z", At::Cwd, b"../y", libc::RENAME_NOREPLACE)),
        libc::EEXIST
    );
    assert_eq!(
        errno(p.open(At::Fd(f), b"q", libc::O_RDONLY, 0)),
        libc::ENOTDIR
    );
    p.fchdir(d).unwrap();
    assert_eq!(p.cwd().path, "/a");
}

#[test]
fn directory_streams_keep_their_cursor_across_changes() {
    let p = posix();
    p.mkdir(At::Cwd, b"/d", 0o755).unwrap();
    for i in 0..300 {
        let name = format!("/d/f{i:03}");
        let fd = p
            .open_fd(At::Cwd, name.as_bytes(), RW_CREAT, 0o644)
            .unwrap();
        p.close(fd).unwrap();
    }
    let d = p
        .open_fd(At::Cwd, b"/d", libc::O_RDONLY | libc::O_DIRECTORY, 0)
        .unwrap();
    let mut names = Vec::new();
    for _ in 0..10 {
        names.push(p.readdir(d).unwrap().unwrap().name);
    }
    assert_eq!(
        names[..3],
        [b".".to_vec(), b"..".to_vec(), b"f000".to_vec()]
    );
    // Remove one already listed and one not yet: no survivor repeats or goes missing.
    p.unlink(At::Cwd, b"/d/f001", false).unwrap();
    p.unlink(At::Cwd, b"/d/f200", false).unwrap();
    let mut buf = vec![0u8; 1024];
    loop {
        let n = p.getdents64(d, &mut buf).unwrap();
        if n == 0 {
            break;
        }
        let mut at = 0;
        while at < n {
            let reclen = u16::from_ne_bytes([buf[at + 16], buf[at + 17]]) as usize;
            let name = &buf[at + 19..at + reclen];
            let end = name.iter().position(|&b| b == 0).unwrap();
            names.push(name[..end].to_vec());
            at += reclen;
        }
    }
    assert_eq!(names.len(), 2 + 299);
    assert!(!names.contains(&b"f200".to_vec()));
    p.lseek(d, 0, libc::SEEK_SET).unwrap();
    assert_eq!(p.readdir(d).unwrap().unwrap().name, b".");
    assert_eq!(errno(p.getdents64(d, &mut [0u8; 8])), libc::EINVAL);
}

#[test]
fn record_locks_by_process_and_by_description_and_flock() {
    let p = posix();
    let a = p.open_fd(At::Cwd, b"/f", RW_CREAT, 0o644).unwrap();
    let b = p.open_fd(At::Cwd, b"/f", libc::O_RDWR, 0).unwrap();
    let wr = posix::lock::Flock {
        kind: libc::F_WRLCK as i16,
        start: 0,
        len: 10,
        pid: 0,
    };
    // Process locks: the same process never conflicts with itself.
    p.set_lock(a, &wr, false, false).unwrap();
    p.set_lock(b, &wr, false, false).unwrap();
    // OFD locks conflict between descriptions.
    p.set_lock(a, &Flock { start: 100, ..wr }, false, true)
        .unwrap();
    assert_eq!(
        errno(p.set_lock(b, &Flock { start: 105, ..wr }, false, true)),
        libc::EAGAIN
    );
    let got = p.get_lock(b, &Flock { start: 105, ..wr }, true).unwrap();
    assert_eq!(
        (got.kind, got.start, got.len, got.pid),
        (libc::F_WRLCK as i16, 100, 10, -1)
    );
    p.flock(a, libc::LOCK_EX).unwrap();
    assert_eq!(
        errno(p.flock(b, libc::LOCK_SH | libc::LOCK_NB)),
        libc::EAGAIN
    );
    p.close(a).unwrap();
    p.flock(b, libc::LOCK_SH | libc::LOCK_NB).unwrap();
}
use posix::lock::Flock;

#[test]
fn seek_truncate_stat_xattr_and_access() {
    let p = posix();
    let f = p.open_fd(At::Cwd, b"/s", RW_CREAT, 0o640).unwrap();
    p.pwrite(f, &[1u8; 4096], 8192).unwrap();
    assert_eq!(p.lseek(f, 0, libc::SEEK_DATA).unwrap(), 8192);
    assert_eq!(p.lseek(f, 8192, libc::SEEK_HOLE).unwrap(), 12288);
    assert_eq!(errno(p.lseek(f, -1, libc::SEEK_SET)), libc::EINVAL);
    p.ftruncate(f, 100).unwrap();
    let st = posix::stat::to_stat(&p.fstat(f).unwrap());
    assert_eq!((st.st_size, st.st_mode), (100, libc::S_IFREG | 0o640));
    p.truncate(At::Cwd, b"/s", 0).unwrap();
    assert_eq!(p.fstat(f).unwrap().size, 0);
    let ino = p.get(f).unwrap().ino();
    p.set_xattr(ino, b"user.k", b"v", 0).unwrap();
    assert_eq!(p.get_xattr(ino, b"user.k").unwrap(), b"v");
    assert_eq!(p.list_xattr(ino).unwrap(), b"user.k\0");
    assert_eq!(
        errno(p.set_xattr(ino, b"user.k", b"w", libc::XATTR_CREATE)),
        libc::EEXIST
    );
    assert_eq!(errno(p.get_xattr(ino, b"user.none")), libc::ENODATA);
    p.access(At::Cwd, b"/s", libc::R_OK | libc::W_OK, true)
        .unwrap();
    p.fallocate(f, 0, 0, 8192).unwrap();
    assert_eq!(p.fstat(f).unwrap().size, 8192);
    let v = p.writev(f, &[b"ab", b"cd"], Some(0)).unwrap();
    assert_eq!(v, 4);
    let (mut x, mut y) = ([0u8; 1], [0u8; 3]);
    assert_eq!(p.readv(f, &mut [&mut x, &mut y], Some(0)).unwrap(), 4);
    assert_eq!((&x, &y), (b"a", b"bcd"));
}

#[test]
fn table_membership_follows_install_dup_and_close_at_any_number() {
    let p = posix();
    let a = p.open_fd(At::Cwd, b"/m", RW_CREAT, 0o644).unwrap();
    assert!(p.is_open(a));
    assert!(!p.is_open(-1));
    assert!(!p.is_open(a + 1));
    // Beyond the lock-free bitmap's range, and at its last number.
    let edges = [
        posix::desc::FAST_FDS_MAX as i32 - 1,
        posix::desc::FAST_FDS_MAX as i32,
        1 << 20,
    ];
    for &fd in &edges {
        assert!(!p.is_open(fd));
        assert!(p.install(fd, p.get(a).unwrap(), false).is_none());
        assert!(p.is_open(fd));
        assert_eq!(p.write(fd, b"x").unwrap(), 1);
    }
    let listed: Vec<i32> = p.descriptors().iter().map(|e| e.0).collect();
    assert_eq!(listed, [&[a][..], &edges[..]].concat());
    for &fd in &edges {
        p.close(fd).unwrap();
        assert!(!p.is_open(fd));
        assert_eq!(errno(p.close(fd)), libc::EBADF);
    }
    // The shared offset moved once per write through every number.
    assert_eq!(p.lseek(a, 0, libc::SEEK_CUR).unwrap(), edges.len() as i64);
    p.close(a).unwrap();
    assert!(!p.is_open(a));
    assert!(p.descriptors().is_empty());
}

#[test]
fn vectored_calls_gather_and_scatter_with_one_or_many_buffers() {
    let p = posix();
    let fd = p.open_fd(At::Cwd, b"/v", RW_CREAT, 0o644).unwrap();
    assert_eq!(p.writev(fd, &[b"abc"], None).unwrap(), 3);
    assert_eq!(p.writev(fd, &[b"de", b"", b"fgh"], None).unwrap(), 5);
    assert_eq!(p.writev(fd, &[b"XY", b"Z"], Some(1)).unwrap(), 3);
    let (mut x, mut y, mut z) = ([0u8; 2], [0u8; 0], [0u8; 10]);
    let n = p
        .readv(fd, &mut [&mut x[..], &mut y[..], &mut z[..]], Some(0))
        .unwrap();
    assert_eq!(n, 8);
    assert_eq!(&x, b"aX");
    assert_eq!(&z[..6], b"YZefgh");
    let mut one = [0u8; 4];
    p.lseek(fd, 4, libc::SEEK_SET).unwrap();
    assert_eq!(p.readv(fd, &mut [&mut one[..]], None).unwrap(), 4);
    assert_eq!(&one, b"efgh");
    assert_eq!(p.lseek(fd, 0, libc::SEEK_CUR).unwrap(), 8);
}

#[test]
fn o_sync_and_o_dsync_writes_are_written_back_before_they_return() {
    let fs = mounted(64 << 20, 2);
    let p = Posix::new(fs.clone(), Creds::root(), 4242);
    for (flags, synced) in [(0, false), (libc::O_SYNC, true), (libc::O_DSYNC, true)] {
        let path = format!("/f{flags}");
        let fd = p
            .open_fd(At::Cwd, path.as_bytes(), RW_CREAT | flags, 0o644)
            .unwrap();
        let ino = p.get(fd).unwrap().ino();
        p.write(fd, &[7u8; 5000]).unwrap();
        p.pwrite(fd, &[8u8; 100], 9000).unwrap();
        let dirty = fs.dirty_blocks(ino).unwrap();
        assert_eq!(
            dirty.is_empty(),
            synced,
            "flags {flags:#o}: dirty {dirty:?}"
        );
        p.close(fd).unwrap();
    }
}

#[test]
fn special_files_are_made_and_stated_but_not_opened() {
    let p = posix();
    let dev = libc::makedev(1, 3);
    p.mknod(At::Cwd, b"/fifo", libc::S_IFIFO | 0o640, 0)
        .unwrap();
    p.mknod(At::Cwd, b"/null", libc::S_IFCHR | 0o666, dev)
        .unwrap();
    p.mknod(At::Cwd, b"/sda", libc::S_IFBLK | 0o600, libc::makedev(8, 1))
        .unwrap();
    p.mknod(At::Cwd, b"/sock", libc::S_IFSOCK | 0o600, 0)
        .unwrap();
    p.mknod(At::Cwd, b"/reg", 0o600, 0).unwrap(); // no type bits: a regular file
    let st = posix::stat::to_stat(&p.stat(At::Cwd, b"/null", false, false).unwrap());
    assert_eq!(
        (st.st_mode, st.st_rdev, st.st_size),
        (libc::S_IFCHR | 0o666, dev, 0)
    );
    let sx = posix::stat::to_statx(&p.stat(At::Cwd, b"/sda", false, false).unwrap());
    assert_eq!((sx.stx_rdev_major, sx.stx_rdev_minor), (8, 1));
    let st = posix::stat::to_stat(&p.stat(At::Cwd, b"/fifo", false, false).unwrap());
    assert_eq!((st.st_mode, st.st_rdev), (libc::S_IFIFO | 0o640, 0));
    let reg = p.stat(At::Cwd, b"/reg", false, false).unwrap();
    assert_eq!(reg.mode, libc::S_IFREG | 0o600);
    assert_eq!(
        errno(p.mknod(At::Cwd, b"/d", libc::S_IFDIR | 0o755, 0)),
        libc::EPERM
    );
    assert_eq!(
        errno(p.mknod(At::Cwd, b"/fifo", libc::S_IFIFO, 0)),
        libc::EEXIST
    );
    // Not a description: open_node names the file for a kernel mount, open refuses.
    for (path, kind) in [
        (&b"/fifo"[..], vfs::Kind::Fifo),
        (b"/null", vfs::Kind::CharDev),
    ] {
        match p.open_node(At::Cwd, path, libc::O_RDONLY, 0).unwrap() {
            posix::open::Opened::Special { kind: k, path: at } => {
                assert_eq!((k, at.as_bytes()), (kind, path));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(errno(p.open(At::Cwd, path, libc::O_WRONLY, 0)), libc::ENXIO);
    }
    // O_PATH is a description (fstat, fchmod by descriptor).
    let f = p.open_fd(At::Cwd, b"/sock", libc::O_PATH, 0).unwrap();
    assert_eq!(p.fstat(f).unwrap().kind, vfs::Kind::Socket);
    // Names and attributes as any non-directory.
    p.rename(At::Cwd, b"/fifo", At::Cwd, b"/fifo2", 0).unwrap();
    p.link(At::Cwd, b"/fifo2", At::Cwd, b"/fifo3", false)
        .unwrap();
    assert_eq!(p.stat(At::Cwd, b"/fifo3", false, false).unwrap().nlink, 2);
    assert_eq!(errno(p.truncate(At::Cwd, b"/fifo3", 0)), libc::EINVAL);
    p.unlink(At::Cwd, b"/fifo2", false).unwrap();
    p.unlink(At::Cwd, b"/fifo3", false).unwrap();
    let mut names = Vec::new();
    let d = p
        .open_fd(At::Cwd, b"/", libc::O_RDONLY | libc::O_DIRECTORY, 0)
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let n = p.getdents64(d, &mut buf).unwrap();
    let mut at = 0;
    while at < n {
        let len = u16::from_ne_bytes([buf[at + 16], buf[at + 17]]) as usize;
        let name_end = buf[at + 19..at + len].iter().position(|&c| c == 0).unwrap();
        names.push((buf[at + 19..at + 19 + name_end].to_vec(), buf[at + 18]));
        at += len;
    }
    assert!(
        names.contains(&(b"null".to_vec(), libc::DT_CHR)),
        "{names:?}"
    );
    assert!(
        names.contains(&(b"sock".to_vec(), libc::DT_SOCK)),
        "{names:?}"
    );
    assert!(
        names.contains(&(b"sda".to_vec(), libc::DT_BLK)),
        "{names:?}"
    );
}
