//! How a PMR makes bytes durable, and the cache-line flush instructions behind DAX mode
//! (docs/DESIGN.md §5).
//!
//! The mode is decided once, when the region is mapped, and never changes:
//! - `Dax`: the file was mapped with `MAP_SHARED_VALIDATE | MAP_SYNC`, which the kernel
//!   grants only on a DAX file system, so a store that leaves the CPU caches is durable.
//!   Persisting writes back each covered 64-byte line with the best instruction the CPU
//!   has (CPUID leaf 7: `clwb`, else `clflushopt`, else `clflush`) and ends with `sfence`.
//! - `Msync`: an ordinary file (page cache); persisting is `msync(MS_SYNC)` on the
//!   page-aligned range covering the bytes. This is an emulated PMR and is labelled so.
//! - `Memory`: an anonymous region with the line-granular crash model (tests only).
//!
//! Invariants:
//! - A flush instruction is only executed if CPUID reports it.
//! - After `flush_lines` returns, every covered line has been written back and the
//!   write-backs are ordered before any later store (the `sfence`).

use std::fmt;

/// The cache-line write-back instruction used in DAX mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FlushInstruction {
    /// Writes the line back and may keep it cached (best: later loads still hit).
    Clwb,
    /// Writes back and evicts; weakly ordered, so many can be in flight.
    Clflushopt,
    /// Writes back and evicts; serialised with other flushes. Every x86-64 CPU has it.
    Clflush,
}

impl FlushInstruction {
    pub fn name(self) -> &'static str {
        match self {
            FlushInstruction::Clwb => "clwb",
            FlushInstruction::Clflushopt => "clflushopt",
            FlushInstruction::Clflush => "clflush",
        }
    }

    /// The best instruction this CPU has, from CPUID leaf 7 (EBX bit 24 = CLWB, bit 23
    /// = CLFLUSHOPT). `None` on architectures without a supported flush instruction.
    pub fn detect() -> Option<FlushInstruction> {
        detect_impl()
    }
}

/// How the region reaches durability. `inspect` prints [`PersistMode::name`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PersistMode {
    Dax { instruction: FlushInstruction },
    Msync,
    Memory,
}

impl PersistMode {
    /// A human name, e.g. "dax (clwb + sfence)".
    pub fn name(self) -> &'static str {
        match self {
            PersistMode::Dax {
                instruction: FlushInstruction::Clwb,
            } => "dax (clwb + sfence)",
            PersistMode::Dax {
                instruction: FlushInstruction::Clflushopt,
            } => "dax (clflushopt + sfence)",
            PersistMode::Dax {
                instruction: FlushInstruction::Clflush,
            } => "dax (clflush + sfence)",
            PersistMode::Msync => "msync (emulated PMR on a page-cache file)",
            PersistMode::Memory => "memory (emulated PMR with crash model, tests only)",
        }
    }

    /// True unless the region is real byte-addressable persistent memory. Figures made
    /// on an emulated PMR must say so (docs/DESIGN.md §5).
    pub fn is_emulated(self) -> bool {
        !matches!(self, PersistMode::Dax { .. })
    }
}

impl fmt::Display for PersistMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FlushInstruction {
    /// Whether this CPU executes `self`.
    pub fn is_supported(self) -> bool {
        supported_impl(self)
    }
}

fn detect_impl() -> Option<FlushInstruction> {
    [
        FlushInstruction::Clwb,
        FlushInstruction::Clflushopt,
        FlushInstruction::Clflush,
    ]
    .into_iter()
    .find(|i| i.is_supported())
}

