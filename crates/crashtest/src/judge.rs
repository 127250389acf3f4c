//! Judging one recovered tree against a recorded history: the rules of docs/SEMANTICS.md
//! §2 as docs/TESTING.md §2a states them.
//!
//! - Every entry and every object is in a state it had at some step at or after the last
//!   acknowledged persistence point covering it: nothing promised is lost, nothing never
//!   written appears, no operation is half applied.
//! - A file reached through a name a rename or a link gave it holds at least the data it
//!   had at that rename or link (both write the file back first, and the name never
//!   survives without that write-back).
//! - With one domain (one lane, recovered as a prefix): names and the attributes of
//!   everything but files are those after one step k at or after the last acknowledged
//!   persistence point, and each file is as it was (data and attributes together) at a
//!   step between its last write-back up to k and k (data reaches the log at
//!   write-back, and a chmod of a file with dirty pages rides with it, so a file may lag
//!   the names, never lead them).
//!
//! "A state it had" includes what a punch or a zeroed range leaves when a crash
//! interrupts it (several batches, docs/SEMANTICS.md §4): each block as before or after.
//!
//! A persistence point is acknowledged in a crash state when the device's flushes had
//! made durable, by the time it returned, no more than the state's durable prefix
//! (`Promise::durable`): a crash at any moment after it returned keeps at least that.
//!
//! Invariants:
//! - Pure: a function of the workload, the history, the recovered tree and the state's
//!   durable prefix, so its rules are tested on made-up histories (tests below).
//! - Every problem of the tree is reported, each as one line naming what differs and
//!   the line of the workload that bounds it.

use crate::apply::Scope;
use crate::run::{History, Promise};
use crate::snapshot::{show, Object, Snapshot};
use crate::workload::{Op, Workload};
use std::collections::{BTreeMap, BTreeSet};
use vfs::Kind;

type EntryKey = (u64, Vec<u8>);

/// The problems of `got`, recovered from a crash state whose first `durable` writes
/// landed, against history `h` of `w`.
pub fn judge(w: &Workload, h: &History, got: &Snapshot, durable: u64) -> Vec<String> {
    let judge = Judge {
        w,
        h,
        got,
        acked: h.promises.iter().filter(|p| p.durable <= durable).collect(),
    };
    let mut problems = Vec::new();
    let entry_points = judge.entries(&mut problems);
    judge.objects(&entry_points, &mut problems);
    if w.domains == 1 {
        let point = judge.acked.iter().map(|p| p.step).max().unwrap_or(0);
        if let Err(e) = one_domain(w, h, got, point) {
            problems.push(format!(
                "with one domain, {e} (since {})",
                judge.bound(point)
            ));
        }
    }
    problems
}

/// One recovered tree against one history, with the promises acknowledged in its
/// crash state.
struct Judge<'a> {
    w: &'a Workload,
    h: &'a History,
    got: &'a Snapshot,
    acked: Vec<&'a Promise>,
}

