//! FUSE's request figures (`-o stats`): the generic table (`platform::reqstats`) with
//! the kernel's opcodes named as fuse.h names them (docs/DESIGN.md §11.1; what they
//! showed: docs/BENCHMARKS.md §6).

use crate::proto::abi::opcode;
pub use platform::reqstats::{Stats, ThreadStats};

/// A FUSE session's figures (served over /dev/fuse unless said otherwise).
pub fn new_stats(timing: bool) -> Stats {
    Stats::new(timing, "FUSE requests", "/dev/fuse", name)
}

/// The opcode's name as fuse.h spells it, without `FUSE_`.
pub fn name(op: u32) -> String {
    let known = match op {
        opcode::LOOKUP => "LOOKUP",
        opcode::FORGET => "FORGET",
        opcode::GETATTR => "GETATTR",
        opcode::SETATTR => "SETATTR",
        opcode::READLINK => "READLINK",
        opcode::SYMLINK => "SYMLINK",
        opcode::MKNOD => "MKNOD",
        opcode::MKDIR => "MKDIR",
        opcode::UNLINK => "UNLINK",
        opcode::RMDIR => "RMDIR",
        opcode::RENAME => "RENAME",
        opcode::LINK => "LINK",
        opcode::OPEN => "OPEN",
        opcode::READ => "READ",
        opcode::WRITE => "WRITE",
        opcode::STATFS => "STATFS",
        opcode::RELEASE => "RELEASE",
        opcode::FSYNC => "FSYNC",
        opcode::SETXATTR => "SETXATTR",
        opcode::GETXATTR => "GETXATTR",
        opcode::LISTXATTR => "LISTXATTR",
        opcode::REMOVEXATTR => "REMOVEXATTR",
        opcode::FLUSH => "FLUSH",
        opcode::INIT => "INIT",
        opcode::OPENDIR => "OPENDIR",
        opcode::READDIR => "READDIR",
        opcode::RELEASEDIR => "RELEASEDIR",
        opcode::FSYNCDIR => "FSYNCDIR",
        opcode::GETLK => "GETLK",
        opcode::SETLK => "SETLK",
        opcode::SETLKW => "SETLKW",
        opcode::ACCESS => "ACCESS",
        opcode::CREATE => "CREATE",
        opcode::INTERRUPT => "INTERRUPT",
        opcode::DESTROY => "DESTROY",
        opcode::BATCH_FORGET => "BATCH_FORGET",
        opcode::FALLOCATE => "FALLOCATE",
        opcode::READDIRPLUS => "READDIRPLUS",
        opcode::RENAME2 => "RENAME2",
        opcode::LSEEK => "LSEEK",
        opcode::SYNCFS => "SYNCFS",
        _ => "",
    };
    if known.is_empty() {
        format!("opcode {op}")
    } else {
        known.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opcodes_are_named_as_fuse_h_names_them() {
        let stats = new_stats(false);
        let mut t = stats.thread();
        t.end(opcode::LOOKUP, None);
        stats.merge(t);
        let r = stats.report();
        assert!(r.contains("FUSE requests over /dev/fuse: 1"), "{r}");
        assert!(r.contains("LOOKUP"), "{r}");
        assert_eq!(name(77), "opcode 77");
    }
}
