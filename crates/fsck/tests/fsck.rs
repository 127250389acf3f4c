//! fsck on images made by real VFS workloads: clean ones check clean; each injected
//! corruption (raw MetaDB records written through a mounted engine, or a data block
//! overwritten on the device) is found with its kind under `-n` (exit 4, image file
//! byte-identical), repaired under `-y` (exit 1; some under `-p`), and a second run is
//! clean (exit 0); the repaired image mounts and every file reads.

mod common;

use common::*;
use engine::log::keys::{self, FileBlock, Reverse};
use format::InodeNo;
use fsck::{Kind, Mode};
use std::path::Path;
use testsupport::check::run_fsck;
use testsupport::image::{from_bytes, mkfs_file};
use testsupport::mount::unmount;
use testsupport::scratch;
use vfs::records::{self, Dentry, ROOT};
use vfs::FileSystem;

#[test]
fn workload_image_checks_clean() {
    assert!(template_gc_cleaned() > 0, "the workload made GC run");
    let dir = scratch!();
    let path = workload_image(dir.path());
    let before = hash(&path);
    let r = run(&path, Mode::Check, true);
    assert_eq!(r.problems, vec![], "clean image");
    assert_eq!(r.exit_code(), 0);
    assert!(r.stats.files >= 7 && r.stats.directories >= 4 && r.stats.symlinks == 2);
    assert!(r.stats.blocks_verified > 2000, "{:?}", r.stats);
    assert_eq!(hash(&path), before, "-n leaves the image byte-identical");
    let r = run(&path, Mode::Repair, false);
    assert_eq!(r.exit_code(), 0, "{:?}", r.problems);
    assert!(walk_all(&path) >= 12);
}

#[test]
fn fresh_image_checks_clean() {
    let dir = scratch!();
    let path = dir.path().join("fresh.img");
    mkfs_file(&path, IMAGE_BYTES, DOMAINS);
    assert_eq!(run(&path, Mode::Check, true).exit_code(), 0);
}

#[test]
fn not_an_image_is_an_operational_error() {
    let dir = scratch!();
    let path = dir.path().join("zeros.img");
    device::create_image(&path, 8 << 20).unwrap();
    let dev = fsck::open_image(&path, false).unwrap();
    let options = fsck::Options {
        mode: Mode::Check,
        verify_data: false,
        now_ns: 0,
    };
    let e = fsck::check(dev, None, &options, &engine::progress::NoProgress).unwrap_err();
    assert!(e.is_not_augefs(), "{e}");
}

/// Injects with `inject` on a mounted copy of the workload image, then: `-n` finds
/// `kind` (exit 4) and leaves the file untouched; `mode` repairs (exit 1); a second
/// check is clean; the repaired image mounts and reads. Returns the repair report and
/// the repaired image (its directory lives as long as the returned guard).
fn case(
    inject: impl FnOnce(&FileSystem, &Path),
    kind: Kind,
    mode: Mode,
    verify_data: bool,
) -> (fsck::Report, tempfile::TempDir, std::path::PathBuf) {
    let dir = scratch!();
    let path = workload_image(dir.path());
    let fs = mount(&path);
    inject(&fs, &path);
    unmount(fs);
    let before = hash(&path);
    let found = run(&path, Mode::Check, verify_data);
    assert!(
        kinds(&found).contains(&kind),
        "{kind:?} not found: {:#?}",
        found.problems
    );
    assert!(found.problems.iter().all(|p| !p.fixed));
    assert_eq!(found.exit_code(), 4);
    assert_eq!(hash(&path), before, "-n wrote to the image");
    let fixed = run(&path, mode, verify_data);
    assert!(
        fixed.problems.iter().any(|p| p.kind == kind && p.fixed),
        "{:#?}",
        fixed.problems
    );
    assert_eq!(fixed.exit_code(), 1, "{:#?}", fixed.problems);
    let again = run(&path, Mode::Check, verify_data);
    assert_eq!(again.problems, vec![], "second check after repair");
    walk_all(&path);
    (fixed, dir, path)
}

