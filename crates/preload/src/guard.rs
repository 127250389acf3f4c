//! The reentrancy guard: while a thread is inside augefs (the engine opening the image,
//! the vfs allocating, a log line being written), every call it makes goes straight to
//! the kernel. Bridge threads are inside for their whole life.

use std::cell::Cell;

thread_local! {
    // A const-initialised Cell has no destructor: usable in any thread at any time,
    // including threads created before this library loaded.
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// Whether this thread is inside augefs.
pub fn inside() -> bool {
    INSIDE.with(Cell::get)
}

/// Marks this thread inside augefs until dropped (restoring what was before).
#[derive(Debug)]
pub struct Inside {
    was: bool,
}

pub fn enter() -> Inside {
    Inside {
        was: INSIDE.with(|c| c.replace(true)),
    }
}

impl Drop for Inside {
    fn drop(&mut self) {
        INSIDE.with(|c| c.set(self.was));
    }
}
