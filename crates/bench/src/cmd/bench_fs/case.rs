//! The workloads of `augefs bench fs` and how they are named on the command line.
//!
//! A case is one workload in one variant: `create`, `create-shared+fsync`,
//! `append/64K`, `randread-cold`, `varmail`. Grammar: `BASE[-shared][-cold][+fsync]`,
//! where `-shared` (one directory or file for all threads instead of one each) applies
//! to the metadata and data workloads, `-cold` to the reads, and `+fsync` (fsync of the
//! parent directory after each operation) to the metadata workloads that change a
//! directory. Groups: `metadata`, `data`, `filebench`, `all`.
//!
//! Invariants:
//! - A case's name parses back to the same case (the JSON and the worker rely on it).
//! - Appends and overwrites always fsync their file (they measure durable writes);
//!   appends and sequential reads come in every `--io-size`, the others use 4 KiB.

use serde::{Deserialize, Serialize};

/// One kind of operation (or personality).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Kind {
    /// FxMark MWCL (private) / MWCM (shared): create an empty file.
    Create,
    Mkdir,
    /// MWUL: unlink one of the files made before the run.
    Unlink,
    Rmdir,
    /// MWRL: rename a file within its directory.
    Rename,
    /// MRDL: list a whole directory.
    Readdir,
    /// MRPL: open and close a file by its path.
    Open,
    Stat,
    /// Append `io_bytes` to a file, then fsync it.
    Append,
    /// Overwrite a random 4 KiB block of a file, then fsync it.
    Overwrite,
    /// Read a random 4 KiB block.
    RandRead,
    /// Read `io_bytes` at a time from the start.
    SeqRead,
    Fileserver,
    Varmail,
    Webserver,
    Webproxy,
}

/// Where a kind belongs, which variants it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    Metadata,
    Data,
    Filebench,
}

const KINDS: [(Kind, &str); 16] = [
    (Kind::Create, "create"),
    (Kind::Mkdir, "mkdir"),
    (Kind::Unlink, "unlink"),
    (Kind::Rmdir, "rmdir"),
    (Kind::Rename, "rename"),
    (Kind::Readdir, "readdir"),
    (Kind::Open, "open"),
    (Kind::Stat, "stat"),
    (Kind::Append, "append"),
    (Kind::Overwrite, "overwrite"),
    (Kind::RandRead, "randread"),
    (Kind::SeqRead, "seqread"),
    (Kind::Fileserver, "fileserver"),
    (Kind::Varmail, "varmail"),
    (Kind::Webserver, "webserver"),
    (Kind::Webproxy, "webproxy"),
];

/// The data block of random reads and overwrites.
pub const BLOCK_BYTES: u64 = 4096;

impl Kind {
    pub fn name(self) -> &'static str {
        KINDS
            .iter()
            .find(|(k, _)| *k == self)
            .expect("every kind named")
            .1
    }

    pub fn group(self) -> Group {
        use Kind::*;
        match self {
            Create | Mkdir | Unlink | Rmdir | Rename | Readdir | Open | Stat => Group::Metadata,
            Append | Overwrite | RandRead | SeqRead => Group::Data,
            Fileserver | Varmail | Webserver | Webproxy => Group::Filebench,
        }
    }

    /// Changes a directory (so `+fsync` applies).
    pub fn changes_dir(self) -> bool {
        use Kind::*;
        matches!(self, Create | Mkdir | Unlink | Rmdir | Rename)
    }

    pub fn is_read(self) -> bool {
        matches!(self, Kind::RandRead | Kind::SeqRead)
    }

    /// Takes each `--io-size` (the others read or write 4 KiB, or their own sizes).
    pub fn sized(self) -> bool {
        matches!(self, Kind::Append | Kind::SeqRead)
    }
}

/// One workload in one variant.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Case {
    pub kind: Kind,
    /// One directory (metadata) or file (data) for all threads.
    pub shared: bool,
    /// Each operation followed by fsync of the parent directory.
    pub fsync: bool,
    /// Reads after every cache of the file system was dropped.
    pub cold: bool,
    /// Bytes per append or sequential read; 0 where the kind has no such size.
    pub io_bytes: u64,
}

/// "4K", "64K", "1M": the size in a case's name.
pub fn short_size(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}M", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{}K", b >> 10),
        b => b.to_string(),
    }
}

impl Case {
    pub fn name(&self) -> String {
        let mut name = self.kind.name().to_string();
        if self.shared {
            name.push_str("-shared");
        }
        if self.cold {
            name.push_str("-cold");
        }
        if self.fsync {
            name.push_str("+fsync");
        }
        if self.kind.sized() {
            name.push('/');
            name.push_str(&short_size(self.io_bytes));
        }
        name
    }

