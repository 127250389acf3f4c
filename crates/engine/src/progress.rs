//! Progress reporting for long work (mkfs, fsck, benchmarks). The CLI draws a bar; the
//! library only reports steps and bytes.

/// Receives progress. Steps do not nest.
pub trait Progress {
    /// A new step of `total` units (bytes unless the step says otherwise).
    fn step(&self, name: &str, total: u64);
    fn advance(&self, delta: u64);
    fn finish(&self);
}

/// Reports nothing.
#[derive(Debug, Default)]
pub struct NoProgress;

impl Progress for NoProgress {
    fn step(&self, _name: &str, _total: u64) {}
    fn advance(&self, _delta: u64) {}
    fn finish(&self) {}
}
