//! Background jobs: memtable flush and compaction, and writing their output tables.
//!
//! Both follow the same protocol: build tables from a sorted stream, write them to newly
//! allocated segments and flush the device, make a manifest edit durable, publish the new
//! version, and only then give up what the edit replaced (WAL generations after a flush;
//! input tables' segments after a compaction, once no reader holds them).

use super::{Inner, SuperVersion, TableHandle};
use crate::compaction::policy::{is_bottommost, pick, VersionSummary};
use crate::error::MetaDbError;
use crate::iter::{InternalIterator, MergingIterator};
use crate::manifest::VersionEdit;
use crate::memtable::Memtable;
use crate::table::builder::TableBuilder;
use crate::table::cache::BlockCache;
use crate::table::reader::{CacheFill, ReadOptions, Table};
use crate::table::{TableId, TableMeta};
use crate::types::{Seq, ValueKind};
use device::{AlignedBuf, DeviceError, IoCause, IoRequest, Queue};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Output tables being built: the open builder, finished tables' metadata, and a queue
/// on which each finished table's write is submitted at once, so the device writes one
/// table while the merge builds the next (one device flush at the end covers them all).
struct TableSink<'d> {
    builder: Option<TableBuilder>,
    outputs: Vec<TableMeta>,
    queue: Queue<'d>,
    /// The first failed write; later completions are still collected.
    failed: Option<DeviceError>,
    /// Which written buffers to keep (the tables then open from them).
    keep: Keep,
    /// The written tables' buffers by table id, as `keep` says.
    written: HashMap<u64, AlignedBuf>,
    /// Their bytes.
    kept_bytes: usize,
}

/// Which of a [`TableSink`]'s written tables are kept, to open from their buffers.
enum Keep {
    /// Every one (a flush's: they fill the block cache).
    All,
    /// Those the block cache has room for besides the ones kept already (a
    /// compaction's: they go to the cache only where it has room, so keeping more would
    /// hold memory for nothing).
    WhileRoom(Arc<BlockCache>),
}

impl TableSink<'_> {
    /// Submits `request` (waiting for a completion first if the queue is full).
    fn write(&mut self, request: IoRequest) -> Result<(), DeviceError> {
        let mut request = request;
        while let Err(back) = self.queue.push(request) {
            request = back;
            self.queue.submit(1)?;
            self.collect();
        }
        self.queue.submit(0)?;
        self.collect();
        Ok(())
    }

    fn collect(&mut self) {
        while let Some(c) = self.queue.pop() {
            match c.result {
                Err(e) => {
                    self.failed.get_or_insert(e);
                }
                Ok(()) => {
                    let tag = c.request.tag;
                    let buf = c.request.into_buf().expect("a table write has its buffer");
                    let room = match &self.keep {
                        Keep::All => true,
                        Keep::WhileRoom(cache) => self.kept_bytes + buf.len() <= cache.room_bytes(),
                    };
                    if room {
                        self.kept_bytes += buf.len();
                        self.written.insert(tag, buf);
                    }
                }
            }
        }
    }

    /// Waits for every submitted write; the first failure, if any.
    fn finish(&mut self) -> Result<(), DeviceError> {
        while self.queue.outstanding() > 0 {
            self.queue.submit(1)?;
            self.collect();
        }
        self.failed.take().map_or(Ok(()), Err)
    }
}

/// Which versions a merge (a flush or a compaction) keeps: of each key, the newest
/// version, and for each live snapshot the newest version it sees; no other reader can
/// see any other version (a snapshot taken later sees at least the newest). A flush
/// that kept every version wrote a table per key that was rewritten tens of thousands
/// of times in one memtable (an inode's size at each append + fsync), past a table's
/// size on small images.
#[derive(Debug, Clone)]
struct DropRule {
    /// Live snapshots, ascending.
    snapshots: Vec<Seq>,
    /// Tombstones visible to every snapshot are dropped (no older data lies below).
    drop_tombstones: bool,
}