impl Judge<'_> {
    /// "line 7 (fsync /a)", or "the setup" for step 0.
    fn bound(&self, point: usize) -> String {
        match point {
            0 => "the setup".to_string(),
            p => line_of(self.w, p),
        }
    }

    /// The prefix of a problem a promise bounds.
    fn lost(&self, point: usize) -> String {
        match point {
            0 => String::new(),
            p => format!("lost the promise of {}: ", line_of(self.w, p)),
        }
    }

    /// Every entry (recovered, or in any recorded tree) has a value it had at or after
    /// the last acknowledged promise covering it. Returns that step per entry.
    fn entries(&self, problems: &mut Vec<String>) -> BTreeMap<EntryKey, usize> {
        let mut keys: BTreeSet<&EntryKey> = self.got.entries.keys().collect();
        for s in &self.h.states {
            keys.extend(s.entries.keys());
        }
        let mut points = BTreeMap::new();
        for key in keys {
            let point = covering(&self.acked, |s| covers_entry(s, key));
            points.insert(key.clone(), point);
            let value = self.got.entries.get(key);
            if !self.h.states[point..]
                .iter()
                .any(|s| s.entries.get(key) == value)
            {
                problems.push(format!(
                    "{}entry {}/{} is {}, a value it never had since {}",
                    self.lost(point),
                    key.0,
                    show(&key.1),
                    value.map_or("absent".into(), |v| format!("inode {v}")),
                    self.bound(point)
                ));
            }
        }
        points
    }

    /// Every recovered object is in a state it had at or after the last acknowledged
    /// promise covering it, and at or after the rename or link that gave it a name it
    /// has (or half way through a punch or zeroed range after those).
    fn objects(&self, entry_points: &BTreeMap<EntryKey, usize>, problems: &mut Vec<String>) {
        let (w, h) = (self.w, self.h);
        let n = h.states.len() - 1;
        for (ino, object) in &self.got.objects {
            let point = covering(&self.acked, |s| covers_object(s, *ino));
            let named = name_barrier(w, h, self.got, *ino, entry_points);
            let from = point.max(named.as_ref().map_or(0, |n| n.0));
            if h.states[from..]
                .iter()
                .any(|s| s.objects.get(ino) == Some(object))
                || (from + 1..=n).any(|j| half_done_object(w, h, *ino, j, object))
            {
                continue;
            }
            let (lost, why) = match named {
                Some((step, key)) if step > point => (
                    String::new(),
                    format!(
                        "{} (which gave it the name {}/{})",
                        line_of(w, step),
                        key.0,
                        show(&key.1)
                    ),
                ),
                _ => (self.lost(point), self.bound(point)),
            };
            let last = h.states.last().and_then(|s| s.objects.get(ino));
            problems.push(format!(
                "{lost}inode {ino} is {}, a state it never had since {why} (at the end: {})",
                object.describe(),
                last.map_or("gone".into(), Object::describe)
            ));
        }
    }
}

/// "line 7 (rename /a /b)" for recorded step `step` (1-based); "step 3 (...)" for a
/// generated workload, which has no lines.
fn line_of(w: &Workload, step: usize) -> String {
    let s = &w.steps[step - 1];
    match s.line {
        0 => format!("step {step} ({})", s.op),
        line => format!("line {line} ({})", s.op),
    }
}

/// Whether `data` is what step `j` leaves of file `ino`'s data when a crash interrupts
/// it: a punch or a zeroed range is several batches (the partial blocks at either end,
/// then the whole blocks; docs/SEMANTICS.md §4), so each 4 KiB block may be as before or
/// as after the step, and the size either.
fn half_done(w: &Workload, h: &History, ino: u64, j: usize, data: &[u8]) -> bool {
    const BLOCK: usize = format::constants::BLOCK_SIZE_BYTES as usize;
    if j == 0 || h.results[j - 1].is_err() {
        return false;
    }
    if !matches!(w.steps[j - 1].op, Op::Punch(..) | Op::Zero(..)) {
        return false;
    }
    let (Some(before), Some(after)) = (
        h.states[j - 1].objects.get(&ino),
        h.states[j].objects.get(&ino),
    ) else {
        return false;
    };
    // Bytes past a file's end read as zeros once it grows (SEMANTICS.md §1).
    let block = |d: &[u8], at: usize, len: usize| -> Vec<u8> {
        let mut out = vec![0u8; len];
        if at < d.len() {
            let n = len.min(d.len() - at);
            out[..n].copy_from_slice(&d[at..at + n]);
        }
        out
    };
    (data.len() == before.data.len() || data.len() == after.data.len())
        && data.chunks(BLOCK).enumerate().all(|(i, got)| {
            let at = i * BLOCK;
            block(&before.data, at, got.len()) == got || block(&after.data, at, got.len()) == got
        })
}

