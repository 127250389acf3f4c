//! Many files' blocks written at once (docs/DESIGN.md §9.4 "Many files at once"), as a
//! sync writes back thousands of small files: per domain, one reservation in the user
//! head for all of them, their data submitted as one device write per contiguous run
//! (a head's segment at most), and once it has completed, each file's own batch in the
//! domain's lane, in the caller's order, as [`Engine::write`] would have made it for each
//! file in turn. The same steps write one file for `FsyncPath::Ordered`.
//!
//! Invariants:
//! - Each file's batch holds its own mappings, reverse records, segment information,
//!   domain record and the caller's operations, and names only its own blocks: a crash
//!   keeps a prefix of the domain's batches, and recovery checks and drops each batch
//!   with its own data, exactly as for separate writes.
//! - Every file's data has completed, and each file's write number with it, before any
//!   of their batches is made: no batch names a write in flight, so neither a memtable
//!   flush (which may run while the batches are put) nor a persist ever waits for this
//!   call's device writes while it holds the domain's lock.
//! - The domain's lock is never held across device IO: it is taken to reserve the
//!   blocks and number the writes, and again to make the batches.

use super::{Blocks, Extra};
use crate::error::EngineError;
use crate::log::domain::{HeadKind, Run};
use crate::log::keys::FileBlock;
use crate::log::{Domain, Engine};
use device::IoCause;
use format::InodeNo;
use metadb::Receipt;
use std::collections::BTreeMap;

/// One file's part of [`Engine::write_many`]: what [`Engine::write`] takes for a
/// buffered write of scattered ranges.
#[derive(Clone, Copy, Debug)]
pub struct FileWrite<'a> {
    pub ino: InodeNo,
    /// (first block, block count), ascending and not overlapping; `data` holds their
    /// blocks one after the other.
    pub ranges: &'a [(FileBlock, u64)],
    /// Whole 4 KiB blocks, in pieces of whole blocks (a page cache's blocks need not be
    /// copied into one buffer first).
    pub data: &'a [&'a [u8]],
    /// The caller's operations, in the file's batch.
    pub extra: Extra<'a>,
}