impl DropRule {
    /// Whether the version `seq` of a key, whose next newer version is `newer`, is the
    /// newest version some reader sees: the present (no newer version) or a snapshot in
    /// `seq..newer`.
    fn visible(&self, seq: Seq, newer: Option<Seq>) -> bool {
        let Some(newer) = newer else {
            return true;
        };
        let first = self.snapshots.partition_point(|&s| s < seq);
        self.snapshots.get(first).is_some_and(|&s| s < newer)
    }

    fn oldest_snapshot(&self) -> Seq {
        self.snapshots.first().copied().unwrap_or(Seq::MAX)
    }
}

impl Inner {
    /// The rule of a merge starting now.
    fn drop_rule(&self, drop_tombstones: bool) -> DropRule {
        let snapshots = self.snapshots.lock().expect("snapshots lock");
        DropRule {
            snapshots: snapshots.keys().copied().collect(),
            drop_tombstones,
        }
    }

    /// Writes the entries of `input` into tables of at most one segment each, then
    /// flushes the device. Returns the new tables, opened.
    ///
    /// Tables are cut only between user keys: all kept versions of one key go to one
    /// table, so the tables of one output are disjoint by user key (levels 1 and up
    /// require it, and level 0 needs it for newest-first lookups to stay correct).
    fn write_tables(
        &self,
        input: &mut dyn InternalIterator,
        rule: Option<DropRule>,
        cause: IoCause,
    ) -> Result<Vec<Arc<TableHandle>>, MetaDbError> {
        // A flush's tables are small (a memtable's worth) and hold the newest keys: they
        // open from what was written and fill the block cache. A compaction's may be
        // many segments of colder keys: those the cache has room for open from what was
        // written and go to the cache without evicting anything (after a load, the
        // store's blocks are there for its first reads, as a store over the kernel's
        // page cache finds them there); the others are read back as usual.
        let (keep, fill) = if cause == IoCause::Table {
            (Keep::All, CacheFill::Evicting)
        } else {
            (Keep::WhileRoom(self.cache.clone()), CacheFill::IfRoom)
        };
        let mut out = TableSink {
            builder: None,
            outputs: Vec::new(),
            queue: self.env.device.queue()?,
            failed: None,
            keep,
            written: HashMap::new(),
            kept_bytes: 0,
        };
        let result = self.write_tables_into(&mut out, input, rule, cause);
        // Every submitted write completes before its segment can be given back.
        let written = out.finish();
        let result = result.and_then(|()| {
            written?;
            if !out.outputs.is_empty() {
                self.env.device.flush(cause)?;
            }
            Ok(())
        });
        if let Err(e) = result {
            for meta in &out.outputs {
                self.env.table_store.release(meta.segment);
            }
            return Err(e);
        }
        out.outputs
            .into_iter()
            .map(|meta| {
                let offset = self.env.table_store.offset(meta.segment);
                let segment = meta.segment;
                let (device, cache) = (self.env.device.clone(), self.cache.clone());
                let table = match out.written.remove(&meta.id.0) {
                    Some(buf) => Table::open_written(device, offset, meta, cache, &buf, fill)?,
                    None => Table::open(device, offset, meta, cache)?,
                };
                Ok(Arc::new(TableHandle {
                    table: Arc::new(table),
                    segment,
                    obsolete: AtomicBool::new(false),
                    store: self.env.table_store.clone(),
                    cache: self.cache.clone(),
                }))
            })
            .collect()
    }

