//! The background flusher: a thread that writes back files dirty for longer than the
//! expiry (all of them when woken past half the dirty limit) and trims clean pages
//! beyond the cache's budget (docs/DESIGN.md §10.7).
//!
//! Invariants:
//! - One round at a time; `stop` waits for the round in progress.
//! - A failed write-back ends the round: the engine is read-only then, and the next
//!   fsync, sync or unmount reports it.

use crate::shared::Core;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// The background flusher: a thread that writes back old dirty pages and trims the
/// cache (woken early by writers past half the dirty limit).
pub(crate) struct Flusher {
    core: Arc<Core>,
    thread: Option<JoinHandle<()>>,
}

impl Flusher {
    pub fn start(core: Arc<Core>, every: Duration) -> Flusher {
        let c = core.clone();
        let thread = std::thread::Builder::new()
            .name("augefs-flush".into())
            .spawn(move || loop {
                let urgent = {
                    let mut s = c.cache.signal.lock().expect("flusher signal lock");
                    if !s.0 && !s.1 {
                        s = c
                            .cache
                            .wake
                            .wait_timeout(s, every)
                            .expect("flusher signal lock")
                            .0;
                    }
                    if s.0 {
                        return;
                    }
                    std::mem::take(&mut s.1)
                };
                c.flush_round(urgent);
            })
            .expect("spawn the flusher thread");
        Flusher {
            core,
            thread: Some(thread),
        }
    }

    /// Stops the thread (after its current round) and waits for it.
    pub fn stop(mut self) {
        self.core
            .cache
            .signal
            .lock()
            .expect("flusher signal lock")
            .0 = true;
        self.core.cache.wake.notify_all();
        if let Some(t) = self.thread.take() {
            // A panic in the flusher was already reported; unmount goes on.
            let _ = t.join();
        }
    }
}

impl std::fmt::Debug for Flusher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Flusher").finish_non_exhaustive()
    }
}

impl Core {
    /// One round of the flusher: writes back files dirty for longer than the expiry
    /// (all dirty files when `urgent` or past half the dirty limit), then evicts clean
    /// pages beyond the cache's budget.
    fn flush_round(&self, urgent: bool) {
        self.refresh_room();
        let now = self.clock.now_ns();
        let expire = self.cache.config.expire.as_nanos() as u64;
        for h in self.dirty_handles() {
            let (old, marked, behind) = {
                let pages = h.pages();
                let old = pages
                    .dirty_since
                    .is_some_and(|t| now.saturating_sub(t) >= expire);
                let marked = pages.let_go_clean;
                let behind = marked && pages.dirty_count() >= crate::pagecache::WRITE_BEHIND_BLOCKS;
                (old, marked, behind)
            };
            if old || behind || urgent || self.cache.over_background_limit() {
                // A failure makes the engine read-only; the pages stay dirty and the
                // next fsync, sync or unmount reports it.
                if self.write_back(&h).is_err() {
                    return;
                }
                if marked {
                    let_go_clean(&h);
                }
            }
        }
        self.trim(self.cache.max_pages() * 9 / 10);
    }

    /// Evicts clean pages of any file until at most `target` pages are cached.
    fn trim(&self, target: u64) {
        if self.cache.page_count() <= target {
            return;
        }
        for h in self.inodes.all() {
            let excess = self.cache.page_count().saturating_sub(target);
            if excess == 0 {
                break;
            }
            if let Ok(mut pages) = h.pages.try_lock() {
                let near = pages.ra_next;
                pages.evict_clean(excess, near);
            }
        }
    }
}

/// Lets the clean whole pages of a file marked [`crate::pagecache::Pages::let_go_clean`]
/// go (a partial last page stays: the next append would read it back).
fn let_go_clean(h: &crate::handle::Handle) {
    let st = h.read();
    let Some(size) = st.inode.as_ref().map(|i| i.size) else {
        return;
    };
    h.pages().evict_clean_range(0, size / crate::shared::BLOCK);
}
