//! Times as people read them: a date in the local zone with how far it is
//! from now ("2026-12-01 22:30:05 +01:00 (in 42 s)"), spans in their two
//! largest units. Every client command and the console print times
//! through these.

/// Now, in ms since the Unix epoch.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// A protobuf timestamp in ms since the Unix epoch.
pub fn ms(t: &prost_types::Timestamp) -> i64 {
    t.seconds.saturating_mul(1000).saturating_add(i64::from(t.nanos / 1_000_000))
}

/// "3 h 5 min", "42 s": the largest two units of `ms`.
pub fn span(ms: i64) -> String {
    let s = ms.unsigned_abs() / 1000;
    let (d, h, m) = (s / 86_400, s / 3600 % 24, s / 60 % 60);
    match () {
        _ if d > 0 => format!("{d} d {h} h"),
        _ if h > 0 => format!("{h} h {m} min"),
        _ if m > 0 => format!("{m} min {} s", s % 60),
        _ => format!("{s} s"),
    }
}

/// "in 3 h 5 min" or "5 min ago", from `now`.
pub fn relative(at: i64, now: i64) -> String {
    if at >= now { format!("in {}", span(at - now)) } else { format!("{} ago", span(now - at)) }
}

/// A local date and how far it is: "2026-11-27 15:04:05 +01:00 (in 3 h 5 min)"; "-" when unset.
pub fn when(t: Option<&prost_types::Timestamp>, now: i64) -> String {
    when_ms(t.map(ms), now)
}

/// As [`when`], from ms since the Unix epoch.
pub fn when_ms(at: Option<i64>, now: i64) -> String {
    let Some(at) = at else { return "-".into() };
    let Some(date) = chrono::DateTime::from_timestamp_millis(at) else { return format!("{at} ms since 1970") };
    let local = date.with_timezone(&chrono::Local);
    format!("{} ({})", local.format("%Y-%m-%d %H:%M:%S %:z"), relative(at, now))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_a_person_says_them() {
        assert_eq!(relative(10_000 + 3 * 3_600_000 + 5 * 60_000, 10_000), "in 3 h 5 min");
        assert_eq!(relative(0, 5 * 60_000 + 2_000), "5 min 2 s ago");
        assert_eq!(relative(0, 3 * 86_400_000), "3 d 0 h ago");
        assert_eq!(span(999), "0 s");
        let t = prost_types::Timestamp { seconds: 1_764_000_000, nanos: 0 };
        let shown = when(Some(&t), 1_764_000_000_000 - 60_000);
        assert!(shown.ends_with("(in 1 min 0 s)") && shown.starts_with("2025-11-"), "{shown}");
        assert_eq!(when(None, 0), "-");
        assert_eq!(when_ms(Some(i64::MAX), 0), format!("{} ms since 1970", i64::MAX));
    }
}
