//! Checks at quiescent points (no actor running, no file open): the whole tree against
//! the merged models of all actors, and the engine's block accounting.
//!
//! Invariants checked:
//! - readdir of every directory returns exactly the model's names with their kinds;
//! - every node's `stat` (kind, link count, permissions, owner, size, st_blocks, times
//!   set by utimens) equals the model's, directories' link counts included;
//! - with `data`: every file's contents, every symlink's target and every inode's
//!   extended attributes equal the model's;
//! - the engine's live blocks are exactly the blocks the files map.

use crate::actor::{check_meta, private_dir, SHARED};
use crate::model::{join, Model, Node};
use std::collections::{BTreeMap, BTreeSet};
use vfs::{FileSystem, Kind};

/// Every path in the file system below `dir`, with its kind.
fn walk(fs: &FileSystem, dir: &str, out: &mut BTreeMap<String, Kind>) {
    for e in fs.read_dir(dir).unwrap() {
        let path = join(dir, &String::from_utf8(e.name).expect("UTF-8 names"));
        if e.kind == Kind::Dir {
            walk(fs, &path, out);
        }
        out.insert(path, e.kind);
    }
}

pub fn check_tree(fs: &FileSystem, models: &[&Model], data: bool) -> Result<(), String> {
    let mut got = BTreeMap::new();
    walk(fs, "/", &mut got);
    let mut want: BTreeMap<String, Kind> = BTreeMap::new();
    want.insert(SHARED.into(), Kind::Dir);
    for (i, m) in models.iter().enumerate() {
        want.insert(private_dir(i), Kind::Dir);
        want.extend(m.tree.iter().map(|(p, n)| (p.clone(), n.kind())));
    }
    if got != want {
        let extra: Vec<_> = got
            .iter()
            .filter(|(p, k)| want.get(*p) != Some(k))
            .collect();
        let missing: Vec<_> = want
            .iter()
            .filter(|(p, k)| got.get(*p) != Some(k))
            .collect();
        return Err(format!(
            "tree differs: unexpected {extra:?}, missing {missing:?}"
        ));
    }
    // Fixed directories: the root holds the shared and the private ones.
    let shared_subdirs: u32 = models
        .iter()
        .map(|m| {
            m.children(SHARED)
                .iter()
                .filter(|(_, n)| matches!(n, Node::Dir(_)))
                .count() as u32
        })
        .sum();
    let mut fixed = vec![
        ("/".to_string(), 3 + models.len() as u32),
        (SHARED.to_string(), 2 + shared_subdirs),
    ];
    for (i, m) in models.iter().enumerate() {
        let dir = private_dir(i);
        let nlink = 2 + m
            .children(&dir)
            .iter()
            .filter(|(_, n)| matches!(n, Node::Dir(_)))
            .count() as u32;
        fixed.push((dir, nlink));
    }
    for (dir, nlink) in fixed {
        let got = fs.metadata(&dir).map_err(|e| format!("{dir}: {e}"))?.nlink;
        if got != nlink {
            return Err(format!("{dir}: nlink {got}, want {nlink}"));
        }
    }
    let mut mapped = 0u64;
    // Blocks of dirty pages the engine does not map yet (the page cache's write-back).
    let mut unwritten = 0u64;
    let mut seen = BTreeSet::new();
    for m in models {
        for (path, &node) in &m.tree {
            let meta = fs
                .symlink_metadata(path)
                .map_err(|e| format!("{path}: {e}"))?;
            check_meta(m, node, m.nlink(path, node), &meta).map_err(|e| format!("{path}: {e}"))?;
            let obj = m.object(node);
            if seen.insert(node.id()) {
                mapped += obj.mapped.len() as u64;
                if matches!(node, Node::File(_)) {
                    unwritten += unwritten_blocks(fs, path)?;
                }
            }
            if !data {
                continue;
            }
            match node {
                Node::File(_) => {
                    let mut buf = vec![0u8; obj.data.len() + 1];
                    let ino = fs.resolve(path, false).unwrap();
                    let n = fs
                        .read_at(ino, 0, &mut buf)
                        .map_err(|e| format!("{path}: {e}"))?;
                    if buf[..n] != obj.data[..] {
                        return Err(format!("{path}: contents differ ({n} bytes read)"));
                    }
                }
                Node::Symlink(_) => {
                    let t = fs.read_link(path).map_err(|e| format!("{path}: {e}"))?;
                    if t != obj.target.as_bytes() {
                        return Err(format!("{path}: target {t:?}"));
                    }
                    continue;
                }
                Node::Dir(_) | Node::Special(..) => {}
            }
            let names = fs.list_xattr(path).map_err(|e| format!("{path}: {e}"))?;
            let names: BTreeSet<Vec<u8>> = names.into_iter().collect();
            if names.iter().ne(obj.xattrs.keys()) {
                return Err(format!("{path}: xattrs {names:?}"));
            }
            for (name, value) in &obj.xattrs {
                let got = fs
                    .get_xattr(path, name)
                    .map_err(|e| format!("{path}: {e}"))?;
                if got != *value {
                    return Err(format!("{path}: xattr {name:?} differs"));
                }
            }
        }
    }
    // Files unlinked last may still hold blocks the reaper frees.
    fs.wait_for_frees();
    let live: u64 = fs.engine().valid_blocks().iter().sum();
    if live + unwritten != mapped {
        return Err(format!(
            "the engine counts {live} live blocks and the page cache {unwritten} unwritten \
             ones, the files map {mapped}"
        ));
    }
    Ok(())
}

/// Dirty pages of the file at `path` over blocks the engine does not map.
fn unwritten_blocks(fs: &FileSystem, path: &str) -> Result<u64, String> {
    let ino = fs
        .resolve(path, false)
        .map_err(|e| format!("{path}: {e}"))?;
    let mut n = 0;
    for b in fs.dirty_blocks(ino).map_err(|e| format!("{path}: {e}"))? {
        let at = engine::log::keys::FileBlock(b);
        if fs
            .engine()
            .next_mapped(ino, at)
            .map_err(|e| e.to_string())?
            != Some(at)
        {
            n += 1;
        }
    }
    Ok(n)
}