#[test]
fn deleted_dentry_makes_an_unreachable_inode_linked_into_lost_found() {
    let mut victim = InodeNo(0);
    let (r, _dir, path) = case(
        |fs, _| {
            victim = ino(fs, "/d1/small");
            delete(fs, &records::dentry_key(ino(fs, "/d1"), b"small"));
        },
        Kind::UnreachableInode,
        Mode::Repair,
        false,
    );
    assert_eq!(kinds(&r), vec![Kind::UnreachableInode], "{:#?}", r.problems);
    let fs = mount(&path);
    let found = format!("/lost+found/#{}", victim.0);
    assert_eq!(ino(&fs, &found), victim);
    let meta = fs.metadata(&found).unwrap();
    assert_eq!((meta.size, meta.nlink), (100, 1));
    unmount(fs);
}

#[test]
fn deleted_directory_entry_moves_the_subtree_to_lost_found() {
    let dir = scratch!();
    let path = workload_image(dir.path());
    let fs = mount(&path);
    let sub = ino(&fs, "/d2/sub");
    delete(&fs, &records::dentry_key(ino(&fs, "/d2"), b"sub"));
    unmount(fs);
    let r = run(&path, Mode::Check, false);
    // The parent's link count is off too (it counted the subdirectory).
    assert!(kinds(&r).contains(&Kind::UnreachableInode));
    assert!(kinds(&r).contains(&Kind::WrongLinkCount));
    assert_eq!(run(&path, Mode::Repair, false).exit_code(), 1);
    assert_eq!(run(&path, Mode::Check, false).problems, vec![]);
    let fs = mount(&path);
    let moved = format!("/lost+found/#{}", sub.0);
    assert_eq!(ino(&fs, &moved), sub);
    assert_eq!(fs.metadata(&format!("{moved}/big")).unwrap().size, 3 << 20);
    unmount(fs);
}

#[test]
fn wrong_link_count_is_preened() {
    case(
        |fs, _| {
            let f = ino(fs, "/d1/two");
            let mut i = inode(fs, f);
            i.nlink += 5;
            put(fs, &records::inode_key(f), &i.encode());
        },
        Kind::WrongLinkCount,
        Mode::Preen,
        false,
    );
}

#[test]
fn special_files_check_clean_and_their_fields_are_preened() {
    let dir = scratch!();
    let path = workload_image(dir.path());
    let fs = mount(&path);
    fs.make_node("/fifo", libc::S_IFIFO | 0o600, 0).unwrap();
    fs.make_node("/sock", libc::S_IFSOCK | 0o600, 0).unwrap();
    fs.make_node("/d1/null", libc::S_IFCHR | 0o666, 0x103)
        .unwrap();
    fs.make_node("/d1/sda", libc::S_IFBLK | 0o600, 0x800)
        .unwrap();
    fs.hard_link("/fifo", "/d2/fifo-link").unwrap();
    unmount(fs);
    let r = run(&path, Mode::Check, false);
    assert_eq!(r.problems, vec![], "special files check clean");
    assert_eq!(r.stats.special, 4, "{:?}", r.stats);
    // A FIFO with a size and a device number; a socket with a device number.
    let fs = mount(&path);
    let fifo = ino(&fs, "/fifo");
    let mut i = inode(&fs, fifo);
    (i.size, i.rdev) = (5, 0x103);
    put(&fs, &records::inode_key(fifo), &i.encode());
    unmount(fs);
    let r = run(&path, Mode::Check, false);
    let mut found = kinds(&r);
    found.sort();
    assert_eq!(
        found,
        vec![Kind::SpecialFileWithSize, Kind::DeviceNumberOnNonDevice],
        "{:#?}",
        r.problems
    );
    assert_eq!(r.exit_code(), 4);
    assert_eq!(run(&path, Mode::Preen, false).exit_code(), 1);
    assert_eq!(run(&path, Mode::Check, false).problems, vec![]);
    let fs = mount(&path);
    let m = fs.metadata("/d2/fifo-link").unwrap();
    assert_eq!(
        (m.kind, m.size, m.rdev, m.nlink),
        (vfs::Kind::Fifo, 0, 0, 2)
    );
    assert_eq!(fs.metadata("/d1/null").unwrap().rdev, 0x103);
    unmount(fs);
}

