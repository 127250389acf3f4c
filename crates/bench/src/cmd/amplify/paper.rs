//! The published figures of io-amplification.txt (Mohan, Kadekodi, Chidambaram: "Analyzing
//! IO Amplification in Linux File Systems"), quoted from its Tables 1 and 2 so that
//! `augefs amplify` prints them beside what it measures.
//!
//! - Table 1 gives amplification (bytes on the device / bytes of user data).
//! - Table 2 gives KB per operation, the write cost split into IO during `fsync()` and
//!   checkpointing IO done later.
//! - The paper measured f2fs too; `amplify` does not make f2fs, but the figures stay
//!   here as the paper has them.

use super::workload::Workload;

/// The file systems of the paper's tables, in their column order.
pub const PAPER_FS: [&str; 5] = ["ext2", "ext4", "xfs", "f2fs", "btrfs"];

/// What a figure measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    /// Bytes written, at fsync and later together.
    WriteTotal,
    /// Bytes written during the operation and its fsync.
    WriteFsync,
    /// Bytes written later (checkpoints, flushes; here: a final sync and unmount).
    WriteLater,
    Read,
    Space,
}

/// Table 1: "Amplification for Data Operations" (ratios).
const TABLE_1: [(Workload, Measure, [f64; 5]); 6] = [
    (
        Workload::Overwrite,
        Measure::WriteTotal,
        [2.00, 4.00, 2.00, 2.66, 32.65],
    ),
    (
        Workload::Overwrite,
        Measure::Space,
        [1.00, 4.00, 2.00, 2.66, 31.17],
    ),
    (
        Workload::Append,
        Measure::WriteTotal,
        [3.00, 6.00, 2.01, 2.66, 30.85],
    ),
    (
        Workload::Append,
        Measure::Space,
        [1.00, 6.00, 2.00, 2.66, 29.77],
    ),
    (
        Workload::ReadCold,
        Measure::Read,
        [6.00, 6.00, 8.00, 9.00, 13.00],
    ),
    (
        Workload::ReadWarm,
        Measure::Read,
        [2.00, 2.00, 5.00, 3.00, 8.00],
    ),
];

/// Table 2: "IO Cost for Metadata Operations" (KB per operation). The text gives
/// btrfs's rename as 696 KB; the table's 648 is quoted.
const TABLE_2: [(Workload, Measure, [f64; 5]); 15] = [
    (
        Workload::Create,
        Measure::WriteTotal,
        [24.0, 52.0, 52.0, 16.0, 116.0],
    ),
    (
        Workload::Create,
        Measure::WriteFsync,
        [4.0, 28.0, 4.0, 4.0, 68.0],
    ),
    (
        Workload::Create,
        Measure::WriteLater,
        [20.0, 24.0, 48.0, 12.0, 48.0],
    ),
    (
        Workload::Create,
        Measure::Read,
        [24.0, 24.0, 32.0, 36.0, 40.0],
    ),
    (
        Workload::Create,
        Measure::Space,
        [24.0, 52.0, 20.0, 16.0, 116.0],
    ),
    (
        Workload::Mkdir,
        Measure::WriteTotal,
        [28.0, 64.0, 80.0, 20.0, 132.0],
    ),
    (
        Workload::Mkdir,
        Measure::WriteFsync,
        [4.0, 36.0, 4.0, 8.0, 68.0],
    ),
    (
        Workload::Mkdir,
        Measure::WriteLater,
        [24.0, 28.0, 76.0, 12.0, 64.0],
    ),
    (
        Workload::Mkdir,
        Measure::Read,
        [20.0, 20.0, 60.0, 36.0, 60.0],
    ),
    (
        Workload::Mkdir,
        Measure::Space,
        [28.0, 64.0, 54.0, 20.0, 132.0],
    ),
    (
        Workload::Rename,
        Measure::WriteTotal,
        [12.0, 32.0, 16.0, 20.0, 648.0],
    ),
    (
        Workload::Rename,
        Measure::WriteFsync,
        [4.0, 20.0, 4.0, 8.0, 392.0],
    ),
    (
        Workload::Rename,
        Measure::WriteLater,
        [8.0, 12.0, 12.0, 12.0, 256.0],
    ),
    (
        Workload::Rename,
        Measure::Read,
        [20.0, 24.0, 48.0, 40.0, 48.0],
    ),
    (
        Workload::Rename,
        Measure::Space,
        [12.0, 32.0, 16.0, 20.0, 392.0],
    ),
];

/// The paper's figure for `measure` of `workload` on `fs`, in the unit of its table
/// (a ratio for data workloads, KB per operation for namespace ones).
pub fn figure(workload: Workload, measure: Measure, fs: &str) -> Option<f64> {
    let column = PAPER_FS.iter().position(|&f| f == fs)?;
    TABLE_1
        .iter()
        .chain(TABLE_2.iter())
        .find(|(w, m, _)| *w == workload && *m == measure)
        .map(|(_, _, row)| row[column])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_figures_are_found_and_add_up() {
        assert_eq!(
            figure(Workload::Rename, Measure::WriteTotal, "btrfs"),
            Some(648.0)
        );
        assert_eq!(
            figure(Workload::Overwrite, Measure::WriteTotal, "ext4"),
            Some(4.0)
        );
        assert_eq!(figure(Workload::Create, Measure::Read, "augefs"), None);
        assert_eq!(figure(Workload::ReadWarm, Measure::Space, "ext2"), None);
        // Table 2's write cost is its fsync and checkpoint parts, in every cell.
        for w in [Workload::Create, Workload::Mkdir, Workload::Rename] {
            for fs in PAPER_FS {
                let total = figure(w, Measure::WriteTotal, fs).unwrap();
                let parts = figure(w, Measure::WriteFsync, fs).unwrap()
                    + figure(w, Measure::WriteLater, fs).unwrap();
                assert_eq!(total, parts, "{w:?} {fs}");
            }
        }
    }
}
