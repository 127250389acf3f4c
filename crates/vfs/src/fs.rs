//! The file system: mount and unmount, the state every operation shares
//! ([`FileSystem`], over the `Core` it shares with its background threads in
//! `crate::shared`), inode numbers, how operations get an inode's handle, and the
//! background threads, which it starts and stops. The operations live by concern:
//! inode state and handles in `crate::handle`, attributes in `crate::attr`, names in
//! `crate::namespace`, `crate::remove` and `crate::rename`, the lanes they are logged
//! in in `crate::lanes`, file data in [`crate::data`]. Paths are resolved by
//! [`crate::path`]; the std-like handles are in [`crate::file`].
//!
//! Invariants:
//! - An inode's record changes only under its handle's write lock; a directory's entries
//!   only under the directory's write lock. Cross-directory renames also take the rename
//!   mutex (so two renames cannot create a cycle), then both directories in inode order.
//! - Every operation is one MetaDB batch, except a file's last unlink done while the
//!   file is open (its blocks are freed at last close) or while it has blocks (they
//!   are freed by the reaper, `crate::reap`).
//! - A name operation goes to the parent directory's domain lane (an fsync of the
//!   directory makes it durable); a file's data and size go to the file's lane with its
//!   blocks (an fsync of the file makes them durable, and the name it was created under).
//! - Inode numbers are never reused: numbers are handed out only below a durable
//!   high-water mark, raised 1024 at a time.
//! - Imports go one way: the modules that add operations import this one; this one
//!   imports only what lies below it (the shared state, handles, caches, the store and
//!   the background threads, which import `crate::shared`, never `fs`).

pub use crate::shared::{BLOCK, FILE_SIZE_MAX};

use crate::creds::Creds;
use crate::error::VfsError;
use crate::handle::{live, Handle};
use crate::pagecache::{Cache, CacheConfig, CacheStats};
use crate::records::{self, Inode, Kind, ROOT};
use crate::shared::Core;
use crate::store::Store;
use engine::log::{Durability, Engine, EngineConfig, EngineEnv};
use format::InodeNo;
use metadb::WriteBatch;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Inode numbers reserved per durable high-water update.
const INO_BATCH: u64 = 1024;
/// Unused inode handles the inode table keeps (each a few hundred bytes plus its clean
/// pages, which count against the page cache's budget).
const INODE_CACHE: usize = 64 << 10;
/// Names the name cache keeps.
const NAME_CACHE: usize = 256 << 10;
/// Locks creates of names hashing alike share.
pub(crate) const NAME_STRIPES: usize = 256;

/// A mounted augefs.
pub struct FileSystem {
    pub(crate) core: Arc<Core>,
    /// (next number, durable high-water: numbers below it may be handed out).
    next_ino: Mutex<(u64, u64)>,
    pub(crate) rename_lock: Mutex<()>,
    /// Creates' name locks ([`FileSystem::name_stripe`]).
    pub(crate) name_stripes: Box<[Mutex<()>]>,
    /// Per inode, inodes whose domain lanes hold name operations its fsync must make
    /// durable: for a file, the directories it was created, linked, unlinked or renamed
    /// under (and a replaced target's); for a directory, the files whose lanes logged a
    /// change of its entries (a last unlink, a rename replacing a file). Kept here, not
    /// in the inode's handle, which lives only while the inode is in use; cleared by
    /// fsync of the inode and by sync.
    pub(crate) name_lanes: Mutex<HashMap<InodeNo, Vec<InodeNo>>>,
    /// Who the path-level API and `File` act as.
    creds: arc_swap::ArcSwap<Creds>,
    /// The root directory's handle, held for the mount's life: every absolute path
    /// walk starts there without a table lookup (threads share no lock to find it).
    root: std::sync::OnceLock<Arc<Handle>>,
    /// POSIX record locks (fcntl, OFD locks) and flock locks of this instance.
    record_locks: crate::locks::LockTable,
    flocks: crate::locks::LockTable,
    /// Changes the front ends make, for caches kept outside the vfs.
    changes: crate::changes::Changes,
    /// Write-behind leases of the instance's clients ([`crate::leases`]).
    leases: crate::leases::Leases,
    /// The background flusher (stopped by unmount and drop).
    flusher: Mutex<Option<crate::data::Flusher>>,
    /// The reaper of unlinked files' blocks (`crate::reap`; drained by unmount, stopped
    /// by drop).
    reaper: Mutex<Option<crate::reap::Reaper>>,
    /// The scan that counts the inodes (`crate::inode_count`; stopped by unmount and
    /// drop).
    counter: Mutex<Option<crate::inode_count::Counter>>,
    /// The background commit, if asked for (stopped by unmount and drop).
    committer: Mutex<Option<crate::commit::Committer>>,
    /// The background read-ahead, unless configured off (stopped by unmount and drop).
    pub(crate) readahead: Option<Arc<crate::readahead::ReadAhead>>,
    /// Held while this instance serves its image to programs (device::holder), from
    /// `crate::image::open_image` until [`FileSystem::stop_serving`] or the end.
    serving: Mutex<Option<device::holder::Mark>>,
    /// What the mount did after the engine's part (set once, by the mount).
    mounted: std::sync::OnceLock<MountFacts>,
}

