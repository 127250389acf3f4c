//! What the crash child of `augefs bench recovery` writes, so that the parent can tell
//! after recovery what each byte must be: the names of the files, their content (a
//! function of the file and the offset, nothing else) and the acknowledgement lines.
//!
//! Layout: thread T owns `/tT`. An even thread writes small files
//! `/tT/dD/fN` (D = N / [`FILES_PER_DIR`]), each of 1 byte to [`SMALL_BYTES_MAX`], written
//! once and fsync'd (a mail server's or a build's pattern). An odd thread appends
//! [`APPEND_BYTES`] at a time to `/tT/logK`, fsync every [`APPEND_FSYNC_BYTES`], a new
//! file every [`LOG_FILE_BYTES`] (a database log's pattern).
//!
//! Invariants:
//! - A line is printed only after the fsync it reports returned: `small T N LEN` (the
//!   file holds exactly LEN bytes) and `append T K LEN` (the log holds at least LEN).
//! - Content is [`fill`] of the file's [`FileId`]: every surviving byte, acknowledged
//!   or not, must equal it (a crash may lose unacknowledged bytes, never change them).

/// Small files per directory.
pub const FILES_PER_DIR: u64 = 1000;
/// Largest small file.
pub const SMALL_BYTES_MAX: u64 = 64 << 10;
/// One append.
pub const APPEND_BYTES: u64 = 256 << 10;
/// Appends between two fsyncs of a log.
pub const APPEND_FSYNC_BYTES: u64 = 4 << 20;
/// A log's size before the next is started.
pub const LOG_FILE_BYTES: u64 = 256 << 20;
const _: () = assert!(LOG_FILE_BYTES % APPEND_FSYNC_BYTES == 0);
const _: () = assert!(APPEND_FSYNC_BYTES % APPEND_BYTES == 0);

/// Which kind of writer thread `thread` is.
pub fn writes_small_files(thread: u32) -> bool {
    thread % 2 == 0
}

/// A file of the workload: thread, kind and number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FileId {
    Small { thread: u32, n: u64 },
    Log { thread: u32, k: u64 },
}

impl FileId {
    pub fn path(&self) -> String {
        match *self {
            FileId::Small { thread, n } => format!("{}/f{n}", small_dir(thread, n)),
            FileId::Log { thread, k } => format!("/t{thread}/log{k}"),
        }
    }

    /// The seed of the file's content.
    fn seed(&self) -> u64 {
        match *self {
            FileId::Small { thread, n } => (u64::from(thread) << 48) ^ n,
            FileId::Log { thread, k } => (1 << 63) ^ (u64::from(thread) << 48) ^ k,
        }
    }

    /// Parses an acknowledgement line: the file and the bytes acknowledged.
    pub fn parse_ack(line: &str) -> Option<(FileId, u64)> {
        let mut words = line.split_whitespace();
        let kind = words.next()?;
        let thread: u32 = words.next()?.parse().ok()?;
        let number: u64 = words.next()?.parse().ok()?;
        let bytes: u64 = words.next()?.parse().ok()?;
        if words.next().is_some() {
            return None;
        }
        match kind {
            "small" => Some((FileId::Small { thread, n: number }, bytes)),
            "append" => Some((FileId::Log { thread, k: number }, bytes)),
            _ => None,
        }
    }

    /// The line acknowledging `bytes` of this file.
    pub fn ack(&self, bytes: u64) -> String {
        match *self {
            FileId::Small { thread, n } => format!("small {thread} {n} {bytes}"),
            FileId::Log { thread, k } => format!("append {thread} {k} {bytes}"),
        }
    }
}

/// The directory of thread `thread`'s small file `n`.
pub fn small_dir(thread: u32, n: u64) -> String {
    format!("/t{thread}/d{}", n / FILES_PER_DIR)
}

fn mix(mut z: u64) -> u64 {
    // splitmix64's finaliser.
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The content of `file` at `offset..offset + buf.len()`.
pub fn fill(file: FileId, offset: u64, buf: &mut [u8]) {
    let seed = file.seed().wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut at = offset;
    let mut rest = buf;
    while !rest.is_empty() {
        let word = mix(seed ^ (at / 8)).to_le_bytes();
        let from = (at % 8) as usize;
        let take = (8 - from).min(rest.len());
        rest[..take].copy_from_slice(&word[from..from + take]);
        rest = &mut rest[take..];
        at += take as u64;
    }
}

/// A small, seeded generator for the sizes of small files.
#[derive(Debug, Clone)]
pub struct Sizes(u64);

impl Sizes {
    pub fn new(thread: u32) -> Sizes {
        Sizes(mix(u64::from(thread) + 1) | 1)
    }

    /// 1 to [`SMALL_BYTES_MAX`] bytes.
    pub fn next_len(&mut self) -> u64 {
        self.0 = mix(self.0);
        1 + self.0 % SMALL_BYTES_MAX
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_depends_on_the_offset_only_not_on_how_it_is_cut() {
        let file = FileId::Log { thread: 1, k: 3 };
        let mut whole = vec![0u8; 1000];
        fill(file, 13, &mut whole);
        let mut parts = vec![0u8; 1000];
        let (a, b) = parts.split_at_mut(377);
        fill(file, 13, a);
        fill(file, 13 + 377, b);
        assert_eq!(whole, parts);
        let mut other = vec![0u8; 1000];
        fill(FileId::Log { thread: 1, k: 4 }, 13, &mut other);
        assert_ne!(whole, other, "files differ");
        assert_ne!(whole[..500], whole[500..], "offsets differ");
    }

    #[test]
    fn acknowledgements_round_trip_and_bad_lines_are_refused() {
        for file in [
            FileId::Small { thread: 2, n: 1234 },
            FileId::Log { thread: 3, k: 0 },
        ] {
            assert_eq!(FileId::parse_ack(&file.ack(77)), Some((file, 77)));
        }
        assert_eq!(FileId::Small { thread: 2, n: 1234 }.path(), "/t2/d1/f1234");
        for bad in [
            "",
            "small 1 2",
            "small 1 2 3 4",
            "large 1 2 3",
            "small x 2 3",
        ] {
            assert_eq!(FileId::parse_ack(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn small_file_sizes_cover_their_range() {
        let mut sizes = Sizes::new(0);
        let all: Vec<u64> = (0..10_000).map(|_| sizes.next_len()).collect();
        assert!(all.iter().all(|&l| (1..=SMALL_BYTES_MAX).contains(&l)));
        assert!(*all.iter().max().unwrap() > SMALL_BYTES_MAX * 9 / 10);
        assert!(*all.iter().min().unwrap() < SMALL_BYTES_MAX / 10);
    }
}
