//! Short renderings of benchmark figures for tables: latencies and bytes per operation
//! ("12.3us", "4.1K"), and the UTC times that name reports. Counts and rates are
//! `plot::short_number`.

/// "850ns", "12.3us", "4.5ms", "1.20s".
pub fn duration(ns: f64) -> String {
    match ns {
        n if n >= 1e9 => format!("{:.2}s", n / 1e9),
        n if n >= 1e6 => format!("{:.1}ms", n / 1e6),
        n if n >= 1e3 => format!("{:.1}us", n / 1e3),
        n => format!("{n:.0}ns"),
    }
}

/// "812B", "4.1K", "1.2M" (binary units).
pub fn bytes(b: f64) -> String {
    match b {
        b if b >= (1 << 20) as f64 => format!("{:.1}M", b / (1 << 20) as f64),
        b if b >= 1024.0 => format!("{:.1}K", b / 1024.0),
        b => format!("{b:.0}B"),
    }
}

/// RFC 3339 UTC rendering of nanoseconds since the Unix epoch (as `augefs inspect`
/// prints times).
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_are_short() {
        assert_eq!(duration(850.0), "850ns");
        assert_eq!(duration(12_300.0), "12.3us");
        assert_eq!(duration(1.2e9), "1.20s");
        assert_eq!(bytes(812.0), "812B");
        assert_eq!(bytes(4096.0), "4.0K");
        assert_eq!(bytes(1.5 * (1 << 20) as f64), "1.5M");
    }

    #[test]
    fn utc_known_dates() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(1_700_000_000 * 1_000_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(utc(951_782_400 * 1_000_000_000), "2000-02-29T00:00:00Z");
    }
}
