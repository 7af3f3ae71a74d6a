//! Human durations for flags and TOML: `250ms`, `30s`, `10m`, `1h`.

use std::time::Duration;

/// Parses `<integer><unit>` with unit `ms`, `s`, `m` or `h`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("invalid duration {s:?}: expected e.g. 250ms, 30s, 10m, 1h"))?;
    let d = match unit {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n * 60),
        "h" => Duration::from_secs(n * 3600),
        _ => return Err(format!("invalid duration unit in {s:?}: use ms, s, m or h")),
    };
    if d.is_zero() {
        return Err(format!("duration {s:?} must be positive"));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        for bad in ["", "30", "s", "-1s", "1.5s", "0s", "3d"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
