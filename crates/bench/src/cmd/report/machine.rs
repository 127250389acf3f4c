//! The machine a report was measured on: CPU model and count, memory, kernel and
//! distribution, the disk and file system under the benchmark directory, and the PMR
//! (emulated: the machine has none). Read from /proc and /sys; a fact that cannot be
//! read is shown as "?", never guessed.

use crate::scratch::{self, Mount};
use platform::units::human;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// The disk a directory's file system lives on (`/sys/block/<disk>`).
#[derive(Debug, Clone, Default)]
pub struct Disk {
    /// e.g. `vda`, `nvme0n1` (the whole disk, also for a partition).
    pub name: String,
    pub model: Option<String>,
    pub size_bytes: Option<u64>,
    pub rotational: Option<bool>,
    pub scheduler: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct Machine {
    pub cpu_model: Option<String>,
    /// Logical CPUs this process may run on.
    pub cpus: usize,
    pub memory_bytes: Option<u64>,
    pub kernel: Option<String>,
    pub os: Option<String>,
    pub dir: PathBuf,
    pub mount: Option<Mount>,
    pub disk: Option<Disk>,
    /// How the PMR is emulated, e.g. "EMULATED PMR: 64 MiB file in /dev/shm ...".
    pub pmr: String,
    /// Whether that region is emulated (not DAX); `None` if none could be made.
    pub pmr_emulated: Option<bool>,
    pub augefs_version: &'static str,
    pub git_commit: Option<String>,
    /// The 1-minute load average when described: other work on a shared machine
    /// shows here and in the spreads.
    pub load_average: Option<f64>,
}

/// The 1-minute load average (/proc/loadavg).
pub fn load_average() -> Option<f64> {
    read("/proc/loadavg")?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The first "model name" of /proc/cpuinfo.
fn parse_cpuinfo(text: &str) -> Option<String> {
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim() == "model name")
        .map(|(_, v)| v.trim().to_string())
}

/// MemTotal of /proc/meminfo, in bytes.
fn parse_meminfo(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// PRETTY_NAME of /etc/os-release.
fn parse_os_release(text: &str) -> Option<String> {
    let value = text.lines().find_map(|l| l.strip_prefix("PRETTY_NAME="))?;
    Some(value.trim_matches('"').to_string())
}

fn read(path: impl AsRef<Path>) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// The disk under `dir`'s file system, through `/sys/dev/block/MAJOR:MINOR`.
fn disk_of(dir: &Path) -> Option<Disk> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(dir).ok()?.dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let sys = std::fs::canonicalize(format!("/sys/dev/block/{major}:{minor}")).ok()?;
    // A partition's directory sits inside its disk's.
    let disk = match sys.join("partition").exists() {
        true => sys.parent()?.to_path_buf(),
        false => sys,
    };
    Some(Disk {
        name: disk.file_name()?.to_string_lossy().into_owned(),
        model: read(disk.join("device/model")).filter(|m| !m.is_empty()),
        size_bytes: read(disk.join("size")).and_then(|s| s.parse::<u64>().ok().map(|n| n * 512)),
        rotational: read(disk.join("queue/rotational")).map(|r| r == "1"),
        scheduler: read(disk.join("queue/scheduler")),
    })
}

fn git_commit() -> Option<String> {
    let out = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

impl Machine {
    /// Describes this machine and the directory `dir`; `pmr` says how the PMR is
    /// emulated and whether it is.
    pub fn describe(dir: &Path, pmr: (String, Option<bool>)) -> Machine {
        Machine {
            cpu_model: read("/proc/cpuinfo").and_then(|t| parse_cpuinfo(&t)),
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            memory_bytes: read("/proc/meminfo").and_then(|t| parse_meminfo(&t)),
            kernel: read("/proc/sys/kernel/osrelease"),
            os: read("/etc/os-release").and_then(|t| parse_os_release(&t)),
            dir: std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf()),
            mount: scratch::mount_of(dir),
            disk: disk_of(dir),
            pmr: pmr.0,
            pmr_emulated: pmr.1,
            augefs_version: env!("CARGO_PKG_VERSION"),
            git_commit: git_commit(),
            load_average: load_average(),
        }
    }

    /// The machine section's Markdown list.
    pub fn markdown(&self) -> String {
        let unknown = "?".to_string();
        let disk = match &self.disk {
            Some(d) => format!(
                "{} ({}, {}, {}, scheduler {})",
                d.name,
                d.model.clone().unwrap_or_else(|| "model ?".to_string()),
                d.size_bytes.map_or_else(|| "size ?".to_string(), human),
                match d.rotational {
                    Some(true) => "rotational",
                    Some(false) => "non-rotational",
                    None => "rotational ?",
                },
                d.scheduler.clone().unwrap_or_else(|| unknown.clone()),
            ),
            None => "? (no block device found under the directory)".to_string(),
        };
        let fs = match &self.mount {
            Some(m) => format!(
                "{} on {} mounted at {} ({})",
                m.fs_type, m.source, m.target, m.options
            ),
            None => unknown.clone(),
        };
        let lines = [
            (
                "CPU",
                self.cpu_model.clone().unwrap_or_else(|| unknown.clone()),
            ),
            ("Logical CPUs", self.cpus.to_string()),
            (
                "Load average at the start",
                self.load_average
                    .map_or_else(|| unknown.clone(), |l| format!("{l:.2}")),
            ),
            (
                "Memory",
                self.memory_bytes.map_or_else(|| unknown.clone(), human),
            ),
            (
                "Kernel",
                self.kernel.clone().unwrap_or_else(|| unknown.clone()),
            ),
            ("OS", self.os.clone().unwrap_or_else(|| unknown.clone())),
            ("Directory under test", self.dir.display().to_string()),
            ("Its file system", fs),
            ("Its disk", disk),
            ("PMR", self.pmr.clone()),
            (
                "augefs",
                match &self.git_commit {
                    Some(c) => format!("{} (commit {c})", self.augefs_version),
                    None => self.augefs_version.to_string(),
                },
            ),
        ];
        lines
            .iter()
            .map(|(k, v)| format!("- **{k}:** {v}\n"))
            .collect()
    }

    pub fn json(&self) -> Value {
        json!({
            "cpu_model": self.cpu_model,
            "cpus": self.cpus,
            "load_average": self.load_average,
            "memory_bytes": self.memory_bytes,
            "kernel": self.kernel,
            "os": self.os,
            "dir": self.dir,
            "mount": self.mount.as_ref().map(|m| json!({
                "source": m.source, "target": m.target, "fs_type": m.fs_type, "options": m.options,
            })),
            "disk": self.disk.as_ref().map(|d| json!({
                "name": d.name, "model": d.model, "size_bytes": d.size_bytes,
                "rotational": d.rotational, "scheduler": d.scheduler,
            })),
            "pmr": self.pmr,
            "pmr_emulated": self.pmr_emulated,
            "augefs_version": self.augefs_version,
            "git_commit": self.git_commit,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_files_parse() {
        let cpuinfo = "processor\t: 0\nmodel name\t: AMD EPYC 7B13\nflags\t: fpu\n\
                       processor\t: 1\nmodel name\t: AMD EPYC 7B13\n";
        assert_eq!(parse_cpuinfo(cpuinfo).as_deref(), Some("AMD EPYC 7B13"));
        assert_eq!(parse_cpuinfo("processor : 0\n"), None);
        let meminfo = "MemTotal:       24608760 kB\nMemFree:        1 kB\n";
        assert_eq!(parse_meminfo(meminfo), Some(24_608_760 * 1024));
        let os = "NAME=\"Debian GNU/Linux\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n";
        assert_eq!(
            parse_os_release(os).as_deref(),
            Some("Debian GNU/Linux 12 (bookworm)")
        );
    }

    #[test]
    fn this_machine_is_described() {
        let m = Machine::describe(Path::new("/"), ("EMULATED PMR".to_string(), Some(true)));
        assert!(m.cpus >= 1);
        let text = m.markdown();
        for key in [
            "**CPU:**",
            "**Memory:**",
            "**Kernel:**",
            "**Its disk:**",
            "**PMR:** EMULATED",
        ] {
            assert!(text.contains(key), "{key} missing:\n{text}");
        }
        assert_eq!(m.json()["pmr_emulated"], true);
    }
}
