//! The FUSE session driven by a fake kernel over a socket pair (SOCK_SEQPACKET keeps
//! message boundaries as /dev/fuse does), with the vfs on a memory device: what the
//! kernel cannot be made to send on demand, or sends only to some servers. FUSE_SYNCFS
//! makes everything written durable (Linux 6.18 sends it to virtiofs servers only, so
//! no mount test can reach it); FLUSH releases the record locks of its lock owner; an
//! INTERRUPT ends a waiting SETLKW with EINTR while the request threads go on.

use augefs_fuse::adapter::{Admit, AugeFuse};
use augefs_fuse::channel::Channel;
use augefs_fuse::proto::abi::{self, bytes_of, opcode};
use augefs_fuse::session::{Session, SessionOptions};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;
use testsupport::image::{crash_copy, memory_image};
use testsupport::mount::mount;
use vfs::FileSystem;

const IMAGE_BYTES: u64 = 256 << 20;

/// The kernel's end of the session.
struct Kernel {
    sock: OwnedFd,
    unique: u64,
}

impl Kernel {
    fn send(&mut self, op: u32, nodeid: u64, body: &[u8]) -> u64 {
        self.unique += 1;
        let h = abi::InHeader {
            len: (40 + body.len()) as u32,
            opcode: op,
            unique: self.unique,
            nodeid,
            pid: std::process::id(),
            ..abi::InHeader::default()
        };
        let mut msg = bytes_of(&h).to_vec();
        msg.extend_from_slice(body);
        // SAFETY: `msg` is valid for reads of its length.
        let n = unsafe { libc::write(self.sock.as_raw_fd(), msg.as_ptr().cast(), msg.len()) };
        assert_eq!(n as usize, msg.len());
        self.unique
    }

