//! The actor's operations on file data: writes, reads, truncates, fallocate, SEEK_DATA
//! and SEEK_HOLE through fresh handles, and the open handles an actor keeps (also of
//! files whose names are gone, and O_TMPFILE files) with the operations on them.

use super::{check_meta, errno, Actor, Held, HELD_MAX};
use crate::model::{parent, Id, Node, Object, BLOCK};
use std::sync::Arc;
use vfs::{Fallocate, File, FileSystem, OpenOptions};

impl Actor {
    pub(super) fn pwrite(&mut self, fs: &Arc<FileSystem>, path: &str, node: Option<Node>) {
        let offset = self.rng.below(3 * BLOCK + 100);
        // Now and then more than the VFS's 1 MiB write unit (applied in pieces).
        let len_max = if self.rng.chance(1, 200) {
            1_300_000
        } else {
            9000
        };
        let len = 1 + self.rng.below(len_max) as usize;
        let bytes = self.random_bytes(len);
        let r = OpenOptions::new()
            .write(true)
            .open(fs, path)
            .and_then(|f| f.write_at(&bytes, offset));
        if let Err(e) = &r {
            assert!(e.errno() != libc::ENOSPC, "{}: {e}", self.at());
        }
        match Self::not_a_file(node, libc::EISDIR) {
            Some(e) => assert_eq!(errno(r).err(), Some(e), "{}: write {path}", self.at()),
            None => {
                assert_eq!(errno(r), Ok(len), "{}: write {path}", self.at());
                self.model.object_mut(node.unwrap()).write(offset, &bytes);
            }
        }
    }

    /// Reads `len` bytes at `offset` of `file` and compares them with object `id`.
    fn check_read(&mut self, file: &File, id: Id, what: &str) {
        let offset = self.rng.below(5 * BLOCK);
        let mut buf = vec![0u8; 1 + self.rng.below(10_000) as usize];
        let n = file
            .read_at(&mut buf, offset)
            .unwrap_or_else(|e| panic!("{}: read {what}: {e}", self.at()));
        let data = &self.model.objects[&id].data;
        let want = data.len().saturating_sub(offset as usize).min(buf.len());
        assert_eq!(n, want, "{}: read {what} at {offset}: length", self.at());
        assert!(
            n == 0 || buf[..n] == data[offset as usize..offset as usize + n],
            "{}: read {what}: {n} bytes at {offset} differ",
            self.at()
        );
    }

    pub(super) fn read(&mut self, fs: &Arc<FileSystem>, path: &str, node: Option<Node>) {
        let r = errno(OpenOptions::new().read(true).open(fs, path));
        match node {
            Some(Node::File(id)) => {
                let f = r.unwrap_or_else(|e| panic!("{}: open {path}: errno {e}", self.at()));
                self.check_read(&f, id, path);
            }
            Some(Node::Dir(_)) => {
                let f = r.unwrap_or_else(|e| panic!("{}: open dir {path}: {e}", self.at()));
                let got = errno(f.read_at(&mut [0; 8], 0));
                assert_eq!(
                    got.err(),
                    Some(libc::EISDIR),
                    "{}: read dir {path}",
                    self.at()
                );
            }
            Some(Node::Special(..)) => {
                assert_eq!(r.err(), Some(libc::ENXIO), "{}: open {path}", self.at());
            }
            _ => assert_eq!(r.err(), Some(libc::ENOENT), "{}: open {path}", self.at()),
        }
    }

    pub(super) fn truncate(&mut self, fs: &Arc<FileSystem>, path: &str, node: Option<Node>) {
        let size = self.rng.below(4 * BLOCK + 50);
        let r = errno(OpenOptions::new().write(true).open(fs, path))
            .and_then(|f| errno(f.set_len(size)));
        match Self::not_a_file(node, libc::EISDIR) {
            Some(e) => assert_eq!(r.err(), Some(e), "{}: truncate {path}", self.at()),
            None => {
                assert_eq!(r, Ok(()), "{}: truncate {path} to {size}", self.at());
                self.model.object_mut(node.unwrap()).set_size(size);
            }
        }
    }

    /// A random fallocate on `file`, applied to object `id` of the model.
    fn fallocate_on(&mut self, file: &File, id: Id, what: &str) {
        let op = self.pick(&[
            Fallocate::Allocate { keep_size: false },
            Fallocate::Allocate { keep_size: true },
            Fallocate::PunchHole,
            Fallocate::ZeroRange { keep_size: false },
            Fallocate::ZeroRange { keep_size: true },
        ]);
        let offset = self.rng.below(5 * BLOCK);
        let len = 1 + self.rng.below(3 * BLOCK);
        let end = offset + len;
        let r = file.fallocate(op, offset, len);
        assert!(
            r.is_ok(),
            "{}: {op:?} {what} {offset}+{len}: {r:?}",
            self.at()
        );
        let obj = self.model.objects.get_mut(&id).expect("object");
        let grows = end > obj.data.len() as u64;
        match op {
            Fallocate::Allocate { keep_size } => {
                if !keep_size && grows {
                    obj.set_size(end);
                }
            }
            Fallocate::PunchHole => obj.zero(offset, end),
            Fallocate::ZeroRange { keep_size } => {
                obj.zero(offset, end);
                if !keep_size && grows {
                    obj.set_size(end);
                }
            }
        }
    }

    pub(super) fn fallocate(&mut self, fs: &Arc<FileSystem>, path: &str, node: Option<Node>) {
        let r = errno(OpenOptions::new().write(true).open(fs, path));
        match Self::not_a_file(node, libc::EISDIR) {
            Some(e) => assert_eq!(r.err(), Some(e), "{}: open {path}", self.at()),
            None => {
                let f = r.unwrap();
                self.fallocate_on(&f, node.unwrap().id(), path);
            }
        }
    }

