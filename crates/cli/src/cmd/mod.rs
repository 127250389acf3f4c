//! One module per subcommand.

pub mod bench_device;
pub mod inspect;
pub mod mkfs;
