//! Helpers shared by the `bench` subcommands (`bench metadb`, `bench engine`) and by
//! `amplify`: common options, scratch files named with the process id, images written
//! in full once, loop devices with kernel file systems on them, worker threads run for
//! a fixed time, the order compared systems take turns in, and the verdicts on an
//! issue's goals. Medians and spreads are in `crate::stats`.

pub mod goal;
pub mod image;
pub mod loopdev;
pub mod options;
pub mod scratch;
pub mod threads;
pub mod turns;
