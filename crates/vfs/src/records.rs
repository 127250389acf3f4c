//! The VFS's records in MetaDB (docs/FORMAT.md §6.4): inodes, directory entries, symlink
//! targets and the inode-number high-water mark. Keys are big-endian (a directory's
//! entries are adjacent and sorted by name, which gives readdir stable cursors); values
//! are little-endian field tables.
//!
//! Invariants:
//! - Decoding never panics on bad bytes: lengths and kinds are checked, errors are typed
//!   corruption.

use crate::error::VfsError;
use format::layout::{Field, StructLayout};
use format::InodeNo;

// The tags are defined once for every MetaDB record kind, in `format::keys`.
pub const INODE_TAG: u8 = format::keys::INODE;
pub const DENTRY_TAG: u8 = format::keys::DENTRY;
pub const SYMLINK_TAG: u8 = format::keys::SYMLINK;
pub const XATTR_TAG: u8 = format::keys::XATTR;
pub const ORPHAN_TAG: u8 = format::keys::ORPHAN;
pub const COUNTER_KEY: &[u8] = b"c:next-ino";
const _: () = assert!(COUNTER_KEY[0] == format::keys::COUNTER);

/// The root directory's inode number.
pub const ROOT: InodeNo = InodeNo(1);
/// Longest name in a directory, in bytes.
pub const NAME_MAX: usize = 255;

/// What an inode is. The discriminants are the on-disk `kind` (docs/FORMAT.md §6.4).
///
/// A special file (FIFO, socket, device) is a name and attributes only: augefs never
/// implements the pipe, the socket or the device; a kernel front end does, from the
/// type and `rdev` (docs/SEMANTICS.md §4 "Special files").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File = 1,
    Dir = 2,
    Symlink = 3,
    Fifo = 4,
    Socket = 5,
    CharDev = 6,
    BlockDev = 7,
}

impl Kind {
    /// Every kind, in on-disk order.
    pub const ALL: [Kind; 7] = [
        Kind::File,
        Kind::Dir,
        Kind::Symlink,
        Kind::Fifo,
        Kind::Socket,
        Kind::CharDev,
        Kind::BlockDev,
    ];

    pub fn from_u8(v: u8) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| *k as u8 == v)
    }

    /// The `S_IFMT` bits.
    pub fn mode_bits(self) -> u32 {
        match self {
            Kind::File => libc::S_IFREG,
            Kind::Dir => libc::S_IFDIR,
            Kind::Symlink => libc::S_IFLNK,
            Kind::Fifo => libc::S_IFIFO,
            Kind::Socket => libc::S_IFSOCK,
            Kind::CharDev => libc::S_IFCHR,
            Kind::BlockDev => libc::S_IFBLK,
        }
    }

    /// The kind of a mode's `S_IFMT` bits (None for bits no kind has).
    pub fn from_mode(mode: u32) -> Option<Kind> {
        Kind::ALL
            .into_iter()
            .find(|k| k.mode_bits() == mode & libc::S_IFMT)
    }

    /// The readdir type (`DT_*`): the `S_IFMT` bits shifted down, as Linux defines it.
    pub fn dirent_type(self) -> u8 {
        (self.mode_bits() >> 12) as u8
    }

    /// A FIFO, socket or device node: no data, size 0.
    pub fn is_special(self) -> bool {
        matches!(
            self,
            Kind::Fifo | Kind::Socket | Kind::CharDev | Kind::BlockDev
        )
    }

    /// A character or block device: the only kinds with an `rdev`.
    pub fn is_device(self) -> bool {
        matches!(self, Kind::CharDev | Kind::BlockDev)
    }
}

pub fn inode_key(ino: InodeNo) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[0] = INODE_TAG;
    k[1..].copy_from_slice(&ino.0.to_be_bytes());
    k
}

pub fn symlink_key(ino: InodeNo) -> [u8; 9] {
    let mut k = inode_key(ino);
    k[0] = SYMLINK_TAG;
    k
}

/// The orphan record of `ino`: present while `ino` has no name but is still open, so
/// that a mount after a crash frees it.
pub fn orphan_key(ino: InodeNo) -> [u8; 9] {
    let mut k = inode_key(ino);
    k[0] = ORPHAN_TAG;
    k
}

