//! The generated workloads of issue 5: every sequence of one and of two operations over a
//! small file set, each operation followed by an fsync, an fdatasync or a sync (the
//! persistence point reaches the operation's file, or its directory when the file is
//! gone).
//!
//! Invariants:
//! - The list and the order are fixed: a workload's name (`seq-...`) identifies it.

use crate::workload::{Op, Step, Workload};
use vfs::RenameMode;

/// The file set every generated workload starts from (made durable before recording).
fn setup() -> Vec<Op> {
    vec![
        Op::Create("/A".into()),
        // 16 blocks: one extent, which the later writes, punches and truncates shadow,
        // trim and split.
        Op::Write("/A".into(), 0, 65536),
        Op::Create("/B".into()),
        Op::Write("/B".into(), 0, 3000),
        Op::Mkdir("/D".into()),
        Op::Create("/D/C".into()),
        Op::Write("/D/C".into(), 0, 4096),
        Op::Mkdir("/F".into()),
    ]
}

/// The operations, each with the path its persistence point reaches.
pub fn operations() -> Vec<(Op, &'static str)> {
    let s = |x: &str| x.to_string();
    vec![
        (Op::Create(s("/D/N")), "/D/N"),
        (Op::Write(s("/A"), 4096, 8192), "/A"),
        (Op::Append(s("/B"), 5000), "/B"),
        (Op::Truncate(s("/A"), 1000), "/A"),
        (Op::Punch(s("/A"), 0, 4096), "/A"),
        (Op::Falloc(s("/B"), 0, 16384, false), "/B"),
        (Op::Unlink(s("/A")), "/"),
        (Op::Rename(s("/A"), s("/D/C"), RenameMode::Replace), "/D/C"),
        (Op::Rename(s("/B"), s("/D/M"), RenameMode::Replace), "/D/M"),
        (Op::Rename(s("/A"), s("/B"), RenameMode::Exchange), "/B"),
        (Op::Link(s("/A"), s("/D/L")), "/D/L"),
        (Op::Symlink(s("/A"), s("/S")), "/"),
        (Op::Mkdir(s("/E")), "/E"),
        (Op::Rmdir(s("/F")), "/"),
        (Op::Rename(s("/D"), s("/F/D"), RenameMode::Replace), "/F/D"),
        (Op::SetXattr(s("/A"), s("user.k"), s("v")), "/A"),
        (Op::Chmod(s("/A"), 0o600), "/A"),
        // A long write: an extent made (and trimming /B's block) inside the window.
        (Op::Write(s("/B"), 0, 40960), "/B"),
    ]
}

fn persistence(kind: usize, path: &str) -> Op {
    match kind {
        0 => Op::Fsync(path.into()),
        1 => Op::Fdatasync(path.into()),
        _ => Op::Sync,
    }
}

const POINTS: [&str; 3] = ["fsync", "fdatasync", "sync"];

/// Every sequence of `len` operations (1 or 2), each followed by each persistence point,
/// with `domains` domains.
pub fn sequences(len: usize, domains: u32) -> Vec<Workload> {
    assert!((1..=2).contains(&len), "sequences of 1 or 2 operations");
    let ops = operations();
    let setup: Vec<Step> = setup().into_iter().map(|op| Step { line: 0, op }).collect();
    let mut out = Vec::new();
    let mut choose = vec![(0usize, 0usize); len];
    loop {
        let mut steps = Vec::new();
        let mut name = format!("seq-d{domains}");
        for &(op, point) in &choose {
            let (o, target) = &ops[op];
            steps.push(Step {
                line: 0,
                op: o.clone(),
            });
            steps.push(Step {
                line: 0,
                op: persistence(point, target),
            });
            name.push_str(&format!("-{op}{}", POINTS[point]));
        }
        out.push(Workload {
            name,
            domains,
            setup: setup.clone(),
            steps,
        });
        // Next combination (odometer).
        let mut i = len;
        loop {
            if i == 0 {
                return out;
            }
            i -= 1;
            choose[i].1 += 1;
            if choose[i].1 < POINTS.len() {
                break;
            }
            choose[i].1 = 0;
            choose[i].0 += 1;
            if choose[i].0 < ops.len() {
                break;
            }
            choose[i].0 = 0;
        }
    }
}
