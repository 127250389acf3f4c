//! Write-back of every dirty file, as sync, syncfs and unmount need it (and a writer
//! that finds the device's room short): files whose dirty pages fit one batch are
//! grouped by domain, in inode order, and each group is written with one engine call
//! (`Engine::write_many`: one reservation and one device write per run for the group,
//! a batch per file); larger files are written back alone. Several units run at once on
//! up to `WRITE_BACK_WORKERS` threads, so that their device writes overlap
//! (docs/DESIGN.md §10.7).
//!
//! Invariants:
//! - A group takes its files' write-back locks in inode order with `try_lock` and holds
//!   them across its device IO: it never waits for a write-back lock while holding one,
//!   so it is part of no cycle of waits. A file whose lock is busy is written back
//!   alone after the group has let go of its locks.
//! - A group takes a file's state lock only to snapshot it and to note its result, one
//!   file at a time, never across device IO.
//! - Each file of a group is written back as `Core::write_back` would write it: its
//!   dirty pages in one batch of its own with its record and the attribute changes
//!   riding with them, and its result noted the same way (`Core::noted`).

use super::blocks::FileBlocks;
use super::writeback::{pack, ranges_of, Snapshot, StateAccess, WRITE_CHUNK_BLOCKS};
use crate::error::VfsError;
use crate::handle::Handle;
use crate::shared::Core;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, TryLockError};

/// Most threads [`Core::write_back_all`] writes back with.
const WRITE_BACK_WORKERS: usize = 8;
/// Files with dirty pages per write-back thread (fewer: fewer threads).
const WRITE_BACK_FILES_PER_WORKER: usize = 16;
/// Most dirty blocks of one group: 2 MiB, a segment's worth, so a group is one or two
/// device writes and a sync of many small files still has groups for every thread.
const GROUP_BLOCKS_MAX: u64 = 512;

/// A unit of the write-back of every dirty file.
#[derive(Debug)]
enum Work {
    /// A file written back as by [`Core::write_back`]: one with more dirty pages than
    /// one batch holds, or the only one of its group.
    Alone(Arc<Handle>),
    /// Files of one domain whose dirty pages fit one batch each, in inode order.
    Group(Vec<Arc<Handle>>),
}

impl Core {
    /// Writes back every file's dirty pages: several units at once, so that their device
    /// writes overlap (each waits for its own; with thousands of small files, as an
    /// untar leaves, one at a time is bound by the device's latency).
    pub(crate) fn write_back_all(&self) -> Result<(), VfsError> {
        let handles = self.dirty_handles();
        let files = handles.len();
        let work = self.plan(handles);
        let workers = (files / WRITE_BACK_FILES_PER_WORKER)
            .min(WRITE_BACK_WORKERS)
            .min(work.len());
        let next = AtomicUsize::new(0);
        let run = || -> Result<(), VfsError> {
            while let Some(unit) = work.get(next.fetch_add(1, Ordering::Relaxed)) {
                match unit {
                    Work::Alone(h) => self.write_back(h)?,
                    Work::Group(files) => self.write_back_group(files)?,
                }
            }
            Ok(())
        };
        if workers <= 1 {
            return run();
        }
        std::thread::scope(|scope| {
            let others: Vec<_> = (1..workers).map(|_| scope.spawn(run)).collect();
            let mine = run();
            others
                .into_iter()
                .map(|t| t.join().expect("a write-back worker panicked"))
                .fold(mine, Result::and)
        })
    }

    /// The handles of the inodes with dirty pages (the inode table keeps them).
    pub(super) fn dirty_handles(&self) -> Vec<Arc<Handle>> {
        self.cache
            .dirty_inodes()
            .into_iter()
            .filter_map(|ino| self.inodes.get(ino))
            .collect()
    }

