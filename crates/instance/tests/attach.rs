//! An instance serving attached clients in this process: the posix layer over a
//! `Remote` sees what the vfs has, requests are checked, malformed ones answered with
//! an errno, and a session's locks and files go with its last connection.

use instance::client::{Remote, Transport};
use instance::server::Instance;
use instance::wire::Writer;
use posix::lock::Flock;
use posix::{At, Errno, Posix};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};
use vfs::FileSystem;

struct Setup {
    _dir: tempfile::TempDir,
    transport: Transport,
    sock: std::path::PathBuf,
    fs: Arc<FileSystem>,
    inst: Option<Instance>,
}

impl Setup {
    fn new(transport: Transport) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("i.sock");
        let fs = testsupport::mount::mounted(64 << 20, 1);
        let inst = Instance::start(fs.clone(), &sock, None).unwrap();
        Setup {
            _dir: dir,
            transport,
            sock,
            fs,
            inst: Some(inst),
        }
    }

    fn client(&self) -> Posix {
        let r = Remote::connect_with(&self.sock, self.transport).unwrap();
        Posix::new(
            Arc::new(r),
            vfs::Creds::of_process(),
            std::process::id() as i32,
        )
    }

    /// Waits until the instance has no connection left (each holds a socket, and a
    /// mailbox's descriptor, until its thread ends).
    fn connections_drop_to_zero(&self) {
        let t = Instant::now();
        while self.inst.as_ref().unwrap().connections() > 0 {
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "connections stay open"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn sessions_drop_to(&self, n: usize) {
        let t = Instant::now();
        while self.inst.as_ref().unwrap().sessions() != n {
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "sessions stay at {}",
                self.inst.as_ref().unwrap().sessions()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        if let Some(i) = self.inst.take() {
            i.stop();
        }
    }
}

fn a_client_sees_and_changes_the_instance_file_system(t: Transport) {
    let s = Setup::new(t);
    let px = s.client();
    px.mkdir(At::Cwd, b"/d", 0o755).unwrap();
    let fd = px
        .open_fd(At::Cwd, b"/d/f", libc::O_CREAT | libc::O_RDWR, 0o644)
        .unwrap();
    let data: Vec<u8> = (0..6_000_000u32)
        .map(|i| (i * 7 + i / 4096) as u8)
        .collect();
    assert_eq!(
        px.write(fd, &data).unwrap(),
        data.len(),
        "a write over one request's size"
    );
    px.fsync(fd, false).unwrap();
    let mut back = vec![0u8; data.len() + 10];
    assert_eq!(px.pread(fd, &mut back, 0).unwrap(), data.len());
    assert_eq!(&back[..data.len()], &data[..]);
    // The server's vfs has the same.
    let ino =
        s.fs.resolve_at(&vfs::Creds::root(), vfs::records::ROOT, b"d/f", true)
            .unwrap();
    assert_eq!(s.fs.stat_ino(ino).unwrap().size, data.len() as u64);
    assert_eq!(
        px.stat(At::Cwd, b"/d/f", true, false).unwrap().size,
        data.len() as u64
    );
    px.rename(At::Cwd, b"/d/f", At::Cwd, b"/d/g", 0).unwrap();
    assert_eq!(
        px.stat(At::Cwd, b"/d/f", true, false).unwrap_err(),
        Errno(libc::ENOENT)
    );
    let dfd = px
        .open_fd(At::Cwd, b"/d", libc::O_RDONLY | libc::O_DIRECTORY, 0)
        .unwrap();
    let mut names = Vec::new();
    while let Some(e) = px.readdir(dfd).unwrap() {
        names.push(String::from_utf8(e.name).unwrap());
    }
    assert_eq!(names, [".", "..", "g"]);
    px.symlink(b"g", At::Cwd, b"/d/l").unwrap();
    assert_eq!(px.readlink(At::Cwd, b"/d/l").unwrap(), b"g");
    px.set_xattr(ino, b"user.k", b"v", 0).unwrap();
    assert_eq!(px.get_xattr(ino, b"user.k").unwrap(), b"v");
    px.ftruncate(fd, 5).unwrap();
    assert_eq!(s.fs.stat_ino(ino).unwrap().size, 5);
    px.close(fd).unwrap();
    px.close(dfd).unwrap();
    px.unlink(At::Cwd, b"/d/g", false).unwrap();
    px.unlink(At::Cwd, b"/d/l", false).unwrap();
    px.unlink(At::Cwd, b"/d", true).unwrap();
    assert_eq!(px.statfs().unwrap().block_size, 4096);
}

fn data_calls_need_a_handle_of_the_session_in_the_right_mode(t: Transport) {
    let s = Setup::new(t);
    let px = s.client();
    let fd = px
        .open_fd(At::Cwd, b"/f", libc::O_CREAT | libc::O_RDONLY, 0o644)
        .unwrap();
    // The posix layer refuses first; the instance refuses too, for a client that lies.
    let d = px.get(fd).unwrap();
    let f = d.file().unwrap();
    assert_eq!(d.fs().write(f, 0, b"x"), Err(Errno(libc::EBADF)));
    let fake = posix::backend::OpenFile {
        ino: f.ino,
        owner: f.owner,
        read: true,
        write: true,
        reference: posix::backend::Reference::Remote(9999),
    };
    assert_eq!(d.fs().write(&fake, 0, b"x"), Err(Errno(libc::EBADF)));
    std::mem::forget(fake);
}

/// Sends one frame of `body` on `c`; the status of its reply.
fn send(c: &mut UnixStream, body: &[u8]) -> i32 {
    let mut frame = (body.len() as u32).to_le_bytes().to_vec();
    frame.extend_from_slice(body);
    c.write_all(&frame).unwrap();
    let mut len = [0u8; 4];
    c.read_exact(&mut len).unwrap();
    let mut reply = vec![0u8; u32::from_le_bytes(len) as usize];
    c.read_exact(&mut reply).unwrap();
    i32::from_le_bytes(reply[..4].try_into().unwrap())
}

#[test]
fn malformed_requests_get_errnos_and_the_connection_goes_on() {
    let s = Setup::new(Transport::Unprotected);
    let mut c = UnixStream::connect(&s.sock).unwrap();
    let mut hello = Writer::new();
    instance::proto::Request::Hello {
        token: 0,
        version: instance::proto::VERSION,
    }
    .encode(&mut hello);
    assert_eq!(send(&mut c, hello.body()), 0);
    // An empty frame is a ring (look at the mailbox): no reply, nothing else.
    c.write_all(&0u32.to_le_bytes()).unwrap();
    assert_eq!(send(&mut c, &[250, 1, 2]), libc::ENOSYS);
    assert_eq!(send(&mut c, &[5, 1]), libc::EPROTO, "a short stat");
    let mut w = Writer::new();
    instance::proto::Request::Stat {
        ino: vfs::records::ROOT,
    }
    .encode(&mut w);
    assert_eq!(send(&mut c, w.body()), 0, "still served after garbage");
    // A client of another build (another protocol version) is refused at once.
    let mut c3 = UnixStream::connect(&s.sock).unwrap();
    let mut old = Writer::new();
    instance::proto::Request::Hello {
        token: 0,
        version: instance::proto::VERSION - 1,
    }
    .encode(&mut old);
    assert_eq!(send(&mut c3, old.body()), libc::EPROTO);
    // A second Hello naming another session is refused.
    let mut c2 = UnixStream::connect(&s.sock).unwrap();
    let mut other = Writer::new();
    instance::proto::Request::Hello {
        token: 12345,
        version: instance::proto::VERSION,
    }
    .encode(&mut other);
    assert_eq!(send(&mut c2, other.body()), libc::EPERM);
}

/// Sends one frame of `body` on `c` with no reply awaited.
fn post(c: &mut UnixStream, req: &instance::proto::Request<'_>) {
    let mut w = Writer::new();
    req.encode(&mut w);
    let mut frame = (w.body().len() as u32).to_le_bytes().to_vec();
    frame.extend_from_slice(w.body());
    c.write_all(&frame).unwrap();
}

/// Encodes `req` and sends it on `c`; the status of its reply.
fn ask(c: &mut UnixStream, req: &instance::proto::Request<'_>) -> i32 {
    let mut w = Writer::new();
    req.encode(&mut w);
    send(c, w.body())
}

#[test]
fn a_failed_post_is_reported_by_the_next_sync_once() {
    use instance::proto::{Request, VERSION};
    let s = Setup::new(Transport::Socket);
    let mut c = UnixStream::connect(&s.sock).unwrap();
    let mut hello = Writer::new();
    Request::Hello {
        token: 0,
        version: VERSION,
    }
    .encode(&mut hello);
    let mut frame = (hello.body().len() as u32).to_le_bytes().to_vec();
    frame.extend_from_slice(hello.body());
    c.write_all(&frame).unwrap();
    let mut reply = [0u8; 16];
    c.read_exact(&mut reply).unwrap();
    assert_eq!(i32::from_le_bytes(reply[4..8].try_into().unwrap()), 0);
    let token = u64::from_le_bytes(reply[8..16].try_into().unwrap());
    // The posting connection of that session: answered once.
    let mut p = UnixStream::connect(&s.sock).unwrap();
    let posts = Request::Posts {
        token,
        version: VERSION,
        sent: 0,
        ring: false,
    };
    assert_eq!(ask(&mut p, &posts), 0);
    // A post that fails (no such file) is acknowledged by nobody: the next sync,
    // after a barrier for it, reports it, and only that one.
    let changes = vfs::AttrChanges {
        perm: Some(0o600),
        ..Default::default()
    };
    post(
        &mut p,
        &Request::SetAttr {
            ino: format::InodeNo(987_654),
            changes,
        },
    );
    post(&mut c, &Request::Barrier { count: 1 });
    assert_ne!(ask(&mut c, &Request::Sync), 0, "the failed post");
    assert_eq!(ask(&mut c, &Request::Sync), 0, "reported once");
    // A post of another kind ends the posting connection.
    post(&mut p, &Request::Sync);
    let mut byte = [0u8; 1];
    assert_eq!(p.read(&mut byte).unwrap(), 0, "the instance hung up");
}

/// Run as a child process by [`a_killed_client_releases_its_locks_and_files`]: with
/// the socket in the environment it attaches, takes locks, says so, and waits to die.
#[test]
fn child_that_locks_and_waits() {
    let Some(sock) = std::env::var_os("ATTACH_TEST_SOCK") else {
        return;
    };
    let r = Remote::connect(std::path::Path::new(&sock)).unwrap();
    let px = Posix::new(
        Arc::new(r),
        vfs::Creds::of_process(),
        std::process::id() as i32,
    );
    let fd = px
        .open_fd(At::Cwd, b"/f", libc::O_CREAT | libc::O_RDWR, 0o644)
        .unwrap();
    let lock = Flock {
        kind: libc::F_WRLCK as i16,
        start: 0,
        len: 0,
        pid: 0,
    };
    px.set_lock(fd, &lock, false, false).unwrap();
    px.flock(fd, libc::LOCK_EX).unwrap();
    println!("LOCKED");
    std::io::stdout().flush().unwrap();
    std::thread::sleep(Duration::from_secs(60));
}

fn a_killed_client_releases_its_locks_and_files(t: Transport) {
    let s = Setup::new(t);
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_that_locks_and_waits",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("ATTACH_TEST_SOCK", &s.sock)
        .env(
            "AUGEFS_MAILBOX",
            if t == Transport::Socket {
                "off"
            } else {
                "unprotected"
            },
        )
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("LOCKED") {
        line.clear();
        assert!(
            std::io::BufRead::read_line(&mut out, &mut line).unwrap() > 0,
            "the child ended"
        );
    }
    let b = s.client();
    let fb = b.open_fd(At::Cwd, b"/f", libc::O_RDWR, 0).unwrap();
    let lock = Flock {
        kind: libc::F_WRLCK as i16,
        start: 0,
        len: 0,
        pid: 0,
    };
    assert_eq!(b.set_lock(fb, &lock, false, true), Err(Errno(libc::EAGAIN)));
    assert_eq!(
        b.flock(fb, libc::LOCK_EX | libc::LOCK_NB),
        Err(Errno(libc::EAGAIN))
    );
    // B waits for both locks while the child dies holding them.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let r = b.set_lock(fb, &lock, true, true);
        let r = r.and_then(|()| b.flock(fb, libc::LOCK_EX));
        let _ = tx.send((r, b));
    });
    std::thread::sleep(Duration::from_millis(100));
    let killed = Instant::now();
    child.kill().unwrap();
    child.wait().unwrap();
    let (r, b) = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("the dead client's locks were never released");
    r.unwrap();
    let waited = killed.elapsed();
    assert!(waited < Duration::from_secs(1), "waited {waited:?}");
    drop(b);
    s.sessions_drop_to(0);
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Runs [`thousand_attaches`] alone in a child process: descriptors and memory are
/// counted per process, and other tests of this binary open and close their own.
#[test]
fn a_thousand_attaches_leave_nothing_behind() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "thousand_attaches",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("ATTACH_TEST_THOUSAND", "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("1 passed"),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn thousand_attaches() {
    if std::env::var_os("ATTACH_TEST_THOUSAND").is_none() {
        return;
    }
    let s = Setup::new(Transport::Unprotected);
    let warm = s.client();
    warm.mkdir(At::Cwd, b"/d", 0o755).unwrap();
    drop(warm);
    s.sessions_drop_to(0);
    s.connections_drop_to_zero();
    let (fds, rss) = (open_fds(), rss_kib());
    for i in 0..1000 {
        let px = s.client();
        let fd = px
            .open_fd(At::Cwd, b"/d/f", libc::O_CREAT | libc::O_RDWR, 0o644)
            .unwrap();
        px.pwrite(fd, &[i as u8; 100], 0).unwrap();
        // Half close their file, half leave it to the session's end.
        if i % 2 == 0 {
            px.close(fd).unwrap();
        }
    }
    s.sessions_drop_to(0);
    s.connections_drop_to_zero();
    assert_eq!(
        open_fds(),
        fds,
        "descriptors of the instance or its clients leaked"
    );
    let grown = rss_kib().saturating_sub(rss);
    assert!(grown < 16 * 1024, "resident memory grew by {grown} KiB");
}

#[test]
fn a_hung_client_stalls_no_one() {
    let s = Setup::new(Transport::Unprotected);
    // A client that sends half a frame and then nothing.
    let mut hung = UnixStream::connect(&s.sock).unwrap();
    let mut hello = Writer::new();
    instance::proto::Request::Hello {
        token: 0,
        version: instance::proto::VERSION,
    }
    .encode(&mut hello);
    hung.write_all(hello.finish(0)).unwrap();
    let mut reply = [0u8; 16];
    hung.read_exact(&mut reply).unwrap();
    hung.write_all(&100u32.to_le_bytes()).unwrap();
    hung.write_all(&[5, 1, 2]).unwrap();
    // Everyone else goes on.
    let px = s.client();
    let t = Instant::now();
    for i in 0..100 {
        px.mkdir(At::Cwd, format!("/d{i}").as_bytes(), 0o755)
            .unwrap();
    }
    assert!(t.elapsed() < Duration::from_secs(5));
    drop(hung);
}

fn repeated_stats_need_no_request_until_something_changes(t: Transport) {
    let s = Setup::new(t);
    let inst = s.inst.as_ref().unwrap();
    let px = s.client();
    px.mkdir(At::Cwd, b"/d", 0o755).unwrap();
    let w = px
        .open_fd(At::Cwd, b"/d/f", libc::O_CREAT | libc::O_RDWR, 0o644)
        .unwrap();
    px.write(w, b"12345").unwrap();
    // While a descriptor open for writing holds a lease (its writes may be posted),
    // stats of the file ask (crate::posts); once it is closed they need not.
    let before = inst.requests();
    assert_eq!(px.fstat(w).unwrap().size, 5);
    assert_eq!(px.fstat(w).unwrap().size, 5);
    assert_eq!(inst.requests() - before, 2, "a leased file's stats ask");
    px.close(w).unwrap();
    let fd = px.open_fd(At::Cwd, b"/d/f", libc::O_RDONLY, 0).unwrap();
    assert_eq!(px.stat(At::Cwd, b"/d/f", true, false).unwrap().size, 5);
    let before = inst.requests();
    for _ in 0..100 {
        assert_eq!(px.stat(At::Cwd, b"/d/f", true, false).unwrap().size, 5);
        assert_eq!(px.fstat(fd).unwrap().size, 5);
    }
    assert!(
        inst.requests() - before <= 1,
        "{} requests",
        inst.requests() - before
    );
    // A change through the instance: the next stat asks, and sees it.
    let w = px.open_fd(At::Cwd, b"/d/f", libc::O_WRONLY, 0).unwrap();
    px.pwrite(w, b"678", 5).unwrap();
    assert_eq!(px.stat(At::Cwd, b"/d/f", true, false).unwrap().size, 8);
    px.close(w).unwrap();
    // A change another front end makes (marked, as the FUSE adapter marks its
    // requests): seen at once too.
    let ino =
        s.fs.resolve_at(&vfs::Creds::root(), vfs::records::ROOT, b"d/f", true)
            .unwrap();
    {
        let _change = s.fs.changes().begin();
        s.fs.truncate(ino, 2).unwrap();
    }
    assert_eq!(px.stat(At::Cwd, b"/d/f", true, false).unwrap().size, 2);
    assert_eq!(px.fstat(fd).unwrap().size, 2);
    // A name another front end removes.
    {
        let _change = s.fs.changes().begin();
        s.fs.remove(&vfs::Creds::root(), ino_of(&s, b"d"), b"f", false)
            .unwrap();
    }
    assert_eq!(
        px.stat(At::Cwd, b"/d/f", true, false).unwrap_err(),
        Errno(libc::ENOENT)
    );
}

/// What a pread of `len` bytes at `at` of `fd` returns.
fn pread_bytes(p: &Posix, fd: i32, at: usize, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    let n = p.pread(fd, &mut buf, at as i64).unwrap();
    buf.truncate(n);
    buf
}

fn warm_reads_need_no_request_and_see_every_change_at_once(t: Transport) {
    let s = Setup::new(t);
    let inst = s.inst.as_ref().unwrap();
    let (a, b) = (s.client(), s.client());
    let data: Vec<u8> = (0..40_000u32).map(|i| (i * 13 + i / 4096) as u8).collect();
    let wfd = b
        .open_fd(At::Cwd, b"/f", libc::O_CREAT | libc::O_RDWR, 0o644)
        .unwrap();
    assert_eq!(b.pwrite(wfd, &data, 0).unwrap(), data.len());
    let fd = a.open_fd(At::Cwd, b"/f", libc::O_RDONLY, 0).unwrap();
    let read = |at: usize, len: usize| pread_bytes(&a, fd, at, len);
    // Misses fill whole pages; the same reads again, and reads inside those pages
    // (and at the end of the file) need no request.
    let reads = [(0, 4096), (5000, 3000), (39_000, 4096), (12_345, 100)];
    for (at, len) in reads {
        assert_eq!(read(at, len), data[at..(at + len).min(data.len())]);
    }
    let before = inst.requests();
    for _ in 0..100 {
        for (at, len) in reads {
            assert_eq!(read(at, len), data[at..(at + len).min(data.len())]);
        }
        assert_eq!(read(40_000, 10), b"");
    }
    assert_eq!(inst.requests() - before, 0, "warm reads asked the instance");
    // Another client's write, a write through the vfs itself (as the FUSE mount
    // makes), a truncate and a punched hole: each seen by the very next read of
    // pages kept before it.
    b.pwrite(wfd, b"XYZ", 5001).unwrap();
    assert_eq!(read(5000, 5), [data[5000], b'X', b'Y', b'Z', data[5004]]);
    let ino = ino_of(&s, b"f");
    assert_eq!(read(39_990, 4096), data[39_990..]);
    s.fs.write_at(ino, 39_998, b"tail").unwrap();
    assert_eq!(
        read(39_990, 4096),
        [&data[39_990..39_998], b"tail"].concat()
    );
    assert_eq!(read(39_990, 10).len(), 10);
    assert_eq!(read(5000, 4096).len(), 4096);
    s.fs.truncate(ino, 6000).unwrap();
    assert_eq!(read(5000, 4096).len(), 1000);
    assert_eq!(read(39_990, 10), b"");
    assert_eq!(read(0, 16), data[..16]);
    s.fs.fallocate(ino, vfs::sparse::Fallocate::PunchHole, 0, 4096)
        .unwrap();
    assert_eq!(read(0, 16), [0u8; 16]);
    // After the last close the pages are gone: a new open of a file this small
    // brings its bytes as they are now (a change made while it was closed too).
    a.close(fd).unwrap();
    s.fs.write_at(ino, 1, b"new").unwrap();
    let fd2 = a.open_fd(At::Cwd, b"/f", libc::O_RDONLY, 0).unwrap();
    let before = inst.requests();
    let mut buf = [0u8; 8];
    assert_eq!(a.pread(fd2, &mut buf, 0).unwrap(), 8);
    assert_eq!(&buf, b"\0new\0\0\0\0");
    assert_eq!(inst.requests() - before, 0, "the open brought the bytes");
}

/// Pages one process read answer another process of the same identity without a
/// request (the identity's data table), including reads larger than a process keeps
/// itself, and every change of the file is seen by the very next read.
fn another_process_reads_what_one_read_without_a_request(t: Transport) {
    let s = Setup::new(t);
    let inst = s.inst.as_ref().unwrap();
    let (a, b, w) = (s.client(), s.client(), s.client());
    let data: Vec<u8> = (0..1_000_000u32)
        .map(|i| (i * 7 + i / 4096) as u8)
        .collect();
    let wfd = w
        .open_fd(At::Cwd, b"/shared", libc::O_CREAT | libc::O_RDWR, 0o644)
        .unwrap();
    assert_eq!(w.pwrite(wfd, &data, 0).unwrap(), data.len());
    // `a` reads the whole file in 256 KiB reads (larger than a process keeps itself).
    let afd = a.open_fd(At::Cwd, b"/shared", libc::O_RDONLY, 0).unwrap();
    let mut all = vec![0u8; 1 << 20];
    let mut at = 0;
    loop {
        let n = a
            .pread(
                afd,
                &mut all[at..(at + (256 << 10)).min(1 << 20)],
                at as i64,
            )
            .unwrap();
        if n == 0 {
            break;
        }
        at += n;
    }
    assert_eq!(all[..at], data[..]);
    // `b` opens it (one request) and reads it, whole and in pieces: no request.
    let bfd = b.open_fd(At::Cwd, b"/shared", libc::O_RDONLY, 0).unwrap();
    let read = |at: usize, len: usize| pread_bytes(&b, bfd, at, len);
    let before = inst.requests();
    assert_eq!(read(0, 1 << 20), data);
    for at in [0, 4096, 123_456, 999_000, 999_999] {
        assert_eq!(read(at, 4096), data[at..(at + 4096).min(data.len())]);
    }
    assert_eq!(read(1_000_000, 10), b"");
    assert_eq!(inst.requests() - before, 0, "another process's pages asked");
    // A write by another client, a write and a truncate through the vfs itself (as the
    // FUSE mount makes them): each seen by `b`'s very next read.
    w.pwrite(wfd, b"XYZ", 123_457).unwrap();
    assert_eq!(
        read(123_456, 5),
        [data[123_456], b'X', b'Y', b'Z', data[123_460]]
    );
    let ino = ino_of(&s, b"shared");
    s.fs.write_at(ino, 999_998, b"tail").unwrap();
    assert_eq!(
        read(999_990, 4096),
        [&data[999_990..999_998], b"tail"].concat()
    );
    s.fs.truncate(ino, 5000).unwrap();
    assert_eq!(read(0, 1 << 20), data[..5000]);
    assert_eq!(read(4096, 4096), data[4096..5000]);
}

/// Reads the kernel's mount serves (here: the calls its FUSE handler makes) warm the
/// data table of the attached identity with the reader's user and group, and only
/// that one: an attached process then reads those pages without a request.
#[test]
fn reads_through_the_kernel_warm_attached_processes() {
    let s = Setup::new(Transport::Auto);
    let inst = s.inst.as_ref().unwrap();
    let (a, b) = (s.client(), s.client());
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 11 + i / 4096) as u8).collect();
    let wfd = a
        .open_fd(At::Cwd, b"/k", libc::O_CREAT | libc::O_RDWR, 0o644)
        .unwrap();
    assert_eq!(a.pwrite(wfd, &data, 0).unwrap(), data.len());
    a.close(wfd).unwrap();
    let ino = ino_of(&s, b"k");
    let tap = inst.kernel_reads();
    // As FUSE reads: 128 KiB at a time, the last one meeting the end.
    let kernel_read = |uid: u32, gid: u32| {
        let mut at = 0u64;
        loop {
            let token = tap.before(uid, gid, ino.0);
            let mut buf = vec![0u8; 128 << 10];
            let n = s.fs.read_at(ino, at, &mut buf).unwrap();
            if let Some(t) = token {
                let view = vfs::ReadView::of_bytes(buf[..n].to_vec());
                tap.after(uid, gid, ino.0, t, at, view, buf.len());
            }
            if n < buf.len() {
                break;
            }
            at += n as u64;
        }
        // They are kept by a thread of their own.
        let t = Instant::now();
        while tap.pending() > 0 {
            assert!(t.elapsed() < Duration::from_secs(5), "reads never kept");
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    // SAFETY: geteuid and getegid have no preconditions.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let fd = b.open_fd(At::Cwd, b"/k", libc::O_RDONLY, 0).unwrap();
    let read = |at: usize, len: usize| pread_bytes(&b, fd, at, len);
    // Another user's read keeps nothing for this identity.
    kernel_read(uid + 1, gid);
    let before = inst.requests();
    assert_eq!(read(200_000, 4096), data[200_000..204_096]);
    assert_eq!(
        inst.requests() - before,
        1,
        "another user's read was kept for us"
    );
    kernel_read(uid, gid);
    let before = inst.requests();
    assert_eq!(read(0, 300_000), data);
    assert_eq!(read(299_000, 4096), data[299_000..]);
    assert_eq!(read(100_000, 4096), data[100_000..104_096]);
    assert_eq!(
        inst.requests() - before,
        0,
        "the kernel's reads were not kept"
    );
}

/// A process that changes identity keeps no view of its old identity's tables: zeros
/// are mapped in their place (a stray read finds no answer and no page).
#[test]
fn a_change_of_identity_blanks_the_old_tables() {
    use posix::backend::Backend;
    let s = Setup::new(Transport::Auto);
    let r = Remote::connect_with(&s.sock, Transport::Auto).unwrap();
    let first_words = |r: &Remote| -> Vec<u64> {
        r.shared_regions()
            .iter()
            // SAFETY: the first word of a mapping this client holds, read-only.
            .map(|&(at, _)| unsafe { std::ptr::read_volatile(at as *const u64) })
            .collect()
    };
    let words = first_words(&r);
    assert_eq!(words.len(), 3, "the change page and both tables");
    assert!(words.iter().all(|&w| w != 0), "magic words: {words:x?}");
    let me = vfs::Creds::of_process();
    r.set_creds(vfs::Creds::user(me.uid + 1, me.gid + 1, vec![]));
    assert!(!r.has_table(), "the old tables still answer");
    let words = first_words(&r);
    assert_eq!(words.len(), 3);
    assert_ne!(words[0], 0, "the change page is no one's");
    assert_eq!(
        words[1..],
        [0, 0],
        "the old identity's tables are still mapped"
    );
}

/// An open for reading of a small file brings the file's attributes (into the table)
/// and its bytes (into the kept pages): the fstat and the reads that follow need no
/// request, and a change after the open is still seen by the very next read.
fn a_small_file_opened_for_reading_comes_with_its_bytes(t: Transport) {
    let s = Setup::new(t);
    let inst = s.inst.as_ref().unwrap();
    let (a, b) = (s.client(), s.client());
    let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 + i / 4096) as u8).collect();
    let big: Vec<u8> = (0..100_000u32).map(|i| (i * 3) as u8).collect();
    let wfd = b
        .open_fd(At::Cwd, b"/small", libc::O_CREAT | libc::O_RDWR, 0o644)
        .unwrap();
    assert_eq!(b.pwrite(wfd, &data, 0).unwrap(), data.len());
    let bfd = b
        .open_fd(At::Cwd, b"/big", libc::O_CREAT | libc::O_RDWR, 0o644)
        .unwrap();
    assert_eq!(b.pwrite(bfd, &big, 0).unwrap(), big.len());
    b.close(bfd).unwrap();
    let fd = a.open_fd(At::Cwd, b"/small", libc::O_RDONLY, 0).unwrap();
    let before = inst.requests();
    assert_eq!(a.fstat(fd).unwrap().size, data.len() as u64);
    let mut all = vec![0u8; 16_384];
    assert_eq!(a.pread(fd, &mut all, 0).unwrap(), data.len());
    assert_eq!(all[..data.len()], data[..]);
    assert_eq!(
        a.pread(fd, &mut all, 10_000).unwrap(),
        0,
        "its end is known"
    );
    assert_eq!(
        inst.requests() - before,
        0,
        "the open brought stat and bytes"
    );
    // A change after the open: the next read asks, and sees it.
    b.pwrite(wfd, b"changed", 100).unwrap();
    let mut buf = [0u8; 7];
    assert_eq!(a.pread(fd, &mut buf, 100).unwrap(), 7);
    assert_eq!(&buf, b"changed");
    // A larger file comes without its bytes: its first read asks.
    let fd = a.open_fd(At::Cwd, b"/big", libc::O_RDONLY, 0).unwrap();
    let before = inst.requests();
    let mut buf = [0u8; 4096];
    assert_eq!(a.pread(fd, &mut buf, 90_000).unwrap(), 4096);
    assert_eq!(buf[..], big[90_000..94_096]);
    assert_eq!(inst.requests() - before, 1);
}

