//! The file system: mount, the inode table, and every operation on inodes and names.
//! Paths are resolved by [`crate::path`]; the std-like handles are in [`crate::file`].
//!
//! Invariants:
//! - An inode's record changes only under its handle's write lock; a directory's entries
//!   only under the directory's write lock. Cross-directory renames also take the rename
//!   mutex (so two renames cannot create a cycle), then both directories in inode order.
//! - Every operation is one MetaDB batch, except a hard-linked file's last unlink done
//!   while the file is open (its blocks are freed at last close).
//! - A name operation goes to the parent directory's domain lane (an fsync of the
//!   directory makes it durable); a file's data and size go to the file's lane with its
//!   blocks (an fsync of the file makes them durable, and the name it was created under).
//! - Inode numbers are never reused: numbers are handed out only below a durable
//!   high-water mark, raised 1024 at a time.

use crate::creds::{Creds, MAY_EXEC, MAY_WRITE, S_ISGID, S_ISUID};
use crate::error::VfsError;
use crate::pagecache::{Cache, CacheConfig, CacheStats, Pages};
use crate::rangelock::RangeLock;
use crate::records::{self, Dentry, Inode, Kind, NAME_MAX, ROOT};
use engine::log::keys::FileBlock;
use engine::log::{Durability, Engine, EngineConfig, EngineEnv, WriteOptions};
use format::InodeNo;
use metadb::WriteBatch;
use platform::{Clock, Signal};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// The file system's block (defined once, in `format`).
pub const BLOCK: u64 = format::constants::BLOCK_SIZE_BYTES;
/// Inodes with noted name lanes beyond which the lanes are persisted and forgotten.
const NAME_LANES_MAX: usize = 1 << 16;
/// Inode numbers reserved per durable high-water update.
const INO_BATCH: u64 = 1024;
/// Unused inode handles the inode table keeps (each a few hundred bytes plus its clean
/// pages, which count against the page cache's budget).
const INODE_CACHE: usize = 64 << 10;
/// Names the name cache keeps.
const NAME_CACHE: usize = 256 << 10;
/// Locks creates of names hashing alike share.
const NAME_STRIPES: usize = 256;
/// The largest file size (the block index counts 4 KiB blocks in a u64; this keeps
/// offsets within i64 for lseek).
pub const FILE_SIZE_MAX: u64 = 1 << 50;

/// An inode in memory: its attributes, and who uses it.
#[derive(Debug)]
pub(crate) struct InodeState {
    /// `None` once the inode is deleted.
    pub inode: Option<Inode>,
    /// Open handles.
    pub open: u32,
}

/// An inode in memory. Lock order: `ranges`, `writeback`, `state`, `pages` (and no
/// other inode's locks while holding `writeback` without `state`).
///
/// Laid out in declaration order, what a stat or an open reads first: `writeback`,
/// `state`, `created` and the head of `pages` (its dirty counts) follow the reference
/// count, so a stat of a file not in the CPU's caches misses the handle's first four
/// adjacent lines (three of them for a file) rather than five lines spread over eight.
#[derive(Debug)]
#[repr(C)]
pub(crate) struct Handle {
    /// Held by a write-back of the inode's dirty pages for its whole device IO, and by
    /// every writer of the inode's record (see [`Handle::write`]).
    pub writeback: Mutex<()>,
    pub state: RwLock<InodeState>,
    /// A directory's record as creates in it last wrote it, newer than `state`'s: creates
    /// hold `state` in read mode only (so that they run in parallel) and build the
    /// directory's record under the engine's lane lock from this. Taken into `state` by
    /// the next holder of its write lock ([`Handle::write`], [`Handle::state_write`]);
    /// readers of attributes see it through [`Handle::attrs`].
    pub created: Mutex<Option<Inode>>,
    /// Cached blocks of a file.
    pub pages: Mutex<Pages>,
    pub ino: InodeNo,
    /// Block ranges being written (data writers, truncate, fallocate).
    pub ranges: RangeLock,
    /// Notified (with `pages`) whenever a device read of its blocks ends.
    pub fetched: Signal,
}

/// The inode's state held for writing its record: excludes write-backs in flight too.
pub(crate) struct StateWrite<'a> {
    st: RwLockWriteGuard<'a, InodeState>,
    _writeback: MutexGuard<'a, ()>,
}

impl std::ops::Deref for StateWrite<'_> {
    type Target = InodeState;

    fn deref(&self) -> &InodeState {
        &self.st
    }
}

impl std::ops::DerefMut for StateWrite<'_> {
    fn deref_mut(&mut self) -> &mut InodeState {
        &mut self.st
    }
}

impl Handle {
    /// The state for reading (attributes, size): held briefly by the data path.
    pub fn read(&self) -> RwLockReadGuard<'_, InodeState> {
        self.state.read().expect("inode lock")
    }

    /// The state for an operation that may write the inode's record (or delete it):
    /// waits for a write-back in flight, and keeps data writers from installing pages.
    pub fn write(&self) -> StateWrite<'_> {
        let writeback = self.writeback.lock().expect("write-back lock");
        StateWrite {
            st: self.state_write(),
            _writeback: writeback,
        }
    }

    /// The state alone for writing: a data writer installing pages, or a write-back
    /// noting its result (both change no more than size, times and block count).
    pub fn state_write(&self) -> RwLockWriteGuard<'_, InodeState> {
        let mut st = self.state.write().expect("inode lock");
        if let Some(newer) = self.created().take() {
            st.inode = Some(newer);
        }
        st
    }

    fn created(&self) -> MutexGuard<'_, Option<Inode>> {
        self.created.lock().expect("created-record lock")
    }

    /// The inode's attributes with `st` (this handle's state, locked): what creates in
    /// the directory changed since the state's write lock was last taken included.
    pub fn attrs(&self, st: &InodeState) -> Result<Inode, VfsError> {
        let inode = *live(st, self.ino)?;
        if inode.kind != Kind::Dir {
            return Ok(inode); // Only directories have creates in them.
        }
        Ok(self.created().unwrap_or(inode))
    }

    pub fn pages(&self) -> std::sync::MutexGuard<'_, Pages> {
        self.pages.lock().expect("pages lock")
    }
}

/// Attributes as `stat` reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Metadata {
    pub ino: u64,
    pub kind: Kind,
    /// `st_mode`: kind and permission bits.
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    /// 512-byte units, as `st_blocks` (an upper bound: holes are not subtracted yet).
    pub blocks: u64,
    pub atime_ns: i64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub btime_ns: i64,
    /// `st_blksize`: the preferred I/O size (one block).
    pub blksize: u32,
    /// `st_rdev`: a device node's number (glibc's `dev_t` encoding), 0 for other kinds.
    pub rdev: u64,
}

impl Metadata {
    /// The `statx` mask bits every `Metadata` fills: the basic stats and the birth time
    /// (docs/SEMANTICS.md §5). `st_dev` is the front end's (the kernel's for FUSE).
    pub const STATX_MASK: u32 = libc::STATX_BASIC_STATS | libc::STATX_BTIME;
}

/// One directory entry as readdir returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    pub name: Vec<u8>,
    pub ino: u64,
    pub kind: Kind,
}

/// File-system totals as `statfs` reports them (4 KiB blocks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatFs {
    pub block_size: u32,
    pub blocks: u64,
    pub blocks_free: u64,
    pub name_max: u32,
}

/// A change of a file's time by `utimensat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeChange {
    /// The current time (UTIME_NOW): the owner, or anyone who may write the file.
    Now,
    /// This time, in nanoseconds since the epoch: the owner only.
    At(i64),
}

