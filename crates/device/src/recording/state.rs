//! [`CrashState`]: which writes landed before a crash, in a canonical, printable and
//! parseable form (docs/TESTING.md "Crash images").
//!
//! Invariants:
//! - Two descriptions of the same set of landed writes and blocks are equal values and
//!   print the same text; `text.parse()` of a printed state gives it back.
//! - A torn write is never inside the durable prefix, never also whole, never twice.

use super::WriteId;
use std::fmt;
use std::str::FromStr;
use thiserror::Error;

/// A write of which only some 4 KiB blocks landed. Listing every block gives the image
/// of the whole write but not the same state value; enumeration never does that.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TornWrite {
    pub(super) write: WriteId,
    /// Sorted, distinct, non-empty indices of [`super::RecordedWrite::block_range`].
    pub(super) blocks: Vec<u32>,
}

impl TornWrite {
    pub fn new(write: WriteId, blocks: impl IntoIterator<Item = u32>) -> TornWrite {
        let mut blocks: Vec<u32> = blocks.into_iter().collect();
        blocks.sort_unstable();
        blocks.dedup();
        assert!(!blocks.is_empty(), "a torn write lands at least one block");
        TornWrite { write, blocks }
    }

    pub fn write(&self) -> WriteId {
        self.write
    }

    pub fn blocks(&self) -> &[u32] {
        &self.blocks
    }
}

/// What landed on the device before a crash: the first `durable_writes` writes, some
/// later writes whole, and some later writes torn.
///
/// Canonical, so equal states compare equal: the whole writes beyond the prefix are kept
/// as sorted, disjoint, non-adjacent ranges, none starting at `durable_writes` (such a
/// range extends the prefix). Printed and parsed compactly: `d3 +5 +7-9 ~10[0-1,3]` is
/// writes 0..3, 5, 7 to 9 whole, and blocks 0, 1 and 3 of write 10.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CrashState {
    pub(super) durable_writes: u64,
    /// Half-open ranges of write ids.
    pub(super) landed: Vec<(u64, u64)>,
    /// Sorted by write; none inside the prefix or the ranges.
    pub(super) torn: Vec<TornWrite>,
}

impl CrashState {
    /// The state after exactly the first `durable_writes` writes landed.
    pub fn durable_prefix(durable_writes: u64) -> CrashState {
        CrashState {
            durable_writes,
            landed: Vec::new(),
            torn: Vec::new(),
        }
    }

    /// The first `durable_writes` writes, plus `whole` (ids inside the prefix are
    /// ignored) and `torn`. Panics on a torn write inside the prefix, in `whole`, or twice.
    pub fn new(
        durable_writes: u64,
        whole: impl IntoIterator<Item = WriteId>,
        torn: impl IntoIterator<Item = TornWrite>,
    ) -> CrashState {
        CrashState::try_new(durable_writes, whole, torn)
            .unwrap_or_else(|reason| panic!("invalid crash state: {reason}"))
    }

    fn try_new(
        durable_writes: u64,
        whole: impl IntoIterator<Item = WriteId>,
        torn: impl IntoIterator<Item = TornWrite>,
    ) -> Result<CrashState, &'static str> {
        let mut whole: Vec<u64> = whole
            .into_iter()
            .map(|id| id.0)
            .filter(|&id| id >= durable_writes)
            .collect();
        whole.sort_unstable();
        whole.dedup();
        let mut torn: Vec<TornWrite> = torn.into_iter().collect();
        torn.sort();
        if torn.windows(2).any(|pair| pair[0].write == pair[1].write) {
            return Err("a write is torn twice");
        }
        if torn.iter().any(|t| t.write.0 < durable_writes) {
            return Err("a torn write inside the durable prefix");
        }
        if torn.iter().any(|t| whole.binary_search(&t.write.0).is_ok()) {
            return Err("a write both whole and torn");
        }
        let end = whole.last().map_or(durable_writes, |&last| last + 1);
        Ok(CrashState::from_selection(
            durable_writes,
            end,
            |id| whole.binary_search(&id).is_ok(),
            torn,
        ))
    }

    /// The prefix `0..first`, the ids in `first..end` that `landed` selects, and `torn`
    /// (sorted, outside the selection), in canonical form.
    pub(super) fn from_selection(
        first: u64,
        end: u64,
        landed: impl Fn(u64) -> bool,
        torn: Vec<TornWrite>,
    ) -> CrashState {
        let mut state = CrashState {
            durable_writes: first,
            landed: Vec::new(),
            torn,
        };
        for id in first..end {
            if !landed(id) {
                continue;
            }
            match state.landed.last_mut() {
                Some(range) if range.1 == id => range.1 = id + 1,
                _ if id == state.durable_writes => state.durable_writes = id + 1,
                _ => state.landed.push((id, id + 1)),
            }
        }
        debug_assert!(state
            .torn
            .windows(2)
            .all(|pair| pair[0].write < pair[1].write));
        debug_assert!(state
            .torn
            .iter()
            .all(|t| t.write.0 >= state.durable_writes && !state.includes_whole(t.write)));
        state
    }

    /// How many writes form the landed prefix.
    pub fn durable_writes(&self) -> u64 {
        self.durable_writes
    }

    /// Whether write `id` landed whole (in the prefix or after it).
    pub fn includes_whole(&self, id: WriteId) -> bool {
        id.0 < self.durable_writes
            || self
                .landed
                .iter()
                .any(|&(start, end)| (start..end).contains(&id.0))
    }

    /// Writes beyond the prefix that landed whole, in order.
    pub fn landed_beyond_prefix(&self) -> impl Iterator<Item = WriteId> + '_ {
        self.landed
            .iter()
            .flat_map(|&(start, end)| (start..end).map(WriteId))
    }

    pub fn torn(&self) -> &[TornWrite] {
        &self.torn
    }
}

