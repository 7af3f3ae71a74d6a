//! Human durations for flags and TOML: `250ms`, `1.5s`, `10m`, `1h`. The
//! router, the reporter, `inspect`, the simulator and the load test all
//! read them with this one parser, so a value means the same everywhere.

use std::time::Duration;

/// Parses `<number><unit>`, unit `ms`, `s`, `m` or `h`, number with an
/// optional fraction; at least 1 ms (TTLs, leases and periods are kept in
/// whole milliseconds, so anything shorter would become zero).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = parse_duration_or_zero(s)?;
    if d < Duration::from_millis(1) {
        return Err(format!("duration {:?} must be at least 1ms", s.trim()));
    }
    Ok(d)
}

/// [`parse_duration`] that also takes zero (`0s`): for delays that may be
/// absent, such as a load-test event at the start.
pub fn parse_duration_or_zero(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    let invalid = || format!("invalid duration {s:?}: expected e.g. 250ms, 1.5s, 10m, 1h");
    if number.is_empty() || number.starts_with('.') || number.ends_with('.') {
        return Err(invalid());
    }
    let n: f64 = number.parse().map_err(|_| invalid())?;
    let seconds = match unit {
        "ms" => n / 1e3,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("invalid duration unit in {s:?}: use ms, s, m or h")),
    };
    Duration::try_from_secs_f64(seconds).map_err(|e| format!("invalid duration {s:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_fractions() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration(" 10m "), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("1ms"), Ok(Duration::from_millis(1)));
    }

    #[test]
    fn zero_only_where_allowed() {
        assert_eq!(parse_duration_or_zero("0s"), Ok(Duration::ZERO));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("0.5ms").is_err());
    }

    #[test]
    fn malformed_is_an_error() {
        for bad in [
            "", "30", "s", "-1s", ".5s", "5.s", "1.2.3s", "3d", "1e3s", "inf s",
        ] {
            assert!(parse_duration_or_zero(bad).is_err(), "{bad}");
        }
    }
}