/// The file system's part of a mount, after the engine's
/// ([`engine::log::MountReport`]): times by the engine's clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct MountFacts {
    /// Files unlinked while open (or queued for freeing) when the image was last in use,
    /// freed by this mount.
    pub orphans_freed: u64,
    pub orphans_ns: u64,
}

impl Drop for FileSystem {
    /// Without an unmount, like a crash: dirty pages are lost (and the handles the inode
    /// table kept for them may go).
    fn drop(&mut self) {
        self.set_commit_interval(None);
        self.stop_counter();
        self.stop_reaper();
        self.stop_flusher();
        self.stop_readahead();
        self.core.cache.forget_dirty();
    }
}

impl std::fmt::Debug for FileSystem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileSystem")
            .field("engine", &self.core.engine)
            .field("cache", &self.core.cache.stats())
            .finish()
    }
}

impl FileSystem {
    /// Mounts (recovering) the image of `env`; creates the root directory on a freshly
    /// formatted image.
    pub fn mount(env: EngineEnv, config: EngineConfig) -> Result<FileSystem, VfsError> {
        FileSystem::mount_with(env, config, CacheConfig::default())
    }

    /// [`FileSystem::mount`] with these page-cache settings.
    pub fn mount_with(
        env: EngineEnv,
        config: EngineConfig,
        cache: CacheConfig,
    ) -> Result<FileSystem, VfsError> {
        let clock = env.clock.clone();
        let engine = Engine::open(env, config)?;
        let high = Store::of(&engine).inode_counter()?.unwrap_or(ROOT.0 + 1);
        let page_cache = Arc::new(Cache::new(cache));
        let core = Arc::new(Core {
            engine,
            clock,
            inodes: crate::caches::InodeTable::new(INODE_CACHE, page_cache.clone()),
            names: crate::caches::NameCache::new(NAME_CACHE),
            record_lanes: Mutex::new(HashMap::new()),
            create_lanes: Mutex::new(HashMap::new()),
            cache: page_cache,
            inode_count: Default::default(),
            reaps: crate::shared::Reaps::default(),
        });
        core.refresh_room();
        let flusher = cache
            .flush_interval
            .map(|every| crate::data::Flusher::start(core.clone(), every));
        let reaper = crate::reap::Reaper::start(core.clone());
        let readahead = (cache.readahead_workers > 0)
            .then(|| crate::readahead::ReadAhead::new(core.clone(), cache.readahead_workers));
        let fs = FileSystem {
            core,
            next_ino: Mutex::new((high, high)),
            rename_lock: Mutex::new(()),
            name_stripes: (0..NAME_STRIPES).map(|_| Mutex::new(())).collect(),
            name_lanes: Mutex::new(HashMap::new()),
            creds: arc_swap::ArcSwap::from_pointee(Creds::of_process()),
            record_locks: crate::locks::LockTable::default(),
            flocks: crate::locks::LockTable::default(),
            changes: crate::changes::Changes::default(),
            leases: crate::leases::Leases::default(),
            flusher: Mutex::new(flusher),
            reaper: Mutex::new(Some(reaper)),
            counter: Mutex::new(None),
            committer: Mutex::new(None),
            root: std::sync::OnceLock::new(),
            readahead,
            serving: Mutex::new(None),
            mounted: std::sync::OnceLock::new(),
        };
        if fs.core.store().inode(ROOT)?.is_none() {
            let now = fs.now();
            let root = Inode::new(Kind::Dir, 0o755, 0, 0, ROOT, now);
            let mut batch = WriteBatch::new();
            batch.put(records::inode_key(ROOT).to_vec(), root.encode().to_vec());
            fs.core
                .engine
                .put_metadata(ROOT, &batch, Durability::Fsync)?;
        }
        let root = fs.handle(ROOT)?;
        fs.root.set(root).expect("the root handle is set once");
        let started = fs.core.clock.now_ns();
        let orphans_freed = fs.reap_orphans()?;
        let facts = MountFacts {
            orphans_freed,
            orphans_ns: fs.core.clock.now_ns().saturating_sub(started),
        };
        *fs.counter.lock().expect("counter lock") =
            Some(crate::inode_count::Counter::start(fs.core.clone()));
        fs.mounted.set(facts).expect("a mount's facts are set once");
        Ok(fs)
    }

