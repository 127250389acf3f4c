//! Options and checks shared by the bench subcommands that measure augefs images
//! (`bench metadb`, `bench engine`), and how they hand their results out.

use device::BackendChoice;
use std::path::PathBuf;

/// The options every such benchmark has (flattened into its arguments).
#[derive(clap::Args, Debug)]
pub struct Common {
    /// Runs (rounds) of each figure.
    #[arg(long, default_value_t = 3)]
    pub runs: u32,
    /// IO backend of the augefs image (named as `augefs mount --backend` names it).
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: BackendChoice,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Also write the JSON document (every run's sample and IO counters) to this file.
    #[arg(long)]
    pub json_file: Option<PathBuf>,
    /// Keep the bench files (images and other stores' files) instead of removing them
    /// at the end; a mount or loop device made for a baseline is always undone.
    #[arg(long)]
    pub keep: bool,
}

impl Common {
    /// [`Common::emit`] of a JSON document.
    pub fn emit_value(&self, json: &serde_json::Value, table: impl FnOnce()) -> Result<(), String> {
        let text = serde_json::to_string_pretty(json).expect("JSON of plain values");
        self.emit(&text, table)
    }

    /// Writes `json` to `--json-file` if given, then prints it (`--json`) or calls
    /// `table`, which prints the text report (neither if a signal interrupted the run).
    pub fn emit(&self, json: &str, table: impl FnOnce()) -> Result<(), String> {
        emit(self.json, self.json_file.as_deref(), json, table)
    }
}

/// Writes `json` to `json_file` if given, then prints it (`print_json`) or calls
/// `table`, which prints the text report (neither if a signal interrupted the run).
pub fn emit(
    print_json: bool,
    json_file: Option<&std::path::Path>,
    json: &str,
    table: impl FnOnce(),
) -> Result<(), String> {
    // Figures an interrupt cut short are not reported.
    crate::interrupt::wait_if_interrupted();
    if let Some(file) = json_file {
        std::fs::write(file, json).map_err(|e| format!("{}: {e}", file.display()))?;
    }
    if print_json {
        println!("{json}");
    } else {
        table();
    }
    Ok(())
}

/// Parses a count with an optional decimal suffix: `20000`, `100K`, `10M`, `1G`.
pub fn parse_count(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let (number, scale) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 1_000),
        Some((i, 'm' | 'M')) => (&t[..i], 1_000_000),
        Some((i, 'g' | 'G')) => (&t[..i], 1_000_000_000),
        _ => (t, 1),
    };
    let value: u64 = number
        .parse()
        .map_err(|_| format!("invalid count {text:?}: expected a number like 20000 or 10M"))?;
    value
        .checked_mul(scale)
        .ok_or_else(|| format!("count {text:?} is too large"))
}

pub fn check_image_size(bytes: u64) -> Result<(), String> {
    if bytes % (1 << 20) != 0 {
        return Err("--image-size must be a multiple of 1 MiB".to_string());
    }
    Ok(())
}

pub fn check_threads(threads: &[usize]) -> Result<(), String> {
    if threads.is_empty() || threads.iter().any(|&t| t == 0 || t > 256) {
        return Err("--threads must list counts in 1..=256".to_string());
    }
    Ok(())
}

pub fn check_seconds(seconds: f64) -> Result<(), String> {
    if !(seconds > 0.0 && seconds <= 3600.0) {
        return Err("--seconds must be in (0, 3600]".to_string());
    }
    Ok(())
}

/// Parses `argv` (without a program name) into a subcommand's arguments: how `bench
/// report` builds the arguments of the runs it makes (so each can be repeated by hand
/// with the same words), and how unit tests check a subcommand's checks.
pub fn parse_args<A: clap::Args + clap::FromArgMatches, S: AsRef<str>>(
    argv: &[S],
) -> Result<A, String> {
    let command = A::augment_args(clap::Command::new("augefs"));
    let all = std::iter::once("augefs").chain(argv.iter().map(AsRef::as_ref));
    let matches = command
        .try_get_matches_from(all)
        .map_err(|e| e.to_string())?;
    A::from_arg_matches(&matches).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_name_the_option() {
        assert!(check_image_size(64 << 20).is_ok());
        assert!(check_image_size((64 << 20) + 4096)
            .unwrap_err()
            .contains("--image-size"));
        assert!(check_threads(&[1, 256]).is_ok());
        assert!(check_threads(&[]).is_err());
        assert!(check_threads(&[0]).unwrap_err().contains("--threads"));
        assert!(check_seconds(0.2).is_ok());
        assert!(check_seconds(0.0).is_err());
        assert!(check_seconds(f64::NAN).unwrap_err().contains("--seconds"));
    }
}
