//! Every decoder of on-disk and on-PMR bytes, as a fuzz target. The test
//! (tests/decoders.rs), the long-mode binary (src/bin/augefs-fuzz.rs) and the cargo-fuzz
//! targets (fuzz/ at the repository root) all run these.

mod engine;
mod format;
mod instance;
mod metadb;
mod postring;
mod wal;

use crate::driver::Target;

/// Every target, in a fixed order.
pub fn all() -> Vec<Target> {
    let mut out = format::targets();
    out.extend(metadb::targets());
    out.extend(wal::targets());
    out.extend(engine::targets());
    out.extend(instance::targets());
    out.extend(postring::targets());
    out
}

/// The target called `name`.
pub fn by_name(name: &str) -> Option<Target> {
    all().into_iter().find(|t| t.name == name)
}
