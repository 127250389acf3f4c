//! Permission checks (docs/SEMANTICS.md §4): search, read and write permission by class,
//! supplementary groups, the sticky bit, set-group-ID directories, and who may chmod,
//! chown and set times. Each case is what Linux does for the same calls.

use format::constants::MIB;
use std::sync::Arc;
use testsupport::mount::errno;
use vfs::creds::{MAY_EXEC, MAY_READ, MAY_WRITE};
use vfs::{AttrChanges, Creds, FileSystem, OpenOptions, RenameMode, TimeChange, XattrMode};

fn mounted() -> Arc<FileSystem> {
    let fs = testsupport::mount::mounted(128 * MIB, 2);
    fs.set_creds(Creds::root());
    fs
}

fn alice() -> Creds {
    Creds::user(1000, 1000, vec![1000, 50])
}

fn bob() -> Creds {
    Creds::user(1001, 1001, vec![1001])
}

/// Root makes `/home/alice` (0755, alice's) and a sticky `/tmp` (1777).
fn tree(fs: &FileSystem) {
    fs.create_dir("/home", 0o755).unwrap();
    fs.create_dir("/home/alice", 0o755).unwrap();
    fs.chown("/home/alice", 1000, 1000).unwrap();
    fs.create_dir("/tmp", 0o777).unwrap();
    fs.set_permissions("/tmp", 0o1777).unwrap();
}

fn write_file(fs: &Arc<FileSystem>, path: &str, mode: u32) -> i32 {
    errno(
        OpenOptions::new()
            .write(true)
            .create(true)
            .mode(mode)
            .open(fs, path)
            .and_then(|f| f.write_at(b"data", 0)),
    )
}

fn open(fs: &Arc<FileSystem>, path: &str, read: bool, write: bool) -> i32 {
    errno(OpenOptions::new().read(read).write(write).open(fs, path))
}

#[test]
fn new_inodes_belong_to_their_creator() {
    let fs = mounted();
    tree(&fs);
    fs.set_creds(alice());
    assert_eq!(write_file(&fs, "/home/alice/f", 0o640), 0);
    let m = fs.metadata("/home/alice/f").unwrap();
    assert_eq!((m.uid, m.gid, m.mode & 0o7777), (1000, 1000, 0o640));
    // O_CREAT opens the file it creates for writing even if its mode forbids it.
    assert_eq!(write_file(&fs, "/home/alice/ro", 0o444), 0);
    assert_eq!(open(&fs, "/home/alice/ro", false, true), libc::EACCES);
}

#[test]
fn directories_need_write_to_change_and_search_to_pass() {
    let fs = mounted();
    tree(&fs);
    fs.set_creds(alice());
    assert_eq!(write_file(&fs, "/home/alice/f", 0o644), 0);
    fs.set_creds(bob());
    assert_eq!(write_file(&fs, "/home/alice/g", 0o644), libc::EACCES);
    assert_eq!(errno(fs.create_dir("/home/alice/d", 0o755)), libc::EACCES);
    assert_eq!(errno(fs.remove_file("/home/alice/f")), libc::EACCES);
    assert_eq!(
        errno(fs.rename_path("/home/alice/f", "/tmp/f", RenameMode::Replace)),
        libc::EACCES
    );
    assert_eq!(
        errno(fs.hard_link("/home/alice/f", "/home/alice/l")),
        libc::EACCES
    );
    assert_eq!(fs.read_dir("/home/alice").unwrap().len(), 1);
    assert_eq!(open(&fs, "/home/alice/f", true, false), 0);
    assert_eq!(open(&fs, "/home/alice/f", false, true), libc::EACCES);
    // Alice closes her directory: bob can no longer pass through it or list it.
    fs.set_creds(alice());
    fs.set_permissions("/home/alice", 0o700).unwrap();
    fs.set_creds(bob());
    assert_eq!(errno(fs.metadata("/home/alice/f")), libc::EACCES);
    assert_eq!(errno(fs.read_dir("/home/alice")), libc::EACCES);
    assert_eq!(errno(fs.access_path("/home/alice", MAY_READ)), libc::EACCES);
    // A directory with search but no read permission: names can be used, not listed.
    fs.set_creds(alice());
    fs.set_permissions("/home/alice", 0o711).unwrap();
    fs.set_creds(bob());
    assert_eq!(errno(fs.metadata("/home/alice/f")), 0);
    assert_eq!(errno(fs.read_dir("/home/alice")), libc::EACCES);
    // Root passes everywhere, but executes only what has an execute bit.
    fs.set_creds(Creds::root());
    fs.set_permissions("/home/alice", 0o000).unwrap();
    assert_eq!(errno(fs.read_dir("/home/alice")), 0);
    assert_eq!(
        errno(fs.access_path("/home/alice/f", MAY_EXEC)),
        libc::EACCES
    );
    assert_eq!(
        errno(fs.access_path("/home/alice/f", MAY_READ | MAY_WRITE)),
        0
    );
}

