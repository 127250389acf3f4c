//! `augefs man DIR`: writes the man pages, generated from the command-line definitions
//! (clap_mangen), so they never disagree with `--help`: augefs(1) and one page per
//! subcommand, augefs-mkfs(1) and so on (as git's pages are named). scripts/install
//! puts them in PREFIX/share/man/man1.

use clap::CommandFactory;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Directory to write the pages into (created if missing).
    pub dir: PathBuf,
}

pub fn run<C: CommandFactory>(args: Args) -> Result<(), String> {
    std::fs::create_dir_all(&args.dir).map_err(|e| format!("{}: {e}", args.dir.display()))?;
    let top = C::command();
    let mut written = vec![page(&args.dir, "augefs", top.clone())?];
    for sub in top.get_subcommands().filter(|s| !s.is_hide_set()) {
        // A command's name is a static string; this process writes a few pages and exits.
        let name: &'static str = Box::leak(format!("augefs-{}", sub.get_name()).into_boxed_str());
        written.push(page(&args.dir, name, sub.clone().name(name))?);
    }
    for p in &written {
        println!("{}", p.display());
    }
    Ok(())
}

fn page(dir: &Path, name: &str, cmd: clap::Command) -> Result<PathBuf, String> {
    let path = dir.join(format!("{name}.1"));
    let mut out = Vec::new();
    clap_mangen::Man::new(cmd)
        .render(&mut out)
        .map_err(|e| format!("{name}: {e}"))?;
    std::fs::write(&path, out).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}
