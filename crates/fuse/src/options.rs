//! `-o` mount options of `augefs mount` (and of `mount -t fuse.augefs`, whose helper
//! passes the options of /etc/fstab through).
//!
//! Invariants:
//! - An option this front end does not understand is an error, never ignored silently;
//!   the generic options mount(8) adds for every file system (`defaults`, `noauto`,
//!   `nofail`, `_netdev`, ...) are accepted and have no effect here.

use std::path::PathBuf;
use std::time::Duration;
use thiserror::Error;

/// Most request threads `threads=` accepts.
pub const THREADS_MAX: usize = 64;
/// Largest `shared_pages=` accepted, in MiB (64 GiB of address space per identity).
pub const SHARED_PAGES_MAX_MIB: usize = 64 << 10;
/// Longest `commit=` interval accepted, in seconds (a day).
pub const COMMIT_MAX_SECS: u64 = 86_400;
/// Largest `read_ahead=` accepted, in KiB.
pub const READ_AHEAD_MAX_KIB: u32 = 64 << 10;
/// The kernel's read-ahead of a mount when `read_ahead=` is not given, in KiB: two of
/// the largest READ requests (1 MiB with the kernel's default fs.fuse.max_pages_limit),
/// so one is in flight while the reader copies the other. The kernel's own default for
/// a FUSE mount is 128 KiB, and a mount cannot ask for more in INIT: a cold sequential
/// read of a 512 MiB file ran at 1.71 GiB/s with it and 2.43 GiB/s with 2 MiB (medians of
/// five, docs/BENCHMARKS.md §6), ext4 on a loop device at 2.6 GiB/s.
pub const READ_AHEAD_DEFAULT_KIB: u32 = 2048;

/// Request threads when `threads=` is not given: two per CPU. A waiting SETLKW holds
/// none of them, but a request that waits for the device (an FSYNC, the data
/// write-back before a truncating SETATTR, a cold READ) holds its thread, and over io_uring the
/// kernel hands a CPU's requests to that CPU's queue threads only: with one per CPU
/// the next request waited for it (bench/results/2026-11-27T11-45-03Z-apps-ring-threads:
/// two per queue, medians of 3, sqlite3 inserts 386/s against 193/s, untar 2.7 s
/// against 4.4 s).
pub fn threads_default() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get() * 2)
        .clamp(1, THREADS_MAX)
}

#[derive(Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum OptionError {
    #[error("unknown mount option {0:?} (see `augefs mount --help`)")]
    Unknown(String),
    #[error("mount option {0:?} needs a value ({0}=...)")]
    MissingValue(String),
    #[error("mount option {name}: bad value {value:?}: {why}")]
    BadValue {
        name: String,
        value: String,
        why: String,
    },
    #[error("mount option {0:?} is not supported yet: {1}")]
    Unsupported(String, &'static str),
}

/// What the `-o` options ask for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountOptions {
    /// Users other than the mounting one may use the mount (`allow_other`).
    pub allow_other: bool,
    /// Root may use the mount too (`allow_root`).
    pub allow_root: bool,
    /// The kernel caches writes and sends them in the background (`writeback_cache`).
    pub writeback_cache: bool,
    /// Threads serving requests (`threads=N`).
    pub threads: usize,
    /// Source name shown in /proc/mounts (`fsname=`; default: the image path).
    pub fsname: Option<String>,
    /// The PMR file the image was formatted with (`pmr=FILE`).
    pub pmr: Option<PathBuf>,
    /// Kernel mount flags passed through (`nosuid`, `nodev`, `noexec` and their
    /// opposites).
    pub flags: Vec<String>,
    /// A read-only kernel mount (`ro`; `rw` is the default): /proc/mounts says `ro` and
    /// the kernel refuses every change with EROFS. The caller decides how to open the
    /// image for it.
    pub read_only: bool,
    /// Background commit (`commit=N` seconds, default 5; 0 turns it off): everything
    /// written is durable within N seconds without fsync or sync (docs/SEMANTICS.md §2).
    pub commit: Option<Duration>,
    /// Per-opcode request counts and times, printed at unmount (`stats`).
    pub stats: bool,
    /// FUSE over io_uring where the kernel offers it (`uring`, the default; `nouring`
    /// serves through /dev/fuse alone).
    pub uring: bool,
    /// The most file data, in MiB, each identity's shared data table keeps for attached
    /// processes (`shared_pages=MIB`; None: the instance's default, 0: none).
    pub shared_pages_mib: Option<usize>,
    /// The kernel's read-ahead for the mount, in KiB (`read_ahead=KIB`; None: the
    /// default, [`READ_AHEAD_DEFAULT_KIB`]; 0: the kernel's own). Set through sysfs,
    /// which only root may write.
    pub read_ahead_kib: Option<u32>,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            allow_other: false,
            allow_root: false,
            writeback_cache: false,
            threads: threads_default(),
            fsname: None,
            pmr: None,
            flags: Vec::new(),
            read_only: false,
            commit: Some(vfs::commit::COMMIT_INTERVAL_DEFAULT),
            stats: false,
            uring: true,
            shared_pages_mib: None,
            read_ahead_kib: None,
        }
    }
}