#[test]
fn dangling_dentry_is_dropped() {
    case(
        |fs, _| {
            let d = Dentry {
                ino: InodeNo(987_654),
                kind: vfs::Kind::File,
            };
            put(fs, &records::dentry_key(ROOT, b"ghost"), &d.encode());
        },
        Kind::DanglingDentry,
        Mode::Repair,
        false,
    );
}

/// A block of the domain `ino` belongs to that no mapping uses (its bit is clear).
fn invalid_block_of(fs: &FileSystem, ino: InodeNo) -> u64 {
    let m = mapping(fs, ino, 0);
    let g = fs.engine().geometry();
    let seg = g.segment_of(m.addr).unwrap();
    let domain = fs.engine().domain_of(ino);
    let v = fs
        .engine()
        .metadb()
        .get(&keys::seginfo_key(domain, seg))
        .unwrap()
        .unwrap();
    let bitmap = &v[16..80];
    let start = g.segment_start(seg).0;
    (0..512u64)
        .find(|b| bitmap[*b as usize / 8] & (1 << (b % 8)) == 0)
        .map(|b| start + b)
        .expect("a segment with a free block")
}

#[test]
fn mapping_to_an_invalid_block_is_dropped() {
    case(
        |fs, _| {
            let f = ino(fs, "/d1/two");
            let mut m = mapping(fs, f, 1);
            m.addr = format::BlockAddr(invalid_block_of(fs, f));
            put(fs, &keys::mapping_key(f, FileBlock(1)), &m.encode());
        },
        Kind::MappingToInvalidBlock,
        Mode::Repair,
        false,
    );
}

#[test]
fn mapping_whose_bit_was_cleared_is_revalidated_by_preen() {
    let (r, _, _) = case(
        |fs, _| {
            let f = ino(fs, "/d1/two");
            let m = mapping(fs, f, 0);
            let g = fs.engine().geometry();
            let seg = g.segment_of(m.addr).unwrap();
            let key = keys::seginfo_key(fs.engine().domain_of(f), seg);
            let mut v = fs.engine().metadb().get(&key).unwrap().unwrap();
            let b = (m.addr.0 - g.segment_start(seg).0) as usize;
            v[16 + b / 8] &= !(1 << (b % 8));
            let count = u16::from_le_bytes([v[6], v[7]]) - 1;
            v[6..8].copy_from_slice(&count.to_le_bytes());
            put(fs, &key, &v);
        },
        Kind::MappingToInvalidBlock,
        Mode::Preen,
        true,
    );
    assert_eq!(kinds(&r), vec![Kind::MappingToInvalidBlock]);
}

#[test]
fn two_mappings_of_one_block_keep_the_one_that_verifies() {
    let (r, _, _) = case(
        |fs, _| {
            let f = ino(fs, "/d2/sub/big");
            let m = mapping(fs, f, 3);
            put(fs, &keys::mapping_key(f, FileBlock(4)), &m.encode());
        },
        Kind::BlockOwnedTwice,
        Mode::Repair,
        false,
    );
    let twice: Vec<_> = r
        .problems
        .iter()
        .filter(|p| p.kind == Kind::BlockOwnedTwice)
        .collect();
    assert_eq!(twice.len(), 1);
    assert_eq!(twice[0].objects.block, Some(4), "the copy is dropped");
}

#[test]
fn seginfo_count_mismatch_is_preened_and_the_image_mounts_again() {
    case(
        |fs, _| {
            let f = ino(fs, "/d1/two");
            let m = mapping(fs, f, 0);
            let seg = fs.engine().geometry().segment_of(m.addr).unwrap();
            let key = keys::seginfo_key(fs.engine().domain_of(f), seg);
            let mut v = fs.engine().metadb().get(&key).unwrap().unwrap();
            let count = u16::from_le_bytes([v[6], v[7]]) + 3;
            v[6..8].copy_from_slice(&count.to_le_bytes());
            put(fs, &key, &v);
        },
        Kind::SeginfoCountMismatch,
        Mode::Preen,
        false,
    );
}

