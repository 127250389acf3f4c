//! Parsing the crash-workload format (the grammar is in `workload.rs` and docs/TESTING.md
//! §2a).
//!
//! Invariants:
//! - Never panics; an error names the line and what was expected.
//! - A descriptor is used only while open (`open` before, no `close` between), and the
//!   setup leaves none open (its remount would close them).

use super::{
    parse_errno, NodeKind, Op, Step, Target, Workload, WriteMode, DIR_MODE_DEFAULT, DOMAINS_MAX,
    FILE_MODE_DEFAULT, WRITE_MAX_BYTES,
};
use std::collections::BTreeSet;

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
        let mut open = BTreeSet::new();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let err = |message: String| ParseError {
                name: name.to_string(),
                line,
                message,
            };
            let mut words: Vec<&str> = raw
                .split('#')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .collect();
            let expect = split_expect(&mut words).map_err(err)?;
            let Some((&verb, args)) = words.split_first() else {
                if expect.is_some() {
                    return Err(err("`expect` follows an operation".into()));
                }
                continue;
            };
            match verb {
                "domains" | "begin" if expect.is_some() => {
                    return Err(err(format!("`{verb}` cannot expect an error")));
                }
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
                    if let Some(fd) = open.first() {
                        return Err(err(format!(
                            "descriptor {fd} is still open: the setup's remount would close it"
                        )));
                    }
                    began = true;
                    w.setup = std::mem::take(&mut w.steps);
                }
                _ => {
                    let op = parse_op(verb, args).map_err(err)?;
                    track_descriptors(&op, &mut open).map_err(err)?;
                    any_op = true;
                    w.steps.push(Step { line, op, expect });
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

/// Takes a trailing `expect ERRNO` off a line's words.
fn split_expect(words: &mut Vec<&str>) -> Result<Option<i32>, String> {
    let [.., "expect", errno] = words[..] else {
        return Ok(None);
    };
    let errno =
        parse_errno(errno).ok_or_else(|| format!("an errno name or number, got {errno:?}"))?;
    words.truncate(words.len() - 2);
    Ok(Some(errno))
}

/// Keeps `open` (the descriptors open after the lines so far) up to date with `op`;
/// an error for a descriptor used while not open, or opened twice.
fn track_descriptors(op: &Op, open: &mut BTreeSet<String>) -> Result<(), String> {
    match op {
        Op::Open(name, _) => {
            if !open.insert(name.clone()) {
                return Err(format!("descriptor {name} is open already"));
            }
        }
        Op::Close(name) => {
            if !open.remove(name) {
                return Err(format!("descriptor {name} is not open"));
            }
        }
        _ => {
            if let Some(Target::Fd(name)) = op.target() {
                if !open.contains(name) {
                    return Err(format!("descriptor @{name} is not open"));
                }
            }
        }
    }
    Ok(())
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

fn descriptor_name(s: &str) -> Result<String, String> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Err(format!(
            "a descriptor name of letters, digits and `_`, got {s:?}"
        ));
    }
    Ok(s.to_string())
}

fn target(s: &str) -> Result<Target, String> {
    match s.strip_prefix('@') {
        Some(name) => Ok(Target::Fd(descriptor_name(name)?)),
        None => Ok(Target::Path(path(s)?)),
    }
}

fn mode(s: &str) -> Result<u32, String> {
    u32::from_str_radix(s, 8)
        .ok()
        .filter(|&m| m <= 0o7777)
        .ok_or_else(|| format!("an octal mode, got {s:?}"))
}

/// `MAJOR:MINOR` (decimal) as a `dev_t`, within what mknod(2) carries.
fn device(s: &str) -> Result<u64, String> {
    let bad = || format!("MAJOR:MINOR with major < 4096 and minor < 2^20, got {s:?}");
    let (major, minor) = s.split_once(':').ok_or_else(bad)?;
    let (major, minor) = (
        major.parse::<u32>().map_err(|_| bad())?,
        minor.parse::<u32>().map_err(|_| bad())?,
    );
    let dev = libc::makedev(major, minor);
    vfs::records::rdev_of(dev).ok_or_else(bad)?;
    Ok(dev)
}

fn write_mode(s: &str) -> Result<WriteMode, String> {
    match s {
        "sync" => Ok(WriteMode::Sync),
        "dsync" => Ok(WriteMode::Dsync),
        "direct" => Ok(WriteMode::Direct),
        _ => Err(format!("sync, dsync or direct, got {s:?}")),
    }
}

