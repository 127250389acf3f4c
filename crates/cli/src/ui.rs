//! Terminal output helpers: progress bars and times.

use indicatif::{ProgressBar, ProgressStyle};

/// An indicatif bar behind the engine's Progress trait. Hidden when stderr is not a
/// terminal (indicatif's default), so scripts and tests see clean output.
pub struct Bar {
    bar: ProgressBar,
}

impl Bar {
    pub fn new() -> Bar {
        let bar = ProgressBar::new(0);
        bar.set_style(
            ProgressStyle::with_template("{msg:32} [{bar:30}] {bytes}/{total_bytes}")
                .expect("valid template")
                .progress_chars("=> "),
        );
        Bar { bar }
    }
}

impl engine::progress::Progress for Bar {
    fn step(&self, name: &str, total: u64) {
        self.bar.set_message(name.to_string());
        self.bar.set_length(total);
        self.bar.set_position(0);
    }

    fn advance(&self, delta: u64) {
        self.bar.inc(delta);
    }

    fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// RFC 3339 UTC rendering of nanoseconds since the Unix epoch.
pub fn utc(unix_ns: u64) -> String {
    let secs = unix_ns / 1_000_000_000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// How long a command waits for a process that still holds an image but no longer
/// serves it (a mount daemon making its unmount durable; device::holder).
pub const HOLDER_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// The one line a command prints when it starts waiting for such a holder.
pub fn say_waiting(image: &std::path::Path) -> impl FnMut(&device::holder::Holder) + '_ {
    move |h| {
        eprintln!(
            "augefs: {} is {}, which no longer serves it (an unmount finishing); waiting up to {} s for it to let go",
            image.display(),
            h,
            HOLDER_WAIT.as_secs()
        )
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn utc_known_dates() {
        assert_eq!(super::utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(
            super::utc(1_700_000_000 * 1_000_000_000),
            "2023-11-14T22:13:20Z"
        );
        assert_eq!(
            super::utc(951_782_400 * 1_000_000_000),
            "2000-02-29T00:00:00Z"
        );
    }
}