/// Small writes a client was told were done (posted: through its posting ring where
/// it has one) are all seen by another client's very next call, however far the
/// instance lags behind the writer; none of them was a request.
fn posted_writes_are_seen_by_the_next_caller(t: Transport) {
    let s = Setup::new(t);
    let inst = s.inst.as_ref().unwrap();
    let (a, b) = (s.client(), s.client());
    let record = |i: u32| format!("record {i:08} of the posted writes\n").into_bytes();
    let len = record(0).len();
    let mut reads = Vec::new();
    for round in 0..4u32 {
        let name = format!("/posted{round}");
        let fd = a
            .open_fd(
                At::Cwd,
                name.as_bytes(),
                libc::O_CREAT | libc::O_WRONLY,
                0o644,
            )
            .unwrap();
        let before = inst.requests();
        let count = 3000 + round * 2000;
        for i in 0..count {
            assert_eq!(a.write(fd, &record(i)).unwrap(), len);
        }
        assert_eq!(inst.requests() - before, 0, "a posted write asked");
        // Another client, at once: the size and the last record.
        let st = b.stat(At::Cwd, name.as_bytes(), true, false).unwrap();
        assert_eq!(st.size, u64::from(count) * len as u64, "round {round}");
        let rfd = b
            .open_fd(At::Cwd, name.as_bytes(), libc::O_RDONLY, 0)
            .unwrap();
        let mut buf = vec![0u8; len];
        let last = (u64::from(count) - 1) * len as u64;
        assert_eq!(b.pread(rfd, &mut buf, last as i64).unwrap(), len);
        assert_eq!(buf, record(count - 1));
        // b's close would run after a's next open (a close has no reply), ending the
        // lease that open was granted: it waits for the end.
        reads.push(rfd);
        a.close(fd).unwrap();
    }
    for rfd in reads {
        b.close(rfd).unwrap();
    }
}