/// [`half_done`] of the whole object: its other attributes as after step `j`.
fn half_done_object(w: &Workload, h: &History, ino: u64, j: usize, o: &Object) -> bool {
    let Some(after) = h.states.get(j).and_then(|s| s.objects.get(&ino)) else {
        return false;
    };
    o.attributes() == after.attributes() && half_done(w, h, ino, j, &o.data)
}

/// The last acknowledged step whose scope `covers`, or 0.
fn covering(acked: &[&Promise], covers: impl Fn(&Scope) -> bool) -> usize {
    acked
        .iter()
        .filter(|p| covers(&p.scope))
        .map(|p| p.step)
        .max()
        .unwrap_or(0)
}

fn covers_entry(scope: &Scope, key: &EntryKey) -> bool {
    match scope {
        Scope::All => true,
        Scope::File { entries, .. } => entries.contains(key),
        Scope::Dir { ino } => key.0 == *ino,
    }
}

fn covers_object(scope: &Scope, object: u64) -> bool {
    match scope {
        Scope::All => true,
        Scope::File { ino, .. } | Scope::Dir { ino } => *ino == object,
    }
}

/// For a file `ino` of `got`: the latest step among its names in `got` at which a rename
/// or link gave it that name, with the name (its data must be at least as new). Each
/// name counts from the earliest step it could have survived from.
fn name_barrier(
    w: &Workload,
    h: &History,
    got: &Snapshot,
    ino: u64,
    entry_points: &BTreeMap<EntryKey, usize>,
) -> Option<(usize, EntryKey)> {
    if got.objects.get(&ino)?.kind != Kind::File {
        return None;
    }
    let mut best: Option<(usize, EntryKey)> = None;
    for (key, _) in got.entries.iter().filter(|(_, &v)| v == ino) {
        let names = |t: usize| h.states[t].entries.get(key) == Some(&ino);
        let from = entry_points.get(key).copied().unwrap_or(0);
        let Some(mut given) = (from..h.states.len()).find(|&t| names(t)) else {
            continue; // reported as an entry problem
        };
        while given > 0 && names(given - 1) {
            given -= 1;
        }
        let by_name_op = given > 0
            && h.results[given - 1].is_ok()
            && matches!(w.steps[given - 1].op, Op::Rename(..) | Op::Link(..));
        if by_name_op && best.as_ref().is_none_or(|b| b.0 < given) {
            best = Some((given, key.clone()));
        }
    }
    best
}

/// One domain: some step `k >= from` whose names and attributes `got` has, with each
/// file (data and attributes) as of a step between its last write-back up to `k` and
/// `k`.
fn one_domain(w: &Workload, h: &History, got: &Snapshot, from: usize) -> Result<(), String> {
    let n = h.states.len() - 1;
    if (from..=n).any(|k| matches_at(w, h, got, k)) {
        return Ok(());
    }
    let nearest = (from..=n)
        .min_by_key(|&k| h.states[k].diff(got).matches(';').count())
        .expect("from <= n");
    Err(format!(
        "no step's names and attributes with data since each file's write-back give this \
         tree; nearest after step {nearest}: {}",
        got.diff(&h.states[nearest])
    ))
}

fn matches_at(w: &Workload, h: &History, got: &Snapshot, k: usize) -> bool {
    let s = &h.states[k];
    if s.entries != got.entries || s.objects.len() != got.objects.len() {
        return false;
    }
    got.objects.iter().all(|(ino, o)| {
        let Some(t) = s.objects.get(ino) else {
            return false;
        };
        if o.kind != Kind::File || t.kind != Kind::File {
            return o == t;
        }
        // A file's record is logged with its write-back, or at once when no page is
        // dirty (then it equals the state after the last write-back anyway): so the
        // file as a whole is as after a step since its last write-back.
        let written_back = (1..=k)
            .rev()
            .find(|&step| h.written_back[step - 1].covers(*ino))
            .unwrap_or(0);
        (written_back..=k)
            .any(|j| h.states[j].objects.get(ino) == Some(o) || half_done_object(w, h, *ino, j, o))
    })
}

#[cfg(test)]
mod tests;