    /// The next reply, if one comes within `wait`: (unique, error, payload).
    fn receive(&self, wait: Duration) -> Option<(u64, i32, Vec<u8>)> {
        let mut p = libc::pollfd {
            fd: self.sock.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        if unsafe { libc::poll(&mut p, 1, wait.as_millis() as i32) } != 1 {
            return None;
        }
        let mut buf = vec![0u8; 1 << 21];
        // SAFETY: `buf` is valid for writes of its length.
        let n = unsafe { libc::read(self.sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        assert!(n >= 16, "a reply has a header");
        let h: abi::OutHeader = abi::read(&buf).unwrap();
        assert_eq!(h.len as isize, n);
        Some((h.unique, h.error, buf[16..n as usize].to_vec()))
    }

    /// Sends a request and returns its reply's error and payload.
    fn call(&mut self, op: u32, nodeid: u64, body: &[u8]) -> (i32, Vec<u8>) {
        let u = self.send(op, nodeid, body);
        let (got, error, payload) = self.receive(Duration::from_secs(30)).expect("a reply");
        assert_eq!(got, u);
        (error, payload)
    }
}

/// A session serving `fs` on two threads; the kernel's end and the server thread.
fn start(fs: Arc<FileSystem>) -> (Kernel, std::thread::JoinHandle<std::io::Result<()>>) {
    let (k, server, _) = start_adapter(fs);
    (k, server)
}

/// [`start`], with the adapter.
fn start_adapter(
    fs: Arc<FileSystem>,
) -> (
    Kernel,
    std::thread::JoinHandle<std::io::Result<()>>,
    Arc<AugeFuse>,
) {
    let mut pair = [0; 2];
    // SAFETY: `pair` has room for two descriptors.
    let r = unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET, 0, pair.as_mut_ptr()) };
    assert_eq!(r, 0);
    // SAFETY: both descriptors were just created and are ours.
    let (k, s) = unsafe { (OwnedFd::from_raw_fd(pair[0]), OwnedFd::from_raw_fd(pair[1])) };
    let adapter = Arc::new(AugeFuse::new(fs, false, Admit::Kernel));
    let served = adapter.clone();
    let opts = SessionOptions {
        threads: 2,
        clone_fd: false,
        stats: false,
        uring: false,
    };
    let server = std::thread::spawn(move || Session::init(served, Channel::new(s), opts)?.run());
    let mut kernel = Kernel { sock: k, unique: 0 };
    let init = abi::InitIn {
        major: 7,
        minor: 45,
        max_readahead: 1 << 17,
        flags: 0x73ff_fffb,
        flags2: 0x5fd,
        ..abi::InitIn::default()
    };
    let (error, reply) = kernel.call(opcode::INIT, 0, bytes_of(&init));
    assert_eq!(error, 0);
    let out: abi::InitOut = abi::read(&reply).unwrap();
    assert_eq!(out.major, 7);
    assert!(u64::from(out.flags) & abi::init::POSIX_LOCKS != 0);
    (kernel, server, adapter)
}

/// CREATE `name` in the root: (node id, file handle).
fn create(k: &mut Kernel, name: &str) -> (u64, u64) {
    let arg = abi::CreateIn {
        flags: libc::O_RDWR as u32,
        mode: libc::S_IFREG | 0o644,
        umask: 0o022,
        open_flags: 0,
    };
    let mut body = bytes_of(&arg).to_vec();
    body.extend_from_slice(name.as_bytes());
    body.push(0);
    let (error, reply) = k.call(opcode::CREATE, abi::ROOT_ID, &body);
    assert_eq!(error, 0, "create {name}");
    let entry: abi::EntryOut = abi::read(&reply).unwrap();
    let open: abi::OpenOut = abi::read(&reply[128..]).unwrap();
    (entry.nodeid, open.fh)
}

/// WRITEs `data` in pieces a socket message holds.
fn write(k: &mut Kernel, node: u64, fh: u64, data: &[u8]) {
    for (i, piece) in data.chunks(64 << 10).enumerate() {
        let arg = abi::WriteIn {
            fh,
            offset: (i as u64) << 16,
            size: piece.len() as u32,
            ..abi::WriteIn::default()
        };
        let mut body = bytes_of(&arg).to_vec();
        body.extend_from_slice(piece);
        let (error, reply) = k.call(opcode::WRITE, node, &body);
        assert_eq!(error, 0);
        let w: abi::WriteOut = abi::read(&reply).unwrap();
        assert_eq!(w.size as usize, piece.len());
    }
}

#[test]
fn syncfs_makes_what_was_written_durable() {
    let dev = memory_image(IMAGE_BYTES, 2);
    let fs = mount(&dev);
    let (mut k, server) = start(fs.clone());
    let data: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
    let (node, fh) = create(&mut k, "f");
    write(&mut k, node, fh, &data);
    let syncfs = abi::SyncfsIn::default();
    let (error, _) = k.call(opcode::SYNCFS, abi::ROOT_ID, bytes_of(&syncfs));
    assert_eq!(error, 0);
    let crashed = crash_copy(&dev);
    drop(k);
    server.join().unwrap().unwrap();
    drop(fs); // no unmount: dirty pages and unpersisted records are lost
    let after = mount(&crashed);
    let mut back = vec![0u8; data.len() + 1];
    let f = vfs::OpenOptions::new()
        .read(true)
        .open(&after, "/f")
        .expect("the file after the crash");
    assert_eq!(f.read_at(&mut back, 0).unwrap(), data.len());
    assert!(
        back[..data.len()] == data[..],
        "the file's data after the crash"
    );
}

fn lk(fh: u64, owner: u64, typ: i32, (start, end): (u64, u64)) -> Vec<u8> {
    let arg = abi::LkIn {
        fh,
        owner,
        lk: abi::FileLock {
            start,
            end,
            typ: typ as u32,
            pid: 77,
        },
        lk_flags: 0,
        padding: 0,
    };
    bytes_of(&arg).to_vec()
}

#[test]
fn flush_releases_locks_and_interrupt_ends_a_waiting_setlkw() {
    let dev = memory_image(IMAGE_BYTES, 2);
    let fs = mount(&dev);
    let (mut k, server) = start(fs.clone());
    let (node, fh) = create(&mut k, "l");
    let range = (0, 99);
    let (a, b) = (1000, 2000);
    let (e, _) = k.call(opcode::SETLK, node, &lk(fh, a, libc::F_WRLCK, range));
    assert_eq!(e, 0);
    let (e, _) = k.call(opcode::SETLK, node, &lk(fh, b, libc::F_WRLCK, range));
    assert_eq!(e, -libc::EAGAIN);
    // GETLK names the holder.
    let (e, reply) = k.call(opcode::GETLK, node, &lk(fh, b, libc::F_RDLCK, (50, 50)));
    assert_eq!(e, 0);
    let got: abi::LkOut = abi::read(&reply).unwrap();
    assert_eq!(
        (got.lk.typ, got.lk.pid, got.lk.end),
        (libc::F_WRLCK as u32, 77, 99)
    );

    // B waits, on no request thread: the others still answer.
    let waiting = k.send(opcode::SETLKW, node, &lk(fh, b, libc::F_WRLCK, range));
    assert!(
        k.receive(Duration::from_millis(300)).is_none(),
        "SETLKW answered at once"
    );
    let (e, _) = k.call(opcode::GETATTR, node, bytes_of(&abi::GetattrIn::default()));
    assert_eq!(e, 0, "a request thread answers while SETLKW waits");
    let (e, _) = k.call(opcode::GETATTR, node, bytes_of(&abi::GetattrIn::default()));
    assert_eq!(e, 0, "and the other one");
    let interrupt = abi::InterruptIn { unique: waiting };
    k.send(opcode::INTERRUPT, 0, bytes_of(&interrupt));
    let (u, e, _) = k
        .receive(Duration::from_secs(30))
        .expect("the SETLKW's answer");
    assert_eq!((u, e), (waiting, -libc::EINTR));

    // FLUSH by A's owner drops A's record locks; B takes the range.
    let flush = abi::FlushIn {
        fh,
        lock_owner: a,
        ..abi::FlushIn::default()
    };
    let (e, _) = k.call(opcode::FLUSH, node, bytes_of(&flush));
    assert_eq!(e, 0);
    let (e, _) = k.call(opcode::SETLK, node, &lk(fh, b, libc::F_WRLCK, range));
    assert_eq!(e, 0, "FLUSH released the lock of its owner");
    drop(k);
    server.join().unwrap().unwrap();
    assert_eq!(fs.record_locks().held(format::InodeNo(node)).len(), 1);
}

/// One READDIRPLUS entry: (node id, attribute inode and mode, dirent offset, name).
fn direntplus(buf: &[u8]) -> Vec<(u64, u64, u32, u64, String)> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < buf.len() {
        let d: abi::DirentPlus = abi::read(&buf[at..]).unwrap();
        let name_at = at + std::mem::size_of::<abi::DirentPlus>();
        let name = &buf[name_at..name_at + d.dirent.namelen as usize];
        out.push((
            d.entry_out.nodeid,
            d.dirent.ino,
            d.entry_out.attr.mode,
            d.dirent.off,
            String::from_utf8_lossy(name).into_owned(),
        ));
        at += (std::mem::size_of::<abi::DirentPlus>() + name.len() + 7) & !7;
    }
    out
}