    /// The merge loop of [`Inner::write_tables`]: feeds kept versions to `out`, which
    /// writes each table as it fills.
    fn write_tables_into(
        &self,
        out: &mut TableSink<'_>,
        input: &mut dyn InternalIterator,
        rule: Option<DropRule>,
        cause: IoCause,
    ) -> Result<(), MetaDbError> {
        // Versions of the current user key that survive the drop rule.
        let mut key: Vec<u8> = Vec::new();
        let mut versions: Vec<(Seq, ValueKind, Vec<u8>)> = Vec::new();
        let mut have_key = false;
        // Sequence number of the previous (newer) version of the current key, if any.
        let mut previous_seq: Option<Seq> = None;
        input.seek_to_first()?;
        while input.valid() {
            let (seq, kind) = (input.seq(), input.kind());
            if !have_key || key.as_slice() != input.user_key() {
                self.emit_key(out, &key, &mut versions, cause)?;
                key.clear();
                key.extend_from_slice(input.user_key());
                have_key = true;
                previous_seq = None;
            }
            let keep = match &rule {
                None => true,
                Some(rule) => {
                    let dead_tombstone = kind == ValueKind::Delete
                        && rule.drop_tombstones
                        && seq <= rule.oldest_snapshot();
                    rule.visible(seq, previous_seq) && !dead_tombstone
                }
            };
            previous_seq = Some(seq);
            if keep {
                versions.push((seq, kind, input.value().to_vec()));
            }
            input.next()?;
        }
        self.emit_key(out, &key, &mut versions, cause)?;
        if let Some(b) = out.builder.take().filter(|b| !b.is_empty()) {
            self.finish_table(out, b, cause)?;
        }
        Ok(())
    }

    /// Adds every kept version of `key` to the current table, starting a new table first
    /// if they might not all fit.
    fn emit_key(
        &self,
        out: &mut TableSink<'_>,
        key: &[u8],
        versions: &mut Vec<(Seq, ValueKind, Vec<u8>)>,
        cause: IoCause,
    ) -> Result<(), MetaDbError> {
        if versions.is_empty() {
            return Ok(());
        }
        // Upper bound of the bytes these entries add: varint headers (at most 21 bytes),
        // the key (no prefix sharing assumed), the value, a restart slot, and a fresh
        // block's trailer and index entry.
        let need: usize = versions
            .iter()
            .map(|(_, _, v)| 32 + key.len() + v.len())
            .sum::<usize>()
            + 64
            + key.len();
        let full = out.builder.as_ref().is_some_and(|b| {
            !b.is_empty() && b.estimated_len() + need > self.config.table.table_bytes_max
        });
        if full {
            let b = out.builder.take().expect("builder present");
            self.finish_table(out, b, cause)?;
        }
        let first_in_table = out.builder.as_ref().is_none_or(|b| b.is_empty());
        let b = out.builder.get_or_insert_with(|| self.new_builder());
        for (seq, kind, value) in versions.drain(..) {
            let added = b.add(key, seq, kind, &value);
            assert!(
                added,
                "all versions of one key fit one table (first in table: {first_in_table}, {need} bytes needed)"
            );
        }
        Ok(())
    }
    fn new_builder(&self) -> TableBuilder {
        let id = TableId(self.next_table_id.fetch_add(1, Ordering::SeqCst));
        TableBuilder::new(id, self.config.table)
    }

    /// Allocates a segment for `builder`'s table and submits its write.
    fn finish_table(
        &self,
        out: &mut TableSink<'_>,
        builder: TableBuilder,
        cause: IoCause,
    ) -> Result<(), MetaDbError> {
        let (buf, built) = builder.finish();
        let segment = self.env.table_store.allocate()?;
        let offset = self.env.table_store.offset(segment);
        out.outputs.push(built.meta(segment));
        let mut request = IoRequest::write(offset, buf, cause);
        request.tag = built.id.0;
        out.write(request)?;
        Ok(())
    }

    /// Makes `edit` durable in the manifest, stamped with the table-id counter read
    /// under the manifest lock (a flush and a compaction log edits concurrently, and
    /// the manifest's counters may only grow).
    fn log_edit(&self, edit: &mut VersionEdit) -> Result<(), MetaDbError> {
        self.manifest.apply_completed(edit, |edit| {
            edit.next_table_id = Some(self.next_table_id.load(Ordering::SeqCst));
        })
    }

