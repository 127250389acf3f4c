//! The judge's rules on made-up histories: each rule passes what the contract allows and
//! fails what it does not.

use super::*;
use crate::apply::WrittenBack;
use crate::snapshot::Object;
use crate::workload::Workload;

fn file(data: &[u8]) -> Object {
    Object {
        kind: Kind::File,
        perm: 0o644,
        data: data.to_vec(),
        xattrs: BTreeMap::new(),
        nlink: 1,
        rdev: 0,
    }
}

fn dir() -> Object {
    Object {
        kind: Kind::Dir,
        perm: 0o755,
        data: Vec::new(),
        xattrs: BTreeMap::new(),
        nlink: 2,
        rdev: 0,
    }
}

/// A tree of the root and `files` (name, inode, data) in it.
fn tree(files: &[(&str, u64, &[u8])]) -> Snapshot {
    let mut s = Snapshot::default();
    s.objects.insert(1, dir());
    for &(name, ino, data) in files {
        s.entries.insert((1, name.as_bytes().to_vec()), ino);
        s.objects.insert(ino, file(data));
    }
    s
}

fn workload(domains: u32, text: &str) -> Workload {
    let mut w = Workload::parse("t", text).unwrap();
    w.domains = domains;
    w
}

fn history(states: Vec<Snapshot>, written_back: Vec<WrittenBack>) -> History {
    let n = states.len() - 1;
    History {
        results: vec![Ok(()); n],
        states,
        promises: Vec::new(),
        written_back,
    }
}

fn none() -> WrittenBack {
    WrittenBack::Files(Default::default())
}

fn only(ino: u64) -> WrittenBack {
    WrittenBack::Files([ino].into())
}

/// `create /foo` (2), `write /foo` (data not written back), `fsync /`: the directory's
/// fsync promises the entry, not the data (docs/SEMANTICS.md §2, as ext4 and xfs).
#[test]
fn a_directory_fsync_keeps_entries_not_data() {
    let w = workload(1, "create /foo\nwrite /foo 0 4\nfsync /\n");
    let mut h = history(
        vec![
            tree(&[]),
            tree(&[("foo", 2, b"")]),
            tree(&[("foo", 2, b"data")]),
            tree(&[("foo", 2, b"data")]),
        ],
        vec![none(), none(), none()],
    );
    h.promises.push(Promise {
        step: 3,
        durable: 10,
        scope: Scope::Dir { ino: 1 },
    });
    // After the fsync: the file with no data is allowed, the data too.
    assert_eq!(
        judge(&w, &h, &tree(&[("foo", 2, b"")]), 10),
        Vec::<String>::new()
    );
    assert_eq!(
        judge(&w, &h, &tree(&[("foo", 2, b"data")]), 10),
        Vec::<String>::new()
    );
    // The entry lost: reported, as a lost promise.
    let problems = judge(&w, &h, &tree(&[]), 10);
    assert!(
        problems[0].starts_with("lost the promise of line 3 (fsync /): entry 1/foo is absent"),
        "{problems:?}"
    );
    // Before the fsync's flush: nothing promised.
    assert!(judge(&w, &h, &tree(&[]), 9).is_empty());
}

/// `write /bar`, `rename /bar /foo` over an old /foo (3): the rename writes /bar back
/// first, so the new name never comes without the data.
#[test]
fn a_renamed_file_keeps_the_data_it_had_at_the_rename() {
    let w = workload(3, "create /foo\nwrite /bar 0 4\nrename /bar /foo\n");
    let s0 = tree(&[("foo", 3, b"old"), ("bar", 2, b"")]);
    let s1 = tree(&[("foo", 3, b"old"), ("bar", 2, b"data")]);
    let s2 = tree(&[("foo", 2, b"data")]);
    let w = Workload {
        steps: w.steps[1..].to_vec(),
        ..w
    };
    let h = history(
        vec![s0.clone(), s1.clone(), s2.clone()],
        vec![none(), only(2)],
    );
    assert!(judge(&w, &h, &s0, 0).is_empty());
    assert!(judge(&w, &h, &s1, 0).is_empty());
    assert!(judge(&w, &h, &s2, 0).is_empty());
    let problems = judge(&w, &h, &tree(&[("foo", 2, b"")]), 0);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0]
            .contains("never had since line 3 (rename /bar /foo) (which gave it the name 1/foo)"),
        "{problems:?}"
    );
}

