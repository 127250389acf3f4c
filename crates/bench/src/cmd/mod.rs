//! One module per subcommand.

pub mod aged;
pub mod amplify;
pub mod apps;
pub mod bench_device;
pub mod bench_engine;
pub mod bench_fs;
pub mod bench_metadb;
pub mod files;
pub mod recovery;
pub mod report;