#[test]
fn readdirplus_carries_attributes_and_counts_lookups() {
    let dev = memory_image(IMAGE_BYTES, 2);
    let fs = mount(&dev);
    let (mut k, server, adapter) = start_adapter(fs);
    let (a, _) = create(&mut k, "a");
    let (b, _) = create(&mut k, "b");
    let mut mkdir = bytes_of(&abi::MkdirIn {
        mode: 0o755,
        umask: 0,
    })
    .to_vec();
    mkdir.extend_from_slice(b"d\0");
    let (e, reply) = k.call(opcode::MKDIR, abi::ROOT_ID, &mkdir);
    assert_eq!(e, 0);
    let d = abi::read::<abi::EntryOut>(&reply).unwrap().nodeid;
    let (e, reply) = k.call(
        opcode::OPENDIR,
        abi::ROOT_ID,
        bytes_of(&abi::OpenIn::default()),
    );
    assert_eq!(e, 0);
    let fh = abi::read::<abi::OpenOut>(&reply).unwrap().fh;
    // 400 bytes hold two entries: the listing comes in three replies.
    let mut listed = Vec::new();
    let mut offset = 0;
    loop {
        let arg = abi::ReadIn {
            fh,
            offset,
            size: 400,
            ..abi::ReadIn::default()
        };
        let (e, reply) = k.call(opcode::READDIRPLUS, abi::ROOT_ID, bytes_of(&arg));
        assert_eq!(e, 0);
        let got = direntplus(&reply);
        let Some(last) = got.last() else { break };
        assert!(got.len() <= 2);
        offset = last.3;
        listed.extend(got);
    }
    let names: Vec<&str> = listed.iter().map(|x| x.4.as_str()).collect();
    assert_eq!(names, [".", "..", "a", "b", "d"]);
    // `.` and `..` carry no entry; the others their node and attributes.
    assert_eq!((listed[0].0, listed[1].0), (0, 0));
    assert_eq!((listed[2].0, listed[2].1), (a, a));
    assert_eq!(listed[2].2 & libc::S_IFMT, libc::S_IFREG);
    assert_eq!((listed[3].0, listed[4].0), (b, d));
    assert_eq!(listed[4].2 & libc::S_IFMT, libc::S_IFDIR);
    // Each entry counted one more lookup (the create or mkdir counted the first).
    let nodes = adapter.nodes();
    assert_eq!(
        (nodes.lookups(a), nodes.lookups(b), nodes.lookups(d)),
        (2, 2, 2)
    );
    k.send(opcode::FORGET, a, bytes_of(&abi::ForgetIn { nlookup: 2 }));

    // A missing name: a negative entry the kernel may cache. `.` of a file (export
    // support): the file itself.
    let (e, reply) = k.call(opcode::LOOKUP, abi::ROOT_ID, b"missing\0");
    let neg: abi::EntryOut = abi::read(&reply).unwrap();
    assert_eq!((e, neg.nodeid), (0, 0));
    assert!(neg.entry_valid > 0);
    let (e, reply) = k.call(opcode::LOOKUP, b, b".\0");
    assert_eq!(
        (e, abi::read::<abi::EntryOut>(&reply).unwrap().nodeid),
        (0, b)
    );
    assert_eq!(nodes.lookups(b), 3);
    assert_eq!(nodes.lookups(a), 0, "FORGET dropped a's lookups");
    drop(k);
    server.join().unwrap().unwrap();
}