impl fmt::Display for CrashState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "d{}", self.durable_writes)?;
        let mut torn = self.torn.iter().peekable();
        let mut write_torn_before = |limit: u64, f: &mut fmt::Formatter<'_>| -> fmt::Result {
            while let Some(t) = torn.next_if(|t| t.write.0 < limit) {
                write!(f, " ~{}[", t.write.0)?;
                write_runs(f, t.blocks.iter().map(|&b| u64::from(b)))?;
                write!(f, "]")?;
            }
            Ok(())
        };
        for &(start, end) in &self.landed {
            write_torn_before(start, f)?;
            write!(f, " +")?;
            write_runs(f, start..end)?;
        }
        write_torn_before(u64::MAX, f)
    }
}

/// Writes sorted distinct numbers as comma-separated runs: `0-2,5`.
fn write_runs(f: &mut fmt::Formatter<'_>, numbers: impl Iterator<Item = u64>) -> fmt::Result {
    let mut run: Option<(u64, u64)> = None;
    let mut first = true;
    let mut flush = |run: (u64, u64), f: &mut fmt::Formatter<'_>| -> fmt::Result {
        let separator = if first { "" } else { "," };
        first = false;
        if run.0 == run.1 {
            write!(f, "{separator}{}", run.0)
        } else {
            write!(f, "{separator}{}-{}", run.0, run.1)
        }
    };
    for n in numbers {
        run = match run {
            Some((low, high)) if high + 1 == n => Some((low, n)),
            Some(done) => {
                flush(done, f)?;
                Some((n, n))
            }
            None => Some((n, n)),
        };
    }
    match run {
        Some(done) => flush(done, f),
        None => Ok(()),
    }
}

/// A crash state description that does not parse.
#[derive(Debug, Error)]
#[error("cannot parse crash state {text:?}: {reason}")]
pub struct ParseCrashStateError {
    pub text: String,
    pub reason: &'static str,
}

impl FromStr for CrashState {
    type Err = ParseCrashStateError;

    fn from_str(text: &str) -> Result<CrashState, ParseCrashStateError> {
        let error = |reason| ParseCrashStateError {
            text: text.to_string(),
            reason,
        };
        let mut tokens = text.split_whitespace();
        let durable = tokens
            .next()
            .and_then(|t| t.strip_prefix('d'))
            .and_then(|n| n.parse::<u64>().ok())
            .ok_or_else(|| error("expected d<durable writes> first"))?;
        let (mut whole, mut torn) = (Vec::new(), Vec::new());
        for token in tokens {
            if let Some(runs) = token.strip_prefix('+') {
                whole.extend(
                    parse_runs(runs)
                        .ok_or_else(|| error("bad +<writes>"))?
                        .into_iter()
                        .map(WriteId),
                );
            } else if let Some(rest) = token.strip_prefix('~') {
                let (write, blocks) = rest
                    .strip_suffix(']')
                    .and_then(|r| r.split_once('['))
                    .ok_or_else(|| error("expected ~<write>[<blocks>]"))?;
                let write = write
                    .parse::<u64>()
                    .map_err(|_| error("bad torn write id"))?;
                let blocks = parse_runs(blocks).ok_or_else(|| error("bad torn blocks"))?;
                let blocks: Option<Vec<u32>> =
                    blocks.into_iter().map(|b| u32::try_from(b).ok()).collect();
                let blocks = blocks
                    .filter(|b| !b.is_empty())
                    .ok_or_else(|| error("bad torn blocks"))?;
                torn.push(TornWrite::new(WriteId(write), blocks));
            } else {
                return Err(error("expected +<writes> or ~<write>[<blocks>]"));
            }
        }
        CrashState::try_new(durable, whole, torn).map_err(error)
    }
}

/// Parses `0-2,5` into `[0, 1, 2, 5]`; `None` if malformed or a run is reversed.
fn parse_runs(text: &str) -> Option<Vec<u64>> {
    let mut numbers = Vec::new();
    for run in text.split(',') {
        let (low, high) = match run.split_once('-') {
            Some((low, high)) => (low.parse::<u64>().ok()?, high.parse::<u64>().ok()?),
            None => {
                let n = run.parse::<u64>().ok()?;
                (n, n)
            }
        };
        if low > high {
            return None;
        }
        numbers.extend(low..=high);
    }
    Some(numbers)
}