    /// Makes everything durable and unmounts. An error means something may not be.
    pub fn unmount(self) -> Result<(), VfsError> {
        // Finishing from here on: commands that find the image locked wait for this
        // unmount; the mark is held until the image is closed.
        let mark = self.serving.lock().expect("serving lock").take();
        if let Some(m) = &mark {
            let _ = m.finishing();
        }
        self.set_commit_interval(None);
        // The files unlinked last are freed now, not left to the next mount.
        self.core.reap_all();
        self.stop_counter();
        self.stop_reaper();
        self.stop_flusher();
        self.stop_readahead();
        self.core.write_back_all()?;
        let core = self.core.clone();
        drop(self);
        // Nothing else holds the core once the flusher is stopped (handles hold only the
        // cache's counters).
        let core = Arc::into_inner(core).expect("no other holder of the core");
        // Every dirty page was written back: nothing is left to keep.
        core.cache.forget_dirty();
        core.engine.close()?;
        drop(mark);
        Ok(())
    }

    /// Background commit (docs/SEMANTICS.md §2): with `Some(every)`, everything written
    /// is durable within `every` without fsync or sync; `None` (or zero) stops it. Idle
    /// (nothing changed since the last commit) it does no IO.
    pub fn set_commit_interval(&self, every: Option<std::time::Duration>) {
        let mut slot = self.committer.lock().expect("committer lock");
        if let Some(c) = slot.take() {
            c.stop();
        }
        // A read-only file system has nothing to commit.
        let writable = self.read_only_reason().is_none();
        *slot = every
            .filter(|e| !e.is_zero() && writable)
            .map(|e| crate::commit::Committer::start(self.core.clone(), e));
    }

    fn stop_readahead(&self) {
        if let Some(r) = &self.readahead {
            r.stop();
        }
    }

    fn stop_counter(&self) {
        if let Some(c) = self.counter.lock().expect("counter lock").take() {
            c.stop();
        }
    }

    fn stop_reaper(&self) {
        if let Some(r) = self.reaper.lock().expect("reaper lock").take() {
            r.stop();
        }
    }

    fn stop_flusher(&self) {
        if let Some(f) = self.flusher.lock().expect("flusher lock").take() {
            f.stop();
        }
    }

    /// From now on every change fails with EROFS saying `why` and unmount writes
    /// nothing (a read-only mount, `crate::image`).
    pub fn set_read_only(&self, why: &str) {
        self.stop_flusher();
        self.core.engine.set_read_only(why);
    }