#[test]
fn one_class_applies_and_supplementary_groups_count() {
    let fs = mounted();
    tree(&fs);
    fs.set_creds(alice());
    assert_eq!(write_file(&fs, "/tmp/g", 0o604), 0);
    // chgrp to a group alice belongs to (supplementary 50).
    fs.chown("/tmp/g", 1000, 50).unwrap();
    fs.set_permissions("/tmp/g", 0o064).unwrap();
    // The owner class has no bits: alice is denied although group and other allow.
    assert_eq!(open(&fs, "/tmp/g", true, false), libc::EACCES);
    fs.set_creds(Creds::user(1002, 1002, vec![50]));
    assert_eq!(open(&fs, "/tmp/g", true, true), 0);
    fs.set_creds(bob());
    assert_eq!(open(&fs, "/tmp/g", true, false), 0);
    assert_eq!(open(&fs, "/tmp/g", false, true), libc::EACCES);
}

#[test]
fn sticky_directory_protects_other_users_entries() {
    let fs = mounted();
    tree(&fs);
    fs.set_creds(alice());
    assert_eq!(write_file(&fs, "/tmp/a", 0o666), 0);
    fs.set_creds(bob());
    assert_eq!(write_file(&fs, "/tmp/b", 0o666), 0);
    assert_eq!(errno(fs.remove_file("/tmp/a")), libc::EPERM);
    assert_eq!(
        errno(fs.rename_path("/tmp/a", "/tmp/c", RenameMode::Replace)),
        libc::EPERM
    );
    // Replacing alice's file by a rename is removing it too.
    assert_eq!(
        errno(fs.rename_path("/tmp/b", "/tmp/a", RenameMode::Replace)),
        libc::EPERM
    );
    assert_eq!(errno(fs.remove_file("/tmp/b")), 0);
    fs.set_creds(Creds::root());
    assert_eq!(errno(fs.remove_file("/tmp/a")), 0);
}

#[test]
fn set_group_id_directories_hand_down_their_group() {
    let fs = mounted();
    tree(&fs);
    fs.create_dir("/shared", 0o777).unwrap();
    fs.chown("/shared", 0, 50).unwrap();
    fs.set_permissions("/shared", 0o2777).unwrap();
    fs.set_creds(bob());
    assert_eq!(write_file(&fs, "/shared/f", 0o644), 0);
    fs.create_dir("/shared/sub", 0o755).unwrap();
    let f = fs.metadata("/shared/f").unwrap();
    let sub = fs.metadata("/shared/sub").unwrap();
    assert_eq!((f.uid, f.gid), (1001, 50));
    assert_eq!((sub.gid, sub.mode & 0o7777), (50, 0o2755));
}