/// Accepted for fstab compatibility, without effect.
const IGNORED: &[&str] = &[
    "defaults",
    "auto",
    "noauto",
    "nofail",
    "_netdev",
    "user",
    "nouser",
    "users",
    "async",
    "noatime",
    "relatime",
    "default_permissions",
];
/// Kernel mount flags handed to the mount as they are.
const FLAGS: &[&str] = &["dev", "nodev", "suid", "nosuid", "exec", "noexec"];

impl MountOptions {
    /// Parses `-o` arguments, each a comma-separated list.
    pub fn parse<S: AsRef<str>>(args: &[S]) -> Result<MountOptions, OptionError> {
        let mut o = MountOptions::default();
        for arg in args {
            for opt in arg.as_ref().split(',').filter(|s| !s.is_empty()) {
                o.apply(opt)?;
            }
        }
        Ok(o)
    }

    fn apply(&mut self, opt: &str) -> Result<(), OptionError> {
        let (name, value) = match opt.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (opt, None),
        };
        let need = |v: Option<&str>| {
            v.filter(|v| !v.is_empty())
                .map(str::to_string)
                .ok_or_else(|| OptionError::MissingValue(name.to_string()))
        };
        match name {
            "allow_other" => self.allow_other = true,
            "allow_root" => self.allow_root = true,
            "writeback_cache" => self.writeback_cache = true,
            "stats" if value.is_none() => self.stats = true,
            "uring" if value.is_none() => self.uring = true,
            "nouring" if value.is_none() => self.uring = false,
            "fsname" => self.fsname = Some(need(value)?),
            "pmr" => self.pmr = Some(PathBuf::from(need(value)?)),
            "threads" => {
                let v = need(value)?;
                let bad = |why: &str| OptionError::BadValue {
                    name: name.to_string(),
                    value: v.clone(),
                    why: why.to_string(),
                };
                let n: usize = v.parse().map_err(|_| bad("not a number"))?;
                if n == 0 || n > THREADS_MAX {
                    return Err(bad(&format!("between 1 and {THREADS_MAX}")));
                }
                self.threads = n;
            }
            "shared_pages" => {
                let v = need(value)?;
                let why = format!("MiB, 0 (none) to {SHARED_PAGES_MAX_MIB}");
                self.shared_pages_mib = Some(at_most(name, &v, SHARED_PAGES_MAX_MIB, why)?);
            }
            "read_ahead" => {
                let v = need(value)?;
                let why = format!("KiB, 0 (the kernel's) to {READ_AHEAD_MAX_KIB}");
                self.read_ahead_kib = Some(at_most(name, &v, READ_AHEAD_MAX_KIB, why)?);
            }
            "ro" if value.is_none() => self.read_only = true,
            "rw" if value.is_none() => self.read_only = false,
            "commit" => {
                let v = need(value)?;
                let secs: u64 = v.parse().map_err(|_| OptionError::BadValue {
                    name: name.to_string(),
                    value: v.clone(),
                    why: format!("seconds, 0 (off) to {COMMIT_MAX_SECS}"),
                })?;
                if secs > COMMIT_MAX_SECS {
                    return Err(OptionError::BadValue {
                        name: name.to_string(),
                        value: v,
                        why: format!("seconds, 0 (off) to {COMMIT_MAX_SECS}"),
                    });
                }
                self.commit = (secs > 0).then(|| Duration::from_secs(secs));
            }
            "atime" | "strictatime" => {
                return Err(OptionError::Unsupported(
                    name.to_string(),
                    "augefs never updates access times (noatime)",
                ))
            }
            n if IGNORED.contains(&n) && value.is_none() => {}
            n if FLAGS.contains(&n) && value.is_none() => self.flags.push(n.to_string()),
            _ => return Err(OptionError::Unknown(opt.to_string())),
        }
        if self.allow_other && self.allow_root {
            return Err(OptionError::BadValue {
                name: "allow_root".to_string(),
                value: String::new(),
                why: "allow_other and allow_root exclude each other".to_string(),
            });
        }
        Ok(())
    }
}

