//! The mount table, as /proc/self/mountinfo gives it: `ID PARENT MAJ:MIN ROOT POINT OPTS
//! [TAGS] - TYPE SOURCE SUPEROPTS`, with spaces and other bytes of paths escaped as
//! `\NNN` (octal).
//!
//! Invariants:
//! - Reading the table never touches a mounted file system (a FUSE daemon may read it
//!   before it serves its own mount).
//! - A line that does not parse is left out, never guessed at.

use std::path::PathBuf;

/// One mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    /// The superblock's device (st_dev of files there), as `MAJ:MIN`; a FUSE mount's
    /// backing device info in /sys/class/bdi has this name.
    pub dev: String,
    /// Where it is mounted.
    pub point: PathBuf,
    /// The file-system type (`fuse`, `fuse.augefs`, `ext4`, ...).
    pub fstype: String,
    /// The source (an image's path, a device, `none`).
    pub source: String,
}

/// This process's mounts, in the table's order (a later mount on the same point hides
/// an earlier one); empty if the table cannot be read.
pub fn mounts() -> Vec<MountEntry> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .map(|t| parse(&t))
        .unwrap_or_default()
}

/// The entries of a mountinfo table.
pub fn parse(table: &str) -> Vec<MountEntry> {
    table
        .lines()
        .filter_map(|line| {
            let (head, tail) = line.split_once(" - ")?;
            let head: Vec<&str> = head.split(' ').collect();
            let mut tail = tail.split(' ');
            Some(MountEntry {
                dev: head.get(2)?.to_string(),
                point: PathBuf::from(unescape(head.get(4)?)),
                fstype: tail.next()?.to_string(),
                source: unescape(tail.next()?),
            })
        })
        .collect()
}

fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_give_device_point_type_and_source() {
        let table = "36 35 0:40 / /mnt/a\\040b rw,nosuid - fuse.augefs /img/x\\040y.img rw\n\
                     garbage\n\
                     38 35 98:0 / /mnt/d rw shared:1 - fuse /img/z rw\n";
        let got = parse(table);
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(
            got[0],
            MountEntry {
                dev: "0:40".into(),
                point: PathBuf::from("/mnt/a b"),
                fstype: "fuse.augefs".into(),
                source: "/img/x y.img".into(),
            }
        );
        assert_eq!(got[1].dev, "98:0");
        assert_eq!(got[1].point, PathBuf::from("/mnt/d"));
        assert_eq!(got[1].fstype, "fuse");
    }

    #[test]
    fn this_process_sees_its_root() {
        assert!(mounts()
            .iter()
            .any(|m| m.point == std::path::Path::new("/")));
    }
}
