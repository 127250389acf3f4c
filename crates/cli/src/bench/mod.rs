//! Helpers shared by the `bench` subcommands (`bench metadb`, `bench engine`, `bench
//! fs`, `bench report`) and by `amplify`: common options, scratch files named with the
//! process id, images written in full once, augefs formatted and mounted through its
//! API, the emulated PMR, loop devices with kernel file systems on them, worker threads
//! run for a fixed time (with latency samples), CPU time of processes, the order
//! compared systems take turns in, SVG line charts, short units for tables, and the
//! verdicts on an issue's goals. Medians, spreads and percentiles are in `crate::stats`.

pub mod augefs;
pub mod cpu;
pub mod goal;
pub mod image;
pub mod interrupt;
pub mod kernelfs;
pub mod loopdev;
pub mod options;
pub mod plot;
pub mod pmr;
pub mod scratch;
pub mod threads;
pub mod turns;
pub mod units;