fn parse_op(verb: &str, args: &[&str]) -> Result<Op, String> {
    let num = |s: &str| parse_num(s).ok_or_else(|| format!("a number, got {s:?}"));
    let usage = |u: &str| Err(format!("usage: {verb} {u}"));
    let op = match (verb, args) {
        ("create", [p]) => Op::Create(path(p)?, FILE_MODE_DEFAULT),
        ("create", [p, m]) => Op::Create(path(p)?, mode(m)?),
        ("create", _) => return usage("PATH [MODE]"),
        ("mkdir", [p]) => Op::Mkdir(path(p)?, DIR_MODE_DEFAULT),
        ("mkdir", [p, m]) => Op::Mkdir(path(p)?, mode(m)?),
        ("mkdir", _) => return usage("PATH [MODE]"),
        ("mknod", [p, kind, rest @ ..]) if rest.len() <= 2 => {
            let kind = NodeKind::NAMES
                .iter()
                .find(|n| n.0 == *kind)
                .ok_or_else(|| format!("reg, fifo, chr, blk or sock, got {kind:?}"))?
                .1;
            let (devs, modes): (Vec<&&str>, Vec<&&str>) =
                rest.iter().partition(|a| a.contains(':'));
            if devs.len() > 1 || modes.len() > 1 {
                return usage("PATH reg|fifo|chr|blk|sock [MODE] [MAJOR:MINOR]");
            }
            let m = modes.first().map_or(Ok(FILE_MODE_DEFAULT), |m| mode(m))?;
            let dev = devs.first().map_or(Ok(0), |d| device(d))?;
            Op::Mknod(path(p)?, kind, m, dev)
        }
        ("mknod", _) => return usage("PATH reg|fifo|chr|blk|sock [MODE] [MAJOR:MINOR]"),
        ("write", [t, off, len]) => {
            Op::Write(target(t)?, num(off)?, num(len)?, WriteMode::Buffered)
        }
        ("write", [t, off, len, m]) => Op::Write(target(t)?, num(off)?, num(len)?, write_mode(m)?),
        ("write", _) => return usage("TARGET OFFSET LEN [sync|dsync|direct]"),
        ("append", [t, len]) => Op::Append(target(t)?, num(len)?, WriteMode::Buffered),
        ("append", [t, len, m]) => Op::Append(target(t)?, num(len)?, write_mode(m)?),
        ("append", _) => return usage("TARGET LEN [sync|dsync|direct]"),
        ("truncate", [t, size]) => Op::Truncate(target(t)?, num(size)?),
        ("truncate", _) => return usage("TARGET SIZE"),
        ("punch", [t, off, len]) => Op::Punch(target(t)?, num(off)?, num(len)?),
        ("punch", _) => return usage("TARGET OFFSET LEN"),
        ("falloc" | "zero", [t, off, len, rest @ ..]) if rest.len() <= 1 => {
            let keep = match rest {
                [] => false,
                ["keep"] => true,
                _ => return usage("TARGET OFFSET LEN [keep]"),
            };
            let (t, off, len) = (target(t)?, num(off)?, num(len)?);
            if verb == "zero" {
                Op::Zero(t, off, len, keep)
            } else {
                Op::Falloc(t, off, len, keep)
            }
        }
        ("falloc" | "zero", _) => return usage("TARGET OFFSET LEN [keep]"),
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
        ("setxattr", [t, n, v]) => Op::SetXattr(target(t)?, n.to_string(), v.to_string()),
        ("setxattr", _) => return usage("TARGET NAME VALUE"),
        ("removexattr", [t, n]) => Op::RemoveXattr(target(t)?, n.to_string()),
        ("chmod", [t, m]) => Op::Chmod(target(t)?, mode(m)?),
        ("open", [name, p]) => Op::Open(descriptor_name(name)?, path(p)?),
        ("open", _) => return usage("NAME PATH"),
        ("close", [name]) => Op::Close(descriptor_name(name)?),
        ("fsync", [t]) => Op::Fsync(target(t)?),
        ("fdatasync", [t]) => Op::Fdatasync(target(t)?),
        ("sync", []) => Op::Sync,
        (
            "unlink" | "rmdir" | "fsync" | "fdatasync" | "link" | "symlink" | "removexattr"
            | "chmod" | "close" | "sync",
            _,
        ) => return Err(format!("wrong number of arguments for {verb}")),
        _ => return Err(format!("unknown operation {verb:?}")),
    };
    check_sizes(op)
}