/// The inode an orphan key names.
pub fn parse_orphan_key(key: &[u8]) -> Result<InodeNo, VfsError> {
    match key {
        [ORPHAN_TAG, rest @ ..] if rest.len() == 8 => Ok(InodeNo(u64::from_be_bytes(
            rest.try_into().expect("8 bytes"),
        ))),
        _ => Err(VfsError::corrupt("orphan key", "length", 9, key.len())),
    }
}

/// The prefix of every extended attribute of `ino`.
pub fn xattr_prefix(ino: InodeNo) -> Vec<u8> {
    let mut k = inode_key(ino).to_vec();
    k[0] = XATTR_TAG;
    k
}

pub fn xattr_key(ino: InodeNo, name: &[u8]) -> Vec<u8> {
    let mut k = xattr_prefix(ino);
    k.extend_from_slice(name);
    k
}

pub fn dentry_key(parent: InodeNo, name: &[u8]) -> Vec<u8> {
    let mut k = dentry_prefix(parent);
    k.extend_from_slice(name);
    k
}

/// The prefix of every entry of directory `parent`.
pub fn dentry_prefix(parent: InodeNo) -> Vec<u8> {
    let mut k = Vec::with_capacity(9 + NAME_MAX);
    k.push(DENTRY_TAG);
    k.extend_from_slice(&parent.0.to_be_bytes());
    k
}

/// An inode's attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inode {
    pub kind: Kind,
    /// Permission bits (and setuid, setgid, sticky): `mode & 0o7777`.
    pub perm: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    /// For a directory, the directory that holds it (the root names itself); 0 otherwise.
    pub parent: u64,
    pub size: u64,
    pub atime_ns: i64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub btime_ns: i64,
    /// 4 KiB blocks mapped (allocated) to the file: `st_blocks / 8`. Kept exact by the
    /// batches that map and unmap them.
    pub blocks: u64,
    /// A device's number, in Linux's 32-bit encoding (what `mknod(2)` takes and FUSE
    /// carries; [`rdev_of`]); 0 for every other kind.
    pub rdev: u32,
}

/// A `dev_t` as the 32-bit `rdev` of an inode: Linux's `new_encode_dev` (minor bits
/// 0-7 and 20-31, major bits 8-19), which is also glibc's `makedev` for every number
/// that fits. None for a number that does not fit (majors over 4095, minors over
/// 2^20 - 1): `mknod(2)` itself refuses those.
pub fn rdev_of(dev: u64) -> Option<u32> {
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    if major > 0xfff || minor > 0xf_ffff {
        return None;
    }
    Some((minor & 0xff) | (major << 8) | ((minor & !0xff) << 12))
}

/// The `dev_t` (glibc's encoding) of an inode's 32-bit `rdev`.
pub fn dev_of(rdev: u32) -> u64 {
    let major = (rdev >> 8) & 0xfff;
    let minor = (rdev & 0xff) | ((rdev >> 12) & 0xf_ff00);
    libc::makedev(major, minor)
}

pub const I_KIND: Field = Field::at("kind", 0, 1);
pub const I_PAD: Field = Field::after(I_KIND, "pad", 3);
pub const I_PERM: Field = Field::after(I_PAD, "perm", 4);
pub const I_UID: Field = Field::after(I_PERM, "uid", 4);
pub const I_GID: Field = Field::after(I_UID, "gid", 4);
pub const I_NLINK: Field = Field::after(I_GID, "nlink", 4);
/// 0 but for a device. Images made before special files existed hold 0 here (the field
/// was reserved), which reads as "no device".
pub const I_RDEV: Field = Field::after(I_NLINK, "rdev", 4);
pub const I_PARENT: Field = Field::after(I_RDEV, "parent", 8);
pub const I_SIZE: Field = Field::after(I_PARENT, "size", 8);
pub const I_ATIME: Field = Field::after(I_SIZE, "atime_ns", 8);
pub const I_MTIME: Field = Field::after(I_ATIME, "mtime_ns", 8);
pub const I_CTIME: Field = Field::after(I_MTIME, "ctime_ns", 8);
pub const I_BTIME: Field = Field::after(I_CTIME, "btime_ns", 8);
pub const I_BLOCKS: Field = Field::after(I_BTIME, "blocks", 8);
pub const INODE_BYTES: usize = 80;
pub const INODE_LAYOUT: StructLayout = StructLayout {
    name: "Inode value",
    size: INODE_BYTES,
    fields: &[
        I_KIND, I_PAD, I_PERM, I_UID, I_GID, I_NLINK, I_RDEV, I_PARENT, I_SIZE, I_ATIME, I_MTIME,
        I_CTIME, I_BTIME, I_BLOCKS,
    ],
};

