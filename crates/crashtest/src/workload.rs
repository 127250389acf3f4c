//! The crash-workload text format (docs/TESTING.md "Crash workloads"): one operation per
//! line, `#` starts a comment, blank lines are ignored.
//!
//! ```text
//! domains 1          # optional header: domain count of the image (default 1)
//! mkdir /d           # setup: not recorded, made durable by a sync before `begin`
//! create /d/f
//! begin              # optional: everything after it is recorded and crashed
//! write /d/f 0 8192  # OFFSET LEN: a deterministic pattern (at most 1 MiB per write)
//! fsync /d/f
//! ```
//!
//! Invariants:
//! - Parsing never panics; an error names the line and what was expected.
//! - `Display` prints a workload back in this format, so a generated workload that fails
//!   can be saved and replayed with `augefs crashtest FILE`.

use std::fmt;

/// Largest write: one atomic batch (docs/SEMANTICS.md §1).
pub const WRITE_MAX_BYTES: u64 = 1 << 20;
/// Largest domain count a workload may ask for.
pub const DOMAINS_MAX: u32 = 8;

/// One operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// An empty regular file (open with O_CREAT, mode 0644).
    Create(String),
    Mkdir(String),
    /// `write PATH OFFSET LEN`: LEN bytes of a pattern that depends on the offset and
    /// the step, so misplaced or stale blocks never compare equal.
    Write(String, u64, u64),
    /// `append PATH LEN`: a write at the current end.
    Append(String, u64),
    Truncate(String, u64),
    /// `punch PATH OFFSET LEN` (fallocate PUNCH_HOLE | KEEP_SIZE).
    Punch(String, u64, u64),
    /// `falloc PATH OFFSET LEN [keep]`.
    Falloc(String, u64, u64, bool),
    Unlink(String),
    Rmdir(String),
    /// `rename FROM TO [noreplace|exchange]`.
    Rename(String, String, vfs::RenameMode),
    Link(String, String),
    /// `symlink TARGET PATH`.
    Symlink(String, String),
    /// `setxattr PATH NAME VALUE`.
    SetXattr(String, String, String),
    RemoveXattr(String, String),
    /// `chmod PATH OCTAL`.
    Chmod(String, u32),
    Fsync(String),
    Fdatasync(String),
    Sync,
}

impl Op {
    /// Whether the operation asks for durability (fsync, fdatasync, sync).
    pub fn is_persistence_point(&self) -> bool {
        matches!(self, Op::Fsync(_) | Op::Fdatasync(_) | Op::Sync)
    }
}

/// One line of a workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// 1-based line in the source (0 for generated steps).
    pub line: usize,
    pub op: Op,
}

/// A parsed workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workload {
    pub name: String,
    pub domains: u32,
    /// Run, then made durable by a sync, before recording starts.
    pub setup: Vec<Step>,
    /// Recorded: every crash state of these is checked.
    pub steps: Vec<Step>,
}

/// A workload file that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name}:{line}: {message}")]
pub struct ParseError {
    pub name: String,
    pub line: usize,
    pub message: String,
}

impl Workload {
    /// Parses `text` (named `name` in errors).
    pub fn parse(name: &str, text: &str) -> Result<Workload, ParseError> {
        let mut w = Workload {
            name: name.to_string(),
            domains: 1,
            setup: Vec::new(),
            steps: Vec::new(),
        };
        let mut began = false;
        let mut any_op = false;
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let err = |message: String| ParseError {
                name: name.to_string(),
                line,
                message,
            };
            let words: Vec<&str> = raw
                .split('#')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .collect();
            let Some((&verb, args)) = words.split_first() else {
                continue;
            };
            match verb {
                "domains" => {
                    if any_op {
                        return Err(err("`domains` must come before any operation".into()));
                    }
                    let [n] = args else {
                        return Err(err("usage: domains N".into()));
                    };
                    w.domains = parse_num(n)
                        .filter(|&n| (1..=u64::from(DOMAINS_MAX)).contains(&n))
                        .ok_or_else(|| err(format!("domain count 1..={DOMAINS_MAX}, got {n:?}")))?
                        as u32;
                }
                "begin" => {
                    if began || !args.is_empty() {
                        return Err(err("`begin` (no arguments) at most once".into()));
                    }
                    began = true;
                    w.setup = std::mem::take(&mut w.steps);
                }
                _ => {
                    let op = parse_op(verb, args).map_err(err)?;
                    any_op = true;
                    w.steps.push(Step { line, op });
                }
            }
        }
        if w.steps.is_empty() {
            return Err(ParseError {
                name: name.to_string(),
                line: text.lines().count(),
                message: "no operation to record".into(),
            });
        }
        Ok(w)
    }
}