/// A post made while the instance's posting thread sleeps wakes it: the writer's own
/// fsync (which waits for its posts) returns, again and again.
fn a_sleeping_posting_thread_is_woken_by_a_post(t: Transport) {
    let s = Setup::new(t);
    let a = s.client();
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let fd = a
            .open_fd(At::Cwd, b"/wake", libc::O_CREAT | libc::O_WRONLY, 0o644)
            .unwrap();
        for i in 0..20u8 {
            // Long enough for the posting thread to stop spinning and sleep.
            std::thread::sleep(Duration::from_millis(5));
            a.write(fd, &[i; 100]).unwrap();
            a.fsync(fd, false).unwrap();
        }
        let _ = done.send(());
    });
    finished
        .recv_timeout(Duration::from_secs(20))
        .expect("an fsync waited for posts no one ran: a sleeping posting thread was never woken");
}

fn a_warm_read_never_returns_bytes_older_than_an_acknowledged_write(t: Transport) {
    let s = Setup::new(t);
    let (a, b) = (s.client(), s.client());
    let wfd = b
        .open_fd(At::Cwd, b"/f", libc::O_CREAT | libc::O_RDWR, 0o644)
        .unwrap();
    use std::sync::atomic::{AtomicU64, Ordering};
    let page = |seq: u64| -> Vec<u8> { seq.to_le_bytes().repeat(512) };
    for p in 0..4 {
        b.pwrite(wfd, &page(0), p * 4096).unwrap();
    }
    let fd = a.open_fd(At::Cwd, b"/f", libc::O_RDONLY, 0).unwrap();
    // Per page, the last sequence number a write of it was acknowledged with.
    let acked: Vec<AtomicU64> = (0..4).map(|_| AtomicU64::new(0)).collect();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            for seq in 1..=2000u64 {
                let p = seq % 4;
                b.pwrite(wfd, &page(seq), (p * 4096) as i64).unwrap();
                acked[p as usize].store(seq, Ordering::SeqCst);
            }
            stop.store(true, Ordering::SeqCst);
        });
        let mut buf = vec![0u8; 4096];
        let mut reads = 0;
        while !stop.load(Ordering::SeqCst) || reads < 100 {
            let p = reads % 4;
            let floor = acked[p].load(Ordering::SeqCst);
            assert_eq!(a.pread(fd, &mut buf, (p * 4096) as i64).unwrap(), 4096);
            let seq = u64::from_le_bytes(buf[..8].try_into().unwrap());
            assert_eq!(buf, page(seq), "a torn page");
            assert!(
                seq >= floor,
                "page {p}: read {seq} after {floor} was acknowledged"
            );
            reads += 1;
        }
    });
}