    /// SEEK_DATA or SEEK_HOLE at a random offset of `file`, against object `id`.
    fn seek_on(&mut self, file: &mut File, id: Id, what: &str) {
        let offset = self.rng.below(6 * BLOCK);
        let data = self.rng.chance(1, 2);
        let obj = &self.model.objects[&id];
        let (got, want) = if data {
            (errno(file.seek_data(offset)), obj.seek_data(offset))
        } else {
            (errno(file.seek_hole(offset)), obj.seek_hole(offset))
        };
        assert_eq!(
            got,
            want,
            "{}: seek {} {what} at {offset} (size {}, mapped {:?})",
            self.at(),
            if data { "data" } else { "hole" },
            obj.data.len(),
            obj.mapped
        );
    }

    pub(super) fn seek(&mut self, fs: &Arc<FileSystem>, path: &str, node: Option<Node>) {
        let r = errno(OpenOptions::new().read(true).open(fs, path));
        match node {
            Some(Node::File(id)) => self.seek_on(&mut r.unwrap(), id, path),
            Some(Node::Dir(_)) => assert!(r.is_ok()),
            Some(Node::Special(..)) => {
                assert_eq!(r.err(), Some(libc::ENXIO), "{}: open {path}", self.at());
            }
            _ => assert_eq!(r.err(), Some(libc::ENOENT), "{}: open {path}", self.at()),
        }
    }

    /// Opens a file and keeps it, or works on (or closes) a kept one.
    pub(super) fn hold(&mut self, fs: &Arc<FileSystem>, path: &str, node: Option<Node>) {
        if self.held.len() >= HELD_MAX || (!self.held.is_empty() && self.rng.chance(1, 3)) {
            let i = self.rng.below(self.held.len() as u64) as usize;
            self.held.swap_remove(i);
            return;
        }
        if self.rng.chance(1, 4) {
            // O_TMPFILE in the path's directory: no name until a `link` of the handle.
            let dir = parent(path);
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .open_tmpfile(fs, dir)
                .unwrap_or_else(|e| panic!("{}: O_TMPFILE in {dir}: {e}", self.at()));
            let id = self.model.add_nameless(Object::new(0o644));
            let (read, write, append) = (true, true, false);
            self.held.push(Held {
                file,
                id,
                read,
                write,
                append,
            });
            return;
        }
        let Some(Node::File(id)) = node else { return };
        let read = self.rng.chance(1, 2);
        let append = self.rng.chance(1, 4);
        let write = !read || self.rng.chance(1, 2);
        let file = OpenOptions::new()
            .read(read)
            .write(write)
            .append(append)
            .open(fs, path)
            .unwrap_or_else(|e| panic!("{}: open {path}: {e}", self.at()));
        self.held.push(Held {
            file,
            id,
            read,
            write: write || append,
            append,
        });
    }

    /// An operation on a kept open file (whose names may be gone).
    pub(super) fn held_op(&mut self) {
        if self.held.is_empty() {
            return;
        }
        let i = self.rng.below(self.held.len() as u64) as usize;
        let mut h = self.held.swap_remove(i);
        let what = format!("held file {:#x}", h.id);
        match self.rng.below(8) {
            7 => {
                // linkat of the open file: also names a nameless one (O_TMPFILE, or
                // unlinked while open).
                let to = self.random_path();
                let r = errno(h.file.link(&to));
                let want = if self.model.tree.contains_key(&to) {
                    Err(libc::EEXIST)
                } else {
                    Ok(())
                };
                assert_eq!(r, want, "{}: link {what} -> {to}", self.at());
                if r.is_ok() {
                    self.model.tree.insert(to, Node::File(h.id));
                }
            }
            0 | 1 => {
                let offset = self.rng.below(3 * BLOCK + 100);
                let len = 1 + self.rng.below(6000) as usize;
                let bytes = self.random_bytes(len);
                let r = errno(h.file.write_at(&bytes, offset));
                if h.write {
                    assert_eq!(r, Ok(bytes.len()), "{}: write {what}", self.at());
                    let obj = self.model.objects.get_mut(&h.id).expect("held object");
                    let at = if h.append {
                        obj.data.len() as u64
                    } else {
                        offset
                    };
                    obj.write(at, &bytes);
                } else {
                    assert_eq!(r.err(), Some(libc::EBADF), "{}: write {what}", self.at());
                }
            }
            2 => {
                if h.read {
                    self.check_read(&h.file, h.id, &what);
                } else {
                    let r = errno(h.file.read_at(&mut [0; 4], 0));
                    assert_eq!(r.err(), Some(libc::EBADF), "{}: read {what}", self.at());
                }
            }
            3 if h.write => {
                let size = self.rng.below(4 * BLOCK + 50);
                assert_eq!(errno(h.file.set_len(size)), Ok(()), "{}: {what}", self.at());
                self.model.objects.get_mut(&h.id).unwrap().set_size(size);
            }
            4 if h.write => self.fallocate_on(&h.file, h.id, &what),
            5 => self.seek_on(&mut h.file, h.id, &what),
            _ => {
                let meta = h.file.metadata().unwrap();
                let nlink = self.model.tree.values().filter(|n| n.id() == h.id).count() as u32;
                if let Err(e) = check_meta(&self.model, Node::File(h.id), nlink, &meta) {
                    panic!("{}: fstat {what}: {e}", self.at());
                }
                if self.rng.chance(1, 2) {
                    h.file.sync_data().unwrap();
                } else {
                    h.file.sync_all().unwrap();
                }
            }
        }
        self.held.push(h);
    }
}