fn check_sizes(op: Op) -> Result<Op, String> {
    match &op {
        Op::Write(_, _, len, _) | Op::Append(_, len, _) if *len == 0 || *len > WRITE_MAX_BYTES => {
            Err(format!("a write of 1..={WRITE_MAX_BYTES} bytes"))
        }
        Op::Punch(_, off, len) | Op::Falloc(_, off, len, _) | Op::Zero(_, off, len, _)
            if *len == 0 || off.checked_add(*len).is_none() =>
        {
            Err("a non-empty range".into())
        }
        Op::Falloc(_, _, len, _) | Op::Zero(_, _, len, _) if *len > WRITE_MAX_BYTES => {
            Err(format!("a range of at most {WRITE_MAX_BYTES} bytes"))
        }
        _ => Ok(op),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_back() {
        let text = "domains 2\nmkdir /d 700 # setup\ncreate /d/f\nbegin\n\nwrite /d/f 0 8K\n\
                    rename /d/f /g exchange\nchmod /g 0644\nfalloc /g 0 4096 keep\n\
                    zero /g 100 5000\nzero /g 0 4096 keep\nmknod /p fifo 600 expect EEXIST\n\
                    create /q 600\nopen h /g\nunlink /g\nwrite @h 0 4096 sync\n\
                    append @h 10 dsync\nwrite /q 0 1 direct\nfsync @h\nclose h\n\
                    unlink /g expect ENOENT\nsync\n";
        let w = Workload::parse("t", text).unwrap();
        assert_eq!(w.domains, 2);
        assert_eq!(w.setup.len(), 2);
        assert_eq!(w.setup[0].op, Op::Mkdir("/d".into(), 0o700));
        assert_eq!(
            w.steps[0].op,
            Op::Write(Target::Path("/d/f".into()), 0, 8192, WriteMode::Buffered)
        );
        assert_eq!(w.steps[0].line, 6);
        assert_eq!(w.steps[6].expect, Some(libc::EEXIST));
        assert_eq!(
            w.steps[10].op,
            Op::Write(Target::Fd("h".into()), 0, 4096, WriteMode::Sync)
        );
        assert!(w.steps[10].op.is_persistence_point());
        assert!(!w.steps[12].op.is_persistence_point(), "direct");
        let again = Workload::parse("t", &w.to_string()).unwrap();
        assert_eq!(again.steps.len(), w.steps.len());
        for (a, b) in again.steps.iter().zip(&w.steps) {
            assert_eq!((&a.op, a.expect), (&b.op, b.expect));
        }
        assert_eq!(again.setup.len(), 2);
        let dev = libc::makedev(8, 300);
        let w = Workload::parse("t", "mknod /b blk 8:300 600\nmknod /c chr\n").unwrap();
        assert_eq!(
            w.steps[0].op,
            Op::Mknod("/b".into(), NodeKind::Block, 0o600, dev)
        );
        assert_eq!(
            w.steps[1].op,
            Op::Mknod("/c".into(), NodeKind::Char, 0o644, 0)
        );
        assert_eq!(w.steps[0].op.to_string(), "mknod /b blk 600 8:300");
        let again = Workload::parse("t", &w.to_string()).unwrap();
        assert_eq!(again.steps[0].op, w.steps[0].op);
    }

    #[test]
    fn errors_name_the_line() {
        let bad = [
            ("create\n", 1, "usage: create"),
            ("sync\nfrobnicate /a\n", 2, "unknown operation"),
            ("write /a 0 0\n", 1, "a write of"),
            ("write /a 0 2M\n", 1, "a write of"),
            ("write /a 0 1 often\n", 1, "sync, dsync or direct"),
            ("zero /a 0 2M\n", 1, "at most"),
            ("create a\n", 1, "absolute path"),
            ("create /a/../b\n", 1, "absolute path"),
            ("sync\ndomains 2\n", 2, "before any operation"),
            ("domains 99\nsync\n", 1, "domain count"),
            ("chmod /a 999\n", 1, "octal"),
            ("begin\nbegin\n", 2, "at most once"),
            ("# nothing\n", 1, "no operation"),
            ("sync expect ENOPE\n", 1, "errno"),
            ("begin expect ENOENT\nsync\n", 1, "cannot expect"),
            ("write @h 0 1\n", 1, "not open"),
            ("open h /a\nclose h\nfsync @h\n", 3, "not open"),
            ("open h /a\nopen h /b\n", 2, "open already"),
            ("open h /a\nbegin\nsync\n", 2, "still open"),
            ("mknod /a pipe\n", 1, "reg, fifo"),
            ("mknod /a chr 4096:0\n", 1, "MAJOR:MINOR"),
            ("mknod /a chr 1:2 3:4\n", 1, "usage: mknod"),
            ("open h-1 /a\n", 1, "descriptor name"),
        ];
        for (text, line, what) in bad {
            let e = Workload::parse("w", text).unwrap_err();
            assert_eq!(e.line, line, "{text:?}: {e}");
            assert!(e.message.contains(what), "{text:?}: {e}");
        }
    }
}