fn walks_of_an_unchanged_tree_need_only_their_opens(t: Transport) {
    let s = Setup::new(t);
    let inst = s.inst.as_ref().unwrap();
    let (a, b) = (s.client(), s.client());
    a.mkdir(At::Cwd, b"/d", 0o755).unwrap();
    for i in 0..50 {
        let name = format!("/d/f{i}");
        let fd = a
            .open_fd(
                At::Cwd,
                name.as_bytes(),
                libc::O_CREAT | libc::O_WRONLY,
                0o644,
            )
            .unwrap();
        a.close(fd).unwrap();
    }
    let list = || -> Vec<Vec<u8>> {
        let fd = a
            .open_fd(At::Cwd, b"/d", libc::O_RDONLY | libc::O_DIRECTORY, 0)
            .unwrap();
        let mut names = Vec::new();
        while let Some(e) = a.readdir(fd).unwrap() {
            names.push(e.name);
        }
        a.close(fd).unwrap();
        names.sort();
        names
    };
    assert_eq!(list().len(), 52);
    a.access(At::Cwd, b"/d/f7", libc::R_OK, true).unwrap();
    let before = inst.requests();
    for _ in 0..20 {
        assert_eq!(list().len(), 52);
        a.access(At::Cwd, b"/d/f7", libc::R_OK, true).unwrap();
    }
    // Each walk: its open and close (the last close, which has no reply, may not be
    // counted yet); the names, the directory's pages and the access check came from
    // the process's own copy.
    let asked = inst.requests() - before;
    assert!(asked <= 20 * 2, "names or pages were asked again: {asked}");
    // A name another process adds, and one the vfs removes (as the FUSE mount
    // would): seen at once.
    let fd = b
        .open_fd(At::Cwd, b"/d/new", libc::O_CREAT | libc::O_WRONLY, 0o644)
        .unwrap();
    b.close(fd).unwrap();
    assert!(list().contains(&b"new".to_vec()));
    {
        let _change = s.fs.changes().begin();
        s.fs.remove(&vfs::Creds::root(), ino_of(&s, b"d"), b"f7", false)
            .unwrap();
    }
    assert!(!list().contains(&b"f7".to_vec()));
    // A kept access check goes with a change of mode.
    a.access(At::Cwd, b"/d/f8", libc::X_OK, true).unwrap_err();
    a.access(At::Cwd, b"/d/f8", libc::R_OK, true).unwrap();
    let ino = format::InodeNo(a.stat(At::Cwd, b"/d/f8", true, false).unwrap().ino);
    let changes = vfs::AttrChanges {
        perm: Some(0o755),
        ..Default::default()
    };
    a.set_attr(ino, &changes).unwrap();
    a.access(At::Cwd, b"/d/f8", libc::X_OK, true).unwrap();
    assert_eq!(
        a.access(At::Cwd, b"/d/f7", libc::R_OK, true),
        Err(Errno(libc::ENOENT))
    );
}

