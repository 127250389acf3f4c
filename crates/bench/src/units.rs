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

pub use platform::units::utc;

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
}
