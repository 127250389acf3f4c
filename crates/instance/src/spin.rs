//! Waiting for a socket to become readable by spinning a little before sleeping, when
//! spinning pays.
//!
//! A request and its reply each wake a sleeping thread on another CPU; on a virtual
//! machine such a wake-up costs tens of microseconds (the idle CPU must be woken by
//! the host), several times the request's own work. A thread that expects its peer's
//! answer soon polls for it for a short while first: the client after sending a
//! request, the instance after answering one (a client's next request usually follows
//! at once). Each turn of the poll yields the CPU to any other runnable thread.
//!
//! Spinning pays only while the peer runs on another CPU at once; on a machine whose
//! CPUs are all busy it takes time from the very thread waited for. So a [`Spinner`]
//! adapts: a spin that ends without the message, or whose yield of the CPU let another
//! thread run (the CPU is wanted), turns spinning off for the next [`PAUSE_WAITS`]
//! waits, after which it tries again. An idle connection sleeps.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Waits without spinning after a spin that found nothing.
pub const PAUSE_WAITS: u32 = 64;

/// One connection's side of the waiting.
#[derive(Debug)]
pub struct Spinner {
    spin: Duration,
    /// Waits left before spinning again.
    paused: u32,
    /// The instance's side: spins only holding one of the instance's few spin slots.
    shared: bool,
}

/// The instance's threads spinning now.
static SPINNING: AtomicUsize = AtomicUsize::new(0);

/// A slot of the instance's spinning, given back when dropped.
struct Slot;

impl Slot {
    /// A slot if fewer than half the CPUs' worth of the instance's threads spin (at least
    /// one): more would take the CPUs that the clients, and the requests being handled,
    /// need (a waiting client spins on a CPU of its own anyway).
    fn take() -> Option<Slot> {
        static MAX: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        let max = *MAX.get_or_init(|| {
            std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1))
        });
        SPINNING
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| Slot)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        SPINNING.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Spinner {
    pub fn new(spin: Duration) -> Spinner {
        Spinner {
            spin,
            paused: 0,
            shared: false,
        }
    }

    /// A spinner of one of the instance's threads: it spins only in a free slot (at
    /// most half the CPUs' worth of the instance's threads spin at once; the others
    /// sleep at once).
    pub fn for_instance(spin: Duration) -> Spinner {
        Spinner {
            shared: true,
            ..Spinner::new(spin)
        }
    }

    /// Whether the next wait spins (else it sleeps at once).
    pub fn will_spin(&self) -> bool {
        !self.spin.is_zero() && self.paused == 0
    }

    /// Returns once `fd` has input, or once spinning should stop (the caller's read
    /// then sleeps as usual).
    pub fn wait(&mut self, fd: BorrowedFd<'_>) {
        if self.spin.is_zero() {
            return;
        }
        if self.paused > 0 {
            self.paused -= 1;
            return;
        }
        let _slot = match self.shared {
            true => match Slot::take() {
                Some(s) => Some(s),
                None => return,
            },
            false => None,
        };
        if !wait_readable(fd, self.spin) {
            self.paused = PAUSE_WAITS;
        }
    }
}

impl Spinner {
    /// Spins until `ready` says so (true), or until spinning should stop (false; the
    /// caller then sleeps). Each turn is a CPU pause; every 64th yields the CPU.
    pub fn wait_until(&mut self, mut ready: impl FnMut() -> bool) -> bool {
        if self.spin.is_zero() {
            return ready();
        }
        if self.paused > 0 {
            self.paused -= 1;
            return ready();
        }
        let _slot = match self.shared {
            true => match Slot::take() {
                Some(s) => Some(s),
                None => return ready(),
            },
            false => None,
        };
        let start = Instant::now();
        let mut turns = 0u32;
        loop {
            if ready() {
                return true;
            }
            turns = turns.wrapping_add(1);
            if turns % 64 == 0 {
                if start.elapsed() >= self.spin || yield_cpu() {
                    self.paused = PAUSE_WAITS;
                    return false;
                }
            } else {
                std::hint::spin_loop();
            }
        }
    }
}