#[test]
fn a_change_of_names_is_one_request() {
    let s = Setup::new(Transport::Auto);
    let inst = s.inst.as_ref().unwrap();
    let a = s.client();
    a.mkdir(At::Cwd, b"/d", 0o755).unwrap();
    let one = |what: &str, f: &dyn Fn()| {
        let before = inst.requests();
        f();
        assert_eq!(inst.requests() - before, 1, "{what}");
    };
    one("mkdir", &|| a.mkdir(At::Cwd, b"/d/e", 0o755).unwrap());
    one("symlink", &|| a.symlink(b"e", At::Cwd, b"/d/l").unwrap());
    one("rename", &|| {
        a.rename(At::Cwd, b"/d/e", At::Cwd, b"/d/f", 0).unwrap()
    });
    one("unlink", &|| a.unlink(At::Cwd, b"/d/l", false).unwrap());
    one("rmdir", &|| a.unlink(At::Cwd, b"/d/f", true).unwrap());
    // Errors are the same as the name forms': a missing parent, a missing name.
    assert_eq!(
        a.mkdir(At::Cwd, b"/nope/e", 0o755),
        Err(Errno(libc::ENOENT))
    );
    assert_eq!(
        a.unlink(At::Cwd, b"/d/nope", false),
        Err(Errno(libc::ENOENT))
    );
    assert_eq!(
        a.rename(At::Cwd, b"/d/nope", At::Cwd, b"/d/x", 0),
        Err(Errno(libc::ENOENT))
    );
    assert_eq!(a.unlink(At::Cwd, b"", false), Err(Errno(libc::ENOENT)));
    assert_eq!(
        s.fs.readdir(&vfs::Creds::root(), ino_of(&s, b"d"), None, 10)
            .unwrap()
            .len(),
        0
    );
}