/// One domain: data may lag the names (it is logged at write-back), never lead them, and
/// never lag an operation that wrote it back.
#[test]
fn with_one_domain_data_lags_names_only_back_to_its_write_back() {
    let w = workload(
        1,
        "write /a 0 4\ncreate /b\nsetxattr /a user.k v\ncreate /c\n",
    );
    let s0 = tree(&[("a", 2, b"")]);
    let s1 = tree(&[("a", 2, b"data")]);
    let s2 = tree(&[("a", 2, b"data"), ("b", 3, b"")]);
    let mut s3 = s2.clone();
    s3.objects
        .get_mut(&2)
        .unwrap()
        .xattrs
        .insert(b"user.k".to_vec(), b"v".to_vec());
    let mut s4 = s3.clone();
    s4.entries.insert((1, b"c".to_vec()), 4);
    s4.objects.insert(4, file(b""));
    let h = history(
        vec![s0.clone(), s1, s2.clone(), s3.clone(), s4.clone()],
        vec![none(), none(), only(2), none()],
    );
    // /b's create survived, /a's write did not: allowed (ext4 gives no more).
    let mut lagging = s2.clone();
    lagging.objects.get_mut(&2).unwrap().data = Vec::new();
    assert!(judge(&w, &h, &lagging, 0).is_empty());
    // /c survived but /a's data, which the setxattr wrote back before it, did not.
    let mut lost = s4.clone();
    lost.objects.get_mut(&2).unwrap().data = Vec::new();
    let problems = judge(&w, &h, &lost, 0);
    assert!(
        problems.iter().any(|p| p.starts_with("with one domain")),
        "{problems:?}"
    );
    // With three domains the lanes are independent: the rule does not apply, but the
    // inode's own state must still be one it had (new attribute, old data: never).
    let w3 = Workload { domains: 3, ..w };
    let problems = judge(&w3, &h, &lost, 0);
    assert!(
        !problems.iter().any(|p| p.starts_with("with one domain")),
        "{problems:?}"
    );
    assert!(
        problems.iter().any(|p| p.starts_with("inode 2 is")),
        "{problems:?}"
    );
}

/// One domain: a chmod of a file with dirty pages rides with their write-back, so the
/// file's mode lags the names with its data; but the file is still a state it had (the
/// new mode with the old data: never), and a chmod of a clean file (logged at once,
/// counted as a write-back) does not lag.
#[test]
fn with_one_domain_a_dirty_files_mode_lags_with_its_data() {
    let w = workload(1, "write /a 0 4\nchmod /a 600\ncreate /b\nchmod /b 600\n");
    let s0 = tree(&[("a", 2, b"")]);
    let s1 = tree(&[("a", 2, b"data")]);
    let mut s2 = s1.clone();
    s2.objects.get_mut(&2).unwrap().perm = 0o600;
    let mut s3 = s2.clone();
    s3.entries.insert((1, b"b".to_vec()), 3);
    s3.objects.insert(3, file(b""));
    let mut s4 = s3.clone();
    s4.objects.get_mut(&3).unwrap().perm = 0o600;
    let h = history(
        vec![s0, s1, s2, s3.clone(), s4.clone()],
        vec![none(), none(), none(), only(3)],
    );
    // /b's chmod survived, /a's write and chmod did not: allowed.
    let mut lagging = s4.clone();
    *lagging.objects.get_mut(&2).unwrap() = file(b"");
    assert_eq!(judge(&w, &h, &lagging, 0), Vec::<String>::new());
    // /a's new mode with its old data: never.
    let mut mixed = s4.clone();
    mixed.objects.get_mut(&2).unwrap().data = Vec::new();
    let problems = judge(&w, &h, &mixed, 0);
    assert!(
        problems.iter().any(|p| p.starts_with("inode 2 is")),
        "{problems:?}"
    );
    // /b's chmod (of a clean file: logged at once) lost while /c's create, logged after
    // it, survived: never.
    let w = workload(
        1,
        "write /a 0 4\nchmod /a 600\ncreate /b\nchmod /b 600\ncreate /c\n",
    );
    let mut s5 = s4.clone();
    s5.entries.insert((1, b"c".to_vec()), 4);
    s5.objects.insert(4, file(b""));
    let h = history(
        vec![
            h.states[0].clone(),
            h.states[1].clone(),
            h.states[2].clone(),
            s3,
            s4,
            s5.clone(),
        ],
        vec![none(), none(), none(), only(3), none()],
    );
    let mut lost = s5;
    lost.objects.get_mut(&3).unwrap().perm = 0o644;
    let problems = judge(&w, &h, &lost, 0);
    assert!(
        problems.iter().any(|p| p.starts_with("with one domain")),
        "{problems:?}"
    );
}

