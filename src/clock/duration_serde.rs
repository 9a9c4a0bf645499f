//! Durations in config files as human strings: `"250ms"`, `"10s"`, `"5m"`, `"1h"`, `"30d"`.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serializer};

/// Writes `d` as [`format()`] does: for
/// `#[serde(with = "crate::clock::duration_serde")]`.
pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format(*d))
}

/// Reads a duration as [`parse`] does: for
/// `#[serde(with = "crate::clock::duration_serde")]`.
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(d)?;
    parse(&text).map_err(serde::de::Error::custom)
}

/// Parses `<number><unit>` with unit `ms`, `s`, `m`, `h` or `d`.
pub fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| format!("{text:?} has no unit; write e.g. \"250ms\", \"10s\", \"5m\" or \"1h\""))?;
    let (number, unit) = text.split_at(split);
    let value: f64 = number.parse().map_err(|_| format!("{text:?} does not start with a number"))?;
    let seconds = match unit {
        "ms" => value / 1000.0,
        "s" => value,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        "d" => value * 86_400.0,
        _ => return Err(format!("{text:?} has unknown unit {unit:?}; use ms, s, m, h or d")),
    };
    Duration::try_from_secs_f64(seconds).map_err(|e| format!("{text:?}: {e}"))
}

/// `d` in whole seconds (`"10s"`), or in ms when it has a fraction of a second
/// or is under one (`"1500ms"`).
pub fn format(d: Duration) -> String {
    if d.subsec_millis() != 0 || d.as_secs() == 0 {
        format!("{}ms", d.as_millis())
    } else {
        format!("{}s", d.as_secs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units() {
        assert_eq!(parse("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse("1.5m").unwrap(), Duration::from_secs(90));
        assert!(parse("10").unwrap_err().contains("no unit"));
        assert_eq!(parse("30d").unwrap(), Duration::from_secs(30 * 86_400));
        assert!(parse("3w").unwrap_err().contains("unknown unit"));
        assert_eq!(parse(&format(Duration::from_millis(1500))).unwrap(), Duration::from_millis(1500));
    }
}
