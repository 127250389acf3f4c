//! The generated workloads (docs/TESTING.md §2a "Generated workloads"): sequences of
//! operations over a small file set, with the outcome each step must have from the
//! namespace model ([`crate::model`]).
//!
//! - Length 1 and 2: each operation followed by an fsync, an fdatasync or a sync (of the
//!   operation's file, or its directory when the file is gone).
//! - Length 3: three operations, then one persistence point for the last one: what a
//!   crash may reorder between operations no persistence point separates (a name reused
//!   after an unlink, a rename of data not yet written back).
//!
//! Invariants:
//! - The list and the order are fixed: a workload's name (`seq-...`) identifies it, and
//!   a sample (every k-th) is the same sample in every run.
//! - Every step expects the outcome the model gives it.

use crate::model::Model;
use crate::workload::{NodeKind, Op, Step, Target, Workload, WriteMode};
use vfs::RenameMode;

/// The file set every generated workload starts from (made durable before recording).
fn setup() -> Vec<Op> {
    let p = |s: &str| Target::Path(s.into());
    vec![
        Op::Create("/A".into(), 0o644),
        // 16 blocks: one extent, which the later writes, punches and truncates shadow,
        // trim and split.
        Op::Write(p("/A"), 0, 65536, WriteMode::Buffered),
        Op::Create("/B".into(), 0o644),
        Op::Write(p("/B"), 0, 3000, WriteMode::Buffered),
        Op::SetXattr(p("/B"), "user.x".into(), "1".into()),
        Op::Mkdir("/D".into(), 0o755),
        Op::Create("/D/C".into(), 0o644),
        Op::Write(p("/D/C"), 0, 4096, WriteMode::Buffered),
        Op::Mkdir("/F".into(), 0o755),
        // A file with two names.
        Op::Create("/G".into(), 0o644),
        Op::Write(p("/G"), 0, 8192, WriteMode::Buffered),
        Op::Link("/G".into(), "/D/H".into()),
    ]
}

/// Operation `index` of [`operation_count`] as the `position`-th of its sequence: its
/// steps and what its persistence point reaches. Descriptors are named by position, so
/// one operation may appear twice in a sequence.
fn operation(index: usize, position: usize) -> (Vec<Op>, Target) {
    let s = |x: &str| x.to_string();
    let p = |x: &str| Target::Path(x.into());
    let one = |op: Op, target: &str| (vec![op], p(target));
    let buffered = WriteMode::Buffered;
    match index {
        0 => one(Op::Create(s("/D/N"), 0o644), "/D/N"),
        1 => one(Op::Write(p("/A"), 4096, 8192, buffered), "/A"),
        2 => one(Op::Append(p("/B"), 5000, buffered), "/B"),
        3 => one(Op::Truncate(p("/A"), 1000), "/A"),
        4 => one(Op::Punch(p("/A"), 0, 4096), "/A"),
        5 => one(Op::Falloc(p("/B"), 0, 16384, false), "/B"),
        6 => one(Op::Falloc(p("/B"), 0, 16384, true), "/B"),
        // ZERO_RANGE inside /A's extent, and past /B's end keeping its size.
        7 => one(Op::Zero(p("/A"), 4096, 8192, false), "/A"),
        8 => one(Op::Zero(p("/B"), 2000, 10000, true), "/B"),
        9 => one(Op::Unlink(s("/A")), "/"),
        // One of two links.
        10 => one(Op::Unlink(s("/D/H")), "/G"),
        11 => one(Op::Rename(s("/A"), s("/D/C"), RenameMode::Replace), "/D/C"),
        12 => one(Op::Rename(s("/B"), s("/D/M"), RenameMode::Replace), "/D/M"),
        13 => one(Op::Rename(s("/A"), s("/B"), RenameMode::Exchange), "/B"),
        // Over one of two links.
        14 => one(Op::Rename(s("/B"), s("/D/H"), RenameMode::Replace), "/D/H"),
        15 => one(Op::Link(s("/A"), s("/D/L")), "/D/L"),
        16 => one(Op::Symlink(s("/A"), s("/S")), "/"),
        17 => one(Op::Mkdir(s("/E"), 0o700), "/E"),
        18 => one(Op::Rmdir(s("/F")), "/"),
        19 => one(Op::Rename(s("/D"), s("/F/D"), RenameMode::Replace), "/F/D"),
        20 => one(Op::SetXattr(p("/A"), s("user.k"), s("v")), "/A"),
        21 => one(Op::RemoveXattr(p("/B"), s("user.x")), "/B"),
        22 => one(Op::Chmod(p("/A"), 0o600), "/A"),
        // A long write: an extent made (and trimming /B's block) inside the window.
        23 => one(Op::Write(p("/B"), 0, 40960, buffered), "/B"),
        24 => one(Op::Mknod(s("/D/P"), NodeKind::Regular, 0o640, 0), "/D/P"),
        25 => one(Op::Write(p("/B"), 8192, 4096, WriteMode::Sync), "/B"),
        26 => one(Op::Write(p("/A"), 16384, 4096, WriteMode::Direct), "/A"),
        // Reuses /A's name once it is gone.
        27 => one(Op::Create(s("/A"), 0o600), "/A"),
        // Writes through a descriptor whose name is gone.
        28 => {
            let fd = format!("f{position}");
            let t = Target::Fd(fd.clone());
            (
                vec![
                    Op::Open(fd, s("/D/C")),
                    Op::Unlink(s("/D/C")),
                    Op::Write(t.clone(), 0, 6000, buffered),
                ],
                t,
            )
        }
        _ => panic!("operation {index} of {}", operation_count()),
    }
}