fn ino_of(s: &Setup, path: &[u8]) -> format::InodeNo {
    s.fs.resolve_at(&vfs::Creds::root(), vfs::records::ROOT, path, true)
        .unwrap()
}

/// Run as a child by [`a_stray_store_into_a_mailbox_faults`].
#[test]
fn child_that_stores_into_a_mailbox() {
    let Some(sock) = std::env::var_os("ATTACH_TEST_MAILBOX") else {
        return;
    };
    let r = Remote::connect(std::path::Path::new(&sock)).unwrap();
    let regions = r.mailbox_regions();
    assert!(!regions.is_empty(), "no mailbox");
    let (at, _) = regions[0];
    // The request area, past the header page.
    let area = (at + 4096) as *mut u64;
    {
        // Inside augefs's window the key allows it: the mapping is writable.
        let _w = instance::pkey::Window::open(instance::pkey::key());
        // SAFETY: a store into the client's own mailbox, with its key's rights on.
        unsafe { std::ptr::write_volatile(area, 0xfeed) };
    }
    println!("WINDOW");
    std::io::stdout().flush().unwrap();
    // SAFETY: deliberately not: a store with the key's rights off, which the CPU must
    // refuse with SIGSEGV.
    unsafe { std::ptr::write_volatile(area, 0xdead) };
    println!("STORED");
}