    /// `tell` runs once, with the reason, when a device failure turns the file system
    /// read-only (the mount daemon says so in its log, the kernel's log and the mount's
    /// flags).
    pub fn on_read_only(&self, tell: engine::log::FailureHook) {
        self.core.engine.on_failure(tell);
    }

    /// Why changes fail, if they do: a read-only mount, or an earlier device failure
    /// (the file system then stays read-only until remounted).
    pub fn read_only_reason(&self) -> Option<String> {
        self.core.engine.read_only_reason()
    }

    /// Holds `mark` while this instance serves its image and then while it finishes
    /// (see device::holder).
    pub fn hold_serving_mark(&self, mark: device::holder::Mark) {
        *self.serving.lock().expect("serving lock") = Some(mark);
    }

    /// The instance no longer serves programs (the kernel ended its mount): other
    /// commands that find the image locked now wait for it to finish instead of
    /// refusing at once. The mark goes with the instance.
    pub fn stop_serving(&self) {
        if let Some(mark) = self.serving.lock().expect("serving lock").as_ref() {
            if let Err(e) = mark.finishing() {
                eprintln!("augefs: marking the image as finishing: {e}");
            }
        }
    }

    /// Page-cache counters.
    pub fn cache_stats(&self) -> CacheStats {
        self.core.cache.stats()
    }

    /// What this mount found and did after the engine's part
    /// (`self.engine().mount_report()`).
    pub fn mount_facts(&self) -> MountFacts {
        self.mounted.get().copied().unwrap_or_default()
    }

    pub fn engine(&self) -> &Engine {
        &self.core.engine
    }

    /// POSIX record locks (F_GETLK, F_SETLK, F_SETLKW; OFD locks) of this instance.
    pub fn record_locks(&self) -> &crate::locks::LockTable {
        &self.record_locks
    }

    /// flock locks of this instance (whole-file record locks of their own table).
    pub fn flocks(&self) -> &crate::locks::LockTable {
        &self.flocks
    }

    /// The changes front ends mark ([`crate::changes`]).
    pub fn changes(&self) -> &crate::changes::Changes {
        &self.changes
    }

    /// The write-behind leases front ends coordinate on ([`crate::leases`]).
    pub fn leases(&self) -> &crate::leases::Leases {
        &self.leases
    }

    /// Who the path-level API and `File` act as from now on (default: the process that
    /// mounted). Name operations of the inode-level API take their caller's instead.
    pub fn set_creds(&self, creds: Creds) {
        self.creds.store(Arc::new(creds));
    }

    /// The handle of `ino` (loaded from MetaDB on first use).
    pub(crate) fn handle(&self, ino: InodeNo) -> Result<Arc<Handle>, VfsError> {
        self.core.handle(ino)
    }

    pub(crate) fn opened(&self, h: &Handle) -> Result<(), VfsError> {
        let mut st = h.state_write();
        live(&st, h.ino)?;
        st.open += 1;
        Ok(())
    }

    /// The root directory's handle (once mounted).
    pub(crate) fn root(&self) -> Option<&Arc<Handle>> {
        self.root.get()
    }

    /// The identity of the path-level API.
    pub fn creds(&self) -> arc_swap::Guard<Arc<Creds>> {
        // A guard, not a clone: path calls from many threads share no counter.
        self.creds.load()
    }

    pub(crate) fn now(&self) -> i64 {
        self.core.clock.wall_ns() as i64
    }

    /// A fresh inode number (never handed out before, even across crashes).
    pub(crate) fn allocate_ino(&self) -> Result<InodeNo, VfsError> {
        let mut n = self.next_ino.lock().expect("inode counter lock");
        if n.0 >= n.1 {
            // Not through the engine: check its failure first (MetaDB fails on its own).
            self.core.engine.check_writable()?;
            let high = n.1 + INO_BATCH;
            self.core.store().put_inode_counter(high)?;
            n.1 = high;
        }
        let ino = n.0;
        n.0 += 1;
        Ok(InodeNo(ino))
    }
}