/// How many operations [`operation`] knows.
pub fn operation_count() -> usize {
    29
}

fn persistence(kind: usize, target: Target) -> Op {
    match kind {
        0 => Op::Fsync(target),
        1 => Op::Fdatasync(target),
        _ => Op::Sync,
    }
}

const POINTS: [&str; 3] = ["fsync", "fdatasync", "sync"];

/// How many sequences of `len` operations there are.
pub fn sequence_count(len: usize) -> usize {
    let n = operation_count();
    match len {
        1 => n * POINTS.len(),
        2 => (n * POINTS.len()).pow(2),
        3 => n.pow(3) * POINTS.len(),
        _ => panic!("sequences of 1, 2 or 3 operations"),
    }
}

/// Every `every`-th sequence of `len` operations (1, 2 or 3), from the `phase`-th on,
/// with `domains` domains.
pub fn sequences_sampled(len: usize, domains: u32, every: usize, phase: usize) -> Vec<Workload> {
    assert!(every >= 1);
    (0..sequence_count(len))
        .filter(|i| i % every == phase % every)
        .map(|i| sequence(len, i, domains))
        .collect()
}

/// Every sequence of `len` operations with `domains` domains.
pub fn sequences(len: usize, domains: u32) -> Vec<Workload> {
    sequences_sampled(len, domains, 1, 0)
}

/// Sequence `index` of those of `len` operations.
pub fn sequence(len: usize, index: usize, domains: u32) -> Workload {
    let (n, k) = (operation_count(), POINTS.len());
    // (operation, persistence point or None) for each position, in odometer order.
    let mut picks = Vec::new();
    let mut rest = index;
    if len == 3 {
        let point = rest % k;
        rest /= k;
        let mut ops = [0; 3];
        for o in ops.iter_mut().rev() {
            *o = rest % n;
            rest /= n;
        }
        picks.extend([(ops[0], None), (ops[1], None), (ops[2], Some(point))]);
    } else {
        for _ in 0..len {
            picks.push((rest / k % n, Some(rest % k)));
            rest /= n * k;
        }
        picks.reverse();
    }
    let mut model = Model::default();
    let setup: Vec<Step> = setup()
        .into_iter()
        .map(|op| {
            model.apply(&op).expect("the setup succeeds");
            Step::ok(op)
        })
        .collect();
    let mut name = format!("seq{len}-d{domains}");
    let mut steps = Vec::new();
    for (position, &(op, point)) in picks.iter().enumerate() {
        let (ops, target) = operation(op, position);
        let mut ops = ops;
        name.push_str(&format!("-{op}"));
        if let Some(point) = point {
            ops.push(persistence(point, target));
            name.push_str(POINTS[point]);
        }
        for op in ops {
            let expect = model.apply(&op).err();
            steps.push(Step {
                line: 0,
                op,
                expect,
            });
        }
    }
    Workload {
        name,
        domains,
        setup,
        steps,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequences_are_distinct_and_numbered_in_order() {
        for len in 1..=2 {
            let all = sequences(len, 1);
            assert_eq!(all.len(), sequence_count(len));
            let names: std::collections::BTreeSet<_> = all.iter().map(|w| &w.name).collect();
            assert_eq!(names.len(), all.len(), "names identify sequences");
        }
        assert_eq!(sequence(1, 0, 1).name, "seq1-d1-0fsync");
        assert_eq!(
            sequence(2, (3 + 2) * 29 * 3, 1).name,
            "seq2-d1-1sync-0fsync"
        );
        let last = sequence(3, sequence_count(3) - 1, 3);
        assert_eq!(last.name, "seq3-d3-28-28-28sync");
        assert_eq!(sequence(3, 5, 1).name, "seq3-d1-0-0-1sync");
        let sample = sequences_sampled(2, 1, 100, 7);
        assert_eq!(sample[1].name, sequence(2, 107, 1).name);
    }

    #[test]
    fn steps_expect_what_the_model_says() {
        // Unlinking /A twice: the second finds nothing; its fsync of `/` is fine.
        let w = sequence(2, (9 * 3) * (29 * 3) + 9 * 3, 1);
        assert_eq!(w.name, "seq2-d1-9fsync-9fsync");
        let expects: Vec<_> = w.steps.iter().map(|s| s.expect).collect();
        assert_eq!(expects, [None, None, Some(libc::ENOENT), None]);
        // The descriptor operation twice: the second open finds /D/C gone.
        let w = sequence(3, (28 * 29 + 28) * 29 * 3, 1);
        assert_eq!(w.name, "seq3-d1-28-28-0fsync");
        let second: Vec<_> = w.steps[3..6].iter().map(|s| s.expect).collect();
        assert_eq!(
            second,
            [Some(libc::ENOENT), Some(libc::ENOENT), Some(libc::EBADF)]
        );
    }
}