/// What `set_attr` changes (None leaves a field as it is).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AttrChanges {
    /// Permission bits, setuid, setgid and sticky (`mode & 0o7777`).
    pub perm: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub atime: Option<TimeChange>,
    pub mtime: Option<TimeChange>,
}

/// How `rename` treats an existing target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RenameMode {
    /// Replace a target of a compatible kind (POSIX).
    #[default]
    Replace,
    /// Fail with EEXIST if the target exists (RENAME_NOREPLACE).
    NoReplace,
    /// Swap source and target, which must both exist (RENAME_EXCHANGE).
    Exchange,
}

/// What the file system shares with its background flusher: the engine, where inode
/// records were last written, the inode table and the page cache.
pub(crate) struct Core {
    pub engine: Engine,
    pub clock: Arc<dyn Clock>,
    pub inodes: crate::caches::InodeTable,
    pub names: crate::caches::NameCache,
    /// Per inode whose record was last written in a lane other than its own domain's: a
    /// member of that lane's domain ([`Core::record_in`]).
    pub record_lanes: Mutex<HashMap<InodeNo, InodeNo>>,
    /// Per inode created in a lane other than its own domain's and not yet known durable:
    /// a member of that lane's domain ([`Core::record_in`]).
    pub create_lanes: Mutex<HashMap<InodeNo, InodeNo>>,
    pub cache: Arc<Cache>,
}

/// A mounted augefs.
pub struct FileSystem {
    pub(crate) core: Arc<Core>,
    /// (next number, durable high-water: numbers below it may be handed out).
    next_ino: Mutex<(u64, u64)>,
    rename_lock: Mutex<()>,
    /// Creates' name locks ([`FileSystem::name_stripe`]).
    name_stripes: Box<[Mutex<()>]>,
    /// Per inode, inodes whose domain lanes hold name operations its fsync must make
    /// durable: for a file, the directories it was created, linked, unlinked or renamed
    /// under (and a replaced target's); for a directory, the files whose lanes logged a
    /// change of its entries (a last unlink, a rename replacing a file). Kept here, not
    /// in the inode's handle, which lives only while the inode is in use; cleared by
    /// fsync of the inode and by sync.
    name_lanes: Mutex<HashMap<InodeNo, Vec<InodeNo>>>,
    /// Who the path-level API and `File` act as.
    creds: arc_swap::ArcSwap<Creds>,
    /// The root directory's handle, held for the mount's life: every absolute path
    /// walk starts there without a table lookup (threads share no lock to find it).
    root: std::sync::OnceLock<Arc<Handle>>,
    /// POSIX record locks (fcntl, OFD locks) and flock locks of this instance.
    record_locks: crate::locks::LockTable,
    flocks: crate::locks::LockTable,
    /// The background flusher (stopped by unmount and drop).
    flusher: Mutex<Option<crate::data::Flusher>>,
    /// The background commit, if asked for (stopped by unmount and drop).
    committer: Mutex<Option<crate::commit::Committer>>,
    /// The background read-ahead, unless configured off (stopped by unmount and drop).
    pub(crate) readahead: Option<Arc<crate::readahead::ReadAhead>>,
    /// Held while this instance serves its image to programs (device::holder), from
    /// `crate::image::open_image` until [`FileSystem::stop_serving`] or the end.
    serving: Mutex<Option<device::holder::Mark>>,
}

