//! The machine's memory, which the caches size themselves from by default (each with a
//! stated share: docs/DESIGN.md §10.7 for the page cache, §5 for MetaDB's blocks).

/// Bytes of physical memory, or 0 if the system does not say.
pub fn physical_bytes() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let (pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    if pages > 0 && page > 0 {
        pages as u64 * page as u64
    } else {
        0
    }
}