/// Every problem of a tree is reported, not only the first.
#[test]
fn every_problem_is_reported() {
    let w = workload(3, "create /a\ncreate /b\nsync\n");
    let mut h = history(
        vec![
            tree(&[]),
            tree(&[("a", 2, b"")]),
            tree(&[("a", 2, b""), ("b", 3, b"")]),
            tree(&[("a", 2, b""), ("b", 3, b"")]),
        ],
        vec![none(), none(), WrittenBack::All],
    );
    h.promises.push(Promise {
        step: 3,
        durable: 5,
        scope: Scope::All,
    });
    let problems = judge(&w, &h, &tree(&[]), 7);
    assert_eq!(problems.len(), 2, "{problems:?}");
}

/// A crash inside a zeroed range (several batches, docs/SEMANTICS.md §4) may leave each
/// block as before or as after, and nothing else.
#[test]
fn a_zeroed_range_may_be_half_done_block_by_block() {
    let w = workload(3, "zero /a 2000 6000\nchmod /a 600\n");
    let before: Vec<u8> = vec![7; 3 * 4096];
    let mut after = before.clone();
    after[2000..8000].fill(0);
    let s0 = tree(&[("a", 2, &before)]);
    let s1 = tree(&[("a", 2, &after)]);
    let mut s2 = s1.clone();
    s2.objects.get_mut(&2).unwrap().perm = 0o600;
    let h = history(vec![s0, s1, s2], vec![only(2), only(2)]);
    let mut half = before.clone();
    half[4096..8000].fill(0);
    assert!(judge(&w, &h, &tree(&[("a", 2, &half)]), 0).is_empty());
    let mut torn = before.clone();
    torn[3000..5000].fill(0);
    assert_eq!(judge(&w, &h, &tree(&[("a", 2, &torn)]), 0).len(), 1);
    // With the chmod after it kept, the zeroing finished.
    let mut later = tree(&[("a", 2, &half)]);
    later.objects.get_mut(&2).unwrap().perm = 0o600;
    assert_eq!(judge(&w, &h, &later, 0).len(), 1);
}

/// `mknod /n chr 1:3` then `sync`: a crash after the sync keeps the device node with its
/// kind and number; one with another number or kind is a state it never had.
#[test]
fn a_special_file_keeps_its_kind_and_device_number() {
    for domains in [1, 3] {
        let w = workload(domains, "mknod /n chr 600 1:3\nsync\n");
        let node = |kind: Kind, rdev: u64| {
            let mut s = tree(&[]);
            s.entries.insert((1, b"n".to_vec()), 2);
            s.objects.insert(
                2,
                Object {
                    kind,
                    perm: 0o600,
                    rdev,
                    ..file(b"")
                },
            );
            s
        };
        let made = node(Kind::CharDev, libc::makedev(1, 3));
        let mut h = history(
            vec![tree(&[]), made.clone(), made.clone()],
            vec![none(), none()],
        );
        h.promises.push(Promise {
            step: 2,
            durable: 10,
            scope: Scope::All,
        });
        assert_eq!(judge(&w, &h, &made, 10), Vec::<String>::new(), "{domains}");
        for wrong in [
            node(Kind::CharDev, libc::makedev(1, 5)),
            node(Kind::BlockDev, libc::makedev(1, 3)),
            node(Kind::Fifo, 0),
        ] {
            let problems = judge(&w, &h, &wrong, 10);
            assert!(!problems.is_empty(), "{domains}: {wrong:?} passed");
        }
    }
}
