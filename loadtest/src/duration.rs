//! Human durations on the command line: `500ms`, `1.5s`, `2m`, `0s`.

use std::time::Duration;

/// Parses `<number><unit>` with unit `ms`, `s`, `m` or `h` (fractions and
/// zero allowed).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("invalid duration {s:?}: expected e.g. 500ms, 1.5s, 2m"))?;
    let secs = match unit {
        "ms" => n / 1e3,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("invalid duration unit in {s:?}: use ms, s, m or h")),
    };
    Duration::try_from_secs_f64(secs).map_err(|e| format!("invalid duration {s:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_fractions() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        for bad in ["", "5", "s", "-1s", "1x", "1.2.3s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