#[test]
fn a_stray_store_into_a_mailbox_faults() {
    if instance::pkey::key().is_none() {
        eprintln!("no protection keys on this machine: nothing to check");
        return;
    }
    let s = Setup::new(Transport::Unprotected);
    let text = dies_of_sigsegv(
        "child_that_stores_into_a_mailbox",
        "ATTACH_TEST_MAILBOX",
        &s,
    );
    assert!(text.contains("WINDOW"), "{text}");
    assert!(!text.contains("STORED"), "a stray store reached a mailbox");
}

#[test]
fn the_figures_count_each_request_and_post_by_opcode() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("i.sock");
    let fs = testsupport::mount::mounted(64 << 20, 1);
    let inst = Instance::start_with(
        fs,
        &sock,
        None,
        instance::server::Settings {
            timing: true,
            ..Default::default()
        },
    )
    .unwrap();
    {
        let r = Remote::connect_with(&sock, Transport::Auto).unwrap();
        let p = Posix::new(
            Arc::new(r),
            vfs::Creds::of_process(),
            std::process::id() as i32,
        );
        let fd = p
            .open_fd(At::Cwd, b"/counted", libc::O_CREAT | libc::O_WRONLY, 0o644)
            .unwrap();
        for _ in 0..5 {
            p.write(fd, b"posted").unwrap();
        }
        p.fsync(fd, false).unwrap();
        p.close(fd).unwrap();
    }
    let report = inst.stop();
    let row = |table: &str, op: &str| -> u64 {
        let t = &report[report
            .find(table)
            .unwrap_or_else(|| panic!("{table}: {report}"))..];
        t.lines()
            .take_while(|l| !l.starts_with("augefs:") || l.contains(table))
            .find(|l| l.split_whitespace().next() == Some(op))
            .and_then(|l| l.split_whitespace().nth(1))
            .map_or(0, |n| n.parse().unwrap())
    };
    assert_eq!(row("requests over", "OPEN"), 1, "{report}");
    assert_eq!(row("requests over", "FSYNC"), 1, "{report}");
    assert_eq!(row("posts over", "WRITE"), 5, "{report}");
    assert!(report.contains("wall us/req"), "{report}");
}

