//! An attached process's own copy of the names it looked up and the directory pages
//! it read, so that a walk of an unchanged tree (find, ls -R, a build's header
//! lookups) needs no request (docs/DESIGN.md §12.5).
//!
//! The instance answers a lookup, a path resolution or a readdir with the change
//! page's count (`crate::table::ChangePage::quiet`) taken before it looked, if no
//! change was in flight. The answer is kept with that count and serves again while the
//! count has not moved: every change anywhere moves it before its first effect, so a
//! kept answer is never stale; it only serves read-mostly phases.
//!
//! Invariants:
//! - Everything kept is of one count: an answer of a newer count drops the rest.
//! - Answers are the caller's identity's (a lookup depends on its permissions): the
//!   client drops the cache when it changes identity, as it stops using the tables.
//! - At most [`ENTRIES_MAX`] answers and [`DIRENT_MAX`] directory entries are kept.

use crate::forklock::ForkLock;
use std::collections::HashMap;
use vfs::DirEntry;

/// Answers kept at most (lookups, resolutions and directory pages).
pub const ENTRIES_MAX: usize = 64 * 1024;
/// Directory entries kept at most, in all pages.
pub const DIRENT_MAX: usize = 256 * 1024;

/// What an answer was asked.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Question {
    /// A path from a start directory (and whether a final symlink is followed).
    Resolve {
        start: u64,
        path: Vec<u8>,
        follow: bool,
    },
    /// A path's parent directory and last name.
    ResolveParent { start: u64, path: Vec<u8> },
    /// A name in a directory.
    Lookup { dir: u64, name: Vec<u8> },
    /// Whether the caller may access an inode as `mask` asks (kept when it may).
    Access { ino: u64, mask: u32 },
    /// A page of a directory after a name, of at most `max` entries.
    Readdir {
        dir: u64,
        after: Option<Vec<u8>>,
        max: u32,
    },
}

/// A kept answer.
#[derive(Debug, Clone)]
pub enum Answer {
    Ino(u64),
    Parent(u64, Vec<u8>),
    Entries(Vec<DirEntry>),
    /// An access check passed.
    Granted,
}

impl Answer {
    /// The inode number it is, if it is one.
    pub fn ino(self) -> Option<format::InodeNo> {
        match self {
            Answer::Ino(i) => Some(format::InodeNo(i)),
            _ => None,
        }
    }
}

#[derive(Debug, Default)]
struct Kept {
    count: u64,
    answers: HashMap<Question, Answer>,
    dirents: usize,
}

/// The process's kept answers, under a lock the fork handlers hold across a fork.
#[derive(Debug, Default)]
pub struct NameCache {
    kept: ForkLock<Kept>,
}

impl NameCache {
    /// The answer to `q` kept at change count `now` (the change page's quiet count).
    pub fn get(&self, now: u64, q: &Question) -> Option<Answer> {
        self.kept.with(|k| {
            if k.count != now {
                return None;
            }
            k.answers.get(q).cloned()
        })
    }

    /// Keeps `a`, the answer to `q` the instance gave at change count `count`.
    pub fn put(&self, count: u64, q: Question, a: Answer) {
        self.kept.with(|k| {
            if count < k.count {
                return;
            }
            let entries = match &a {
                Answer::Entries(e) => e.len(),
                _ => 0,
            };
            if count > k.count || k.answers.len() >= ENTRIES_MAX || k.dirents + entries > DIRENT_MAX
            {
                *k = Kept {
                    count,
                    ..Kept::default()
                };
            }
            k.dirents += entries;
            if let Some(Answer::Entries(old)) = k.answers.insert(q, a) {
                k.dirents -= old.len();
            }
        });
    }

    /// Drops everything (a change of identity).
    pub fn clear(&self) {
        self.kept.with(|k| *k = Kept::default());
    }

    /// The fork prepare handler.
    pub fn before_fork(&self) {
        self.kept.lock();
    }

    /// The fork parent and child handlers (the child keeps the answers: they are its
    /// identity's, and checked against the same counts).
    pub fn after_fork(&self) {
        self.kept.unlock();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vfs::Kind;

    #[test]
    fn answers_serve_at_their_count_only() {
        let c = NameCache::default();
        let q = Question::Lookup {
            dir: 1,
            name: b"a".to_vec(),
        };
        c.put(5, q.clone(), Answer::Ino(9));
        assert!(matches!(c.get(5, &q), Some(Answer::Ino(9))));
        assert!(c.get(6, &q).is_none(), "a newer count: stale");
        // An older answer does not replace newer ones; a newer one drops them.
        c.put(4, q.clone(), Answer::Ino(1));
        assert!(matches!(c.get(5, &q), Some(Answer::Ino(9))));
        let r = Question::Readdir {
            dir: 1,
            after: None,
            max: 10,
        };
        let e = DirEntry {
            name: b"a".to_vec(),
            ino: 9,
            kind: Kind::File,
        };
        c.put(7, r.clone(), Answer::Entries(vec![e]));
        assert!(c.get(5, &q).is_none() && c.get(7, &q).is_none());
        assert!(matches!(c.get(7, &r), Some(Answer::Entries(v)) if v.len() == 1));
        c.clear();
        assert!(c.get(7, &r).is_none());
    }
}