#[test]
fn mapping_for_a_missing_inode_is_dropped() {
    case(
        |fs, _| {
            let f = ino(fs, "/d2/sub/mid");
            let ghost = InodeNo(f.0 + u64::from(DOMAINS) * 1000);
            let m = mapping(fs, f, 2);
            unmap(fs, f, 2);
            put(fs, &keys::mapping_key(ghost, FileBlock(2)), &m.encode());
            let g = fs.engine().geometry();
            let seg = g.segment_of(m.addr).unwrap();
            let b = (m.addr.0 - g.segment_start(seg).0) as u16;
            let r = Reverse {
                ino: ghost,
                block: FileBlock(2),
            };
            put(fs, &keys::reverse_key(seg, b), &r.encode());
        },
        Kind::MappingWithoutInode,
        Mode::Preen,
        false,
    );
}

#[test]
fn corrupt_data_block_is_found_with_verify_data() {
    let (r, _, _) = case(
        |fs, _| {
            let f = ino(fs, "/d2/sub/big");
            let m = mapping(fs, f, 7);
            fs.engine()
                .device()
                .write(
                    m.addr.byte_offset(),
                    device::AlignedBuf::from_slice(&[0xa5; 4096]),
                    platform::IoCause::Tool,
                )
                .unwrap();
        },
        Kind::DataChecksumMismatch,
        Mode::Repair,
        true,
    );
    assert_eq!(kinds(&r), vec![Kind::DataChecksumMismatch]);
    // A problem that names an inode names its path too.
    assert_eq!(r.problems[0].objects.path.as_deref(), Some("/d2/sub/big"));
}

#[test]
fn orphans_are_accepted_only_with_a_record() {
    let dir = scratch!();
    let path = workload_image(dir.path());
    let fs = mount(&path);
    // An open unlinked file as the VFS keeps it: no name, no links, an orphan record.
    let f = ino(&fs, "/d2/sub/mid");
    delete(&fs, &records::dentry_key(ino(&fs, "/d2/sub"), b"mid"));
    let mut i = inode(&fs, f);
    i.nlink = 0;
    put(&fs, &records::inode_key(f), &i.encode());
    put(&fs, &records::orphan_key(f), &[]);
    unmount(fs);
    assert_eq!(run(&path, Mode::Check, true).problems, vec![]);
    // The next mount frees that orphan (the VFS reclaims orphans at mount). Then an
    // unlinked inode without a record is a deletion cut short, and a record naming no
    // inode is stray.
    let fs = mount(&path);
    assert!(fs.stat_ino(f).is_err(), "the mount freed the orphan");
    let s = ino(&fs, "/d2/sparse");
    delete(&fs, &records::dentry_key(ino(&fs, "/d2"), b"sparse"));
    let mut i = inode(&fs, s);
    i.nlink = 0;
    put(&fs, &records::inode_key(s), &i.encode());
    put(&fs, &records::orphan_key(InodeNo(55_555)), &[]);
    unmount(fs);
    let r = run(&path, Mode::Check, false);
    assert!(
        kinds(&r).contains(&Kind::UnlinkedInode),
        "{:#?}",
        r.problems
    );
    assert!(kinds(&r).contains(&Kind::OrphanWithoutInode));
    assert_eq!(run(&path, Mode::Repair, false).exit_code(), 1);
    assert_eq!(run(&path, Mode::Check, true).problems, vec![]);
}

#[test]
fn segment_named_by_two_domains_loses_the_unused_claim() {
    case(
        |fs, _| {
            let f = ino(fs, "/d2/sub/big");
            let m = mapping(fs, f, 0);
            let seg = fs.engine().geometry().segment_of(m.addr).unwrap();
            let other = format::DomainId(1 - fs.engine().domain_of(f).0);
            let mut v = [0u8; 80];
            v[0..4].copy_from_slice(&seg.0.to_le_bytes());
            v[4] = 1;
            put(fs, &keys::seginfo_key(other, seg), &v);
        },
        Kind::SegmentOwnerConflict,
        Mode::Preen,
        false,
    );
}

