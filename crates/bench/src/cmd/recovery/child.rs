//! The crash child of `augefs bench recovery`: this binary run as
//! `augefs-bench recovery-child`, which mounts the image through the file system's API
//! and writes [`super::workload`] from several threads until the parent kills it.
//!
//! Invariants:
//! - stdout carries `mounted` once, then one acknowledgement per line, each written
//!   with one call after the fsync it reports returned (lines never interleave).
//! - Each thread stops by itself past `--limit-per-thread` bytes issued, so a parent
//!   that never kills costs bounded space; the child then fails after a grace period.

use super::workload::{self, FileId, Sizes};
use crate::augefs;
use crate::image;
use platform::units::parse_size;
use platform::{Clock, SystemClock};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use vfs::{FileSystem, OpenOptions};

/// How long a child whose threads all reached their limits waits to be killed.
const KILL_GRACE: Duration = Duration::from_secs(60);

#[derive(clap::Args, Debug)]
pub struct ChildArgs {
    /// The formatted image.
    #[arg(long)]
    pub image: PathBuf,
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: device::BackendChoice,
    #[arg(long)]
    pub threads: u32,
    /// Each thread stops after issuing this many bytes.
    #[arg(long, value_parser = parse_size)]
    pub limit_per_thread: u64,
}

/// The child: mounts and writes until killed.
pub fn child(args: ChildArgs) -> Result<(), String> {
    if args.threads == 0 || args.limit_per_thread == 0 {
        return Err("--threads and --limit-per-thread must be positive".into());
    }
    let device = image::open_device(&args.image, args.backend)?;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let fs = augefs::mount(&device, None, &clock)?;
    say("mounted")?;
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..args.threads)
            .map(|thread| {
                let fs = &fs;
                let limit = args.limit_per_thread;
                scope.spawn(move || {
                    if workload::writes_small_files(thread) {
                        small_files(fs, thread, limit)
                    } else {
                        appends(fs, thread, limit)
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a writer thread panicked"))
            .collect::<Result<Vec<()>, String>>()
    })?;
    std::thread::sleep(KILL_GRACE);
    Err("every thread reached --limit-per-thread and nobody killed the child".into())
}

fn say(line: &str) -> Result<(), String> {
    writeln!(std::io::stdout().lock(), "{line}").map_err(|e| format!("telling the parent: {e}"))
}

fn api(what: &str, e: impl std::fmt::Display) -> String {
    augefs::err(what, e)
}

/// Creates the directory `path` and makes its entry durable (fsync of the parent).
fn durable_dir(fs: &FileSystem, path: &str) -> Result<(), String> {
    fs.create_dir(path, 0o755).map_err(|e| api(path, e))?;
    let parent = match path.rfind('/') {
        Some(0) | None => "/",
        Some(at) => &path[..at],
    };
    augefs::fsync_dir(fs, parent)
}

fn small_files(fs: &Arc<FileSystem>, thread: u32, limit: u64) -> Result<(), String> {
    durable_dir(fs, &format!("/t{thread}"))?;
    let mut sizes = Sizes::new(thread);
    let mut buf = Vec::with_capacity(workload::SMALL_BYTES_MAX as usize);
    let mut issued = 0;
    for n in 0.. {
        if n % workload::FILES_PER_DIR == 0 {
            durable_dir(fs, &workload::small_dir(thread, n))?;
        }
        let len = sizes.next_len();
        issued += len;
        if issued > limit {
            break;
        }
        let file = FileId::Small { thread, n };
        let path = file.path();
        buf.resize(len as usize, 0);
        workload::fill(file, 0, &mut buf);
        let f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(fs, &path)
            .map_err(|e| api(&path, e))?;
        let wrote = f.write_at(&buf, 0).map_err(|e| api(&path, e))?;
        assert_eq!(wrote, buf.len(), "a file-system write is never short");
        f.sync_all().map_err(|e| api(&path, e))?;
        drop(f);
        say(&file.ack(len))?;
    }
    Ok(())
}

fn appends(fs: &Arc<FileSystem>, thread: u32, limit: u64) -> Result<(), String> {
    durable_dir(fs, &format!("/t{thread}"))?;
    let mut buf = vec![0u8; workload::APPEND_BYTES as usize];
    let mut issued = 0;
    'logs: for k in 0.. {
        let file = FileId::Log { thread, k };
        let path = file.path();
        let f = OpenOptions::new()
            .write(true)
            .append(true)
            .create_new(true)
            .open(fs, &path)
            .map_err(|e| api(&path, e))?;
        let mut size = 0;
        while size < workload::LOG_FILE_BYTES {
            issued += workload::APPEND_BYTES;
            if issued > limit {
                break 'logs;
            }
            workload::fill(file, size, &mut buf);
            let wrote = f.write_at(&buf, 0).map_err(|e| api(&path, e))?;
            assert_eq!(wrote, buf.len(), "a file-system write is never short");
            size += workload::APPEND_BYTES;
            if size % workload::APPEND_FSYNC_BYTES == 0 {
                f.sync_all().map_err(|e| api(&path, e))?;
                say(&file.ack(size))?;
            }
        }
    }
    Ok(())
}