    /// Publishes `edit` (already durable in the manifest) with `added` tables open.
    fn install(
        &self,
        edit: &VersionEdit,
        added: &[Arc<TableHandle>],
        flushed: Option<&Arc<Memtable>>,
    ) {
        let _install = self.install_lock.lock().expect("install lock");
        let sv = self.current.load_full();
        let mut tables: HashMap<TableId, Arc<TableHandle>> = (*sv.tables).clone();
        for handle in added {
            tables.insert(handle.table.id(), handle.clone());
        }
        for (_, id) in &edit.removed {
            let moved = edit.added.iter().any(|(_, m)| m.id == *id);
            if !moved {
                let handle = tables.remove(id).expect("removed table is open");
                handle.obsolete.store(true, Ordering::SeqCst);
            }
        }
        let immutables = match flushed {
            Some(mem) => {
                assert!(
                    Arc::ptr_eq(sv.immutables.last().expect("flushed an immutable"), mem),
                    "flush oldest first"
                );
                sv.immutables[..sv.immutables.len() - 1].to_vec()
            }
            None => sv.immutables.clone(),
        };
        self.current.store(Arc::new(SuperVersion {
            active: sv.active.clone(),
            immutables,
            version: Arc::new(sv.version.apply(edit)),
            tables: Arc::new(tables),
        }));
    }

    /// Flushes the oldest immutable memtable to level 0. Returns false if there is none.
    /// A failure (of the caller's `before_memtable_flush` hook too) turns the database
    /// read-only, whether the flush runs in the background or inline.
    pub(super) fn flush_oldest(&self) -> Result<bool, MetaDbError> {
        let _job = self.flush_lock.lock().expect("flush lock");
        let Some(mem) = self.current.load().immutables.last().cloned() else {
            return Ok(false);
        };
        self.flush_memtable(&mem)
            .inspect_err(|e| self.fail(e))
            .map(|()| true)
    }

    /// [`Inner::flush_oldest`] of `mem`, the oldest immutable memtable.
    fn flush_memtable(&self, mem: &Arc<Memtable>) -> Result<(), MetaDbError> {
        // Sealed and drained at the switch: every batch in it was inserted before the
        // hook runs, so the caller's writes it waits for include all they name.
        assert!(mem.gate().is_sealed(), "flushing an unsealed memtable");
        let lookup = |key: &[u8]| match mem.get(key, Seq::MAX) {
            Some(found) if found.kind == ValueKind::Put => Some(found.value),
            _ => None,
        };
        self.hooks.before_memtable_flush(&lookup)?;
        let mut iter = mem.iter();
        let mut max_seq = self.last_flushed_seq.load(Ordering::SeqCst);
        {
            iter.seek_to_first()?;
            while iter.valid() {
                max_seq = max_seq.max(iter.seq());
                iter.next()?;
            }
        }
        let rule = self.drop_rule(false);
        let added = self.write_tables(&mut iter, Some(rule), IoCause::Table)?;
        let mut edit = VersionEdit {
            added: added.iter().map(|h| (0, h.table.meta().clone())).collect(),
            flushed_generation: Some(mem.generation()),
            last_seq: Some(max_seq),
            ..VersionEdit::default()
        };
        self.log_edit(&mut edit)?;
        self.last_flushed_seq.store(max_seq, Ordering::SeqCst);
        self.install(&edit, &added, Some(mem));
        self.wal.release_through(mem.generation())?;
        Ok(())
    }

