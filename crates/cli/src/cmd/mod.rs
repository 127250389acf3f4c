//! One module per subcommand.

pub mod bench;
pub mod crashtest;
pub mod find;
pub mod fsck;
pub mod inspect;
pub mod man;
pub mod mkfs;
pub mod mount;
pub mod resize;
pub mod run;
pub mod tune;
pub mod usage;