fn parse_num(s: &str) -> Option<u64> {
    match s.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => {
            let (digits, scale) = match s.as_bytes().last() {
                Some(b'K') => (&s[..s.len() - 1], 1 << 10),
                Some(b'M') => (&s[..s.len() - 1], 1 << 20),
                _ => (s, 1),
            };
            digits.parse::<u64>().ok()?.checked_mul(scale)
        }
    }
}

fn path(s: &str) -> Result<String, String> {
    if !s.starts_with('/') || s.contains("//") || s.split('/').any(|c| c == "." || c == "..") {
        return Err(format!(
            "an absolute path without `.`, `..` or `//`, got {s:?}"
        ));
    }
    Ok(s.to_string())
}

fn parse_op(verb: &str, args: &[&str]) -> Result<Op, String> {
    let num = |s: &str| parse_num(s).ok_or_else(|| format!("a number, got {s:?}"));
    let usage = |u: &str| Err(format!("usage: {verb} {u}"));
    let op = match (verb, args) {
        ("create", [p]) => Op::Create(path(p)?),
        ("mkdir", [p]) => Op::Mkdir(path(p)?),
        ("write", [p, off, len]) => Op::Write(path(p)?, num(off)?, num(len)?),
        ("write", _) => return usage("PATH OFFSET LEN"),
        ("append", [p, len]) => Op::Append(path(p)?, num(len)?),
        ("append", _) => return usage("PATH LEN"),
        ("truncate", [p, size]) => Op::Truncate(path(p)?, num(size)?),
        ("truncate", _) => return usage("PATH SIZE"),
        ("punch", [p, off, len]) => Op::Punch(path(p)?, num(off)?, num(len)?),
        ("punch", _) => return usage("PATH OFFSET LEN"),
        ("falloc", [p, off, len]) => Op::Falloc(path(p)?, num(off)?, num(len)?, false),
        ("falloc", [p, off, len, "keep"]) => Op::Falloc(path(p)?, num(off)?, num(len)?, true),
        ("falloc", _) => return usage("PATH OFFSET LEN [keep]"),
        ("unlink", [p]) => Op::Unlink(path(p)?),
        ("rmdir", [p]) => Op::Rmdir(path(p)?),
        ("rename", [a, b]) => Op::Rename(path(a)?, path(b)?, vfs::RenameMode::Replace),
        ("rename", [a, b, "noreplace"]) => {
            Op::Rename(path(a)?, path(b)?, vfs::RenameMode::NoReplace)
        }
        ("rename", [a, b, "exchange"]) => Op::Rename(path(a)?, path(b)?, vfs::RenameMode::Exchange),
        ("rename", _) => return usage("FROM TO [noreplace|exchange]"),
        ("link", [a, b]) => Op::Link(path(a)?, path(b)?),
        ("symlink", [t, p]) => Op::Symlink(t.to_string(), path(p)?),
        ("setxattr", [p, n, v]) => Op::SetXattr(path(p)?, n.to_string(), v.to_string()),
        ("setxattr", _) => return usage("PATH NAME VALUE"),
        ("removexattr", [p, n]) => Op::RemoveXattr(path(p)?, n.to_string()),
        ("chmod", [p, m]) => Op::Chmod(
            path(p)?,
            u32::from_str_radix(m, 8)
                .ok()
                .filter(|&m| m <= 0o7777)
                .ok_or_else(|| format!("an octal mode, got {m:?}"))?,
        ),
        ("fsync", [p]) => Op::Fsync(path(p)?),
        ("fdatasync", [p]) => Op::Fdatasync(path(p)?),
        ("sync", []) => Op::Sync,
        (
            "create" | "mkdir" | "unlink" | "rmdir" | "fsync" | "fdatasync" | "link" | "symlink"
            | "removexattr" | "chmod" | "sync",
            _,
        ) => return Err(format!("wrong number of arguments for {verb}")),
        _ => return Err(format!("unknown operation {verb:?}")),
    };
    match &op {
        Op::Write(_, _, len) | Op::Append(_, len) if *len == 0 || *len > WRITE_MAX_BYTES => {
            Err(format!("a write of 1..={WRITE_MAX_BYTES} bytes"))
        }
        Op::Punch(_, off, len) | Op::Falloc(_, off, len, _)
            if *len == 0 || off.checked_add(*len).is_none() =>
        {
            Err("a non-empty range".into())
        }
        Op::Falloc(_, _, len, _) if *len > WRITE_MAX_BYTES => {
            Err(format!("an allocation of at most {WRITE_MAX_BYTES} bytes"))
        }
        _ => Ok(op),
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Create(p) => write!(f, "create {p}"),
            Op::Mkdir(p) => write!(f, "mkdir {p}"),
            Op::Write(p, o, l) => write!(f, "write {p} {o} {l}"),
            Op::Append(p, l) => write!(f, "append {p} {l}"),
            Op::Truncate(p, s) => write!(f, "truncate {p} {s}"),
            Op::Punch(p, o, l) => write!(f, "punch {p} {o} {l}"),
            Op::Falloc(p, o, l, keep) => {
                write!(f, "falloc {p} {o} {l}{}", if *keep { " keep" } else { "" })
            }
            Op::Unlink(p) => write!(f, "unlink {p}"),
            Op::Rmdir(p) => write!(f, "rmdir {p}"),
            Op::Rename(a, b, mode) => write!(
                f,
                "rename {a} {b}{}",
                match mode {
                    vfs::RenameMode::Replace => "",
                    vfs::RenameMode::NoReplace => " noreplace",
                    vfs::RenameMode::Exchange => " exchange",
                }
            ),
            Op::Link(a, b) => write!(f, "link {a} {b}"),
            Op::Symlink(t, p) => write!(f, "symlink {t} {p}"),
            Op::SetXattr(p, n, v) => write!(f, "setxattr {p} {n} {v}"),
            Op::RemoveXattr(p, n) => write!(f, "removexattr {p} {n}"),
            Op::Chmod(p, m) => write!(f, "chmod {p} {m:o}"),
            Op::Fsync(p) => write!(f, "fsync {p}"),
            Op::Fdatasync(p) => write!(f, "fdatasync {p}"),
            Op::Sync => write!(f, "sync"),
        }
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "# {}", self.name)?;
        writeln!(f, "domains {}", self.domains)?;
        for s in &self.setup {
            writeln!(f, "{}", s.op)?;
        }
        if !self.setup.is_empty() {
            writeln!(f, "begin")?;
        }
        for s in &self.steps {
            writeln!(f, "{}", s.op)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_back() {
        let text = "domains 2\nmkdir /d # setup\ncreate /d/f\nbegin\n\nwrite /d/f 0 8K\nrename /d/f /g exchange\nchmod /g 0644\nfalloc /g 0 4096 keep\nfsync /g\nsync\n";
        let w = Workload::parse("t", text).unwrap();
        assert_eq!(w.domains, 2);
        assert_eq!(w.setup.len(), 2);
        assert_eq!(w.steps[0].op, Op::Write("/d/f".into(), 0, 8192));
        assert_eq!(w.steps[0].line, 6);
        let again = Workload::parse("t", &w.to_string()).unwrap();
        assert_eq!(
            again.steps.iter().map(|s| &s.op).collect::<Vec<_>>(),
            w.steps.iter().map(|s| &s.op).collect::<Vec<_>>()
        );
        assert_eq!(again.setup.len(), 2);
    }

    #[test]
    fn errors_name_the_line() {
        let bad = [
            ("create\n", 1, "wrong number"),
            ("sync\nfrobnicate /a\n", 2, "unknown operation"),
            ("write /a 0 0\n", 1, "a write of"),
            ("write /a 0 2M\n", 1, "a write of"),
            ("create a\n", 1, "absolute path"),
            ("create /a/../b\n", 1, "absolute path"),
            ("sync\ndomains 2\n", 2, "before any operation"),
            ("domains 99\nsync\n", 1, "domain count"),
            ("chmod /a 999\n", 1, "octal"),
            ("begin\nbegin\n", 2, "at most once"),
            ("# nothing\n", 1, "no operation"),
        ];
        for (text, line, what) in bad {
            let e = Workload::parse("w", text).unwrap_err();
            assert_eq!(e.line, line, "{text:?}: {e}");
            assert!(e.message.contains(what), "{text:?}: {e}");
        }
    }
}
