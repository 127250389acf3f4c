//! CPU time spent by processes, for the benchmarks' "CPU time per operation": this
//! process (every thread, background threads of an in-process file system included)
//! and another one (a FUSE daemon) by its pid.
//!
//! Invariants:
//! - Times are user + system, in nanoseconds, and only grow: a benchmark reads them
//!   before and after what it measures and reports the difference.
//! - Work the kernel does in its own threads (journal commits, loop-device workers,
//!   write-back) belongs to no process here and is not counted.

/// User + system CPU time of this process so far (getrusage(RUSAGE_SELF)).
pub fn self_ns() -> u64 {
    // SAFETY: struct rusage is plain integers, for which all zeros is valid.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a struct rusage to fill that outlives the call.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    assert_eq!(rc, 0, "getrusage(RUSAGE_SELF) cannot fail");
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1_000;
    ns(usage.ru_utime) + ns(usage.ru_stime)
}

/// User + system CPU time of process `pid` so far (`/proc/<pid>/stat`), if it runs.
pub fn process_ns(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat_ns(&stat, ticks_per_sec())
}

fn ticks_per_sec() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    assert!(ticks > 0, "the clock tick is known");
    ticks as u64
}

/// Fields 14 and 15 of a stat line (utime, stime, in clock ticks), counted after the
/// command name, which may hold spaces and parentheses.
fn parse_stat_ns(stat: &str, ticks_per_sec: u64) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(") ")?;
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) * 1_000_000_000 / ticks_per_sec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_are_read_after_the_name() {
        let line = "42 (a b) c) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0";
        assert_eq!(parse_stat_ns(line, 100), Some(3_000_000_000));
        assert_eq!(parse_stat_ns("42 (x) S 1", 100), None);
        let before = self_ns();
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        assert!(self_ns() >= before);
        assert!(process_ns(std::process::id()).is_some());
    }
}