impl Engine {
    /// Writes each of `files` as [`Engine::write`] with `Durability::Buffered` would, one
    /// after another: each file's blocks and the caller's operations in one atomic
    /// batch of its own in its domain's lane, in the order of `files` within a domain.
    /// But per domain the blocks of all its files are reserved together, consecutive in
    /// the user head, and written as one device write per contiguous run, several in
    /// flight; the batches are made once the data has completed. Where a domain has no
    /// room for all its files at once, they are written one at a time (each may make
    /// room, as separate writes would).
    ///
    /// `made[i]` is set once the batch of `files[i]` is in its lane (its blocks written,
    /// as by a successful [`Engine::write`]). Domains go in ascending order and the call
    /// stops at the first failure: then the files of the domains before it are set, and
    /// those of the failing domain before its failure.
    pub fn write_many(
        &self,
        files: &[FileWrite<'_>],
        made: &mut [bool],
    ) -> Result<(), EngineError> {
        assert_eq!(made.len(), files.len(), "a flag per file");
        let blocks: Vec<Blocks<'_>> = files
            .iter()
            .map(|f| Blocks::new(f.ino, f.ranges, f.data, f.extra))
            .collect();
        self.check_writable()?;
        let mut by_domain: BTreeMap<u16, Vec<usize>> = BTreeMap::new();
        for (i, b) in blocks.iter().enumerate() {
            by_domain
                .entry(self.domain_of(b.ino).0)
                .or_default()
                .push(i);
        }
        for (d, indices) in by_domain {
            let domain = &self.domains[usize::from(d)];
            let group: Vec<&Blocks<'_>> = indices.iter().map(|&i| &blocks[i]).collect();
            let mut logged = 0;
            let written = self.write_domain_files(domain, &group, &mut logged);
            for &i in &indices[..logged] {
                made[i] = true;
            }
            written?;
        }
        Ok(())
    }

    /// Writes `files` (all of `domain`) together, or one at a time if the pool has no
    /// room for all of them at once. `logged` counts the files whose batches are made.
    fn write_domain_files(
        &self,
        domain: &Domain,
        files: &[&Blocks<'_>],
        logged: &mut usize,
    ) -> Result<(), EngineError> {
        match self.write_in_order(domain, files, false, logged) {
            Err(EngineError::Space(_)) if files.len() > 1 => {
                // Nothing was reserved or logged; separate writes may each make room.
                assert_eq!(*logged, 0, "a reservation fails before any batch");
                for file in files {
                    self.write_in_order(domain, &[file], false, logged)?;
                }
                Ok(())
            }
            written => written.map(drop),
        }
    }

    /// Writes `files` (all of `domain`, at least one) in order: reserves their blocks
    /// together and numbers one write per file, writes the data and waits for it (with
    /// `flush`, a device flush follows), then makes each file's batch in turn under
    /// one hold of the domain's lock. `logged` counts the batches made. Returns the
    /// last batch's receipt and its write's number (what a persist of it waits for).
    pub(super) fn write_in_order(
        &self,
        domain: &Domain,
        files: &[&Blocks<'_>],
        flush: bool,
        logged: &mut usize,
    ) -> Result<(Receipt, u64), EngineError> {
        assert!(!files.is_empty(), "a write of no file");
        let counts: Vec<u32> = files.iter().map(|b| b.count()).collect();
        let count = counts.iter().sum();
        let (state, runs, seqs) =
            self.reserve_numbered(domain, HeadKind::User, count, files.len())?;
        drop(state);
        let data: Vec<&[u8]> = files.iter().flat_map(|b| b.data.iter().copied()).collect();
        self.write_data(domain, &runs, &data, &seqs, IoCause::UserData, flush)?;
        let per_file = split_runs(&runs, &counts);
        let mut state = domain.lock();
        let mut last = None;
        for ((blocks, runs), &seq) in files.iter().zip(&per_file).zip(&seqs) {
            let receipt = self.failing(self.log_blocks(&mut state, domain, blocks, runs, seq))?;
            *logged += 1;
            last = Some((receipt, seq));
        }
        drop(state);
        self.counted_written(count);
        Ok(last.expect("a batch per file"))
    }
}

/// `runs` (consecutive blocks, in order) cut into one list of runs per write of
/// `counts` blocks, in order: a write whose blocks straddle a segment boundary gets a
/// piece of each run.
fn split_runs(runs: &[Run], counts: &[u32]) -> Vec<Vec<Run>> {
    assert_eq!(
        runs.iter().map(|r| u64::from(r.blocks)).sum::<u64>(),
        counts.iter().map(|&c| u64::from(c)).sum::<u64>(),
        "the runs hold every write's blocks"
    );
    let mut left = runs.iter().copied();
    let mut current: Option<Run> = None;
    counts
        .iter()
        .map(|&count| {
            let mut mine = Vec::new();
            let mut need = count;
            while need > 0 {
                let run = match current.take() {
                    Some(run) => run,
                    None => left.next().expect("runs cover the counts"),
                };
                let take = need.min(run.blocks);
                mine.push(Run {
                    start: run.start,
                    blocks: take,
                });
                if take < run.blocks {
                    current = Some(Run {
                        start: format::BlockAddr(run.start.0 + u64::from(take)),
                        blocks: run.blocks - take,
                    });
                }
                need -= take;
            }
            mine
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::split_runs;
    use crate::log::domain::Run;
    use format::BlockAddr;

    fn run(start: u64, blocks: u32) -> Run {
        Run {
            start: BlockAddr(start),
            blocks,
        }
    }

    #[test]
    fn runs_are_cut_at_each_writes_end_and_at_segment_ends() {
        // 10 blocks at the end of one segment, 20 at the start of the next.
        let runs = [run(1000, 10), run(5000, 20)];
        assert_eq!(
            split_runs(&runs, &[3, 7, 5, 15]),
            vec![
                vec![run(1000, 3)],
                vec![run(1003, 7)],
                vec![run(5000, 5)],
                vec![run(5005, 15)],
            ]
        );
        // A write straddling the boundary gets a piece of each run.
        assert_eq!(
            split_runs(&runs, &[4, 12, 14]),
            vec![
                vec![run(1000, 4)],
                vec![run(1004, 6), run(5000, 6)],
                vec![run(5006, 14)],
            ]
        );
        assert_eq!(split_runs(&runs, &[30]), vec![runs.to_vec()]);
    }

    #[test]
    #[should_panic(expected = "the runs hold every write's blocks")]
    fn counts_beyond_the_runs_are_a_bug() {
        split_runs(&[run(0, 4)], &[3, 2]);
    }
}
