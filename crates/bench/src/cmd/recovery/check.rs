//! What `augefs bench recovery` checks after the crash and the mount: every file the
//! child acknowledged is there with its bytes, and every byte that survived, acknowledged
//! or not, is the workload's (`workload::fill`). A failed check is an error of the run,
//! not a sample.
//!
//! Invariants:
//! - The whole tree is walked, so files the child created but never acknowledged are
//!   checked too (their size may be anything up to what was written, their bytes not).
//! - An acknowledged small file has exactly its length; an acknowledged log at least
//!   the length of its last acknowledgement.

use super::workload::{self, FileId};
use crate::augefs;
use std::collections::BTreeMap;
use std::sync::Arc;
use vfs::{FileSystem, Kind, OpenOptions};

/// Bytes read and compared per call.
const CHECK_CHUNK_BYTES: usize = 1 << 20;

/// What the walk found.
#[derive(Debug, Default, Clone, Copy)]
pub struct Checked {
    pub files: u64,
    pub bytes: u64,
    /// Files found that no acknowledgement named, and bytes past the acknowledged ones.
    pub unacknowledged_files: u64,
    pub unacknowledged_bytes: u64,
}

/// Checks the mounted file system against `acknowledged` (file -> bytes).
pub fn check(
    fs: &Arc<FileSystem>,
    acknowledged: &BTreeMap<FileId, u64>,
) -> Result<Checked, String> {
    let mut found = BTreeMap::new();
    walk(fs, &mut found)?;
    let mut checked = Checked::default();
    for (file, acked) in acknowledged {
        if !found.contains_key(file) {
            return Err(format!(
                "{} was acknowledged with {acked} bytes but is missing after recovery",
                file.path()
            ));
        }
    }
    let mut buf = vec![0u8; CHECK_CHUNK_BYTES];
    let mut want = vec![0u8; CHECK_CHUNK_BYTES];
    for (file, size) in found {
        let acked = acknowledged.get(&file).copied();
        let short = match (file, acked) {
            (FileId::Small { .. }, Some(len)) => size != len,
            (FileId::Log { .. }, Some(len)) => size < len,
            (_, None) => false,
        };
        if short {
            return Err(format!(
                "{} was acknowledged with {} bytes but has {size} after recovery",
                file.path(),
                acked.unwrap_or_default()
            ));
        }
        compare(fs, file, size, &mut buf, &mut want)?;
        checked.files += 1;
        checked.bytes += size;
        match acked {
            None => {
                checked.unacknowledged_files += 1;
                checked.unacknowledged_bytes += size;
            }
            Some(len) => checked.unacknowledged_bytes += size - len,
        }
    }
    Ok(checked)
}

/// Every regular file of the workload's tree with its size; anything else is an error.
fn walk(fs: &FileSystem, found: &mut BTreeMap<FileId, u64>) -> Result<(), String> {
    let mut dirs = vec!["/".to_string()];
    while let Some(dir) = dirs.pop() {
        let entries = fs.read_dir(&dir).map_err(|e| augefs::err(&dir, e))?;
        for entry in entries {
            let name = String::from_utf8_lossy(&entry.name).into_owned();
            if name == "." || name == ".." {
                continue;
            }
            let path = format!("{}/{name}", dir.trim_end_matches('/'));
            match entry.kind {
                Kind::Dir => dirs.push(path),
                Kind::File => {
                    let file = parse_path(&path)
                        .ok_or_else(|| format!("{path} is no file of the workload"))?;
                    let size = fs.metadata(&path).map_err(|e| augefs::err(&path, e))?.size;
                    found.insert(file, size);
                }
                other => {
                    return Err(format!(
                        "{path} is a {other:?}, which the workload never makes"
                    ))
                }
            }
        }
    }
    Ok(())
}

/// The workload file at `path` (`/tT/logK` or `/tT/dD/fN` with D = N / FILES_PER_DIR).
fn parse_path(path: &str) -> Option<FileId> {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let thread: u32 = parts.first()?.strip_prefix('t')?.parse().ok()?;
    let file = match parts[1..] {
        [log] => FileId::Log {
            thread,
            k: log.strip_prefix("log")?.parse().ok()?,
        },
        [_, small] => FileId::Small {
            thread,
            n: small.strip_prefix('f')?.parse().ok()?,
        },
        _ => return None,
    };
    (file.path() == path).then_some(file)
}

fn compare(
    fs: &Arc<FileSystem>,
    file: FileId,
    size: u64,
    buf: &mut [u8],
    want: &mut [u8],
) -> Result<(), String> {
    let path = file.path();
    let f = OpenOptions::new()
        .read(true)
        .open(fs, &path)
        .map_err(|e| augefs::err(&path, e))?;
    let mut at = 0;
    while at < size {
        let len = (size - at).min(buf.len() as u64) as usize;
        let got = f
            .read_at(&mut buf[..len], at)
            .map_err(|e| augefs::err(&path, e))?;
        if got != len {
            return Err(format!(
                "{path}: read {got} of {len} bytes at {at} (size {size})"
            ));
        }
        workload::fill(file, at, &mut want[..len]);
        if buf[..len] == want[..len] {
            at += len as u64;
            continue;
        }
        if let Some(i) = (0..len).find(|&i| buf[i] != want[i]) {
            return Err(format!(
                "{path}: byte {} is {:#04x} after recovery, the workload wrote {:#04x}",
                at + i as u64,
                buf[i],
                want[i]
            ));
        }
        at += len as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workload_paths_parse_back_and_others_do_not() {
        for file in [
            FileId::Small { thread: 0, n: 0 },
            FileId::Small {
                thread: 4,
                n: 12_345,
            },
            FileId::Log { thread: 1, k: 7 },
        ] {
            assert_eq!(parse_path(&file.path()), Some(file));
        }
        for bad in ["/t0/d1/f5", "/t0/x", "/x/log1", "/t1/log", "/t0/d0/f1/g"] {
            assert_eq!(parse_path(bad), None, "{bad}");
        }
    }
}