/// Run as a child by [`a_stray_store_into_the_posting_ring_faults`].
#[test]
fn child_that_stores_into_the_posting_ring() {
    let Some(sock) = std::env::var_os("ATTACH_TEST_RING") else {
        return;
    };
    let r = Arc::new(Remote::connect(std::path::Path::new(&sock)).unwrap());
    let p = Posix::new(
        r.clone(),
        vfs::Creds::of_process(),
        std::process::id() as i32,
    );
    // An open for writing opens the posting connection, and its ring.
    let fd = p
        .open_fd(At::Cwd, b"/ring", libc::O_CREAT | libc::O_WRONLY, 0o644)
        .unwrap();
    p.write(fd, b"posted").unwrap();
    let (at, _) = r.post_ring_region().expect("a posting ring");
    // The record area, past the header page.
    let area = (at + 4096) as *mut u64;
    {
        let _w = instance::pkey::Window::open(instance::pkey::key());
        // SAFETY: a load from the client's own ring, with its key's rights on.
        let _ = unsafe { std::ptr::read_volatile(area) };
    }
    println!("WINDOW");
    std::io::stdout().flush().unwrap();
    // SAFETY: deliberately not: a store with the key's rights off, which the CPU must
    // refuse with SIGSEGV.
    unsafe { std::ptr::write_volatile(area, 0xdead) };
    println!("STORED");
}

#[test]
fn a_stray_store_into_the_posting_ring_faults() {
    if instance::pkey::key().is_none() {
        eprintln!("no protection keys on this machine: nothing to check");
        return;
    }
    let s = Setup::new(Transport::Auto);
    let text = dies_of_sigsegv(
        "child_that_stores_into_the_posting_ring",
        "ATTACH_TEST_RING",
        &s,
    );
    assert!(text.contains("WINDOW"), "{text}");
    assert!(
        !text.contains("STORED"),
        "a stray store reached the posting ring"
    );
}

/// Runs test `child` of this binary as a child process with `env` naming the instance's
/// socket; it must die of SIGSEGV. Its standard output.
fn dies_of_sigsegv(child: &str, env: &str, s: &Setup) -> String {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", child, "--nocapture", "--test-threads=1"])
        .env(env, &s.sock)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGSEGV),
        "{:?}: {text}",
        out.status
    );
    text
}

/// Run as a child by [`a_stray_store_into_shared_state_faults`].
#[test]
fn child_that_stores_into_the_table() {
    let Some(sock) = std::env::var_os("ATTACH_TEST_STRAY") else {
        return;
    };
    let r = Remote::connect(std::path::Path::new(&sock)).unwrap();
    let regions = r.shared_regions();
    assert_eq!(regions.len(), 3, "the instance shares its tables");
    println!("MAPPED");
    std::io::stdout().flush().unwrap();
    for (at, _) in regions {
        // SAFETY: deliberately not: a store into a region mapped read-only, which the
        // kernel must refuse with SIGSEGV.
        unsafe { std::ptr::write_volatile(at as *mut u64, 0xdead) };
    }
    println!("STORED");
}

#[test]
fn a_stray_store_into_shared_state_faults() {
    let s = Setup::new(Transport::Unprotected);
    let text = dies_of_sigsegv("child_that_stores_into_the_table", "ATTACH_TEST_STRAY", &s);
    assert!(text.contains("MAPPED"), "{text}");
    assert!(
        !text.contains("STORED"),
        "a client wrote the instance's table"
    );
}

/// A test of each transport: the socket only, mailboxes without keys, and what the
/// machine offers (keys where it has them, else replies through a read-only mailbox).
macro_rules! each_transport {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            use super::*;

            #[test]
            fn socket() {
                super::$name(Transport::Socket);
            }

            #[test]
            fn mailbox() {
                super::$name(Transport::Unprotected);
            }

            #[test]
            fn auto() {
                super::$name(Transport::Auto);
            }
        }
    )*};
}

each_transport!(
    a_client_sees_and_changes_the_instance_file_system,
    data_calls_need_a_handle_of_the_session_in_the_right_mode,
    a_killed_client_releases_its_locks_and_files,
    repeated_stats_need_no_request_until_something_changes,
    warm_reads_need_no_request_and_see_every_change_at_once,
    another_process_reads_what_one_read_without_a_request,
    a_small_file_opened_for_reading_comes_with_its_bytes,
    a_warm_read_never_returns_bytes_older_than_an_acknowledged_write,
    walks_of_an_unchanged_tree_need_only_their_opens,
    posted_writes_are_seen_by_the_next_caller,
    a_sleeping_posting_thread_is_woken_by_a_post,
);
