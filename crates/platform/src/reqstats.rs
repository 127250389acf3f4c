//! Where a front end's time goes: per opcode, how many requests came and, when asked
//! (`augefs mount -o stats`), the wall and CPU time their handling took, and per
//! request thread the CPU time it spent in all (the rest of it is the transport:
//! reading requests and writing replies). The FUSE session and the instance each keep
//! one and print it at unmount (docs/DESIGN.md §11.1, §12.5; what they showed:
//! docs/BENCHMARKS.md §6, §7).
//!
//! Invariants:
//! - A request thread owns its [`ThreadStats`] (no sharing, no atomics on the request
//!   path) and merges it into the session's [`Stats`] once, when it ends.
//! - Counting costs an array increment; timing (two clock reads of each kind per
//!   request, the thread CPU clock being a system call) only runs when asked for.

use std::fmt::Write as _;
use std::sync::Mutex;

/// Opcodes below this have a row of their own (every opcode either front end has is).
const OPCODES: usize = 64;

#[derive(Debug, Clone, Copy, Default)]
struct Cell {
    count: u64,
    wall_ns: u64,
    cpu_ns: u64,
}

/// One table of figures: a thread's, or the merged ones of a session.
#[derive(Debug, Clone)]
pub struct Table {
    ops: [Cell; OPCODES],
    other: Cell,
    /// CPU time of the request threads, from their start to their end.
    thread_cpu_ns: u64,
    threads: u32,
}

impl Default for Table {
    fn default() -> Self {
        Table {
            ops: [Cell::default(); OPCODES],
            other: Cell::default(),
            thread_cpu_ns: 0,
            threads: 0,
        }
    }
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into `ts`, which is live.
    let r = unsafe { libc::clock_gettime(clock, &mut ts) };
    assert_eq!(r, 0, "clock_gettime({clock})");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The calling thread's CPU time.
fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// When a timed request began.
#[derive(Debug, Clone, Copy)]
pub struct Stamp {
    wall_ns: u64,
    cpu_ns: u64,
}

/// One request thread's figures.
#[derive(Debug)]
pub struct ThreadStats {
    table: Table,
    timing: bool,
    cpu_start_ns: u64,
}

impl ThreadStats {
    pub fn new(timing: bool) -> ThreadStats {
        ThreadStats {
            table: Table::default(),
            timing,
            cpu_start_ns: if timing { thread_cpu_ns() } else { 0 },
        }
    }

    /// A request begins: a stamp if timing.
    pub fn begin(&self) -> Option<Stamp> {
        self.timing.then(|| Stamp {
            wall_ns: clock_ns(libc::CLOCK_MONOTONIC),
            cpu_ns: thread_cpu_ns(),
        })
    }

    /// A request of `op` ended (begun at `stamp`).
    pub fn end(&mut self, op: u32, stamp: Option<Stamp>) {
        let cell = match self.table.ops.get_mut(op as usize) {
            Some(c) => c,
            None => &mut self.table.other,
        };
        cell.count += 1;
        if let Some(s) = stamp {
            cell.wall_ns += clock_ns(libc::CLOCK_MONOTONIC).saturating_sub(s.wall_ns);
            cell.cpu_ns += thread_cpu_ns().saturating_sub(s.cpu_ns);
        }
    }

    /// Requests counted so far (tests).
    pub fn requests(&self) -> u64 {
        self.table.ops.iter().map(|c| c.count).sum::<u64>() + self.table.other.count
    }
}

/// A session's figures, merged from its threads as they end.
#[derive(Debug)]
pub struct Stats {
    timing: bool,
    /// What the requests are (the report's title: "FUSE requests").
    what: &'static str,
    /// An opcode's name.
    name: fn(u32) -> String,
    merged: Mutex<Table>,
    transport: Mutex<&'static str>,
}

impl Stats {
    /// Figures of `what` (named by `name`), served over `transport` unless said
    /// otherwise; with `timing`, the wall and CPU time of each request too.
    pub fn new(
        timing: bool,
        what: &'static str,
        transport: &'static str,
        name: fn(u32) -> String,
    ) -> Stats {
        Stats {
            timing,
            what,
            name,
            merged: Mutex::new(Table::default()),
            transport: Mutex::new(transport),
        }
    }

    /// Whether requests are timed.
    pub fn timing(&self) -> bool {
        self.timing
    }

    /// Names the transport that served the session.
    pub fn set_transport(&self, name: &'static str) {
        *self.transport.lock().expect("stats lock") = name;
    }

    /// The transport that served the session.
    pub fn transport(&self) -> &'static str {
        *self.transport.lock().expect("stats lock")
    }