/// Option `name`'s value `v` as a number of at most `max`; `why` says the range.
fn at_most<T: std::str::FromStr + PartialOrd>(
    name: &str,
    v: &str,
    max: T,
    why: String,
) -> Result<T, OptionError> {
    v.parse()
        .ok()
        .filter(|n| *n <= max)
        .ok_or_else(|| OptionError::BadValue {
            name: name.to_string(),
            value: v.to_string(),
            why,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lists_and_rejects_what_it_does_not_know() {
        let o = MountOptions::parse(&["allow_other,threads=8", "nosuid,defaults,pmr=/p"])
            .expect("valid options");
        assert!(o.allow_other && !o.writeback_cache);
        assert_eq!(o.threads, 8);
        assert_eq!(o.flags, vec!["nosuid".to_string()]);
        assert_eq!(o.pmr, Some(PathBuf::from("/p")));
        assert_eq!(
            MountOptions::parse::<&str>(&[]),
            Ok(MountOptions::default())
        );

        let err = |s: &str| MountOptions::parse(&[s]).expect_err(s);
        assert_eq!(err("bogus"), OptionError::Unknown("bogus".into()));
        assert_eq!(err("threads"), OptionError::MissingValue("threads".into()));
        assert!(matches!(err("threads=0"), OptionError::BadValue { .. }));
        assert!(matches!(err("threads=x"), OptionError::BadValue { .. }));
        assert!(matches!(err("commit=x"), OptionError::BadValue { .. }));
        assert!(matches!(err("commit=100000"), OptionError::BadValue { .. }));
        assert!(matches!(err("atime"), OptionError::Unsupported(..)));
        let o = MountOptions::parse(&["nouring,stats"]).expect("valid");
        assert!(!o.uring && o.stats && MountOptions::default().uring);
        let o = MountOptions::parse(&["ro,commit=0"]).expect("valid");
        assert!(o.read_only && o.commit.is_none());
        let o = MountOptions::parse(&["ro,rw,commit=2"]).expect("valid");
        assert!(!o.read_only);
        assert_eq!(o.commit, Some(Duration::from_secs(2)));
        assert_eq!(MountOptions::default().commit, Some(Duration::from_secs(5)));
        assert!(matches!(
            err("allow_other,allow_root"),
            OptionError::BadValue { .. }
        ));
        assert_eq!(err("nosuid=1"), OptionError::Unknown("nosuid=1".into()));
        let o = MountOptions::parse(&["shared_pages=0"]).expect("valid");
        assert_eq!(o.shared_pages_mib, Some(0));
        assert_eq!(MountOptions::default().shared_pages_mib, None);
        assert!(matches!(
            err("shared_pages=x"),
            OptionError::BadValue { .. }
        ));
        assert!(matches!(
            err("shared_pages=99999999"),
            OptionError::BadValue { .. }
        ));
        assert_eq!(
            err("shared_pages"),
            OptionError::MissingValue("shared_pages".into())
        );
        let o = MountOptions::parse(&["read_ahead=0", "read_ahead=4096"]).expect("valid");
        assert_eq!(o.read_ahead_kib, Some(4096));
        assert_eq!(MountOptions::default().read_ahead_kib, None);
        assert!(matches!(err("read_ahead=-1"), OptionError::BadValue { .. }));
        assert!(matches!(
            err("read_ahead=99999999"),
            OptionError::BadValue { .. }
        ));
    }
}