#[test]
fn lost_segment_information_is_recreated_without_losing_data() {
    let (r, _, _) = case(
        |fs, _| {
            let f = ino(fs, "/d2/sub/big");
            let m = mapping(fs, f, 0);
            let seg = fs.engine().geometry().segment_of(m.addr).unwrap();
            delete(fs, &keys::seginfo_key(fs.engine().domain_of(f), seg));
        },
        Kind::SeginfoMissing,
        Mode::Preen,
        true,
    );
    assert_eq!(kinds(&r), vec![Kind::SeginfoMissing], "{:#?}", r.problems);
}

#[test]
fn unclean_image_recovers_in_the_overlay_without_writing() {
    let dir = scratch!();
    let path = workload_image(dir.path());
    let fs = mount(&path);
    let f = vfs::OpenOptions::new()
        .write(true)
        .create(true)
        .open(&fs, "/after")
        .unwrap();
    f.write_at(&[5u8; 20_000], 0).unwrap();
    f.sync_all().unwrap();
    drop(f);
    // The name too (POSIX asks for the directory's fsync; see the known VFS bug in
    // tests/crash.rs for why this test does not rely on the file's fsync alone).
    fs.fsync_ino(ROOT, false).unwrap();
    // No unmount: the fsync'd records are only in the WAL.
    drop(fs);
    let before = hash(&path);
    let r = run(&path, Mode::Check, true);
    assert_eq!(r.problems, vec![]);
    assert_eq!(
        hash(&path),
        before,
        "recovery's writes stayed in the overlay"
    );
    assert_eq!(run(&path, Mode::Repair, false).exit_code(), 0);
    let fs = mount(&path);
    assert_eq!(fs.metadata("/after").unwrap().size, 20_000);
    unmount(fs);
}

/// Every block of MetaDB's tables, zeroed, is reported: recovery refuses the tables it
/// reads (`metadb_damaged`), the scan of every record meets the rest
/// (`metadb_unreadable`).
#[test]
fn a_damaged_table_block_is_always_reported() {
    let dir = scratch!();
    let path = workload_image(dir.path());
    // A mount's recovery flush puts the workload's WAL into a table.
    unmount(mount(&path));
    let image = std::fs::read(&path).unwrap();
    let dev = fsck::open_image(&path, false).unwrap();
    let recovered = fsck::open::recover(dev, None, fsck::open::Damage::Refuse).unwrap();
    let g = recovered.geometry;
    // The live tables' blocks (a segment keeps what an earlier table left past the end
    // of the one it holds now: image files are not discarded).
    let mut blocks = Vec::new();
    for (segment, len) in recovered.db.table_extents() {
        assert_eq!(
            recovered.pool.owner(segment),
            Some(engine::space::Owner::MetaDb)
        );
        let first = g.segment_start(segment).0 as usize;
        blocks.extend(first..first + len as usize / 4096);
    }
    recovered.db.close().unwrap();
    // At least a data block, the index and filter, and the footer (the workload's
    // table is four blocks now that a flush keeps only the versions readers can see).
    assert!(blocks.len() >= 3, "table blocks {blocks:?}");
    let mut kinds_seen = std::collections::BTreeMap::new();
    for &b in blocks.iter().step_by((blocks.len() / 24).max(1)) {
        let mut damaged = image.clone();
        damaged[b * 4096..(b + 1) * 4096].fill(0);
        let r = run_fsck(from_bytes(damaged), Mode::Check, false);
        assert!(
            !r.problems.is_empty(),
            "table block {b} zeroed: fsck found nothing"
        );
        *kinds_seen
            .entry(format!("{:?}", r.problems[0].kind))
            .or_insert(0) += 1;
    }
    println!("first problem per damaged table block: {kinds_seen:?}");
}
