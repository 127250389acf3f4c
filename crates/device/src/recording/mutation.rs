//! Test-only breaches of the flush contract (feature `mutations`): a crash checker must
//! report each as a lost promise (docs/TESTING.md §2a "Mutations"). The product never
//! builds this module.
//!
//! Invariants:
//! - With [`FlushMutation::None`] the device behaves exactly as without the feature.
//! - A mutated flush still succeeds: its caller cannot tell, as with a device or a file
//!   system that lies.

use platform::IoCause;

/// How the recording device breaks its flush contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FlushMutation {
    #[default]
    None,
    /// A flush issued for this cause succeeds and makes nothing durable, as if its caller
    /// had never flushed (`Skip(IoCause::Wal)`: a WAL without device flushes).
    Skip(IoCause),
    /// Every flush succeeds at once but takes effect only once the next write has
    /// completed: its caller returns before its flush happened (an fsync that returns
    /// early). A flush with no write after it never takes effect.
    Late,
}

/// The mutation and the flush it holds back.
#[derive(Debug, Default)]
pub(super) struct MutationState {
    mutation: FlushMutation,
    /// `covers` of the flushes [`FlushMutation::Late`] holds back (the highest).
    held: Option<u64>,
}

impl MutationState {
    pub(super) fn set(&mut self, mutation: FlushMutation) {
        self.mutation = mutation;
        self.held = None;
    }

    /// Whether a flush of `cause` covering `covers` writes is taken away from the log
    /// (skipped, or held until the next write).
    pub(super) fn intercept_flush(&mut self, cause: IoCause, covers: u64) -> bool {
        match self.mutation {
            FlushMutation::None => false,
            FlushMutation::Skip(skipped) => skipped == cause,
            FlushMutation::Late => {
                self.held = Some(self.held.map_or(covers, |h| h.max(covers)));
                true
            }
        }
    }

    /// After a write was recorded: the held flush, which takes effect now.
    pub(super) fn flush_after_write(&mut self) -> Option<u64> {
        self.held.take()
    }
}