    /// A table for a request thread starting now.
    pub fn thread(&self) -> ThreadStats {
        ThreadStats::new(self.timing)
    }

    /// A request thread ends: its figures join the session's.
    pub fn merge(&self, mut t: ThreadStats) {
        if t.timing {
            t.table.thread_cpu_ns = thread_cpu_ns().saturating_sub(t.cpu_start_ns);
        }
        let mut m = self.merged.lock().expect("stats lock");
        for (a, b) in m.ops.iter_mut().zip(t.table.ops.iter()) {
            add(a, b);
        }
        add(&mut m.other, &t.table.other);
        m.thread_cpu_ns += t.table.thread_cpu_ns;
        m.threads += 1;
    }

    /// Requests of `op` counted so far (by threads that ended).
    pub fn count(&self, op: u32) -> u64 {
        let m = self.merged.lock().expect("stats lock");
        m.ops.get(op as usize).map_or(m.other.count, |c| c.count)
    }

    /// The table as text: one line per opcode seen, busiest first.
    pub fn report(&self) -> String {
        let transport = self.transport();
        let m = self.merged.lock().expect("stats lock").clone();
        let mut rows: Vec<(u32, Cell)> = (0..OPCODES as u32)
            .map(|op| (op, m.ops[op as usize]))
            .filter(|(_, c)| c.count > 0)
            .collect();
        if m.other.count > 0 {
            rows.push((u32::MAX, m.other));
        }
        rows.sort_by_key(|(_, c)| std::cmp::Reverse((c.cpu_ns, c.count)));
        let total: u64 = rows.iter().map(|(_, c)| c.count).sum();
        let handled_cpu: u64 = rows.iter().map(|(_, c)| c.cpu_ns).sum();
        let mut s = format!(
            "augefs: {} over {transport}: {total} on {} thread(s)\n",
            self.what, m.threads
        );
        let _ = writeln!(
            s,
            "  {:<14} {:>10} {:>12} {:>12} {:>10}",
            "opcode", "requests", "wall us/req", "CPU us/req", "CPU ms"
        );
        let per = |ns: u64, n: u64| ns as f64 / 1000.0 / n.max(1) as f64;
        for (op, c) in rows {
            let label = if op == u32::MAX {
                "others".to_string()
            } else {
                (self.name)(op)
            };
            let _ = writeln!(
                s,
                "  {:<14} {:>10} {:>12.1} {:>12.1} {:>10.1}",
                label,
                c.count,
                per(c.wall_ns, c.count),
                per(c.cpu_ns, c.count),
                c.cpu_ns as f64 / 1e6
            );
        }
        if self.timing {
            let _ = writeln!(
                s,
                "  request threads: {:.1} ms CPU, {:.1} ms of it handling requests, \
                 {:.1} ms in the transport ({:.1} us per request)",
                m.thread_cpu_ns as f64 / 1e6,
                handled_cpu as f64 / 1e6,
                m.thread_cpu_ns.saturating_sub(handled_cpu) as f64 / 1e6,
                per(m.thread_cpu_ns.saturating_sub(handled_cpu), total)
            );
        }
        s
    }
}

fn add(a: &mut Cell, b: &Cell) {
    a.count += b.count;
    a.wall_ns += b.wall_ns;
    a.cpu_ns += b.cpu_ns;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(op: u32) -> String {
        match op {
            1 => "ONE".to_string(),
            2 => "TWO".to_string(),
            _ => format!("opcode {op}"),
        }
    }

    #[test]
    fn threads_merge_and_the_report_lists_what_came() {
        let stats = Stats::new(true, "test requests", "a socket", name);
        let mut a = stats.thread();
        for _ in 0..3 {
            let s = a.begin();
            a.end(1, s);
        }
        let mut b = stats.thread();
        let s = b.begin();
        b.end(2, s);
        b.end(200, None);
        assert_eq!(a.requests() + b.requests(), 5);
        stats.merge(a);
        stats.merge(b);
        assert_eq!(stats.count(1), 3);
        assert_eq!(stats.count(2), 1);
        assert_eq!(stats.count(200), 1);
        let r = stats.report();
        assert!(
            r.contains("test requests over a socket: 5 on 2 thread(s)"),
            "{r}"
        );
        stats.set_transport("io_uring");
        let r = stats.report();
        assert!(r.contains("over io_uring: 5 on 2 thread(s)"), "{r}");
        assert!(r.contains("ONE") && r.contains("others"), "{r}");
        assert!(!r.contains("opcode 3"), "{r}");
    }
}
