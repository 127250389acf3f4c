//! Round trips and refusals of the request codec.
use super::*;

fn samples() -> Vec<Request<'static>> {
    vec![
        Request::Hello {
            token: 9,
            version: VERSION,
        },
        Request::Posts {
            token: 9,
            version: VERSION,
            sent: 3,
            ring: true,
        },
        Request::Barrier { count: 12 },
        Request::Resolve {
            start: InodeNo(1),
            follow: true,
            path: b"a/b",
        },
        Request::Open {
            start: InodeNo(1),
            flags: libc::O_CREAT | libc::O_RDWR,
            mode: 0o644,
            prefetch: 4096,
            path: b"f",
        },
        Request::Create {
            parent: InodeNo(1),
            kind: Kind::Symlink,
            perm: 0o777,
            name: b"l",
            target: Some(b"t"),
        },
        Request::Rename {
            from: InodeNo(1),
            from_name: b"a",
            to: InodeNo(2),
            to_name: b"b",
            mode: RenameMode::Exchange,
        },
        Request::SetAttr {
            ino: InodeNo(3),
            changes: AttrChanges {
                perm: Some(0o600),
                uid: None,
                gid: Some(5),
                atime: Some(TimeChange::Now),
                mtime: Some(TimeChange::At(-7)),
            },
        },
        Request::Readdir {
            dir: InodeNo(1),
            max: 128,
            after: Some(b"x"),
        },
        Request::Write {
            handle: 4,
            offset: 8192,
            data: b"hello",
        },
        Request::LockSet {
            handle: 4,
            space: LockSpace::Record,
            start: 0,
            end: Some(10),
            kind: Some(LockKind::Write),
            description: false,
            wait: true,
        },
        Request::LockGet {
            handle: 4,
            space: LockSpace::Flock,
            start: 0,
            end: None,
            kind: LockKind::Read,
            description: true,
        },
        Request::Statfs,
    ]
}

fn body(r: &Request<'_>) -> Vec<u8> {
    let mut w = Writer::new();
    r.encode(&mut w);
    let mut b = w.body().to_vec();
    b.extend_from_slice(r.data());
    b
}

#[test]
fn every_code_decodes_to_its_value() {
    for k in Kind::ALL {
        assert_eq!(kind_of(kind_code(k)), Ok(k));
    }
    for m in [
        RenameMode::Replace,
        RenameMode::NoReplace,
        RenameMode::Exchange,
    ] {
        assert_eq!(rename_of(rename_code(m)), Ok(m));
    }
    for m in [XattrMode::Either, XattrMode::Create, XattrMode::Replace] {
        assert_eq!(xattr_of(xattr_code(m)), Ok(m));
    }
    for l in [None, Some(LockKind::Read), Some(LockKind::Write)] {
        assert_eq!(lock_of(lock_code(l)), Ok(l));
    }
    for sp in [LockSpace::Record, LockSpace::Flock] {
        assert_eq!(space_of(space_code(sp)), Ok(sp));
    }
    assert_eq!(kind_of(0), Err(Errno(libc::EINVAL)));
    assert_eq!(lock_of(3), Err(Errno(libc::EINVAL)));
}

#[test]
fn opcodes_have_their_names() {
    assert_eq!(op_name(u32::from(op::HELLO)), "HELLO");
    assert_eq!(op_name(u32::from(op::FSYNC)), "FSYNC");
    assert_eq!(op_name(u32::from(op::CLOSE_QUIET)), "CLOSE_QUIET");
    assert_eq!(op_name(u32::from(op::BARRIER)), "BARRIER");
    assert_eq!(op_name(0), "opcode 0");
    assert_eq!(op_name(44), "opcode 44");
}

#[test]
fn requests_round_trip() {
    for r in samples() {
        let b = body(&r);
        assert_eq!(Request::decode(&b).unwrap(), r);
    }
}

#[test]
fn malformed_requests_are_errors() {
    for r in samples() {
        let b = body(&r);
        for cut in 0..b.len() {
            assert!(Request::decode(&b[..cut]).is_err(), "{r:?} cut at {cut}");
        }
        let mut longer = b.clone();
        longer.push(0);
        assert!(
            Request::decode(&longer).is_err(),
            "{r:?} with a trailing byte"
        );
    }
    assert_eq!(Request::decode(&[200]), Err(Errno(libc::ENOSYS)));
    let mut w = Writer::new();
    w.u8(op::READ).u64(1).u64(0).u32(u32::MAX);
    assert_eq!(Request::decode(w.body()), Err(Errno(libc::EINVAL)));
}