impl Inode {
    /// A new inode of `kind`: one link (two for a directory, whose `parent` is kept),
    /// empty, every time `now_ns`.
    pub fn new(kind: Kind, perm: u32, uid: u32, gid: u32, parent: InodeNo, now_ns: i64) -> Inode {
        let dir = kind == Kind::Dir;
        Inode {
            kind,
            perm,
            uid,
            gid,
            nlink: if dir { 2 } else { 1 },
            parent: if dir { parent.0 } else { 0 },
            size: 0,
            atime_ns: now_ns,
            mtime_ns: now_ns,
            ctime_ns: now_ns,
            btime_ns: now_ns,
            blocks: 0,
            rdev: 0,
        }
    }

    pub fn encode(&self) -> [u8; INODE_BYTES] {
        let mut v = [0u8; INODE_BYTES];
        I_KIND.put_u8(&mut v, self.kind as u8);
        I_PERM.put_u32(&mut v, self.perm);
        I_UID.put_u32(&mut v, self.uid);
        I_GID.put_u32(&mut v, self.gid);
        I_NLINK.put_u32(&mut v, self.nlink);
        I_RDEV.put_u32(&mut v, self.rdev);
        I_PARENT.put_u64(&mut v, self.parent);
        I_SIZE.put_u64(&mut v, self.size);
        I_ATIME.put_u64(&mut v, self.atime_ns as u64);
        I_MTIME.put_u64(&mut v, self.mtime_ns as u64);
        I_CTIME.put_u64(&mut v, self.ctime_ns as u64);
        I_BTIME.put_u64(&mut v, self.btime_ns as u64);
        I_BLOCKS.put_u64(&mut v, self.blocks);
        v
    }

    pub fn decode(ino: InodeNo, v: &[u8]) -> Result<Inode, VfsError> {
        if v.len() != INODE_BYTES {
            return Err(VfsError::corrupt(
                format!("inode {ino}"),
                "length",
                INODE_BYTES,
                v.len(),
            ));
        }
        let kind = Kind::from_u8(I_KIND.get_u8(v)).ok_or_else(|| {
            VfsError::corrupt(format!("inode {ino}"), "kind", "1 to 7", I_KIND.get_u8(v))
        })?;
        Ok(Inode {
            kind,
            perm: I_PERM.get_u32(v),
            uid: I_UID.get_u32(v),
            gid: I_GID.get_u32(v),
            nlink: I_NLINK.get_u32(v),
            parent: I_PARENT.get_u64(v),
            size: I_SIZE.get_u64(v),
            atime_ns: I_ATIME.get_u64(v) as i64,
            mtime_ns: I_MTIME.get_u64(v) as i64,
            ctime_ns: I_CTIME.get_u64(v) as i64,
            btime_ns: I_BTIME.get_u64(v) as i64,
            blocks: I_BLOCKS.get_u64(v),
            rdev: I_RDEV.get_u32(v),
        })
    }

    /// `st_mode`: kind and permission bits.
    pub fn mode(&self) -> u32 {
        self.kind.mode_bits() | self.perm
    }
}

/// A directory entry's value: the inode it names and its kind (for readdir's `d_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dentry {
    pub ino: InodeNo,
    pub kind: Kind,
}

pub const E_INO: Field = Field::at("ino", 0, 8);
pub const E_KIND: Field = Field::after(E_INO, "kind", 1);
pub const DENTRY_BYTES: usize = 9;
pub const DENTRY_LAYOUT: StructLayout = StructLayout {
    name: "Directory entry value",
    size: DENTRY_BYTES,
    fields: &[E_INO, E_KIND],
};

impl Dentry {
    pub fn encode(&self) -> [u8; DENTRY_BYTES] {
        let mut v = [0u8; DENTRY_BYTES];
        E_INO.put_u64(&mut v, self.ino.0);
        E_KIND.put_u8(&mut v, self.kind as u8);
        v
    }

