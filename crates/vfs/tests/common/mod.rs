//! Shared helpers of the VFS integration tests: a formatted memory image, a mount, the
//! errno of a result.
#![allow(dead_code)]

use device::memory::MemoryBackend;
use device::Device;
use engine::log::{EngineConfig, EngineEnv};
use engine::mkfs::{format, MkfsOptions};
use engine::progress::NoProgress;
use platform::ManualClock;
use std::sync::Arc;
use vfs::FileSystem;

/// A memory image of `bytes` formatted with `domains` domains.
pub fn image(bytes: u64, domains: u32) -> Arc<Device> {
    let dev = Device::new(Box::new(MemoryBackend::new(bytes, 512)));
    let opts = MkfsOptions {
        domain_count: Some(domains),
        fs_uuid: [9; 16],
        created_unix_ns: 1,
        force: false,
    };
    format(&dev, None, &opts, &NoProgress).unwrap();
    Arc::new(dev)
}

/// `dev` mounted with the default configuration and a manual clock.
pub fn mount(dev: &Arc<Device>) -> Arc<FileSystem> {
    mount_with(dev, EngineConfig::default())
}

/// `dev` mounted with `config` and a manual clock.
pub fn mount_with(dev: &Arc<Device>, config: EngineConfig) -> Arc<FileSystem> {
    let clock = Arc::new(ManualClock::new(1_000_000));
    mount_cached(dev, config, vfs::CacheConfig::default(), clock)
}

/// `dev` mounted with `config`, page-cache settings `cache` and `clock`.
pub fn mount_cached(
    dev: &Arc<Device>,
    config: EngineConfig,
    cache: vfs::CacheConfig,
    clock: Arc<dyn platform::Clock>,
) -> Arc<FileSystem> {
    let env = EngineEnv {
        device: dev.clone(),
        pmr: None,
        clock,
    };
    Arc::new(FileSystem::mount_with(env, config, cache).unwrap())
}

/// A fresh image of `bytes` with `domains` domains, mounted.
pub fn mounted(bytes: u64, domains: u32) -> Arc<FileSystem> {
    mount(&image(bytes, domains))
}

/// The errno of a failed call, 0 for success.
pub fn errno<T>(r: Result<T, vfs::VfsError>) -> i32 {
    r.map_or_else(|e| e.errno(), |_| 0)
}

/// The device's bytes now, as a new memory device: what a crash at this instant leaves
/// (the memory backend has no volatile cache, so everything written so far survives).
pub fn crash_copy(dev: &Device) -> Arc<Device> {
    Arc::new(Device::new(Box::new(MemoryBackend::from_image(
        image_bytes(dev),
        512,
    ))))
}

/// Every byte of `dev`.
pub fn image_bytes(dev: &Device) -> Vec<u8> {
    let buf = dev
        .read(
            0,
            device::AlignedBuf::zeroed(dev.size_bytes() as usize),
            device::IoCause::Tool,
        )
        .unwrap();
    buf.to_vec()
}

/// Orphan records (nameless open inodes) in MetaDB.
pub fn orphan_records(fs: &FileSystem) -> usize {
    fs.engine()
        .metadb()
        .prefix(&[vfs::records::ORPHAN_TAG], None)
        .unwrap()
        .count()
}

/// Blocks mapped for inode `ino`.
pub fn mapped_blocks(fs: &FileSystem, ino: u64) -> usize {
    mapped_block_list(fs, ino).len()
}

/// The mapped blocks of inode `ino` (`x` records and extents), ascending.
pub fn mapped_block_list(fs: &FileSystem, ino: u64) -> Vec<u64> {
    use engine::log::keys;
    let db = fs.engine().metadb();
    let ino = format::InodeNo(ino);
    let mut blocks = std::collections::BTreeSet::new();
    for item in db.prefix(&keys::mapping_prefix(ino), None).unwrap() {
        blocks.insert(keys::parse_mapping_key(&item.unwrap().0).unwrap().1);
    }
    for item in db.prefix(&keys::extent_prefix(ino), None).unwrap() {
        let (key, value) = item.unwrap();
        let last = keys::parse_extent_key(&key).unwrap().1;
        let e = keys::Extent::decode(last, &value).unwrap();
        blocks.extend((e.first.0..=last.0).map(keys::FileBlock));
    }
    blocks.into_iter().map(|b| b.0).collect()
}

/// fsck (check only, data verified) of an unmounted image: the problems it finds.
pub fn fsck_problems(dev: &Arc<Device>) -> Vec<String> {
    let options = fsck::Options {
        mode: fsck::Mode::Check,
        verify_data: true,
        now_ns: 0,
    };
    let report = fsck::check(dev.clone(), None, &options, &NoProgress).expect("fsck runs");
    report
        .problems
        .iter()
        .map(|p| format!("{:?}: {}", p.kind, p.message))
        .collect()
}