    /// Runs one compaction if the policy picks one. Returns false if none is due.
    pub(super) fn compact_once(&self) -> Result<bool, MetaDbError> {
        let _job = self.compact_lock.lock().expect("compact lock");
        let sv = self.current.load_full();
        let summary = VersionSummary::of(&sv.version, &self.cursors.lock().expect("cursors lock"));
        let Some(pick) = pick(&summary, &self.config.compaction) else {
            return Ok(false);
        };
        let mut edit = VersionEdit::default();
        if let Some(cursor) = &pick.cursor {
            edit.compaction_cursors.push((pick.level, cursor.clone()));
        }
        let inputs: Vec<(u32, TableId)> = pick
            .inputs
            .iter()
            .map(|id| (pick.level, *id))
            .chain(
                pick.next_level_inputs
                    .iter()
                    .map(|id| (pick.output_level, *id)),
            )
            .collect();
        edit.removed = inputs.clone();
        let mut added = Vec::new();
        if pick.is_trivial_move() {
            let meta = sv.table(pick.inputs[0]).table.meta().clone();
            edit.added.push((pick.output_level, meta));
        } else {
            // Every input in one concurrent batch (at most `job_input_bytes_max` bytes,
            // where the policy had a choice), then merge from memory.
            let reads = inputs
                .iter()
                .map(|(_, id)| sv.table(*id).table.data_read(IoCause::Compaction))
                .collect();
            let completions = self.env.device.run(reads)?;
            let children: Vec<Box<dyn InternalIterator + Send>> = inputs
                .iter()
                .zip(completions)
                .map(|((_, id), c)| {
                    let data = c.request.into_buf().expect("a read returns its buffer");
                    Box::new(
                        sv.table(*id)
                            .table
                            .iter_preloaded(ReadOptions::COMPACTION, data),
                    ) as Box<dyn InternalIterator + Send>
                })
                .collect();
            let (smallest, largest) = inputs
                .iter()
                .map(|(_, id)| sv.table(*id).table.meta())
                .fold((None::<Vec<u8>>, None::<Vec<u8>>), |(lo, hi), m| {
                    let lo = Some(lo.map_or(m.smallest.user_key.clone(), |l| {
                        l.min(m.smallest.user_key.clone())
                    }));
                    let hi = Some(hi.map_or(m.largest.user_key.clone(), |h| {
                        h.max(m.largest.user_key.clone())
                    }));
                    (lo, hi)
                });
            let (smallest, largest) = (smallest.expect("inputs"), largest.expect("inputs"));
            let rule = self.drop_rule(is_bottommost(
                &summary,
                pick.output_level,
                &smallest,
                &largest,
            ));
            let mut merged = MergingIterator::new(children);
            added = self.write_tables(&mut merged, Some(rule), IoCause::Compaction)?;
            edit.added = added
                .iter()
                .map(|h| (pick.output_level, h.table.meta().clone()))
                .collect();
        }
        self.log_edit(&mut edit)?;
        if let Some(cursor) = &pick.cursor {
            self.cursors
                .lock()
                .expect("cursors lock")
                .insert(pick.level, cursor.clone());
        }
        drop(sv);
        self.install(&edit, &added, None);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_is_kept_when_some_reader_sees_it_newest() {
        let rule = |snapshots: &[Seq]| DropRule {
            snapshots: snapshots.to_vec(),
            drop_tombstones: false,
        };
        // (snapshots, version, its next newer version, kept)
        let cases: [(&[Seq], Seq, Option<Seq>, bool); 8] = [
            (&[], 5, None, true),
            (&[], 5, Some(9), false),
            (&[5], 5, Some(9), true),
            (&[8], 5, Some(9), true),
            (&[9], 5, Some(9), false),
            (&[4], 5, Some(9), false),
            (&[2, 12], 5, Some(9), false),
            (&[2, 7, 12], 5, Some(9), true),
        ];
        for (snapshots, seq, newer, kept) in cases {
            assert_eq!(
                rule(snapshots).visible(seq, newer),
                kept,
                "snapshots {snapshots:?}, version {seq}, newer {newer:?}"
            );
        }
        assert_eq!(rule(&[]).oldest_snapshot(), Seq::MAX);
        assert_eq!(rule(&[3, 8]).oldest_snapshot(), 3);
    }
}