    pub fn decode(v: &[u8]) -> Result<Dentry, VfsError> {
        if v.len() != DENTRY_BYTES {
            return Err(VfsError::corrupt(
                "directory entry",
                "length",
                DENTRY_BYTES,
                v.len(),
            ));
        }
        let kind = Kind::from_u8(E_KIND.get_u8(v)).ok_or_else(|| {
            VfsError::corrupt("directory entry", "kind", "1 to 7", E_KIND.get_u8(v))
        })?;
        Ok(Dentry {
            ino: InodeNo(E_INO.get_u64(v)),
            kind,
        })
    }
}

/// The structures of this module whose tables appear in docs/FORMAT.md §6.4.
pub fn layouts() -> Vec<StructLayout> {
    vec![INODE_LAYOUT, DENTRY_LAYOUT]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_bad_bytes() {
        let i = Inode {
            kind: Kind::Dir,
            perm: 0o755,
            uid: 1000,
            gid: 100,
            nlink: 2,
            parent: 1,
            size: 0,
            atime_ns: -5,
            mtime_ns: 7,
            ctime_ns: 8,
            btime_ns: 9,
            blocks: 12,
            rdev: 0,
        };
        assert_eq!(Inode::decode(InodeNo(3), &i.encode()).unwrap(), i);
        assert_eq!(i.mode(), libc::S_IFDIR | 0o755);
        assert!(Inode::decode(InodeNo(3), &[0u8; 10]).is_err());
        let mut bad = i.encode();
        bad[0] = 9;
        assert!(Inode::decode(InodeNo(3), &bad).is_err());
        let d = Dentry {
            ino: InodeNo(42),
            kind: Kind::Symlink,
        };
        assert_eq!(Dentry::decode(&d.encode()).unwrap(), d);
        assert!(dentry_key(ROOT, b"a") < dentry_key(ROOT, b"b"));
        assert!(dentry_key(ROOT, b"zz").starts_with(&dentry_prefix(ROOT)));
        for l in layouts() {
            l.check_contiguous().unwrap();
        }
    }

    #[test]
    fn special_kinds_round_trip_with_their_rdev() {
        for kind in Kind::ALL {
            assert_eq!(Kind::from_u8(kind as u8), Some(kind));
            assert_eq!(Kind::from_mode(kind.mode_bits() | 0o644), Some(kind));
            let mut i = Inode::new(kind, 0o640, 1, 2, ROOT, 5);
            if kind.is_device() {
                i.rdev = rdev_of(libc::makedev(8, 0x12345)).unwrap();
            }
            assert_eq!(Inode::decode(InodeNo(9), &i.encode()).unwrap(), i);
            let d = Dentry {
                ino: InodeNo(9),
                kind,
            };
            assert_eq!(Dentry::decode(&d.encode()).unwrap(), d);
        }
        assert_eq!(Kind::from_u8(0), None);
        assert_eq!(Kind::from_u8(8), None);
        assert_eq!(Kind::from_mode(0), None);
        assert_eq!(Kind::Fifo.dirent_type(), libc::DT_FIFO);
        assert_eq!(Kind::Socket.dirent_type(), libc::DT_SOCK);
        assert_eq!(Kind::CharDev.dirent_type(), libc::DT_CHR);
        assert_eq!(Kind::BlockDev.dirent_type(), libc::DT_BLK);
        assert_eq!(Kind::File.dirent_type(), libc::DT_REG);
        // The encoding is the kernel's: /dev/null is 0x103, sda 0x800, and a minor
        // above 255 spreads into bits 20-31.
        assert_eq!(rdev_of(libc::makedev(1, 3)), Some(0x103));
        assert_eq!(rdev_of(libc::makedev(8, 0)), Some(0x800));
        assert_eq!(rdev_of(libc::makedev(0xfff, 0xf_ffff)), Some(0xffff_ffff));
        assert_eq!(rdev_of(libc::makedev(0x1000, 0)), None);
        assert_eq!(rdev_of(libc::makedev(0, 0x10_0000)), None);
        for dev in [0, libc::makedev(1, 3), libc::makedev(259, 70_000)] {
            assert_eq!(dev_of(rdev_of(dev).unwrap()), dev);
        }
    }

    #[test]
    fn records_of_older_images_read_with_no_device() {
        // Before special files, bytes 20-23 were `reserved` and always written 0.
        let old = Inode::new(Kind::File, 0o644, 1, 1, ROOT, 1).encode();
        assert_eq!(&old[20..24], &[0; 4]);
        assert_eq!(Inode::decode(InodeNo(2), &old).unwrap().rdev, 0);
    }
}