#[cfg(target_arch = "x86_64")]
fn supported_impl(instruction: FlushInstruction) -> bool {
    use std::arch::x86_64::{__cpuid, __cpuid_count};
    const EBX_CLFLUSHOPT: u32 = 1 << 23;
    const EBX_CLWB: u32 = 1 << 24;
    // `__cpuid` became a safe function after our minimum Rust version (1.85).
    #[allow(unused_unsafe, reason = "unsafe on Rust 1.85, safe on later versions")]
    let leaf7_ebx = || {
        // SAFETY: CPUID exists on every x86-64 CPU and has no memory effects; leaf 0
        // reports the highest basic leaf, so leaf 7 is only read when it exists.
        unsafe {
            if __cpuid(0).eax >= 7 {
                __cpuid_count(7, 0).ebx
            } else {
                0
            }
        }
    };
    match instruction {
        FlushInstruction::Clwb => leaf7_ebx() & EBX_CLWB != 0,
        FlushInstruction::Clflushopt => leaf7_ebx() & EBX_CLFLUSHOPT != 0,
        // CLFLUSH (CPUID.01H:EDX bit 19) is part of the x86-64 baseline (SSE2).
        FlushInstruction::Clflush => true,
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn supported_impl(_instruction: FlushInstruction) -> bool {
    false
}

/// Writes back `lines` 64-byte lines starting at `first`, then fences.
///
/// # Safety
/// - `first` is 64-byte aligned and `first .. first + lines * 64` lies inside one live
///   mapping (or allocation) of this process;
/// - `instruction.is_supported()` on this machine.
#[cfg(target_arch = "x86_64")]
pub(crate) unsafe fn flush_lines(first: *const u8, lines: usize, instruction: FlushInstruction) {
    use std::arch::asm;
    use std::sync::atomic::{compiler_fence, Ordering};
    debug_assert_eq!(first as usize % 64, 0);
    // Keep the compiler from sinking earlier (relaxed atomic) stores below the flushes.
    // The CPU itself orders a flush after older stores to the same line.
    compiler_fence(Ordering::SeqCst);
    for i in 0..lines {
        // SAFETY: the caller guarantees the line is inside a live mapping; `wrapping_add`
        // stays in it. The flush instructions do not change memory contents, only where
        // the line lives, and the caller guarantees the CPU supports them.
        unsafe {
            let line = first.wrapping_add(i * 64);
            match instruction {
                FlushInstruction::Clwb => {
                    asm!("clwb [{line}]", line = in(reg) line, options(nostack, preserves_flags))
                }
                FlushInstruction::Clflushopt => asm!(
                    "clflushopt [{line}]",
                    line = in(reg) line,
                    options(nostack, preserves_flags)
                ),
                FlushInstruction::Clflush => {
                    asm!("clflush [{line}]", line = in(reg) line, options(nostack, preserves_flags))
                }
            }
        }
    }
    // SAFETY: sfence has no operands and is part of the x86-64 baseline (SSE).
    unsafe { asm!("sfence", options(nostack, preserves_flags)) };
    compiler_fence(Ordering::SeqCst);
}

/// See the x86-64 version; DAX mode is never chosen elsewhere, so this is unreachable.
///
/// # Safety
/// Never called: [`FlushInstruction::detect`] returns `None` on this architecture.
#[cfg(not(target_arch = "x86_64"))]
pub(crate) unsafe fn flush_lines(_first: *const u8, _lines: usize, _instruction: FlushInstruction) {
    unreachable!("DAX mode is only chosen on x86-64");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_say_emulated() {
        assert!(PersistMode::Msync.is_emulated());
        assert!(PersistMode::Memory.is_emulated());
        let dax = PersistMode::Dax {
            instruction: FlushInstruction::Clwb,
        };
        assert!(!dax.is_emulated());
        assert_eq!(dax.to_string(), "dax (clwb + sfence)");
        assert!(PersistMode::Msync.name().contains("emulated"));
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn every_supported_flush_instruction_runs_and_keeps_contents() {
        // Flush instructions work on any cacheable memory, so ordinary heap memory
        // exercises the DAX code path that a non-DAX machine never reaches otherwise.
        let best = FlushInstruction::detect().expect("x86-64 always has clflush");
        assert!(best.is_supported());
        let usable: Vec<FlushInstruction> = [
            FlushInstruction::Clwb,
            FlushInstruction::Clflushopt,
            FlushInstruction::Clflush,
        ]
        .into_iter()
        .filter(|i| i.is_supported())
        .collect();
        assert!(usable.contains(&FlushInstruction::Clflush));
        let mut buf = vec![0u8; 64 * 5];
        let offset = buf.as_ptr().align_offset(64);
        assert!(offset < 64);
        for (i, b) in buf.iter_mut().enumerate() {
            *b = i as u8;
        }
        for instruction in usable {
            // SAFETY: the four lines from the aligned offset lie inside `buf`, and each
            // instruction was reported by CPUID.
            unsafe { flush_lines(buf.as_ptr().add(offset), 4, instruction) };
        }
        assert!(buf.iter().enumerate().all(|(i, &b)| b == i as u8));
    }
}