    /// Parses one name without a size (`create-shared+fsync`), for each `io_sizes`
    /// where the kind is sized.
    fn parse(text: &str, io_sizes: &[u64]) -> Result<Vec<Case>, String> {
        let unknown = || {
            let names: Vec<&str> = KINDS.iter().map(|(_, n)| *n).collect();
            format!(
                "--workload: unknown workload {text:?} (known: {}, or the groups metadata, \
                 data, filebench, all; variants -shared, -cold, +fsync)",
                names.join(", ")
            )
        };
        let (rest, fsync) = match text.strip_suffix("+fsync") {
            Some(rest) => (rest, true),
            None => (text, false),
        };
        let (rest, cold) = match rest.strip_suffix("-cold") {
            Some(rest) => (rest, true),
            None => (rest, false),
        };
        let (base, shared) = match rest.strip_suffix("-shared") {
            Some(base) => (base, true),
            None => (rest, false),
        };
        let kind = KINDS
            .iter()
            .find(|(_, n)| *n == base)
            .map(|(k, _)| *k)
            .ok_or_else(unknown)?;
        let refuse = |variant: &str, applies: &str| {
            Err(format!(
                "--workload {text:?}: {variant} applies to {applies} only"
            ))
        };
        if shared && kind.group() == Group::Filebench {
            return refuse("-shared", "the metadata and data workloads");
        }
        if cold && !kind.is_read() {
            return refuse("-cold", "randread and seqread");
        }
        if fsync && !kind.changes_dir() {
            return refuse("+fsync", "create, mkdir, unlink, rmdir and rename");
        }
        let case = |io_bytes| Case {
            kind,
            shared,
            fsync,
            cold,
            io_bytes,
        };
        Ok(if kind.sized() {
            io_sizes.iter().map(|&b| case(b)).collect()
        } else {
            vec![case(0)]
        })
    }
}

/// Every workload of `groups`, private and shared where it has both.
fn group_names(groups: &[Group]) -> Vec<String> {
    KINDS
        .iter()
        .filter(|(k, _)| groups.contains(&k.group()))
        .flat_map(|(k, n)| {
            let shared = (k.group() != Group::Filebench).then(|| format!("{n}-shared"));
            std::iter::once(n.to_string()).chain(shared)
        })
        .collect()
}

/// The cases of `--workload` items, in the order given, each once. `fsync` adds
/// `+fsync` to every metadata workload that changes a directory.
pub fn parse_cases(items: &[String], fsync: bool, io_sizes: &[u64]) -> Result<Vec<Case>, String> {
    if io_sizes.is_empty()
        || io_sizes
            .iter()
            .any(|&b| b == 0 || b % BLOCK_BYTES != 0 || b > 64 << 20)
    {
        return Err("--io-size must list multiples of 4 KiB up to 64 MiB".to_string());
    }
    let mut cases: Vec<Case> = Vec::new();
    for item in items {
        let names: Vec<String> = match item.as_str() {
            "all" => group_names(&[Group::Metadata, Group::Data, Group::Filebench]),
            "metadata" => group_names(&[Group::Metadata]),
            "data" => group_names(&[Group::Data]),
            "filebench" => group_names(&[Group::Filebench]),
            name => vec![name.to_string()],
        };
        for name in names {
            for mut case in Case::parse(&name, io_sizes)? {
                case.fsync |= fsync && case.kind.changes_dir();
                if !cases.contains(&case) {
                    cases.push(case);
                }
            }
        }
    }
    if cases.is_empty() {
        return Err("--workload: no workload given".to_string());
    }
    Ok(cases)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(items: &[&str], fsync: bool, sizes: &[u64]) -> Vec<String> {
        let items: Vec<String> = items.iter().map(|s| s.to_string()).collect();
        parse_cases(&items, fsync, sizes)
            .unwrap()
            .iter()
            .map(Case::name)
            .collect()
    }

    #[test]
    fn names_parse_back() {
        for name in [
            "create",
            "create-shared+fsync",
            "randread-cold",
            "seqread-shared-cold/1M",
            "append/4K",
            "varmail",
        ] {
            let base = name.split('/').next().unwrap();
            let size = if name.ends_with("/1M") { 1 << 20 } else { 4096 };
            assert_eq!(names(&[base], false, &[size]), [name]);
        }
        assert_eq!(
            names(&["append", "append", "stat"], false, &[4096, 65536]),
            ["append/4K", "append/64K", "stat"]
        );
        assert_eq!(
            names(&["create", "stat"], true, &[4096]),
            ["create+fsync", "stat"]
        );
        assert_eq!(names(&["filebench"], false, &[4096]).len(), 4);
        assert_eq!(names(&["metadata"], false, &[4096]).len(), 16);
        assert_eq!(names(&["data"], false, &[4096]).len(), 8);
        assert_eq!(names(&["all"], false, &[4096]).len(), 28);
    }

    #[test]
    fn bad_names_and_variants_are_refused() {
        let parse = |item: &str| parse_cases(&[item.to_string()], false, &[4096]);
        assert!(parse("creat").unwrap_err().contains("unknown workload"));
        assert!(parse("stat+fsync").unwrap_err().contains("+fsync"));
        assert!(parse("create-cold").unwrap_err().contains("-cold"));
        assert!(parse("varmail-shared").unwrap_err().contains("-shared"));
        let err = parse_cases(&["append".to_string()], false, &[1000]).unwrap_err();
        assert!(err.contains("--io-size"));
        assert_eq!(short_size(1 << 20), "1M");
        assert_eq!(short_size(12288), "12K");
    }
}
