//! The instance's request decoder (crates/instance/src/proto.rs, docs/DESIGN.md §12.5):
//! bytes from an attached process, which the instance trusts no more than the device.

use crate::driver::{Outcome, Target, CI_CASES};
use format::InodeNo;
use instance::proto::Request;
use instance::wire::Writer;
use posix::backend::LockSpace;
use vfs::locks::LockKind;
use vfs::{AttrChanges, Kind, RenameMode, TimeChange};

fn body(r: &Request<'_>) -> Vec<u8> {
    let mut w = Writer::new();
    r.encode(&mut w);
    let mut b = w.body().to_vec();
    b.extend_from_slice(r.data());
    b
}

fn seeds() -> Vec<Vec<u8>> {
    let root = InodeNo(1);
    [
        Request::Hello {
            token: 7,
            version: instance::proto::VERSION,
        },
        Request::Mailbox { writable: true },
        Request::StatAt {
            start: root,
            follow: true,
            path: b"a/b/c",
        },
        Request::Open {
            start: root,
            flags: libc::O_CREAT | libc::O_RDWR,
            mode: 0o644,
            prefetch: 4096,
            path: b"f",
        },
        Request::Create {
            parent: root,
            kind: Kind::Symlink,
            perm: 0o777,
            name: b"l",
            target: Some(b"t"),
        },
        Request::Rename {
            from: root,
            from_name: b"a",
            to: root,
            to_name: b"b",
            mode: RenameMode::NoReplace,
        },
        Request::SetAttr {
            ino: root,
            changes: AttrChanges {
                perm: Some(0o600),
                uid: Some(1),
                gid: None,
                atime: Some(TimeChange::Now),
                mtime: Some(TimeChange::At(5)),
            },
        },
        Request::SetXattr {
            ino: root,
            mode: vfs::XattrMode::Create,
            name: b"user.k",
            value: b"v",
        },
        Request::Readdir {
            dir: root,
            max: 64,
            after: Some(b"x"),
        },
        Request::Read {
            handle: 3,
            offset: 4096,
            len: 4096,
        },
        Request::Write {
            handle: 3,
            offset: 0,
            data: b"data",
        },
        Request::Append {
            handle: 3,
            data: b"more",
        },
        Request::LockSet {
            handle: 3,
            space: LockSpace::Record,
            start: 0,
            end: Some(9),
            kind: Some(LockKind::Read),
            description: true,
            wait: false,
        },
        Request::LockGet {
            handle: 3,
            space: LockSpace::Flock,
            start: 0,
            end: None,
            kind: LockKind::Write,
            description: false,
        },
        Request::LockRelease {
            ino: root,
            space: LockSpace::Record,
        },
    ]
    .iter()
    .map(body)
    .collect()
}

/// Decodes; what decodes must encode back to the same bytes.
fn check(data: &[u8]) -> Outcome {
    match Request::decode(data) {
        Ok(r) => {
            assert_eq!(body(&r), data, "a decoded request re-encodes to its bytes");
            Outcome::Decoded
        }
        Err(_) => Outcome::Rejected,
    }
}

pub fn targets() -> Vec<Target> {
    vec![Target {
        name: "instance_request",
        seeds,
        reseal: |_| {},
        check,
        len_max: 512,
        ci_cases: CI_CASES,
    }]
}