impl Drop for FileSystem {
    /// Without an unmount, like a crash: dirty pages are lost (and the handles the cache
    /// kept for them released).
    fn drop(&mut self) {
        self.set_commit_interval(None);
        self.stop_flusher();
        self.stop_readahead();
        self.core
            .cache
            .dirty_inodes
            .lock()
            .expect("dirty inodes lock")
            .clear();
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

impl Core {
    /// Before a batch of `lane`'s domain writes inode `x`'s record: if `x`'s record was
    /// last written in another domain's lane, that lane is made durable first (a no-op
    /// when it is already). Each lane keeps a prefix of its batches after a crash; without
    /// this, a record written in one lane could carry changes whose other records (an
    /// attribute, an entry) sat in a lost batch of another lane, giving the inode a state
    /// it never had. Called under `x`'s write lock, which orders all writes of its record.
    /// A new inode's record, written in its parent's lane by the create, is settled only
    /// before a name operation (`names`: a link, an unlink, a rename, whose link count or
    /// parent counts the create's entry) writes it in another lane, not before writes of
    /// its data or attributes: a crash can then at worst leave the inode without its name
    /// (docs/SEMANTICS.md §2), and a create followed by writes costs no device flush.
    pub(crate) fn record_in(&self, x: InodeNo, lane: InodeNo) -> Result<(), VfsError> {
        self.record_in_for(x, lane, false)
    }

    /// [`Core::record_in`] for a name operation.
    pub(crate) fn record_in_names(&self, x: InodeNo, lane: InodeNo) -> Result<(), VfsError> {
        self.record_in_for(x, lane, true)
    }

    fn record_in_for(&self, x: InodeNo, lane: InodeNo, names: bool) -> Result<(), VfsError> {
        let d = self.engine.domain_of(lane);
        if names || d != self.engine.domain_of(x) {
            let created = self
                .create_lanes
                .lock()
                .expect("create lanes lock")
                .remove(&x);
            if let Some(c) = created.filter(|&c| self.engine.domain_of(c) != d) {
                self.engine.fsync(c)?;
            }
        }
        let last = self
            .record_lanes
            .lock()
            .expect("record lanes lock")
            .get(&x)
            .copied()
            .unwrap_or(x);
        if self.engine.domain_of(last) != d {
            self.engine.fsync(last)?;
        }
        let mut map = self.record_lanes.lock().expect("record lanes lock");
        if self.engine.domain_of(x) == d {
            map.remove(&x);
        } else {
            map.insert(x, lane);
        }
        Ok(())
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
        let db = engine.metadb();
        let high = match db.get(records::COUNTER_KEY)? {
            Some(v) if v.len() == 8 => u64::from_le_bytes(v.try_into().expect("8 bytes")),
            Some(v) => return Err(VfsError::corrupt("inode counter", "length", 8, v.len())),
            None => ROOT.0 + 1,
        };
        let core = Arc::new(Core {
            engine,
            clock,
            inodes: crate::caches::InodeTable::new(INODE_CACHE),
            names: crate::caches::NameCache::new(NAME_CACHE),
            record_lanes: Mutex::new(HashMap::new()),
            create_lanes: Mutex::new(HashMap::new()),
            cache: Arc::new(Cache::new(cache)),
        });
        core.refresh_room();
        let flusher = cache
            .flush_interval
            .map(|every| crate::data::Flusher::start(core.clone(), every));
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
            flusher: Mutex::new(flusher),
            committer: Mutex::new(None),
            root: std::sync::OnceLock::new(),
            readahead,
            serving: Mutex::new(None),
        };
        if fs
            .core
            .engine
            .metadb()
            .get(&records::inode_key(ROOT))?
            .is_none()
        {
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
        fs.reap_orphans()?;
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
        self.stop_flusher();
        self.stop_readahead();
        self.core.write_back_all()?;
        let core = self.core.clone();
        drop(self);
        // Nothing else holds the core once the flusher is stopped (handles hold only the
        // cache's counters).
        let core = Arc::into_inner(core).expect("no other holder of the core");
        // Handles with dirty pages are gone (all written back): drop the rest.
        core.cache
            .dirty_inodes
            .lock()
            .expect("dirty inodes lock")
            .clear();
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

    /// Who the path-level API and `File` act as from now on (default: the process that
    /// mounted). Name operations of the inode-level API take their caller's instead.
    pub fn set_creds(&self, creds: Creds) {
        self.creds.store(Arc::new(creds));
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

    /// `access(2)`: Ok if `cx` may access `ino` as `mask` (MAY_* bits) says.
    pub fn access(&self, cx: &Creds, ino: InodeNo, mask: u32) -> Result<(), VfsError> {
        let h = self.handle(ino)?;
        let st = h.read();
        cx.check(live(&st, ino)?, mask, || format!("inode {ino}"))
    }

    pub(crate) fn now(&self) -> i64 {
        self.core.clock.wall_ns() as i64
    }

    /// The handle of `ino` (loaded from MetaDB on first use).
    pub(crate) fn handle(&self, ino: InodeNo) -> Result<Arc<Handle>, VfsError> {
        self.core.inodes.get_or_load(ino, || {
            let inode = match self.core.engine.metadb().get(&records::inode_key(ino))? {
                Some(v) => Some(Inode::decode(ino, &v)?),
                None => None,
            };
            Ok(Handle {
                ino,
                ranges: RangeLock::default(),
                writeback: Mutex::new(()),
                state: RwLock::new(InodeState { inode, open: 0 }),
                created: Mutex::new(None),
                pages: Mutex::new(Pages::new(self.core.cache.clone())),
                fetched: Signal::new(),
            })
        })
    }

    /// A fresh inode number (never handed out before, even across crashes).
    pub(crate) fn allocate_ino(&self) -> Result<InodeNo, VfsError> {
        let mut n = self.next_ino.lock().expect("inode counter lock");
        if n.0 >= n.1 {
            // Not through the engine: check its failure first (MetaDB fails on its own).
            self.core.engine.check_writable()?;
            let high = n.1 + INO_BATCH;
            self.core.engine.metadb().put(
                records::COUNTER_KEY,
                &high.to_le_bytes(),
                metadb::Durability::Sync,
            )?;
            n.1 = high;
        }
        let ino = n.0;
        n.0 += 1;
        Ok(InodeNo(ino))
    }

    /// The entry `name` of directory `dir` (whose state the caller has locked or read).
    pub(crate) fn lookup(&self, dir: InodeNo, name: &[u8]) -> Result<Option<Dentry>, VfsError> {
        let ticket = match self.core.names.get(dir, name) {
            crate::caches::Cached::Hit(entry) => return Ok(entry),
            crate::caches::Cached::Miss(ticket) => ticket,
        };
        let entry = match self
            .core
            .engine
            .metadb()
            .get(&records::dentry_key(dir, name))?
        {
            Some(v) => Some(Dentry::decode(&v)?),
            None => None,
        };
        self.core.names.fill(ticket, dir, name, entry);
        Ok(entry)
    }

    /// Notes that `lane`'s domain lane holds a name operation an fsync of `ino` must
    /// reach (one entry per domain: each list stays as short as the domain count).
    pub(crate) fn note_lane(&self, ino: InodeNo, lane: InodeNo) {
        let d = self.core.engine.domain_of(lane);
        if d == self.core.engine.domain_of(ino) {
            return;
        }
        let mut map = self.name_lanes.lock().expect("name lanes lock");
        let lanes = map.entry(ino).or_default();
        if !lanes.iter().any(|&x| self.core.engine.domain_of(x) == d) {
            lanes.push(lane);
        }
        if map.len() > NAME_LANES_MAX {
            // Many inodes never fsync'd: forget them once their lanes are durable.
            let all = std::mem::take(&mut *map);
            drop(map);
            // An error turns the file system read-only; the next fsync reports it.
            let _ = self.persist_lanes(all.into_values().flatten());
        }
    }

    /// Makes the lanes of `lanes`' domains durable (one device flush at most).
    pub(crate) fn persist_lanes(
        &self,
        lanes: impl IntoIterator<Item = InodeNo>,
    ) -> Result<(), VfsError> {
        let lanes: Vec<InodeNo> = lanes.into_iter().collect();
        self.core.engine.fsync_all(&lanes)?;
        Ok(())
    }

    /// Notes that `ino` was created in `parent`'s lane (see [`FileSystem::record_in`]).
    fn note_create(&self, ino: InodeNo, parent: InodeNo) -> Result<(), VfsError> {
        if self.core.engine.domain_of(ino) == self.core.engine.domain_of(parent) {
            return Ok(());
        }
        let mut map = self.core.create_lanes.lock().expect("create lanes lock");
        map.insert(ino, parent);
        if map.len() > NAME_LANES_MAX {
            // Many creates never linked elsewhere: make their lanes durable, forget them.
            let all = std::mem::take(&mut *map);
            drop(map);
            self.persist_lanes(all.into_values())?;
        }
        Ok(())
    }

    /// Forgets every noted lane (a sync covers them all).
    pub(crate) fn forget_lanes(&self) {
        std::mem::take(&mut *self.name_lanes.lock().expect("name lanes lock"));
        std::mem::take(&mut *self.core.record_lanes.lock().expect("record lanes lock"));
        std::mem::take(&mut *self.core.create_lanes.lock().expect("create lanes lock"));
    }

    /// The lanes `ino`'s fsync must persist, forgotten here.
    pub(crate) fn take_lanes(&self, ino: InodeNo) -> Vec<InodeNo> {
        self.name_lanes
            .lock()
            .expect("name lanes lock")
            .remove(&ino)
            .unwrap_or_default()
    }

    /// Attributes of `ino` but for `st_blocks`, which leaves out dirty pages (what open,
    /// permission checks and seeks need: never waits for a write-back).
    pub(crate) fn attrs_ino(&self, ino: InodeNo) -> Result<Metadata, VfsError> {
        let h = self.handle(ino)?;
        let st = h.read();
        Ok(metadata(ino, &h.attrs(&st)?))
    }

    /// Attributes of `ino`. `st_blocks` is exact: it waits for a write-back of the file
    /// in flight (its blocks are mapped before its record counts them).
    pub fn stat_ino(&self, ino: InodeNo) -> Result<Metadata, VfsError> {
        let h = self.handle(ino)?;
        // A write-back in flight has mapped blocks its record does not count yet: the
        // count is read between write-backs.
        let _writeback = h.writeback.lock().expect("write-back lock");
        let mut meta = metadata(ino, &h.attrs(&h.read())?);
        // Blocks dirty pages will allocate count already (as the kernel's delayed
        // allocation does).
        meta.blocks += self.core.pending_blocks(&h)? * (BLOCK / 512);
        Ok(meta)
    }

    /// Creates `name` in directory `parent`: a file, a directory or (with `target`) a
    /// symbolic link. EEXIST if the name is taken. Special files are [`FileSystem::mknod`].
    pub fn create(
        &self,
        cx: &Creds,
        parent: InodeNo,
        name: &[u8],
        kind: Kind,
        perm: u32,
        target: Option<&[u8]>,
    ) -> Result<InodeNo, VfsError> {
        assert!(!kind.is_special(), "special files are made by mknod");
        let node = NewNode {
            kind,
            perm,
            target,
            rdev: 0,
        };
        self.create_node(cx, parent, name, node)
    }

    /// `mknod(2)`: creates `name` in directory `parent` as a regular file, a FIFO, a
    /// socket or a device node (`dev`, a `dev_t`, for a device; ignored otherwise, as
    /// Linux does). The vfs only records the node: a FIFO's pipe, a socket and a device
    /// are the kernel's, through a kernel front end (docs/SEMANTICS.md §4). EINVAL for
    /// a directory, a symbolic link or a device number `mknod(2)` cannot carry.
    pub fn mknod(
        &self,
        cx: &Creds,
        parent: InodeNo,
        name: &[u8],
        kind: Kind,
        perm: u32,
        dev: u64,
    ) -> Result<InodeNo, VfsError> {
        if !(kind == Kind::File || kind.is_special()) {
            return Err(VfsError::Invalid(format!(
                "mknod of a {kind:?} ({})",
                show(name)
            )));
        }
        let rdev = match kind.is_device() {
            true => records::rdev_of(dev).ok_or_else(|| {
                VfsError::Invalid(format!("device number {dev:#x} ({})", show(name)))
            })?,
            false => 0,
        };
        let node = NewNode {
            kind,
            perm,
            target: None,
            rdev,
        };
        self.create_node(cx, parent, name, node)
    }

    /// [`FileSystem::create`] and [`FileSystem::mknod`]: one batch in the parent's lane.
    fn create_node(
        &self,
        cx: &Creds,
        parent: InodeNo,
        name: &[u8],
        node: NewNode<'_>,
    ) -> Result<InodeNo, VfsError> {
        let NewNode {
            kind,
            perm,
            target,
            rdev,
        } = node;
        check_name(name)?;
        assert_eq!(
            kind == Kind::Symlink,
            target.is_some(),
            "a symlink has a target"
        );
        assert!(rdev == 0 || kind.is_device(), "rdev only on devices");
        let ph = self.handle(parent)?;
        // Creates share the directory (read mode): the name's stripe keeps two creates of
        // one name apart, and the directory's record is built in lane order below.
        // Everything else that changes the directory's entries holds it in write mode.
        let pst = ph.read();
        let _name = self.name_stripe(parent, name);
        let _forget = self.core.names.forget_on_drop(parent, name);
        let pinode = self.free_name(cx, &pst, parent, name)?;
        if kind == Kind::Dir {
            relinked(parent, pinode.nlink, 1)?;
        }
        let ino = self.allocate_ino()?;
        let mut inode = new_inode(cx, &pinode, parent, kind, perm, self.now());
        inode.size = target.map_or(0, |t| t.len() as u64);
        inode.rdev = rdev;
        let now = inode.btime_ns;
        let mut batch = WriteBatch::new();
        batch.put(
            records::dentry_key(parent, name),
            Dentry { ino, kind }.encode().to_vec(),
        );
        batch.put(records::inode_key(ino).to_vec(), inode.encode().to_vec());
        if let Some(t) = target {
            batch.put(records::symlink_key(ino).to_vec(), t.to_vec());
        }
        self.core.record_in(parent, parent)?;
        let ph_ref = &ph;
        self.core
            .engine
            .put_create(parent, ino, batch, Durability::Buffered, |batch| {
                // Under the lane's lock: the record order in the lane is the order of
                // these updates, so the last record of the directory is the newest.
                let mut created = ph_ref.created();
                let mut pinode = created.unwrap_or(pinode);
                pinode.mtime_ns = pinode.mtime_ns.max(now);
                pinode.ctime_ns = pinode.ctime_ns.max(now);
                if kind == Kind::Dir {
                    // Checked above; creates of other names (the directory in read
                    // mode too) may each add one since, so saturate, never overflow.
                    pinode.nlink = pinode.nlink.saturating_add(1);
                }
                batch.put(
                    records::inode_key(parent).to_vec(),
                    pinode.encode().to_vec(),
                );
                *created = Some(pinode);
            })?;
        let h = self.handle(ino)?;
        let mut st = h.write();
        st.inode = Some(inode);
        drop(st);
        self.note_lane(ino, parent);
        self.note_create(ino, parent)?;
        Ok(ino)
    }

    /// The lock of the stripe of names `name` of `parent` falls in: held by a create
    /// from its check that the name is free until its entry is in MetaDB.
    fn name_stripe(&self, parent: InodeNo, name: &[u8]) -> MutexGuard<'_, ()> {
        let i = (crate::caches::name_hash(parent, name) >> 56) as usize % self.name_stripes.len();
        self.name_stripes[i].lock().expect("name stripe lock")
    }

    /// The target of symbolic link `ino`.
    pub fn readlink_ino(&self, ino: InodeNo) -> Result<Vec<u8>, VfsError> {
        let h = self.handle(ino)?;
        let st = h.read();
        if live(&st, ino)?.kind != Kind::Symlink {
            return Err(VfsError::Invalid(format!(
                "inode {ino} is not a symbolic link"
            )));
        }
        self.core
            .engine
            .metadb()
            .get(&records::symlink_key(ino))?
            .ok_or_else(|| {
                VfsError::corrupt(format!("symlink {ino}"), "target", "present", "absent")
            })
    }

    /// Entries of directory `dir` after `after` (a name a previous call returned, or
    /// None to start), at most `max`. A cursor stays valid while entries come and go:
    /// an entry present throughout is returned exactly once.
    pub fn readdir(
        &self,
        cx: &Creds,
        dir: InodeNo,
        after: Option<&[u8]>,
        max: usize,
    ) -> Result<Vec<DirEntry>, VfsError> {
        let h = self.handle(dir)?;
        let st = h.read();
        let inode = live(&st, dir)?;
        if inode.kind != Kind::Dir {
            return Err(VfsError::NotDir(format!("inode {dir}")));
        }
        cx.check(inode, crate::creds::MAY_READ, || format!("directory {dir}"))?;
        let prefix = records::dentry_prefix(dir);
        let start = match after {
            Some(name) => {
                let mut k = records::dentry_key(dir, name);
                k.push(0);
                k
            }
            None => prefix.clone(),
        };
        // The first key past this directory's entries: the next inode's prefix (a byte
        // increment of the last byte would overflow for inodes ending in 0xff).
        // (Inode u64::MAX, named by a damaged entry, has no next: its entries run to the
        // end of the entry keys.)
        let end = match dir.0.checked_add(1) {
            Some(next) => records::dentry_prefix(InodeNo(next)),
            None => vec![records::DENTRY_TAG + 1],
        };
        let mut out = Vec::new();
        for item in self.core.engine.metadb().range(&start, Some(&end), None)? {
            let (key, value) = item?;
            let d = Dentry::decode(&value)?;
            out.push(DirEntry {
                name: key[prefix.len()..].to_vec(),
                ino: d.ino.0,
                kind: d.kind,
            });
            if out.len() >= max {
                break;
            }
        }
        Ok(out)
    }

    /// The inode of directory `parent` (whose state `pst` the caller holds locked) for a
    /// new entry `name`: search permission, EEXIST if the name is taken, then write
    /// permission (the order Linux checks in).
    fn free_name(
        &self,
        cx: &Creds,
        pst: &InodeState,
        parent: InodeNo,
        name: &[u8],
    ) -> Result<Inode, VfsError> {
        let pinode = live_dir(pst, parent, name)?;
        cx.check(&pinode, MAY_EXEC, || show(name))?;
        if self.lookup(parent, name)?.is_some() {
            return Err(VfsError::Exists(show(name)));
        }
        cx.check(&pinode, MAY_WRITE, || show(name))?;
        Ok(pinode)
    }

    /// Whether directory `dir` has no entries (no lock taken: callers hold it).
    fn is_empty_dir(&self, dir: InodeNo) -> Result<bool, VfsError> {
        let prefix = records::dentry_prefix(dir);
        let mut iter = self.core.engine.metadb().prefix(&prefix, None)?;
        Ok(iter.next().transpose()?.is_none())
    }

    /// Removes `name` from `parent`: a non-directory (`dir` false) or an empty
    /// directory (`dir` true).
    pub fn remove(
        &self,
        cx: &Creds,
        parent: InodeNo,
        name: &[u8],
        dir: bool,
    ) -> Result<(), VfsError> {
        check_name(name)?;
        let ph = self.handle(parent)?;
        let mut pst = ph.write();
        let _forget = self.core.names.forget_on_drop(parent, name);
        let mut pinode = live_dir(&pst, parent, name)?;
        cx.check(&pinode, MAY_EXEC, || show(name))?;
        let entry = self
            .lookup(parent, name)?
            .ok_or_else(|| VfsError::NotFound(show(name)))?;
        match (dir, entry.kind == Kind::Dir) {
            (false, true) => return Err(VfsError::IsDir(show(name))),
            (true, false) => return Err(VfsError::NotDir(show(name))),
            _ => {}
        }
        let ch = self.handle(entry.ino)?;
        let mut cst = ch.write();
        let child = *live(&cst, entry.ino)?;
        cx.may_delete(&pinode, &child, || show(name))?;
        if dir && !self.is_empty_dir(entry.ino)? {
            return Err(VfsError::NotEmpty(show(name)));
        }
        // The record is rewritten: its dirty pages first (a file being deleted has
        // them dropped instead, once the deletion is done).
        if !((dir || child.nlink == 1) && cst.open == 0) {
            self.settle(&ch, &mut cst)?;
        }
        let mut child = *live(&cst, entry.ino)?;
        let now = self.now();
        pinode.mtime_ns = now;
        pinode.ctime_ns = now;
        let mut batch = WriteBatch::new();
        batch.delete(records::dentry_key(parent, name));
        if dir {
            pinode.nlink = relinked(parent, pinode.nlink, -1)?;
            child.nlink = 0;
        } else {
            child.nlink = relinked(entry.ino, child.nlink, -1)?;
        }
        child.ctime_ns = now;
        let gone = child.nlink == 0 && cst.open == 0;
        if gone && child.kind == Kind::File {
            // The entry's removal goes with the unmapping of the blocks in the file's
            // lane, ordered both ways with the directory's lane; the directory's new
            // times follow in its own lane, the first batch there that requires it.
            self.order_deletion(entry.ino, &[parent], &[]);
            self.delete_inode(entry.ino, &child, batch)?;
            cst.inode = None;
            self.drop_pages(entry.ino);
            self.core.engine.order_after(parent, entry.ino);
            // Logged in the file's lane: an fsync of the directory must reach it.
            self.note_lane(parent, entry.ino);
            let mut times = WriteBatch::new();
            times.put(
                records::inode_key(parent).to_vec(),
                pinode.encode().to_vec(),
            );
            self.core.record_in(parent, parent)?;
            self.core
                .engine
                .put_metadata(parent, &times, Durability::Buffered)?;
        } else if gone {
            // A directory or a symlink has no blocks: all of it in the parent's lane.
            batch.put(
                records::inode_key(parent).to_vec(),
                pinode.encode().to_vec(),
            );
            self.core.record_in(parent, parent)?;
            self.deletion_records(entry.ino, &child, &mut batch)?;
            self.core
                .engine
                .put_metadata(parent, &batch, Durability::Buffered)?;
            cst.inode = None;
        } else {
            batch.put(
                records::inode_key(parent).to_vec(),
                pinode.encode().to_vec(),
            );
            self.core.record_in(parent, parent)?;
            self.core.record_in_names(entry.ino, parent)?;
            batch.put(
                records::inode_key(entry.ino).to_vec(),
                child.encode().to_vec(),
            );
            if child.nlink == 0 {
                // Open, nameless: freed at last close, or by the next mount.
                batch.put(records::orphan_key(entry.ino).to_vec(), Vec::new());
            }
            // The link count changed in the parent's lane: the file's fsync reaches it.
            self.note_lane(entry.ino, parent);
            self.core
                .engine
                .put_metadata(parent, &batch, Durability::Buffered)?;
            cst.inode = Some(child);
        }
        pst.inode = Some(pinode);
        Ok(())
    }

    /// Deletes inode `ino` and its blocks, with `batch` (the name operation that
    /// dropped its last link, or the deletion of its orphan record), in one batch of the
    /// inode's lane.
    fn delete_inode(
        &self,
        ino: InodeNo,
        inode: &Inode,
        mut batch: WriteBatch,
    ) -> Result<(), VfsError> {
        self.deletion_records(ino, inode, &mut batch)?;
        self.core.engine.punch(
            ino,
            FileBlock(0),
            None,
            WriteOptions::new(&batch, Durability::Buffered),
        )?;
        Ok(())
    }

    /// Orders the batch about to delete `ino` in its own lane (its last link went, by an
    /// unlink or a rename over it) after what it depends on in other lanes: the lanes of
    /// `dirs`, whose entries it changes (where the removed name was created, or renamed
    /// or linked to), of `ino`'s other name operations not yet durable (an unlink of
    /// another of its links), and of `also` (a name the batch gives). So no crash keeps
    /// the deletion and loses one of them, which would leave a name for the freed inode.
    /// The other direction, after the deletion, is `Engine::order_after(dir, ino)` for
    /// each of `dirs`: a later batch there (reusing a removed name) never survives
    /// without it (docs/DESIGN.md §4c "Deletions in the file's lane").
    fn order_deletion(&self, ino: InodeNo, dirs: &[InodeNo], also: &[InodeNo]) {
        let lanes = self.take_lanes(ino);
        for &lane in dirs.iter().chain(&lanes).chain(also) {
            self.core.engine.order_after(ino, lane);
        }
    }

    /// The lanes `ino`'s fsync must persist (kept for it).
    fn lanes_of(&self, ino: InodeNo) -> Vec<InodeNo> {
        self.name_lanes
            .lock()
            .expect("name lanes lock")
            .get(&ino)
            .cloned()
            .unwrap_or_default()
    }

    /// Adds the deletion of inode `ino`'s records (not its blocks) to `batch`. A deletion
    /// needs no [`FileSystem::record_in`]: whichever lane keeps or loses it, the inode
    /// is either gone or in a state it had.
    fn deletion_records(
        &self,
        ino: InodeNo,
        inode: &Inode,
        batch: &mut WriteBatch,
    ) -> Result<(), VfsError> {
        batch.delete(records::inode_key(ino).to_vec());
        if inode.kind == Kind::Symlink {
            batch.delete(records::symlink_key(ino).to_vec());
        }
        for name in self.xattr_names(ino)? {
            batch.delete(records::xattr_key(ino, &name));
        }
        self.core
            .record_lanes
            .lock()
            .expect("record lanes lock")
            .remove(&ino);
        Ok(())
    }

    /// The last handle of `ino` closed: an unlinked inode's blocks are freed now.
    pub(crate) fn release(&self, h: &Handle) -> Result<(), VfsError> {
        let last_of_orphan = {
            let mut st = h.state_write();
            st.open -= 1;
            st.open == 0 && st.inode.is_some_and(|i| i.nlink == 0)
        };
        if !last_of_orphan {
            return Ok(());
        }
        // Deleting: also wait for a write-back in flight (then check again: it may
        // have been reopened or linked meanwhile).
        let mut st = h.write();
        if st.open == 0 {
            if let Some(inode) = st.inode {
                if inode.nlink == 0 {
                    self.reap_orphan(h.ino, &inode)?;
                    st.inode = None;
                    self.drop_pages(h.ino);
                }
            }
        }
        Ok(())
    }

    /// Frees the orphan `ino`: its deletion goes to its own lane, the name operation
    /// that orphaned it went to its parent's; that lane is made durable first, so a
    /// crash never keeps the deletion without the unlink (a name for a freed inode).
    fn reap_orphan(&self, ino: InodeNo, inode: &Inode) -> Result<(), VfsError> {
        self.persist_lanes(self.take_lanes(ino))?;
        let mut batch = WriteBatch::new();
        batch.delete(records::orphan_key(ino).to_vec());
        self.delete_inode(ino, inode, batch)
    }

    /// Mount: frees every orphan a crash (or a failed close) left. An orphan record whose
    /// inode is gone or named again is dropped.
    fn reap_orphans(&self) -> Result<u64, VfsError> {
        let found = self
            .core
            .engine
            .metadb()
            .prefix(&[records::ORPHAN_TAG], None)?
            .map(|item| item.map(|(key, _)| key))
            .collect::<Result<Vec<_>, _>>()?;
        let mut reaped = 0;
        for key in found {
            let ino = records::parse_orphan_key(&key)?;
            let h = self.handle(ino)?;
            let mut st = h.write();
            match st.inode {
                Some(inode) if inode.nlink == 0 => {
                    self.reap_orphan(ino, &inode)?;
                    st.inode = None;
                    reaped += 1;
                }
                _ => {
                    let mut batch = WriteBatch::new();
                    batch.delete(key);
                    self.core
                        .engine
                        .put_metadata(ino, &batch, Durability::Buffered)?;
                }
            }
        }
        Ok(reaped)
    }

    /// Hard link: a new name `name` in `parent` for the non-directory `ino`.
    pub fn link(
        &self,
        cx: &Creds,
        ino: InodeNo,
        parent: InodeNo,
        name: &[u8],
    ) -> Result<(), VfsError> {
        check_name(name)?;
        // Directories have no hard links (checked before locking: `ino` may be `parent`).
        if self.attrs_ino(ino)?.kind == Kind::Dir {
            return Err(VfsError::NotPermitted(format!(
                "inode {ino}: hard links to directories"
            )));
        }
        let ph = self.handle(parent)?;
        let mut pst = ph.write();
        let _forget = self.core.names.forget_on_drop(parent, name);
        let mut pinode = self.free_name(cx, &pst, parent, name)?;
        let h = self.handle(ino)?;
        let mut st = h.write();
        self.settle(&h, &mut st)?;
        let mut inode = *live(&st, ino)?;
        let now = self.now();
        let mut batch = WriteBatch::new();
        if inode.nlink == 0 {
            // An O_TMPFILE file (or one unlinked while open) gets a name: no longer an
            // orphan. Its orphan record's lane is made durable first (`record_in_names`).
            batch.delete(records::orphan_key(ino).to_vec());
        }
        inode.nlink = relinked(ino, inode.nlink, 1)?;
        inode.ctime_ns = now;
        pinode.mtime_ns = now;
        pinode.ctime_ns = now;
        batch.put(
            records::dentry_key(parent, name),
            Dentry {
                ino,
                kind: inode.kind,
            }
            .encode()
            .to_vec(),
        );
        batch.put(records::inode_key(ino).to_vec(), inode.encode().to_vec());
        batch.put(
            records::inode_key(parent).to_vec(),
            pinode.encode().to_vec(),
        );
        self.core.record_in_names(ino, parent)?;
        self.core.record_in(parent, parent)?;
        self.core
            .engine
            .put_metadata(parent, &batch, Durability::Buffered)?;
        st.inode = Some(inode);
        self.note_lane(ino, parent);
        pst.inode = Some(pinode);
        Ok(())
    }

    /// Renames `sp/sname` to `dp/dname` atomically (one batch).
    pub fn rename(
        &self,
        cx: &Creds,
        sp: InodeNo,
        sname: &[u8],
        dp: InodeNo,
        dname: &[u8],
        mode: RenameMode,
    ) -> Result<(), VfsError> {
        check_name(sname)?;
        check_name(dname)?;
        let _cross = (sp != dp).then(|| self.rename_lock.lock().expect("rename lock"));
        let (sh, dh) = (self.handle(sp)?, self.handle(dp)?);
        // Both parents, an ancestor before its descendant (the order every other
        // operation takes parent and child in), else by inode number; the rename mutex
        // keeps the tree's shape still meanwhile. One lock for one directory.
        let source_first =
            sp != dp && (self.is_ancestor(sp, dp)? || (!self.is_ancestor(dp, sp)? && sp < dp));
        let (mut s_guard, mut d_guard) = if sp == dp {
            (sh.write(), None)
        } else if source_first {
            let s = sh.write();
            (s, Some(dh.write()))
        } else {
            let d = dh.write();
            (sh.write(), Some(d))
        };
        let _forget_source = self.core.names.forget_on_drop(sp, sname);
        let _forget_target = self.core.names.forget_on_drop(dp, dname);
        let mut spi = live_dir(&s_guard, sp, sname)?;
        let mut dpi = match &d_guard {
            Some(g) => live_dir(g, dp, dname)?,
            None => spi,
        };
        cx.check(&spi, MAY_EXEC, || show(sname))?;
        cx.check(&dpi, MAY_EXEC, || show(dname))?;
        let src = self
            .lookup(sp, sname)?
            .ok_or_else(|| VfsError::NotFound(show(sname)))?;
        let dst = self.lookup(dp, dname)?;
        self.may_rename(cx, (sp, &spi, sname, &src), (dp, &dpi, dname, dst.as_ref()))?;
        if sp == dp && sname == dname {
            return match mode {
                RenameMode::NoReplace => Err(VfsError::Exists(show(dname))),
                _ => Ok(()),
            };
        }
        // The files the rename gives new names: written back first, and the rename
        // logged after their lanes (below), so a new name never survives without the
        // data the file had (docs/SEMANTICS.md §2; ext4's auto_da_alloc does as much for
        // a rename over a file).
        let mut renamed = vec![src];
        if let (RenameMode::Exchange, Some(d)) = (mode, dst) {
            renamed.push(d);
        }
        renamed.retain(|d| d.kind == Kind::File);
        renamed.dedup_by_key(|d| d.ino);
        for d in &renamed {
            let h = self.handle(d.ino)?;
            let mut st = h.write();
            if st.inode.is_some() {
                self.settle(&h, &mut st)?;
            }
        }
        let now = self.now();
        let mut batch = WriteBatch::new();
        let mut follow_up: Option<(InodeNo, Inode)> = None;
        // Link-count changes of the source and destination directories.
        let (mut s_links, mut d_links) = (0i64, 0i64);
        match (mode, dst) {
            (RenameMode::NoReplace, Some(_)) => return Err(VfsError::Exists(show(dname))),
            (RenameMode::Exchange, None) => return Err(VfsError::NotFound(show(dname))),
            (RenameMode::Exchange, Some(d)) => {
                let into_itself = |dir: &Dentry, dest: InodeNo| -> Result<bool, VfsError> {
                    Ok(dir.kind == Kind::Dir && sp != dp && self.is_ancestor(dir.ino, dest)?)
                };
                if into_itself(&src, dp)? || into_itself(&d, sp)? {
                    return Err(VfsError::Invalid(format!(
                        "cannot move {} into itself",
                        show(dname)
                    )));
                }
                batch.put(records::dentry_key(dp, dname), src.encode().to_vec());
                batch.put(records::dentry_key(sp, sname), d.encode().to_vec());
                if src.kind == Kind::Dir {
                    self.reparent(src.ino, dp, now, &mut batch)?;
                }
                if d.kind == Kind::Dir {
                    self.reparent(d.ino, sp, now, &mut batch)?;
                }
                if (src.kind == Kind::Dir) != (d.kind == Kind::Dir) {
                    // A directory changes parents: one link moves with it.
                    let delta: i64 = if src.kind == Kind::Dir { 1 } else { -1 };
                    d_links += delta;
                    s_links -= delta;
                }
            }
            (_, target) => {
                if src.kind == Kind::Dir && sp != dp && self.is_ancestor(src.ino, dp)? {
                    return Err(VfsError::Invalid(format!(
                        "cannot move {} into itself",
                        show(sname)
                    )));
                }
                if let Some(t) = target {
                    if t.ino == src.ino {
                        // Two names of one file: POSIX says do nothing.
                        return Ok(());
                    }
                    match (src.kind == Kind::Dir, t.kind == Kind::Dir) {
                        (false, true) => return Err(VfsError::IsDir(show(dname))),
                        (true, false) => return Err(VfsError::NotDir(show(dname))),
                        (true, true) => {
                            if !self.is_empty_dir(t.ino)? {
                                return Err(VfsError::NotEmpty(show(dname)));
                            }
                        }
                        (false, false) => {}
                    }
                    let th = self.handle(t.ino)?;
                    let mut tst = th.write();
                    if !((t.kind == Kind::Dir || live(&tst, t.ino)?.nlink == 1) && tst.open == 0) {
                        self.settle(&th, &mut tst)?;
                    }
                    let mut tinode = *live(&tst, t.ino)?;
                    tinode.ctime_ns = now;
                    if t.kind == Kind::Dir {
                        tinode.nlink = 0;
                        d_links -= 1;
                    } else {
                        tinode.nlink = relinked(t.ino, tinode.nlink, -1)?;
                    }
                    if tinode.nlink == 0 && tst.open == 0 && tinode.kind == Kind::File {
                        follow_up = Some((t.ino, tinode));
                        tst.inode = None;
                    } else if tinode.nlink == 0 && tst.open == 0 {
                        // A directory or symlink: no blocks, so it goes with the rename.
                        self.deletion_records(t.ino, &tinode, &mut batch)?;
                        tst.inode = None;
                    } else {
                        self.core.record_in_names(t.ino, dp)?;
                        batch.put(records::inode_key(t.ino).to_vec(), tinode.encode().to_vec());
                        if tinode.nlink == 0 {
                            // Open, nameless: freed at last close, or by the next mount.
                            batch.put(records::orphan_key(t.ino).to_vec(), Vec::new());
                        }
                        self.note_lane(t.ino, dp);
                        tst.inode = Some(tinode);
                    }
                }
                batch.delete(records::dentry_key(sp, sname));
                batch.put(records::dentry_key(dp, dname), src.encode().to_vec());
                if src.kind == Kind::Dir {
                    self.reparent(src.ino, dp, now, &mut batch)?;
                    s_links -= 1;
                    d_links += 1;
                }
            }
        }
        spi.mtime_ns = now;
        spi.ctime_ns = now;
        dpi.mtime_ns = now;
        dpi.ctime_ns = now;
        let mut parents = WriteBatch::new();
        if sp == dp {
            // One directory carries both changes.
            spi.nlink = relinked(sp, spi.nlink, s_links + d_links)?;
            dpi = spi;
            parents.put(records::inode_key(sp).to_vec(), spi.encode().to_vec());
        } else {
            spi.nlink = relinked(sp, spi.nlink, s_links)?;
            dpi.nlink = relinked(dp, dpi.nlink, d_links)?;
            parents.put(records::inode_key(sp).to_vec(), spi.encode().to_vec());
            parents.put(records::inode_key(dp).to_vec(), dpi.encode().to_vec());
        }
        self.core.record_in(sp, dp)?;
        self.core.record_in(dp, dp)?;
        // The lane the rename is logged in; fsyncs of both directories must reach it.
        let logged_in = match follow_up {
            // The replaced file's last link: the entries go to its lane with its deletion,
            // so the rename and the freeing are one batch; the parents' new times (their
            // link counts do not change: a file replaced a file) follow in `dp`'s lane.
            Some((ino, inode)) => {
                let mut also = self.lanes_of(src.ino);
                also.push(src.ino);
                self.order_deletion(ino, &[sp, dp], &also);
                self.delete_inode(ino, &inode, batch)?;
                self.drop_pages(ino);
                self.core.engine.order_after(sp, ino);
                self.core.engine.order_after(dp, ino);
                self.core
                    .engine
                    .put_metadata(dp, &parents, Durability::Buffered)?;
                ino
            }
            None => {
                for (kind, key, value) in parents.ops() {
                    assert_eq!(kind, metadb::ValueKind::Put, "parent records are puts");
                    batch.put(key.to_vec(), value.to_vec());
                }
                for d in &renamed {
                    self.core.engine.order_after(dp, d.ino);
                }
                self.core
                    .engine
                    .put_metadata(dp, &batch, Durability::Buffered)?;
                dp
            }
        };
        self.note_lane(sp, logged_in);
        self.note_lane(dp, logged_in);
        s_guard.inode = Some(spi);
        if let Some(g) = d_guard.as_mut() {
            g.inode = Some(dpi);
        }
        self.note_lane(src.ino, logged_in);
        if let (RenameMode::Exchange, Some(d)) = (mode, dst) {
            self.note_lane(d.ino, logged_in);
        }
        Ok(())
    }

    /// Permission for a rename: write and search on both parents, the sticky rule for the
    /// source and for a target it replaces, and write on a directory that changes
    /// parents (its `..` changes).
    fn may_rename(
        &self,
        cx: &Creds,
        (sp, spi, sname, src): (InodeNo, &Inode, &[u8], &Dentry),
        (dp, dpi, dname, dst): (InodeNo, &Inode, &[u8], Option<&Dentry>),
    ) -> Result<(), VfsError> {
        if cx.is_root() {
            return Ok(());
        }
        // The parents are locked by the caller: their inodes are taken from it, never
        // locked again (a rename into itself names a parent as source or target).
        let inode_of = |ino: InodeNo| match ino {
            _ if ino == sp => Ok(*spi),
            _ if ino == dp => Ok(*dpi),
            _ => self.inode_of(ino),
        };
        let moves = sp != dp;
        let source = inode_of(src.ino)?;
        cx.may_delete(spi, &source, || show(sname))?;
        match dst {
            Some(d) if d.ino != src.ino => {
                let target = inode_of(d.ino)?;
                cx.may_delete(dpi, &target, || show(dname))?;
            }
            _ => cx.check(dpi, MAY_WRITE | MAY_EXEC, || show(dname))?,
        }
        if moves && source.kind == Kind::Dir {
            cx.check(&source, MAY_WRITE, || show(sname))?;
        }
        Ok(())
    }

    /// Points directory `dir`'s parent at `parent` (in `batch`).
    fn reparent(
        &self,
        dir: InodeNo,
        parent: InodeNo,
        now: i64,
        batch: &mut WriteBatch,
    ) -> Result<(), VfsError> {
        let h = self.handle(dir)?;
        let mut st = h.write();
        let mut inode = *live(&st, dir)?;
        inode.parent = parent.0;
        inode.ctime_ns = now;
        // Every rename that reparents is logged in `parent`'s lane.
        self.core.record_in_names(dir, parent)?;
        batch.put(records::inode_key(dir).to_vec(), inode.encode().to_vec());
        st.inode = Some(inode);
        Ok(())
    }

    /// Whether directory `a` is `b` or one of `b`'s ancestors (walking `b`'s parents up to
    /// the root; the rename mutex keeps the tree still).
    fn is_ancestor(&self, a: InodeNo, mut b: InodeNo) -> Result<bool, VfsError> {
        for _ in 0..1_000_000 {
            if a == b {
                return Ok(true);
            }
            if b == ROOT {
                return Ok(false);
            }
            let inode = match self.core.engine.metadb().get(&records::inode_key(b))? {
                Some(v) => Inode::decode(b, &v)?,
                None => return Ok(false),
            };
            b = InodeNo(inode.parent);
        }
        Err(VfsError::corrupt(
            "directory tree",
            "depth",
            "below 1000000",
            "more (a cycle)",
        ))
    }

    /// Changes attributes of `ino` (chmod, chown, utimensat), with POSIX's rules: the
    /// owner (or root) changes mode and sets explicit times; only root changes the owner,
    /// and the owner may change the group to one of their groups; anyone who may write
    /// the file sets its times to now. A chown by anyone but root, or a chmod by a
    /// non-member of the file's group, clears set-group-ID; chown clears set-user-ID.
    pub fn set_attr(
        &self,
        cx: &Creds,
        ino: InodeNo,
        changes: &AttrChanges,
    ) -> Result<(), VfsError> {
        let h = self.handle(ino)?;
        let mut st = h.write();
        self.settle(&h, &mut st)?;
        let mut inode = *live(&st, ino)?;
        let what = || format!("inode {ino}");
        let owner = cx.owns(&inode);
        if let Some(uid) = changes.uid {
            if uid != inode.uid && !cx.is_root() {
                return Err(VfsError::NotPermitted(format!("{}: chown", what())));
            }
        }
        if let Some(gid) = changes.gid {
            if gid != inode.gid && !(cx.is_root() || (owner && cx.in_group(gid))) {
                return Err(VfsError::NotPermitted(format!("{}: chgrp", what())));
            }
        }
        match changes.perm {
            // A writer may drop the set-id bits (the kernel asks a FUSE file system to,
            // in the writer's name, before a write: crate::setid).
            Some(p) if !owner && !crate::setid::may_drop_only(cx, &inode, p) => {
                return Err(VfsError::NotPermitted(format!("{}: chmod", what())));
            }
            _ => {}
        }
        for t in [changes.atime, changes.mtime].into_iter().flatten() {
            match t {
                TimeChange::At(_) if !owner => {
                    return Err(VfsError::NotPermitted(format!("{}: set times", what())));
                }
                TimeChange::Now if !owner => cx.check(&inode, MAY_WRITE, what)?,
                _ => {}
            }
        }
        let now = self.now();
        if let Some(p) = changes.perm {
            inode.perm = p & 0o7777;
            if !cx.is_root() && !cx.in_group(inode.gid) && inode.kind != Kind::Dir {
                inode.perm &= !S_ISGID;
            }
        }
        let chown = changes.uid.is_some() || changes.gid.is_some();
        if let Some(uid) = changes.uid {
            inode.uid = uid;
        }
        if let Some(gid) = changes.gid {
            inode.gid = gid;
        }
        if chown && inode.kind != Kind::Dir {
            inode.perm &= !S_ISUID;
            // A group-executable set-group-ID file loses the bit; without group execute
            // it marks mandatory locking and stays (Linux).
            if inode.perm & 0o010 != 0 {
                inode.perm &= !S_ISGID;
            }
        }
        let at = |t: TimeChange| match t {
            TimeChange::Now => now,
            TimeChange::At(ns) => ns,
        };
        if let Some(t) = changes.atime {
            inode.atime_ns = at(t);
        }
        if let Some(t) = changes.mtime {
            inode.mtime_ns = at(t);
        }
        inode.ctime_ns = now;
        self.put_inode(ino, &inode, WriteBatch::new())?;
        st.inode = Some(inode);
        Ok(())
    }

    /// Applies `batch` with `inode` as `ino`'s new record, in `ino`'s own lane (an
    /// attribute or size change without blocks). The caller holds `ino`'s write lock.
    pub(crate) fn put_inode(
        &self,
        ino: InodeNo,
        inode: &Inode,
        mut batch: WriteBatch,
    ) -> Result<(), VfsError> {
        batch.put(records::inode_key(ino).to_vec(), inode.encode().to_vec());
        self.core.record_in(ino, ino)?;
        self.core
            .engine
            .put_metadata(ino, &batch, Durability::Buffered)?;
        Ok(())
    }

    pub fn statfs(&self) -> StatFs {
        let space = self.core.engine.space_report();
        StatFs {
            block_size: BLOCK as u32,
            blocks: space.capacity_blocks,
            blocks_free: space.capacity_blocks.saturating_sub(space.live_blocks),
            name_max: NAME_MAX as u32,
        }
    }

    pub(crate) fn opened(&self, h: &Handle) -> Result<(), VfsError> {
        let mut st = h.state_write();
        live(&st, h.ino)?;
        st.open += 1;
        Ok(())
    }
}

/// What a create makes: its kind, permission bits, a symlink's target, a device's
/// number (the inode's 32-bit `rdev`).
struct NewNode<'a> {
    kind: Kind,
    perm: u32,
    target: Option<&'a [u8]>,
    rdev: u32,
}

/// A new inode of `kind` made by `cx` in directory `parent` (whose inode is `pinode`),
/// with one link (two for a directory) and every time `now`. A set-group-ID directory
/// hands its group (and, to directories, the bit) down.
pub(crate) fn new_inode(
    cx: &Creds,
    pinode: &Inode,
    parent: InodeNo,
    kind: Kind,
    perm: u32,
    now: i64,
) -> Inode {
    let inherit = pinode.perm & S_ISGID != 0;
    let gid = if inherit { pinode.gid } else { cx.gid };
    let mut perm = perm & 0o7777;
    if kind == Kind::Dir && inherit {
        perm |= S_ISGID;
    } else if kind == Kind::File && !cx.is_root() && !cx.in_group(gid) {
        perm &= !S_ISGID;
    }
    Inode::new(kind, perm, cx.uid, gid, parent, now)
}

/// The inode of a locked state, or ENOENT if it was deleted.
pub(crate) fn live(st: &InodeState, ino: InodeNo) -> Result<&Inode, VfsError> {
    st.inode
        .as_ref()
        .ok_or_else(|| VfsError::NotFound(format!("inode {ino}")))
}

/// A copy of a live directory's inode (for an operation on `name` in it).
fn live_dir(st: &InodeState, dir: InodeNo, name: &[u8]) -> Result<Inode, VfsError> {
    let inode = *live(st, dir)?;
    if inode.kind != Kind::Dir {
        return Err(VfsError::NotDir(format!(
            "inode {dir} (looking for {})",
            show(name)
        )));
    }
    Ok(inode)
}

fn check_name(name: &[u8]) -> Result<(), VfsError> {
    if name.len() > NAME_MAX {
        return Err(VfsError::NameTooLong(show(name)));
    }
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0)
    {
        return Err(VfsError::Invalid(format!("file name {:?}", show(name))));
    }
    Ok(())
}

/// `nlink` changed by `delta`. Link counts are read from MetaDB: one that would pass
/// u32::MAX is EMLINK (as Linux refuses a link beyond its maximum), one that would go
/// below 0 is corruption (an entry named an inode that counts no links).
pub(crate) fn relinked(ino: InodeNo, nlink: u32, delta: i64) -> Result<u32, VfsError> {
    let n = i64::from(nlink) + delta;
    u32::try_from(n).map_err(|_| {
        if n < 0 {
            VfsError::corrupt(
                format!("inode {ino}"),
                "nlink",
                "a link for each entry",
                nlink,
            )
        } else {
            VfsError::TooManyLinks(format!("inode {ino}"))
        }
    })
}

pub(crate) fn show(name: &[u8]) -> String {
    String::from_utf8_lossy(name).into_owned()
}

fn metadata(ino: InodeNo, inode: &Inode) -> Metadata {
    Metadata {
        ino: ino.0,
        kind: inode.kind,
        mode: inode.mode(),
        nlink: inode.nlink,
        uid: inode.uid,
        gid: inode.gid,
        size: inode.size,
        blocks: inode.blocks * (BLOCK / 512),
        atime_ns: inode.atime_ns,
        mtime_ns: inode.mtime_ns,
        ctime_ns: inode.ctime_ns,
        btime_ns: inode.btime_ns,
        blksize: BLOCK as u32,
        rdev: records::dev_of(inode.rdev),
    }
}
