//! One module per subcommand.

pub mod amplify;
pub mod bench_device;
pub mod bench_engine;
pub mod bench_fs;
pub mod bench_metadb;
pub mod crashtest;
pub mod fsck;
pub mod inspect;
pub mod mkfs;
pub mod mount;
pub mod report;
pub mod run;
