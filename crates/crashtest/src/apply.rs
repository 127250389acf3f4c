//! Running one step of a workload on a mounted file system, with its descriptors; and
//! what a step promises (docs/SEMANTICS.md §2), read before it runs.
//!
//! Invariants:
//! - Paths resolve as root, following symbolic links, at the moment the step runs;
//!   a descriptor keeps reaching its file after the name is gone.
//! - [`Runner::written_back`] is the contract's list of which files' dirty data an
//!   operation writes back before its own change (docs/SEMANTICS.md §2), not what the
//!   code happens to do: the one-domain check holds the code to it.

use crate::snapshot::Snapshot;
use crate::workload::{Op, Step, Target, WriteMode};
use format::InodeNo;
use std::collections::{BTreeMap, BTreeSet};
use vfs::{AttrChanges, Creds, Fallocate, FileSystem, Kind, OpenInode, VfsError, XattrMode};

/// What a successful persistence point made durable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// sync: everything.
    All,
    /// fsync or fdatasync of a file (also an O_SYNC or O_DSYNC write): its contents and
    /// attributes, and these entries (the names it was created, linked or renamed under
    /// since its previous fsync).
    File {
        ino: u64,
        entries: Vec<(u64, Vec<u8>)>,
    },
    /// fsync of a directory: its entries and its own attributes (not its files' data).
    Dir { ino: u64 },
}

/// Whose dirty data a step wrote back before its own change (when it succeeded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WrittenBack {
    Files(BTreeSet<u64>),
    /// sync (and unmount): every file.
    All,
}

impl WrittenBack {
    pub fn covers(&self, ino: u64) -> bool {
        match self {
            WrittenBack::Files(files) => files.contains(&ino),
            WrittenBack::All => true,
        }
    }
}

/// A mounted file system and the workload's open descriptors.
pub(crate) struct Runner<'a> {
    fs: &'a FileSystem,
    fds: BTreeMap<String, OpenInode>,
    /// Files written since their last write-back (by the contract's list): their pages
    /// are dirty, so a chmod of one rides with its next write-back.
    dirty: BTreeSet<u64>,
}

