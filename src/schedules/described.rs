//! How a schedule reads to people, as the CLI and the console print it:
//! its cadence in words, its health's name, and spans in their largest
//! whole unit.

use std::time::Duration;

use crate::clock::duration_serde;
use crate::proto::v1 as pb;

/// A span, or "-" when unset.
pub fn length(d: Option<&prost_types::Duration>) -> String {
    d.map_or("-".into(), |d| human(Duration::new(d.seconds.max(0) as u64, d.nanos.max(0) as u32)))
}

/// `d` in its largest whole unit: "24h", "90m", "45s", "1.5s".
pub fn human(d: Duration) -> String {
    let s = d.as_secs();
    if d.subsec_nanos() != 0 || s == 0 {
        return duration_serde::format(d);
    }
    match () {
        _ if s.is_multiple_of(86_400) => format!("{}d", s / 86_400),
        _ if s.is_multiple_of(3_600) => format!("{}h", s / 3_600),
        _ if s.is_multiple_of(60) => format!("{}m", s / 60),
        _ => format!("{s}s"),
    }
}

/// The name of a `Health`, as the API spells it.
pub fn health_name(health: i32) -> &'static str {
    match pb::Health::try_from(health) {
        Ok(pb::Health::Ok) => "OK",
        Ok(pb::Health::Warning) => "WARNING",
        Ok(pb::Health::Error) => "ERROR",
        _ => "?",
    }
}

/// The cadence of `spec` in words.
pub fn cadence(spec: Option<&pb::ScheduleSpec>) -> String {
    use pb::schedule_spec::Cadence;
    let Some(spec) = spec else { return "-".into() };
    match &spec.cadence {
        Some(Cadence::Periodic(p)) => {
            format!(
                "every {} at most stale, cooldown {}",
                length(p.scheduling_period.as_ref()),
                length(p.cooldown.as_ref())
            )
        }
        Some(Cadence::Cron(c)) => format!(
            "cron {:?} ({}), done within {}",
            c.expression,
            spec.time_zone,
            length(c.max_schedule_duration.as_ref())
        ),
        Some(Cadence::Interval(i)) => format!(
            "every {} (phase {}, jitter {}), done within {}",
            length(i.every.as_ref()),
            length(i.phase.as_ref()),
            length(i.jitter.as_ref()),
            length(i.max_schedule_duration.as_ref())
        ),
        None => "-".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_read_in_their_largest_unit() {
        assert_eq!(human(Duration::from_secs(86_400)), "1d");
        assert_eq!(human(Duration::from_secs(5_400)), "90m");
        assert_eq!(human(Duration::from_secs(43_200)), "12h");
        assert_eq!(human(Duration::from_secs(61)), "61s");
    }
}