#[test]
fn attribute_changes_follow_posix() {
    let fs = mounted();
    tree(&fs);
    fs.set_creds(alice());
    assert_eq!(write_file(&fs, "/tmp/f", 0o666), 0);
    fs.set_permissions("/tmp/f", 0o4755).unwrap();
    fs.set_creds(bob());
    assert_eq!(errno(fs.set_permissions("/tmp/f", 0o777)), libc::EPERM);
    assert_eq!(errno(fs.chown("/tmp/f", 1001, 1001)), libc::EPERM);
    // Explicit times need ownership; "now" needs only write permission.
    assert_eq!(errno(fs.set_times("/tmp/f", 5, 5)), libc::EPERM);
    fs.set_creds(alice());
    fs.set_permissions("/tmp/f", 0o4757).unwrap();
    fs.set_creds(bob());
    let now = AttrChanges {
        atime: Some(TimeChange::Now),
        mtime: Some(TimeChange::Now),
        ..AttrChanges::default()
    };
    assert_eq!(errno(fs.set_attr_path("/tmp/f", &now)), 0);
    // Alice may not give the file away, nor pick a group she is not in.
    fs.set_creds(alice());
    assert_eq!(errno(fs.chown("/tmp/f", 1001, 1000)), libc::EPERM);
    assert_eq!(errno(fs.chown("/tmp/f", 1000, 1001)), libc::EPERM);
    assert_eq!(errno(fs.chown("/tmp/f", 1000, 50)), 0);
    // A chown clears set-user-ID.
    assert_eq!(fs.metadata("/tmp/f").unwrap().mode & 0o7777, 0o0757);
    // Root gives it to bob.
    fs.set_creds(Creds::root());
    fs.chown("/tmp/f", 1001, 1001).unwrap();
    assert_eq!(fs.metadata("/tmp/f").unwrap().uid, 1001);
    // As for every non-directory (Linux's chown_common): a device node's set-ID bits go.
    fs.make_node("/tmp/dev", libc::S_IFCHR | 0o6770, 0x0103)
        .unwrap();
    fs.chown("/tmp/dev", 1001, 1001).unwrap();
    assert_eq!(fs.metadata("/tmp/dev").unwrap().mode & 0o7777, 0o0770);
}

#[test]
fn moving_a_directory_to_another_parent_needs_write_on_it() {
    let fs = mounted();
    tree(&fs);
    fs.set_creds(alice());
    fs.create_dir("/home/alice/d", 0o555).unwrap();
    fs.create_dir("/home/alice/e", 0o755).unwrap();
    assert_eq!(
        errno(fs.rename_path("/home/alice/d", "/home/alice/e/d", RenameMode::Replace)),
        libc::EACCES
    );
    // In the same directory its `..` stays: allowed.
    assert_eq!(
        errno(fs.rename_path("/home/alice/d", "/home/alice/d2", RenameMode::Replace)),
        0
    );
}

#[test]
fn extended_attributes_by_namespace() {
    let fs = mounted();
    tree(&fs);
    fs.set_creds(alice());
    assert_eq!(write_file(&fs, "/tmp/f", 0o644), 0);
    fs.set_xattr("/tmp/f", b"user.a", b"1", XattrMode::Either)
        .unwrap();
    assert_eq!(
        errno(fs.set_xattr("/tmp/f", b"trusted.a", b"1", XattrMode::Either)),
        libc::EPERM
    );
    fs.set_creds(bob());
    assert_eq!(fs.get_xattr("/tmp/f", b"user.a").unwrap(), b"1");
    assert_eq!(
        errno(fs.set_xattr("/tmp/f", b"user.b", b"2", XattrMode::Either)),
        libc::EACCES
    );
    assert_eq!(errno(fs.remove_xattr("/tmp/f", b"user.a")), libc::EACCES);
    fs.set_creds(Creds::root());
    fs.set_xattr("/tmp/f", b"trusted.t", b"x", XattrMode::Either)
        .unwrap();
    assert_eq!(fs.list_xattr("/tmp/f").unwrap().len(), 2);
    fs.set_creds(bob());
    assert_eq!(fs.list_xattr("/tmp/f").unwrap(), vec![b"user.a".to_vec()]);
    assert_eq!(errno(fs.get_xattr("/tmp/f", b"trusted.t")), libc::EPERM);
}