impl<'a> Runner<'a> {
    pub fn new(fs: &'a FileSystem) -> Runner<'a> {
        Runner {
            fs,
            fds: BTreeMap::new(),
            dirty: BTreeSet::new(),
        }
    }

    /// Notes what a step that succeeded left dirty: the file a buffered write wrote,
    /// none of those it wrote back.
    pub fn note_dirty(&mut self, op: &Op, written_back: &WrittenBack) {
        match written_back {
            WrittenBack::All => self.dirty.clear(),
            WrittenBack::Files(files) => self.dirty.retain(|ino| !files.contains(ino)),
        }
        if let Op::Write(t, .., WriteMode::Buffered | WriteMode::Direct)
        | Op::Append(t, _, WriteMode::Buffered | WriteMode::Direct) = op
        {
            if let Ok(ino) = self.ino(t) {
                self.dirty.insert(ino.0);
            }
        }
    }

    /// Closes every descriptor still open (in name order).
    pub fn close_all(&mut self) -> Result<(), VfsError> {
        for (_, open) in std::mem::take(&mut self.fds) {
            self.fs.close_ino(open)?;
        }
        Ok(())
    }

    fn ino(&self, target: &Target) -> Result<InodeNo, VfsError> {
        match target {
            Target::Path(p) => self.fs.resolve(p, true),
            // A descriptor whose `open` failed: EBADF, as for a closed descriptor.
            Target::Fd(name) => self
                .fds
                .get(name)
                .map(OpenInode::ino)
                .ok_or_else(|| VfsError::BadAccess(format!("descriptor {name} is not open"))),
        }
    }

    /// The regular file `target` names (EISDIR for a directory).
    fn file(&self, target: &Target) -> Result<InodeNo, VfsError> {
        let ino = self.ino(target)?;
        match self.fs.stat_ino(ino)?.kind {
            Kind::File => Ok(ino),
            Kind::Dir => Err(VfsError::IsDir(target.to_string())),
            // A dangling symbolic link or a special file (truncate(2) answers EINVAL).
            _ => Err(VfsError::Invalid(target.to_string())),
        }
    }

    /// Runs one step (`index` counts setup and recorded steps together, for the pattern).
    pub fn apply(&mut self, step: &Step, index: usize) -> Result<(), VfsError> {
        let fs = self.fs;
        let root = Creds::root();
        let create = |p: &str, kind: Kind, mode: u32| {
            let (parent, name) = fs.resolve_parent(p)?;
            fs.create(&root, parent, name, kind, mode, None).map(drop)
        };
        match &step.op {
            Op::Create(p, mode) => create(p, Kind::File, *mode),
            Op::Mknod(p, kind, mode, dev) => {
                let (parent, name) = fs.resolve_parent(p)?;
                fs.mknod(&root, parent, name, kind.kind(), *mode, *dev)
                    .map(drop)
            }
            Op::Mkdir(p, mode) => create(p, Kind::Dir, *mode),
            Op::Write(t, off, len, mode) => {
                let ino = self.file(t)?;
                fs.write_at(ino, *off, &pattern(index, *off, *len))?;
                self.after_write(ino, *mode)
            }
            Op::Append(t, len, mode) => {
                let ino = self.file(t)?;
                let off = fs.stat_ino(ino)?.size;
                fs.write_at(ino, off, &pattern(index, off, *len))?;
                self.after_write(ino, *mode)
            }
            Op::Truncate(t, size) => fs.truncate(self.file(t)?, *size),
            Op::Punch(t, off, len) => fs.fallocate(self.file(t)?, Fallocate::PunchHole, *off, *len),
            Op::Falloc(t, off, len, keep) => fs.fallocate(
                self.file(t)?,
                Fallocate::Allocate { keep_size: *keep },
                *off,
                *len,
            ),
            Op::Zero(t, off, len, keep) => fs.fallocate(
                self.file(t)?,
                Fallocate::ZeroRange { keep_size: *keep },
                *off,
                *len,
            ),
            Op::Unlink(p) => fs.remove_file(p),
            Op::Rmdir(p) => fs.remove_dir(p),
            Op::Rename(a, b, mode) => fs.rename_path(a, b, *mode),
            Op::Link(a, b) => fs.hard_link(a, b),
            Op::Symlink(t, p) => fs.symlink(t, p),
            Op::SetXattr(t, n, v) => fs.set_xattr_ino(
                &root,
                self.ino(t)?,
                n.as_bytes(),
                v.as_bytes(),
                XattrMode::Either,
            ),
            Op::RemoveXattr(t, n) => fs.remove_xattr_ino(&root, self.ino(t)?, n.as_bytes()),
            Op::Chmod(t, m) => fs.set_attr(
                &root,
                self.ino(t)?,
                &AttrChanges {
                    perm: Some(*m),
                    ..AttrChanges::default()
                },
            ),
            Op::Open(name, p) => {
                if self.fds.contains_key(name) {
                    return Err(VfsError::BadAccess(format!("descriptor {name} is open")));
                }
                let open = fs.open_ino(fs.resolve(p, true)?)?;
                self.fds.insert(name.clone(), open);
                Ok(())
            }
            Op::Close(name) => match self.fds.remove(name) {
                Some(open) => fs.close_ino(open),
                None => Err(VfsError::BadAccess(format!(
                    "descriptor {name} is not open"
                ))),
            },
            Op::Fsync(t) => fs.fsync_ino(self.ino(t)?, false),
            Op::Fdatasync(t) => fs.fsync_ino(self.ino(t)?, true),
            Op::Sync => fs.sync(),
        }
    }

    fn after_write(&self, ino: InodeNo, mode: WriteMode) -> Result<(), VfsError> {
        match mode {
            WriteMode::Buffered | WriteMode::Direct => Ok(()),
            WriteMode::Sync => self.fs.fsync_ino(ino, false),
            WriteMode::Dsync => self.fs.fsync_ino(ino, true),
        }
    }

    /// What `op` promises if it succeeds (None: not a persistence point, or its target
    /// names nothing now). `states`: the trees so far; `promises`: (step, scope) of the
    /// persistence points acknowledged so far.
    pub fn scope_of(
        &self,
        op: &Op,
        states: &[Snapshot],
        promises: &[(usize, &Scope)],
    ) -> Option<Scope> {
        if !op.is_persistence_point() {
            return None;
        }
        let Some(target) = op.target() else {
            return Some(Scope::All);
        };
        let ino = self.ino(target).ok()?.0;
        if self.fs.stat_ino(InodeNo(ino)).ok()?.kind == Kind::Dir {
            return Some(Scope::Dir { ino });
        }
        // The names `ino` gained since its previous fsync (or since recording began).
        let since = promises
            .iter()
            .rev()
            .find(|p| matches!(p.1, Scope::File { ino: i, .. } if *i == ino))
            .map_or(0, |p| p.0);
        let mut entries = BTreeSet::new();
        for w in states[since..].windows(2) {
            for (key, &target) in &w[1].entries {
                if target == ino && w[0].entries.get(key) != Some(&ino) {
                    entries.insert(key.clone());
                }
            }
        }
        Some(Scope::File {
            ino,
            entries: entries.into_iter().collect(),
        })
    }

    /// Whose dirty data `op` writes back before its own change if it succeeds: by
    /// docs/SEMANTICS.md §2, fsync and fdatasync of a file (and O_SYNC/O_DSYNC writes),
    /// sync, and every operation that writes a file's record: truncate, punch, zero
    /// range, an allocation that grows it, link, an unlink that leaves it links (or
    /// leaves it open), a rename of it (source, and both files of an exchange) or over
    /// it when it keeps a link or is open. A chmod or an extended-attribute change
    /// writes nothing back: it is logged at once if the file has no dirty pages (then it
    /// counts here, the file being as written back), and otherwise it rides with the
    /// file's next write-back. Not fsync of a directory, not create, mkdir, symlink,
    /// close.
    pub fn written_back(&self, op: &Op) -> WrittenBack {
        let mut files = BTreeSet::new();
        let fs = self.fs;
        let file = |ino: InodeNo| {
            fs.stat_ino(ino)
                .ok()
                .filter(|m| m.kind == Kind::File)
                .map(|m| (ino.0, m.nlink))
        };
        let at = |p: &str| fs.resolve(p, false).ok().and_then(file);
        let open = |ino: u64| self.fds.values().any(|o| o.ino().0 == ino);
        match op {
            Op::Sync => return WrittenBack::All,
            Op::Fsync(_)
            | Op::Fdatasync(_)
            | Op::Write(..)
            | Op::Append(..)
            | Op::Truncate(..)
            | Op::Punch(..)
            | Op::Zero(..) => {
                let buffered = matches!(
                    op,
                    Op::Write(.., WriteMode::Buffered | WriteMode::Direct)
                        | Op::Append(_, _, WriteMode::Buffered | WriteMode::Direct)
                );
                let target = op.target().expect("these take a target");
                if let Some((ino, _)) = self.ino(target).ok().and_then(file) {
                    if !buffered {
                        files.insert(ino);
                    }
                }
            }
            // An allocation writes the record only when it grows the file (it maps
            // nothing, docs/SEMANTICS.md §4).
            Op::Falloc(t, offset, len, false) => {
                let grows = |ino: InodeNo| {
                    fs.stat_ino(ino)
                        .is_ok_and(|m| m.kind == Kind::File && offset + len > m.size)
                };
                files.extend(self.ino(t).ok().filter(|&i| grows(i)).map(|i| i.0));
            }
            // Attribute changes of a file with dirty pages wait for its next write-back
            // and ride with it (docs/DESIGN.md §10.7); of a clean file, they are logged
            // at once, as a write-back would log them.
            Op::Chmod(t, _) | Op::SetXattr(t, ..) | Op::RemoveXattr(t, _) => {
                if let Some((ino, _)) = self.ino(t).ok().and_then(file) {
                    if !self.dirty.contains(&ino) {
                        files.insert(ino);
                    }
                }
            }
            Op::Link(a, _) => files.extend(at(a).map(|f| f.0)),
            Op::Unlink(p) => {
                files.extend(
                    at(p)
                        .filter(|&(ino, nlink)| nlink > 1 || open(ino))
                        .map(|f| f.0),
                );
            }
            Op::Rename(a, b, mode) => {
                files.extend(at(a).map(|f| f.0));
                let kept = |&(ino, nlink): &(u64, u32)| {
                    *mode == vfs::RenameMode::Exchange || nlink > 1 || open(ino)
                };
                files.extend(at(b).filter(kept).map(|f| f.0));
            }
            _ => {}
        }
        WrittenBack::Files(files)
    }
}

/// The bytes step `index` writes at `offset`: they depend on the step and on the byte's
/// offset, so a stale or misplaced block never reads as the right one.
pub fn pattern(index: usize, offset: u64, len: u64) -> Vec<u8> {
    (offset..offset + len)
        .map(|o| {
            let v =
                (o / 4096).wrapping_mul(31) ^ (o % 4096).wrapping_mul(7) ^ (index as u64 * 0x9e37);
            (v % 251) as u8 + 1
        })
        .collect()
}