/// Polls `fd` for input without sleeping for up to `spin`; true if input came. False
/// too as soon as a yield finds the CPU wanted by another thread.
pub fn wait_readable(fd: BorrowedFd<'_>, spin: Duration) -> bool {
    let start = Instant::now();
    loop {
        let mut p = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd; a zero timeout never sleeps.
        if unsafe { libc::poll(&mut p, 1, 0) } != 0 {
            return true;
        }
        if start.elapsed() >= spin || yield_cpu() {
            return false;
        }
    }
}

/// A `sched_yield` that took this long ran another thread (or the host ran another
/// virtual CPU): the CPU is wanted, and the spin gives way.
const YIELD_GAVE_AWAY: Duration = Duration::from_micros(20);

/// Lets a runnable thread of this CPU go first (on a busy machine it may be the very
/// peer this one waits for). True if one did, by the time the yield took.
fn yield_cpu() -> bool {
    let t = Instant::now();
    // SAFETY: sched_yield has no arguments and cannot fail.
    unsafe { libc::sched_yield() };
    t.elapsed() >= YIELD_GAVE_AWAY
}

thread_local! {
    static THREAD: std::cell::RefCell<Spinner> = std::cell::RefCell::new(Spinner::new(crate::spin()));
}

/// [`Spinner::wait`] with this thread's spinner (a client thread waits for one reply at
/// a time, on whichever pooled connection it took).
pub fn wait_on_thread(fd: BorrowedFd<'_>) {
    THREAD.with(|s| s.borrow_mut().wait(fd));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    /// Pins the calling thread to `cpu`.
    fn pin(cpu: usize) {
        // SAFETY: a zeroed cpu_set_t is an empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: CPU_SET writes inside the set (cpu is below the machine's CPU count).
        unsafe { libc::CPU_SET(cpu, &mut set) };
        // SAFETY: the set is valid for its size; 0 is the calling thread.
        let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
        assert_eq!(
            r,
            0,
            "sched_setaffinity: {}",
            std::io::Error::last_os_error()
        );
    }

    /// A thread that wants the spinner's CPU (both pinned to one CPU) ends the spin long
    /// before its budget, and spinning pauses: the spin took the CPU from it otherwise.
    #[test]
    fn a_spin_gives_way_to_a_thread_that_wants_its_cpu() {
        // SAFETY: sched_getcpu has no arguments.
        let cpu = unsafe { libc::sched_getcpu() }.max(0) as usize;
        pin(cpu);
        let stop = Arc::new(AtomicBool::new(false));
        let busy = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                pin(cpu);
                while !stop.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        };
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let budget = Duration::from_secs(5);
        let t = Instant::now();
        assert!(!wait_readable(std::os::fd::AsFd::as_fd(&a), budget));
        let polled = t.elapsed();
        let mut s = Spinner::new(budget);
        let t = Instant::now();
        assert!(!s.wait_until(|| false));
        let spun = t.elapsed();
        stop.store(true, Ordering::Relaxed);
        busy.join().unwrap();
        assert!(
            polled < Duration::from_secs(1),
            "polled {polled:?} beside a busy thread"
        );
        assert!(
            spun < Duration::from_secs(1),
            "spun {spun:?} beside a busy thread"
        );
        assert!(!s.will_spin(), "spinning pauses after giving way");
    }

    #[test]
    fn the_instance_spins_on_at_most_its_slots() {
        let max = std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1));
        let held: Vec<Slot> = (0..max).map_while(|_| Slot::take()).collect();
        // Other tests of this binary may hold slots; none is left beyond the maximum.
        assert!(held.len() <= max);
        assert!(Slot::take().is_none(), "a slot beyond {max}");
        // A spinner of the instance without a slot does not spin: it answers at once.
        let mut s = Spinner::for_instance(Duration::from_secs(5));
        let t = Instant::now();
        assert!(!s.wait_until(|| false));
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "it spun without a slot"
        );
        drop(held);
        let slot = Slot::take();
        assert!(slot.is_some(), "a slot given back is free again");
    }
}