    /// The units writing back `handles`: the large files alone first (they take
    /// longest), then the small files' groups, each domain's in inode order, taking the
    /// domains in turn (so that threads working at once mostly meet different domains'
    /// locks).
    fn plan(&self, handles: Vec<Arc<Handle>>) -> Vec<Work> {
        let mut work = Vec::new();
        let mut small: BTreeMap<u16, Vec<(Arc<Handle>, u64)>> = BTreeMap::new();
        for h in handles {
            let dirty = h.pages().dirty_count();
            if dirty > WRITE_CHUNK_BLOCKS {
                work.push(Work::Alone(h));
            } else if dirty > 0 {
                let domain = self.engine.domain_of(h.ino).0;
                small.entry(domain).or_default().push((h, dirty));
            }
        }
        let groups = small.into_values().map(|mut files| {
            files.sort_by_key(|(h, _)| h.ino);
            pack(files, |(_, dirty)| *dirty, GROUP_BLOCKS_MAX)
        });
        for mut group in interleave(groups.collect()) {
            work.push(if group.len() == 1 {
                Work::Alone(group.pop().expect("one file").0)
            } else {
                Work::Group(group.into_iter().map(|(h, _)| h).collect())
            });
        }
        work
    }

    /// Writes back `group` (files of one domain, in inode order) with one engine call,
    /// holding the write-back locks it can take without waiting; the others afterwards,
    /// one at a time.
    fn write_back_group(&self, group: &[Arc<Handle>]) -> Result<(), VfsError> {
        debug_assert!(group.windows(2).all(|w| w[0].ino < w[1].ino));
        let mut held = Vec::with_capacity(group.len());
        let mut busy = Vec::new();
        for h in group {
            match h.writeback.try_lock() {
                Ok(guard) => held.push((h.as_ref(), guard)),
                Err(TryLockError::WouldBlock) => busy.push(h),
                Err(TryLockError::Poisoned(_)) => panic!("write-back lock poisoned"),
            }
        }
        let locked: Vec<&Handle> = held.iter().map(|(h, _)| *h).collect();
        let written = self.write_back_locked(&locked);
        drop(held);
        written?;
        for h in busy {
            self.write_back(h)?;
        }
        Ok(())
    }

    /// Writes back `files`, whose write-back locks the caller holds: each snapshot, the
    /// files whose dirty pages fit one batch with one engine call, and each result
    /// noted (also those written before a later file failed). A file that grew past one
    /// batch since it was picked is written back as by [`Core::write_back`].
    fn write_back_locked(&self, files: &[&Handle]) -> Result<(), VfsError> {
        let mut taken: Vec<(&Handle, Snapshot)> = Vec::with_capacity(files.len());
        for &h in files {
            let Some(snap) = self.snapshot(h, &StateAccess::Own(h)) else {
                continue;
            };
            if snap.batches.len() > 1 {
                self.write_snapshot(h, StateAccess::Own(h), snap, None)?;
                continue;
            }
            // Before the blocks' mappings change, as any write-back.
            self.learn_mappings(h)?;
            taken.push((h, snap));
        }
        if taken.is_empty() {
            return Ok(());
        }
        let mut parts: Vec<FileBlocks<'_>> = taken
            .iter()
            .map(|(h, snap)| {
                let runs = &snap.batches[0];
                FileBlocks {
                    ino: h.ino,
                    inode: snap.inode,
                    ranges: ranges_of(runs),
                    data: runs
                        .iter()
                        .flat_map(|(_, run)| run.iter().map(|b| &b[..]))
                        .collect(),
                    xattrs: snap.xattrs.as_ref(),
                    written: false,
                }
            })
            .collect();
        let written = self.write_files(&mut parts);
        for ((h, snap), part) in taken.iter().zip(&parts) {
            if part.written {
                let mut st = h.state_write();
                self.noted(
                    h,
                    &mut st,
                    &snap.batches[0],
                    &part.inode,
                    snap.xattrs.as_ref(),
                );
            }
        }
        written
    }
}

/// The items of `lists` taking the lists in turn: the first of each, then the second of
/// each, and so on.
fn interleave<T>(lists: Vec<Vec<T>>) -> Vec<T> {
    let total = lists.iter().map(Vec::len).sum();
    let mut iters: Vec<_> = lists.into_iter().map(Vec::into_iter).collect();
    let mut out = Vec::with_capacity(total);
    while out.len() < total {
        for it in &mut iters {
            out.extend(it.next());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::interleave;

    #[test]
    fn lists_take_turns() {
        let lists = vec![vec![1, 2, 3], vec![], vec![10], vec![20, 21]];
        assert_eq!(interleave(lists), vec![1, 10, 20, 2, 21, 3]);
        assert!(interleave::<u8>(Vec::new()).is_empty());
    }
}
