//! Leveled compaction: a pure picking policy and the job that merges tables.

pub mod policy;