#[test]
fn root_searches_every_directory_and_its_walk_keeps_the_errors() {
    let fs = mounted();
    fs.create_dir("/a", 0o755).unwrap();
    fs.create_dir("/a/b", 0o755).unwrap();
    assert_eq!(write_file(&fs, "/a/b/f", 0o644), 0);
    fs.symlink("/a/b", "/l").unwrap();
    fs.set_permissions("/a", 0).unwrap();
    fs.set_permissions("/a/b", 0).unwrap();
    let f = fs.resolve("/a/b/f", true).unwrap();
    for path in ["/a/./b/f", "/a/b/../b/f", "/l/f", "/a/b/./f", "//a//b//f"] {
        assert_eq!(fs.resolve(path, true).unwrap(), f, "{path}");
    }
    for (path, err) in [
        ("/a/b/f/x", libc::ENOTDIR),
        ("/a/b/f/.", libc::ENOTDIR),
        ("/a/b/f/..", libc::ENOTDIR),
        ("/a/b/g", libc::ENOENT),
        ("/a/c/f", libc::ENOENT),
    ] {
        assert_eq!(errno(fs.resolve(path, true)), err, "{path}");
    }
    // Others need search permission on each directory passed.
    fs.set_creds(alice());
    assert_eq!(errno(fs.resolve("/a/b/f", true)), libc::EACCES);
    fs.set_creds(Creds::root());

    // From a directory removed meanwhile (an open directory's descriptor).
    let b = fs.resolve("/a/b", true).unwrap();
    assert_eq!(fs.resolve_at(&Creds::root(), b, b"f", true).unwrap(), f);
    fs.remove_file("/a/b/f").unwrap();
    fs.remove_dir("/a/b").unwrap();
    for path in [&b"f"[..], b".", b"./f", b"../b"] {
        let r = fs.resolve_at(&Creds::root(), b, path, true);
        assert_eq!(errno(r), libc::ENOENT, "{}", String::from_utf8_lossy(path));
    }
    assert_eq!(errno(fs.resolve("/l/f", true)), libc::ENOENT);
}

/// A write or truncate by anyone but root drops S_ISUID, and S_ISGID when the file is
/// group-executable or the writer is outside its group (Linux); the write succeeds. A
/// writer who is not the owner may make exactly that change through set_attr (what the
/// kernel asks of a FUSE file system), and nothing more.
#[test]
fn writes_and_truncates_drop_set_id_bits() {
    let fs = mounted();
    tree(&fs);
    let perm = |p: &str| fs.metadata(p).unwrap().mode & 0o7777;
    // (mode, what bob's write leaves, what root's write leaves)
    let cases = [
        (0o4777, 0o0777),
        (0o2777, 0o0777),
        (0o6777, 0o0777),
        (0o2767, 0o0767), // bob is outside group 50
    ];
    for (i, (mode, after)) in cases.into_iter().enumerate() {
        let path = format!("/tmp/s{i}");
        fs.set_creds(Creds::root());
        assert_eq!(write_file(&fs, &path, 0o644), 0);
        fs.chown(&path, 1000, 50).unwrap();
        fs.set_permissions(&path, mode).unwrap();
        // Root's write keeps the bits.
        assert_eq!(write_file(&fs, &path, 0o644), 0);
        assert_eq!(perm(&path), mode, "{path}: root wrote");
        fs.set_creds(bob());
        assert_eq!(write_file(&fs, &path, 0o644), 0, "{path}: bob's write");
        assert_eq!(perm(&path), after, "{path}: bob wrote");
        // Truncate likewise.
        fs.set_creds(Creds::root());
        fs.set_permissions(&path, mode).unwrap();
        fs.set_creds(bob());
        let f = OpenOptions::new().write(true).open(&fs, &path).unwrap();
        f.set_len(1).unwrap();
        assert_eq!(perm(&path), after, "{path}: bob truncated");
    }
    // A member of the file's group keeps S_ISGID without group execute.
    fs.set_creds(Creds::root());
    fs.set_permissions("/tmp/s3", 0o2767).unwrap();
    fs.set_creds(alice());
    assert_eq!(write_file(&fs, "/tmp/s3", 0o644), 0);
    assert_eq!(perm("/tmp/s3"), 0o2767);

    // set_attr by a writer who is not the owner: only set-id bits may go.
    fs.set_creds(Creds::root());
    fs.chown("/tmp/s0", 0, 0).unwrap();
    fs.set_permissions("/tmp/s0", 0o6777).unwrap();
    fs.set_creds(bob());
    let chmod = |p: u32| {
        errno(fs.set_attr_path(
            "/tmp/s0",
            &AttrChanges {
                perm: Some(p),
                ..AttrChanges::default()
            },
        ))
    };
    assert_eq!(chmod(0o0755), libc::EPERM, "other bits");
    assert_eq!(chmod(0o0777), 0, "the kill of both bits");
    assert_eq!(perm("/tmp/s0"), 0o0777);
    fs.set_creds(Creds::root());
    fs.set_permissions("/tmp/s0", 0o4755).unwrap();
    fs.set_creds(bob());
    assert_eq!(chmod(0o0755), libc::EPERM, "bob may not write it");
}
